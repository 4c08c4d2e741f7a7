"""Fixtures for the session services (fresh databases come from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import DATABASES
from tests.sessions.support import make_service

#: Every kind of service.
SERVICES = ["memory", *DATABASES]


@pytest.fixture(params=SERVICES)
def service_kind(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """Each kind of service, with a fresh database URL for the database ones."""
    if request.param == "memory":
        return "memory", None
    url: str = request.getfixturevalue(f"{request.param}_url")
    return request.param, url


@pytest.fixture
async def service(service_kind: tuple[str, str | None]) -> AsyncIterator[Any]:
    """Each kind of service, empty and opened."""
    made = make_service(*service_kind)
    async with made:
        yield made
