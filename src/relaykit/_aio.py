"""Small async helpers shared by the runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["closing"]


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
