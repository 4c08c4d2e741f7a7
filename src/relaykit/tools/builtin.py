"""Built-in tools: ``exit_loop``, which an LLM agent calls to end the ``LoopAgent`` it runs in,
and ``load_memory``, which searches the user's memory of past sessions."""

from __future__ import annotations

from typing import Any

from relaykit.errors import ToolError
from relaykit.events import AgentAction, BreakLoopAction
from relaykit.models.base import ToolSpec
from relaykit.tools.base import ToolContext, register_builtin_tool

__all__ = [
    "EXIT_LOOP_TOOL_NAME",
    "LOAD_MEMORY_TOOL_NAME",
    "ExitLoopTool",
    "LoadMemoryTool",
    "exit_loop",
    "load_memory",
]

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


#: The name of the built-in ``load_memory`` tool.
LOAD_MEMORY_TOOL_NAME = "load_memory"

_LOAD_MEMORY_SPEC = ToolSpec(
    LOAD_MEMORY_TOOL_NAME,
    "Loads what the user said or was told in earlier conversations that matches a query. "
    "Call it when the answer may depend on something from a past conversation.",
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "the words to look for in the memory"}
        },
        "required": ["query"],
    },
)


class LoadMemoryTool:
    """Searches the user's memory (``ToolContext.search_memory``: the Runner's memory service,
    in session mode) and returns the matching entries, best first, as
    ``{"memories": [{"author", "text", "timestamp", "session_id"}, ...]}`` (like Google ADK's
    ``load_memory``). Without a memory service the call fails with a ``ConfigurationError``
    saying what to configure. Use the one instance, :data:`load_memory`.

    >>> import asyncio
    >>> import relaykit as rk
    >>> from types import SimpleNamespace as Record
    >>> from relaykit.memory import InMemoryMemoryService
    >>> from relaykit._invocation import Invocation
    >>> from relaykit.plugins import InvocationContext, PluginManager
    >>> memory = InMemoryMemoryService()
    >>> asyncio.run(memory.add_session(Record(app_name="shop", user_id="ada", id="s-0", events=[
    ...     Record(author="user", message=rk.Message.user("My size is 38"), timestamp=1.0)])))
    >>> run = rk.RunContext.new()
    >>> run.options.invocation = Invocation(
    ...     InvocationContext("shop", "ada", "s-1", "inv-1"), PluginManager([]),
    ...     memory_service=memory)
    >>> ctx = rk.ToolContext(run, "load_memory", "call_1")
    >>> asyncio.run(load_memory.call(ctx, {"query": "shoe size"}))["memories"]
    [{'author': 'user', 'text': 'My size is 38', 'timestamp': 1.0, 'session_id': 's-0'}]
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        """``load_memory``."""
        return LOAD_MEMORY_TOOL_NAME

    @property
    def spec(self) -> ToolSpec:
        """One parameter, ``query`` (a string)."""
        return _LOAD_MEMORY_SPEC

    async def call(self, ctx: ToolContext, arguments: dict[str, object]) -> dict[str, Any]:
        """Search the memory for ``arguments["query"]``.

        Raises:
            ToolError: ``query`` is missing or not a string (back to the model, D15).
            ConfigurationError: no memory service, or not in session mode.
        """
        query = arguments.get("query")
        if not isinstance(query, str):
            raise ToolError("load_memory needs a string argument 'query'")
        entries = await ctx.search_memory(query)
        return {
            "memories": [
                {
                    "author": e.author,
                    "text": e.message.content,
                    "timestamp": e.timestamp,
                    "session_id": e.session_id,
                }
                for e in entries
            ]
        }

    def __repr__(self) -> str:
        return "relaykit.load_memory"


load_memory = LoadMemoryTool()
"""The built-in ``load_memory`` tool: ``tools=[rk.load_memory]`` (needs a memory service)."""
