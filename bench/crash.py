"""Crash trials: the Runner's session mode killed with SIGKILL at random moments.

For each backend (a fresh SQLite file; a fresh PostgreSQL database when
``RELAYKIT_TEST_POSTGRES_URL`` is set), N trials, a few at a time, each on a session of its own:
the app of ``tests/sessions/_crash_app.py`` (two agents, a transfer, a tool that writes a
session value, a long-running tool that pauses the invocation; models and tools that take 0 to
30 ms) runs turns until it is killed after a random delay — in a model call, a tool, a store,
between a store and its delivery — then a new process continues the session (answers the pause,
else a new turn). Each trial checks, after the kill and after the continuation: the session
loads; every event the killed process delivered is stored (lost); no event is stored twice
(duplicated); every stored row is whole and the stored state matches the stored deltas
(half-written); each invocation's events are one block (interleaved); the continuation ends
with an answer, without error events, and its models never see a call without its result
or with two.

``python -m bench.crash [TRIALS]`` (default 300 per backend); ``python -m bench crash`` writes
bench/results/crash.md.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import tempfile
import time
import uuid
from typing import Any

from tests.sessions._crash_app import Checker, ForkServer, Trial, crash_trial

TRIALS = 300
#: Trials running at the same time (each on its own session of the one database).
CONCURRENCY = 4
#: The kill comes 0 to MAX_DELAY seconds after the app is ready.
MAX_DELAY = 0.8
#: How the new process continues a pause whose answer was stored (``pending_refund``), and
#: the share of the trials run that way.
POLICIES = [("new message", False, 1.0), ("retry", True, 0.5)]


async def trials(url: str, count: int, *, retry: bool = False) -> tuple[list[Trial], float]:
    gate = asyncio.Semaphore(CONCURRENCY)
    prefix = "retry" if retry else "trial"
    first = 100_000 if retry else 0  # other seeds: other delays and latencies

    async def one(checker: Checker, seed: int) -> Trial:
        async with gate:
            return await crash_trial(
                checker, f"{prefix}-{seed}", seed, max_delay=MAX_DELAY, retry_stale=retry
            )

    t0 = time.perf_counter()
    async with Checker(url) as checker:
        done = await asyncio.gather(*(one(checker, seed) for seed in range(first, first + count)))
    return list(done), time.perf_counter() - t0


def summary(backend: str, policy: str, done: list[Trial], seconds: float) -> dict[str, Any]:
    def count(what: str) -> int:
        return sum(
            len(getattr(t.after_kill, what)) + len(getattr(t.after_continue, what)) for t in done
        )

    cont_failures = sum(
        1
        for t in done
        if any(p.startswith(("the continuation", "still paused")) for p in t.problems())
    )
    return {
        "backend": backend,
        "policy": policy,
        "trials": len(done),
        "seconds": seconds,
        "delivered": sum(t.after_kill.delivered for t in done),
        "lost": count("lost"),
        "duplicated": count("duplicated"),
        "load_failures": sum(
            1 for t in done if t.after_kill.load_error or t.after_continue.load_error
        ),
        "half_written": count("half_written"),
        "interleaved": count("interleaved"),
        "continuation_failures": cont_failures,
        "failed_trials": [t for t in done if t.problems()],
        "duplicated_trials": sum(
            1 for t in done if t.after_kill.duplicated or t.after_continue.duplicated
        ),
        "paused_at_kill": sum(1 for t in done if t.after_kill.paused),
        "undelivered": sum(t.undelivered for t in done),
        "stale": collections.Counter(t.stale for t in done if t.stale),
        "dangling": sum(1 for t in done if t.dangling),
        "repeated": sum(1 for t in done if t.continued.of("repeated")),
        "rechecked": sum(1 for t in done if t.rechecks),
        "phases": collections.Counter(t.phase for t in done),
    }


async def _fresh_postgres(base: str) -> tuple[str, Any]:
    """A fresh database next to the one ``base`` names; returns its URL and a dropper."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    name = f"rk_crash_{uuid.uuid4().hex[:10]}"
    admin = create_async_engine(base, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(base).set(database=name).render_as_string(hide_password=False)

    async def drop() -> None:
        async with admin.connect() as conn:
            await conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()

    return url, drop


def _print(results: list[dict[str, Any]], count: int, postgres: bool) -> None:
    print(f"# Crash trials: SIGKILL at random moments, {count} trials per backend\n")
    print(
        f"Python {sys.version.split()[0]}; {CONCURRENCY} trials at a time, each on its own "
        f"session of one database; the kill 0 to {MAX_DELAY} s after the app is ready; the "
        "models and tools take 0, 0-2, 0-10 or 0-30 ms (per trial). Each trial is checked "
        "after the kill and again after a new process continued the session.\n"
    )
    print(
        "How the new process continues a session still paused although the paused call was "
        "answered (the killed process was resuming it): **new message** — it sends a new "
        "question, which abandons the pause (a pause whose answer alone was stored is answered "
        "again); **retry** — it sends the tool response again: the resumed step runs again "
        "(at least once) and the Runner's marker leaves the first attempt's events out of the "
        "histories, so they do not count as duplicated. Every count must be 0.\n"
    )
    print(
        "Lost: events the killed process delivered that are not stored. Duplicated: events "
        "stored twice (same id; same invocation, author and message; a second result for a "
        "call; a second final answer or interrupt in an invocation). Half-written: rows that "
        "disagree with the session's row, events that are not whole, state that is not the "
        "stored deltas'. Interleaved: an invocation whose events are not one block that "
        "begins with the user's. Each is counted per finding, after the kill and after the "
        "continuation.\n"
    )
    print(
        "| backend | continuation | trials | events delivered before the kill | lost | "
        "duplicated | load failures | half-written | interleaved | failed continuations | "
        "seconds |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['backend']} | {r['policy']} | {r['trials']} | {r['delivered']} | "
            f"{r['lost']} | {r['duplicated']} (in {r['duplicated_trials']} trials) | "
            f"{r['load_failures']} | {r['half_written']} | "
            f"{r['interleaved']} | {r['continuation_failures']} | {r['seconds']:.0f} |"
        )
    print("\nWhat the kills left (trials):\n")
    print(
        "| backend | continuation | paused | events stored, not yet delivered | pause with "
        "its answer stored: user's response / tool result / final answer | model saw a call "
        "without its result | model saw a call answered twice |"
    )
    print("|---|---|---:|---:|---|---:|---:|")
    for r in results:
        stale = r["stale"]
        print(
            f"| {r['backend']} | {r['policy']} | {r['paused_at_kill']} | {r['undelivered']} | "
            f"{stale['response']} / {stale['resumed']} / {stale['finished']} | "
            f"{r['dangling']} | {r['repeated']} |"
        )
    phases = sorted({p for r in results for p in r["phases"]})
    print("\nWhere the kills landed (what the killed process printed last):\n")
    heads = [f"{r['backend']}, {r['policy']}" for r in results]
    print("| last line before the kill | " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * len(results))
    for phase in phases:
        print(f"| {phase} | " + " | ".join(str(r["phases"][phase]) for r in results) + " |")
    print(
        "\nAfter a kill, a COMMIT the killed client had sent may still complete on the "
        "server: the check is repeated until the session's row and its event rows agree "
        "(trials where that happened: "
        + ", ".join(f"{r['backend']} {r['policy']}: {r['rechecked']}" for r in results)
        + "). A disagreement that stays is counted as half-written."
    )
    print(
        "\nThe last two columns must be 0: the next turn answers a call a killed turn left "
        "open, and a retried continuation's marker keeps the first attempt's results out of "
        "the histories (tests/sessions/test_crash.py pins both)."
    )
    for r in results:
        for t in r["failed_trials"][:3]:
            print(
                f"\n{r['backend']}, {r['policy']}, trial {t.seed}: "
                + "; ".join(t.problems())[:1500]
            )
    if not postgres:
        print("\nPostgreSQL skipped: set RELAYKIT_TEST_POSTGRES_URL to include it.")


async def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else TRIALS
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite+aiosqlite:///{tmp}/crash.db"
            for policy, retry, n in POLICIES:
                done, seconds = await trials(url, int(count * n), retry=retry)
                results.append(summary("SQLite (file)", policy, done, seconds))
        pg = os.environ.get("RELAYKIT_TEST_POSTGRES_URL")
        if pg:
            url, drop = await _fresh_postgres(pg)
            try:
                for policy, retry, n in POLICIES:
                    done, seconds = await trials(url, int(count * n), retry=retry)
                    results.append(summary("PostgreSQL", policy, done, seconds))
            finally:
                await drop()
    finally:
        ForkServer.close()
    _print(results, count, bool(pg))


if __name__ == "__main__":
    asyncio.run(main())
