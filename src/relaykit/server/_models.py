"""The HTTP API's bodies (Pydantic v2 models) and the conversions from relaykit's types.

Requests forbid unknown fields, so a typo is a 422 instead of a silently ignored option.
Every value the application owns (state, interrupt info, custom actions) goes out through
``jsonable``: JSON as it is, anything else as FastAPI's encoder makes it, else its ``str``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel, ConfigDict, Field, model_validator

from relaykit._tree import unwrap_layers
from relaykit.cancel import Cancelled, CancelOutcome
from relaykit.events import AgentAction, AgentEvent
from relaykit.messages import Message
from relaykit.resume import InterruptInfo
from relaykit.sessions.base import Session, SessionEvent

__all__ = [
    "ActionOut",
    "AgentOut",
    "CancelIn",
    "CancelOut",
    "CancelledOut",
    "ChunkOut",
    "CreateSessionIn",
    "DiscardOut",
    "ErrorDetail",
    "ErrorOut",
    "ErrorType",
    "EventOut",
    "HealthOut",
    "InterruptOut",
    "InterruptPointOut",
    "MessageIn",
    "MessageOut",
    "ResumeIn",
    "RunResultOut",
    "SessionDetailOut",
    "SessionOut",
    "ToolCallOut",
    "TurnIn",
    "TurnResultOut",
    "agent_tree",
    "jsonable",
]


def jsonable(value: Any) -> Any:
    """``value`` as JSON-compatible data (application values are ``Any``).

    >>> jsonable({"n": 1, "when": {2, 1}})
    {'n': 1, 'when': [1, 2]}
    """
    if isinstance(value, set | frozenset):
        try:
            value = sorted(value)
        except TypeError:
            value = list(value)
    try:
        return jsonable_encoder(value)
    except Exception:
        return str(value)


def _as_text(value: Any) -> str:
    """An interrupt's info as a string: a ``str`` as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(jsonable(value), ensure_ascii=False)


# -- requests ------------------------------------------------------------------------------
#: What a state key a client sends looks like (checked by the server, which says what is
#: wrong in words): 1 to 255 characters without NUL after an optional ``user:`` or ``temp:``
#: prefix; ``app:`` keys are the server's own.
#: The longest ``timeout`` a cancel request may give (seconds).
MAX_CANCEL_TIMEOUT = 3600.0
STATE_KEY_PATTERN = r"^(?!app:)(?!(?:user|temp):$)(?:(?:user|temp):)?[^\x00]{1,255}$"
_STATE_KEYS: dict[str, Any] = {"propertyNames": {"pattern": STATE_KEY_PATTERN}}


class CreateSessionIn(BaseModel):
    """``POST /sessions``: the new session's id (generated when absent) and first state."""

    model_config = ConfigDict(extra="forbid")

    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        pattern=r"^[^\x00]*$",
        description="The id: 1 to 255 characters, no NUL; a uuid4 hex when absent.",
    )
    state: dict[str, Any] | None = Field(
        default=None,
        description="Initial state: keys plain (the session's) or prefixed `user:` (the user's).",
        json_schema_extra=_STATE_KEYS,
    )


class MessageIn(BaseModel):
    """One message of a turn: the user's text, or a tool response answering a pause."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={  # what _tool_call_id checks
            "oneOf": [
                {"properties": {"role": {"const": "user"}, "tool_call_id": {"type": "null"}}},
                {
                    "properties": {
                        "role": {"const": "tool"},
                        "tool_call_id": {"type": "string", "minLength": 1},
                    },
                    "required": ["tool_call_id"],
                },
            ]
        },
    )

    role: Literal["user", "tool"]
    content: str
    tool_call_id: str | None = Field(
        default=None, min_length=1, description="A tool response's (only): the call it answers."
    )

    @model_validator(mode="after")
    def _tool_call_id(self) -> MessageIn:
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("a tool message needs tool_call_id, and only a tool message has one")
        return self

    def to_message(self) -> Message:
        """The relaykit ``Message``."""
        if self.role == "tool":
            return Message.tool(self.content, tool_call_id=self.tool_call_id)
        return Message.user(self.content)


class TurnIn(BaseModel):
    """``POST /sessions/{id}/turns``: ``text`` or ``messages`` (exactly one)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={  # what _one_input checks
            "oneOf": [
                {"properties": {"text": {"type": "string"}}, "required": ["text"]},
                {"properties": {"messages": {"type": "array"}}, "required": ["messages"]},
            ]
        },
    )

    text: str | None = Field(default=None, description="One user message.")
    messages: list[MessageIn] | None = Field(
        default=None,
        min_length=1,
        description="User messages and tool responses (answers to a pause).",
    )
    state_delta: dict[str, Any] | None = Field(
        default=None,
        description="State changes stored with the user's event (keys as in a new session's).",
        json_schema_extra=_STATE_KEYS,
    )
    stream: bool = Field(default=True, description="Server-sent events; false: one JSON body.")

    @model_validator(mode="after")
    def _one_input(self) -> TurnIn:
        if (self.text is None) == (self.messages is None):
            raise ValueError("give exactly one of text and messages")
        return self

    def to_messages(self) -> list[Message]:
        """The turn's relaykit messages."""
        if self.text is not None:
            return [Message.user(self.text)]
        return [m.to_message() for m in self.messages or ()]


class ResumeIn(BaseModel):
    """``POST /sessions/{id}/resume``: answers by interrupt id (every point when absent)."""

    model_config = ConfigDict(extra="forbid")

    targets: dict[str, Any] | None = Field(
        default=None, description="Interrupt id to the data its agent reads on resume."
    )
    stream: bool = Field(default=True, description="Server-sent events; false: one JSON body.")


class CancelIn(BaseModel):
    """``POST /sessions/{id}/cancel``: where the running turn stops."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["immediate", "after_model", "after_tools"] = Field(
        default="immediate",
        description="immediate: cut the model call, tool calls and stream in progress; "
        "after_model: once the model call in progress has completed, before its tools run; "
        "after_tools: once the tool batch in progress has finished.",
    )
    timeout: float | None = Field(
        default=None,
        strict=True,  # a number: not true, false or "1"
        ge=0,
        le=MAX_CANCEL_TIMEOUT,
        allow_inf_nan=False,
        description="Seconds to wait for the safe point before the cancel becomes immediate "
        "(none: as long as it takes).",
    )


# -- responses -----------------------------------------------------------------------------
class HealthOut(BaseModel):
    """``GET /health``."""

    status: Literal["ok"] = "ok"


class AgentOut(BaseModel):
    """One agent of the tree (``GET /agent``)."""

    name: str
    description: str
    kind: str = Field(description="The agent's class name.")
    children: list[AgentOut] = Field(default_factory=list)


ErrorType = Literal[
    "validation_error",
    "bad_request",
    "unauthorized",
    "not_found",
    "method_not_allowed",
    "unsupported_media_type",
    "not_running",
    "SessionNotFoundError",
    "SessionExistsError",
    "SessionBusyError",
    "CheckpointNotFoundError",
    "CheckpointBusyError",
    "ResumeTargetError",
    "ConfigurationError",
    "SerializationError",
    "SessionStoreError",
    "unavailable",
    "internal_error",
]
"""Every ``type`` an error response has (docs/http-server.md#errors): the API's own kinds in
snake case, the relaykit errors by class name."""


class ErrorDetail(BaseModel):
    """What went wrong."""

    type: ErrorType = Field(
        description=(
            "`validation_error` (400: the body is not JSON; 422: it does not match the schema), "
            "`bad_request` (400), `unauthorized` (401), `not_found` (404: an unknown path or "
            "`after` event), "
            "`method_not_allowed` (405), `unsupported_media_type` (415: the body is not "
            "sent as JSON), `not_running` (409: a cancel, and no turn of the session runs in "
            "this server); relaykit errors by class name: `SessionNotFoundError` (404), "
            "`SessionExistsError`, `SessionBusyError`, `CheckpointNotFoundError`, "
            "`CheckpointBusyError`, `ResumeTargetError` (409), `ConfigurationError`, "
            "`SerializationError` (422), `SessionStoreError` (503); `unavailable` (503: the "
            "server is shutting down); `internal_error` (500: a bug, see the server log)."
        )
    )
    message: str = Field(description="What went wrong, for a person to read.")


class ErrorOut(BaseModel):
    """Every error response: ``{"error": {"type", "message"}}``."""

    error: ErrorDetail


class ToolCallOut(BaseModel):
    """A tool call of an assistant message (``arguments`` is JSON text)."""

    id: str
    name: str
    arguments: str


class MessageOut(BaseModel):
    """An event's message."""

    role: str
    content: str
    tool_calls: list[ToolCallOut] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None

    @classmethod
    def of(cls, message: Message) -> MessageOut:
        """The message as the API shows it."""
        calls = [
            ToolCallOut(id=c.id, name=c.name, arguments=c.arguments) for c in message.tool_calls
        ]
        return cls(
            role=message.role,
            content=message.content,
            tool_calls=calls,
            tool_call_id=message.tool_call_id,
            tool_name=message.tool_name,
        )


class InterruptPointOut(BaseModel):
    """One waiting point of a pause: answer it by ``id`` (resume ``targets``)."""

    id: str
    info: str = Field(description="What the agent asked (JSON text when not a string).")
    address: list[str] = Field(description="Where it waits: `agent:<name>`, `tool:<name>:<id>`.")
    cancelled: bool = Field(
        default=False,
        description="A point where a cancel stopped the run: it takes no answer, a resume "
        "continues it.",
    )


class CancelledOut(BaseModel):
    """What stopped a cancelled run (``POST /sessions/{id}/cancel``)."""

    mode: Literal["immediate", "after_model", "after_tools"]
    escalated: bool = Field(
        description="The safe point was not reached within the cancel's timeout: it became "
        "immediate."
    )


class InterruptOut(BaseModel):
    """A pause: its waiting points."""

    contexts: list[InterruptPointOut]
    cancelled: CancelledOut | None = Field(
        default=None,
        description="Set when a cancel paused the run: a resume continues it (points that "
        "are not `cancelled` still need their answers).",
    )

    @classmethod
    def of(cls, info: InterruptInfo) -> InterruptOut:
        """The interrupt as the API shows it."""
        data = info.data
        return cls(
            contexts=[
                InterruptPointOut(
                    id=str(p.id),
                    info=_as_text(p.info),
                    address=[str(s) for s in p.address],
                    cancelled=isinstance(p.info, Cancelled),
                )
                for p in info.contexts
            ],
            cancelled=CancelledOut(mode=data.mode.value, escalated=data.escalated)
            if isinstance(data, Cancelled)
            else None,
        )


class CancelOut(BaseModel):
    """``POST /sessions/{id}/cancel``: what the cancel did."""

    already_ended: bool = Field(
        description="The turn ended (completed, failed or paused on its own) before the cancel "
        "could stop it: there is nothing to continue."
    )
    timed_out: bool = Field(
        description="The safe point was not reached within ``timeout``: the cancel became "
        "immediate."
    )
    interrupt: InterruptOut | None = Field(
        description="The pause the cancel left (its ``cancelled`` set); a resume continues it."
    )

    @classmethod
    def of(cls, outcome: CancelOutcome) -> CancelOut:
        """The outcome as the API shows it."""
        interrupt = outcome.interrupt
        return cls(
            already_ended=outcome.already_ended,
            timed_out=outcome.timed_out,
            interrupt=InterruptOut.of(interrupt)
            if interrupt is not None and interrupt.contexts
            else None,
        )


class ActionOut(BaseModel):
    """What an event asked the framework to do."""

    exit: bool = False
    transfer_to_agent: str | None = None
    break_loop: bool = False
    interrupted: InterruptOut | None = None
    custom: Any = None

    @classmethod
    def of(cls, action: AgentAction) -> ActionOut:
        """The action as the API shows it."""
        transfer = action.transfer_to_agent
        interrupted = action.interrupted
        return cls(
            exit=action.exit,
            transfer_to_agent=transfer.dest_agent_name if transfer is not None else None,
            break_loop=action.break_loop is not None,
            interrupted=InterruptOut.of(interrupted)
            if interrupted is not None and interrupted.contexts
            else None,
            custom=jsonable(action.custom),
        )


class EventOut(BaseModel):
    """One event of a session, as stored (``id`` is the stored id, usable as ``after``)."""

    id: str
    invocation_id: str
    author: str = Field(description="`user`, or the agent that produced the event.")
    agent_name: str = Field(description="The agent that produced the event; empty for `user`.")
    run_path: list[str]
    timestamp: float
    message: MessageOut | None = None
    action: ActionOut | None = None
    error: str | None = Field(default=None, description="`<ErrorClass>: <message>`.")
    state_delta: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def of_stored(cls, event: SessionEvent) -> EventOut:
        """A stored session event."""
        return cls(
            id=event.id,
            invocation_id=event.invocation_id,
            author=event.author,
            agent_name="" if event.author == "user" else event.author,
            run_path=list(event.run_path),
            timestamp=event.timestamp,
            message=MessageOut.of(event.message) if event.message is not None else None,
            action=ActionOut.of(event.action) if event.action is not None else None,
            error=event.error,
            state_delta=jsonable(event.state_delta),
        )

    @classmethod
    def of_delivered(
        cls, event: AgentEvent, invocation_id: str, timestamp: float, message: Message | None
    ) -> EventOut:
        """An event the Runner delivered but did not store (an agent tool's inner event, an
        error that could not be stored): its id is generated here."""
        error = event.error
        return cls(
            id=uuid.uuid4().hex,
            invocation_id=invocation_id,
            author=event.agent_name,
            agent_name=event.agent_name,
            run_path=[step.agent_name for step in event.run_path],
            timestamp=timestamp,
            message=MessageOut.of(message) if message is not None else None,
            action=ActionOut.of(event.action) if event.action is not None else None,
            error=f"{type(error).__name__}: {error}" if error is not None else None,
            state_delta=jsonable(event.state_delta or {}),
        )


class ChunkOut(BaseModel):
    """A piece of a message while it streams (``event: chunk``)."""

    event_id: str = Field(description="Generated by the server for the streamed message.")
    agent_name: str = Field(description="The agent whose message streams.")
    delta: str


class DiscardOut(BaseModel):
    """The chunks of a streamed message that will never be complete (``event: discard``):
    drop what was shown of them."""

    event_id: str = Field(description="The `event_id` of the chunks to drop.")
    reason: Literal["retry", "error"] = Field(
        description=(
            "`retry`: the model call failed part-way and is retried, its reply streams anew "
            "under another `event_id`; `error`: the stream broke, an `agent_event` with "
            "`error` follows."
        )
    )


class RunResultOut(BaseModel):
    """How a turn ended (``event: done``)."""

    output: str | None = Field(description="The text of the last message an agent delivered.")
    interrupt: InterruptOut | None = Field(description="Set when the turn paused.")
    session_id: str


class TurnResultOut(RunResultOut):
    """A turn run with ``"stream": false``: the summary and the turn's events."""

    events: list[EventOut]


class SessionOut(BaseModel):
    """A session without its events."""

    id: str
    app_name: str
    user_id: str
    state: dict[str, Any]
    last_update_time: float

    @classmethod
    def of(cls, session: Session) -> SessionOut:
        """The session as the API shows it (no events)."""
        return cls(
            id=session.id,
            app_name=session.app_name,
            user_id=session.user_id,
            state=jsonable(session.state),
            last_update_time=session.last_update_time,
        )


class SessionDetailOut(SessionOut):
    """A session with its state, every stored event, and what its pause waits for."""

    events: list[EventOut]
    pause: InterruptOut | None = Field(
        default=None,
        description=(
            "The waiting points of the session's paused invocation (answer a tool call with a "
            "tool message naming its id, any point with resume targets); null when nothing "
            "waits."
        ),
    )

    @classmethod
    def of_full(cls, session: Session, pause: InterruptInfo | None = None) -> SessionDetailOut:
        """The session with its events and pause."""
        base = SessionOut.of(session)
        return cls(
            **base.model_dump(),
            events=[EventOut.of_stored(e) for e in session.events],
            pause=InterruptOut.of(pause) if pause is not None else None,
        )


def agent_tree(agent: Any, seen: set[int] | None = None) -> AgentOut:
    """``agent`` and its sub-agents (through wrapper layers)."""
    seen = set() if seen is None else seen
    seen.add(id(agent))
    children: list[AgentOut] = []
    for layer in unwrap_layers(agent):  # the sub-agents sit on one of the layers
        for child in getattr(layer, "sub_agents", None) or ():
            if id(child) not in seen:
                children.append(agent_tree(child, seen))
    layers = unwrap_layers(agent)
    description = next((d for d in (getattr(x, "description", "") for x in layers) if d), "")
    return AgentOut(
        name=str(getattr(agent, "name", "")),
        description=str(description),
        kind=_kind(layers),  # the agent's own class, under framework wrappers
        children=children,
    )


def _kind(layers: list[Any]) -> str:
    """The agent's class: the innermost layer's, unless that is a framework layer (a
    workflow's own loop), then the outermost public class (``SequentialAgent``)."""
    inner = type(layers[-1]).__name__
    if inner.startswith("_"):
        for layer in layers:
            name = type(layer).__name__
            if name != "FlowAgent" and not name.startswith("_"):
                return name
    return inner
