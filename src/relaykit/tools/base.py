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
_BUILTIN_TOOLS: dict[int, Any] = {}

_T = TypeVar("_T")


class ToolContext:
    """What a tool call can see and do.

    ``set_action`` attaches an action (transfer, exit, custom) to this call's tool event. On a
    resume, ``was_interrupted`` / ``interrupt_state`` / ``is_resume_target`` / ``resume_data``
    tell a tool that interrupted earlier what happened since.
    """

    __slots__ = ("action", "chat_history", "interrupt_state", "is_resume_target", "resume_data",
                 "run_context", "tool_call_id", "tool_name", "was_interrupted")

    def __init__(self, run_context: RunContext, tool_name: str, tool_call_id: str, *,
                 was_interrupted: bool = False, interrupt_state: Any = None,
                 is_resume_target: bool = False, resume_data: Any = None) -> None:
        self.run_context = run_context
        self.tool_name = tool_name
        self.tool_call_id = tool_call_id
        self.was_interrupted = was_interrupted
        self.interrupt_state = interrupt_state
        self.is_resume_target = is_resume_target
        self.resume_data = resume_data
        self.action: AgentAction | None = None
        # The calling agent's conversation before this call (AgentTool's full-history input).
        self.chat_history: list[Message] = []

    def set_action(self, action: AgentAction) -> None:
        """Attach ``action`` to this call's tool-result event (like Eino's SendToolGenAction)."""
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
    """

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> ToolSpec: ...

    async def call(self, ctx: ToolContext, arguments: dict[str, Any]) -> Any: ...


def register_builtin_tool(tool: _T) -> _T:
    """Mark ``tool`` (this very object) as a relaykit built-in: agents accept it in ``tools``
    although its name is in :data:`RESERVED_TOOL_NAMES`. For relaykit's own built-ins only.

    >>> exit_loop = register_builtin_tool(ExitLoopTool())  # doctest: +SKIP
    """
    _BUILTIN_TOOLS[id(tool)] = tool
    return tool


def is_builtin_tool(tool: object) -> bool:
    """True for a tool object registered with :func:`register_builtin_tool`.

    >>> is_builtin_tool(object())
    False
    """
    return _BUILTIN_TOOLS.get(id(tool)) is tool
