"""``_StorageFailures``: the database failures of the session service as ``SessionStoreError``."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from relaykit import _db
from relaykit.errors import SessionStoreError
from relaykit.sessions._records import SessionRef


def _StorageFailures(
    operation: str, ref: SessionRef | None, engine: AsyncEngine
) -> _db.StorageFailures:
    """Failures in the block become ``SessionStoreError`` naming the operation and session."""
    what = operation if ref is None else f"{operation} {ref}"
    return _db.StorageFailures("session service", what, engine, SessionStoreError)
