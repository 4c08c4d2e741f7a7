"""DatabaseSessionService: durable sessions in SQLite or PostgreSQL through SQLAlchemy (async).

Needs the ``sql`` extra (SQLite, ``sqlite+aiosqlite:///path.db``) or ``postgres``
(``postgresql+asyncpg://user@host/db``). The tables are created by relaykit's Alembic migrations
(revision 0002, see ``relaykit/_migrations``) under the lock shared by every process, in the same
history as the checkpoint table, so the two stores can share a database.

How the rules are kept:

- One transaction per ``append_event``: the session row is updated first (its next event
  number, ``last_update_time``), which both proves the session exists and, on PostgreSQL, locks
  it until commit, so a concurrent ``delete_session`` either comes first (the append finds no
  session) or waits and then deletes the new event too. Then the event row and one upsert per
  state key. No read-modify-write of a state blob: concurrent appends to different sessions
  that write the same ``user:`` key both succeed and keep each other's other keys.
- ``load_history`` reads where the latest compaction summary is from the session row and then
  one range of the ``(session, seq)`` primary key: never the whole session.
- The turn lock never holds a database transaction: an ``flock`` on a side file for SQLite, a
  session-level advisory lock on a dedicated connection for PostgreSQL.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Self

from relaykit.errors import ConfigurationError, SessionExistsError
from relaykit.sessions._local_lock import KeyedLocks
from relaykit.sessions._records import (
    PreparedAppend,
    SessionRef,
    StateWrite,
    apply_to_session,
    check_pause,
    deadline_after,
    decode_event,
    merged_state,
    prepare_append,
    prepare_state,
)
from relaykit.sessions.base import (
    HistoryMark,
    Session,
    SessionEvent,
    TurnView,
    validate_lock_timeout,
    validate_session_name,
)

try:
    # The private modules below import SQLAlchemy too: imported here, under this guard.
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from relaykit import _db
    from relaykit.sessions._append import (
        _append,
        _AppendStatements,
        _AsyncpgStatements,
        _CoreStatements,
        _state_rows,
        append_in_one_statement,
    )
    from relaykit.sessions._failures import _StorageFailures
    from relaykit.sessions._locks import _AdvisoryLocks, _file_lock, _lock_folder
    from relaykit.sessions._pg_reads import read_turn_asyncpg
    from relaykit.sessions._sqlite_worker import SqliteWorker, TurnRows
    from relaykit.sessions._tables import (
        _ALL_EVENTS,
        _DELETE_CHECKPOINT,
        _DELETE_CHECKPOINT_OF,
        _DELETE_EVENTS,
        _DELETE_OWN_STATE,
        _DELETE_SESSION,
        _EVENT_ID_AT,
        _EVENTS_AFTER,
        _FIND_SESSION_KEY_SHARE,
        _GET_CHECKPOINT,
        _LIST_SESSIONS,
        _READ_SESSION,
        _READ_STATE,
        _SHARED_STATE,
        CHECKPOINTS_TABLE,
        EVENTS_TABLE,
        SESSIONS_TABLE,
        STATE_TABLE,
        _checkpoints,  # noqa: F401 - re-exported: the tests read the tables raw
        _dialect_statements,
        _events,  # noqa: F401 - re-exported: the tests read the tables raw
        _sessions,  # noqa: F401 - re-exported: the tests read the tables raw
        _state,  # noqa: F401 - re-exported: the tests read the tables raw
    )
except ImportError:  # pragma: no cover - depends on the installed extras
    raise ConfigurationError(
        "DatabaseSessionService needs SQLAlchemy and Alembic: pip install 'relaykit[sql]' "
        "(SQLite) or 'relaykit[postgres]' (PostgreSQL)"
    ) from None

__all__ = [
    "CHECKPOINTS_TABLE",
    "EVENTS_TABLE",
    "SESSIONS_TABLE",
    "STATE_TABLE",
    "DatabaseSessionService",
]


class DatabaseSessionService:
    """A ``SessionService`` in a SQLite or PostgreSQL database, safe across processes.

    The tables are created (or upgraded) on first use, or up front with ``await
    service.open()``. Storage failures raise ``SessionStoreError`` naming the operation and the
    session, never SQL or stored content. SQLite files must be on a local disk (WAL mode and
    ``flock`` do not work over network file systems); the turn locks of a SQLite database are
    files in the folder ``<database file>.locks`` next to it.

    >>> import asyncio, os, tempfile
    >>> async def main(path: str) -> dict[str, object]:
    ...     async with DatabaseSessionService(f"sqlite+aiosqlite:///{path}") as service:
    ...         session = await service.create_session("shop", "u1", "s1")
    ...         await service.append_event(session, SessionEvent(
    ...             author="user", state_delta={"user:lang": "fr", "cart": 2}))
    ...         return (await service.get_session("shop", "u1", "s1")).state
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     asyncio.run(main(os.path.join(folder, "app.db")))
    {'user:lang': 'fr', 'cart': 2}

    Args:
        url: ``sqlite+aiosqlite:///path.db`` or ``postgresql+asyncpg://user@host/db``.
        engine: an ``AsyncEngine`` to use instead of creating one from ``url`` (shared with a
            ``DatabaseCheckpointStore``, say); the service configures but never disposes it.
    """

    def __init__(self, url: str, *, engine: AsyncEngine | None = None) -> None:
        owner = type(self).__name__
        #: The database URL as given.
        self.url = url
        if engine is None:
            self._engine = _db.create_store_engine(url, owner=owner)
            self._owns_engine = True
        else:
            self._engine = _db.check_engine(engine, owner=owner)
            self._owns_engine = False
        self._backend = self._engine.dialect.name
        self._lock_dir = _lock_folder(self._engine, owner) if self._backend == "sqlite" else None
        self._create, self._upsert_state, self._upsert_checkpoint = _dialect_statements(
            self._backend
        )
        self._schema = _db.Schema(self._engine)
        # SQLite: appends and turn reads on a connection of the service's own (one thread
        # call each instead of one per statement).
        self._worker: SqliteWorker | None = None
        if self._backend == "sqlite" and self._engine.url.database:
            self._worker = SqliteWorker(
                self._engine.url.database, self._engine.dialect, self._upsert_state
            )
        self._local_locks = KeyedLocks()
        # PostgreSQL: advisory locks, on connections kept to serve the next ones.
        self._advisory_locks = _AdvisoryLocks(self._engine)

    def __repr__(self) -> str:
        return _db.engine_repr(self, self._engine)

    # -- schema, connections ----------------------------------------------------------------
    async def open(self) -> None:
        """Create or upgrade the tables now (otherwise the first operation does).

        Safe to call from many tasks and processes at once: the migration runs once.
        """
        with _StorageFailures("open its database", None, self._engine):
            await self._ensure_schema()

    async def _ensure_schema(self) -> None:
        await self._schema.ensure()

    @asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction that sees one snapshot of the database for all its reads."""
        await self._ensure_schema()
        async with self._engine.connect() as conn:
            options: dict[str, Any] = {_db.READ_ONLY: True}
            if self._backend == "postgresql":
                # READ COMMITTED takes a new snapshot per statement: events and state read by
                # two statements could then disagree. A read-only transaction never fails with
                # a serialization error at this level.
                options["isolation_level"] = "REPEATABLE READ"
            conn = await conn.execution_options(**options)
            async with conn.begin():
                yield conn

    @asynccontextmanager
    async def _writing(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite), committed at the end."""
        await self._ensure_schema()
        async with self._engine.begin() as conn:
            yield conn

    async def _write_state(
        self, conn: AsyncConnection, ref: SessionRef, writes: list[StateWrite]
    ) -> None:
        if writes:
            await _CoreStatements(conn, self._upsert_state).upsert_state(_state_rows(ref, writes))

    @staticmethod
    def _owners(ref: SessionRef) -> dict[str, bytes]:
        return {"app": ref.owner("app"), "user": ref.owner("user"), "session": ref.owner("session")}

    # -- sessions -----------------------------------------------------------------------------
    async def create_session(
        self,
        app_name: str,
        user_id: str,
        session_id: str | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> Session:
        """Create a session (see ``SessionService.create_session``)."""
        ref = SessionRef.of(
            app_name, user_id, uuid.uuid4().hex if session_id is None else session_id
        )
        writes = prepare_state(state or {}, ref)
        now = time.time()
        with _StorageFailures("create", ref, self._engine):
            async with self._writing() as conn:
                created = (
                    await conn.execute(
                        self._create,
                        {
                            "session_key": ref.owner("session"),
                            "app_name": ref.app_name,
                            "user_id": ref.user_id,
                            "session_id": ref.session_id,
                            "last_seq": 0,
                            "last_update_time": now,
                        },
                    )
                ).first()
                if created is None:
                    raise SessionExistsError(f"cannot create {ref}: the id is taken")
                await self._write_state(conn, ref, writes)
                rows = (await conn.execute(_READ_STATE, self._owners(ref))).all()
        return Session(
            ref.app_name,
            ref.user_id,
            ref.session_id,
            merged_state(((key, value) for key, value in rows), ref),
            [],
            now,
        )

    async def get_session(self, app_name: str, user_id: str, session_id: str) -> Session | None:
        """The session with every stored event in order and its merged state, or None."""
        ref = SessionRef.of(app_name, user_id, session_id)
        with _StorageFailures("read", ref, self._engine):
            async with self._reading() as conn:
                found = (await conn.execute(_READ_SESSION, {"key": ref.owner("session")})).first()
                if found is None:
                    return None
                events = (await conn.execute(_ALL_EVENTS, {"pk": found.pk})).all()
                state = (await conn.execute(_READ_STATE, self._owners(ref))).all()
        return Session(
            ref.app_name,
            ref.user_id,
            ref.session_id,
            merged_state(((key, value) for key, value in state), ref),
            [decode_event(data, event_id, ref) for _, event_id, data in events],
            found.last_update_time,
        )

    async def list_sessions(self, app_name: str, user_id: str) -> list[Session]:
        """The user's sessions of the app, oldest first, with their state but no events."""
        app_name = validate_session_name(app_name, "app_name")
        user_id = validate_session_name(user_id, "user_id")
        with _StorageFailures(
            f"list the sessions of user {user_id!r} of app {app_name!r}", None, self._engine
        ):
            async with self._reading() as conn:
                probe = SessionRef(app_name, user_id, "")
                shared = (
                    await conn.execute(
                        _SHARED_STATE, {"app": probe.owner("app"), "user": probe.owner("user")}
                    )
                ).all()
                rows = (
                    await conn.execute(_LIST_SESSIONS, {"app_name": app_name, "user_id": user_id})
                ).all()
        sessions: dict[str, Session] = {}
        own: dict[str, list[tuple[str, object]]] = {}
        for session_id, last_update_time, key, value in rows:
            if session_id not in sessions:
                sessions[session_id] = Session(
                    app_name, user_id, session_id, {}, [], last_update_time
                )
                own[session_id] = []
            if key is not None:
                own[session_id].append((key, value))
        for session_id, session in sessions.items():
            ref = SessionRef(app_name, user_id, session_id)
            session.state = merged_state(
                [*((key, value) for key, value in shared), *own[session_id]], ref
            )
        return list(sessions.values())

    async def delete_session(self, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session, its events, its own state and its pause (no error if absent)."""
        ref = SessionRef.of(app_name, user_id, session_id)
        with _StorageFailures("delete", ref, self._engine):
            async with self._writing() as conn:
                # The session row first: on PostgreSQL this waits for an append in progress
                # (it holds the row), whose event the deletes below then see.
                deleted = (
                    await conn.execute(_DELETE_SESSION, {"key": ref.owner("session")})
                ).first()
                if deleted is not None:
                    await conn.execute(_DELETE_EVENTS, {"pk": deleted.pk})
                    await conn.execute(_DELETE_CHECKPOINT, {"pk": deleted.pk})
                await conn.execute(_DELETE_OWN_STATE, {"owner": ref.owner("session")})

    # -- events -------------------------------------------------------------------------------
    async def append_event(self, session: Session, event: SessionEvent) -> SessionEvent:
        """Store a copy of ``event`` in one transaction and update ``session``.

        See ``SessionService.append_event``; ``SessionNotFoundError`` if the session does not
        exist (or was deleted).
        """
        appended = prepare_append(session, event)
        with _StorageFailures("append an event to", appended.ref, self._engine):
            if self._worker is not None:
                await self._ensure_schema()
                await self._worker.append(appended)
            elif appended.covers is None and await self._append_in_one_statement(appended):
                pass
            else:
                async with self._append_transaction() as statements:
                    await _append(statements, appended)
        apply_to_session(session, appended)
        return appended.event

    async def _append_in_one_statement(self, appended: PreparedAppend) -> bool:
        """Store ``appended`` in one statement on asyncpg (PostgreSQL's common case); False
        when the driver is not asyncpg."""
        await self._ensure_schema()
        async with self._engine.connect() as conn:
            raw: Any = (await conn.get_raw_connection()).driver_connection
            if not type(raw).__module__.startswith("asyncpg"):
                return False
            await append_in_one_statement(raw, appended)
        return True

    @asynccontextmanager
    async def _append_transaction(self) -> AsyncIterator[_AppendStatements]:
        """The statements of one append on PostgreSQL, in a transaction committed at the end
        (SQLite appends run on the service's own connection: ``_sqlite_worker``)."""
        await self._ensure_schema()
        async with self._engine.connect() as conn:
            raw: Any = (await conn.get_raw_connection()).driver_connection
            if type(raw).__module__.startswith("asyncpg"):
                async with raw.transaction():
                    yield _AsyncpgStatements(raw)
            else:  # another PostgreSQL driver: through SQLAlchemy
                async with conn.begin():
                    yield _CoreStatements(conn, self._upsert_state)

    async def load_history(
        self, app_name: str, user_id: str, session_id: str
    ) -> list[SessionEvent]:
        """The latest summary and the events after the range it covers, or every event."""
        ref = SessionRef.of(app_name, user_id, session_id)
        with _StorageFailures("load the history of", ref, self._engine):
            async with self._reading() as conn:
                found = (await conn.execute(_READ_SESSION, {"key": ref.owner("session")})).first()
                if found is None:
                    raise ref.not_found("load the history of")
                if found.summary_seq is None:
                    rows = (await conn.execute(_ALL_EVENTS, {"pk": found.pk})).all()
                else:
                    # The summary was appended after the last event it covers, so it is in
                    # this one range of the primary key; it goes first.
                    after = (
                        await conn.execute(
                            _EVENTS_AFTER, {"pk": found.pk, "after": found.history_from_seq}
                        )
                    ).all()
                    rows = sorted(after, key=lambda row: row.seq != found.summary_seq)
        return [decode_event(data, event_id, ref) for _, event_id, data in rows]

    async def read_turn(
        self, app_name: str, user_id: str, session_id: str, *, after: HistoryMark | None = None
    ) -> TurnView | None:
        """The session without events, its pause and its history (only the events stored
        since ``after`` when that mark is still valid), in one read transaction; None when the
        session does not exist.

        Args:
            app_name: the app.
            user_id: the user.
            session_id: the session.
            after: the mark of an earlier read of this session (``TurnView.mark``).
        """
        ref = SessionRef.of(app_name, user_id, session_id)
        if self._worker is not None:
            return await self._read_turn_sqlite(ref, after)
        with _StorageFailures("read", ref, self._engine):
            await self._ensure_schema()
            async with self._engine.connect() as plain:
                raw: Any = (await plain.get_raw_connection()).driver_connection
                if type(raw).__module__.startswith("asyncpg"):
                    owners = list(self._owners(ref).values())
                    read = await read_turn_asyncpg(raw, ref.owner("session"), owners, after)
                    return None if read is None else _view(ref, after, read)
            async with self._reading() as conn:
                found = (await conn.execute(_READ_SESSION, {"key": ref.owner("session")})).first()
                if found is None:
                    return None
                delta = after is not None and after.leads_to(
                    found.pk, found.last_seq, found.summary_seq
                )
                if delta and after is not None and after.last_id is not None and after.last_seq:
                    at = (
                        await conn.execute(_EVENT_ID_AT, {"pk": found.pk, "seq": after.last_seq})
                    ).scalar()
                    delta = at == after.last_id
                if delta:
                    assert after is not None
                    rows = (
                        await conn.execute(_EVENTS_AFTER, {"pk": found.pk, "after": after.last_seq})
                    ).all()
                elif found.summary_seq is None:
                    rows = (await conn.execute(_ALL_EVENTS, {"pk": found.pk})).all()
                else:
                    after_rows = (
                        await conn.execute(
                            _EVENTS_AFTER, {"pk": found.pk, "after": found.history_from_seq}
                        )
                    ).all()
                    rows = sorted(after_rows, key=lambda row: row.seq != found.summary_seq)
                state = (await conn.execute(_READ_STATE, self._owners(ref))).all()
                pause = (
                    await conn.execute(_GET_CHECKPOINT, {"key": ref.owner("session")})
                ).scalar()
        session = Session(
            ref.app_name,
            ref.user_id,
            ref.session_id,
            merged_state(((key, value) for key, value in state), ref),
            [],
            found.last_update_time,
        )
        events = [decode_event(data, event_id, ref) for _, event_id, data in rows]
        if rows:
            last_id: str | None = max(rows, key=lambda row: row.seq).event_id
        else:
            last_id = after.last_id if delta and after is not None else None
        mark = HistoryMark(found.pk, found.last_seq, found.summary_seq, last_id)
        return TurnView(session, mark, events, delta, bytes(pause) if pause is not None else None)

    async def _read_turn_sqlite(
        self, ref: SessionRef, after: HistoryMark | None
    ) -> TurnView | None:
        assert self._worker is not None
        with _StorageFailures("read", ref, self._engine):
            await self._ensure_schema()
            read = await self._worker.read_turn(ref.owner("session"), self._owners(ref), after)
        return None if read is None else _view(ref, after, read)

    # -- pauses -------------------------------------------------------------------------------
    async def set_checkpoint(
        self, app_name: str, user_id: str, session_id: str, data: bytes | None
    ) -> None:
        """Store the session's pause, or delete it (``None``)."""
        ref = SessionRef.of(app_name, user_id, session_id)
        payload = check_pause(data)
        with _StorageFailures("save the pause of", ref, self._engine):
            async with self._writing() as conn:
                if payload is None:
                    await conn.execute(_DELETE_CHECKPOINT_OF, {"key": ref.owner("session")})
                    return
                # FOR KEY SHARE: a concurrent delete_session waits for this save, then deletes
                # the pause too (SQLite serialises write transactions anyway).
                pk = (
                    await conn.execute(_FIND_SESSION_KEY_SHARE, {"key": ref.owner("session")})
                ).scalar()
                if pk is None:
                    raise ref.not_found("save the pause of")
                await conn.execute(self._upsert_checkpoint, {"session_pk": pk, "data": payload})

    async def get_checkpoint(self, app_name: str, user_id: str, session_id: str) -> bytes | None:
        """The session's pause, or None."""
        ref = SessionRef.of(app_name, user_id, session_id)
        with _StorageFailures("read the pause of", ref, self._engine):
            async with self._reading() as conn:
                data = (await conn.execute(_GET_CHECKPOINT, {"key": ref.owner("session")})).scalar()
        return bytes(data) if data is not None else None

    # -- the turn lock ------------------------------------------------------------------------
    def lock(
        self, app_name: str, user_id: str, session_id: str, *, timeout: float
    ) -> AbstractAsyncContextManager[None]:
        """The session's turn lock across tasks and processes (see ``SessionService.lock``).

        Tasks of this process queue on an ``asyncio.Lock`` per session first; the one at the
        front then takes the lock every process shares. SQLite: an ``flock`` on
        ``<database file>.locks/<digest>.lock``. PostgreSQL: a session-level advisory lock
        (``pg_try_advisory_lock``) on the one connection that holds every lock of the service,
        out of the engine's pool, so a turn never occupies a pooled connection, many turns
        need no more connections than one, and a dead process's locks go with its connection.
        """
        ref = SessionRef.of(app_name, user_id, session_id)
        return self._hold(ref, validate_lock_timeout(timeout))

    @asynccontextmanager
    async def _hold(self, ref: SessionRef, timeout: float) -> AsyncIterator[None]:
        deadline = deadline_after(timeout)
        try:
            await self._local_locks.acquire(ref, deadline)
        except TimeoutError:
            raise ref.busy(timeout) from None
        try:
            shared = (
                self._advisory_locks.hold(ref, timeout, deadline)
                if self._lock_dir is None
                else _file_lock(self._engine, ref, timeout, deadline, self._lock_dir)
            )
            async with shared:
                yield
        finally:
            self._local_locks.release(ref)

    # -- life cycle ---------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the database connections (of an engine the service created; not a given one)."""
        await self._advisory_locks.aclose()
        if self._worker is not None:
            await self._worker.aclose()
        if self._owns_engine:
            await self._engine.dispose()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _view(ref: SessionRef, after: HistoryMark | None, read: TurnRows) -> TurnView:
    """The ``TurnView`` of what a fast-path read (SQLite worker, asyncpg) returned."""
    pk, last_update_time, summary_seq, _, last_seq = read.found
    session = Session(
        ref.app_name,
        ref.user_id,
        ref.session_id,
        merged_state(((key, value) for key, value in read.state), ref),
        [],
        last_update_time,
    )
    events = [decode_event(data, event_id, ref) for _, event_id, data in read.events]
    if read.events:
        last_id: str | None = max(read.events, key=lambda row: row[0])[1]
    else:
        last_id = after.last_id if read.delta and after is not None else None
    return TurnView(
        session,
        HistoryMark(pk, last_seq, summary_seq, last_id),
        events,
        read.delta,
        bytes(read.pause) if read.pause is not None else None,
    )
