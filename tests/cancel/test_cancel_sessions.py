"""Cancelling a session-mode turn (D26): the pause kept with the session is the cancellation
point, and the next ``resume`` continues there; on every session service."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import relaykit as rk
from relaykit import AgentEvent, Cancelled, CancelMode, CancelOutcome, Message, RunHandle
from relaykit.errors import CheckpointNotFoundError, StreamCancelledError
from relaykit.sessions import SessionEvent
from tests.cancel.support import Counter, Gate, asks, call, point_addresses

APP, USER, SID = "desk", "u1", "s1"


async def stored(service: Any) -> list[SessionEvent]:
    session = await service.get_session(APP, USER, SID)
    assert session is not None
    return list(session.events)


def stored_texts(events: list[SessionEvent]) -> list[tuple[str, str]]:
    return [(e.author, e.message.content) for e in events if e.message is not None]


async def _cancel_at(handle: RunHandle, when: Any, mode: CancelMode) -> CancelOutcome:
    outcome: CancelOutcome | None = None
    async for ev in handle:
        if outcome is None and when(ev):
            outcome = await handle.cancel(mode)
    assert outcome is not None
    return outcome


def _tool_result(ev: AgentEvent) -> bool:
    return ev.output is not None and ev.output.role == "tool"


async def test_a_cancelled_turn_pauses_the_session_and_resume_continues_it(service: Any) -> None:
    search = Counter("search")
    model = rk.ScriptedModel([asks(call("c1", "search", "a")), Message.assistant("found a")])
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model, tools=[search.tool]),
        app_name=APP,
        session_service=service,
    )

    outcome = await _cancel_at(
        runner.run([Message.user("find a")], user_id=USER, session_id=SID),
        _tool_result,
        CancelMode.AFTER_TOOLS,
    )

    assert outcome.checkpoint_id is None and outcome.interrupt is not None  # kept with the session
    assert outcome.interrupt.data == Cancelled(CancelMode.AFTER_TOOLS)
    assert await service.get_checkpoint(APP, USER, SID) is not None
    events = await stored(service)
    last = events[-1].action
    assert last is not None and last.interrupted is not None
    assert last.interrupted.data == Cancelled(CancelMode.AFTER_TOOLS)
    assert point_addresses(last.interrupted) == [["agent:helper"]]
    assert not any(e.error for e in events)

    done = await runner.invoke_resume(user_id=USER, session_id=SID)
    assert done.output is not None and done.output.content == "found a"
    assert search.started == ["a"] and len(model.requests) == 2
    assert await service.get_checkpoint(APP, USER, SID) is None  # consumed
    assert stored_texts(await stored(service)) == [
        ("user", "find a"),
        ("helper", ""),
        ("helper", "search did a"),
        ("helper", "found a"),
    ]


async def test_a_turn_cancelled_after_the_model_runs_its_tools_on_resume(service: Any) -> None:
    search = Counter("search")
    model = rk.ScriptedModel([asks(call("c1", "search", "a")), Message.assistant("found a")])
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model, tools=[search.tool]),
        app_name=APP,
        session_service=service,
    )
    outcome = await _cancel_at(
        runner.run([Message.user("find a")], user_id=USER, session_id=SID),
        lambda ev: ev.message is not None and bool(ev.message.tool_calls),
        CancelMode.AFTER_MODEL,
    )
    assert outcome.interrupt is not None and search.started == []

    done = await runner.invoke_resume(user_id=USER, session_id=SID)
    assert done.output is not None and done.output.content == "found a"
    assert search.started == ["a"] and len(model.requests) == 2


async def test_a_stream_cut_in_session_mode_is_never_stored(service: Any) -> None:
    model = rk.ScriptedModel([Message.assistant("one two three"), Message.assistant("whole")])
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model),
        app_name=APP,
        session_service=service,
        streaming=True,
    )
    handle = runner.run([Message.user("count")], user_id=USER, session_id=SID)
    async for ev in handle:
        if ev.output is not None and ev.output.stream is not None:
            chunks = aiter(ev.output.stream)
            assert (await anext(chunks)).content == "one "
            await handle.cancel()
            with pytest.raises(StreamCancelledError):
                await anext(chunks)

    events = await stored(service)
    assert stored_texts(events) == [("user", "count")]  # no partial reply
    assert await service.get_checkpoint(APP, USER, SID) is not None
    done = await runner.invoke_resume(user_id=USER, session_id=SID)
    assert done.output is not None and done.output.content == "whole"
    assert stored_texts(await stored(service)) == [("user", "count"), ("helper", "whole")]
    assert [m.role for m in model.requests[1].messages] == ["user"]


async def test_an_immediate_cancel_from_another_task_releases_the_session(service: Any) -> None:
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel([asks(call("c1", "slow", "y")), Message.assistant("ok")])
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model, tools=[slow.tool]),
        app_name=APP,
        session_service=service,
        session_lock_timeout=5,
    )
    handle = runner.run([Message.user("go")], user_id=USER, session_id=SID)
    consumed: list[AgentEvent] = []

    async def consume() -> None:
        async for ev in handle:
            consumed.append(ev)

    consuming = asyncio.ensure_future(consume())
    assert slow.gate is not None
    await slow.gate.entered.wait()
    outcome = await handle.cancel()
    await consuming

    assert slow.cut == ["y"] and outcome.interrupt is not None
    assert consumed[-1].action is not None and consumed[-1].action.interrupted == outcome.interrupt
    slow.gate = None
    # The cancelled turn has ended: the session is free for the resume.
    done = await runner.invoke_resume(user_id=USER, session_id=SID)
    assert done.output is not None and done.output.content == "ok"
    assert slow.started == ["y", "y"] and slow.finished == ["y"]


async def test_a_session_turn_ended_before_the_cancel_says_so(service: Any) -> None:
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=rk.ScriptedModel([Message.assistant("hi")])),
        app_name=APP,
        session_service=service,
    )
    handle = runner.run([Message.user("hello")], user_id=USER, session_id=SID)
    await handle.result()
    assert (await handle.cancel()).already_ended
    assert await service.get_checkpoint(APP, USER, SID) is None


async def test_two_concurrent_resumes_of_a_cancelled_turn_continue_it_once(service: Any) -> None:
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel([asks(call("c1", "slow", "y")), Message.assistant("ok")])
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model, tools=[slow.tool]),
        app_name=APP,
        session_service=service,
    )
    await _cancel_at(
        runner.run([Message.user("go")], user_id=USER, session_id=SID),
        lambda ev: ev.message is not None and bool(ev.message.tool_calls),
        CancelMode.AFTER_MODEL,
    )
    first = asyncio.ensure_future(runner.invoke_resume(user_id=USER, session_id=SID))
    assert slow.gate is not None
    await slow.gate.entered.wait()  # the first resume runs the continuation
    second = asyncio.ensure_future(runner.invoke_resume(user_id=USER, session_id=SID))
    slow.gate.opened.set()

    done = await first
    with pytest.raises(CheckpointNotFoundError):  # the pause was consumed meanwhile
        await second
    assert done.output is not None and done.output.content == "ok"
    assert slow.started == ["y"] and len(model.requests) == 2
