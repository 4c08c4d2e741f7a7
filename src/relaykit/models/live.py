"""Live (realtime) models: the protocol, its configuration types and a scripted model.

A live model keeps one bidirectional connection open: the client sends text, tool responses and
audio chunks while the model streams responses back (partial text or audio, transcriptions, tool
calls, the end of a turn). ``Runner.run_live`` drives one; adapters for providers implement
``LiveModel`` and ``LiveConnection``.

>>> import asyncio
>>> model = ScriptedLiveModel([[ScriptedLiveModel.WAIT, Message.assistant("hello")]])
>>> async def talk() -> list[str]:
...     conn = await model.connect(LiveConfig(messages=[]))
...     await conn.send(Message.user("hi"))
...     return [r.message.content async for r in conn.receive() if r.message]
>>> asyncio.run(talk())
['hello']
>>> [m.content for m in model.connections[0].sent if isinstance(m, Message)]
['hi']
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, Protocol, runtime_checkable

from relaykit.errors import ConfigurationError, LiveSessionClosedError, RelayKitError
from relaykit.messages import Blob, Message
from relaykit.models.base import ToolSpec

__all__ = [
    "LiveConfig",
    "LiveConnection",
    "LiveModel",
    "LiveResponse",
    "LiveRunConfig",
    "ScriptedLiveConnection",
    "ScriptedLiveModel",
    "ScriptedLiveStep",
]


@dataclass(slots=True)
class LiveConfig:
    """What a live connection is opened with: the agent's context, its tools, the modalities.

    ``messages`` starts with the agent's system message (its instruction, placeholders filled,
    plus the transfer instruction) followed by the session history as that agent would see it
    in a run. The context is given once, at connect; afterwards only new input is sent.

    >>> config = LiveConfig([Message.system("Be brief.")], modalities=("text", "audio"))
    >>> config.messages[0].role, config.tools, config.modalities
    ('system', [], ('text', 'audio'))
    """

    #: The system message followed by the session history rewritten for the agent.
    messages: list[Message]
    #: The tools the model may call (``transfer_to_agent`` included when the agent can transfer).
    tools: list[ToolSpec] = field(default_factory=list)
    #: The output modalities asked of the model (``"text"``, ``"audio"``).
    modalities: tuple[str, ...] = ("text",)
    #: Provider options (voice, temperature...), passed on by adapters. ``Any``: each provider
    #: accepts its own.
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class LiveResponse:
    """One response read from a live connection.

    A model's partial chunks of a text or of a transcription (``partial=True``) are followed by
    one complete response with the whole text: adapters aggregate, the Runner never does.

    >>> LiveResponse(Message.assistant("Hel"), partial=True).partial
    True
    >>> LiveResponse(turn_complete=True).message is None
    True
    """

    #: The message (text or tool calls), if the response carries one.
    message: Message | None = None
    #: Whether this is a chunk of a message still being produced.
    partial: bool = False
    #: Set when the text is a transcription: of the user's audio (``"input"``) or of the
    #: model's audio (``"output"``).
    transcription: Literal["input", "output"] | None = None
    #: The model finished its turn.
    turn_complete: bool = False
    #: The user interrupted the model's turn (barge-in); the rest of that turn is dropped.
    interrupted: bool = False
    #: Inline audio from the model.
    audio: Blob | None = None


@dataclass(slots=True)
class LiveRunConfig:
    """Options of one live session (``Runner.run_live(..., config=LiveRunConfig(...))``).

    >>> LiveRunConfig().max_buffered_events
    1000
    >>> LiveRunConfig(max_buffered_events=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    relaykit.errors.ConfigurationError: LiveRunConfig.max_buffered_events must be a positive ...
    """

    #: The output modalities asked of the model.
    modalities: tuple[str, ...] = ("text",)
    #: Save the model's audio of each turn as an artifact (needs an artifact service).
    save_live_audio: bool = False
    #: How many events the background reader keeps for ``events()`` before it stops reading
    #: from the model until the caller catches up.
    max_buffered_events: int = 1000
    #: The largest blob ``send_realtime`` accepts, in bytes.
    max_realtime_chunk_bytes: int = 1_048_576

    def __post_init__(self) -> None:
        for name in ("max_buffered_events", "max_realtime_chunk_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"LiveRunConfig.{name} must be a positive integer, got {value!r}"
                )
        if isinstance(self.modalities, str) or not self.modalities:
            raise ConfigurationError(
                "LiveRunConfig.modalities must be a non-empty tuple of names such as ('text',)"
            )
        self.modalities = tuple(self.modalities)


@runtime_checkable
class LiveConnection(Protocol):
    """One open connection to a live model.

    ``receive()`` ends when the model closes the connection normally and raises when the
    connection fails; ``close()`` is idempotent and ends a pending ``receive()``.
    """

    async def send(self, message: Message) -> None:
        """Send text or a tool response (``Message.tool(..., tool_call_id=...)``)."""
        ...

    async def send_realtime(self, blob: Blob) -> None:
        """Send a chunk of realtime input (audio)."""
        ...

    def receive(self) -> AsyncIterator[LiveResponse]:
        """The model's responses, in order."""
        ...

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        ...


@runtime_checkable
class LiveModel(Protocol):
    """A realtime model: ``connect`` opens a ``LiveConnection`` with the given context.

    >>> isinstance(ScriptedLiveModel([]), LiveModel)
    True
    """

    async def connect(self, config: LiveConfig) -> LiveConnection:
        """Open a connection; raises when the model cannot be reached."""
        ...


class _Wait:
    """The type of ``ScriptedLiveModel.WAIT``."""

    _instance: ClassVar[_Wait | None] = None

    def __new__(cls) -> _Wait:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ScriptedLiveModel.WAIT"


_WAIT: Final = _Wait()

ScriptedLiveStep = LiveResponse | Message | BaseException | _Wait
"""One step of a scripted connection: a response, a message, a failure, or ``WAIT``."""


class ScriptedLiveConnection:
    """The connection a ``ScriptedLiveModel`` opens: plays its steps and records what it got.

    ``receive()`` plays the steps in order; calling it again continues where the last call
    stopped. ``WAIT`` waits until the client has sent one more item than the number of ``WAIT``
    steps already passed; the end of the steps is the model closing the connection normally.
    """

    def __init__(self, steps: Sequence[ScriptedLiveStep]) -> None:
        self._steps = list(steps)
        self._position = 0
        self._waits_passed = 0
        self._changed = asyncio.Event()
        #: Every ``Message`` and ``Blob`` the client sent, in order.
        self.sent: list[Message | Blob] = []
        #: Whether the client closed the connection.
        self.closed = False

    async def send(self, message: Message) -> None:
        """Record ``message`` (raises ``LiveSessionClosedError`` after ``close``)."""
        self._record(message)

    async def send_realtime(self, blob: Blob) -> None:
        """Record ``blob`` (raises ``LiveSessionClosedError`` after ``close``)."""
        self._record(blob)

    def _record(self, item: Message | Blob) -> None:
        if self.closed:
            raise LiveSessionClosedError("cannot send on a closed scripted live connection")
        self.sent.append(item)
        self._changed.set()

    async def receive(self) -> AsyncIterator[LiveResponse]:
        """Play the remaining steps."""
        while self._position < len(self._steps) and not self.closed:
            step = self._steps[self._position]
            self._position += 1
            if isinstance(step, _Wait):
                wanted = self._waits_passed + 1
                while len(self.sent) < wanted and not self.closed:
                    self._changed.clear()
                    await self._changed.wait()
                if self.closed:
                    return
                self._waits_passed = wanted
            elif isinstance(step, BaseException):
                raise step
            elif isinstance(step, Message):
                yield LiveResponse(message=step)
            else:
                yield step

    async def close(self) -> None:
        """Close the connection: a pending ``receive()`` ends (idempotent)."""
        self.closed = True
        self._changed.set()


class ScriptedLiveModel:
    """A real ``LiveModel`` that plays a script, for tests and offline demos.

    ``script`` is consumed one item per ``connect()``: an exception makes ``connect`` raise it;
    a list of steps is what the new connection's ``receive()`` plays — a ``LiveResponse`` is
    yielded, a ``Message`` ``m`` yields ``LiveResponse(message=m)``, an exception is raised (the
    connection failed), ``ScriptedLiveModel.WAIT`` waits for the client's next send.

    >>> model = ScriptedLiveModel([ConnectionError("offline")])
    >>> asyncio.run(model.connect(LiveConfig([])))
    Traceback (most recent call last):
    ...
    ConnectionError: offline
    >>> len(model.connects), model.connections
    (1, [])

    Args:
        script: one item per connection (an iterator may be endless); a ``connect`` after its
            end raises ``RelayKitError``.
        name: the model's name, in error messages.
    """

    #: A step that waits until the client has sent one more item (``send`` or
    #: ``send_realtime``) than the number of ``WAIT`` steps already passed.
    WAIT: ClassVar[_Wait] = _WAIT

    def __init__(
        self,
        script: Iterable[Sequence[ScriptedLiveStep] | BaseException],
        *,
        name: str = "scripted-live",
    ) -> None:
        self._script: Iterator[Sequence[ScriptedLiveStep] | BaseException] = iter(script)
        #: The model's name.
        self.name = name
        #: The ``LiveConfig`` of every ``connect`` call, failed ones included, in order.
        self.connects: list[LiveConfig] = []
        #: One connection per successful ``connect``, in order.
        self.connections: list[ScriptedLiveConnection] = []

    async def connect(self, config: LiveConfig) -> ScriptedLiveConnection:
        """Open the next scripted connection (or raise the next scripted exception)."""
        self.connects.append(config)
        try:
            item = next(self._script)
        except StopIteration:
            raise RelayKitError(
                f"ScriptedLiveModel {self.name!r} ran out of connections after "
                f"{len(self.connects) - 1} connect(s); add more items to its script"
            ) from None
        if isinstance(item, BaseException):
            raise item
        connection = ScriptedLiveConnection(item)
        self.connections.append(connection)
        return connection
