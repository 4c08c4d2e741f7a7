"""Polling with a deadline: how the turn locks wait for another process (no wakeup exists)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

__all__ = ["poll"]

# The first retry comes soon (a turn that just ended is noticed at once); later ones back off to
# this interval, so a long wait costs a few attempts a second.
_FIRST_INTERVAL: Final = 0.002
_MAX_INTERVAL: Final = 0.05


async def poll(attempt: Callable[[], Awaitable[bool]], deadline: float | None) -> bool:
    """Await ``attempt()`` until it returns True (then True) or ``deadline`` passes (then
    False). ``deadline`` is event-loop time, None for no deadline; at least one attempt runs."""
    loop = asyncio.get_running_loop()
    interval = _FIRST_INTERVAL
    while not await attempt():
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            return False
        await asyncio.sleep(interval if remaining is None else min(interval, remaining))
        interval = min(interval * 2, _MAX_INTERVAL)
    return True
