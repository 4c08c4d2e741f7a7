"""What the live adapters share: aggregating partial chunks, and their errors.

A realtime API streams text and transcriptions in small deltas. ``LiveResponse`` promises one
complete (non-partial) response with the whole text after a model's partial chunks, so each
adapter feeds its deltas to a ``TurnBuffer`` and asks it for the complete responses when the
provider says a text, a transcription or a turn has ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from relaykit.errors import ModelError
from relaykit.messages import Message
from relaykit.models.live import LiveResponse

__all__ = [
    "NORMAL_CLOSE_CODES",
    "RealtimeModel",
    "TurnBuffer",
    "cause_text",
    "closed_error",
    "handshake_status",
    "merge_options",
    "send_error",
]

NORMAL_CLOSE_CODES = frozenset({1000, 1001})
"""WebSocket close codes of a normal end (1000 normal closure, 1001 going away)."""

Kind = Literal["text", "input", "output"]


def _message(kind: Kind, text: str) -> Message:
    # The user's speech is the user's; the model's text and speech are the model's.
    return Message.user(text) if kind == "input" else Message.assistant(text)


def _response(kind: Kind, text: str, partial: bool) -> LiveResponse:
    return LiveResponse(
        _message(kind, text), partial=partial, transcription=None if kind == "text" else kind
    )


class TurnBuffer:
    """The text and transcriptions of the current turn, chunk by chunk.

    ``chunk`` records a delta and returns its partial response; ``complete`` returns the
    complete response of what was gathered (or of the provider's final text) and starts over.

    >>> buffer = TurnBuffer()
    >>> [r.message.content for r in [buffer.chunk("text", "Hel"), buffer.chunk("text", "lo")]]
    ['Hel', 'lo']
    >>> [(r.message.content, r.partial) for r in buffer.complete("text")]
    [('Hello', False)]
    >>> buffer.complete("text")
    []
    """

    def __init__(self) -> None:
        self._parts: dict[Kind, list[str]] = {"text": [], "input": [], "output": []}

    @property
    def pending(self) -> bool:
        """Whether some text or transcription has partial chunks and no complete response."""
        return any(self._parts.values())

    def chunk(self, kind: Kind, delta: str) -> LiveResponse:
        """Record ``delta`` (not empty) and return it as a partial response (``TypeError``
        when it is not a string: a provider's event that did not say what its type says)."""
        if not isinstance(delta, str):
            raise TypeError(f"a {kind} delta that is not a string")
        self._parts[kind].append(delta)
        return _response(kind, delta, partial=True)

    def complete(self, kind: Kind, final: str | None = None) -> list[LiveResponse]:
        """The complete response of ``kind``: ``final`` when the provider sent the whole text,
        else the chunks gathered; nothing when there is neither."""
        if final is not None and not isinstance(final, str):
            raise TypeError(f"a final {kind} that is not a string")
        parts = self._parts[kind]
        self._parts[kind] = []
        text = final if final is not None else "".join(parts)
        if not text and not parts:
            return []
        return [_response(kind, text, partial=False)]

    def flush(self) -> list[LiveResponse]:
        """The complete responses of everything still gathered: text, then transcriptions."""
        return [*self.complete("text"), *self.complete("output"), *self.complete("input")]


class RealtimeModel:
    """What both live models hold besides their client: names, connect timeout, options."""

    def _setup(
        self, provider: str, model: str, connect_timeout: float, default_options: dict[str, Any]
    ) -> None:
        #: The provider name, in errors.
        self.provider = provider
        #: The model name.
        self.model = model
        #: ``<provider>:<model>``.
        self.name = f"{provider}:{model}"
        self.connect_timeout = connect_timeout
        self.default_options = default_options


def cause_text(exc: BaseException) -> str:
    """What to say about ``exc`` in an error message without repeating anything sent.

    Transport errors (sockets, TLS, WebSocket handshakes and closes, timeouts) describe the
    connection and are quoted; other exceptions (a validation error of the SDK, a frame it could
    not parse) may quote the content that was sent or received, so only their type is named
    (the exception itself stays the ``__cause__``).

    >>> cause_text(ConnectionRefusedError(111, "Connection refused"))
    'ConnectionRefusedError: [Errno 111] Connection refused'
    >>> cause_text(ValueError("Failed to parse response: 'secret'"))
    'ValueError'
    """
    import websockets  # both SDKs speak WebSocket through it

    if isinstance(exc, OSError | TimeoutError | websockets.WebSocketException):
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return type(exc).__name__


def handshake_status(exc: BaseException) -> int | None:
    """The HTTP status of a refused WebSocket handshake (a close code is not one)."""
    import websockets

    if isinstance(exc, websockets.InvalidStatus):
        return exc.response.status_code
    return None


def send_error(provider: str, subject: str, what: str, exc: Exception) -> ModelError:
    """The error of a failed send of ``what`` (``"a user message"``) by ``subject``."""
    import websockets

    if isinstance(exc, websockets.ConnectionClosed):
        code = exc.rcvd.code if exc.rcvd is not None else None
        cause = f"connection closed, close code {code}"
    else:
        cause = cause_text(exc)
    return ModelError(f"{subject}: cannot send {what} ({cause})", provider=provider)


def closed_error(
    provider: str, subject: str, code: int | None, reason: str, *, mid_turn: bool
) -> ModelError:
    """The error of a connection the server closed (``code`` None: no close frame came).

    ``subject`` names the model (``"gemini live model 'x'"``); ``reason`` is the server's close
    reason, in its own words.
    """
    what = f"close code {code}" if code is not None else "no close frame"
    detail = f"{what}: {reason}" if reason else what
    if mid_turn and (code in NORMAL_CLOSE_CODES):
        message = (
            f"{subject}: the server closed the connection in the middle "
            f"of a model turn ({detail}); the turn's partial output was dropped"
        )
    else:
        message = f"{subject}: the connection failed ({detail})"
    return ModelError(message, provider=provider)


def merge_options(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``extra``, nested mappings merged key by key.

    >>> merge_options({"audio": {"input": {"format": "pcm"}}}, {"audio": {"output": {"v": 1}}})
    {'audio': {'input': {'format': 'pcm'}, 'output': {'v': 1}}}
    """
    merged = dict(base)
    for key, value in extra.items():
        old = merged.get(key)
        if isinstance(old, dict) and isinstance(value, Mapping):
            merged[key] = merge_options(old, value)
        else:
            merged[key] = value
    return merged
