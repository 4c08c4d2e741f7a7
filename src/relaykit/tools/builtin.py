"""``exit_loop``: the built-in tool an LLM agent calls to end the ``LoopAgent`` it runs in."""

from __future__ import annotations

from relaykit.events import AgentAction, BreakLoopAction
from relaykit.models.base import ToolSpec
from relaykit.tools.base import ToolContext, register_builtin_tool

__all__ = ["EXIT_LOOP_TOOL_NAME", "ExitLoopTool", "exit_loop"]

#: The built-in tool's name (reserved: see ``RESERVED_TOOL_NAMES``).
EXIT_LOOP_TOOL_NAME = "exit_loop"

_EXIT_LOOP_SPEC = ToolSpec(
    EXIT_LOOP_TOOL_NAME,
    # Google ADK's wording: a model offered the tool in every iteration must not call it on a
    # whim, only when its instruction says when the loop is done.
    "Exit the loop. Call this function only when you are instructed to do so.",
    {"type": "object", "properties": {}},
)


class ExitLoopTool:
    """Ends the enclosing ``LoopAgent`` (like Google ADK's ``exit_loop``).

    The call's event carries ``AgentAction(break_loop=BreakLoopAction(from_agent=<agent>))``
    and its result is ``exiting the loop``. Like ``exit``, it returns directly: the calling
    agent stops, and the loop ends once that agent has ended (the loop's parent then goes on).
    Outside a loop the action does nothing. The text is a notice, not an answer: it is not saved
    under the agent's ``output_key``. Use the one instance, :data:`exit_loop`.

    >>> import asyncio
    >>> import relaykit as rk
    >>> done = rk.Message.assistant("", [rk.ToolCall("c1", "exit_loop", "{}")])
    >>> critic = rk.ChatModelAgent("critic", "reviews the draft", tools=[rk.exit_loop],
    ...                            model=rk.ScriptedModel([done]))
    >>> loop = rk.LoopAgent("refine", [critic], max_iterations=5)
    >>> result = asyncio.run(rk.Runner(loop).invoke("review"))
    >>> result.output.content, result.events[-1].action.break_loop.done
    ('exiting the loop', True)
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        """``exit_loop``."""
        return EXIT_LOOP_TOOL_NAME

    @property
    def spec(self) -> ToolSpec:
        """No parameters; any arguments the model sends are ignored."""
        return _EXIT_LOOP_SPEC

    async def call(self, ctx: ToolContext, arguments: dict[str, object]) -> str:
        """Set the break-loop action naming the calling agent."""
        path = ctx.run_context.run_path
        ctx.set_action(
            AgentAction(break_loop=BreakLoopAction(from_agent=path[-1].agent_name if path else ""))
        )
        return "exiting the loop"

    def __repr__(self) -> str:
        return "relaykit.exit_loop"


exit_loop = register_builtin_tool(ExitLoopTool())
"""The built-in ``exit_loop`` tool; give it to a loop's child: ``tools=[rk.exit_loop]``."""
