"""Locks by key within one process, with a bounded wait, forgotten once nobody uses them.

The in-memory service's turn lock, and the first stage of the database service's: tasks of one
process queue here for a session, so only the first of them waits on the file or the database
(one connection per session and process on PostgreSQL, not one per waiting task) and the next
one takes over at once when a turn ends, instead of at its next poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field

__all__ = ["KeyedLocks"]


@dataclass(slots=True)
class _CountedLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # tasks holding or waiting for the lock


class KeyedLocks:
    """An ``asyncio.Lock`` per key, created on demand."""

    __slots__ = ("_locks",)

    def __init__(self) -> None:
        self._locks: dict[Hashable, _CountedLock] = {}

    async def acquire(self, key: Hashable, deadline: float | None) -> None:
        """Take the lock of ``key``; ``TimeoutError`` if it is not free by ``deadline``
        (event-loop time; None: wait forever). Give it back with ``release``."""
        counted = self._locks.get(key)
        if counted is None:
            counted = self._locks[key] = _CountedLock()
        counted.users += 1
        try:
            async with asyncio.timeout_at(deadline):
                await counted.lock.acquire()
        except BaseException:
            self._forget(key, counted)
            raise

    def release(self, key: Hashable) -> None:
        """Give back the lock of ``key`` taken with ``acquire``."""
        counted = self._locks[key]
        counted.lock.release()
        self._forget(key, counted)

    def _forget(self, key: Hashable, counted: _CountedLock) -> None:
        # Forget the lock once nobody holds or waits for it: a lock for every session ever
        # locked would grow without bound in a long-lived process.
        counted.users -= 1
        if counted.users == 0:
            del self._locks[key]
