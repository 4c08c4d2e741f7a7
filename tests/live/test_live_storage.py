"""What a live session stores and delivers (D27): partial and audio events are delivered
only, transcriptions are stored as the user's or the agent's messages, tool events wait for a
partial transcription to complete, input is stored before the reply it caused, after_run runs
once whether or not events were read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import relaykit as rk
from relaykit import Blob, Message
from relaykit.models.live import LiveResponse, ScriptedLiveModel
from tests.live.support import (
    APP,
    SESSION,
    USER,
    WAIT,
    Recorder,
    call,
    live,
    lookup,
    partial,
    read_all,
    rows,
    runner,
    shown,
    stored,
    transcript,
)

AUDIO = Blob("audio/pcm", b"\x01\x02\x03\x04")


async def test_partial_and_audio_events_are_delivered_but_not_stored(session_service: Any) -> None:
    recorder = Recorder()
    model = ScriptedLiveModel(
        [
            [
                partial("Hel"),
                partial("lo"),
                Message.assistant("Hello"),
                LiveResponse(audio=AUDIO),
                LiveResponse(Message.assistant("spoken"), audio=AUDIO),
                LiveResponse(turn_complete=True),
                LiveResponse(interrupted=True),
            ]
        ]
    )
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[recorder])
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [
        ("partial", "Hel"),
        ("partial", "lo"),
        ("assistant", "Hello"),
        ("audio", "assistant"),
        ("audio", "assistant"),
        ("bare",),
        ("bare",),
    ]
    assert all(
        ev.agent_name == "desk" and [s.agent_name for s in ev.run_path] == ["desk"] for ev in events
    )
    assert isinstance(events[0].output.custom, LiveResponse)  # type: ignore[union-attr]
    assert events[5].output.custom.turn_complete  # type: ignore[union-attr]
    assert events[4].message.attachments == [AUDIO]  # type: ignore[union-attr]
    assert rows(await stored(session_service)) == [("desk", "assistant", "Hello")]
    assert events[2].stored_id is not None and events[0].stored_id is None
    assert len(recorder.seen) == 7  # on_event sees every live event


async def test_transcriptions_are_stored_as_the_user_and_the_agent(session_service: Any) -> None:
    model = ScriptedLiveModel(
        [
            [
                partial("Where is", "input"),
                transcript("Where is order 7?", "input"),
                partial("It left", "output"),
                transcript("It left on Monday.", "output"),
                transcript("", "input"),  # an empty transcription is not stored
            ]
        ]
    )
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [
        ("partial", "Where is"),
        ("user", "Where is order 7?"),
        ("partial", "It left"),
        ("assistant", "It left on Monday."),
        ("user", ""),
    ]
    assert rows(await stored(session_service)) == [
        ("user", "user", "Where is order 7?"),
        ("desk", "assistant", "It left on Monday."),
    ]


async def test_tool_events_wait_for_the_partial_transcription_to_complete(
    session_service: Any,
) -> None:
    model = ScriptedLiveModel(
        [
            [
                partial("Where is ord", "input"),
                call("c1", "lookup", '{"order": "7"}'),
                partial("Where is order 7", "input"),
                transcript("Where is order 7?", "input"),
                Message.assistant("It shipped."),
            ]
        ]
    )
    agent = rk.ChatModelAgent("desk", live_model=model, tools=[lookup])
    r = runner(agent, session_service)
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [
        ("partial", "Where is ord"),
        ("partial", "Where is order 7"),
        ("user", "Where is order 7?"),
        ("call", "lookup"),
        ("tool", "order 7 shipped"),
        ("assistant", "It shipped."),
    ]
    assert rows(await stored(session_service)) == [
        ("user", "user", "Where is order 7?"),
        ("desk", "assistant", ""),
        ("desk", "tool", "order 7 shipped"),
        ("desk", "assistant", "It shipped."),
    ]
    # the tool ran at once and its result went back before the transcription completed
    assert [getattr(m, "content", None) for m in model.connections[0].sent] == ["order 7 shipped"]


async def test_held_tool_events_are_stored_when_the_stream_ends_without_a_transcription(
    session_service: Any,
) -> None:
    model = ScriptedLiveModel(
        [[partial("Where is", "input"), call("c1", "lookup", '{"order": "7"}')]]
    )
    r = runner(rk.ChatModelAgent("desk", live_model=model, tools=[lookup]), session_service)
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [
        ("partial", "Where is"),
        ("call", "lookup"),
        ("tool", "order 7 shipped"),
    ]
    assert rows(await stored(session_service)) == [
        ("desk", "assistant", ""),
        ("desk", "tool", "order 7 shipped"),
    ]


async def test_held_tool_events_come_before_the_error_of_a_failed_connection(
    session_service: Any,
) -> None:
    model = ScriptedLiveModel(
        [
            [
                partial("Where", "input"),
                call("c1", "lookup", '{"order": "7"}'),
                ConnectionResetError("socket closed"),
            ]
        ]
    )
    r = runner(rk.ChatModelAgent("desk", live_model=model, tools=[lookup]), session_service)
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events)[1:] == [
        ("call", "lookup"),
        ("tool", "order 7 shipped"),
        ("error", "ModelError"),
    ]
    saved = await stored(session_service)
    assert saved[-1].error is not None
    assert (
        "live connection of agent 'desk' failed: ConnectionResetError: socket closed"
        in saved[-1].error
    )


async def test_the_users_text_is_forwarded_then_stored_before_the_reply(
    session_service: Any,
) -> None:
    model = ScriptedLiveModel(
        [[WAIT, Message.assistant("Hi Ada."), WAIT, Message.assistant("Bye.")]]
    )
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    async with live(r) as session:
        await session.send(Message.user("I am Ada."))
        reader = session.events()
        first = await anext(reader)
        await session.send(Message.user("Goodbye."))
        rest = [ev async for ev in reader]
    assert [first.message.content, *[ev.message.content for ev in rest]] == ["Hi Ada.", "Bye."]  # type: ignore[union-attr]
    assert model.connections[0].sent == [Message.user("I am Ada."), Message.user("Goodbye.")]
    assert rows(await stored(session_service)) == [
        ("user", "user", "I am Ada."),
        ("desk", "assistant", "Hi Ada."),
        ("user", "user", "Goodbye."),
        ("desk", "assistant", "Bye."),
    ]


class SlowUserEvents(rk.InMemorySessionService):
    """Stores the user's events slowly: a reply that arrived meanwhile must wait its turn."""

    async def append_event(self, session: Any, event: Any) -> Any:
        if event.author == "user":
            for _ in range(50):
                await asyncio.sleep(0)
        return await super().append_event(session, event)


async def test_a_reply_is_never_stored_before_the_text_that_caused_it() -> None:
    service = SlowUserEvents()
    model = ScriptedLiveModel([[WAIT, Message.assistant("Noted.")]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), service)
    async with live(r) as session:
        await session.send(Message.user("Remember 42."))
        await read_all(session)
    assert rows(await stored(service)) == [
        ("user", "user", "Remember 42."),
        ("desk", "assistant", "Noted."),
    ]


async def test_on_user_message_replaces_what_is_sent_and_stored(session_service: Any) -> None:
    class Redact(rk.Plugin):
        async def on_user_message(self, ctx: rk.InvocationContext, message: Message) -> Message:
            return Message.user(message.content.replace("4111", "****"))

    model = ScriptedLiveModel([[WAIT]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[Redact()])
    async with live(r) as session:
        await session.send(Message.user("card 4111"))
    assert model.connections[0].sent == [Message.user("card ****")]
    assert rows(await stored(session_service)) == [("user", "user", "card ****")]


async def test_after_run_runs_once_without_reading_events(session_service: Any) -> None:
    recorder = Recorder()
    model = ScriptedLiveModel([[WAIT, Message.assistant("never")]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[recorder])
    session = await live(r)
    await session.send(Message.user("hello"))
    await session.close()
    assert recorder.calls == ["before_run", "after_run"]
    assert model.connections[0].closed
    await session.close()
    assert recorder.calls == ["before_run", "after_run"]


async def test_after_run_runs_when_the_model_ends_the_stream(session_service: Any) -> None:
    recorder = Recorder()
    model = ScriptedLiveModel([[Message.assistant("bye")]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[recorder])
    session = await live(r)
    events = await read_all(session)  # ends once after_run has run
    assert recorder.calls == ["before_run", "after_run"]
    assert session.closed and shown(events) == [("assistant", "bye")]
    await session.close()
    assert recorder.calls == ["before_run", "after_run"]


async def test_reading_from_the_model_pauses_while_the_buffer_is_full() -> None:
    service = rk.InMemorySessionService()
    model = ScriptedLiveModel([[Message.assistant(f"m{i}") for i in range(6)]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), service)
    session = await live(r, rk.LiveRunConfig(max_buffered_events=2))
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(rows(await stored(service))) == 2  # two wait for the reader: reading paused
    reader = session.events()
    assert (await anext(reader)).message.content == "m0"  # type: ignore[union-attr]
    rest = [ev.message.content async for ev in reader]  # type: ignore[union-attr]
    assert rest == ["m1", "m2", "m3", "m4", "m5"]
    assert len(rows(await stored(service))) == 6
    await session.close()


async def test_compaction_never_runs_in_a_live_session() -> None:
    service = rk.InMemorySessionService()
    model = ScriptedLiveModel([[WAIT, Message.assistant("a"), WAIT, Message.assistant("b")]])
    agent = rk.ChatModelAgent("desk", live_model=model)

    async def summarize(events: list[Any]) -> str:
        raise AssertionError("compaction ran")

    r = runner(
        agent,
        service,
        compaction=rk.CompactionConfig(compaction_interval=1, overlap_size=0, summarizer=summarize),
    )
    async with live(r) as session:
        await session.send(Message.user("1"))
        await session.send(Message.user("2"))
        events = await read_all(session)
    assert all(ev.error is None for ev in events)
    assert [e.action for e in await stored(service)] == [None] * 4


async def test_events_has_one_reader() -> None:
    model = ScriptedLiveModel([[]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), rk.InMemorySessionService())
    async with live(r) as session:
        session.events()
        with pytest.raises(rk.errors.ConfigurationError, match="one consumer"):
            session.events()


async def test_the_live_audio_of_each_model_turn_is_saved_as_an_artifact() -> None:
    artifacts = rk.InMemoryArtifactService()
    model = ScriptedLiveModel(
        [
            [
                LiveResponse(audio=Blob("audio/pcm", b"ab")),
                LiveResponse(audio=Blob("audio/pcm", b"cd")),
                LiveResponse(turn_complete=True),
                LiveResponse(audio=Blob("audio/pcm", b"ef")),
            ]
        ]
    )
    r = runner(
        rk.ChatModelAgent("desk", live_model=model),
        rk.InMemorySessionService(),
        artifact_service=artifacts,
    )
    async with live(r, rk.LiveRunConfig(modalities=("audio",), save_live_audio=True)) as session:
        await read_all(session)
    inv = session.invocation_id
    first = await artifacts.load(APP, USER, SESSION, f"live_audio_{inv}_0")
    second = await artifacts.load(APP, USER, SESSION, f"live_audio_{inv}_1")
    assert first is not None and first.data == b"abcd" and first.mime_type == "audio/pcm"
    assert second is not None and second.data == b"ef"
    assert model.connects[0].modalities == ("audio",)
