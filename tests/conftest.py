"""Fixtures shared by every test folder: fresh SQLite files and fresh PostgreSQL databases.

PostgreSQL tests read ``RELAYKIT_TEST_POSTGRES_URL`` (``postgresql+asyncpg://...``) and are
skipped with a reason when it is unset. Each test gets its own database (``rk_<hex>``), created
through that URL and dropped afterwards, so tests never see each other's tables.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

POSTGRES_URL = os.environ.get("RELAYKIT_TEST_POSTGRES_URL")
NO_POSTGRES = (
    "PostgreSQL not configured: set RELAYKIT_TEST_POSTGRES_URL "
    "(postgresql+asyncpg://user@host:5432/db) — .ci/run does"
)

#: Backends of the database store; the PostgreSQL one is marked (and skipped without a URL).
DATABASES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


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
