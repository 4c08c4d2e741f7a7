"""The Tool protocol and the context a tool call receives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from relaykit.models.base import ToolSpec

if TYPE_CHECKING:
    from relaykit.context import RunContext
    from relaykit.events import AgentAction
    from relaykit.messages import Message

__all__ = [
    "RESERVED_TOOL_NAMES",
    "Tool",
    "ToolContext",
    "is_builtin_tool",
    "register_builtin_tool",
]

RESERVED_TOOL_NAMES = frozenset({"transfer_to_agent", "exit", "exit_loop"})
"""Names of relaykit's built-in tools. A user tool may not take one (D24): the agent would
otherwise replace it by the built-in without a word. Only tools registered with
:func:`register_builtin_tool` may carry these names."""

# The built-in tool objects a user may list in ``tools`` although their names are reserved
# (``exit_loop`` for a loop agent's children, for one). Keyed by ``id`` and compared by
# identity: a look-alike with the same name and spec is still a user tool.
_BUILTIN_TOOLS: dict[int, object] = {}

_T = TypeVar("_T")


class ToolContext:
    """What a tool call can see and do.

    ``set_action`` attaches an action (transfer, exit, custom) to this call's tool event. On a
    resume, ``was_interrupted`` / ``interrupt_state`` / ``is_resume_target`` / ``resume_data``
    tell a tool that interrupted earlier what happened since. A function tool receives it when
    its first parameter is annotated ``ToolContext``.

    >>> import relaykit as rk
    >>> @rk.tool
    ... def whoami(ctx: rk.ToolContext) -> str:
    ...     return f"{ctx.tool_name} ({ctx.tool_call_id})"
    >>> whoami(ToolContext(rk.RunContext.new(), "whoami", "call_1"))
    'whoami (call_1)'

    Args:
        run_context: the calling agent's context (``run_context.address`` ends with this
            call's segment).
        tool_name: the name the model called the tool by.
        tool_call_id: the id of the tool call.
        was_interrupted: on a resume: this call interrupted before.
        interrupt_state: on a resume: the ``state`` the call's ``ToolInterrupt`` saved
            (application-defined, hence ``Any``).
        is_resume_target: on a resume: the caller answered this call's interrupt.
        resume_data: on a resume: the caller's answer (application-defined, hence ``Any``).
    """

    __slots__ = (
        "action",
        "chat_history",
        "interrupt_state",
        "is_resume_target",
        "resume_data",
        "run_context",
        "tool_call_id",
        "tool_name",
        "was_interrupted",
    )

    def __init__(
        self,
        run_context: RunContext,
        tool_name: str,
        tool_call_id: str,
        *,
        was_interrupted: bool = False,
        interrupt_state: Any = None,
        is_resume_target: bool = False,
        resume_data: Any = None,
    ) -> None:
        #: The calling agent's context: session values (``get_session_value``...), run path.
        self.run_context = run_context
        #: The name the model called the tool by.
        self.tool_name = tool_name
        #: The id of this tool call.
        self.tool_call_id = tool_call_id
        #: On a resume: this call interrupted before.
        self.was_interrupted = was_interrupted
        #: On a resume: what the call's ``ToolInterrupt`` saved.
        self.interrupt_state = interrupt_state
        #: On a resume: the caller answered this call's interrupt.
        self.is_resume_target = is_resume_target
        #: On a resume: the caller's answer.
        self.resume_data = resume_data
        #: The action ``set_action`` attached, if any.
        self.action: AgentAction | None = None
        #: The calling agent's conversation before this call (AgentTool's full-history input).
        self.chat_history: list[Message] = []

    def set_action(self, action: AgentAction) -> None:
        """Attach ``action`` to this call's tool-result event (like Eino's SendToolGenAction).

        >>> import relaykit as rk
        >>> ctx = ToolContext(rk.RunContext.new(), "escalate", "call_1")
        >>> ctx.set_action(rk.AgentAction(exit=True)); ctx.action.exit
        True
        """
        self.action = action


@runtime_checkable
class Tool(Protocol):
    """A tool: a name, a spec the model sees and an async ``call``.

    ``name`` is ``spec.name``: the name the model calls the tool by. Agents read ``spec.name``
    when they run, so a custom tool written before ``name`` existed still runs; type checkers
    and ``isinstance(obj, Tool)`` want the ``name`` too.

    ``call`` receives the parsed JSON arguments (an object nested at most 64 levels deep). Its
    return value becomes the tool message content: a ``str`` as is, anything else as JSON
    (through pydantic's ``to_jsonable_python``: dataclasses, models, datetimes, UUIDs, decimals,
    sets, bytes as base64). A value that cannot be JSON (an unknown type, a float NaN or
    infinity) fails the tool: the agent ends with an error event. Raise ``relaykit.ToolError``
    to send ``error: <message>`` back to the model instead.

    The names in :data:`RESERVED_TOOL_NAMES` belong to the built-in tools.

    >>> import relaykit as rk
    >>> class Clock:
    ...     name = "clock"
    ...     spec = rk.ToolSpec("clock", "The current time.")
    ...     async def call(self, ctx: rk.ToolContext, arguments: dict[str, object]) -> object:
    ...         return "12:00"
    >>> isinstance(Clock(), Tool)
    True
    """

    @property
    def name(self) -> str:
        """The name the model calls the tool by (``spec.name``)."""
        ...

    @property
    def spec(self) -> ToolSpec:
        """The tool as the model sees it: name, description, JSON schema of the arguments."""
        ...

    async def call(self, ctx: ToolContext, arguments: dict[str, object]) -> object:
        """Run the tool.

        Args:
            ctx: what the call can see and do.
            arguments: the model's arguments, parsed from JSON (an object).

        Returns:
            The result: a ``str`` as is, anything else JSON-encoded (see the class docstring).
        """
        ...


def register_builtin_tool(tool: _T) -> _T:
    """Mark ``tool`` (this very object) as a relaykit built-in: agents accept it in ``tools``
    although its name is in :data:`RESERVED_TOOL_NAMES`. For relaykit's own built-ins only.

    >>> from relaykit.tools.builtin import ExitLoopTool, exit_loop
    >>> is_builtin_tool(exit_loop), is_builtin_tool(ExitLoopTool())
    (True, False)
    """
    _BUILTIN_TOOLS[id(tool)] = tool
    return tool


def is_builtin_tool(tool: object) -> bool:
    """True for a tool object registered with :func:`register_builtin_tool`.

    >>> is_builtin_tool(object())
    False
    """
    return _BUILTIN_TOOLS.get(id(tool)) is tool
