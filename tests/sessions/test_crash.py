"""Crash trials of the Runner's session mode, on SQLite and PostgreSQL: the app
(``tests/sessions/_crash_app.py``) is killed with SIGKILL at a random moment — in a model call,
a tool, a store — and the session is continued in a new process. Whatever the moment, the
session loads, no event the killed process delivered is lost, none is stored twice, none is
half-written, and the continuation works. ``python -m bench crash`` runs hundreds of trials.

Two crash points are pinned down deterministically as well: a kill in the middle of a tool
(the next turn answers the open call), and a kill of the process resuming a paused invocation
once it stored the resumed tool's result (the client answers again; nothing repeats in any
history).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.sessions._crash_app import APP, USER, Checker, Outcome, crash_trial, run_app, start
from tests.sessions._crash_app import finish as finish_app

TRIALS = 5


async def test_a_session_killed_at_random_moments_loses_nothing_and_continues(
    database_url: str,
) -> None:
    async with Checker(database_url) as checker:
        trials = await asyncio.gather(
            *(crash_trial(checker, f"trial-{seed}", seed, max_delay=0.5) for seed in range(TRIALS))
        )
    problems = {t.seed: t.problems() for t in trials if t.problems()}
    assert problems == {}
    # Every continuation ran a turn (a pause whose answer was stored is left with a new
    # message here; answering it again is a test below).
    assert all(t.continued.of("event") for t in trials)


async def _held(url: str, folder: Path, kind: str, hold_at: str) -> Outcome:
    """Run a turn that waits at ``hold_at``, SIGKILL it there; its outcome."""
    proc = await start(url, "s1", "hold", kind, signals=folder, hold_at=hold_at)
    try:
        for _ in range(6000):
            if (folder / "held").exists() or proc.returncode is not None:
                break
            await asyncio.sleep(0.01)
        if not (folder / "held").exists():
            pytest.fail("the app never reached the hold")
    finally:
        proc.kill()
    return await finish_app(proc)


async def test_a_crash_in_the_middle_of_a_tool_loses_nothing(
    database_url: str, tmp_path: Path
) -> None:
    killed = await _held(database_url, tmp_path, "ask", "lookup")
    assert killed.returncode == -signal.SIGKILL
    assert [e["calls"][0][0] for e in killed.of("event")[-1:]] == ["l"]  # the call delivered
    continued = await run_app(database_url, "s1", "continue")
    assert continued.returncode == 0, continued.stderr
    assert [e["error"] for e in continued.of("event") if e["error"]] == []
    async with Checker(database_url) as checker:
        report = await checker.check("s1", [killed, continued])
    assert report.problems() == []


async def test_after_a_crash_in_a_tool_no_model_sees_a_call_without_its_result(
    database_url: str, tmp_path: Path
) -> None:
    """The next turn answers the call the killed turn left open (stored, not delivered)."""
    killed = await _held(database_url, tmp_path, "ask", "lookup")
    call = killed.of("event")[-1]["calls"][0]
    continued = await run_app(database_url, "s1", "continue")
    assert continued.returncode == 0, continued.stderr
    assert continued.of("dangling") == []
    assert continued.of("repeated") == []
    async with Checker(database_url) as checker:
        session = await checker.service.get_session(APP, USER, "s1")
    assert session is not None
    closing = [e for e in session.events if e.message and e.message.tool_call_id == call]
    assert [(e.author, e.message.content[:19]) for e in closing] == [
        ("billing", "error: not complete")
    ]
    assert closing[0].invocation_id == session.events[0].invocation_id


@pytest.mark.parametrize(
    "died_after",
    [
        pytest.param("refunded ", id="after-the-tool-result"),
        pytest.param("done ", id="after-the-final-answer"),
    ],
)
async def test_answering_again_after_a_crash_in_the_resumed_invocation_repeats_nothing(
    database_url: str, died_after: str
) -> None:
    """The process resuming the invocation dies once it stored the resumed tool's result (the
    pause is consumed only after the last event): the client answers again, the step runs
    again (at least once), and a marker leaves the first attempt's events out of the
    histories -- no model ever sees a call answered twice."""
    paused = await run_app(database_url, "s1", "turn", "refund")
    assert paused.returncode == 0, paused.stderr
    died = await run_app(database_url, "s1", "answer", die_after=died_after)
    assert died.returncode == -signal.SIGKILL and died.of("event"), died.stderr
    retried = await run_app(database_url, "s1", "answer")  # the client never saw the end
    assert retried.returncode == 0, retried.stderr
    assert retried.of("stale_pause") and not retried.of("repeated")
    assert retried.of("event")[-1]["content"].startswith("done ")
    after = await run_app(database_url, "s1", "turn", "ask")
    assert after.returncode == 0, after.stderr
    assert after.of("repeated") == [] and after.of("dangling") == []
    async with Checker(database_url) as checker:
        report = await checker.check("s1", [paused, died, retried, after])
        assert report.problems() == []
        assert not report.paused
