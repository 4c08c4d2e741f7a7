"""Checkpoint stores: where the Runner saves interrupted runs (bytes under an id)."""

from typing import TYPE_CHECKING

from relaykit.checkpoints.base import CheckpointStore, InMemoryCheckpointStore
from relaykit.checkpoints.document import Checkpoint

if TYPE_CHECKING:
    from relaykit.checkpoints.database import DatabaseCheckpointStore

__all__ = ["Checkpoint", "CheckpointStore", "DatabaseCheckpointStore", "InMemoryCheckpointStore"]


def __getattr__(name: str) -> "type[DatabaseCheckpointStore]":
    """The database store loads SQLAlchemy on first use only."""
    if name == "DatabaseCheckpointStore":
        from relaykit.checkpoints.database import DatabaseCheckpointStore

        return DatabaseCheckpointStore
    raise AttributeError(f"module 'relaykit.checkpoints' has no attribute {name!r}")
