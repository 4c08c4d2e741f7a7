"""Live sessions: live responses as events, which events are stored or held, the buffer
``LiveSession.events()`` reads from, and small pieces of the live invocation (D27).

``relaykit._live_run`` drives them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from relaykit._session_history import pending_tool_calls, stopped_calls
from relaykit.agents.chat import ChatModelAgent
from relaykit.errors import ConfigurationError, ModelError
from relaykit.events import AgentEvent, AgentOutput, RunPath
from relaykit.messages import Blob, Message, MessageStream, ToolCall
from relaykit.models.live import LiveConnection, LiveResponse
from relaykit.sessions.base import SessionEvent

if TYPE_CHECKING:
    from relaykit._session_state import SessionPause
    from relaykit.agents._tool_calls import PendingToolCall, Prepared
    from relaykit.context import RunContext
    from relaykit.flow import FlowAgent

logger = logging.getLogger("relaykit")

__all__ = [
    "LIVE_ENDED_TEXT",
    "AgentFailed",
    "AgentStream",
    "ClosedMeanwhile",
    "ConnectionFailed",
    "EventBuffer",
    "audio_blob",
    "close_quietly",
    "connection_error",
    "describe",
    "invalid_response",
    "is_held",
    "is_stored",
    "live_agent",
    "live_event",
    "open_calls",
    "send_to",
]

#: The tool result stored for a call still pending when the live agent's stream ends (D27).
LIVE_ENDED_TEXT: Final = "error: abandoned — the live session ended"


def live_event(response: LiveResponse, agent_name: str, run_path: RunPath) -> AgentEvent:
    """The event of one live response: a partial response streams its one chunk, a complete
    one carries its message; a transcription reads as the user's (input) or the agent's
    (output) text; inline audio is an attachment; ``output.custom`` is the response.

    >>> from relaykit.events import RunStep
    >>> ev = live_event(LiveResponse(Message.assistant("Hi"), transcription="input"),
    ...                 "desk", (RunStep("desk"),))
    >>> ev.message.role, ev.message.content, ev.output.custom.transcription
    ('user', 'Hi', 'input')
    >>> chunk = LiveResponse(Message.assistant("Hel"), partial=True)
    >>> live_event(chunk, "desk", ()).output.is_streaming
    True
    """
    message = response.message
    if response.transcription is not None:
        text = message.content if message is not None else ""
        message = (
            Message.user(text) if response.transcription == "input" else Message.assistant(text)
        )
    if response.audio is not None:
        if message is None:
            message = Message.assistant("")
        message = Message(
            message.role,
            message.content,
            list(message.tool_calls),
            message.tool_call_id,
            message.tool_name,
            message.name,
            [*message.attachments, response.audio],
            dict(message.metadata),
        )
    if message is None:
        output = AgentOutput(None, None, "assistant", None, response)
    elif response.partial:
        output = AgentOutput(
            None, MessageStream.from_list([message]), message.role, message.tool_name, response
        )
    else:
        output = AgentOutput(message, None, message.role, message.tool_name, response)
    return AgentEvent(agent_name, run_path, output)


def invalid_response(response: object) -> str | None:
    """What is wrong with a response a live model yielded (None when nothing is): the types
    the Runner relies on, and a model that speaks as someone else than the assistant (only a
    transcription of the user's speech is the user's). Names types, never the content.

    >>> invalid_response(LiveResponse(Message.assistant("Hi")))
    >>> invalid_response({"text": "Hi"})
    'a dict, not a LiveResponse'
    >>> invalid_response(LiveResponse(Message.tool("42", tool_call_id="c1")))
    "a 'tool' message (a model's messages are the assistant's)"
    """
    if not isinstance(response, LiveResponse):
        return f"a {type(response).__name__}, not a LiveResponse"
    transcription = response.transcription
    if transcription is not None and transcription != "input" and transcription != "output":
        return "a transcription that is neither 'input' nor 'output'"
    message = response.message
    if message is not None:
        if not isinstance(message, Message):
            return f"a message that is a {type(message).__name__}, not a Message"
        if not isinstance(message.content, str):
            return f"a message whose content is a {type(message.content).__name__}, not a str"
        if transcription is None and message.role != "assistant":
            role = message.role if message.role in ("user", "system", "tool") else "unknown"
            return f"a {role!r} message (a model's messages are the assistant's)"
        if message.tool_calls and (transcription is not None or response.audio is not None):
            # (the calls would be dropped, or run with no stored call for their results)
            return "tool calls in a response that also carries a transcription or audio"
        for call in message.tool_calls:
            if not (
                isinstance(call, ToolCall)
                and isinstance(call.id, str)
                and isinstance(call.name, str)
                and isinstance(call.arguments, str)
            ):
                return "a tool call whose id, name or arguments are not strings"
        for blob in message.attachments:
            if not (isinstance(blob, Blob) and isinstance(blob.data, bytes)):
                return "an attachment that is not a Blob of bytes"
    audio = response.audio
    if audio is not None and not (isinstance(audio, Blob) and isinstance(audio.data, bytes)):
        return "audio that is not a Blob of bytes"
    return None


def is_stored(ev: AgentEvent) -> bool:
    """Whether a live event is stored (D27): not partial, no inline audio, and some text, tool
    calls, an action or an error."""
    if ev.action is not None or ev.error is not None:
        return True
    out = ev.output
    if out is None or out.stream is not None:
        return False
    message = out.message
    if message is None or message.attachments:
        return False
    return bool(message.content or message.tool_calls)


def is_held(ev: AgentEvent) -> bool:
    """Whether a live event waits while a transcription is partial: tool calls, tool results
    and pauses (D27)."""
    action = ev.action
    if action is not None and action.interrupted is not None:
        return True
    message = ev.message
    return message is not None and (message.role == "tool" or bool(message.tool_calls))


@dataclass(slots=True)
class AgentStream:
    """One live agent's connection and what the Runner tracks while it streams."""

    #: The agent's flow agent (its transfer targets).
    flow: FlowAgent
    #: The chat agent whose ``live_model`` is connected.
    agent: ChatModelAgent
    #: The agent's context (run path, address, the session values, the invocation).
    ctx: RunContext
    #: The agent's instruction and tools.
    prepared: Prepared
    #: The open connection.
    connection: LiveConnection
    #: The messages the connection was opened with (the chat history tools receive).
    context: list[Message]
    #: Long-running calls waiting for ``LiveSession.send(Message.tool(...))``, by call id.
    pending: dict[str, tuple[ToolCall, PendingToolCall]] = field(default_factory=dict)
    #: A transcription is partial: tool events wait in ``held`` (D27).
    transcribing: bool = False
    #: Tool calls, tool results and pauses held while transcribing, in arrival order.
    held: list[AgentEvent] = field(default_factory=list)
    #: The model's audio of the current model turn.
    audio: list[Blob] = field(default_factory=list)
    #: The agent's live part has ended (its held events stored, its calls answered, its
    #: ``after_agent`` run): a transfer ended it, and the end of the session does not again.
    ended: bool = False

    @property
    def name(self) -> str:
        """The agent's name."""
        return self.flow.name

    @property
    def run_path(self) -> RunPath:
        """The agent's run path."""
        return self.ctx.run_path


class EventBuffer:
    """The events waiting for ``LiveSession.events()``: one reader; the writer waits for
    room (``wait_for_room``) before it reads the next response from the model, so reading
    pauses while ``limit`` events wait; what ends a session is added regardless.
    """

    def __init__(self, limit: int) -> None:
        self._items: deque[AgentEvent] = deque()
        #: How many events may wait before the writer waits.
        self.limit = limit
        self._readable = asyncio.Event()
        self._room = asyncio.Event()
        self._ended = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, ev: AgentEvent) -> None:
        """Add ``ev`` (never waits)."""
        self._items.append(ev)
        self._readable.set()

    def end(self) -> None:
        """No more events: the reader stops once it has read what is here."""
        self._ended = True
        self._readable.set()
        self._room.set()

    async def wait_for_room(self) -> None:
        """Return once fewer than ``limit`` events wait (or the buffer ended)."""
        while len(self._items) >= self.limit and not self._ended:
            self._room.clear()
            await self._room.wait()

    async def get(self) -> AgentEvent | None:
        """The next event; None once the buffer ended and is empty."""
        while not self._items:
            if self._ended:
                return None
            self._readable.clear()
            await self._readable.wait()
        ev = self._items.popleft()
        if len(self._items) < self.limit:
            self._room.set()
        return ev


def audio_blob(chunks: list[Blob]) -> Blob:
    """The chunks of one model turn's audio as one blob (the first chunk's type)."""
    return Blob(chunks[0].mime_type, b"".join(chunk.data for chunk in chunks))


def describe(exc: BaseException) -> str:
    """``Type: text`` of an exception (its type alone when it has no text)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class AgentFailed(Exception):
    """A tool of the live agent raised: the agent ends with this error event (D27)."""


class ConnectionFailed(Exception):
    """Sending over the live connection failed."""


class ClosedMeanwhile(Exception):
    """``LiveSession.close()`` cancelled what was running (a tool call, a transfer's
    connect)."""


def live_agent(flow: FlowAgent) -> ChatModelAgent:
    """The chat agent of ``flow`` when it can run live (``ConfigurationError`` otherwise)."""
    agent = flow.agent
    if isinstance(agent, ChatModelAgent) and agent.live_model is not None:
        return agent
    raise ConfigurationError(
        f"agent {flow.name!r} cannot run live: a live session needs a ChatModelAgent with a "
        "live_model (ChatModelAgent(..., live_model=...))"
    )


def open_calls(events: Sequence[SessionEvent], pause: SessionPause | None) -> list[SessionEvent]:
    """The answers to the calls earlier invocations left pending (not stored yet): a paused
    invocation's (abandoned, D12), or those of the latest invocation when it stopped early."""
    if pause is not None:
        return pending_tool_calls(events, pause.invocation_id)
    return stopped_calls(events)


def connection_error(stream: AgentStream, exc: BaseException) -> ModelError:
    err = ModelError(
        f"the live connection of agent {stream.name!r} failed: {describe(exc)}", provider="live"
    )
    err.__cause__ = exc
    return err


async def send_to(stream: AgentStream, message: Message) -> None:
    try:
        await stream.connection.send(message)
    except Exception as exc:
        raise ConnectionFailed(exc) from exc


async def close_quietly(stream: AgentStream) -> None:
    try:
        await stream.connection.close()
    except Exception as exc:
        logger.debug("closing the live connection of agent %r failed: %s", stream.name, exc)
