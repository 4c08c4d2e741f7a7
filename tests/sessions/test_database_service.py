"""DatabaseSessionService on SQLite, and on PostgreSQL when RELAYKIT_TEST_POSTGRES_URL is set.

What only the database service has: its tables and rows, one transaction per append, rows that
do not decode, failures of the database itself (SessionStoreError without SQL or stored
content), long names, URLs and engines, sharing a database with the checkpoint store, and the
lock files of SQLite.
"""

from __future__ import annotations

import asyncio
import json
import threading
import traceback
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from sqlalchemy import event as sa_event
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from relaykit import AgentAction, Message
from relaykit._db import MIGRATIONS_DIR
from relaykit.checkpoints.database import DatabaseCheckpointStore
from relaykit.codec import dumps
from relaykit.errors import (
    ConfigurationError,
    SerializationError,
    SessionNotFoundError,
    SessionStoreError,
)
from relaykit.sessions import DatabaseSessionService, Session, SessionEvent
from relaykit.sessions.database import _checkpoints, _events, _sessions, _state
from tests.sessions.support import fetch, table_names

HEAD = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
APP, USER = "shop", "u1"
SESSION_TABLES = {
    "relaykit_sessions",
    "relaykit_session_events",
    "relaykit_session_state",
    "relaykit_session_checkpoints",
}
SQL_WORDS = ("SELECT", "INSERT", "UPDATE", "DELETE", "relaykit_session", "[parameters")


def said(text: str, **fields: Any) -> SessionEvent:
    return SessionEvent(author="user", message=Message.user(text), **fields)


def assert_safe_store_error(error: BaseException, *secrets: str) -> None:
    """The error and everything a traceback of it would print hold no SQL and no secret."""
    printed = "".join(traceback.format_exception(error))
    for text in (*SQL_WORDS, *secrets):
        assert text not in str(error)
        assert text not in printed
    assert error.__cause__ is None and error.__suppress_context__


async def columns(url: str, table: str) -> dict[str, dict[str, object]]:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            found = await conn.run_sync(lambda sync: sa.inspect(sync).get_columns(table))
            primary = await conn.run_sync(lambda sync: sa.inspect(sync).get_pk_constraint(table))
    finally:
        await engine.dispose()
    return {
        column["name"]: {
            "nullable": column["nullable"],
            "primary": column["name"] in primary["constrained_columns"],
        }
        for column in found
    }


# -- schema ----------------------------------------------------------------------------------------
async def test_a_fresh_database_gets_the_tables_the_service_uses_at_the_head_revision(
    database_url: str,
) -> None:
    async with DatabaseSessionService(database_url):
        pass
    assert SESSION_TABLES | {"relaykit_alembic_version"} <= await table_names(database_url)
    assert await fetch(database_url, "SELECT version_num FROM relaykit_alembic_version") == [
        (HEAD,)
    ]
    for table in (_sessions, _events, _state, _checkpoints):
        declared = {
            column.name: {"nullable": column.nullable, "primary": column.primary_key}
            for column in table.columns
        }
        assert await columns(database_url, table.name) == declared


@pytest.mark.parametrize("first", ["checkpoint store", "session service"])
async def test_the_checkpoint_store_and_the_session_service_share_one_database(
    database_url: str, first: str
) -> None:
    store, service = DatabaseCheckpointStore(database_url), DatabaseSessionService(database_url)
    try:
        await (store.open() if first == "checkpoint store" else service.open())
        await store.set("cp-1", b"run pause")
        session = await service.create_session(APP, USER, "s1")
        await service.append_event(session, said("hi"))
        await service.set_checkpoint(APP, USER, "s1", b"session pause")

        assert await store.get("cp-1") == b"run pause"
        assert await service.get_checkpoint(APP, USER, "s1") == b"session pause"
    finally:
        await store.aclose()
        await service.aclose()
    assert SESSION_TABLES | {"relaykit_checkpoints"} <= await table_names(database_url)
    assert await fetch(database_url, "SELECT version_num FROM relaykit_alembic_version") == [
        (HEAD,)
    ]


async def test_a_shared_engine_serves_both_stores_and_is_left_open(database_url: str) -> None:
    engine = create_async_engine(database_url)
    try:
        async with (
            DatabaseCheckpointStore(database_url, engine=engine) as store,
            DatabaseSessionService(database_url, engine=engine) as service,
        ):
            await store.set("cp-1", b"doc")
            await service.create_session(APP, USER, "s1", {"k": 1})
        async with engine.connect() as conn:  # still usable: the stores did not dispose it
            count = (await conn.execute(sa.text("SELECT count(*) FROM relaykit_sessions"))).scalar()
        assert count == 1
    finally:
        await engine.dispose()


async def test_services_opening_one_cold_database_at_once_all_work(database_url: str) -> None:
    services = [DatabaseSessionService(database_url) for _ in range(4)]
    try:
        created = await asyncio.gather(
            *(
                service.create_session(APP, USER, f"s{n}", {"user:n": n})
                for n, service in enumerate(services)
            ),
            return_exceptions=True,
        )
    finally:
        for service in services:
            await service.aclose()
    assert [type(c).__name__ for c in created] == ["Session"] * 4
    assert await fetch(database_url, "SELECT count(*) FROM relaykit_sessions") == [(4,)]


# -- rows ------------------------------------------------------------------------------------------
async def test_rows_are_one_per_event_and_one_per_state_key_holding_the_codecs_json(
    database_url: str,
) -> None:
    async with DatabaseSessionService(database_url) as service:
        session = await service.create_session(APP, USER, "s1", {"app:a": 1, "temp:t": 0})
        first = await service.append_event(
            session,
            said("hi", state_delta={"user:lang": "fr", "topic": "refund", "temp:scratch": 1}),
        )
        second = await service.append_event(session, said("again", id="evt-2"))
        await service.set_checkpoint(APP, USER, "s1", b"pause")

    events = await fetch(
        database_url,
        "SELECT e.seq, e.event_id, e.data FROM "
        "relaykit_session_events e JOIN relaykit_sessions s "
        "ON e.session_pk = s.pk WHERE s.session_id = 's1' ORDER BY e.seq",
    )
    assert [(seq, event_id) for seq, event_id, _ in events] == [(1, first.id), (2, "evt-2")]
    document = json.loads(bytes(events[0][2]))
    assert (document["format"], document["payload"]["__type__"]) == (
        "relaykit/session-event",
        "relaykit.SessionEvent",
    )
    assert document["payload"]["data"]["state_delta"] == {"topic": "refund", "user:lang": "fr"}
    assert b"temp:" not in bytes(events[0][2])
    state = await fetch(
        database_url,
        "SELECT scope, app_name, user_id, session_id, key, value "
        "FROM relaykit_session_state ORDER BY scope, key",
    )
    assert [(row[:5], json.loads(bytes(row[5]))["payload"]) for row in state] == [
        (("app", APP, "", "", "app:a"), 1),
        (("session", APP, USER, "s1", "topic"), "refund"),
        (("user", APP, USER, "", "user:lang"), "fr"),
    ]
    assert [
        (bytes(data),)
        for (data,) in await fetch(database_url, "SELECT data FROM relaykit_session_checkpoints")
    ] == [(b"pause",)]
    assert await fetch(
        database_url,
        "SELECT session_id, last_seq, summary_seq, "
        "history_from_seq, last_update_time FROM relaykit_sessions",
    ) == [("s1", 2, None, None, session.last_update_time)]
    assert second.timestamp == session.last_update_time


async def test_an_append_is_one_transaction_of_prepared_statements_without_schema_checks(
    database_url: str,
) -> None:
    engine = create_async_engine(database_url)
    statements: list[str] = []

    def record(statement: str) -> None:
        statements.append(" ".join(statement.split()[:3]))

    def trace_postgres(dbapi_connection: Any, connection_record: Any) -> None:
        # PostgreSQL appends run straight on asyncpg's connection: trace asyncpg itself.
        dbapi_connection.driver_connection.add_query_logger(lambda query: record(query.query))

    sqlite = database_url.startswith("sqlite")
    if not sqlite:
        sa_event.listen(engine.sync_engine, "connect", trace_postgres)
    try:
        async with DatabaseSessionService(database_url, engine=engine) as service:
            session = await service.create_session(APP, USER, "s1")
            await service.append_event(session, said("warm-up"))
            if sqlite:
                # SQLite appends run on the service's own sqlite3 connection, on the event
                # loop's thread (synchronous=NORMAL): trace SQLite itself on it.
                worker = service._worker
                assert worker is not None and worker._loop_conn is not None
                worker._loop_conn.set_trace_callback(record)
            statements.clear()
            await service.append_event(session, said("hi"))
            await service.append_event(session, said("hi", state_delta={"a": 1, "user:b": 2}))
    finally:
        await engine.dispose()
    one = ["UPDATE relaykit_sessions SET", "INSERT INTO relaykit_session_events"]
    upserts = ["INSERT INTO relaykit_session_state"] * (2 if sqlite else 1)  # executemany
    if sqlite:
        begin, commit = "BEGIN IMMEDIATE", "COMMIT"
        appends = [begin, *one, commit, begin, *one, *upserts, commit]
    else:  # one statement each: the session row, the event and the state in one CTE
        appends = ["WITH bumped AS", "WITH bumped AS"]
    assert [s for s in statements if not s.startswith("SELECT")] == appends


async def test_the_summary_range_is_kept_on_the_session_row(database_url: str) -> None:
    async with DatabaseSessionService(database_url) as service:
        session = await service.create_session(APP, USER, "s1")
        ids = [(await service.append_event(session, said(f"m{n}"))).id for n in range(4)]
        await service.append_event(
            session,
            SessionEvent(
                author="compactor",
                message=Message.assistant("sum"),
                action=AgentAction(custom={"compaction": {"start": ids[0], "end": ids[2]}}),
            ),
        )
    assert await fetch(
        database_url, "SELECT summary_seq, history_from_seq FROM relaykit_sessions"
    ) == [(5, 3)]


# -- rows that do not decode -----------------------------------------------------------------------
SECRET = "top-secret-content"


def another_kind_of_document() -> bytes:
    return dumps({"note": SECRET}, kind="relaykit/checkpoint")


def a_message_instead_of_an_event() -> bytes:
    return dumps(Message.user(SECRET), kind="relaykit/session-event")


def an_event_with_a_bad_field() -> bytes:
    good = dumps(
        SessionEvent(id="e2", author="user", message=Message.user(SECRET)),
        kind="relaykit/session-event",
    )
    return good.replace(b'"author":"user"', b'"author":5')


def another_events_id() -> bytes:
    return dumps(
        SessionEvent(id="e9", author="user", message=Message.user(SECRET)),
        kind="relaykit/session-event",
    )


CORRUPT_EVENTS = [
    pytest.param(
        lambda: b'{"format":"relaykit/session-event","version":1,"payload":{"' + SECRET.encode(),
        "not JSON",
        id="truncated-json",
    ),
    pytest.param(lambda: b"\xff\xfe" + SECRET.encode(), "invalid UTF-8", id="not-utf8"),
    pytest.param(lambda: json.dumps([SECRET]).encode(), "not a relaykit", id="json-list"),
    pytest.param(another_kind_of_document, "not a relaykit", id="another-kind"),
    pytest.param(a_message_instead_of_an_event, "not a session event", id="a-message"),
    pytest.param(an_event_with_a_bad_field, "author", id="bad-field"),
    pytest.param(another_events_id, "another event's id", id="another-id"),
]


@pytest.mark.parametrize(("corrupt", "problem"), CORRUPT_EVENTS)
async def test_an_event_row_that_does_not_decode_is_a_serialization_error_naming_session_and_event(
    database_url: str, corrupt: Any, problem: str
) -> None:
    async with DatabaseSessionService(database_url) as service:
        session = await service.create_session(APP, USER, "s1")
        other = await service.create_session(APP, USER, "s2")
        for n in (1, 2, 3):
            await service.append_event(session, said(f"m{n}", id=f"e{n}"))
        await service.append_event(other, said("fine", id="e2"))
        await fetch(
            database_url,
            "UPDATE relaykit_session_events SET data = :data WHERE "
            "event_id = 'e2' AND session_pk = (SELECT pk FROM "
            "relaykit_sessions WHERE session_id = 's1')",
            data=corrupt(),
        )

        for read in (service.get_session(APP, USER, "s1"), service.load_history(APP, USER, "s1")):
            with pytest.raises(SerializationError) as caught:
                await read
            message = str(caught.value)
            assert "event 'e2' of session 's1'" in message and problem in message
            assert SECRET not in message
        # The rest of the database is unaffected.
        assert [e.id for e in (await service.get_session(APP, USER, "s2")).events] == ["e2"]
        await service.append_event(session, said("m4"))


async def test_a_state_value_that_does_not_decode_is_a_serialization_error_naming_the_key(
    database_url: str,
) -> None:
    async with DatabaseSessionService(database_url) as service:
        await service.create_session(APP, USER, "s1", {"user:profile": {"x": 1}, "k": 2})
        await fetch(
            database_url,
            "UPDATE relaykit_session_state SET value = :data WHERE key = 'user:profile'",
            data=b'{"format":"relaykit/session-state","version":1,"payload":{"__type__"'
            b':"no.such.Type","data":{"secret":"' + SECRET.encode() + b'"}}}',
        )
        for read in (service.get_session(APP, USER, "s1"), service.list_sessions(APP, USER)):
            with pytest.raises(SerializationError) as caught:
                await read
            assert "state key 'user:profile' of session" in str(caught.value)
            assert SECRET not in str(caught.value)


async def test_load_history_never_reads_the_events_a_summary_covers(database_url: str) -> None:
    async with DatabaseSessionService(database_url) as service:
        session = await service.create_session(APP, USER, "s1")
        for n in range(5):
            await service.append_event(session, said(f"m{n}", id=f"e{n}"))
        await service.append_event(
            session,
            SessionEvent(
                id="sum",
                author="compactor",
                message=Message.assistant("sum"),
                action=AgentAction(custom={"compaction": {"start": "e0", "end": "e2"}}),
            ),
        )
        # Covered rows broken beyond repair: the history does not need them.
        await fetch(
            database_url,
            "UPDATE relaykit_session_events SET data = :bad WHERE event_id IN ('e0', 'e1', 'e2')",
            bad=b"garbage",
        )

        history = await service.load_history(APP, USER, "s1")
        assert [e.id for e in history] == ["sum", "e3", "e4"]
        with pytest.raises(SerializationError, match="event 'e0'"):
            await service.get_session(APP, USER, "s1")


# -- failures of the database ----------------------------------------------------------------------
DOWN_URLS = [
    pytest.param("postgresql+asyncpg://postgres@127.0.0.1:1/x", id="postgres-refused"),
    pytest.param("sqlite+aiosqlite:///{tmp}/a-file/sessions.db", id="sqlite-not-a-directory"),
]


@pytest.mark.parametrize("url", DOWN_URLS)
async def test_a_database_that_is_down_raises_store_errors_naming_operation_and_session(
    url: str, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_text("a file where a directory should be")
    marker = f"secret-{uuid.uuid4().hex}"
    service = DatabaseSessionService(url.format(tmp=tmp_path))
    where = "session 's1' (app 'shop', user 'u1')"
    calls = {
        f"create {where}": lambda: service.create_session(APP, USER, "s1", {"k": marker}),
        f"read {where}": lambda: service.get_session(APP, USER, "s1"),
        "list the sessions of user 'u1' of app 'shop'": lambda: service.list_sessions(APP, USER),
        f"delete {where}": lambda: service.delete_session(APP, USER, "s1"),
        f"append an event to {where}": lambda: service.append_event(
            Session(APP, USER, "s1"), said(marker)
        ),
        f"load the history of {where}": lambda: service.load_history(APP, USER, "s1"),
        f"save the pause of {where}": lambda: service.set_checkpoint(
            APP, USER, "s1", marker.encode()
        ),
        f"read the pause of {where}": lambda: service.get_checkpoint(APP, USER, "s1"),
        f"lock {where}": lambda: _enter(service.lock(APP, USER, "s1", timeout=1)),
        "open its database": service.open,
    }
    try:
        for operation, call in calls.items():
            with pytest.raises(SessionStoreError) as caught:
                await call()
            assert f"the session service could not {operation}: " in str(caught.value)
            assert_safe_store_error(caught.value, marker)
            assert str(tmp_path) not in str(caught.value)
    finally:
        await service.aclose()
        await aiosqlite_threads_finished()


async def _enter(lock: Any) -> None:
    async with lock:
        pytest.fail("the lock was taken on a database that is down")


async def aiosqlite_threads_finished() -> None:
    """Wait until aiosqlite's worker threads have ended (after a failed connect aiosqlite stops
    its thread without waiting; it would report "Event loop is closed" into a later test)."""
    for _ in range(1000):
        if not any(t.name.endswith("(_connection_worker_thread)") for t in threading.enumerate()):
            return
        await asyncio.sleep(0.005)


async def test_an_invalid_name_is_refused_before_the_database_is_contacted() -> None:
    service = DatabaseSessionService("postgresql+asyncpg://postgres@127.0.0.1:1/x")
    try:
        with pytest.raises(SessionStoreError, match=r"^session_id must not contain NUL"):
            await service.create_session(APP, USER, "a\x00b")
        with pytest.raises(SessionStoreError, match=r"^user_id must encode as UTF-8"):
            await service.append_event(Session(APP, "\ud800", "s1"), said("x"))
        with pytest.raises(SessionStoreError, match=r"^a state key"):
            await service.create_session(APP, USER, "s1", {"": 1})
        with pytest.raises(SerializationError):
            await service.create_session(APP, USER, "s1", {"k": object()})
    finally:
        await service.aclose()


async def test_a_failing_write_never_reports_sql_or_stored_content(database_url: str) -> None:
    marker = f"secret-{uuid.uuid4().hex}"
    async with DatabaseSessionService(database_url) as service:
        session = await service.create_session(APP, USER, "s1")
        # The tables vanish under the service: every statement now fails in the driver, whose
        # message quotes the SQL and its parameters.
        for table in ("relaykit_session_events", "relaykit_session_state"):
            await fetch(database_url, f"DROP TABLE {table}")
        calls = [
            service.append_event(session, said(marker, state_delta={"k": marker})),
            service.get_session(APP, USER, "s1"),
            service.create_session(APP, USER, "s2", {"k": marker}),
        ]
        for call in calls:
            with pytest.raises(SessionStoreError) as caught:
                await call
            assert_safe_store_error(caught.value, marker)
            assert "'s1'" in str(caught.value) or "'s2'" in str(caught.value)


@pytest.mark.postgres
async def test_a_database_error_quoting_the_event_is_withheld(postgres_url: str) -> None:
    marker = f"secret-{uuid.uuid4().hex}"
    async with DatabaseSessionService(postgres_url) as service:
        session = await service.create_session(APP, USER, "s1")
        await fetch(
            postgres_url,
            """
            CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'refused %', convert_from(NEW.data, 'UTF8'); END $$""",
        )
        await fetch(
            postgres_url,
            "CREATE TRIGGER refuse BEFORE INSERT ON "
            "relaykit_session_events FOR EACH ROW EXECUTE FUNCTION refuse()",
        )
        with pytest.raises(SessionStoreError) as caught:
            await service.append_event(session, said(marker))
        assert_safe_store_error(caught.value, marker)
        assert "RaiseError (P0001)" in str(caught.value)
        # The transaction was rolled back: no event, and the session row was not bumped.
        assert await fetch(postgres_url, "SELECT last_seq FROM relaykit_sessions") == [(0,)]
        assert session.events == []


# -- names, URLs, engines --------------------------------------------------------------------------
async def test_names_of_255_four_byte_characters_fit_every_index(database_url: str) -> None:
    app, user, sid, key = (
        "".join(chr(0x1F300 + (n * 7 + k) % 700) for n in range(255)) for k in range(4)
    )
    async with DatabaseSessionService(database_url) as service:
        session = await service.create_session(app, user, sid, {f"app:{key}": 1})
        await service.append_event(
            session, said("hi", id=key, state_delta={f"user:{key}": 2, key: 3})
        )
        await service.set_checkpoint(app, user, sid, b"pause")
        async with service.lock(app, user, sid, timeout=1):
            loaded = await service.get_session(app, user, sid)
        assert loaded.state == {f"app:{key}": 1, f"user:{key}": 2, key: 3}
        assert [e.id for e in loaded.events] == [key]
        assert [s.id for s in await service.list_sessions(app, user)] == [sid]
        await service.delete_session(app, user, sid)
        assert await service.get_session(app, user, sid) is None


@pytest.mark.parametrize(
    "url",
    [
        "sqlite+aiosqlite://",
        "sqlite+aiosqlite:///:memory:",
        "sqlite+aiosqlite:///file:x?mode=memory&uri=true",
    ],
)
def test_an_in_memory_sqlite_url_is_refused(url: str) -> None:
    with pytest.raises(ConfigurationError, match="in-memory"):
        DatabaseSessionService(url)


async def test_an_engine_on_an_in_memory_sqlite_database_is_refused() -> None:
    engine = create_async_engine("sqlite+aiosqlite://")
    try:
        with pytest.raises(ConfigurationError, match="in-memory"):
            DatabaseSessionService("ignored", engine=engine)
    finally:
        await engine.dispose()


def test_a_synchronous_engine_is_refused() -> None:
    engine = sa.create_engine("sqlite://")
    with pytest.raises(ConfigurationError, match="AsyncEngine"):
        DatabaseSessionService("ignored", engine=engine)  # type: ignore[arg-type]


def test_the_repr_hides_the_password() -> None:
    service = DatabaseSessionService("postgresql+asyncpg://app:hunter2@127.0.0.1:1/x")
    assert "hunter2" not in repr(service)


async def test_a_missing_session_is_not_found_after_a_concurrent_delete(database_url: str) -> None:
    async with DatabaseSessionService(database_url) as service:
        session = await service.create_session(APP, USER, "s1")
        results = await asyncio.gather(
            *(service.append_event(session, said(f"m{n}")) for n in range(20)),
            service.delete_session(APP, USER, "s1"),
            *(service.append_event(session, said(f"n{n}")) for n in range(20)),
            return_exceptions=True,
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(f, SessionNotFoundError) for f in failures)
        # Whatever the order, nothing of the deleted session is left behind.
        assert await fetch(database_url, "SELECT count(*) FROM relaykit_session_events") == [(0,)]
        assert await fetch(database_url, "SELECT count(*) FROM relaykit_sessions") == [(0,)]


# -- SQLite lock files -----------------------------------------------------------------------------
async def test_sqlite_lock_files_live_next_to_the_database_and_are_removed_after_use(
    sqlite_url: str, tmp_path: Path
) -> None:
    folder = Path(sqlite_url.removeprefix("sqlite+aiosqlite:///") + ".locks")
    async with DatabaseSessionService(sqlite_url) as service:
        async with service.lock(APP, USER, "s1", timeout=1):
            held = list(folder.iterdir())
            assert len(held) == 1 and held[0].suffix == ".lock"
            assert "s1" not in held[0].name
        assert list(folder.iterdir()) == []
