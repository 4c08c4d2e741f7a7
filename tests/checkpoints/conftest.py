"""Fixtures for the checkpoint stores: fresh SQLite files and fresh PostgreSQL databases.

PostgreSQL tests read ``RELAYKIT_TEST_POSTGRES_URL`` (``postgresql+asyncpg://...``) and are
skipped with a reason when it is unset. Each test gets its own database (``rk_<hex>``), created
through that URL and dropped afterwards, so tests never see each other's tables.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from relaykit.checkpoints import InMemoryCheckpointStore
from relaykit.checkpoints.database import DatabaseCheckpointStore

POSTGRES_URL = os.environ.get("RELAYKIT_TEST_POSTGRES_URL")
NO_POSTGRES = ("PostgreSQL not configured: set RELAYKIT_TEST_POSTGRES_URL "
               "(postgresql+asyncpg://user@host:5432/db) — .ci/run does")

#: Backends of the database store; the PostgreSQL one is marked (and skipped without a URL).
DATABASES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
#: Every store kind.
STORES = ["memory", *DATABASES]

#: A claim lease short enough to run out within a test.
SHORT_TTL = 0.05


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite database file that does not exist yet."""
    return f"sqlite+aiosqlite:///{tmp_path / 'checkpoints.db'}"


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh, empty PostgreSQL database, dropped after the test."""
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    name = f"rk_{uuid.uuid4().hex[:16]}"
    admin = create_async_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield sa.make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.dispose()


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest) -> str:
    """A fresh database of each backend (the fixture is sync so it can pick an async one)."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


async def fetch(url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` run on ``url`` through a connection of its own (not the store's)."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            result = await conn.execute(sa.text(sql), params)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        await engine.dispose()


async def table_names(url: str) -> set[str]:
    """The tables in the database's default schema."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names()))
    finally:
        await engine.dispose()


class FakeClock:
    """A clock the in-memory store's claims expire by; tests move it forward."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class StoreCase:
    """A store under test, with what the tests need to know about its backend."""

    kind: str
    store: Any
    #: Lets claims taken with ``SHORT_TTL`` expire.
    expire_claims: Callable[[], Awaitable[None]]
    #: What is stored: checkpoint id -> (document, claim owner or None).
    rows: Callable[[], Awaitable[dict[str, tuple[bytes, str | None]]]]


def _memory_case() -> StoreCase:
    clock = FakeClock()
    store = InMemoryCheckpointStore(clock=clock)

    async def expire_claims() -> None:
        clock.now += 1.0

    async def rows() -> dict[str, tuple[bytes, str | None]]:
        return {checkpoint_id: (data, store._claims.get(checkpoint_id, (None, 0.0))[0])
                for checkpoint_id, data in store._data.items()}

    return StoreCase("memory", store, expire_claims, rows)


def _database_case(kind: str, url: str) -> StoreCase:
    async def expire_claims() -> None:
        await asyncio.sleep(SHORT_TTL * 4)

    async def rows() -> dict[str, tuple[bytes, str | None]]:
        found = await fetch(
            url, "SELECT checkpoint_id, data, claim_owner FROM relaykit_checkpoints")
        return {checkpoint_id: (bytes(data), owner) for checkpoint_id, data, owner in found}

    return StoreCase(kind, DatabaseCheckpointStore(url), expire_claims, rows)


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """Each kind of store, with a fresh database URL for the database ones."""
    if request.param == "memory":
        return "memory", None
    url: str = request.getfixturevalue(f"{request.param}_url")
    return request.param, url


@pytest.fixture
async def case(store_kind: tuple[str, str | None]) -> AsyncIterator[StoreCase]:
    """Each kind of store, empty and opened."""
    kind, url = store_kind
    made = _memory_case() if url is None else _database_case(kind, url)
    async with made.store:
        yield made
