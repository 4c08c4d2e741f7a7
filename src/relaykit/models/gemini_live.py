"""GeminiLiveModel: the Gemini Live API through the official ``google-genai`` SDK.

Needs ``pip install 'relaykit[live]'``. One connection is one ``BidiGenerateContent`` WebSocket
session (``client.aio.live.connect``). At connect, the system messages become the session's
``system_instruction``, the tools its function declarations, and the history is sent as one
``clientContent`` message of turns (the model answers at once when the history ends with the
user's turn). Afterwards ``send`` sends user text as ``clientContent`` and tool responses as
``toolResponse``; ``send_realtime`` sends audio (or image frames) as ``realtimeInput``.

Gemini answers one modality per session: ``("text",)`` asks for text, any tuple with
``"audio"`` for audio (with its transcription). The user's speech is transcribed in every
session (``input_audio_transcription``); ``LiveConfig.options`` (or the model's default
options) set any other ``LiveConnectConfig`` field, e.g. ``speech_config``, or switch the
transcriptions off with ``None``.

A server message of a kind the SDK does not know (a newer protocol's) is skipped with a
warning (logger ``relaykit.models.gemini_live``), as the OpenAI adapter skips event types it
does not know; a message that is not JSON or whose fields have the wrong types ends the
session with a ``ModelError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pydantic
from google import genai
from google.genai import errors as genai_errors
from google.genai import types
from google.genai.live import AsyncSession

from relaykit.errors import ConfigurationError, LiveSessionClosedError, ModelError
from relaykit.messages import Blob, Message, ToolCall
from relaykit.models._realtime import (
    NORMAL_CLOSE_CODES,
    RealtimeModel,
    TurnBuffer,
    cause_text,
    closed_error,
    handshake_status,
    send_error,
)
from relaykit.models.gemini import gemini_api_key, to_gemini_contents, to_gemini_tools
from relaykit.models.live import LiveConfig, LiveResponse

__all__ = ["GeminiLiveConnection", "GeminiLiveModel"]

PROVIDER = "gemini"
logger = logging.getLogger("relaykit.models.gemini_live")
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds; the longest wait for the session to be set up."""

_MODALITIES = {"text": types.Modality.TEXT, "audio": types.Modality.AUDIO}


class GeminiLiveModel(RealtimeModel):
    """A ``LiveModel`` over the Gemini Live API (``client.aio.live.connect``).

    ``api_key`` defaults to ``GEMINI_API_KEY`` then ``GOOGLE_API_KEY``; ``base_url`` overrides
    the endpoint (the SDK always speaks ``wss://`` to it, so a local server needs TLS).
    ``client`` is an existing ``genai.Client``. ``default_options`` are ``LiveConnectConfig``
    fields sent with every connection; ``LiveConfig.options`` override them.

    >>> m = GeminiLiveModel("gemini-live-2.5-flash-preview", api_key="example-key")
    >>> m.name
    'gemini:gemini-live-2.5-flash-preview'

    Args:
        model: the model name (``gemini-live-2.5-flash-preview``...).
        api_key: the API key; ``GEMINI_API_KEY``, then ``GOOGLE_API_KEY`` by default.
        base_url: the endpoint, to override Google's.
        client: a ``genai.Client`` to use instead of creating one (then ``api_key`` and
            ``base_url`` are not used).
        connect_timeout: seconds; the longest wait for the session to be set up.
        **default_options: ``LiveConnectConfig`` fields sent with every connection
            (provider-specific, hence ``Any``).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: genai.Client | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        **default_options: Any,
    ) -> None:
        if not model:
            raise ConfigurationError(
                "gemini: a model name is needed, e.g. "
                "GeminiLiveModel('gemini-live-2.5-flash-preview')"
            )
        _check_options(default_options)
        self._setup(PROVIDER, model, connect_timeout, default_options)
        if client is None:
            api_key = gemini_api_key(api_key, f"live model {model!r}")
            http_options = types.HttpOptions(base_url=base_url) if base_url else None
            client = genai.Client(vertexai=False, api_key=api_key, http_options=http_options)
        self.client = client

    def connect_config(self, config: LiveConfig) -> types.LiveConnectConfig:
        """The ``LiveConnectConfig`` a connection with ``config`` is opened with."""
        _check_options(config.options)
        system, _ = to_gemini_contents(config.messages)
        fields: dict[str, Any] = {
            "response_modalities": [_modality(config.modalities)],
            "input_audio_transcription": types.AudioTranscriptionConfig(),
        }
        if "audio" in config.modalities:
            fields["output_audio_transcription"] = types.AudioTranscriptionConfig()
        if system is not None:
            fields["system_instruction"] = system
        if config.tools:
            fields["tools"] = to_gemini_tools(config.tools)
        fields.update(self.default_options)
        fields.update(config.options)
        try:
            return types.LiveConnectConfig(**fields)
        except pydantic.ValidationError as exc:
            # Name the fields only: pydantic's text quotes the values (the instruction too).
            bad = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
            raise ConfigurationError(
                f"gemini: invalid value for live option(s) {', '.join(bad)} of model {self.model!r}"
            ) from exc

    async def connect(self, config: LiveConfig) -> GeminiLiveConnection:
        """Open a session with ``config``'s context; raises ``ModelError`` when it fails."""
        connect_config = self.connect_config(config)
        _, history = to_gemini_contents(config.messages)
        manager = self.client.aio.live.connect(model=self.model, config=connect_config)
        try:
            async with asyncio.timeout(self.connect_timeout):
                session = await manager.__aenter__()
        except TimeoutError:
            raise ModelError(
                f"gemini live model {self.model!r}: the session was not set up within "
                f"{self.connect_timeout:g} s",
                provider=PROVIDER,
            ) from None
        except Exception as exc:
            raise _connect_error(self.model, exc) from exc
        connection = GeminiLiveConnection(self.model, manager, session)
        if history:
            try:
                await session.send_client_content(
                    turns=_turns(history), turn_complete=history[-1].role == "user"
                )
            except BaseException as exc:
                await connection.close()
                if isinstance(exc, Exception):
                    raise _send_error(self.model, "the history", exc) from exc
                raise
        return connection

    async def aclose(self) -> None:
        """Close the SDK client's HTTP connections."""
        await self.client.aio.aclose()


class GeminiLiveConnection:
    """One Gemini Live session (a ``LiveConnection``)."""

    def __init__(
        self,
        model: str,
        manager: contextlib.AbstractAsyncContextManager[AsyncSession],
        session: AsyncSession,
    ) -> None:
        # ``manager`` is the SDK's connect() context manager, entered by the model; leaving it
        # closes the WebSocket.
        self._model = model
        self._manager = manager
        self._session = session
        self._closed = False
        self._buffer = TurnBuffer()
        self._in_turn = False
        self._call_names: dict[str, str] = {}
        self._calls_seen = 0

    def _check_open(self) -> None:
        if self._closed:
            raise LiveSessionClosedError(
                f"gemini live model {self._model!r}: cannot send on a closed connection"
            )

    async def send(self, message: Message) -> None:
        """Send user text (``clientContent``) or a tool response (``toolResponse``)."""
        self._check_open()
        if message.role == "tool":
            call_id = message.tool_call_id
            name = message.tool_name or self._call_names.get(call_id or "")
            if not call_id or not name:
                raise ConfigurationError(
                    f"gemini live model {self._model!r}: a tool response needs the "
                    "tool_call_id of a call received on this connection (or a tool_name)"
                )
            response = types.FunctionResponse(
                id=call_id, name=name, response={"output": message.content}
            )
            what = "a tool response"
            sending = self._session.send_tool_response(function_responses=[response])
        elif message.role == "user":
            _, turns = to_gemini_contents([message])
            if not turns:
                raise ConfigurationError(
                    f"gemini live model {self._model!r}: cannot send an empty user message"
                )
            what = "a user message"
            sending = self._session.send_client_content(turns=_turns(turns), turn_complete=True)
        else:
            raise ConfigurationError(
                f"gemini live model {self._model!r}: send takes user messages and tool "
                f"responses, not a {message.role!r} message"
            )
        try:
            await sending
        except Exception as exc:
            raise _send_error(self._model, what, exc) from exc

    async def send_realtime(self, blob: Blob) -> None:
        """Send an audio chunk (or an image frame) as ``realtimeInput``."""
        self._check_open()
        media = types.Blob(mime_type=blob.mime_type, data=blob.data)
        mime = blob.mime_type.lower()
        if mime.startswith("audio/"):
            sending = self._session.send_realtime_input(audio=media)
        elif mime.startswith("image/"):
            sending = self._session.send_realtime_input(video=media)
        else:
            raise ConfigurationError(
                f"gemini live model {self._model!r}: cannot stream a blob of type "
                f"{blob.mime_type!r} (audio/* and image/* only)"
            )
        try:
            await sending
        except Exception as exc:
            raise _send_error(self._model, "realtime input", exc) from exc

    async def receive(self) -> AsyncIterator[LiveResponse]:
        """The model's responses; ends when the server closes normally between turns."""
        while not self._closed:
            got_any = False
            try:
                # The SDK's receive() stops after each turn; this loop reads the next turn.
                messages = self._session.receive()
                try:
                    async for message in messages:
                        got_any = True
                        for response in self._read(message):
                            yield response
                finally:
                    closer = getattr(messages, "aclose", None)  # typed as a plain iterator
                    if closer is not None:
                        await closer()
            except Exception as exc:
                if self._closed:
                    return  # our own close() ended the read
                if _unknown_message(exc):
                    # The frame is read: go on with the next one.
                    logger.warning(
                        "gemini live model %r: skipped a server message of a kind the SDK "
                        "does not know",
                        self._model,
                    )
                    continue
                error = self._failure(exc)
                if error is None:
                    return
                raise error from exc
            if not got_any:
                return

    def _failure(self, exc: Exception) -> ModelError | None:
        """The error to raise for ``exc``, or None for a normal close between turns."""
        payload = _payload_error(exc)
        if isinstance(payload, dict):  # an error the server sent as a message
            inner = payload.get("error")
            fields = inner if isinstance(inner, dict) else payload
            code, status, text = fields.get("code"), fields.get("status"), fields.get("message")
            what = " ".join(str(x) for x in (code, status) if isinstance(x, int | str))
            if isinstance(text, str) and text:
                what = f"{what}: {text[:200]}" if what else text[:200]
            return ModelError(
                f"gemini live model {self._model!r}: the server sent an error"
                + (f" ({what})" if what else ""),
                provider=PROVIDER,
                status=code if isinstance(code, int) and not isinstance(code, bool) else None,
            )
        if isinstance(exc, genai_errors.APIError):
            # The SDK turns the server's close frame into an APIError of its code and reason.
            mid_turn = self._in_turn or self._buffer.pending
            if exc.code in NORMAL_CLOSE_CODES and not mid_turn:
                return None
            reason = exc.details if isinstance(exc.details, str) else (exc.message or "")
            return closed_error(
                PROVIDER, f"gemini live model {self._model!r}", exc.code, reason, mid_turn=mid_turn
            )
        return ModelError(
            f"gemini live model {self._model!r}: the connection failed ({cause_text(exc)})",
            provider=PROVIDER,
        )

    def _read(self, message: types.LiveServerMessage) -> list[LiveResponse]:
        out: list[LiveResponse] = []
        content = message.server_content
        if content is not None:
            out.extend(self._read_content(content))
        if message.tool_call is not None and message.tool_call.function_calls:
            # The model waits for the results: what it said so far is complete.
            self._in_turn = False
            out.extend(self._buffer.complete("text"))
            out.append(LiveResponse(Message.assistant("", self._calls(message.tool_call))))
        # setupComplete, goAway, usageMetadata, sessionResumptionUpdate and
        # toolCallCancellation carry nothing a LiveResponse has a place for.
        return out

    def _read_content(self, content: types.LiveServerContent) -> list[LiveResponse]:
        out: list[LiveResponse] = []
        buffer = self._buffer
        transcription = content.input_transcription
        if transcription is not None:
            if transcription.text:
                out.append(buffer.chunk("input", transcription.text))
            if transcription.finished:
                out.extend(buffer.complete("input"))
        parts = content.model_turn.parts if content.model_turn else None
        for part in parts or []:
            self._in_turn = True
            if part.text and not part.thought:
                out.append(buffer.chunk("text", part.text))
            elif part.inline_data is not None and part.inline_data.data:
                blob = Blob(part.inline_data.mime_type or "audio/pcm", part.inline_data.data)
                out.append(LiveResponse(audio=blob))
        transcription = content.output_transcription
        if transcription is not None:
            self._in_turn = True
            if transcription.text:
                out.append(buffer.chunk("output", transcription.text))
            if transcription.finished:
                out.extend(buffer.complete("output"))
        if content.generation_complete:
            out.extend(buffer.complete("text"))
        if content.interrupted or content.turn_complete:
            out.extend(buffer.flush())
            self._in_turn = not content.turn_complete
            out.append(
                LiveResponse(
                    turn_complete=bool(content.turn_complete),
                    interrupted=bool(content.interrupted),
                )
            )
        return out

    def _calls(self, tool_call: types.LiveServerToolCall) -> list[ToolCall]:
        calls: list[ToolCall] = []
        for fc in tool_call.function_calls or []:
            call_id = fc.id or f"call_{self._calls_seen}"
            self._calls_seen += 1
            self._call_names[call_id] = fc.name or ""
            calls.append(ToolCall(call_id, fc.name or "", json.dumps(fc.args or {})))
        return calls

    async def close(self) -> None:
        """Close the WebSocket (idempotent); a pending ``receive()`` ends."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._manager.__aexit__(None, None, None)


def _turns(contents: list[types.Content]) -> list[types.Content | types.ContentDict]:
    return list(contents)


def _check_options(options: dict[str, Any]) -> None:
    unknown = sorted(k for k in options if k not in types.LiveConnectConfig.model_fields)
    if unknown:
        raise ConfigurationError(
            f"gemini: unknown live option(s) {', '.join(map(repr, unknown))}; the options are "
            "LiveConnectConfig fields (speech_config, temperature, realtime_input_config...)"
        )


def _modality(modalities: tuple[str, ...]) -> types.Modality:
    unknown = [m for m in modalities if m not in _MODALITIES]
    if unknown or not modalities:
        raise ConfigurationError(
            f"gemini: unknown live modalities {modalities!r}; use ('text',) or ('audio',)"
        )
    # One modality per session: audio comes with its transcription, so it covers text too.
    return _MODALITIES["audio" if "audio" in modalities else "text"]


def _connect_error(model: str, exc: Exception) -> ModelError:
    if isinstance(exc, genai_errors.APIError):
        # The server refused the setup by closing the socket: code and reason are its words.
        reason = exc.details if isinstance(exc.details, str) else (exc.message or "")
        cause = f"close code {exc.code}: {reason}" if reason else f"close code {exc.code}"
    else:
        cause = cause_text(exc)
    return ModelError(
        f"gemini live model {model!r}: cannot open a session ({cause})",
        provider=PROVIDER,
        status=handshake_status(exc),
    )


def _send_error(model: str, what: str, exc: Exception) -> ModelError:
    return send_error(PROVIDER, f"gemini live model {model!r}", what, exc)


#: The keys of an error the server sends as a message (``{"error": {...}}``, ``{"code": ...}``).
_ERROR_KEYS = frozenset({"error", "code", "status"})


def _unknown_message(exc: Exception) -> bool:
    """Whether the SDK failed on a server message none of whose fields it knows -- and which is
    not an error the server sent.

    google-genai converts each message to the fields it knows; when none is left it takes the
    message for an error payload and calls ``errors.APIError.raise_error`` with the message's
    top-level ``code`` -- None for a message of a new kind (and for Google's usual error shape,
    ``{"error": {"code", "message", "status"}}``), which fails there (a ``TypeError`` comparing
    None with a status) or becomes an ``APIError`` without a code. The message is in
    ``raise_error``'s ``response_json``; one with an error's keys is an error, never skipped.
    """
    if isinstance(exc, genai_errors.APIError):
        return exc.code is None and not _is_error_payload(exc.details)
    if not isinstance(exc, TypeError):
        return False
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "raise_error" and frame.f_globals.get("__name__") == (
            genai_errors.__name__
        ):
            return not _is_error_payload(frame.f_locals.get("response_json"))
        tb = tb.tb_next
    return False


def _is_error_payload(message: object) -> bool:
    return isinstance(message, dict) and not _ERROR_KEYS.isdisjoint(message)


def _payload_error(exc: Exception) -> object:
    """The error payload the SDK failed on (``raise_error``'s ``response_json``), if any."""
    if isinstance(exc, genai_errors.APIError):
        return exc.details if _is_error_payload(exc.details) else None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "raise_error":
            found = frame.f_locals.get("response_json")
            return found if _is_error_payload(found) else None
        tb = tb.tb_next
    return None
