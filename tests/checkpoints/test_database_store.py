"""DatabaseCheckpointStore on SQLite, and on PostgreSQL when RELAYKIT_TEST_POSTGRES_URL is set.

What only the database store has: cold starts under load, upserts, failures of the database
itself (reported as CheckpointStoreError without SQL or stored content), URLs and engines, and
an end-to-end resume through a fresh store object.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import traceback
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

import relaykit as rk
from relaykit import AgentEvent, Message
from relaykit.checkpoints.database import DatabaseCheckpointStore
from relaykit.errors import CheckpointStoreError, ConfigurationError
from tests.checkpoints.support import fetch, table_names

SQL_WORDS = ("SELECT", "INSERT", "UPDATE", "DELETE", "relaykit_checkpoints", "[parameters")


def assert_safe_store_error(error: CheckpointStoreError, *secrets: str) -> None:
    """The error and everything a traceback of it would print hold no SQL and no secret."""
    printed = "".join(traceback.format_exception(error))
    for text in (*SQL_WORDS, *secrets):
        assert text not in str(error)
        assert text not in printed
    assert error.__cause__ is None and error.__suppress_context__


async def count_rows(url: str) -> int:
    return int((await fetch(url, "SELECT count(*) FROM relaykit_checkpoints"))[0][0])


async def test_a_burst_of_new_ids_on_a_cold_database_from_two_store_objects_saves_every_one(
    database_url: str,
) -> None:
    url = database_url
    n = 1000 if url.startswith("sqlite") else 250
    # Two store objects on a database that has no table yet: two processes' first use.
    first, second = DatabaseCheckpointStore(url), DatabaseCheckpointStore(url)
    try:
        results = await asyncio.gather(
            *((first if i % 2 else second).set(f"run-{i}", f"doc {i}".encode()) for i in range(n)),
            return_exceptions=True,
        )
    finally:
        await first.aclose()
        await second.aclose()
    assert [r for r in results if r is not None] == []
    rows = await fetch(url, "SELECT checkpoint_id, data FROM relaykit_checkpoints")
    assert {checkpoint_id: bytes(data) for checkpoint_id, data in rows} == {
        f"run-{i}": f"doc {i}".encode() for i in range(n)
    }


async def test_concurrent_first_saves_of_one_id_all_succeed(database_url: str) -> None:
    first, second = DatabaseCheckpointStore(database_url), DatabaseCheckpointStore(database_url)
    written = {f"version {i}".encode() for i in range(100)}
    try:
        results = await asyncio.gather(
            *(
                (first if i % 2 else second).set("same", f"version {i}".encode())
                for i in range(100)
            ),
            return_exceptions=True,
        )
    finally:
        await first.aclose()
        await second.aclose()
    assert [r for r in results if r is not None] == []
    rows = await fetch(
        database_url, "SELECT checkpoint_id, data, claim_owner FROM relaykit_checkpoints"
    )
    assert len(rows) == 1
    checkpoint_id, data, owner = rows[0]
    assert checkpoint_id == "same" and bytes(data) in written and owner is None


DOWN_URLS = [
    pytest.param("postgresql+asyncpg://postgres@127.0.0.1:1/x", id="postgres-refused"),
    pytest.param("sqlite+aiosqlite:///{tmp}/no/such/dir/cp.db", id="sqlite-missing-dir"),
]


@pytest.mark.parametrize("url", DOWN_URLS)
async def test_a_store_that_is_down_raises_store_errors_naming_operation_and_id(
    url: str, tmp_path: Path
) -> None:
    marker = f"secret-{uuid.uuid4().hex}"
    store = DatabaseCheckpointStore(url.format(tmp=tmp_path))
    calls = {
        "read checkpoint 'cp-1'": store.get("cp-1"),
        "save checkpoint 'cp-1'": store.set("cp-1", marker.encode()),
        "claim checkpoint 'cp-1'": store.claim("cp-1", "owner-a", 60),
        "renew the claim on checkpoint 'cp-1'": store.renew("cp-1", "owner-a", 60),
        "release the claim on checkpoint 'cp-1'": store.release("cp-1", "owner-a"),
        "finish the resume of checkpoint 'cp-1'": store.finish("cp-1", "owner-a", marker.encode()),
        "delete checkpoint 'cp-1'": store.delete("cp-1"),
        "open its database": store.open(),
    }
    try:
        for operation, call in calls.items():
            with pytest.raises(CheckpointStoreError) as caught:
                await call
            assert f"the checkpoint store could not {operation}: " in str(caught.value)
            assert_safe_store_error(caught.value, marker, str(tmp_path))
    finally:
        await store.aclose()
        await aiosqlite_threads_finished()
    assert "ConnectionRefusedError" in str(caught.value) or "SQLITE_CANTOPEN" in str(caught.value)


async def aiosqlite_threads_finished() -> None:
    """Wait until aiosqlite's worker threads have ended.

    After a failed connect aiosqlite stops its thread without waiting for it; if the test's event
    loop closes first, the thread reports "Event loop is closed" into a later test.
    """
    for _ in range(1000):
        if not any(t.name.endswith("(_connection_worker_thread)") for t in threading.enumerate()):
            return
        await asyncio.sleep(0.005)


async def test_an_invalid_id_is_refused_before_the_database_is_contacted() -> None:
    store = DatabaseCheckpointStore("postgresql+asyncpg://postgres@127.0.0.1:1/x")
    try:
        with pytest.raises(CheckpointStoreError, match="must not contain NUL"):
            await store.set("a\x00b", b"doc")
        with pytest.raises(CheckpointStoreError, match="unpaired surrogate"):
            await store.claim("\ud800", "owner-a", 60)
    finally:
        await store.aclose()


async def test_a_failing_write_never_reports_stored_content(database_url: str) -> None:
    marker = f"secret-{uuid.uuid4().hex}"
    store = DatabaseCheckpointStore(database_url)
    try:
        await store.set("cp-1", f"older {marker}".encode())
        await store.claim("cp-1", "owner-a", 60)
        # The table vanishes under the store: every statement now fails in the driver, whose
        # message quotes the SQL and its parameters.
        await fetch(database_url, "DROP TABLE relaykit_checkpoints")
        calls = [
            store.set("cp-1", marker.encode()),
            store.get("cp-1"),
            store.claim("cp-1", "owner-b", 60),
            store.finish("cp-1", "owner-a", marker.encode()),
        ]
        for call in calls:
            with pytest.raises(CheckpointStoreError) as caught:
                await call
            assert_safe_store_error(caught.value, marker)
            assert "'cp-1'" in str(caught.value)
    finally:
        await store.aclose()


@pytest.mark.postgres
async def test_a_database_error_quoting_the_document_is_withheld(postgres_url: str) -> None:
    marker = f"secret-{uuid.uuid4().hex}"
    store = DatabaseCheckpointStore(postgres_url)
    try:
        await store.open()
        # A trigger whose error message quotes the stored document (as a constraint might).
        await fetch(
            postgres_url,
            """
            CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'refused %', convert_from(NEW.data, 'UTF8'); END $$""",
        )
        await fetch(
            postgres_url,
            "CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON "
            "relaykit_checkpoints FOR EACH ROW EXECUTE FUNCTION refuse()",
        )
        with pytest.raises(CheckpointStoreError) as caught:
            await store.set("cp-1", marker.encode())
        assert_safe_store_error(caught.value, marker)
        assert "RaiseError (P0001)" in str(caught.value)
    finally:
        await store.aclose()


@pytest.mark.postgres
async def test_an_owner_the_database_refuses_is_a_store_error(postgres_url: str) -> None:
    async with DatabaseCheckpointStore(postgres_url) as store:
        await store.set("cp-1", b"doc")
        with pytest.raises(CheckpointStoreError, match="could not claim checkpoint 'cp-1'"):
            await store.claim("cp-1", "owner\x00nul", 60)
        assert await store.claim("cp-1", "owner-a", 60) == b"doc"


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("mysql+aiomysql://app:hunter2@db.example/x", "'mysql+aiomysql'"),
        ("sqlite:///checkpoints.db", "'sqlite'"),
        ("postgresql+psycopg2://app:hunter2@db.example/x", "'postgresql+psycopg2'"),
        ("nosuchdb+drv://app:hunter2@db.example/x", "'nosuchdb+drv'"),
        ("app:hunter2@db.example", "'(none)'"),
        ("sqlite+aiosqlite://", "in-memory"),
        ("sqlite+aiosqlite:///:memory:", "in-memory"),
    ],
)
def test_a_bad_url_is_a_configuration_error_naming_its_scheme(url: str, named: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        DatabaseCheckpointStore(url)
    assert named in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_missing_driver_is_a_configuration_error_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)  # "import asyncpg" now fails
    with pytest.raises(ConfigurationError, match=r"'postgresql\+asyncpg'.*relaykit\[postgres\]"):
        DatabaseCheckpointStore("postgresql+asyncpg://app:hunter2@db.example/x")


def test_an_engine_that_is_not_async_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="AsyncEngine"):
        DatabaseCheckpointStore("sqlite+aiosqlite:///x.db", engine=object())  # type: ignore[arg-type]


def test_claim_ttl_is_an_option_and_repr_hides_the_password() -> None:
    store = DatabaseCheckpointStore("postgresql+asyncpg://app:hunter2@db.example/x", claim_ttl=12.5)
    assert store.claim_ttl == 12.5
    assert "hunter2" not in repr(store) and "db.example" in repr(store)


async def test_async_with_opens_the_store_and_closes_it(database_url: str) -> None:
    async with DatabaseCheckpointStore(database_url) as store:
        assert "relaykit_checkpoints" in await table_names(database_url)
        await store.set("cp-1", b"kept")
    async with DatabaseCheckpointStore(database_url) as again:
        assert await again.get("cp-1") == b"kept"


async def test_a_given_engine_is_used_and_left_open(database_url: str) -> None:
    engine = create_async_engine(database_url)
    try:
        async with DatabaseCheckpointStore(database_url, engine=engine) as store:
            await store.set("cp-1", b"doc")
        async with engine.connect() as conn:  # still usable after the store closed
            rows = (await conn.exec_driver_sql("SELECT data FROM relaykit_checkpoints")).all()
        assert [bytes(row[0]) for row in rows] == [b"doc"]
    finally:
        await engine.dispose()


async def test_sqlite_connections_use_wal_and_wait_for_locks(sqlite_url: str) -> None:
    async with DatabaseCheckpointStore(sqlite_url) as store:
        await store.set("cp-1", b"doc")
        async with store._engine.connect() as conn:
            busy_timeout = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
    assert busy_timeout == 30_000
    journal = await fetch(sqlite_url, "PRAGMA journal_mode")  # persistent in the file
    assert journal == [("wal",)]


def test_importing_relaykit_does_not_load_sqlalchemy_or_alembic() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, relaykit, relaykit.checkpoints; "
            "print(sorted(m for m in ('sqlalchemy', 'alembic') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert loaded == "[]"


class _Approve(rk.BaseAgent):
    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        yield AgentEvent.from_message(Message.assistant("asking"))
        yield rk.interrupt(ctx, {"question": "approve?"})

    async def resume(
        self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        yield AgentEvent.from_message(Message.assistant(f"approved={info.resume_data}"))


async def test_runner_resumes_from_a_database_checkpoint_in_a_new_store_object(
    database_url: str,
) -> None:
    url = database_url
    async with DatabaseCheckpointStore(url) as store:
        runner = rk.Runner(_Approve("approver", "asks"), checkpoint_store=store)
        events = [ev async for ev in runner.query("refund please", checkpoint_id="t1")]
    point = events[-1].action.interrupted.contexts[0]
    saved = await fetch(url, "SELECT checkpoint_id, data, claim_owner FROM relaykit_checkpoints")
    assert [(cid, owner) for cid, _, owner in saved] == [("t1", None)]
    assert b"relaykit/checkpoint" in bytes(saved[0][1])

    async with DatabaseCheckpointStore(url) as again:  # as if in another process
        fresh = rk.Runner(_Approve("approver", "asks"), checkpoint_store=again)
        out = [ev async for ev in fresh.resume("t1", targets={point.id: True})]
    assert [e.output.message.content for e in out] == ["approved=True"]
    # Whether a completed resume keeps its checkpoint is the Runner's business; no claim is
    # left behind either way.
    left = await fetch(url, "SELECT claim_owner FROM relaykit_checkpoints")
    assert all(owner is None for (owner,) in left)


def test_no_connection_is_opened_by_the_constructor(tmp_path: Path) -> None:
    DatabaseCheckpointStore(f"sqlite+aiosqlite:///{tmp_path / 'lazy.db'}")
    assert not (tmp_path / "lazy.db").exists()
