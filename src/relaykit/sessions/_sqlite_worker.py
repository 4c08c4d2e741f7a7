"""The session service's hot path on SQLite: appends and turn reads, one thread call each.

Through aiosqlite every statement is a round trip to its connection thread (four or five per
append); here the service keeps its own ``sqlite3`` connection on one worker thread and runs a
whole append (``BEGIN IMMEDIATE`` … ``COMMIT``) or a whole turn read in one call to it. The
statements are SQLAlchemy Core's (``_tables``), compiled once for SQLite; the connection is set
up as relaykit's engine sets up every SQLite connection (busy timeout, WAL, ``synchronous``).
Schema and every other operation still go through the engine.

With ``synchronous=NORMAL`` (the default) a commit writes to the WAL without waiting for the
disk, so a thread hand-off costs more than the statements themselves. Appends and turn reads
then run on a second connection, on the event loop's thread, that never waits for a lock
(``busy_timeout=0``): when another connection or process holds the write lock, the call goes
to the worker thread instead, which waits as every relaykit connection does. That connection
never checkpoints on commit (a checkpoint syncs the file); every ``_CHECKPOINT_EVERY`` of its
commits the worker thread runs a checkpoint in the background. With
``synchronous=FULL`` (a sync per commit) everything stays on the worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import sqlalchemy as sa

from relaykit import _db
from relaykit.sessions._append import _compile, _Compiled, _SqliteSql, _state_rows
from relaykit.sessions._records import PreparedAppend, unknown_summary_end
from relaykit.sessions._tables import (
    _ALL_EVENTS,
    _EVENT_ID_AT,
    _EVENTS_AFTER,
    _GET_CHECKPOINT,
    _READ_SESSION,
    _READ_STATE,
)
from relaykit.sessions.base import HistoryMark

__all__ = ["SqliteWorker", "TurnRows"]

_T = TypeVar("_T")
_log = logging.getLogger(__name__)
#: Commits on the event loop's connection between two background checkpoints (SQLite's own
#: automatic checkpoint comes after 1,000 WAL pages; an append writes about five).
_CHECKPOINT_EVERY = 200
#: How long a background checkpoint waits for other connections' writes and reads to end.
_CHECKPOINT_WAIT_MS = 200
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
# (seq, event id, data) of one stored event
_Row = tuple[int, str, bytes]


class TurnRows:
    """What ``SqliteWorker.read_turn`` read, before decoding."""

    __slots__ = ("delta", "events", "found", "pause", "state")

    def __init__(
        self,
        found: tuple[int, float, int | None, int | None, int],
        delta: bool,
        events: list[_Row],
        state: list[tuple[str, bytes]],
        pause: bytes | None,
    ) -> None:
        #: (pk, last_update_time, summary_seq, history_from_seq, last_seq) of the session row.
        self.found = found
        self.delta = delta
        self.events = events
        self.state = state
        self.pause = pause


def _params(compiled: _Compiled, values: dict[str, Any]) -> list[Any]:
    return [values[name] for name in compiled[1]]


class SqliteWorker:
    """One ``sqlite3`` connection to the service's file, used from one worker thread."""

    def __init__(self, path: str, dialect: sa.Dialect, upsert_state: sa.Executable) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="relaykit-sqlite")
        self._conn: sqlite3.Connection | None = None
        # The event loop's connection (see the module docstring): None until first used, and
        # only used from the thread that opened it.
        self._loop_conn: sqlite3.Connection | None = None
        self._loop_thread: int | None = None
        self._inline = _db.SQLITE_SYNCHRONOUS != "FULL"
        self._commits = 0
        self._behind = False  # set by a background checkpoint that could not finish
        self._append_sql = _SqliteSql(dialect, upsert_state)
        self._read_session = _compile(_READ_SESSION, dialect)
        self._event_id_at = _compile(_EVENT_ID_AT, dialect)
        self._events_after = _compile(_EVENTS_AFTER, dialect)
        self._all_events = _compile(_ALL_EVENTS, dialect)
        self._read_state = _compile(_READ_STATE, dialect)
        self._get_checkpoint = _compile(_GET_CHECKPOINT, dialect)

    def _connection(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            conn = sqlite3.connect(
                self._path,
                timeout=_db.SQLITE_BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,  # relaykit begins its transactions itself
                check_same_thread=False,  # only ever used from the worker thread
            )
            conn.execute(f"PRAGMA busy_timeout={_db.SQLITE_BUSY_TIMEOUT_MS}")
            conn.execute(f"PRAGMA synchronous={_db.SQLITE_SYNCHRONOUS}")
            self._conn = conn
        return conn

    async def _call(self, fn: Callable[[sqlite3.Connection], _T], *, write: bool = False) -> _T:
        if self._inline:
            conn = self._loop_connection()
            if conn is not None:
                try:
                    result = fn(conn)
                except sqlite3.OperationalError as exc:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    if (exc.sqlite_errorcode & 0xFF) not in _BUSY_CODES:
                        raise
                    # Another connection holds the lock: wait for it on the worker thread.
                else:
                    if write:
                        self._committed()
                    return result
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(self._connection()))

    def _loop_connection(self) -> sqlite3.Connection | None:
        """The event loop's connection, or None when called from another thread."""
        conn = self._loop_conn
        if conn is not None:
            return conn if threading.get_ident() == self._loop_thread else None
        if self._loop_thread is not None:  # closed
            return None
        conn = sqlite3.connect(
            self._path,
            timeout=0,
            isolation_level=None,
            check_same_thread=False,  # closed by aclose, possibly from another thread
        )
        conn.execute("PRAGMA busy_timeout=0")
        conn.execute(f"PRAGMA synchronous={_db.SQLITE_SYNCHRONOUS}")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        self._loop_conn = conn
        self._loop_thread = threading.get_ident()
        return conn

    def _committed(self) -> None:
        self._commits += 1
        if self._commits < _CHECKPOINT_EVERY:
            return
        self._commits = 0
        if self._behind and self._loop_conn is not None:
            # The last background checkpoint could not finish (another connection kept the
            # file busy for longer than it waits): checkpoint here, as SQLite's automatic
            # checkpoint would, so that the WAL cannot grow without bound.
            self._behind = False
            self._loop_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        else:
            self._executor.submit(self._checkpoint)

    def _checkpoint(self) -> None:
        # RESTART, not PASSIVE: while the loop's connection keeps committing, a passive
        # checkpoint never catches up with the WAL's end, and the WAL only starts over once one
        # has. RESTART holds writers off while it copies (the loop's connection, which never
        # waits, then sends its appends here, behind it) and waits for other writers and
        # readers for at most _CHECKPOINT_WAIT_MS; when that is not enough, the loop's
        # connection checkpoints itself next time (see _committed).
        conn = self._connection()
        try:
            conn.execute(f"PRAGMA busy_timeout={_CHECKPOINT_WAIT_MS}")
            try:
                busy, log, done = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
            finally:
                conn.execute(f"PRAGMA busy_timeout={_db.SQLITE_BUSY_TIMEOUT_MS}")
        except sqlite3.Error as exc:
            _log.debug("relaykit: background WAL checkpoint failed: %s", exc)
            busy, log, done = 1, 0, 0
        self._behind = bool(busy) or done < log

    # -- append ------------------------------------------------------------------------------
    async def append(self, appended: PreparedAppend) -> None:
        """Store ``appended`` in one write transaction (see ``_append._append``)."""
        rows = _state_rows(appended.ref, appended.writes) if appended.writes else []
        await self._call(lambda conn: self._append(conn, appended, rows), write=True)

    def _append(
        self, conn: sqlite3.Connection, appended: PreparedAppend, rows: list[dict[str, Any]]
    ) -> None:
        sql = self._append_sql
        ref = appended.ref
        conn.execute("BEGIN IMMEDIATE")
        try:
            bumped = conn.execute(
                sql.bump[0], _params(sql.bump, {"key": ref.owner("session"), "now": appended.now})
            ).fetchone()
            if bumped is None:
                raise ref.not_found("append an event to")
            pk, seq = bumped
            if appended.covers is not None:
                end = conn.execute(
                    sql.summary_end[0],
                    _params(sql.summary_end, {"pk": pk, "end": appended.covers[1]}),
                ).fetchone()
                if end is None or end[0] is None:
                    raise unknown_summary_end(appended)
                conn.execute(
                    sql.set_summary[0],
                    _params(sql.set_summary, {"session": pk, "summary": seq, "end": end[0]}),
                )
            conn.execute(sql.insert_event[0], (pk, seq, appended.event.id, appended.data))
            if rows:
                names = sql.upsert_state[1]
                conn.executemany(sql.upsert_state[0], [[r[n] for n in names] for r in rows])
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # -- a turn's read -------------------------------------------------------------------------
    async def read_turn(
        self,
        session_key: bytes,
        owners: dict[str, bytes],
        after: HistoryMark | None,
    ) -> TurnRows | None:
        """The session row, its history (whole, or after the mark ``after`` when it still
        holds), state and pause, in one read transaction."""
        return await self._call(lambda conn: self._read_turn(conn, session_key, owners, after))

    def _read_turn(
        self,
        conn: sqlite3.Connection,
        session_key: bytes,
        owners: dict[str, bytes],
        after: HistoryMark | None,
    ) -> TurnRows | None:
        conn.execute("BEGIN")  # one snapshot for every read below
        try:
            q = self._read_session
            found = conn.execute(q[0], _params(q, {"key": session_key})).fetchone()
            if found is None:
                return None
            pk, _, summary_seq, history_from, last_seq = found
            delta = after is not None and after.leads_to(pk, last_seq, summary_seq)
            if delta and after is not None and after.last_id is not None and after.last_seq:
                q = self._event_id_at
                at = conn.execute(q[0], _params(q, {"pk": pk, "seq": after.last_seq})).fetchone()
                delta = at is not None and at[0] == after.last_id
            if delta and after is not None:
                q = self._events_after
                events = conn.execute(
                    q[0], _params(q, {"pk": pk, "after": after.last_seq})
                ).fetchall()
            elif summary_seq is None:
                q = self._all_events
                events = conn.execute(q[0], _params(q, {"pk": pk})).fetchall()
            else:
                q = self._events_after
                rows = conn.execute(q[0], _params(q, {"pk": pk, "after": history_from})).fetchall()
                events = sorted(rows, key=lambda row: row[0] != summary_seq)
            q = self._read_state
            state = conn.execute(q[0], _params(q, owners)).fetchall()
            q = self._get_checkpoint
            pause = conn.execute(q[0], _params(q, {"key": session_key})).fetchone()
        finally:
            conn.execute("COMMIT")
        return TurnRows(found, delta, events, state, pause[0] if pause is not None else None)

    async def aclose(self) -> None:
        """Close the connections and stop the thread."""

        def close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        self._inline = False
        if self._loop_conn is not None:
            self._loop_conn.close()
            self._loop_conn = None
        # After any background checkpoint still queued (the executor runs one call at a time).
        await asyncio.get_running_loop().run_in_executor(self._executor, close)
        self._executor.shutdown(wait=False)
