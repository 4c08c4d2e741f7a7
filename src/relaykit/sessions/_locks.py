"""The turn locks every process shares, of DatabaseSessionService.

SQLite: an ``flock`` on ``<database file>.locks/<digest>.lock``. PostgreSQL: a session-level
advisory lock, every lock of the service on one connection of their own (out of the engine's
pool). Neither holds a database transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relaykit.errors import ConfigurationError
from relaykit.sessions._failures import _StorageFailures
from relaykit.sessions._file_lock import LockTimeout, acquire_file_lock, release_file_lock
from relaykit.sessions._poll import poll
from relaykit.sessions._records import SessionRef
from relaykit.sessions._tables import _param

_T = TypeVar("_T")

_TRY_ADVISORY_LOCK = sa.select(sa.func.pg_try_advisory_lock(_param("key")))
_ADVISORY_UNLOCK = sa.select(sa.func.pg_advisory_unlock(_param("key")))


@asynccontextmanager
async def _file_lock(
    engine: AsyncEngine, ref: SessionRef, timeout: float, deadline: float | None, folder: Path
) -> AsyncIterator[None]:
    """The ``flock`` of ``ref`` in ``folder`` (SQLite), until ``deadline``."""
    path = folder / f"{ref.lock_name().hex()}.lock"
    with _StorageFailures("lock", ref, engine):
        try:
            fd = await acquire_file_lock(path, deadline)
        except LockTimeout:
            raise ref.busy(timeout) from None
    try:
        yield
    finally:
        with _StorageFailures("unlock", ref, engine):
            release_file_lock(fd, path)


class _AdvisoryLocks:
    """PostgreSQL advisory turn locks, every one held on one connection of their own.

    A session-level advisory lock belongs to the connection that took it, and one connection
    may hold many. So the locks this service holds all sit on one connection (the carrier),
    out of the engine's pool, in autocommit, opened on first use: a process running 200 turns
    at once holds 200 locks on one connection, not 200 connections (PostgreSQL allows 100 by
    default). The service's per-session ``asyncio`` locks let one task per session ask for a
    key, so a key is never taken twice on the carrier (advisory locks are reentrant there).

    The carrier runs one statement at a time; each lock and unlock runs to its end even when
    the task asking is cancelled (an abandoned lock statement that succeeded is undone), so
    the carrier never holds a lock nobody will release. If the carrier breaks (a server
    restart), its locks went with it, as a dead process's do; the next lock opens a new one.
    """

    __slots__ = ("_carrier", "_engine", "_statements")

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._carrier: AsyncConnection | None = None
        self._statements = asyncio.Lock()

    @asynccontextmanager
    async def hold(
        self, ref: SessionRef, timeout: float, deadline: float | None
    ) -> AsyncIterator[None]:
        """The advisory lock of ``ref`` on the carrier, until ``deadline``."""
        key = int.from_bytes(ref.lock_name()[:8], "big", signed=True)
        holder: AsyncConnection | None = None

        async def attempt() -> bool:
            nonlocal holder
            holder = await self._statement(_TRY_ADVISORY_LOCK, key, undo=_ADVISORY_UNLOCK)
            return holder is not None

        with _StorageFailures("lock", ref, self._engine):
            try:
                acquired = await attempt()
            except Exception:
                # A carrier that died while idle (a server restart, a timeout): once more, on a
                # new one (the failure dropped it).
                acquired = await attempt()
            acquired = acquired or await poll(attempt, deadline)
        if not acquired:
            raise ref.busy(timeout)
        try:
            yield
        finally:
            if holder is self._carrier:  # else the lock went with the carrier it was on
                with contextlib.suppress(Exception):
                    await self._statement(_ADVISORY_UNLOCK, key)

    async def _statement(
        self, statement: sa.Select[Any], key: int, *, undo: sa.Select[Any] | None = None
    ) -> AsyncConnection | None:
        """Run ``statement`` (a lock or unlock of ``key``) on the carrier, whatever happens to
        the caller: the carrier if it answered true, else None. When the caller is cancelled
        and the statement succeeded anyway, ``undo`` runs right after."""
        job = _kept(self._run(statement, key))
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            if undo is not None:

                def undone(done: asyncio.Task[AsyncConnection | None]) -> None:
                    if not done.cancelled() and done.exception() is None and done.result():
                        _kept(self._run(undo, key))

                job.add_done_callback(undone)
            raise

    async def _run(self, statement: sa.Select[Any], key: int) -> AsyncConnection | None:
        async with self._statements:
            conn = self._carrier
            if conn is None:
                conn = self._carrier = await self._open()
            try:
                result = bool((await conn.execute(statement, {"key": key})).scalar())
            except BaseException:
                # A broken carrier (or a statement cut short): its locks are gone or unknown;
                # closing it releases whatever it still holds, and the next lock opens another.
                self._carrier = None
                with contextlib.suppress(BaseException):
                    await _close_detached(conn)
                raise
            return conn if result else None

    async def _open(self) -> AsyncConnection:
        """A new carrier: autocommit (it idles outside any transaction, which an
        idle-in-transaction timeout would end), out of the pool (closing it really closes it,
        which releases its locks)."""
        conn = await self._engine.connect()
        try:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            (await conn.get_raw_connection()).detach()
        except BaseException:
            await _close_detached(conn)
            raise
        return conn

    async def aclose(self) -> None:
        """Close the carrier (which releases any lock still on it)."""
        async with self._statements:
            conn, self._carrier = self._carrier, None
            if conn is not None:
                with contextlib.suppress(Exception):
                    await _close_detached(conn)


#: The lock statements running, kept until they end (asyncio keeps only weak references).
_RUNNING: set[asyncio.Task[Any]] = set()


def _kept(coroutine: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
    """``coroutine`` in a task that runs to its end even if nobody awaits it any more (its
    failure is then the carrier's end, which the next statement sees)."""
    task = asyncio.ensure_future(coroutine)
    _RUNNING.add(task)

    def done(ended: asyncio.Task[_T]) -> None:
        _RUNNING.discard(ended)
        if not ended.cancelled():
            ended.exception()  # retrieved: no "never retrieved" warning for an abandoned one

    task.add_done_callback(done)
    return task


async def _close_detached(conn: AsyncConnection) -> None:
    """Close a detached connection; if that fails or is cancelled, drop its socket."""
    try:
        await conn.close()
    except BaseException:
        # The server releases a connection's advisory locks when its socket closes.
        raw = conn.sync_connection.connection if conn.sync_connection is not None else None
        driver = getattr(raw, "driver_connection", None)
        terminate = getattr(driver, "terminate", None)
        if callable(terminate):
            terminate()
        raise


def _lock_folder(engine: AsyncEngine, owner: str) -> Path:
    """The folder of the SQLite file's turn locks: ``<database file>.locks``, absolute (the
    process may change its working directory later)."""
    database = engine.url.database or ""
    if database.startswith("file:"):  # a URI filename (?uri=true)
        database = database[len("file:") :].partition("?")[0]
    if database in ("", ":memory:") or engine.url.query.get("mode") == "memory":
        raise ConfigurationError(
            f"{owner}: an in-memory SQLite database cannot be shared safely by concurrent "
            "tasks; use a file (sqlite+aiosqlite:///path.db), or InMemorySessionService"
        )
    return Path(os.path.abspath(database + ".locks"))
