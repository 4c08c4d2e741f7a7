"""SQLite appends and turn reads on the event loop's connection (``_sqlite_worker``): they
never wait for a lock there (a busy file sends the call to the worker thread, which waits),
the WAL is checkpointed in the background, and ``synchronous=FULL`` keeps them on the
worker thread."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from relaykit import Message, _db
from relaykit.sessions import DatabaseSessionService, SessionEvent, _sqlite_worker

APP, USER = "shop", "u1"


def said(text: str) -> SessionEvent:
    return SessionEvent(author="user", message=Message.user(text))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def full_sync() -> Iterator[None]:
    saved = _db.SQLITE_SYNCHRONOUS
    _db.SQLITE_SYNCHRONOUS = "FULL"
    try:
        yield
    finally:
        _db.SQLITE_SYNCHRONOUS = saved


async def test_an_append_waits_on_the_worker_thread_while_another_connection_writes(
    db: Path,
) -> None:
    async with DatabaseSessionService(f"sqlite+aiosqlite:///{db}") as service:
        session = await service.create_session(APP, USER, "s1")
        await service.append_event(session, said("first"))
        worker = service._worker
        assert worker is not None and worker._loop_conn is not None
        # Another process's writer (here: another connection) holds the write lock for a while.
        other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
        release.start()
        try:
            stored = await service.append_event(session, said("second"))
        finally:
            release.join()
            other.close()
        assert worker._conn is not None  # the worker thread's connection took the append
        loaded = await service.get_session(APP, USER, "s1")
        assert loaded is not None
        assert [e.message.content for e in loaded.events if e.message] == ["first", "second"]
        assert loaded.events[-1].id == stored.id
        assert not worker._loop_conn.in_transaction  # nothing left open on the loop's side
        # The next append is back on the loop's connection.
        await service.append_event(session, said("third"))
        loaded = await service.get_session(APP, USER, "s1")
        assert loaded is not None and len(loaded.events) == 3


async def test_a_read_blocked_by_nothing_sees_the_other_connections_commits(db: Path) -> None:
    url = f"sqlite+aiosqlite:///{db}"
    async with DatabaseSessionService(url) as one, DatabaseSessionService(url) as two:
        session = await one.create_session(APP, USER, "s1")
        for n in range(5):
            await one.append_event(session, said(f"m{n}"))
        turn = await two.read_turn(APP, USER, "s1")
        assert turn is not None
        assert [e.message.content for e in turn.events if e.message] == [f"m{n}" for n in range(5)]


async def test_the_wal_is_checkpointed_in_the_background(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite_worker, "_CHECKPOINT_EVERY", 20)
    async with DatabaseSessionService(f"sqlite+aiosqlite:///{db}") as service:
        session = await service.create_session(APP, USER, "s1")
        worker = service._worker
        assert worker is not None
        for n in range(600):
            await service.append_event(session, said(f"m{n}" * 50))
        await asyncio.get_running_loop().run_in_executor(worker._executor, lambda: None)
        wal = Path(f"{db}-wal")
        # Without checkpoints the WAL holds every page written (600 appends of about 3.5 pages:
        # 8.5 MB); with one every 20 appends it starts over again and again (its file keeps the
        # largest size it reached, which depends on how far the worker thread lagged).
        assert wal.stat().st_size < 700 * 4096
        loaded = await service.get_session(APP, USER, "s1")
        assert loaded is not None and len(loaded.events) == 600


async def test_synchronous_full_keeps_sqlite_off_the_event_loop(db: Path, full_sync: None) -> None:
    async with DatabaseSessionService(f"sqlite+aiosqlite:///{db}") as service:
        session = await service.create_session(APP, USER, "s1")
        await service.append_event(session, said("hi"))
        assert await service.read_turn(APP, USER, "s1") is not None
        worker = service._worker
        assert worker is not None
        assert worker._loop_conn is None and worker._conn is not None


async def test_closing_closes_both_connections(db: Path) -> None:
    service = DatabaseSessionService(f"sqlite+aiosqlite:///{db}")
    session = await service.create_session(APP, USER, "s1")
    await service.append_event(session, said("hi"))
    worker = service._worker
    assert worker is not None and worker._loop_conn is not None
    await service.aclose()
    assert worker._loop_conn is None and worker._conn is None


async def test_a_checkpoint_that_could_not_finish_is_done_on_the_loop_connection_next_time(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite_worker, "_CHECKPOINT_EVERY", 5)
    monkeypatch.setattr(_sqlite_worker, "_CHECKPOINT_WAIT_MS", 10)
    async with DatabaseSessionService(f"sqlite+aiosqlite:///{db}") as service:
        session = await service.create_session(APP, USER, "s1")
        worker = service._worker
        assert worker is not None
        await service.append_event(session, said("warm-up"))
        assert worker._loop_conn is not None
        # Another connection writes for longer than the background checkpoint waits.
        other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        worker._commits = 0
        for n in range(4):
            await service.append_event(session, said(f"m{n}"))
        other.execute("BEGIN IMMEDIATE")
        worker._committed()  # the fifth commit: a background checkpoint, which cannot finish
        await asyncio.get_running_loop().run_in_executor(worker._executor, lambda: None)
        other.execute("COMMIT")
        other.close()
        assert worker._behind
        statements: list[str] = []
        worker._loop_conn.set_trace_callback(statements.append)
        for n in range(5):
            await service.append_event(session, said(f"n{n}"))
        assert "PRAGMA wal_checkpoint(PASSIVE)" in statements
        assert not worker._behind
        loaded = await service.get_session(APP, USER, "s1")
        assert loaded is not None and len(loaded.events) == 10
