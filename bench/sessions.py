"""Durable sessions: append throughput against the raw driver, storage, cold loads, per turn.

1. Append throughput of ``DatabaseSessionService`` (SQLite file; PostgreSQL when reachable)
   against the same rows — the same encoded bytes — inserted by the same async driver, one
   transaction per event, into an equivalent plain table.
2. Storage: the SQLite file after a 200-turn session.
3. Cold load: a new service (new engine) loading sessions of 50, 200 and 1,000 turns with
   ``load_history``, before and after a compaction summary is appended.
4. Peers (``bench/peers_sessions.py``, each in its own process) and relaykit's session mode:
   time per turn of one 200-turn conversation kept on a SQLite file.

The events of a turn are those of bench/turns.py's workload: the user's question, A's
``transfer_to_agent`` call and its result, B's ``get_weather`` call and its result (with a
state write), B's answer.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import pathlib
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any

import relaykit as rk
from bench import peers_sessions
from bench.peers_sessions import Clock
from bench.turns import check, get_weather, script_a, script_b
from relaykit import AgentAction, Message, SessionEvent, ToolCall
from relaykit import _db as relaykit_db
from relaykit.codec import dumps
from relaykit.errors import ConfigurationError
from relaykit.events import TransferToAgentAction
from relaykit.sessions._records import EVENT_FORMAT, STATE_FORMAT, prepare_append
from relaykit.sessions.base import Session
from relaykit.sessions.database import DatabaseSessionService

TURNS = 200
APPEND_TURNS = 200  # 1,200 events per throughput run
REPEATS = 5  # throughput runs per backend (median reported), alternating relaykit and raw
LOAD_TURNS = (50, 200, 1_000)
LOAD_REPEATS = 5
KEPT_TURNS = 5  # turns a compaction summary leaves uncovered
COUNTED_TURNS = 10  # session-mode turns whose driver calls are counted
APP, USER = "bench", "u"
PG_DEFAULT = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
SUMMARY = (
    "The user asked about the weather in Paris {n} times; agent_a transferred each question "
    "to agent_b, which called get_weather(city='Paris') and answered that it is sunny in Paris."
)


# -- the events of a turn --------------------------------------------------------------------
def turn_events(n: int) -> list[SessionEvent]:
    """The six events of turn ``n`` (ids and timestamps left for the service to set)."""
    inv = f"inv-{n}"
    a = ("agent_a",)
    ab = ("agent_a", "agent_b")
    transfer = ToolCall(f"a{n}", "transfer_to_agent", '{"agent_name": "agent_b"}')
    weather = ToolCall(f"b{n}", "get_weather", '{"city": "Paris"}')
    return [
        SessionEvent(invocation_id=inv, author="user", message=Message.user("weather in Paris?")),
        SessionEvent(
            invocation_id=inv,
            author="agent_a",
            run_path=a,
            message=Message.assistant("", [transfer]),
        ),
        SessionEvent(
            invocation_id=inv,
            author="agent_a",
            run_path=a,
            message=Message.tool(
                "successfully transferred to agent [agent_b]",
                tool_call_id=f"a{n}",
                tool_name="transfer_to_agent",
            ),
            action=AgentAction(transfer_to_agent=TransferToAgentAction("agent_b")),
        ),
        SessionEvent(
            invocation_id=inv,
            author="agent_b",
            run_path=ab,
            message=Message.assistant("", [weather]),
        ),
        SessionEvent(
            invocation_id=inv,
            author="agent_b",
            run_path=ab,
            message=Message.tool(
                "It is sunny in Paris.", tool_call_id=f"b{n}", tool_name="get_weather"
            ),
            state_delta={"last_city": "Paris", "user:questions": n + 1},
        ),
        SessionEvent(
            invocation_id=inv,
            author="agent_b",
            run_path=ab,
            message=Message.assistant("It is sunny in Paris."),
        ),
    ]


def conversation(turns: int) -> list[SessionEvent]:
    return [event for n in range(turns) for event in turn_events(n)]


@dataclass(frozen=True, slots=True)
class RawRow:
    """One event as the raw baseline inserts it: the bytes relaykit would store."""

    event_id: str
    data: bytes
    state: list[tuple[str, bytes]]


def raw_rows(events: list[SessionEvent]) -> list[RawRow]:
    """Each event encoded exactly as ``append_event`` encodes it (id and timestamp set)."""
    rows = []
    for event in events:
        stored = replace(event, id=uuid.uuid4().hex, timestamp=time.time())
        state = [(k, dumps(v, kind=STATE_FORMAT)) for k, v in sorted(event.state_delta.items())]
        rows.append(RawRow(stored.id, dumps(stored, kind=EVENT_FORMAT), state))
    return rows


# -- 1. append throughput ----------------------------------------------------------------------
async def relaykit_appends(
    url: str, events: list[SessionEvent], session_id: str, on_start: Callable[[], Any] = list
) -> float:
    """Seconds to append ``events`` one by one (schema created before the clock starts;
    ``on_start`` is called as it starts)."""
    svc = DatabaseSessionService(url)
    try:
        await svc.open()
        session = await svc.create_session(APP, USER, session_id)
        on_start()
        t0 = time.perf_counter()
        for event in events:
            await svc.append_event(session, event)
        return time.perf_counter() - t0
    finally:
        await svc.aclose()


async def memory_appends(events: list[SessionEvent]) -> float:
    svc = rk.InMemorySessionService()
    session = await svc.create_session(APP, USER, "s")
    t0 = time.perf_counter()
    for event in events:
        await svc.append_event(session, event)
    return time.perf_counter() - t0


def prepare_seconds(events: list[SessionEvent]) -> float:
    """Seconds of ``prepare_append`` alone (validate, encode, load back): no I/O."""
    session = Session(APP, USER, "s")
    t0 = time.perf_counter()
    for event in events:
        prepare_append(session, event)
    return time.perf_counter() - t0


RAW_SQLITE_SCHEMA = (
    "CREATE TABLE sessions (pk INTEGER PRIMARY KEY, session_key BLOB NOT NULL UNIQUE, "
    "last_seq INTEGER NOT NULL, last_update_time REAL NOT NULL)",
    "CREATE TABLE events (session_pk INTEGER NOT NULL, seq INTEGER NOT NULL, "
    "event_id TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (session_pk, seq))",
    "CREATE TABLE state (owner BLOB NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, "
    "PRIMARY KEY (owner, key))",
)
OWNER = b"\x01" * 32


async def raw_sqlite_appends(
    path: pathlib.Path,
    rows: list[RawRow],
    bump: bool,
    on_start: Callable[[], Any] = list,
    synchronous: str = "FULL",
) -> float:
    """aiosqlite, WAL, busy timeout, BEGIN IMMEDIATE / INSERT (+ state upserts) / COMMIT.

    With ``bump``, each transaction first counts the event in on a session row (``UPDATE ...
    RETURNING``), as relaykit's append does.
    """
    import aiosqlite

    db = await aiosqlite.connect(path, isolation_level=None)
    try:
        await db.execute("PRAGMA busy_timeout=5000")
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute(f"PRAGMA synchronous={synchronous}")
        for ddl in RAW_SQLITE_SCHEMA:
            await db.execute(ddl)
        await db.execute("INSERT INTO sessions VALUES (1, ?, 0, 0)", (OWNER,))
        on_start()
        t0 = time.perf_counter()
        for seq, row in enumerate(rows, 1):
            pk = 1
            await db.execute("BEGIN IMMEDIATE")
            if bump:
                ((pk, seq),) = await db.execute_fetchall(
                    "UPDATE sessions SET last_seq = last_seq + 1, last_update_time = ? "
                    "WHERE session_key = ? RETURNING pk, last_seq",
                    (time.time(), OWNER),
                )
            await db.execute(
                "INSERT INTO events (session_pk, seq, event_id, data) VALUES (?, ?, ?, ?)",
                (pk, seq, row.event_id, row.data),
            )
            for key, value in row.state:
                await db.execute(
                    "INSERT INTO state (owner, key, value) VALUES (?, ?, ?) "
                    "ON CONFLICT (owner, key) DO UPDATE SET value = excluded.value",
                    (OWNER, key, value),
                )
            await db.commit()
        return time.perf_counter() - t0
    finally:
        await db.close()


async def raw_sqlite3_appends(path: pathlib.Path, rows: list[RawRow], synchronous: str) -> float:
    """sqlite3 on one worker thread, each event's whole transaction (session-row bump, insert,
    upserts, commit) in one call to that thread: one thread round trip per event."""
    import concurrent.futures

    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()

    def setup() -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        for ddl in RAW_SQLITE_SCHEMA:
            conn.execute(ddl)
        conn.execute("INSERT INTO sessions VALUES (1, ?, 0, 0)", (OWNER,))
        return conn

    def append(conn: sqlite3.Connection, row: RawRow) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            ((pk, seq),) = conn.execute(
                "UPDATE sessions SET last_seq = last_seq + 1, last_update_time = ? "
                "WHERE session_key = ? RETURNING pk, last_seq",
                (time.time(), OWNER),
            ).fetchall()
            conn.execute(
                "INSERT INTO events (session_pk, seq, event_id, data) VALUES (?, ?, ?, ?)",
                (pk, seq, row.event_id, row.data),
            )
            for key, value in row.state:
                conn.execute(
                    "INSERT INTO state (owner, key, value) VALUES (?, ?, ?) "
                    "ON CONFLICT (owner, key) DO UPDATE SET value = excluded.value",
                    (OWNER, key, value),
                )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    try:
        conn = await loop.run_in_executor(executor, setup)
        try:
            t0 = time.perf_counter()
            for row in rows:
                await loop.run_in_executor(executor, append, conn, row)
            return time.perf_counter() - t0
        finally:
            await loop.run_in_executor(executor, conn.close)
    finally:
        executor.shutdown()


async def raw_pg_appends(dsn: str, rows: list[RawRow], table: str, bump: bool) -> float:
    """asyncpg, one connection, ``async with conn.transaction()`` per event (``bump``: as
    ``raw_sqlite_appends``)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f"CREATE TABLE {table}_sessions (pk BIGINT PRIMARY KEY, session_key BYTEA NOT NULL "
            "UNIQUE, last_seq INTEGER NOT NULL, last_update_time DOUBLE PRECISION NOT NULL)"
        )
        await conn.execute(f"INSERT INTO {table}_sessions VALUES (1, $1, 0, 0)", OWNER)
        await conn.execute(
            f"CREATE TABLE {table}_events (session_pk BIGINT NOT NULL, seq INTEGER NOT NULL, "
            "event_id TEXT NOT NULL, data BYTEA NOT NULL, PRIMARY KEY (session_pk, seq))"
        )
        await conn.execute(
            f"CREATE TABLE {table}_state (owner BYTEA NOT NULL, key TEXT NOT NULL, "
            "value BYTEA NOT NULL, PRIMARY KEY (owner, key))"
        )
        bump_sql = (
            f"UPDATE {table}_sessions SET last_seq = last_seq + 1, last_update_time = $1 "
            "WHERE session_key = $2 RETURNING pk, last_seq"
        )
        insert = f"INSERT INTO {table}_events VALUES ($1, $2, $3, $4)"
        upsert = (
            f"INSERT INTO {table}_state VALUES ($1, $2, $3) "
            "ON CONFLICT (owner, key) DO UPDATE SET value = excluded.value"
        )
        t0 = time.perf_counter()
        for seq, row in enumerate(rows, 1):
            pk = 1
            async with conn.transaction():
                if bump:
                    pk, seq = await conn.fetchrow(bump_sql, time.time(), OWNER)
                await conn.execute(insert, pk, seq, row.event_id, row.data)
                for key, value in row.state:
                    await conn.execute(upsert, OWNER, key, value)
        return time.perf_counter() - t0
    finally:
        await conn.close()


@contextlib.contextmanager
def counting_driver_calls() -> Iterator[collections.Counter[str]]:
    """Count the calls that aiosqlite hands to its connection thread (one hop each)."""
    import aiosqlite.core

    calls: collections.Counter[str] = collections.Counter()
    original = aiosqlite.core.Connection._execute

    async def counted(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        calls[getattr(fn, "__name__", "?")] += 1
        return await original(self, fn, *args, **kwargs)

    aiosqlite.core.Connection._execute = counted  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        aiosqlite.core.Connection._execute = original  # type: ignore[method-assign]


def sqlite_bytes(path: pathlib.Path) -> tuple[int, int]:
    """(database file, WAL) bytes after a full checkpoint."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size, wal.stat().st_size if wal.exists() else 0


@dataclass
class Throughput:
    backend: str
    n: int
    relaykit: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    raw_bump: list[float] = field(default_factory=list)
    #: sqlite3, bump included, one worker-thread call per event (SQLite only).
    raw_one_call: list[float] = field(default_factory=list)
    #: aiosqlite thread hand-offs per event: relaykit, raw, raw + bump (SQLite only).
    calls: tuple[float, float, float] | None = None

    def row(self) -> str:
        rk_eps, raw_eps, bump_eps = (
            self.n / statistics.median(t) for t in (self.relaykit, self.raw, self.raw_bump)
        )
        ratio = raw_eps / rk_eps
        calls = (
            " / ".join(
                f"{c:.2f}" if c >= 0.5 else "n/a (not through aiosqlite)" for c in self.calls
            )
            if self.calls
            else "–"
        )
        return (
            f"| {self.backend} | {rk_eps:,.0f} | {raw_eps:,.0f} | {bump_eps:,.0f} | "
            f"{1e3 / rk_eps:.3f} | {1e3 / raw_eps:.3f} | {1e3 / bump_eps:.3f} | "
            f"{ratio:.2f}× ({'yes' if ratio <= 3 else '**no**'}) | {bump_eps / rk_eps:.2f}× | "
            f"{calls} |"
        )


def sqlite_synchronous_settings() -> list[str]:
    """relaykit's ``PRAGMA synchronous`` first, then FULL if that differs and can be chosen."""
    default = getattr(relaykit_db, "SQLITE_SYNCHRONOUS", "FULL")
    return [default] if default == "FULL" else [default, "FULL"]


@contextlib.contextmanager
def relaykit_synchronous(value: str) -> Iterator[None]:
    """relaykit's SQLite connections opened inside the block use ``PRAGMA synchronous=value``
    (what ``RELAYKIT_SQLITE_SYNCHRONOUS`` chooses for a whole process)."""
    if not hasattr(relaykit_db, "SQLITE_SYNCHRONOUS"):
        yield  # a build that always leaves SQLite's default (FULL)
        return
    saved = relaykit_db.SQLITE_SYNCHRONOUS
    relaykit_db.SQLITE_SYNCHRONOUS = value
    try:
        yield
    finally:
        relaykit_db.SQLITE_SYNCHRONOUS = saved


async def sqlite_throughput(tmp: pathlib.Path, sync: str) -> tuple[Throughput, dict[str, Any]]:
    """relaykit, raw and raw + bump with ``PRAGMA synchronous=sync`` on every connection."""
    events = conversation(APPEND_TURNS)
    rows = raw_rows(events)
    result = Throughput(f"SQLite file, synchronous={sync}", len(events))
    sizes: dict[str, Any] = {}
    tmp = tmp / f"appends-{sync}"
    tmp.mkdir()
    for i in range(REPEATS):
        rk_db, raw_db, bump_db = tmp / f"rk-{i}.db", tmp / f"raw-{i}.db", tmp / f"bump-{i}.db"
        with relaykit_synchronous(sync):
            result.relaykit.append(await relaykit_appends(sqlite_url(rk_db), events, "s"))
        result.raw.append(await raw_sqlite_appends(raw_db, rows, False, synchronous=sync))
        result.raw_bump.append(await raw_sqlite_appends(bump_db, rows, True, synchronous=sync))
        one_db = tmp / f"one-call-{i}.db"
        result.raw_one_call.append(await raw_sqlite3_appends(one_db, rows, sync))
        sizes = {"relaykit": sqlite_bytes(rk_db), "raw": sqlite_bytes(raw_db)}
    with sqlite3.connect(tmp / f"rk-{REPEATS - 1}.db") as conn:
        sizes["data"] = conn.execute(
            "SELECT count(*), sum(length(data)) FROM relaykit_session_events"
        ).fetchone()
    conn.close()
    # Untimed passes that count the driver's thread hand-offs per event.
    counts = []
    with counting_driver_calls() as calls, relaykit_synchronous(sync):
        for run in (
            lambda: relaykit_appends(sqlite_url(tmp / "c-rk.db"), events, "s", calls.clear),
            lambda: raw_sqlite_appends(tmp / "c-raw.db", rows, False, calls.clear, sync),
            lambda: raw_sqlite_appends(tmp / "c-bump.db", rows, True, calls.clear, sync),
        ):
            await run()
            counts.append(calls.total() / len(events))
    result.calls = (counts[0], counts[1], counts[2])
    return result, sizes


def sqlite_url(path: pathlib.Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def asyncpg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def pg_reachable(url: str) -> str | None:
    """None if PostgreSQL answers at ``url``, else why not."""
    try:
        import asyncpg
    except ImportError:
        return "asyncpg not installed (pip install -e '.[postgres]')"
    try:
        conn = await asyncio.wait_for(asyncpg.connect(asyncpg_dsn(url)), 5)
    except Exception as exc:
        return f"not reachable at {url} ({type(exc).__name__})"
    await conn.close()
    return None


async def pg_throughput(url: str) -> tuple[Throughput, str]:
    """Relaykit and raw appends in a fresh database next to the one ``url`` names."""
    import asyncpg
    import sqlalchemy as sa

    name = f"rk_bench_sessions_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(asyncpg_dsn(url))
    version = await admin.fetchval("SHOW server_version")
    await admin.execute(f'CREATE DATABASE "{name}"')
    fresh = sa.make_url(url).set(database=name).render_as_string(hide_password=False)
    events = conversation(APPEND_TURNS)
    rows = raw_rows(events)
    result = Throughput("PostgreSQL (asyncpg)", len(events))
    dsn = asyncpg_dsn(fresh)
    try:
        for i in range(REPEATS):
            result.relaykit.append(await relaykit_appends(fresh, events, f"s{i}"))
            result.raw.append(await raw_pg_appends(dsn, rows, f"raw{i}", bump=False))
            result.raw_bump.append(await raw_pg_appends(dsn, rows, f"bump{i}", bump=True))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    return result, version


# -- 3. cold loads -------------------------------------------------------------------------
async def build_sessions(url: str) -> dict[int, list[SessionEvent]]:
    """Sessions ``t<turns>`` of every length in LOAD_TURNS; their stored events."""
    svc = DatabaseSessionService(url)
    stored: dict[int, list[SessionEvent]] = {}
    try:
        for turns in LOAD_TURNS:
            session = await svc.create_session(APP, USER, f"t{turns}")
            stored[turns] = [await svc.append_event(session, e) for e in conversation(turns)]
    finally:
        await svc.aclose()
    return stored


async def append_summaries(url: str, stored: dict[int, list[SessionEvent]]) -> None:
    """A compaction summary per session, covering every event but the last KEPT_TURNS turns'."""
    svc = DatabaseSessionService(url)
    try:
        for turns, events in stored.items():
            session = await svc.get_session(APP, USER, f"t{turns}")
            assert session is not None
            end = events[-6 * KEPT_TURNS - 1]
            summary = SessionEvent(
                invocation_id="compaction",
                author="agent_a",
                message=Message.assistant(SUMMARY.format(n=turns - KEPT_TURNS)),
                action=AgentAction(custom={"compaction": {"start": events[0].id, "end": end.id}}),
            )
            await svc.append_event(session, summary)
    finally:
        await svc.aclose()


async def cold_load(url: str, session_id: str) -> tuple[float, float, int]:
    """(cold s, warm s, events): a new service's first ``load_history``, then its second."""
    t0 = time.perf_counter()
    svc = DatabaseSessionService(url)
    try:
        events = await svc.load_history(APP, USER, session_id)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        await svc.load_history(APP, USER, session_id)
        warm = time.perf_counter() - t0
    finally:
        await svc.aclose()
    return cold, warm, len(events)


async def cold_loads(tmp: pathlib.Path) -> list[str]:
    url = sqlite_url(tmp / "loads.db")
    stored = await build_sessions(url)
    results: dict[tuple[int, bool], tuple[float, float, int]] = {}
    for compacted in (False, True):
        if compacted:
            await append_summaries(url, stored)
        for turns in LOAD_TURNS:
            runs = [await cold_load(url, f"t{turns}") for _ in range(LOAD_REPEATS)]
            results[turns, compacted] = (
                statistics.median(r[0] for r in runs),
                statistics.median(r[1] for r in runs),
                runs[0][2],
            )
    rows = []
    for turns in LOAD_TURNS:
        full, compact = results[turns, False], results[turns, True]
        rows.append(
            f"| {turns:,} ({len(stored[turns]):,} events) | {full[2]:,} | {full[0] * 1e3:.1f} | "
            f"{full[1] * 1e3:.1f} | {compact[2]:,} | {compact[0] * 1e3:.1f} | "
            f"{compact[1] * 1e3:.1f} |"
        )
    return rows


# -- 4 and 5. per turn: relaykit's session mode and the peers -------------------------------
@dataclass
class TurnRow:
    label: str
    times: list[float] | None  # wall seconds per turn; None: not measured (see note)
    cpu: list[float] | None = None  # process CPU seconds per turn
    db_bytes: int | None = None
    note: str = ""

    def mean(self) -> float:
        assert self.times is not None
        return statistics.mean(self.times)

    def cells(self, fastest: float | None) -> str:
        if self.times is None:
            return f"| {self.label} | {self.note} | | | | | | | |"
        ms = [t * 1e3 for t in self.times]
        first, last = statistics.mean(ms[:20]), statistics.mean(ms[-20:])
        size = f"{self.db_bytes / 2**20:.2f}" if self.db_bytes is not None else "–"
        ratio = f"{self.mean() / fastest:.3f}" if fastest else "–"
        cpu = f"{statistics.mean(self.cpu) * 1e3:.3f}" if self.cpu else "–"
        return (
            f"| {self.label} | {statistics.mean(ms):.3f} | {statistics.median(ms):.3f} | "
            f"{first:.3f} | {last:.3f} | {last / first:.2f}× | {cpu} | {size} | {ratio} |"
        )


def session_runner(svc: Any) -> rk.Runner:
    """bench/turns.py's two agents, in session mode on ``svc`` (ConfigurationError if the
    Runner has no session mode in this build)."""
    model_a = rk.ScriptedModel(script_a(), record_requests=False)
    model_b = rk.ScriptedModel(script_b(), record_requests=False)
    a = rk.ChatModelAgent("agent_a", "routes questions", "Route the question.", model=model_a)
    b = rk.ChatModelAgent(
        "agent_b",
        "knows the weather",
        "Answer weather questions.",
        model=model_b,
        tools=[get_weather],
    )
    # B may not transfer back, so every turn starts at A (a session otherwise routes the next
    # turn to the agent that answered last, D25) and makes the transfer, as in the peers.
    root = rk.set_sub_agents(a, [rk.as_flow_agent(b, disallow_transfer_to_parent=True)])
    return rk.Runner(root, app_name=APP, session_service=svc)


async def session_turns(svc: Any, turns: int) -> Clock:
    runner = session_runner(svc)
    clock = Clock()
    for _ in range(turns):
        with clock.turn():
            events = [
                ev
                async for ev in runner.run(
                    [Message.user("weather in Paris?")], user_id=USER, session_id="s"
                )
            ]
        check(events)
    return clock


async def session_mode(tmp: pathlib.Path) -> tuple[list[TurnRow], dict[str, float]]:
    """The session-mode rows (in memory; on a SQLite file with each ``synchronous`` setting),
    and what a turn asks of SQLite: events stored, commits and aiosqlite calls per turn."""
    memory_label = "relaykit session mode, `InMemorySessionService`"
    settings = sqlite_synchronous_settings()
    labels = [memory_label] + [
        f"relaykit session mode, `DatabaseSessionService` (SQLite file, synchronous={sync})"
        for sync in settings
    ]
    try:
        session_runner(rk.InMemorySessionService())
    except ConfigurationError:
        return [
            TurnRow(label, None, note="session mode not available in this build")
            for label in labels
        ], {}
    await session_turns(rk.InMemorySessionService(), 1)  # warm-up
    clock = await session_turns(rk.InMemorySessionService(), TURNS)
    rows = [TurnRow(memory_label, clock.wall, clock.cpu)]
    for sync, label in zip(settings, labels[1:], strict=True):
        with relaykit_synchronous(sync):
            warm = DatabaseSessionService(sqlite_url(tmp / f"warm-up-{sync}.db"))
            try:
                await session_turns(warm, 1)
            finally:
                await warm.aclose()
            path = tmp / f"session-mode-{sync}.db"
            svc = DatabaseSessionService(sqlite_url(path))
            try:
                clock = await session_turns(svc, TURNS)
            finally:
                await svc.aclose()
        rows.append(TurnRow(label, clock.wall, clock.cpu, sum(sqlite_bytes(path))))
    # An untimed pass that counts what a turn asks of SQLite.
    path = tmp / "counted.db"
    svc = DatabaseSessionService(sqlite_url(path))
    try:
        await session_turns(svc, 1)
        with counting_driver_calls() as calls:
            await session_turns(svc, COUNTED_TURNS)
    finally:
        await svc.aclose()
    with sqlite3.connect(path) as conn:
        (stored,) = conn.execute("SELECT count(*) FROM relaykit_session_events").fetchone()
    conn.close()
    return rows, {
        "events": stored / (COUNTED_TURNS + 1),
        "commits": calls["commit"] / COUNTED_TURNS,
        "calls": calls.total() / COUNTED_TURNS,
    }


def session_mode_verdict(
    rows: list[TurnRow],
    counts: dict[str, float],
    fastest: float | None,
    raw_commit_s: dict[str, float],
) -> list[str]:
    """The targets of the session-mode rows, met or not, and the SQLite floor per setting
    (``raw_commit_s``: the raw driver's seconds per committed event, by ``synchronous``)."""
    if not counts:
        return ["Session mode not available in this build: no relaykit rows yet."]
    lines = []
    for row in rows:
        assert row.times is not None
        first, last = statistics.mean(row.times[:20]), statistics.mean(row.times[-20:])
        per_turn = "no peer measured"
        if fastest:
            ratio = row.mean() / fastest
            per_turn = f"{ratio:.3f} × the fastest peer ({'met' if ratio <= 0.05 else 'missed'})"
        growth = f"last/first {last / first:.2f}× ({'met' if last / first <= 1.5 else 'missed'})"
        lines.append(f"- {row.label}: {per_turn}; {growth}.")
    # Counted through aiosqlite: next to nothing when relaykit has a connection of its own.
    through_aiosqlite = counts["calls"] >= 1
    commits = counts["commits"] if through_aiosqlite else counts["events"]
    driver = (
        f" and makes {counts['calls']:.0f} aiosqlite calls (thread round trips)"
        if through_aiosqlite
        else ""
    )
    lines.append(
        f"- On the SQLite file a session-mode turn stores {counts['events']:.0f} events in "
        f"{commits:.0f} transactions (each event is stored before it is delivered){driver}, "
        f"counted over {COUNTED_TURNS} turns. The raw driver's time for that many committed "
        "events, a floor for any design that commits each event: "
        + "; ".join(
            f"synchronous={sync}: {commits * secs * 1e3:.2f} ms a turn"
            + (f" ({commits * secs / fastest:.3f} × the fastest peer)" if fastest else "")
            for sync, secs in raw_commit_s.items()
        )
        + "."
    )
    return lines


def peer_rows() -> tuple[list[TurnRow], list[str]]:
    """Each peer in its own process (imports and peak memory apart)."""
    rows, versions = [], []
    for name, (label, _, _) in peers_sessions.PEERS.items():
        out = subprocess.run(
            [sys.executable, "-m", "bench.peers_sessions", name],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        report = json.loads(out.strip().splitlines()[-1])
        if "missing" in report:
            rows.append(TurnRow(label, None, note=report["missing"]))
            continue
        rows.append(TurnRow(label, report["times"], report["cpu"], report["db_bytes"]))
        versions.extend(f"{k} {v}" for k, v in report["versions"].items())
    return rows, sorted(set(versions))


# -- the report ------------------------------------------------------------------------------
def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def build_note() -> str:
    """The relaykit commit measured, and whether src/ had uncommitted changes."""
    root = pathlib.Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "log", "-1", "--format=%h (%s)"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        head = dirty = ""
    if not head:  # not a git checkout (an export of a commit, say): its name if given
        return f"Build: relaykit at {os.environ.get('RELAYKIT_BENCH_BUILD', 'unknown')}."
    if len(head) > 90:
        head = head[:87] + "...)"
    return f"Build: relaykit at {head}" + (
        ", with uncommitted changes under src/." if dirty else "."
    )


def machine_note(pg_version: str | None, load: tuple[float, float]) -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    fs = subprocess.run(
        ["df", "-T", tempfile.gettempdir()], capture_output=True, text=True
    ).stdout.splitlines()
    fs_type = fs[-1].split()[1] if len(fs) > 1 else "unknown"
    pg = f", PostgreSQL {pg_version} on localhost" if pg_version else ""
    return (
        f"Machine: {cpu}, {os.cpu_count()} cores, Linux {platform.release()}; Python "
        f"{sys.version.split()[0]}, SQLite {sqlite3.sqlite_version} ({fs_type} file system), "
        f"SQLAlchemy {_version('sqlalchemy')}, "
        f"aiosqlite {_version('aiosqlite')}, asyncpg {_version('asyncpg')}{pg}; load average "
        f"{load[0]:.2f} when the report started, {load[1]:.2f} when it ended. Other work may "
        "share the machine: compare orders of magnitude, not small differences."
    )


async def main() -> None:
    pg_url = os.environ.get("RELAYKIT_TEST_POSTGRES_URL", PG_DEFAULT)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        events = conversation(APPEND_TURNS)
        memory_s = statistics.median([await memory_appends(events) for _ in range(REPEATS)])
        prep_s = statistics.median([prepare_seconds(events) for _ in range(REPEATS)])
        sqlite_tps, sizes = [], {}
        for sync in sqlite_synchronous_settings():
            tp, tp_sizes = await sqlite_throughput(tmp, sync)
            sqlite_tps.append(tp)
            sizes = sizes or tp_sizes  # the storage of relaykit's default setting
        pg_skip = await pg_reachable(pg_url)
        pg_tp, pg_version = (None, None) if pg_skip else await pg_throughput(pg_url)
        loads = await cold_loads(tmp)
        mode_rows, mode_counts = await session_mode(tmp)
    peers, peer_versions = peer_rows()
    measured = [r for r in peers if r.times is not None]
    fastest = min((r.mean() for r in measured), default=None)
    fastest_name = next((r.label for r in measured if r.mean() == fastest), None)
    n_events = len(events)
    out = [
        "# Durable sessions: appends, storage, cold loads, per turn against peers",
        "",
        machine_note(pg_version, (load, os.getloadavg()[0])),
        "",
        build_note(),
        "",
        "A turn is bench/turns.py's workload (A transfers to B, B calls `get_weather`, B "
        "answers): 6 session events — the user's question, A's `transfer_to_agent` call and "
        "its result (with the transfer action), B's tool call, its result (with a state delta "
        "of 2 keys, one `user:`), B's answer.",
        "",
        f"## 1. Append throughput ({n_events:,} events = {APPEND_TURNS} turns, one session, "
        f"median of {REPEATS} runs)",
        "",
        "relaykit: `await svc.append_event(session, event)` one after the other (validation, "
        "encoding, a transaction that bumps the session row, inserts the event row and upserts "
        "the state keys). Raw: the same encoded bytes (`relaykit.codec.dumps` of the stored "
        "event, computed before the clock starts) inserted by the same driver into a plain "
        "`(session_pk, seq, event_id, data)` table plus a key/value state table, one "
        "transaction per event (SQLite: WAL, `BEGIN IMMEDIATE` / INSERT / upserts / COMMIT; "
        "PostgreSQL: `async with conn.transaction()`). Raw + bump: the same, with the session "
        "row relaykit keeps updated first in each transaction (`UPDATE sessions SET last_seq = "
        "last_seq + 1 ... RETURNING pk, last_seq`, which numbers the event and, on PostgreSQL, "
        "locks the session against a concurrent delete). Driver calls: the calls aiosqlite "
        "hands to its connection thread per event (each one a thread round trip). SQLite "
        "rows: every connection of the row (relaykit's and raw's) uses the `PRAGMA synchronous` "
        "the row names — relaykit's default first (in WAL mode NORMAL syncs at checkpoints, "
        "not at every commit: a commit survives a killed process, not a power loss), then "
        "FULL (an fsync per commit, SQLite's default, which the peers keep).",
        "",
        "| backend | relaykit events/s | raw events/s | raw + bump events/s | relaykit "
        "ms/event | raw ms/event | raw + bump ms/event | raw/relaykit (within 3×?) | "
        "(raw + bump)/relaykit | driver calls/event: relaykit / raw / raw + bump |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(tp.row() for tp in sqlite_tps),
        pg_tp.row() if pg_tp else f"| PostgreSQL | skipped: {pg_skip} | | | | | | | | |",
        "",
        "The same rows with `sqlite3` on one worker thread, each event's whole transaction "
        "(bump included) in one call to it — the shape of relaykit's own SQLite connection, "
        "where it has one: "
        + "; ".join(
            f"synchronous={tp.backend.rpartition('=')[2]}: "
            f"{statistics.median(tp.raw_one_call) / tp.n * 1e3:.3f} ms/event "
            f"(relaykit {statistics.median(tp.relaykit) / statistics.median(tp.raw_one_call):.2f}"
            "× that)"
            for tp in sqlite_tps
        )
        + ".",
        "",
        f"For scale: `InMemorySessionService` appends {n_events / memory_s:,.0f} events/s "
        f"({memory_s / n_events * 1e6:.0f} µs/event); `prepare_append` alone (validate, encode "
        f"with the codec, load back the stored copy; no I/O) takes "
        f"{prep_s / n_events * 1e6:.0f} µs/event of the relaykit time above.",
        "",
        f"## 2. Storage after {APPEND_TURNS} turns ({n_events:,} events), SQLite",
        "",
        "File sizes after `PRAGMA wal_checkpoint(TRUNCATE)` (the WAL is then empty).",
        "",
        "| store | database file MB | WAL MB | event data bytes (sum) | bytes/event on disk |",
        "|---|---:|---:|---:|---:|",
        f"| relaykit `DatabaseSessionService` | {sizes['relaykit'][0] / 2**20:.2f} | "
        f"{sizes['relaykit'][1] / 2**20:.2f} | {sizes['data'][1]:,} "
        f"({sizes['data'][1] / sizes['data'][0]:.0f}/event) | "
        f"{sum(sizes['relaykit']) / n_events:.0f} |",
        f"| raw table, same bytes | {sizes['raw'][0] / 2**20:.2f} | {sizes['raw'][1] / 2**20:.2f}"
        f" | same | {sum(sizes['raw']) / n_events:.0f} |",
        "",
        f"Target ≤ 2 MB: {'met' if sum(sizes['relaykit']) <= 2 * 2**20 else '**missed**'}. "
        "The peers' files after the same 200 turns are in the last column of section 4.",
        "",
        "## 3. Cold load (`load_history`) vs session length, SQLite",
        "",
        f"Cold: a new `DatabaseSessionService` (new engine, schema check, first connection) "
        f"and its first `load_history`; warm: its second call. Median of {LOAD_REPEATS}. "
        f"Compacted: after appending a summary that covers every event but the last "
        f"{KEPT_TURNS} turns' ({6 * KEPT_TURNS} events); `load_history` then returns the "
        "summary and the events after the range. The file is in the OS page cache either way.",
        "",
        "| session length | events loaded | cold ms | warm ms | events loaded, compacted | "
        "cold ms, compacted | warm ms, compacted |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *loads,
        "",
        f"## 4. Per turn, one {TURNS}-turn conversation kept on a SQLite file",
        "",
        "Same workload everywhere: two agents, a handoff/transfer, a tool call, an answer, "
        "scripted models (no network), every turn persisted and the conversation loaded back "
        "by the framework's own session store. Each peer runs in its own process, after one "
        "warm-up turn on a throwaway file; relaykit's rows run in this process, after one "
        "warm-up turn too. B never transfers back, so every turn starts at A and transfers "
        "(relaykit and ADK would otherwise route the next turn to B, the last to answer). "
        f"ms per turn (wall); first/last 20 = mean of turns 1–20 / {TURNS - 19}–{TURNS}; "
        "CPU = mean process CPU time per turn, every thread included (steadier than wall time "
        "on a shared machine, blind to fsync waits); DB MB = file + WAL at the end "
        "(relaykit's after a checkpoint). The peers keep SQLite's default `synchronous` "
        "(FULL: an fsync per commit); relaykit's rows name theirs.",
        "",
        "| framework and store | mean ms/turn | median | first 20 | last 20 | last/first | "
        f"CPU ms/turn | DB MB | mean × fastest peer ({fastest_name or 'none measured'}) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(row.cells(fastest) for row in mode_rows),
        *(row.cells(fastest) for row in peers),
        "",
        "Targets for relaykit's session mode: ≤ 1/20 of the fastest peer per turn (× fastest "
        "peer ≤ 0.05), last 20 within 1.5× of the first 20.",
        "",
        *session_mode_verdict(
            mode_rows,
            mode_counts,
            fastest,
            {tp.backend.rpartition("=")[2]: statistics.median(tp.raw) / tp.n for tp in sqlite_tps},
        ),
        "",
        f"Peer versions: {', '.join(peer_versions) or 'none installed'}.",
    ]
    print("\n".join(out))


if __name__ == "__main__":
    asyncio.run(main())
