"""The Tool protocol and the context a tool call receives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from relaykit.models.base import ToolSpec

if TYPE_CHECKING:
    from relaykit.context import RunContext
    from relaykit.events import AgentAction
    from relaykit.messages import Message

__all__ = ["Tool", "ToolContext"]


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
    """A tool: a spec the model sees and an async ``call``.

    ``call`` receives the parsed JSON arguments. Its return value becomes the tool message
    content: a ``str`` as is, anything else as JSON. Raise ``relaykit.ToolError`` to send
    ``error: <message>`` back to the model.
    """

    @property
    def spec(self) -> ToolSpec: ...

    async def call(self, ctx: ToolContext, arguments: dict[str, Any]) -> Any: ...
