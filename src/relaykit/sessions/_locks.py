"""The turn locks every process shares, of DatabaseSessionService.

SQLite: an ``flock`` on ``<database file>.locks/<digest>.lock``. PostgreSQL: a session-level
advisory lock on a connection of its own, out of the engine's pool, kept idle afterwards (up to
``_MAX_IDLE_LOCK_CONNECTIONS``) to serve the next lock. Neither holds a database transaction.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relaykit.errors import ConfigurationError
from relaykit.sessions._failures import _StorageFailures
from relaykit.sessions._file_lock import LockTimeout, acquire_file_lock, release_file_lock
from relaykit.sessions._poll import poll
from relaykit.sessions._records import SessionRef
from relaykit.sessions._tables import _param

# How many connections of ended PostgreSQL turn locks are kept for the next ones.
_MAX_IDLE_LOCK_CONNECTIONS: Final = 8

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
    """PostgreSQL advisory turn locks, and the connections of ended ones kept for the next."""

    __slots__ = ("_engine", "_idle_lock_connections")

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        # Connections of ended turn locks, kept to serve the next ones (opening a connection
        # costs a round trip or more and a server process).
        self._idle_lock_connections: list[AsyncConnection] = []

    @asynccontextmanager
    async def hold(
        self, ref: SessionRef, timeout: float, deadline: float | None
    ) -> AsyncIterator[None]:
        """The advisory lock of ``ref`` on a connection of its own, until ``deadline``."""
        key = int.from_bytes(ref.lock_name()[:8], "big", signed=True)

        async def attempt() -> bool:
            return bool((await conn.execute(_TRY_ADVISORY_LOCK, {"key": key})).scalar())

        with _StorageFailures("lock", ref, self._engine):
            conn, reused = await self._lock_connection()
        reusable = False
        try:
            with _StorageFailures("lock", ref, self._engine):
                try:
                    acquired = await attempt()
                except Exception:
                    if not reused:
                        raise
                    # A kept connection that died while idle (a server restart, a timeout).
                    await _close_detached(conn)
                    conn, reused = await self._lock_connection(fresh=True)
                    acquired = await attempt()
                acquired = acquired or await poll(attempt, deadline)
            if not acquired:
                reusable = True
                raise ref.busy(timeout)
            try:
                yield
            finally:
                # Only a connection known to hold no lock anymore may serve again; otherwise
                # closing it below releases the lock whatever state it is in.
                with contextlib.suppress(Exception):
                    reusable = bool((await conn.execute(_ADVISORY_UNLOCK, {"key": key})).scalar())
        finally:
            if reusable and len(self._idle_lock_connections) < _MAX_IDLE_LOCK_CONNECTIONS:
                self._idle_lock_connections.append(conn)
            else:
                await _close_detached(conn)

    async def _lock_connection(self, *, fresh: bool = False) -> tuple[AsyncConnection, bool]:
        """A connection for an advisory lock, kept from an earlier lock or new; and which."""
        if self._idle_lock_connections and not fresh:
            return self._idle_lock_connections.pop(), True
        conn = await self._engine.connect()
        try:
            # Autocommit: the connection idles outside any transaction while the turn runs
            # (an idle-in-transaction timeout would otherwise end it, and the lock).
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            # Out of the pool: a turn never occupies one of its slots, and closing the
            # connection really closes it, which releases its locks whatever happened.
            (await conn.get_raw_connection()).detach()
        except BaseException:
            await _close_detached(conn)
            raise
        return conn, False

    async def aclose(self) -> None:
        """Close the kept connections."""
        idle, self._idle_lock_connections = self._idle_lock_connections, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await _close_detached(conn)


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
