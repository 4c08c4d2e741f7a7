"""Fixtures of the live-session tests: every session service (PostgreSQL when configured)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import DATABASES
from tests.sessions.support import make_service


@pytest.fixture(params=["memory", *DATABASES])
def service_kind(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """Each kind of service, with a fresh database URL for the database ones (a sync fixture,
    so it can pick an async one)."""
    if request.param == "memory":
        return "memory", None
    url: str = request.getfixturevalue(f"{request.param}_url")
    return request.param, url


@pytest.fixture
async def session_service(service_kind: tuple[str, str | None]) -> AsyncIterator[Any]:
    """Each kind of session service, empty and opened."""
    made = make_service(*service_kind)
    async with made:
        yield made
