"""``_StorageFailures``: the database failures of the session service as ``SessionStoreError``."""

from __future__ import annotations

from types import TracebackType

from sqlalchemy.ext.asyncio import AsyncEngine

from relaykit import _db
from relaykit.errors import RelayKitError, SessionStoreError
from relaykit.sessions._records import SessionRef


class _StorageFailures:
    """Re-raises a failure inside its block as ``SessionStoreError``.

    The new error names the operation, the session and the kind of failure. The original is
    dropped (``from None``): the driver's message and attributes can hold the SQL and its
    parameters, that is stored content. relaykit's own errors (not found, exists, corrupt
    rows) pass through; so do cancellation and other ``BaseException``s.
    """

    __slots__ = ("_engine", "_operation", "_ref")

    def __init__(self, operation: str, ref: SessionRef | None, engine: AsyncEngine) -> None:
        self._operation = operation
        self._ref = ref
        self._engine = engine

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, RelayKitError):
            return
        what = self._operation if self._ref is None else f"{self._operation} {self._ref}"
        backend = self._engine.url.drivername
        raise SessionStoreError(
            f"the session service could not {what}: {_db.describe_failure(exc)} "
            f"from {backend}. Check that the database is reachable and writable (the "
            "driver's message is withheld: it can contain stored content)"
        ) from None
