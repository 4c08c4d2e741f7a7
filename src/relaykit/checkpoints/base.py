"""The CheckpointStore protocol, checkpoint-id validation and the in-memory store.

A store keeps checkpoint documents (bytes) by id. Resumes are exclusive (D21): a resume first
*claims* the checkpoint — an atomic lease with an owner and an expiry — and only the holder of
the claim may replace or delete the checkpoint when the resume ends. A second resume of a claimed
checkpoint fails at once with ``CheckpointBusyError``; a claim whose process died expires after
its ``ttl``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from relaykit.errors import (
    CheckpointBusyError,
    CheckpointNotFoundError,
    CheckpointStoreError,
    ConfigurationError,
)

__all__ = [
    "DEFAULT_CLAIM_TTL",
    "MAX_CHECKPOINT_ID_LENGTH",
    "MAX_CLAIM_TTL",
    "CheckpointStore",
    "InMemoryCheckpointStore",
    "validate_checkpoint_id",
    "validate_claim_ttl",
]

#: Seconds a claim lasts unless renewed (the Runner renews every third of it while it runs).
DEFAULT_CLAIM_TTL = 300.0
#: The longest checkpoint id, in characters.
MAX_CHECKPOINT_ID_LENGTH = 255
#: The longest claim a store accepts. A stored expiry further ahead than this (or none, or
#: not a number) is a corrupt row, and the claim counts as expired.
MAX_CLAIM_TTL = 86_400.0


def validate_checkpoint_id(checkpoint_id: object) -> str:
    """``checkpoint_id`` if it is a valid id, else ``CheckpointStoreError`` (D28).

    A valid id is a ``str`` of 1–255 characters, without NUL, that encodes as UTF-8. Every
    store calls this before touching storage, so all stores accept and refuse the same ids.

    >>> validate_checkpoint_id("order-1234")
    'order-1234'
    """
    if not isinstance(checkpoint_id, str):
        raise CheckpointStoreError(
            f"a checkpoint id must be a str, not {type(checkpoint_id).__name__}"
        )
    if not checkpoint_id or len(checkpoint_id) > MAX_CHECKPOINT_ID_LENGTH:
        raise CheckpointStoreError(
            f"a checkpoint id must have 1 to {MAX_CHECKPOINT_ID_LENGTH} characters "
            f"(got {len(checkpoint_id)})"
        )
    if "\x00" in checkpoint_id:
        raise CheckpointStoreError("a checkpoint id must not contain NUL characters")
    try:
        checkpoint_id.encode("utf-8")
    except UnicodeEncodeError:
        raise CheckpointStoreError(
            "a checkpoint id must encode as UTF-8 (it contains an unpaired surrogate)"
        ) from None
    return checkpoint_id


def validate_claim_ttl(ttl: object) -> float:
    """``ttl`` as a float if it is a valid claim lease, else ``ConfigurationError``.

    >>> validate_claim_ttl(30)
    30.0
    """
    if (
        isinstance(ttl, bool)
        or not isinstance(ttl, int | float)
        or not 0.05 <= float(ttl) <= MAX_CLAIM_TTL
    ):
        raise ConfigurationError(
            f"claim_ttl must be a number of seconds from 0.05 to {MAX_CLAIM_TTL:g}, not {ttl!r}"
        )
    return float(ttl)


def check_data(data: object) -> bytes:
    """``data`` as bytes, or ``TypeError`` (stores only keep bytes).

    >>> check_data(bytearray(b"doc"))
    b'doc'
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"checkpoint data must be bytes, not {type(data).__name__}")
    return bytes(data)


@runtime_checkable
class CheckpointStore(Protocol):
    """Checkpoint documents (bytes) by id, with exclusive claims for resumes (D21, D28).

    Every method validates the id first (``validate_checkpoint_id``) and reports storage
    failures as ``CheckpointStoreError`` (never a raw driver error, never stored content).
    Stores may also have a ``claim_ttl`` attribute: the seconds a resume's claim lasts (the
    Runner passes it to ``claim``).

    >>> isinstance(InMemoryCheckpointStore(), CheckpointStore)
    True
    """

    async def get(self, checkpoint_id: str) -> bytes | None:
        """The document saved under ``checkpoint_id``, or None."""
        ...

    async def set(self, checkpoint_id: str, data: bytes) -> None:
        """Save ``data`` (an atomic upsert); any claim on the id is dropped."""
        ...

    async def delete(self, checkpoint_id: str) -> None:
        """Forget ``checkpoint_id`` (no error if unknown)."""
        ...

    async def claim(self, checkpoint_id: str, owner: str, ttl: float) -> bytes:
        """Claim the checkpoint for ``owner`` for ``ttl`` seconds and return its document.

        One atomic step: succeeds when nobody holds the claim, the claim expired, or ``owner``
        already holds it. Raises ``CheckpointNotFoundError`` or ``CheckpointBusyError``.
        """
        ...

    async def renew(self, checkpoint_id: str, owner: str, ttl: float) -> None:
        """Extend ``owner``'s claim to ``ttl`` seconds from now; ``CheckpointBusyError`` if
        ``owner`` no longer holds it (it expired and another resume claimed it)."""
        ...

    async def release(self, checkpoint_id: str, owner: str) -> None:
        """Drop ``owner``'s claim and keep the checkpoint (no error if not held)."""
        ...

    async def finish(self, checkpoint_id: str, owner: str, data: bytes | None) -> None:
        """Replace the checkpoint with ``data`` and drop the claim, or delete it (``None``);
        only while ``owner`` holds the claim, else ``CheckpointBusyError`` (nothing written)."""
        ...


class InMemoryCheckpointStore:
    """A checkpoint store in a dict: for tests and single-process apps.

    >>> import asyncio
    >>> store = InMemoryCheckpointStore()
    >>> async def main() -> bytes | None:
    ...     await store.set("order-1", b"document")
    ...     return await store.get("order-1")
    >>> asyncio.run(main()), len(store)
    (b'document', 1)

    Args:
        claim_ttl: seconds a resume's claim lasts unless renewed.
        clock: the clock claims expire by (monotonic seconds); tests pass a fake one.
    """

    def __init__(
        self, *, claim_ttl: float = DEFAULT_CLAIM_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        #: Seconds a resume's claim lasts unless renewed (the Runner passes it to ``claim``).
        self.claim_ttl = validate_claim_ttl(claim_ttl)
        self._data: dict[str, bytes] = {}
        self._claims: dict[str, tuple[str, float]] = {}  # id -> (owner, expires at)
        self._now = clock  # claims expire by this clock (tests pass a fake one)

    def _holder(self, checkpoint_id: str) -> str | None:
        claim = self._claims.get(checkpoint_id)
        if claim is None:
            return None
        if claim[1] <= self._now():
            del self._claims[checkpoint_id]
            return None
        return claim[0]

    async def get(self, checkpoint_id: str) -> bytes | None:
        """The bytes saved under ``checkpoint_id``, or None."""
        return self._data.get(validate_checkpoint_id(checkpoint_id))

    async def set(self, checkpoint_id: str, data: bytes) -> None:
        """Save (or overwrite) ``data``; drops any claim."""
        validate_checkpoint_id(checkpoint_id)
        self._data[checkpoint_id] = check_data(data)
        self._claims.pop(checkpoint_id, None)

    async def delete(self, checkpoint_id: str) -> None:
        """Forget ``checkpoint_id`` (no error if unknown)."""
        validate_checkpoint_id(checkpoint_id)
        self._data.pop(checkpoint_id, None)
        self._claims.pop(checkpoint_id, None)

    async def claim(self, checkpoint_id: str, owner: str, ttl: float) -> bytes:
        """Claim the checkpoint for ``owner`` (see ``CheckpointStore.claim``)."""
        validate_checkpoint_id(checkpoint_id)
        data = self._data.get(checkpoint_id)
        if data is None:
            raise CheckpointNotFoundError(checkpoint_id)
        holder = self._holder(checkpoint_id)
        if holder is not None and holder != owner:
            raise CheckpointBusyError(checkpoint_id)
        self._claims[checkpoint_id] = (owner, self._now() + ttl)
        return data

    async def renew(self, checkpoint_id: str, owner: str, ttl: float) -> None:
        """Extend ``owner``'s claim (``CheckpointBusyError`` if it lost it)."""
        validate_checkpoint_id(checkpoint_id)
        if checkpoint_id not in self._data or self._holder(checkpoint_id) != owner:
            raise CheckpointBusyError(
                checkpoint_id,
                f"the claim on checkpoint {checkpoint_id!r} was lost (it expired "
                "and another resume claimed it, or the checkpoint was replaced)",
            )
        self._claims[checkpoint_id] = (owner, self._now() + ttl)

    async def release(self, checkpoint_id: str, owner: str) -> None:
        """Drop ``owner``'s claim; the checkpoint stays."""
        validate_checkpoint_id(checkpoint_id)
        claim = self._claims.get(checkpoint_id)
        if claim is not None and claim[0] == owner:
            del self._claims[checkpoint_id]

    async def finish(self, checkpoint_id: str, owner: str, data: bytes | None) -> None:
        """Replace (``data``) or delete (``None``) the checkpoint while ``owner`` holds it."""
        validate_checkpoint_id(checkpoint_id)
        payload = check_data(data) if data is not None else None
        claim = self._claims.get(checkpoint_id)
        # A claim that expired but was not taken over still belongs to its owner.
        if claim is None or claim[0] != owner or checkpoint_id not in self._data:
            raise CheckpointBusyError(
                checkpoint_id,
                f"cannot finish the resume of checkpoint {checkpoint_id!r}: its "
                "claim was lost (it expired and another resume claimed it, or the checkpoint "
                "was replaced or deleted)",
            )
        del self._claims[checkpoint_id]
        if payload is None:
            del self._data[checkpoint_id]
        else:
            self._data[checkpoint_id] = payload

    async def aclose(self) -> None:
        """Nothing to release (for symmetry with the database store)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __len__(self) -> int:
        return len(self._data)
