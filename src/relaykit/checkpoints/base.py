"""The CheckpointStore protocol and the in-memory store."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["CheckpointStore", "InMemoryCheckpointStore"]


@runtime_checkable
class CheckpointStore(Protocol):
    """Bytes by checkpoint id. The Runner writes JSON documents (never pickles)."""

    async def get(self, checkpoint_id: str) -> bytes | None: ...

    async def set(self, checkpoint_id: str, data: bytes) -> None: ...

    async def delete(self, checkpoint_id: str) -> None: ...


class InMemoryCheckpointStore:
    """A checkpoint store in a dict: for tests and single-process apps.

    >>> store = InMemoryCheckpointStore()
    """

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}

    async def get(self, checkpoint_id: str) -> bytes | None:
        """The bytes saved under ``checkpoint_id``, or None."""
        return self._data.get(checkpoint_id)

    async def set(self, checkpoint_id: str, data: bytes) -> None:
        """Save (or overwrite) ``data``."""
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"checkpoint data must be bytes, not {type(data).__name__}")
        self._data[checkpoint_id] = bytes(data)

    async def delete(self, checkpoint_id: str) -> None:
        """Forget ``checkpoint_id`` (no error if unknown)."""
        self._data.pop(checkpoint_id, None)

    def __len__(self) -> int:
        return len(self._data)
