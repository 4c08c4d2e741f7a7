"""Helpers of the live-session tests: agents, runners, reading and inspecting a session."""

from __future__ import annotations

import asyncio
from typing import Any

import relaykit as rk
from relaykit import Message
from relaykit.models.live import LiveResponse, ScriptedLiveModel
from relaykit.sessions.base import SessionEvent

WAIT = ScriptedLiveModel.WAIT
APP = "live-tests"
USER = "u1"
SESSION = "s1"


@rk.tool
def lookup(order: str) -> str:
    """Look an order up."""
    if order == "0":
        raise rk.ToolError("order 0 does not exist")
    return f"order {order} shipped"


def partial(text: str, transcription: Any = None) -> LiveResponse:
    """A partial chunk of the model's text (or of a transcription)."""
    return LiveResponse(Message.assistant(text), partial=True, transcription=transcription)


def transcript(text: str, kind: Any) -> LiveResponse:
    """A complete transcription of the user's (``"input"``) or the model's (``"output"``) audio."""
    return LiveResponse(Message.assistant(text), transcription=kind)


def call(call_id: str, name: str, arguments: str = "{}", text: str = "") -> Message:
    """A model message calling one tool."""
    return Message.assistant(text, [rk.ToolCall(call_id, name, arguments)])


def runner(agent: Any, service: Any, **options: Any) -> rk.Runner:
    """A session-mode Runner of ``agent`` on ``service``."""
    return rk.Runner(agent, app_name=APP, session_service=service, **options)


def live(r: rk.Runner, config: rk.LiveRunConfig | None = None) -> rk.LiveSession:
    """The test session's live session (not opened)."""
    return r.run_live(user_id=USER, session_id=SESSION, config=config)


async def read_all(session: rk.LiveSession) -> list[rk.AgentEvent]:
    """Every event of ``session`` until it ends."""
    return [ev async for ev in session.events()]


async def stored(service: Any) -> list[SessionEvent]:
    """The test session's stored events."""
    session = await service.get_session(APP, USER, SESSION)
    assert session is not None
    return list(session.events)


def rows(events: list[SessionEvent]) -> list[tuple[str, str, str]]:
    """(author, role, content) of stored events with a message."""
    return [(e.author, e.message.role, e.message.content) for e in events if e.message]


def shown(events: list[rk.AgentEvent]) -> list[tuple[str, ...]]:
    """A compact view of delivered events: kind and text."""
    out: list[tuple[str, ...]] = []
    for ev in events:
        if ev.error is not None:
            out.append(("error", type(ev.error).__name__))
        elif ev.action is not None and ev.action.interrupted is not None:
            out.append(("pause",))
        elif ev.output is not None and ev.output.stream is not None:
            out.append(("partial", ev.output.stream.chunks[0].content))
        elif ev.message is not None:
            msg = ev.message
            if msg.tool_calls:
                out.append(("call", msg.tool_calls[0].name))
            elif msg.attachments:
                out.append(("audio", msg.role))
            else:
                out.append((msg.role, msg.content))
        else:
            out.append(("bare",))
    return out


class Recorder(rk.Plugin):
    """Records the run-level hooks it sees."""

    def __init__(self, answer: str | None = None, fail_before_run: bool = False) -> None:
        super().__init__("recorder")
        self.calls: list[str] = []
        self.seen: list[rk.AgentEvent] = []
        self._answer = answer
        self._fail = fail_before_run

    async def before_run(self, ctx: rk.InvocationContext) -> Message | None:
        self.calls.append("before_run")
        if self._fail:
            raise RuntimeError("before_run refused")
        return Message.assistant(self._answer) if self._answer else None

    async def on_event(self, ctx: rk.InvocationContext, event: rk.AgentEvent) -> None:
        self.seen.append(event)

    async def after_run(self, ctx: rk.InvocationContext) -> None:
        self.calls.append("after_run")


async def settle() -> None:
    """Let the background reader process what it can (it never waits on a clock)."""
    for _ in range(20):
        await asyncio.sleep(0)


class PushedConnection:
    """A live connection whose responses the test pushes (``push``), at the moment it wants."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[LiveResponse | None] = asyncio.Queue()
        #: Every message and blob the client sent, in order.
        self.sent: list[Any] = []
        #: Whether the client closed the connection.
        self.closed = False

    def push(self, *responses: LiveResponse | Message) -> None:
        """Have ``receive`` yield ``responses`` (a message as ``LiveResponse(message=m)``)."""
        for response in responses:
            if isinstance(response, Message):
                response = LiveResponse(response)
            self._queue.put_nowait(response)

    def end(self) -> None:
        """The model closes the connection normally."""
        self._queue.put_nowait(None)

    async def send(self, message: Message) -> None:
        if self.closed:
            raise ConnectionError("the connection is closed")
        self.sent.append(message)

    async def send_realtime(self, blob: Any) -> None:
        if self.closed:
            raise ConnectionError("the connection is closed")
        self.sent.append(blob)

    async def receive(self) -> Any:
        while not self.closed:
            response = await self._queue.get()
            if response is None:
                return
            yield response

    async def close(self) -> None:
        self.closed = True
        self._queue.put_nowait(None)


class PushedModel:
    """A live model whose connections are ``PushedConnection`` objects."""

    def __init__(self) -> None:
        #: One connection per connect, in order.
        self.connections: list[PushedConnection] = []

    async def connect(self, config: Any) -> PushedConnection:
        connection = PushedConnection()
        self.connections.append(connection)
        return connection
