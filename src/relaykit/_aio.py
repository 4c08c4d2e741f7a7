"""Small async helpers shared by the runtime."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Generic, TypeVar

from relaykit.errors import AbortedError

T = TypeVar("T")

__all__ = ["closing", "ended_with", "must_propagate", "thrown_into_us"]


def must_propagate(exc: BaseException) -> bool:
    """True when ``exc`` must not become an error event (D9, D24): ``KeyboardInterrupt``,
    ``SystemExit``, or a ``CancelledError`` while the *current task* is being cancelled (the
    cancellation came from outside). A ``CancelledError`` raised by code that awaited something
    another task cancelled, a ``GeneratorExit`` raised by a tool, or any other
    ``BaseException`` is an ending of that agent, tool or branch and becomes an error event.
    """
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return True
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0
    return False


def ended_with(exc: BaseException, what: str) -> Exception:
    """The error an event carries for ``what`` (an agent, tool or branch) that ended with
    ``exc``: ``exc`` itself when it is an ``Exception``, else an ``AbortedError`` naming the
    ``BaseException`` (with ``exc`` as its cause), so that nobody re-raises a bare
    ``CancelledError`` or ``GeneratorExit`` later."""
    if isinstance(exc, Exception):
        return exc
    err = AbortedError(f"{what} ended with {type(exc).__name__}" + (f": {exc}" if str(exc) else ""))
    err.__cause__ = exc
    return err


class closing(Generic[T]):
    """``async with closing(it) as it``: close ``it`` on exit if it can be closed.

    Unlike ``contextlib.aclosing`` it accepts any async iterator (agents may return one
    without ``aclose``), and it is a plain class: cheap on the hot path.
    """

    __slots__ = ("it",)

    def __init__(self, it: AsyncIterator[T]) -> None:
        self.it = it

    async def __aenter__(self) -> AsyncIterator[T]:
        return self.it

    async def __aexit__(self, *exc: Any) -> None:
        aclose = getattr(self.it, "aclose", None)
        if aclose is not None:
            await aclose()


def thrown_into_us(exc: BaseException) -> bool:
    """True for the ``GeneratorExit`` that closing a generator throws in at its ``yield``
    (raised in the frame that catches it), as opposed to one an inner agent raised."""
    tb = exc.__traceback__
    return isinstance(exc, GeneratorExit) and (tb is None or tb.tb_next is None)
