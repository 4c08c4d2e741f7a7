"""The checkpoint table's schema is relaykit's Alembic history (D28): created on first use,
adopted from older relaykit versions, versioned in ``relaykit_alembic_version`` only, migrated once
however many stores open the database at the same time.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from relaykit._db import MIGRATIONS_DIR
from relaykit.checkpoints.database import DatabaseCheckpointStore, _checkpoints
from relaykit.errors import CheckpointStoreError
from tests.checkpoints.support import fetch, table_names

HEAD = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
#: Every revision shipped, and the tables the later ones (the session service) create.
REVISIONS = [rev.revision for rev in ScriptDirectory(str(MIGRATIONS_DIR)).walk_revisions()]
SESSION_TABLES = {
    "relaykit_sessions",
    "relaykit_session_events",
    "relaykit_session_state",
    "relaykit_session_checkpoints",
}


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


async def create_old_schema_table(url: str) -> None:
    """The table as relaykit created it before migrations existed (``create_all``)."""
    old = sa.Table(
        "relaykit_checkpoints",
        sa.MetaData(),
        sa.Column("checkpoint_id", sa.String(255), primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.now(),
            onupdate=sa.func.now(),
        ),
    )
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(old.metadata.create_all)
            await conn.execute(
                old.insert(),
                [
                    {"checkpoint_id": "old-1", "data": b"first"},
                    {"checkpoint_id": "old-2", "data": b"second"},
                ],
            )
    finally:
        await engine.dispose()


async def test_a_fresh_database_gets_the_table_the_store_uses_and_a_relaykit_version(
    database_url: str,
) -> None:
    async with DatabaseCheckpointStore(database_url):
        pass
    assert await table_names(database_url) == {
        "relaykit_checkpoints",
        "relaykit_alembic_version",
        *SESSION_TABLES,
    }
    assert await fetch(database_url, "SELECT version_num FROM relaykit_alembic_version") == [
        (HEAD,)
    ]
    migrated = await columns(database_url, "relaykit_checkpoints")
    declared = {
        column.name: {"nullable": column.nullable, "primary": column.primary_key}
        for column in _checkpoints.columns
    }
    assert migrated == declared


async def test_an_old_schema_table_is_adopted_with_its_rows_kept_and_claimable(
    database_url: str,
) -> None:
    await create_old_schema_table(database_url)
    async with DatabaseCheckpointStore(database_url) as store:
        assert await store.get("old-1") == b"first"
        assert await store.claim("old-2", "owner-a", 60) == b"second"
        await store.finish("old-2", "owner-a", b"second, resumed")
        await store.set("new-1", b"third")
    rows = await fetch(
        database_url,
        "SELECT checkpoint_id, data, claim_owner FROM relaykit_checkpoints ORDER BY checkpoint_id",
    )
    assert [(cid, bytes(data), owner) for cid, data, owner in rows] == [
        ("new-1", b"third", None),
        ("old-1", b"first", None),
        ("old-2", b"second, resumed", None),
    ]
    assert set(await columns(database_url, "relaykit_checkpoints")) == set(_checkpoints.c.keys())
    assert await fetch(database_url, "SELECT version_num FROM relaykit_alembic_version") == [
        (HEAD,)
    ]


async def test_an_apps_own_alembic_version_table_is_left_untouched(database_url: str) -> None:
    await fetch(
        database_url, "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)"
    )
    await fetch(database_url, "INSERT INTO alembic_version VALUES ('app_rev_42')")
    await fetch(database_url, "CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    async with DatabaseCheckpointStore(database_url) as store:
        await store.set("cp-1", b"doc")
    assert await fetch(database_url, "SELECT version_num FROM alembic_version") == [("app_rev_42",)]
    assert await table_names(database_url) == {
        "alembic_version",
        "orders",
        "relaykit_checkpoints",
        "relaykit_alembic_version",
        *SESSION_TABLES,
    }


async def test_stores_opening_one_database_at_once_migrate_it_once(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="alembic")
    stores = [DatabaseCheckpointStore(database_url) for _ in range(4)]
    try:
        await asyncio.gather(*(store.open() for store in stores for _ in range(3)))
        await stores[0].open()  # again: nothing to do
        await asyncio.gather(*(store.set(f"cp-{n}", b"doc") for n, store in enumerate(stores)))
    finally:
        for store in stores:
            await store.aclose()
    upgrades = [r.getMessage() for r in caplog.records if "Running upgrade" in r.getMessage()]
    # Each revision ran exactly once, whichever store got the lock first.
    steps = [m.split(",")[0].removeprefix("Running upgrade").strip() for m in upgrades]
    assert sorted(steps) == sorted(set(steps)) and len(steps) == len(REVISIONS)
    assert await fetch(database_url, "SELECT version_num FROM relaykit_alembic_version") == [
        (HEAD,)
    ]
    assert await fetch(database_url, "SELECT count(*) FROM relaykit_checkpoints") == [(4,)]


async def test_a_database_upgraded_by_a_newer_relaykit_is_a_store_error(database_url: str) -> None:
    async with DatabaseCheckpointStore(database_url):
        pass
    await fetch(database_url, "UPDATE relaykit_alembic_version SET version_num = 'from_future'")
    store = DatabaseCheckpointStore(database_url)
    try:
        with pytest.raises(CheckpointStoreError, match="newer relaykit"):
            await store.get("cp-1")
    finally:
        await store.aclose()


async def test_a_failed_first_use_is_retried_by_the_next_operation(sqlite_url: str) -> None:
    store = DatabaseCheckpointStore(sqlite_url)
    try:
        # The first migration fails: a view already has the table's name.
        await fetch(sqlite_url, "CREATE VIEW relaykit_checkpoints AS SELECT 1 AS x")
        with pytest.raises(CheckpointStoreError, match="could not open its database"):
            await store.open()
        await fetch(sqlite_url, "DROP VIEW relaykit_checkpoints")
        await store.set("cp-1", b"doc")
        assert await store.get("cp-1") == b"doc"
    finally:
        await store.aclose()
