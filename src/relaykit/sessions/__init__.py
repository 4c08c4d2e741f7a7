"""Session services: durable conversations (events in order, state by scope, a turn lock).

``InMemorySessionService`` for tests and one process; ``DatabaseSessionService`` (SQLite or
PostgreSQL, extras ``sql`` / ``postgres``) for everything else. See ``docs/sessions.md``.
"""

from typing import TYPE_CHECKING, Any

from relaykit.sessions.base import (
    APP_PREFIX,
    TEMP_PREFIX,
    USER_PREFIX,
    Scope,
    Session,
    SessionEvent,
    SessionService,
    compaction_range,
    state_scope,
    validate_session_name,
    validate_state_key,
)
from relaykit.sessions.memory import InMemorySessionService

if TYPE_CHECKING:
    from relaykit.sessions.database import DatabaseSessionService

__all__ = [
    "APP_PREFIX",
    "TEMP_PREFIX",
    "USER_PREFIX",
    "DatabaseSessionService",
    "InMemorySessionService",
    "Scope",
    "Session",
    "SessionEvent",
    "SessionService",
    "compaction_range",
    "state_scope",
    "validate_session_name",
    "validate_state_key",
]


def __getattr__(name: str) -> Any:
    """The database service loads SQLAlchemy on first use only."""
    if name == "DatabaseSessionService":
        from relaykit.sessions.database import DatabaseSessionService

        return DatabaseSessionService
    raise AttributeError(f"module 'relaykit.sessions' has no attribute {name!r}")
