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

import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Protocol, Self

from relaykit.errors import (
    ConfigurationError,
    RelayKitError,
    SessionExistsError,
    SessionStoreError,
)
from relaykit.sessions._file_lock import LockTimeout, acquire_file_lock, release_file_lock
from relaykit.sessions._local_lock import KeyedLocks
from relaykit.sessions._poll import poll
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
    unknown_summary_end,
)
from relaykit.sessions.base import (
    Session,
    SessionEvent,
    validate_lock_timeout,
    validate_session_name,
)

try:
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from relaykit import _db
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

SESSIONS_TABLE: Final = "relaykit_sessions"
EVENTS_TABLE: Final = "relaykit_session_events"
STATE_TABLE: Final = "relaykit_session_state"
CHECKPOINTS_TABLE: Final = "relaykit_session_checkpoints"
# How many connections of ended PostgreSQL turn locks are kept for the next ones.
_MAX_IDLE_LOCK_CONNECTIONS: Final = 8

# The tables as the service uses them. Their schema is owned by the migration
# r0002_sessions.py (never created from these definitions), which must produce these columns.
_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_metadata = sa.MetaData()
_sessions = sa.Table(
    SESSIONS_TABLE,
    _metadata,
    sa.Column("pk", _PK, primary_key=True, autoincrement=True),
    # SHA-256 of (app name, user id, session id): SessionRef.owner("session").
    sa.Column("session_key", sa.LargeBinary(32), nullable=False, unique=True),
    sa.Column("app_name", sa.Text(), nullable=False),
    sa.Column("user_id", sa.Text(), nullable=False),
    sa.Column("session_id", sa.Text(), nullable=False),
    # The seq of the last event appended (seqs start at 1): the number of events appended.
    sa.Column("last_seq", sa.Integer(), nullable=False),
    # The seq of the latest compaction summary, and of the last event it covers.
    sa.Column("summary_seq", sa.Integer(), nullable=True),
    sa.Column("history_from_seq", sa.Integer(), nullable=True),
    sa.Column("last_update_time", sa.Double(), nullable=False),
)
_events = sa.Table(
    EVENTS_TABLE,
    _metadata,
    sa.Column("session_pk", _PK, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("event_id", sa.Text(), nullable=False),
    sa.Column("data", sa.LargeBinary(), nullable=False),
)
_state = sa.Table(
    STATE_TABLE,
    _metadata,
    # SHA-256 of the scope and the names of the app, the user or the session (SessionRef.owner).
    sa.Column("owner", sa.LargeBinary(32), primary_key=True),
    sa.Column("key", sa.Text(), primary_key=True),  # with its prefix, as Session.state shows it
    sa.Column("scope", sa.String(16), nullable=False),
    sa.Column("app_name", sa.Text(), nullable=False),
    sa.Column("user_id", sa.Text(), nullable=False),  # "" for app state
    sa.Column("session_id", sa.Text(), nullable=False),  # "" for app and user state
    sa.Column("value", sa.LargeBinary(), nullable=False),
)
_checkpoints = sa.Table(
    CHECKPOINTS_TABLE,
    _metadata,
    sa.Column("session_pk", _PK, primary_key=True, autoincrement=False),
    sa.Column("data", sa.LargeBinary(), nullable=False),
)
_s, _e, _st, _cp = _sessions.c, _events.c, _state.c, _checkpoints.c


def _param(name: str) -> sa.BindParameter[Any]:
    return sa.bindparam(name)


# Statements built once: executing a prebuilt statement skips building and hashing it again
# (SQLAlchemy's compiled cache then serves the SQL), which matters on the append path.
_FIND_SESSION = sa.select(_s.pk).where(_s.session_key == _param("key"))
_FIND_SESSION_KEY_SHARE = _FIND_SESSION.with_for_update(key_share=True)
_READ_SESSION = sa.select(_s.pk, _s.last_update_time, _s.summary_seq, _s.history_from_seq).where(
    _s.session_key == _param("key")
)
_BUMP_SESSION = (
    sa.update(_sessions)
    .where(_s.session_key == _param("key"))
    .values(last_seq=_s.last_seq + sa.literal_column("1"), last_update_time=_param("now"))
    .returning(_s.pk, _s.last_seq)
)
_INSERT_EVENT = sa.insert(_events)
_SUMMARY_END = sa.select(sa.func.max(_e.seq)).where(
    _e.session_pk == _param("pk"), _e.event_id == _param("end")
)
_SET_SUMMARY = (
    sa.update(_sessions)
    .where(_s.pk == _param("session"))
    .values(summary_seq=_param("summary"), history_from_seq=_param("end"))
)
_ALL_EVENTS = (
    sa.select(_e.seq, _e.event_id, _e.data).where(_e.session_pk == _param("pk")).order_by(_e.seq)
)
_EVENTS_AFTER = (
    sa.select(_e.seq, _e.event_id, _e.data)
    .where(_e.session_pk == _param("pk"), _e.seq > _param("after"))
    .order_by(_e.seq)
)
_READ_STATE = sa.select(_st.key, _st.value).where(
    _st.owner.in_([_param("app"), _param("user"), _param("session")])
)
_SHARED_STATE = sa.select(_st.key, _st.value).where(_st.owner.in_([_param("app"), _param("user")]))
_LIST_SESSIONS = (
    sa.select(_s.session_id, _s.last_update_time, _st.key, _st.value)
    .select_from(_sessions.outerjoin(_state, _st.owner == _s.session_key))
    .where(_s.app_name == _param("app_name"), _s.user_id == _param("user_id"))
    .order_by(_s.pk)
)
_DELETE_SESSION = sa.delete(_sessions).where(_s.session_key == _param("key")).returning(_s.pk)
_DELETE_EVENTS = sa.delete(_events).where(_e.session_pk == _param("pk"))
_DELETE_CHECKPOINT = sa.delete(_checkpoints).where(_cp.session_pk == _param("pk"))
_DELETE_OWN_STATE = sa.delete(_state).where(_st.owner == _param("owner"))
_DELETE_CHECKPOINT_OF = sa.delete(_checkpoints).where(
    _cp.session_pk.in_(sa.select(_s.pk).where(_s.session_key == _param("key")).scalar_subquery())
)
_GET_CHECKPOINT = (
    sa.select(_cp.data)
    .select_from(_checkpoints.join(_sessions, _cp.session_pk == _s.pk))
    .where(_s.session_key == _param("key"))
)
_TRY_ADVISORY_LOCK = sa.select(sa.func.pg_try_advisory_lock(_param("key")))
_ADVISORY_UNLOCK = sa.select(sa.func.pg_advisory_unlock(_param("key")))


def _dialect_statements(backend: str) -> tuple[sa.Executable, sa.Executable, sa.Executable]:
    """The upserts of the backend: create a session, write a state key, save a pause."""
    insert = postgresql.insert if backend == "postgresql" else sqlite.insert
    create = insert(_sessions).on_conflict_do_nothing(index_elements=[_s.session_key])
    state = insert(_state)
    checkpoint = insert(_checkpoints)
    return (
        create.returning(_s.pk),
        state.on_conflict_do_update(
            index_elements=[_st.owner, _st.key], set_={"value": state.excluded.value}
        ),
        checkpoint.on_conflict_do_update(
            index_elements=[_cp.session_pk], set_={"data": checkpoint.excluded.data}
        ),
    )


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
        self._local_locks = KeyedLocks()
        self._sqlite_sql: _SqliteSql | None = None  # compiled on the first append
        # PostgreSQL: connections of ended turn locks, kept to serve the next ones (opening a
        # connection costs a round trip or more and a server process).
        self._idle_lock_connections: list[AsyncConnection] = []

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
            async with self._append_transaction() as statements:
                await _append(statements, appended)
        apply_to_session(session, appended)
        return appended.event

    @asynccontextmanager
    async def _append_transaction(self) -> AsyncIterator[_AppendStatements]:
        """The statements of one append, in a write transaction committed at the end.

        On SQLite the transaction runs on aiosqlite's connection itself: through SQLAlchemy's
        adapter every statement costs three or four trips to aiosqlite's thread (open a
        cursor, execute, fetch, close), here one. That halves the time of an append, which the
        Runner makes for every event. The statements are still SQLAlchemy Core's, compiled
        once (``_SqliteStatements``).
        """
        await self._ensure_schema()
        if self._backend != "sqlite":
            async with self._engine.begin() as conn:
                yield _CoreStatements(conn, self._upsert_state)
            return
        if self._sqlite_sql is None:
            self._sqlite_sql = _SqliteSql(self._engine.dialect, self._upsert_state)
        async with self._engine.connect() as conn:
            db: Any = (await conn.get_raw_connection()).driver_connection
            try:
                # IMMEDIATE, as every relaykit write transaction (see relaykit._db).
                await db.execute("BEGIN IMMEDIATE")
                yield _SqliteStatements(db, self._sqlite_sql)
            except BaseException:
                # Should this fail too, the pool rolls the connection back when it returns.
                with contextlib.suppress(Exception):
                    await db.rollback()
                raise
            await db.commit()

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
        (``pg_try_advisory_lock``) on a connection of its own, taken out of the engine's pool
        for the block and closed afterwards, so a turn never occupies a pooled connection and
        a dead process's lock goes with its connection.
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
                self._advisory_lock(ref, timeout, deadline)
                if self._lock_dir is None
                else self._file_lock(ref, timeout, deadline, self._lock_dir)
            )
            async with shared:
                yield
        finally:
            self._local_locks.release(ref)

    @asynccontextmanager
    async def _file_lock(
        self, ref: SessionRef, timeout: float, deadline: float | None, folder: Path
    ) -> AsyncIterator[None]:
        path = folder / f"{ref.lock_name().hex()}.lock"
        with _StorageFailures("lock", ref, self._engine):
            try:
                fd = await acquire_file_lock(path, deadline)
            except LockTimeout:
                raise ref.busy(timeout) from None
        try:
            yield
        finally:
            with _StorageFailures("unlock", ref, self._engine):
                release_file_lock(fd, path)

    @asynccontextmanager
    async def _advisory_lock(
        self, ref: SessionRef, timeout: float, deadline: float | None
    ) -> AsyncIterator[None]:
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

    # -- life cycle ---------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the database connections (of an engine the service created; not a given one)."""
        idle, self._idle_lock_connections = self._idle_lock_connections, []
        for conn in idle:
            with contextlib.suppress(Exception):
                await _close_detached(conn)
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


class _SqliteStatements:
    """The append's statements on aiosqlite's connection (see ``_append_transaction``)."""

    __slots__ = ("_db", "_sql")

    def __init__(self, db: Any, sql: _SqliteSql) -> None:
        self._db, self._sql = db, sql

    async def _rows(self, compiled: _Compiled, values: dict[str, Any]) -> list[Any]:
        sql, names = compiled
        return list(await self._db.execute_fetchall(sql, [values[name] for name in names]))

    async def bump(self, session_key: bytes, now: float) -> tuple[int, int] | None:
        rows = await self._rows(self._sql.bump, {"key": session_key, "now": now})
        return (rows[0][0], rows[0][1]) if rows else None

    async def summary_end(self, session_pk: int, event_id: str) -> int | None:
        rows = await self._rows(self._sql.summary_end, {"pk": session_pk, "end": event_id})
        end: int | None = rows[0][0]
        return end

    async def set_summary(self, session_pk: int, summary_seq: int, end_seq: int) -> None:
        await self._rows(
            self._sql.set_summary, {"session": session_pk, "summary": summary_seq, "end": end_seq}
        )

    async def insert_event(self, session_pk: int, seq: int, event_id: str, data: bytes) -> None:
        sql, _ = self._sql.insert_event  # compiled with the table's columns, in this order
        await self._db.execute(sql, (session_pk, seq, event_id, data))

    async def upsert_state(self, rows: list[dict[str, Any]]) -> None:
        sql, names = self._sql.upsert_state
        await self._db.executemany(sql, [[row[name] for name in names] for row in rows])


class _StorageFailures:
    """Re-raises a failure inside its block as ``SessionStoreError``.

    The new error names the operation, the session and the kind of failure. The original is
    dropped (``from None``): the driver's message and attributes can hold the SQL and its
    parameters, that is stored content. relaykit's own errors (not found, exists, corrupt
    rows) pass through; so do cancellation and other ``BaseException``s.
    """

    __slots__ = ("_engine", "_operation", "_ref")

    def __init__(self, operation: str, ref: SessionRef | None, engine: AsyncEngine) -> None:
        self._operation = operation
        self._ref = ref
        self._engine = engine

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, RelayKitError):
            return
        what = self._operation if self._ref is None else f"{self._operation} {self._ref}"
        backend = self._engine.url.drivername
        raise SessionStoreError(
            f"the session service could not {what}: {_db.describe_failure(exc)} "
            f"from {backend}. Check that the database is reachable and writable (the "
            "driver's message is withheld: it can contain stored content)"
        ) from None
