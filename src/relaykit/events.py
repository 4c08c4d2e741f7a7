"""Events, outputs and actions: what an agent's run yields."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from relaykit.codec import register_type
from relaykit.messages import Message, MessageStream, ToolCall
from relaykit.resume import InterruptInfo

__all__ = [
    "TRANSFER_TOOL_NAME",
    "AgentAction",
    "AgentEvent",
    "AgentInput",
    "AgentOutput",
    "BreakLoopAction",
    "RunPath",
    "RunStep",
    "TransferToAgentAction",
    "transfer_messages",
]

_new_object = object.__new__

#: The name of the tool an LLM agent calls to hand control to another agent.
TRANSFER_TOOL_NAME = "transfer_to_agent"


@register_type("relaykit.AgentInput")
@dataclass
class AgentInput:
    """The messages an agent is asked to respond to, and whether to stream.

    The framework builds a fresh ``messages`` list for every agent run: the receiving agent
    owns it and may modify it. A flow agent builds that list when ``messages`` is first read,
    so an agent that decides from session values alone never pays for its history.

    >>> AgentInput([Message.user("hello")]).messages[0].content
    'hello'
    """

    #: The conversation to respond to: the run's input, then the run history as this agent
    #: reads it (other agents' messages rewritten as context, see docs/trees-and-transfer.md).
    messages: list[Message] = field(default_factory=list)
    #: Whether the agent should yield its model replies as ``MessageStream`` outputs.
    enable_streaming: bool = False

    @classmethod
    def deferred(
        cls, build: Callable[[], list[Message]], enable_streaming: bool = False
    ) -> AgentInput:
        """An input whose messages ``build()`` makes on first access.

        >>> lazy = AgentInput.deferred(lambda: [Message.user("built")])
        >>> lazy.messages[0].content
        'built'
        """
        new = cls.__new__(cls)
        new.__dict__["_build"] = build
        new.enable_streaming = enable_streaming
        return new


def _get_messages(self: AgentInput) -> list[Message]:
    d = self.__dict__
    messages: list[Message] | None = d.get("_messages")
    if messages is None:
        build = d.pop("_build", None)
        messages = d["_messages"] = build() if build is not None else []
    return messages


def _set_messages(self: AgentInput, value: list[Message]) -> None:
    self.__dict__["_messages"] = value
    self.__dict__.pop("_build", None)


# ``messages`` is a dataclass field (init, repr, eq, replace, the codec) read through a property.
setattr(AgentInput, "messages", property(_get_messages, _set_messages))  # noqa: B010


@register_type("relaykit.RunStep")
@dataclass(frozen=True, slots=True)
class RunStep:
    """One agent on a run path. Equal by name.

    >>> str(RunStep("triage")), RunStep("triage") == RunStep("triage")
    ('triage', True)
    """

    #: The agent's name.
    agent_name: str

    def __str__(self) -> str:
        return self.agent_name


RunPath = tuple[RunStep, ...]
"""The agents from the root of the tree to the one that produced an event (D6)."""


@register_type("relaykit.TransferToAgentAction")
@dataclass(slots=True)
class TransferToAgentAction:
    """Hand control to the agent named ``dest_agent_name`` (a child or the parent).

    >>> AgentEvent.transfer("billing").action.transfer_to_agent
    TransferToAgentAction(dest_agent_name='billing')
    """

    #: The name of the agent to transfer to.
    dest_agent_name: str


@register_type("relaykit.BreakLoopAction")
@dataclass(slots=True)
class BreakLoopAction:
    """End the enclosing ``LoopAgent``. ``done`` is set once a loop has handled it.

    >>> AgentAction(break_loop=BreakLoopAction(from_agent="critic")).break_loop.done
    False
    """

    #: The agent that asked to break the loop.
    from_agent: str = ""
    #: Set by the loop that ended because of this action (outer loops then ignore it).
    done: bool = False
    #: The iteration (0-based) the loop was in when it ended; set with ``done``.
    current_iterations: int = 0


@register_type("relaykit.AgentAction")
@dataclass(slots=True)
class AgentAction:
    """What an event asks the framework to do. Precedence: interrupted, exit, transfer.

    >>> AgentEvent.exit().action
    AgentAction(exit=True, interrupted=None, transfer_to_agent=None, break_loop=None, custom=None)
    """

    #: End the run of the enclosing flow: no transfer follows, workflows stop.
    exit: bool = False
    #: The agent paused (made by ``interrupt`` and friends); the Runner saves a checkpoint.
    interrupted: InterruptInfo | None = None
    #: Hand control to another agent of the tree.
    transfer_to_agent: TransferToAgentAction | None = None
    #: End the enclosing ``LoopAgent``.
    break_loop: BreakLoopAction | None = None
    #: An application-defined action, passed through untouched (hence ``Any``); saved with
    #: checkpoints when its type is registered with the codec.
    custom: Any = None


@register_type("relaykit.AgentOutput")
@dataclass(slots=True)
class AgentOutput:
    """An event's output: a whole message, a message stream, or a custom value.

    >>> AgentOutput(Message.assistant("hi")).is_streaming
    False
    """

    #: The whole message (when the output is not streamed).
    message: Message | None = None
    #: The message as a stream of chunks (when streamed); ``get_message`` reads it whole.
    stream: MessageStream | None = None
    #: The role of the message: ``assistant``, or ``tool`` for a tool result.
    role: str = "assistant"
    #: For a tool result: the tool's name.
    tool_name: str | None = None
    #: An application-defined output, passed through untouched (hence ``Any``).
    custom: Any = None

    @property
    def is_streaming(self) -> bool:
        """True when the output is a ``MessageStream``."""
        return self.stream is not None

    async def get_message(self) -> Message | None:
        """The message, concatenating the stream if needed (other readers keep their chunks).

        >>> import asyncio
        >>> asyncio.run(AgentOutput(Message.assistant("hi")).get_message()).content
        'hi'
        """
        if self.stream is not None:
            return await self.stream.collect()
        return self.message


@register_type("relaykit.AgentEvent", exclude=("internal", "stored_id"))
@dataclass(slots=True)
class AgentEvent:
    """One item of an agent's event stream.

    ``agent_name`` and ``run_path`` are set by the framework (the flow agent stamps a copy of
    each event an agent yields): an agent leaves them empty.

    ``internal`` marks an event of an agent run as a tool, forwarded to the caller by
    ``AgentTool(agent, emit_internal_events=True)`` (D28): delivered and seen by ``on_event``,
    never stored, recorded in a history or checkpointed, and never acted on.

    >>> AgentEvent.from_message(Message.assistant("hi")).output.message.content
    'hi'
    """

    #: The agent that produced the event (set by the framework).
    agent_name: str = ""
    #: The agents from the root to that agent (set by the framework, D6).
    run_path: RunPath = ()
    #: The message, stream or custom value the event carries, if any.
    output: AgentOutput | None = None
    #: What the event asks the framework to do (transfer, exit, interrupt...), if anything.
    action: AgentAction | None = None
    #: The failure this event reports: the agent, a tool or the framework failed (D9).
    error: BaseException | None = None
    #: Session values written by the agent since its previous event (session mode, D12);
    #: the values are the application's own, hence ``Any``.
    state_delta: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    #: True for an agent tool's inner event forwarded to the caller (``emit_internal_events``):
    #: only delivered, never stored nor used for history, routing or pauses (D28).
    internal: bool = field(default=False, repr=False)
    #: Session mode: the id of the stored ``SessionEvent`` this event became (set by the
    #: Runner when it stored the event, before delivering it); None when it was not stored.
    stored_id: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_message(
        cls, message: Message | MessageStream, role: str | None = None, tool_name: str | None = None
    ) -> AgentEvent:
        """An event carrying ``message``; a ``MessageStream`` gives a streaming output.

        Args:
            message: the message, or a stream of its chunks.
            role: the output's role; by default the message's own (``assistant`` for a
                stream).
            tool_name: for a tool result, the tool's name; by default the message's own.

        >>> AgentEvent.from_message(Message.assistant("hi")).message.role
        'assistant'
        """
        if isinstance(message, MessageStream):
            out = AgentOutput(None, message, role or "assistant", tool_name)
        else:
            out = AgentOutput(
                message,
                None,
                role or message.role,
                tool_name if tool_name is not None else message.tool_name,
            )
        return cls("", (), out)

    @classmethod
    def exit(cls) -> AgentEvent:
        """An action-only event that ends the run of the enclosing flow.

        >>> AgentEvent.exit().action.exit
        True
        """
        return cls(action=AgentAction(exit=True))

    @classmethod
    def transfer(cls, dest_agent_name: str) -> AgentEvent:
        """An action-only event that transfers to ``dest_agent_name``.

        >>> AgentEvent.transfer("billing").action.transfer_to_agent.dest_agent_name
        'billing'
        """
        return cls(action=AgentAction(transfer_to_agent=TransferToAgentAction(dest_agent_name)))

    def stamped(self, agent_name: str, run_path: RunPath) -> AgentEvent:
        """A copy with ``agent_name`` and ``run_path`` set (the original is not changed; the
        copy is not ``internal`` and has no ``stored_id``).

        >>> AgentEvent.exit().stamped("triage", (RunStep("triage"),)).agent_name
        'triage'
        """
        # Flow agents stamp every event: the fields are set here rather than through
        # ``AgentEvent(...)``, whose call of the generated ``__init__`` costs more than the
        # copy itself. The fast paths of ``FlowAgent._drive`` and ``Runner._drive`` stamp a
        # plain message inline, setting the same fields: change them together.
        new = _new_object(AgentEvent)
        new.agent_name = agent_name
        new.run_path = run_path
        new.output = self.output
        new.action = self.action
        new.error = self.error
        new.state_delta = self.state_delta
        new.internal = False
        new.stored_id = None
        return new

    @property
    def message(self) -> Message | None:
        """The non-streaming message of this event, if any."""
        return self.output.message if self.output is not None else None


def transfer_messages(dest_agent_name: str) -> tuple[Message, Message]:
    """The assistant message calling ``transfer_to_agent`` and the tool message answering it.

    The call's arguments are JSON (D2): ``{"agent_name": "<dest>"}``.

    >>> call, result = transfer_messages("B")
    >>> result.content
    'successfully transferred to agent [B]'
    """
    call_id = f"call_{uuid.uuid4().hex}"
    args = json.dumps({"agent_name": dest_agent_name})
    call = Message("assistant", "", [ToolCall(call_id, TRANSFER_TOOL_NAME, args)])
    result = Message(
        "tool",
        f"successfully transferred to agent [{dest_agent_name}]",
        [],
        call_id,
        TRANSFER_TOOL_NAME,
    )
    return call, result
