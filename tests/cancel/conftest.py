"""The session services of tests/sessions (memory, SQLite, PostgreSQL) for the session-mode
cancellation tests."""

from tests.sessions.conftest import service, service_kind

__all__ = ["service", "service_kind"]
