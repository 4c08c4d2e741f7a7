"""The exception hierarchy of relaykit.

Every message names the agent, checkpoint, type or id involved and, where it helps, what to do.
Errors raised while agents run are delivered as ``AgentEvent.error``; the ones below that are
*raised* come from building (``ConfigurationError``) or from loading a checkpoint before any agent
runs (``CheckpointNotFoundError``, ``SerializationError``, ``ResumeTargetError``).
"""

from __future__ import annotations

__all__ = [
    "CheckpointNotFoundError",
    "ConfigurationError",
    "MaxIterationsError",
    "ModelError",
    "RelayKitError",
    "ResumeTargetError",
    "SerializationError",
    "SessionNotFoundError",
    "StoredError",
    "ToolError",
    "WillRetryError",
]


class RelayKitError(Exception):
    """Base class of every error relaykit raises on purpose."""


class ConfigurationError(RelayKitError):
    """A bad agent tree or bad options, reported when building (or when a run is started)."""


class CheckpointNotFoundError(RelayKitError):
    """No checkpoint is stored under the given id."""

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(f"checkpoint {checkpoint_id!r} not found in the checkpoint store")
        self.checkpoint_id = checkpoint_id


class SerializationError(RelayKitError):
    """A value cannot be saved or loaded: unregistered type, corrupt/tampered data, newer format."""


class ResumeTargetError(RelayKitError):
    """A resume target id (or a tool-call id) that the paused invocation does not contain."""

    def __init__(self, message: str, target_id: str | None = None) -> None:
        super().__init__(message)
        self.target_id = target_id


class SessionNotFoundError(RelayKitError):
    """A session that does not exist (and the Runner may not create it)."""


class WillRetryError(RelayKitError):
    """A stream that ends with this error is about to be retried.

    Such a message is left out of the next agent's history (FA-17).
    """

    def __init__(self, message: str, retry_attempt: int = 1) -> None:
        super().__init__(message)
        self.retry_attempt = retry_attempt


class ToolError(RelayKitError):
    """Raised by a tool to hand ``error: <message>`` back to the model instead of failing (D15)."""


class MaxIterationsError(RelayKitError):
    """A ChatModelAgent called its model more often than ``max_iterations`` allows."""


class ModelError(RelayKitError):
    """A model provider failed: names the provider and, for HTTP errors, the status."""

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status


class StoredError(RelayKitError):
    """An error restored from storage: only its type name and text survive (D10)."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
