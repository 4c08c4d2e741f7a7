"""Helpers for the session-service tests: the services under test, raw access to a database."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from relaykit.sessions import DatabaseSessionService, InMemorySessionService, SessionService


def make_service(kind: str, url: str | None) -> Any:
    """A service of ``kind`` ("memory", "sqlite", "postgres") on ``url`` (None for memory)."""
    if url is None:
        return InMemorySessionService()
    return DatabaseSessionService(url)


def is_service(service: object) -> bool:
    """The service implements the protocol (a runtime check of the method names)."""
    return isinstance(service, SessionService)


async def fetch(url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` run on ``url`` through a connection of its own (not the service's)."""
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
