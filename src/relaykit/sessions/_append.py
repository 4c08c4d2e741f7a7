"""One ``append_event`` of DatabaseSessionService: its statements, run inside its transaction.

On PostgreSQL through SQLAlchemy (``_CoreStatements``); on SQLite the statements are compiled
once here (``_SqliteSql``) and run by ``_sqlite_worker`` on the service's own connection.
"""

from __future__ import annotations

from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from relaykit.sessions._records import (
    PreparedAppend,
    SessionRef,
    StateWrite,
    unknown_summary_end,
)
from relaykit.sessions._tables import (
    _BUMP_SESSION,
    _INSERT_EVENT,
    _SET_SUMMARY,
    _SUMMARY_END,
    EVENTS_TABLE,
    SESSIONS_TABLE,
    STATE_TABLE,
    _events,
    _state,
)


async def _append(statements: _AppendStatements, appended: PreparedAppend) -> None:
    """Store ``appended`` with ``statements``, inside their transaction."""
    ref = appended.ref
    bumped = await statements.bump(ref.owner("session"), appended.now)
    if bumped is None:
        raise ref.not_found("append an event to")
    pk, seq = bumped
    if appended.covers is not None:  # a compaction summary: where the range it covers ends
        end_seq = await statements.summary_end(pk, appended.covers[1])
        if end_seq is None:
            raise unknown_summary_end(appended)
        await statements.set_summary(pk, seq, end_seq)
    await statements.insert_event(pk, seq, appended.event.id, appended.data)
    if appended.writes:
        await statements.upsert_state(_state_rows(ref, appended.writes))


def _state_rows(ref: SessionRef, writes: list[StateWrite]) -> list[dict[str, Any]]:
    """The rows of ``writes``, in their (sorted) order: see prepare_state on deadlocks."""
    return [
        {
            "owner": ref.owner(write.scope),
            "key": write.key,
            "scope": write.scope,
            "app_name": ref.app_name,
            "user_id": ref.user_id if write.scope != "app" else "",
            "session_id": ref.session_id if write.scope == "session" else "",
            "value": write.data,
        }
        for write in writes
    ]


class _AppendStatements(Protocol):
    """The statements of an append, run inside its transaction."""

    async def bump(self, session_key: bytes, now: float) -> tuple[int, int] | None:
        """Count the event in and touch the session: its ``pk`` and the event's ``seq``, or
        None when the session does not exist."""
        ...

    async def summary_end(self, session_pk: int, event_id: str) -> int | None:
        """The ``seq`` of the event ``event_id`` (the last if several), or None."""
        ...

    async def set_summary(self, session_pk: int, summary_seq: int, end_seq: int) -> None:
        """Record where the latest compaction summary is and where its range ends."""
        ...

    async def insert_event(self, session_pk: int, seq: int, event_id: str, data: bytes) -> None:
        """Store the event row."""
        ...

    async def upsert_state(self, rows: list[dict[str, Any]]) -> None:
        """Write the state rows, in their order."""
        ...


class _CoreStatements:
    """The append's statements through SQLAlchemy (PostgreSQL)."""

    __slots__ = ("_conn", "_upsert")

    def __init__(self, conn: AsyncConnection, upsert: sa.Executable) -> None:
        self._conn, self._upsert = conn, upsert

    async def bump(self, session_key: bytes, now: float) -> tuple[int, int] | None:
        row = (await self._conn.execute(_BUMP_SESSION, {"key": session_key, "now": now})).first()
        return None if row is None else (row[0], row[1])

    async def summary_end(self, session_pk: int, event_id: str) -> int | None:
        found = await self._conn.execute(_SUMMARY_END, {"pk": session_pk, "end": event_id})
        end: int | None = found.scalar()
        return end

    async def set_summary(self, session_pk: int, summary_seq: int, end_seq: int) -> None:
        await self._conn.execute(
            _SET_SUMMARY, {"session": session_pk, "summary": summary_seq, "end": end_seq}
        )

    async def insert_event(self, session_pk: int, seq: int, event_id: str, data: bytes) -> None:
        await self._conn.execute(
            _INSERT_EVENT,
            {"session_pk": session_pk, "seq": seq, "event_id": event_id, "data": data},
        )

    async def upsert_state(self, rows: list[dict[str, Any]]) -> None:
        await self._conn.execute(self._upsert, rows)


_Compiled = tuple[str, tuple[str, ...]]  # SQL text, names of its parameters in order


class _AsyncpgStatements:
    """The append's statements straight on asyncpg's connection (PostgreSQL's fast path).

    Through SQLAlchemy each statement pays for its result machinery; here each is one
    ``fetchrow``/``execute`` of SQL asyncpg prepares once per connection. The SQL is the same as
    the Core statements' (``_tables``), written for asyncpg's ``$n`` parameters.
    """

    __slots__ = ("_conn",)

    BUMP = (
        f"UPDATE {SESSIONS_TABLE} SET last_seq = last_seq + 1, last_update_time = $2 "
        "WHERE session_key = $1 RETURNING pk, last_seq"
    )
    SUMMARY_END = f"SELECT max(seq) FROM {EVENTS_TABLE} WHERE session_pk = $1 AND event_id = $2"
    SET_SUMMARY = (
        f"UPDATE {SESSIONS_TABLE} SET summary_seq = $2, history_from_seq = $3 WHERE pk = $1"
    )
    INSERT_EVENT = (
        f"INSERT INTO {EVENTS_TABLE} (session_pk, seq, event_id, data) VALUES ($1, $2, $3, $4)"
    )
    UPSERT_STATE = (
        f"INSERT INTO {STATE_TABLE} (owner, key, scope, app_name, user_id, session_id, value) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (owner, key) DO UPDATE SET value = "
        "excluded.value"
    )

    def __init__(self, conn: Any) -> None:
        self._conn = conn  # an asyncpg.Connection

    async def bump(self, session_key: bytes, now: float) -> tuple[int, int] | None:
        row = await self._conn.fetchrow(self.BUMP, session_key, now)
        return None if row is None else (row[0], row[1])

    async def summary_end(self, session_pk: int, event_id: str) -> int | None:
        end: int | None = await self._conn.fetchval(self.SUMMARY_END, session_pk, event_id)
        return end

    async def set_summary(self, session_pk: int, summary_seq: int, end_seq: int) -> None:
        await self._conn.execute(self.SET_SUMMARY, session_pk, summary_seq, end_seq)

    async def insert_event(self, session_pk: int, seq: int, event_id: str, data: bytes) -> None:
        await self._conn.execute(self.INSERT_EVENT, session_pk, seq, event_id, data)

    async def upsert_state(self, rows: list[dict[str, Any]]) -> None:
        await self._conn.executemany(
            self.UPSERT_STATE,
            [
                (
                    r["owner"],
                    r["key"],
                    r["scope"],
                    r["app_name"],
                    r["user_id"],
                    r["session_id"],
                    r["value"],
                )
                for r in rows
            ],
        )


#: One append without a summary, in one statement (atomic on its own, no transaction): the
#: session row is counted first (which locks it), then the event row and the state rows are
#: written only if the session exists. Its pk comes back; no row: no such session.
_ONE_STATEMENT_APPEND = f"""
WITH bumped AS (
    UPDATE {SESSIONS_TABLE} SET last_seq = last_seq + 1, last_update_time = $2
    WHERE session_key = $1 RETURNING pk, last_seq
), event AS (
    INSERT INTO {EVENTS_TABLE} (session_pk, seq, event_id, data)
    SELECT pk, last_seq, $3, $4 FROM bumped
), state AS (
    INSERT INTO {STATE_TABLE} (owner, key, scope, app_name, user_id, session_id, value)
    SELECT * FROM unnest(
        $5::bytea[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bytea[]
    ) WHERE EXISTS (SELECT 1 FROM bumped)
    ON CONFLICT (owner, key) DO UPDATE SET value = excluded.value
)
SELECT pk FROM bumped
"""


async def append_in_one_statement(conn: Any, appended: PreparedAppend) -> None:
    """Store ``appended`` (not a compaction summary) with one statement on asyncpg's
    connection ``conn``: one round trip."""
    ref = appended.ref
    rows = _state_rows(ref, appended.writes) if appended.writes else []
    columns = [
        [row[name] for row in rows]
        for name in ("owner", "key", "scope", "app_name", "user_id", "session_id", "value")
    ]
    found = await conn.fetchval(
        _ONE_STATEMENT_APPEND,
        ref.owner("session"),
        appended.now,
        appended.event.id,
        appended.data,
        *columns,
    )
    if found is None:
        raise ref.not_found("append an event to")


def _compile(statement: Any, dialect: sa.Dialect, columns: list[str] | None = None) -> _Compiled:
    compiled = statement.compile(dialect=dialect, column_keys=columns)
    return str(compiled), tuple(compiled.positiontup or ())


class _SqliteSql:
    """The append's statements compiled once by SQLAlchemy Core for SQLite's driver."""

    __slots__ = ("bump", "insert_event", "set_summary", "summary_end", "upsert_state")

    def __init__(self, dialect: sa.Dialect, upsert: sa.Executable) -> None:
        self.bump = _compile(_BUMP_SESSION, dialect)
        self.summary_end = _compile(_SUMMARY_END, dialect)
        self.set_summary = _compile(_SET_SUMMARY, dialect)
        self.insert_event = _compile(_INSERT_EVENT, dialect, list(_events.c.keys()))
        self.upsert_state = _compile(upsert, dialect, list(_state.c.keys()))
