"""PostgreSQL turn locks: every lock of a service on one connection, however many turns run.

PostgreSQL allows 100 connections by default; a process running more turns than that at once
must not need a connection per turn (it did: a lock was a connection of its own).
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import sqlalchemy as sa

from relaykit.errors import SessionBusyError
from relaykit.sessions.database import DatabaseSessionService

pytestmark = pytest.mark.postgres

APP, USER = "shop", "u1"
MANY = 150  # more than PostgreSQL's default max_connections


async def _connections(service: DatabaseSessionService, url: str) -> int:
    """How many connections the database has (the service's, and this query's)."""
    database = sa.make_url(url).database
    async with service._engine.connect() as conn:  # the pool's, counted too
        found = await conn.execute(
            sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = :db"), {"db": database}
        )
        return int(found.scalar_one())


async def test_many_concurrent_turn_locks_share_one_connection(postgres_url: str) -> None:
    async with (
        DatabaseSessionService(postgres_url) as service,
        DatabaseSessionService(postgres_url) as other_process,
    ):
        held = asyncio.Event()
        done = asyncio.Event()
        holding = 0

        async def turn(n: int) -> None:
            nonlocal holding
            async with service.lock(APP, USER, f"s{n}", timeout=30):
                holding += 1
                if holding == MANY:
                    held.set()
                await done.wait()

        turns = [asyncio.create_task(turn(n)) for n in range(MANY)]
        await asyncio.wait_for(held.wait(), 60)
        # Held for real, across processes: another service cannot take them.
        for n in (0, MANY - 1):
            with pytest.raises(SessionBusyError):
                async with other_process.lock(APP, USER, f"s{n}", timeout=0):
                    pass
        assert await _connections(service, postgres_url) <= 4  # the carrier and the pools
        done.set()
        await asyncio.gather(*turns)
        async with other_process.lock(APP, USER, "s0", timeout=0):
            pass  # released


async def test_a_lock_abandoned_by_a_cancelled_task_is_released(postgres_url: str) -> None:
    async with (
        DatabaseSessionService(postgres_url) as service,
        DatabaseSessionService(postgres_url) as other_process,
    ):
        async with other_process.lock(APP, USER, "s1", timeout=0):
            waiting = asyncio.create_task(_hold(service, "s1"))
            await asyncio.sleep(0.1)  # polling for the other process's lock
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
        # Neither service holds the lock now: both can take it in turn.
        async with service.lock(APP, USER, "s1", timeout=5):
            pass
        async with other_process.lock(APP, USER, "s1", timeout=5):
            pass


async def _hold(service: DatabaseSessionService, session_id: str) -> None:
    async with service.lock(APP, USER, session_id, timeout=30):
        await asyncio.sleep(3600)
