"""Fixtures for the checkpoint stores (fresh databases come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.checkpoints.support import StoreCase, database_case, memory_case
from tests.conftest import DATABASES

#: Every store kind.
STORES = ["memory", *DATABASES]


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
    made = memory_case() if url is None else database_case(kind, url)
    async with made.store:
        yield made
