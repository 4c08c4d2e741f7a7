"""Helpers for the checkpoint-store tests: raw access to a database, and the stores under test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from relaykit.checkpoints import InMemoryCheckpointStore
from relaykit.checkpoints.database import DatabaseCheckpointStore

#: A claim lease short enough to run out within a test.
SHORT_TTL = 0.05


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


def memory_case() -> StoreCase:
    """An in-memory store whose claims expire by a fake clock."""
    clock = FakeClock()
    store = InMemoryCheckpointStore(clock=clock)

    async def expire_claims() -> None:
        clock.now += 1.0

    async def rows() -> dict[str, tuple[bytes, str | None]]:
        return {
            checkpoint_id: (data, store._claims.get(checkpoint_id, (None, 0.0))[0])
            for checkpoint_id, data in store._data.items()
        }

    return StoreCase("memory", store, expire_claims, rows)


def database_case(kind: str, url: str) -> StoreCase:
    """A database store on ``url``, whose rows are read through a connection of their own."""

    async def expire_claims() -> None:
        await asyncio.sleep(SHORT_TTL * 4)

    async def rows() -> dict[str, tuple[bytes, str | None]]:
        found = await fetch(
            url, "SELECT checkpoint_id, data, claim_owner FROM relaykit_checkpoints"
        )
        return {checkpoint_id: (bytes(data), owner) for checkpoint_id, data, owner in found}

    return StoreCase(kind, DatabaseCheckpointStore(url), expire_claims, rows)
