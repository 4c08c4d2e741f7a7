"""Bad input to a live session (D27): each is a clear error and nothing is stored half-way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit as rk
from relaykit import Blob, Message
from relaykit.errors import (
    ConfigurationError,
    LiveSessionClosedError,
    ModelError,
    ResumeTargetError,
    RunnerError,
)
from relaykit.models.live import LiveConfig, LiveResponse, ScriptedLiveModel
from tests.live.support import (
    WAIT,
    Recorder,
    call,
    live,
    partial,
    read_all,
    rows,
    runner,
    shown,
    stored,
)


async def test_sending_after_close_raises_and_sends_nothing(session_service: Any) -> None:
    model = ScriptedLiveModel([[WAIT]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    session = await live(r)
    await session.close()
    with pytest.raises(LiveSessionClosedError, match="has ended"):
        await session.send(Message.user("late"))
    with pytest.raises(LiveSessionClosedError):
        await session.send_realtime(Blob("audio/pcm", b"\x00"))
    assert model.connections[0].sent == []
    assert await stored(session_service) == []


async def test_sending_before_opening_is_a_configuration_error() -> None:
    r = runner(
        rk.ChatModelAgent("desk", live_model=ScriptedLiveModel([])), rk.InMemorySessionService()
    )
    session = live(r)
    with pytest.raises(ConfigurationError, match="open the live session first"):
        await session.send(Message.user("hi"))
    await session.close()


async def test_a_tool_response_for_an_unknown_call_sends_and_stores_nothing(
    session_service: Any,
) -> None:
    model = ScriptedLiveModel([[WAIT]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    async with live(r) as session:
        with pytest.raises(ResumeTargetError, match=r"call 'c9' matches no pending") as info:
            await session.send(Message.tool("42", tool_call_id="c9"))
        assert info.value.target_id == "c9"
        assert model.connections[0].sent == []
    assert await stored(session_service) == []


async def test_messages_a_user_cannot_send_are_refused(session_service: Any) -> None:
    model = ScriptedLiveModel([[WAIT]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    async with live(r) as session:
        calls = Message("user", "", [rk.ToolCall("c", "x", "{}")])
        with pytest.raises(ConfigurationError, match="cannot carry tool calls"):
            await session.send(calls)
        with pytest.raises(ConfigurationError, match="not a 'system' message"):
            await session.send(Message.system("obey"))
        with pytest.raises(ConfigurationError, match="takes a Message"):
            await session.send("hi")  # type: ignore[arg-type]
    assert model.connections[0].sent == []
    assert await stored(session_service) == []


async def test_a_model_that_closes_the_socket_mid_turn_is_an_error_event_last(
    session_service: Any,
) -> None:
    recorder = Recorder()
    model = ScriptedLiveModel(
        [[WAIT, partial("Your order "), partial("is on "), ConnectionAbortedError("socket closed")]]
    )
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[recorder])
    async with live(r) as session:
        await session.send(Message.user("Where is my order?"))
        events = await read_all(session)
        assert session.closed
    assert shown(events) == [
        ("partial", "Your order "),
        ("partial", "is on "),
        ("error", "ModelError"),
    ]
    assert "agent 'desk' failed: ConnectionAbortedError: socket closed" in str(events[-1].error)
    saved = await stored(session_service)
    assert rows(saved) == [("user", "user", "Where is my order?")]  # no half turn
    assert saved[-1].error is not None and "socket closed" in saved[-1].error
    assert recorder.calls == ["before_run", "after_run"]


async def test_an_oversized_audio_chunk_is_refused_before_it_is_sent(session_service: Any) -> None:
    model = ScriptedLiveModel([[WAIT, WAIT]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    config = rk.LiveRunConfig(max_realtime_chunk_bytes=4)
    async with live(r, config) as session:
        with pytest.raises(
            ConfigurationError, match=r"5 bytes is over .*max_realtime_chunk_bytes=4"
        ):
            await session.send_realtime(Blob("audio/pcm", b"12345"))
        await session.send_realtime(Blob("audio/pcm", b"1234"))
        with pytest.raises(ConfigurationError, match="takes a Blob"):
            await session.send_realtime(b"1234")  # type: ignore[arg-type]
    assert model.connections[0].sent == [Blob("audio/pcm", b"1234")]
    assert await stored(session_service) == []  # audio sent is forwarded only


class FailingAppends(rk.InMemorySessionService):
    """Refuses to store once ``failing`` is set."""

    failing = False

    async def append_event(self, session: Any, event: Any) -> Any:
        if self.failing:
            raise OSError("disk full")
        return await super().append_event(session, event)


async def test_a_failed_store_after_send_raises_and_ends_the_session() -> None:
    service = FailingAppends()
    recorder = Recorder()
    model = ScriptedLiveModel([[WAIT, Message.assistant("never stored")]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), service, plugins=[recorder])
    session = await live(r)
    service.failing = True
    with pytest.raises(RunnerError, match=r"already has the input.*OSError: disk full"):
        await session.send(Message.user("hello"))
    assert session.closed
    assert recorder.calls == ["before_run", "after_run"]
    assert model.connections[0].sent == [Message.user("hello")]  # the model has it
    events = await read_all(session)
    assert shown(events)[-1] == ("error", "RunnerError")
    service.failing = False
    assert await stored(service) == []
    with pytest.raises(LiveSessionClosedError):
        await session.send(Message.user("again"))
    await session.close()


async def test_a_failed_store_of_a_model_event_ends_the_session() -> None:
    service = FailingAppends()
    model = ScriptedLiveModel([[WAIT, Message.assistant("reply"), WAIT]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), service)
    async with live(r) as session:
        service.failing = False
        await session.send(Message.user("hello"))
        service.failing = True
        events = await read_all(session)
    service.failing = False
    assert shown(events) == [("error", "RunnerError")]
    assert "failed to store an event" in str(events[0].error)
    assert rows(await stored(service)) == [("user", "user", "hello")]


async def test_an_interrupted_turn_is_delivered_and_ends_nothing(session_service: Any) -> None:
    model = ScriptedLiveModel(
        [[partial("Let me tell you"), LiveResponse(interrupted=True), Message.assistant("Yes?")]]
    )
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [("partial", "Let me tell you"), ("bare",), ("assistant", "Yes?")]
    assert events[1].output.custom.interrupted  # type: ignore[union-attr]
    assert rows(await stored(session_service)) == [("desk", "assistant", "Yes?")]


class RefusingConnection:
    """A connection whose sends fail (the socket went away) while receive waits."""

    def __init__(self) -> None:
        self.closed = False
        self._closed = asyncio.Event()

    async def send(self, message: Message) -> None:
        raise ConnectionResetError("peer reset")

    async def send_realtime(self, blob: Blob) -> None:
        raise ConnectionResetError("peer reset")

    async def receive(self) -> AsyncIterator[LiveResponse]:
        await self._closed.wait()
        return
        yield

    async def close(self) -> None:
        self.closed = True
        self._closed.set()


class RefusingModel:
    def __init__(self) -> None:
        self.connection = RefusingConnection()

    async def connect(self, config: LiveConfig) -> RefusingConnection:
        return self.connection


async def test_a_send_the_connection_refuses_is_a_model_error_and_stores_nothing(
    session_service: Any,
) -> None:
    model = RefusingModel()
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    async with live(r) as session:
        with pytest.raises(ModelError, match=r"agent 'desk' failed: ConnectionResetError: peer"):
            await session.send(Message.user("hello"))
        with pytest.raises(ModelError, match="peer reset"):
            await session.send_realtime(Blob("audio/pcm", b"\x00"))
    assert model.connection.closed
    assert await stored(session_service) == []


class Odd:
    """Not a response at all."""


@pytest.mark.parametrize(
    ("garbage", "problem"),
    [
        (Odd(), "a Odd, not a LiveResponse"),
        (LiveResponse(message="hello"), "a message that is a str, not a Message"),  # type: ignore[arg-type]
        (LiveResponse(Message("assistant", 42)), "content is a int, not a str"),  # type: ignore[arg-type]
        (LiveResponse(Message.tool("x", tool_call_id="c0")), "a 'tool' message"),
        (LiveResponse(Message.user("hi")), "a 'user' message"),
        (
            LiveResponse(Message.assistant("", [rk.ToolCall("c1", None, "{}")])),  # type: ignore[arg-type]
            "a tool call whose id, name or arguments are not strings",
        ),
        (LiveResponse(Message.assistant("a"), transcription="both"), "neither 'input' nor"),  # type: ignore[arg-type]
        (LiveResponse(audio=b"\x00\x01"), "audio that is not a Blob"),
        (
            LiveResponse(call("c2", "lookup"), audio=Blob("audio/pcm", b"\x00")),
            "tool calls in a response that also carries a transcription or audio",
        ),
        (
            LiveResponse(call("c3", "lookup"), transcription="output"),
            "tool calls in a response that also carries a transcription or audio",
        ),  # type: ignore[arg-type]
        (LiveResponse(Message("assistant", 7), partial=True), "content is a int"),  # type: ignore[arg-type]
    ],
)
async def test_a_model_that_yields_an_invalid_response_ends_with_an_error_event(
    garbage: Any, problem: str
) -> None:
    service = rk.InMemorySessionService()
    recorder = Recorder()
    model = ScriptedLiveModel([[Message.assistant("Hello."), garbage, Message.assistant("never")]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), service, plugins=[recorder])
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [("assistant", "Hello."), ("error", "ModelError")]
    error = str(events[-1].error)
    assert "the live model of agent 'desk' sent an invalid response" in error
    assert problem in error
    saved = await stored(service)
    assert rows(saved) == [("desk", "assistant", "Hello.")]  # nothing of the garbage
    assert saved[-1].error is not None and "invalid response" in saved[-1].error
    assert recorder.calls == ["before_run", "after_run"] and model.connections[0].closed


class FailsOn(rk.InMemorySessionService):
    """Appends fail for the first event whose message content is ``content``."""

    def __init__(self, content: str) -> None:
        super().__init__()
        self.content = content

    async def append_event(self, session: Any, event: Any) -> Any:
        if event.message is not None and event.message.content == self.content:
            raise OSError("disk full")
        return await super().append_event(session, event)


@rk.tool
def look(order: str) -> str:
    """Look an order up."""
    return f"order {order} shipped"


@pytest.mark.parametrize(
    ("failing", "steps", "kept"),
    [
        (  # the transcription that ends a transcribing phase (a call held behind it)
            "Where is it?",
            [
                partial("Where", "input"),
                call("c1", "look", '{"order": "7"}'),
                LiveResponse(Message.assistant("Where is it?"), transcription="input"),
                Message.assistant("never stored"),
            ],
            [],
        ),
        (  # a tool's result, after it was sent
            "order 7 shipped",
            [call("c1", "look", '{"order": "7"}'), WAIT, Message.assistant("never stored")],
            [("desk", "assistant", "")],
        ),
        (  # the answer to a call left pending, when the model ends the stream
            "error: abandoned — the live session ended",
            [Message.assistant("Hi."), call("r1", "hold")],
            [("desk", "assistant", "Hi."), ("desk", "assistant", "")],
        ),
    ],
)
async def test_a_failed_store_mid_stream_ends_with_the_error_last(
    failing: str, steps: list[Any], kept: list[tuple[str, str, str]]
) -> None:
    @rk.tool(long_running=True)
    def hold() -> str:
        """Wait for a human."""
        return "waiting"

    service = FailsOn(failing)
    recorder = Recorder()
    model = ScriptedLiveModel([steps])
    agent = rk.ChatModelAgent("desk", live_model=model, tools=[look, hold])
    r = runner(agent, service, plugins=[recorder])
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events)[-1] == ("error", "RunnerError")
    assert "failed to store an event" in str(events[-1].error)
    assert "never stored" not in [ev.message.content for ev in events if ev.message]
    assert rows(await stored(service)) == kept
    assert recorder.calls == ["before_run", "after_run"]
    again = await live(
        runner(rk.ChatModelAgent("desk", live_model=ScriptedLiveModel([[]])), service)
    )
    await again.close()  # the lock was released
