"""The exception hierarchy of relaykit.

Every message names the agent, checkpoint, type or id involved and, where it helps, what to do.
Errors raised while agents run are delivered as ``AgentEvent.error``; the ones below that are
*raised* come from building (``ConfigurationError``) or from loading a checkpoint before any agent
runs (``CheckpointNotFoundError``, ``SerializationError``, ``ResumeTargetError``).
"""

from __future__ import annotations

__all__ = [
    "AgentRunError",
    "ArtifactNameError",
    "ArtifactStoreError",
    "CheckpointBusyError",
    "CheckpointNotFoundError",
    "CheckpointStoreError",
    "ConfigurationError",
    "MaxIterationsError",
    "MaxTransfersError",
    "ModelError",
    "RelayKitError",
    "ResumeTargetError",
    "RunnerError",
    "SerializationError",
    "SessionBusyError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionStoreError",
    "StoredError",
    "ToolError",
    "WillRetryError",
]


class RelayKitError(Exception):
    """Base class of every error relaykit raises on purpose."""


class ConfigurationError(RelayKitError):
    """A bad agent tree or bad options, reported when building (or when a run is started)."""


class ArtifactNameError(ConfigurationError):
    """An artifact name, or an app, user or session id of an artifact, that cannot be used.

    Raised before the artifact store is touched. Names and ids become file and folder names in
    the file store, so anything that could leave its folder (separators, ``..``, a leading dot,
    a drive letter) is refused by every store alike.
    """


class ArtifactStoreError(RelayKitError):
    """The artifact store failed, or holds a version it cannot read (a corrupt metadata file, a
    link pointing outside its root).

    The message names the operation, the artifact and the version, never stored content.
    """


class CheckpointNotFoundError(RelayKitError):
    """No checkpoint is stored under the given id."""

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(f"checkpoint {checkpoint_id!r} not found in the checkpoint store")
        self.checkpoint_id = checkpoint_id


class CheckpointBusyError(RelayKitError):
    """Another resume holds the checkpoint (D21): nothing ran; try again once it has ended."""

    def __init__(self, checkpoint_id: str, message: str | None = None) -> None:
        super().__init__(message or (
            f"checkpoint {checkpoint_id!r} is being resumed by another run; nothing was run. "
            "Retry after that resume has ended (its claim expires if its process died)"))
        self.checkpoint_id = checkpoint_id


class CheckpointStoreError(RelayKitError):
    """The checkpoint store failed (unreachable, refused the id, ...) or an id is invalid.

    The message names the operation and the checkpoint id, never stored content.
    """


class SerializationError(RelayKitError):
    """A value cannot be saved or loaded: unregistered type, corrupt/tampered data, newer format."""


class ResumeTargetError(RelayKitError):
    """A resume target id (or a tool-call id) that the paused invocation does not contain."""

    def __init__(self, message: str, target_id: str | None = None) -> None:
        super().__init__(message)
        self.target_id = target_id


class SessionNotFoundError(RelayKitError):
    """A session that does not exist (and the Runner may not create it)."""


class SessionExistsError(RelayKitError):
    """Creating a session whose id is already taken."""


class SessionBusyError(RelayKitError):
    """Another turn holds the session longer than the bounded wait."""


class SessionStoreError(RelayKitError):
    """The session service failed (unreachable, refused a write, ...) or a name is invalid.

    The message names the operation and the session, never stored content.
    """


class RunnerError(RelayKitError):
    """An error of the Runner itself, delivered as an event while the run goes on (D20): a
    checkpoint that could not be saved or consumed, a second interrupt in one run. The agents
    did not fail, so ``Runner.invoke`` does not raise for it (the event is in
    ``RunResult.events``)."""


class MaxTransfersError(RelayKitError):
    """A run performed more transfers than ``Runner(max_transfers=...)`` allows (D23)."""


class AgentRunError(RelayKitError):
    """Raised by ``Runner.invoke`` when the run's last agent event is an error.

    ``agent_name`` and ``run_path`` say where; the original exception is ``__cause__``.
    """

    def __init__(self, message: str, *, agent_name: str = "",
                 run_path: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.agent_name = agent_name
        self.run_path = run_path


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
