"""The exception hierarchy of relaykit.

Every message names the agent, checkpoint, type or id involved and, where it helps, what to do.
Errors raised while agents run are delivered as ``AgentEvent.error``; the ones below that are
*raised* come from building (``ConfigurationError``) or from loading a checkpoint before any agent
runs (``CheckpointNotFoundError``, ``SerializationError``, ``ResumeTargetError``).
"""

from __future__ import annotations

__all__ = [
    "AbortedError",
    "AgentRunError",
    "ArtifactNameError",
    "ArtifactStoreError",
    "CheckpointBusyError",
    "CheckpointNotFoundError",
    "CheckpointStoreError",
    "ConfigurationError",
    "LiveSessionClosedError",
    "MaxIterationsError",
    "MaxTransfersError",
    "ModelError",
    "PluginError",
    "RelayKitError",
    "ResumeTargetError",
    "RunnerError",
    "SerializationError",
    "SessionBusyError",
    "SessionExistsError",
    "SessionNotFoundError",
    "SessionStoreError",
    "StoredError",
    "StreamCancelledError",
    "ToolError",
    "WillRetryError",
]


class RelayKitError(Exception):
    """Base class of every error relaykit raises on purpose.

    >>> issubclass(ToolError, RelayKitError)
    True
    """


class AbortedError(RelayKitError):
    """An agent, tool or workflow branch ended with a ``BaseException`` that was not a
    cancellation of the run from outside: a ``CancelledError`` it caught from something
    another task cancelled, a ``GeneratorExit`` it raised... (D24). The original exception is
    ``__cause__``. Inside a ``ParallelAgent`` it stops every branch.

    >>> issubclass(AbortedError, RelayKitError)
    True
    """


class ConfigurationError(RelayKitError):
    """A bad agent tree or bad options, reported when building (or when a run is started).

    >>> import relaykit as rk
    >>> rk.ChatModelAgent("helper")
    Traceback (most recent call last):
    ...
    relaykit.errors.ConfigurationError: ChatModelAgent 'helper' needs a model (or a live_model)
    """


class ArtifactNameError(ConfigurationError):
    """An artifact name, or an app, user or session id of an artifact, that cannot be used.

    Raised before the artifact store is touched. Names and ids become file and folder names in
    the file store, so anything that could leave its folder (separators, ``..``, a leading dot,
    a drive letter) is refused by every store alike.

    >>> issubclass(ArtifactNameError, ConfigurationError)
    True
    """


class ArtifactStoreError(RelayKitError):
    """The artifact store failed, or holds a version it cannot read (a corrupt metadata file, a
    link pointing outside its root).

    The message names the operation, the artifact and the version, never stored content.

    >>> issubclass(ArtifactStoreError, RelayKitError)
    True
    """


class CheckpointNotFoundError(RelayKitError):
    """No checkpoint is stored under the given id.

    >>> CheckpointNotFoundError("order-1").checkpoint_id
    'order-1'

    Args:
        checkpoint_id: the id that was looked up.
    """

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(f"checkpoint {checkpoint_id!r} not found in the checkpoint store")
        #: The id that was looked up.
        self.checkpoint_id = checkpoint_id


class CheckpointBusyError(RelayKitError):
    """Another resume holds the checkpoint (D21): nothing ran; try again once it has ended.

    >>> str(CheckpointBusyError("order-1"))[:45]
    "checkpoint 'order-1' is being resumed by anot"

    Args:
        checkpoint_id: the checkpoint another resume holds.
        message: the message, when not the default one.
    """

    def __init__(self, checkpoint_id: str, message: str | None = None) -> None:
        super().__init__(
            message
            or (
                f"checkpoint {checkpoint_id!r} is being resumed by another run; nothing was run. "
                "Retry after that resume has ended (its claim expires if its process died)"
            )
        )
        #: The checkpoint another resume holds.
        self.checkpoint_id = checkpoint_id


class CheckpointStoreError(RelayKitError):
    """The checkpoint store failed (unreachable, refused the id, ...) or an id is invalid.

    The message names the operation and the checkpoint id, never stored content.

    >>> from relaykit.checkpoints.base import validate_checkpoint_id
    >>> validate_checkpoint_id("")
    Traceback (most recent call last):
    ...
    relaykit.errors.CheckpointStoreError: a checkpoint id must have 1 to 255 characters (got 0)
    """


class SerializationError(RelayKitError):
    """A value cannot be saved or loaded: unregistered type, corrupt/tampered data, newer format.

    >>> issubclass(SerializationError, RelayKitError)
    True
    """


class ResumeTargetError(RelayKitError):
    """A resume target id (or a tool-call id) that the paused invocation does not contain.

    >>> ResumeTargetError("no such interrupt point", "p9").target_id
    'p9'

    Args:
        message: what went wrong.
        target_id: the unknown id.
    """

    def __init__(self, message: str, target_id: str | None = None) -> None:
        super().__init__(message)
        #: The unknown id.
        self.target_id = target_id


class SessionNotFoundError(RelayKitError):
    """A session that does not exist (and the Runner may not create it).

    >>> issubclass(SessionNotFoundError, RelayKitError)
    True
    """


class SessionExistsError(RelayKitError):
    """Creating a session whose id is already taken.

    >>> issubclass(SessionExistsError, RelayKitError)
    True
    """


class SessionBusyError(RelayKitError):
    """Another turn holds the session longer than the bounded wait.

    >>> issubclass(SessionBusyError, RelayKitError)
    True
    """


class SessionStoreError(RelayKitError):
    """The session service failed (unreachable, refused a write, ...) or a name is invalid.

    The message names the operation and the session, never stored content.

    >>> issubclass(SessionStoreError, RelayKitError)
    True
    """


class LiveSessionClosedError(RelayKitError):
    """Sending on a live session (or a live connection) that is closed: nothing was sent or
    stored.

    >>> issubclass(LiveSessionClosedError, RelayKitError)
    True
    """


class PluginError(RelayKitError):
    """A plugin hook raised: names the plugin and the hook; the original exception is
    ``__cause__``. The Runner treats it as a failure of what the hook wraps (the run, the
    agent, the model call or the tool call).

    >>> err = PluginError("plugin 'audit' failed in before_tool: ValueError: no",
    ...                   plugin_name="audit", hook="before_tool")
    >>> err.plugin_name, err.hook
    ('audit', 'before_tool')

    Args:
        message: what failed.
        plugin_name: the name of the plugin whose hook raised.
        hook: the hook that raised (``before_run``, ``on_event``, ``close``...).
    """

    def __init__(self, message: str, *, plugin_name: str = "", hook: str = "") -> None:
        super().__init__(message)
        #: The name of the plugin whose hook raised.
        self.plugin_name = plugin_name
        #: The hook that raised.
        self.hook = hook


class RunnerError(RelayKitError):
    """An error of the Runner itself, delivered as an event while the run goes on (D20): a
    checkpoint that could not be saved or consumed, a second interrupt in one run. The agents
    did not fail, so ``Runner.invoke`` does not raise for it (the event is in
    ``RunResult.events``).

    >>> issubclass(RunnerError, RelayKitError)
    True
    """


class MaxTransfersError(RelayKitError):
    """A run performed more transfers than ``Runner(max_transfers=...)`` allows (D23).

    >>> issubclass(MaxTransfersError, RelayKitError)
    True
    """


class AgentRunError(RelayKitError):
    """Raised by ``Runner.invoke`` when the run's last agent event is an error.

    ``agent_name`` and ``run_path`` say where; the original exception is ``__cause__``.

    >>> import asyncio
    >>> import relaykit as rk
    >>> class Broken(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         raise ValueError("no database")
    ...         yield
    >>> try:
    ...     asyncio.run(rk.Runner(Broken("broken")).invoke("hi"))
    ... except AgentRunError as exc:
    ...     print(exc.agent_name, exc.run_path, type(exc.__cause__).__name__)
    broken ('broken',) ValueError

    Args:
        message: what failed.
        agent_name: the agent whose error event ended the run.
        run_path: that event's run path, as agent names.
    """

    def __init__(
        self, message: str, *, agent_name: str = "", run_path: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        #: The agent whose error event ended the run.
        self.agent_name = agent_name
        #: That event's run path, as agent names.
        self.run_path = run_path


class WillRetryError(RelayKitError):
    """A stream that ends with this error is about to be retried.

    Such a message is left out of the next agent's history (FA-17).

    >>> WillRetryError("connection reset", retry_attempt=2).retry_attempt
    2

    Args:
        message: why the stream ended.
        retry_attempt: the number of the retry about to start (1 for the first).
    """

    def __init__(self, message: str, retry_attempt: int = 1) -> None:
        super().__init__(message)
        #: The number of the retry about to start.
        self.retry_attempt = retry_attempt


class StreamCancelledError(RelayKitError):
    """A streamed model reply that an immediate cancel cut (``RunHandle.cancel``, D26).

    Reading the stream ends with this error; the partial reply never enters any history,
    checkpoint or session, and the resumed run calls the model again.

    >>> issubclass(StreamCancelledError, RelayKitError)
    True
    """


class ToolError(RelayKitError):
    """Raised by a tool to hand ``error: <message>`` back to the model instead of failing (D15).

    >>> import relaykit as rk
    >>> @rk.tool
    ... def divide(a: float, b: float) -> float:
    ...     if b == 0:
    ...         raise ToolError("b must not be 0")
    ...     return a / b
    >>> divide(1.0, 4.0)
    0.25
    """


class MaxIterationsError(RelayKitError):
    """A ChatModelAgent called its model more often than ``max_iterations`` allows.

    >>> issubclass(MaxIterationsError, RelayKitError)
    True
    """


class ModelError(RelayKitError):
    """A model provider failed: names the provider and, for HTTP errors, the status.

    >>> ModelError("openai: HTTP 503 from model 'gpt-4o-mini'", provider="openai",
    ...            status=503).status
    503

    Args:
        message: what failed.
        provider: the provider (``openai``, ``anthropic``, ``gemini``, ``scripted``...).
        status: the HTTP status, when the failure was an HTTP error.
    """

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        super().__init__(message)
        #: The provider that failed.
        self.provider = provider
        #: The HTTP status, or None.
        self.status = status


class StoredError(RelayKitError):
    """An error restored from storage: only its type name and text survive (D10).

    >>> error = StoredError("ValueError", "no database")
    >>> error.type_name, str(error)
    ('ValueError', 'no database')

    Args:
        type_name: the original exception's type name.
        message: the original exception's text.
    """

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        #: The original exception's type name.
        self.type_name = type_name

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
