"""Checkpoint stores: where the Runner saves interrupted runs (bytes under an id)."""

from relaykit.checkpoints.base import CheckpointStore, InMemoryCheckpointStore

__all__ = ["CheckpointStore", "InMemoryCheckpointStore"]
