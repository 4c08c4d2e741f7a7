"""The Runner's session mode across processes, on SQLite and PostgreSQL: an invocation paused by
a long-running tool in one process continues in another; two processes taking turns on one
session never interleave; a turn that cannot get the session fails before storing anything.

Each process runs ``tests/sessions/_crash_app.py``'s app with a command line (see its
docstring), forked from a server that imported it once (``_crash_app.forks``): a process of its
own, with its own connections and Runner. The stored rows are read back here with
``DatabaseSessionService.get_session``.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from relaykit.sessions import SessionEvent
from relaykit.sessions.database import DatabaseSessionService
from tests.sessions._crash_app import (
    APP,
    QUESTION,
    USER,
    AppProcess,
    Checker,
    Outcome,
    run_app,
    start,
)
from tests.sessions._crash_app import finish as finish_app

SESSION = "s1"


def shape(event: SessionEvent) -> tuple[str, str]:
    """(author, what the event is) of a stored event."""
    m = event.message
    if m is None:
        interrupted = event.action is not None and event.action.interrupted is not None
        return event.author, "interrupt" if interrupted else f"no message, error={event.error}"
    if m.tool_calls:
        return event.author, "call " + ",".join(c.name for c in m.tool_calls)
    if m.role == "tool":
        return event.author, f"result of {m.tool_call_id[:1]}-call"
    return event.author, f"{m.role}: {m.content.split(' ')[0]}"


def ok(outcome: Outcome) -> Outcome:
    assert outcome.returncode == 0, outcome.stderr
    assert not outcome.of("busy")
    assert [e["error"] for e in outcome.of("event") if e["error"]] == []
    return outcome


async def wait_for_file(path: Path, proc: AppProcess) -> None:
    for _ in range(6000):
        if path.exists():
            return
        if proc.returncode is not None:
            break
        await asyncio.sleep(0.01)
    pytest.fail(f"{path.name} never came")


async def test_an_invocation_paused_in_one_process_continues_in_another(
    database_url: str,
) -> None:
    a = ok(await run_app(database_url, SESSION, "turn", "refund"))
    assert a.of("event")[-1]["interrupt"]
    async with DatabaseSessionService(database_url) as svc:
        paused = await svc.get_session(APP, USER, SESSION)
        assert paused is not None
        assert [shape(e) for e in paused.events] == [
            ("user", "user: refund"),
            ("desk", "call transfer_to_agent"),
            ("desk", "result of t-call"),
            ("billing", "call lookup"),
            ("billing", "result of l-call"),
            ("billing", "call refund"),
            ("billing", "interrupt"),
        ]
        invocation = paused.events[0].invocation_id
        assert {e.invocation_id for e in paused.events} == {invocation}
        assert paused.events[0].message.content == a.of("turn")[0]["token"]
        assert await svc.get_checkpoint(APP, USER, SESSION) is not None
        call = paused.events[5].message.tool_calls[0].id

        # Process B sends the tool's result: the invocation goes on under the same id.
        b = ok(await run_app(database_url, SESSION, "answer"))
        response = b.of("turn")[0]
        assert response["call"] == call
        resumed = await svc.get_session(APP, USER, SESSION)
        assert resumed is not None
        assert [e.id for e in resumed.events[:7]] == [e.id for e in paused.events]
        new = resumed.events[7:]
        assert [shape(e) for e in new] == [
            ("user", "result of r-call"),
            ("billing", "result of r-call"),
            ("billing", "assistant: done"),
        ]
        assert {e.invocation_id for e in new} == {invocation}
        assert new[0].message.content == new[1].message.content == response["token"]
        assert [e["content"] for e in b.of("event")] == [e.message.content for e in new[1:]]
        assert await svc.get_checkpoint(APP, USER, SESSION) is None  # the pause is consumed
        assert resumed.state["last_lookup"] == paused.events[4].message.content

        # Process C: the next text turn starts at billing, who spoke last (not at desk).
        c = ok(await run_app(database_url, SESSION, "turn", "ask"))
        final = await svc.get_session(APP, USER, SESSION)
        assert final is not None
        turn = final.events[10:]
        assert [shape(e) for e in turn] == [
            ("user", "user: ask"),
            ("billing", "call lookup"),
            ("billing", "result of l-call"),
            ("billing", "assistant: answer"),
        ]
        assert len({e.invocation_id for e in turn}) == 1
        assert turn[0].invocation_id != invocation
        # billing read both questions: the history of the turns of processes A and B.
        assert turn[-1].message.content.endswith(" seen=2")
        assert [e["content"] for e in c.of("event")] == [e.message.content for e in turn[1:]]
        assert final.state["last_lookup"] == turn[2].message.content


async def test_two_processes_taking_turns_on_one_session_never_interleave(
    database_url: str, tmp_path: Path
) -> None:
    turns = 10
    names = ["a", "b"]
    procs = [
        await start(
            database_url,
            SESSION,
            "turns",
            str(turns),
            seed=n,
            sleep=0.01,  # each model call and tool takes up to 10 ms: the turns overlap
            gap=0.06,  # longer than the lock's polling interval: the writers alternate
            signals=tmp_path,
            name=name,
        )
        for n, name in enumerate(names)
    ]
    for name, proc in zip(names, procs, strict=True):
        await wait_for_file(tmp_path / f"{name}.ready", proc)
    (tmp_path / "go").touch()  # both connected: they start their turns together
    outcomes = [ok(await finish_app(proc)) for proc in procs]
    for outcome in outcomes:
        assert [line["turns"] for line in outcome.of("end")] == [turns]

    async with Checker(database_url) as checker:
        report = await checker.check(SESSION, outcomes)
        assert report.problems() == []
        session = await checker.service.get_session(APP, USER, SESSION)
    assert session is not None
    events = session.events
    delivered = sum(len(o.of("event")) for o in outcomes)
    assert len(events) == 2 * turns + delivered  # each turn: its question, then its events

    # One block of events per invocation, beginning with its question.
    blocks: list[list[SessionEvent]] = []
    for event in events:
        if not blocks or blocks[-1][0].invocation_id != event.invocation_id:
            blocks.append([])
        blocks[-1].append(event)
    assert len(blocks) == 2 * turns
    assert len({b[0].invocation_id for b in blocks}) == 2 * turns
    for n, block in enumerate(blocks, 1):
        assert block[0].author == "user" and QUESTION.match(block[0].message.content)
        assert all(e.author != "user" for e in block[1:])
        # The model saw every question stored before, whichever process stored it.
        assert re.fullmatch(rf"answer [0-9a-f]{{32}} seen={n}", block[-1].message.content)

    # Each process's turns, in its order, with what it delivered, in storage.
    by_question = {b[0].message.content: b for b in blocks}
    for outcome in outcomes:
        turn_lines: list[list[dict[str, object]]] = []
        for line in outcome.lines:
            if line["kind"] == "turn":
                turn_lines.append([line])
            elif line["kind"] == "event":
                turn_lines[-1].append(line)
        starts = [blocks.index(by_question[t[0]["token"]]) for t in turn_lines]
        assert starts == sorted(starts)
        for t in turn_lines:
            stored = by_question[t[0]["token"]][1:]
            assert [line["content"] for line in t[1:]] == [e.message.content for e in stored]


async def test_a_turn_that_cannot_get_the_session_fails_busy_before_storing_anything(
    database_url: str, tmp_path: Path
) -> None:
    holder = await start(database_url, SESSION, "hold", "ask", signals=tmp_path)
    try:
        await wait_for_file(tmp_path / "held", holder)  # its question stored, in a model call
        other = await run_app(database_url, SESSION, "turn", "ask", lock_timeout=0.2)
        assert other.returncode == 0, other.stderr
        assert len(other.of("busy")) == 1 and "s1" in other.of("busy")[0]["error"]
        assert other.of("event") == []
        refused = other.of("turn")[0]["token"]
        async with DatabaseSessionService(database_url) as svc:
            during = await svc.get_session(APP, USER, SESSION)
            assert during is not None
            assert [e.author for e in during.events] == ["user"]
            assert refused not in {e.message.content for e in during.events}
            (tmp_path / "release").touch()
            held = ok(await finish_app(holder))
            after = await svc.get_session(APP, USER, SESSION)
        assert after is not None
        questions = [e.message.content for e in after.events if e.author == "user"]
        assert questions == [held.of("turn")[0]["token"]]
        assert len({e.invocation_id for e in after.events}) == 1
        assert after.events[-1].message.content.startswith("answer ")
    finally:
        if holder.returncode is None:
            holder.kill()
            await finish_app(holder)
