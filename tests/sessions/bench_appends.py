"""How fast DatabaseSessionService appends, next to raw inserts of the same rows; how much a long
session takes on disk. Not a test (pytest does not collect it): run

    .venv/bin/python -m tests.sessions.bench_appends [--events N] [--rounds R]

It prints a Markdown table. Appends: ``append_event`` on a SQLite file (one transaction each:
the session row, the event row, the state upserts), against ``aiosqlite`` inserting the very
same event rows (bytes already encoded, one ``BEGIN IMMEDIATE`` ... ``COMMIT`` each) into the
same table with the same connection settings. With RELAYKIT_TEST_POSTGRES_URL set, the same on
PostgreSQL against raw ``asyncpg``. Storage: 200 turns of 6 events with ~200-byte messages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from relaykit import AgentAction, Message, ToolCall
from relaykit._db import SQLITE_BUSY_TIMEOUT_MS
from relaykit.codec import dumps
from relaykit.sessions import DatabaseSessionService, Session, SessionEvent
from relaykit.sessions._records import EVENT_FORMAT

TEXT = (
    "The order 1234 was shipped on Monday and should arrive within three working days; "
    "the customer asked whether the delivery address can still be changed to the office."
)


def turn_events(turn: int) -> list[SessionEvent]:
    """One turn: the user, a tool call, its result, a transfer, the answer, a final note."""
    call = ToolCall(f"call-{turn}", "lookup_order", '{"order_id": "1234"}')
    return [
        SessionEvent(author="user", message=Message.user(f"{turn}: {TEXT}")),
        SessionEvent(
            author="support",
            run_path=("root", "support"),
            message=Message.assistant(TEXT[:120], [call]),
        ),
        SessionEvent(
            author="support",
            run_path=("root", "support"),
            message=Message.tool(TEXT, tool_call_id=call.id, tool_name=call.name),
        ),
        SessionEvent(
            author="support",
            run_path=("root", "support"),
            action=AgentAction(custom={"handoff": "billing"}),
        ),
        SessionEvent(
            author="billing",
            run_path=("root", "billing"),
            message=Message.assistant(TEXT),
            state_delta={"last_order": "1234", "user:orders_seen": turn},
        ),
        SessionEvent(
            author="billing",
            run_path=("root", "billing"),
            message=Message.assistant(TEXT[:200]),
            state_delta={"temp:scratch": 1},
        ),
    ]


async def relaykit_appends(url: str, events: list[SessionEvent]) -> tuple[float, Session]:
    async with DatabaseSessionService(url) as service:
        session = await service.create_session("bench", "u1", uuid.uuid4().hex)
        await service.append_event(session, events[0])  # warm-up: connection, statement cache
        start = time.perf_counter()
        for event in events:
            await service.append_event(session, event)
        elapsed = time.perf_counter() - start
    return elapsed, session


def rows_of(events: list[SessionEvent]) -> list[tuple[str, bytes]]:
    """The event rows as the service writes them: (event id, codec document)."""
    out = []
    for event in events:
        stored = dataclasses.replace(event, id=uuid.uuid4().hex, timestamp=time.time())
        out.append((stored.id, dumps(stored, kind=EVENT_FORMAT)))
    return out


async def raw_sqlite_inserts(path: Path, rows: list[tuple[str, bytes]], session_pk: int) -> float:
    import aiosqlite

    async with aiosqlite.connect(path, isolation_level=None) as db:
        await db.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        await db.execute("PRAGMA journal_mode=WAL")
        start = time.perf_counter()
        for seq, (event_id, data) in enumerate(rows, 1):
            await db.execute("BEGIN IMMEDIATE")
            await db.execute(
                "INSERT INTO relaykit_session_events (session_pk, seq, event_id, "
                "data) VALUES (?, ?, ?, ?)",
                (session_pk, seq, event_id, data),
            )
            await db.execute("COMMIT")
        return time.perf_counter() - start


async def raw_postgres_inserts(url: str, rows: list[tuple[str, bytes]], session_pk: int) -> float:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        statement = await conn.prepare(
            "INSERT INTO relaykit_session_events (session_pk, seq, "
            "event_id, data) VALUES ($1, $2, $3, $4)"
        )
        start = time.perf_counter()
        for seq, (event_id, data) in enumerate(rows, 1):
            async with conn.transaction():
                await statement.fetch(session_pk, seq, event_id, data)
        return time.perf_counter() - start
    finally:
        await conn.close()


def sqlite_bytes(path: Path) -> int:
    """The file's size once the WAL is folded in."""
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


async def compare(
    url: str, raw: Any, events: list[SessionEvent], rounds: int
) -> tuple[float, float]:
    """Median appends/s of relaykit and of the raw inserts, over rounds that alternate the two
    (a machine's load changes within a run; alternating exposes both to it alike)."""
    rows = rows_of(events)
    relaykit_rates, raw_rates = [], []
    for n in range(rounds):
        relaykit_s, _ = await relaykit_appends(url, events)
        # A session key of its own for the raw rows (the table is the service's).
        raw_s = await raw(rows, 10**9 + n)
        relaykit_rates.append(len(events) / relaykit_s)
        raw_rates.append(len(events) / raw_s)
    return statistics.median(relaykit_rates), statistics.median(raw_rates)


def row(backend: str, relaykit_rate: float, raw_rate: float) -> str:
    return (
        f"| {backend} | {relaykit_rate:,.0f} | {raw_rate:,.0f} | {raw_rate / relaykit_rate:.2f}x |"
    )


async def main(count: int, rounds: int) -> None:
    events = [e for turn in range((count + 5) // 6) for e in turn_events(turn)][:count]
    lines = [
        "| backend | relaykit appends/s | raw inserts/s | ratio (raw / relaykit) |",
        "|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.db"
        rates = await compare(
            f"sqlite+aiosqlite:///{path}",
            lambda rows, pk: raw_sqlite_inserts(path, rows, pk),
            events,
            rounds,
        )
        lines.append(row("SQLite file", *rates))

        storage = Path(folder) / "storage.db"
        async with DatabaseSessionService(f"sqlite+aiosqlite:///{storage}") as service:
            await service.open()
        empty = sqlite_bytes(storage)
        _, session = await relaykit_appends(
            f"sqlite+aiosqlite:///{storage}", [e for turn in range(200) for e in turn_events(turn)]
        )
        used = sqlite_bytes(storage) - empty
    postgres = os.environ.get("RELAYKIT_TEST_POSTGRES_URL")
    if postgres:
        async with scratch_postgres_database(postgres) as url:
            rates = await compare(
                url, lambda rows, pk: raw_postgres_inserts(url, rows, pk), events, rounds
            )
        lines.append(row("PostgreSQL", *rates))
    stored = len(session.events)
    lines += [
        "",
        f"{rounds} rounds of {count} events each, medians. Storage, SQLite: {stored} "
        f"events (200 turns x 6, ~200-byte messages) take {used:,} bytes "
        f"({used / stored:,.0f} bytes an event, {used / 2**20:.2f} MiB) beyond an empty "
        "database.",
    ]
    print("\n".join(lines))


@contextlib.asynccontextmanager
async def scratch_postgres_database(url: str) -> AsyncIterator[str]:
    """A fresh database next to the one ``url`` names, dropped afterwards."""
    import asyncpg

    name = f"rk_bench_{uuid.uuid4().hex[:12]}"
    admin: Any = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield sa.make_url(url).set(database=name).render_as_string(hide_password=False)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1000, help="appends per round")
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.events, arguments.rounds))
