"""OpenAIRealtimeModel: the OpenAI Realtime API through the official ``openai`` SDK.

Needs ``pip install 'relaykit[live]'``. One connection is one Realtime WebSocket session
(``client.realtime.connect(model=...)``). At connect the adapter sends ``session.update`` (the
system messages as ``instructions``, the tools, the output modality, input transcription on),
waits for ``session.updated``, then adds the history as ``conversation.item.create`` items and
asks for a response (``response.create``) when the history ends with the user's turn or a tool
result. ``send`` adds user messages and tool results the same way; ``send_realtime`` appends
audio to the input buffer (``input_audio_buffer.append``), where the server's voice activity
detection takes it from there.

A response is requested only when none is running, so text sent while the model speaks waits
for the running response to end instead of failing with
``conversation_already_has_active_response``; tool outputs also wait for the other calls of
their response (parallel calls get one response, after the last output). A long-running call
left unanswered holds back neither user input nor the calls of later responses.
Each ``response.done`` ends a turn (``turn_complete``), also one that ended with function
calls. The server's ``error`` events end ``receive()`` with a ``ModelError`` when they refuse
an event that carried the conversation (an item of the history, a user message, a tool output,
a response request: the input never reached the model, or its response will never come) or
report a ``server_error``. A refused response request because a response already runs (the
server's voice detection started one first) is not: the request is made again when that
response is done. The API's other errors leave the session open (an empty audio buffer
committed, say): they are logged as warnings (logger ``relaykit.models.openai_realtime``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

import websockets
from openai import AsyncOpenAI
from openai.types.realtime import (
    ConversationItemInputAudioTranscriptionCompletedEvent,
    ConversationItemInputAudioTranscriptionDeltaEvent,
    ConversationItemInputAudioTranscriptionFailedEvent,
    InputAudioBufferSpeechStartedEvent,
    RealtimeErrorEvent,
    RealtimeServerEvent,
    ResponseAudioDeltaEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseAudioTranscriptDoneEvent,
    ResponseCreatedEvent,
    ResponseDoneEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

from relaykit.errors import ConfigurationError, LiveSessionClosedError, ModelError
from relaykit.messages import Blob, Message, ToolCall
from relaykit.models._realtime import (
    NORMAL_CLOSE_CODES,
    RealtimeModel,
    TurnBuffer,
    cause_text,
    closed_error,
    handshake_status,
    merge_options,
    send_error,
)
from relaykit.models.live import LiveConfig, LiveResponse
from relaykit.models.openai import _data_url

if TYPE_CHECKING:
    from openai.resources.realtime.realtime import AsyncRealtimeConnection

__all__ = ["OpenAIRealtimeConnection", "OpenAIRealtimeModel"]

PROVIDER = "openai"
logger = logging.getLogger("relaykit.models.openai_realtime")
#: How many of the client events that carry the conversation (items, response requests) are
#: remembered by id, to tell the server's refusal of one of them from a passing error (at
#: least the history sent at connect, whatever its length).
_TRACKED_EVENTS = 4096
#: Error codes that end the session whatever event they name.
_FATAL_CODES = frozenset({"session_expired"})
DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds; the longest wait for the session to be configured."""

DEFAULT_TRANSCRIPTION_MODEL = "gpt-4o-mini-transcribe"
"""The model that transcribes the user's speech unless the options say otherwise."""

_OUTPUT_MIME = {
    "audio/pcm": "audio/pcm;rate=24000",
    "audio/pcmu": "audio/pcmu",
    "audio/pcma": "audio/pcma",
}

Json = dict[str, Any]


class OpenAIRealtimeModel(RealtimeModel):
    """A ``LiveModel`` over the OpenAI Realtime API (``client.realtime.connect``).

    ``api_key`` defaults to ``OPENAI_API_KEY`` and ``base_url`` to ``OPENAI_BASE_URL``; the
    WebSocket URL is ``base_url`` with ``ws``/``wss`` for ``http``/``https`` plus ``/realtime``,
    unless ``websocket_base_url`` is given. ``client`` is an existing ``AsyncOpenAI``.
    ``default_options`` are ``session.update`` session fields (``audio``, ``tool_choice``,
    ``max_output_tokens``...), merged key by key into what the adapter sends and overridden the
    same way by ``LiveConfig.options``; ``{"audio": {"input": {"transcription": None}}}``
    switches the transcription of the user's speech off.

    >>> m = OpenAIRealtimeModel("gpt-realtime", api_key="example-key")
    >>> m.name
    'openai:gpt-realtime'

    Args:
        model: the model name (``gpt-realtime``...).
        api_key: the API key; ``OPENAI_API_KEY`` by default.
        base_url: the API's URL; ``OPENAI_BASE_URL`` or api.openai.com by default.
        websocket_base_url: the Realtime WebSocket base URL, when not derived from
            ``base_url``.
        client: an ``AsyncOpenAI`` to use instead of creating one (then ``api_key``,
            ``base_url`` and ``websocket_base_url`` are not used).
        connect_timeout: seconds; the longest wait for the session to be configured.
        **default_options: session fields sent with every connection (provider-specific,
            hence ``Any``).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        websocket_base_url: str | None = None,
        client: AsyncOpenAI | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        **default_options: Any,
    ) -> None:
        if not model:
            raise ConfigurationError(
                "openai: a model name is needed, e.g. OpenAIRealtimeModel('gpt-realtime')"
            )
        self._setup(PROVIDER, model, connect_timeout, default_options)
        if client is None:
            base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
            api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
            if api_key is None:
                if base_url is None and websocket_base_url is None:
                    raise ConfigurationError(
                        f"openai: no API key for realtime model {model!r}; set "
                        "OPENAI_API_KEY or pass api_key=..."
                    )
                api_key = "not-needed"
            client = AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                websocket_base_url=websocket_base_url,
                max_retries=0,
            )
        self.client = client

    def session_config(self, config: LiveConfig) -> Json:
        """The ``session`` of the ``session.update`` a connection with ``config`` sends."""
        instructions = "\n\n".join(m.content for m in config.messages if m.role == "system")
        session: Json = {"type": "realtime", "output_modalities": [_modality(config.modalities)]}
        if instructions:
            session["instructions"] = instructions
        if config.tools:
            session["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                }
                for t in config.tools
            ]
        session["audio"] = {"input": {"transcription": {"model": DEFAULT_TRANSCRIPTION_MODEL}}}
        session = merge_options(session, self.default_options)
        return merge_options(session, config.options)

    async def connect(self, config: LiveConfig) -> OpenAIRealtimeConnection:
        """Open a session with ``config``'s context; raises ``ModelError`` when it fails."""
        session = self.session_config(config)
        history = [m for m in config.messages if m.role != "system"]
        items = [item for m in history for item in _items(m, self.model)]
        manager = self.client.realtime.connect(model=self.model)
        conn: AsyncRealtimeConnection | None = None
        try:
            async with asyncio.timeout(self.connect_timeout):
                conn = await manager.enter()
                await conn.session.update(session=cast(Any, session))
                await _session_updated(conn, self.model)
        except BaseException as exc:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            if isinstance(exc, TimeoutError):
                raise ModelError(
                    f"openai realtime model {self.model!r}: the session was not configured "
                    f"within {self.connect_timeout:g} s",
                    provider=PROVIDER,
                ) from None
            if isinstance(exc, ModelError) or not isinstance(exc, Exception):
                raise
            raise ModelError(
                f"openai realtime model {self.model!r}: cannot open a session ({cause_text(exc)})",
                provider=PROVIDER,
                status=handshake_status(exc),
            ) from exc
        connection = OpenAIRealtimeConnection(self.model, conn, _output_mime(session))
        connection._track_limit = max(_TRACKED_EVENTS, len(items) + _TRACKED_EVENTS)
        try:
            await connection._create_items(items, "the history")
            if history and history[-1].role in ("user", "tool"):
                connection._want_response = True
                await connection._request_response()
        except BaseException as exc:
            await connection.close()
            if isinstance(exc, Exception):
                raise _send_error(self.model, "the history", exc) from exc
            raise
        return connection

    async def aclose(self) -> None:
        """Close the SDK client's HTTP connections."""
        await self.client.close()


class OpenAIRealtimeConnection:
    """One OpenAI Realtime session (a ``LiveConnection``)."""

    def __init__(self, model: str, conn: AsyncRealtimeConnection, output_mime: str) -> None:
        self._model = model
        self._conn = conn
        self._output_mime = output_mime
        self._closed = False
        self._buffer = TurnBuffer()
        self._response_active = False  # a response runs (or was asked for)
        self._interrupted = False  # the running response was reported interrupted
        self._want_response = False  # user input was added that needs a response
        self._outputs_waiting = False  # tool outputs were added that need a response
        self._batch: set[str] = set()  # the unanswered calls of the last response with calls
        self._batch_started = False  # the running response has made calls
        # The ids of the events sent that carry the conversation, and what each sent: the
        # server refusing one of them is fatal (the input never reached the model, or its
        # response will never come); any other error event is logged and passed over.
        self._tracked: OrderedDict[str, str] = OrderedDict()
        self._track_limit = _TRACKED_EVENTS
        self._warned: set[tuple[str, str]] = set()  # the passing errors logged once already

    @property
    def _mid_turn(self) -> bool:
        # A call waiting for its output is not: the model said all it had to say.
        return (
            self._response_active
            or self._buffer.pending
            or self._want_response
            or self._outputs_waiting
        )

    def _check_open(self) -> None:
        if self._closed:
            raise LiveSessionClosedError(
                f"openai realtime model {self._model!r}: cannot send on a closed connection"
            )

    async def send(self, message: Message) -> None:
        """Add a user message or a tool result to the conversation and ask for a response."""
        self._check_open()
        if message.role not in ("user", "tool"):
            raise ConfigurationError(
                f"openai realtime model {self._model!r}: send takes user messages and tool "
                f"responses, not a {message.role!r} message"
            )
        if message.role == "tool" and not message.tool_call_id:
            raise ConfigurationError(
                f"openai realtime model {self._model!r}: a tool response needs the "
                "tool_call_id of the call it answers"
            )
        items = _items(message, self._model)
        what = "a tool response" if message.role == "tool" else "a user message"
        try:
            await self._create_items(items, what)
            if message.role == "tool":
                self._batch.discard(message.tool_call_id or "")
                self._outputs_waiting = True
            else:
                self._want_response = True
            await self._request_response()
        except Exception as exc:
            raise _send_error(self._model, what, exc) from exc

    async def _request_response(self) -> None:
        """Send ``response.create`` when input waits for one and the model is free: no response
        runs and, for tool outputs, every call of their batch has its output (a long-running
        call from an earlier response does not hold user input back)."""
        if self._closed or self._response_active:
            return
        if self._want_response or (self._outputs_waiting and not self._batch):
            self._want_response = self._outputs_waiting = False
            self._response_active = True
            await self._conn.response.create(event_id=self._track("a response request"))

    def _track(self, what: str) -> str:
        """A new client event id, remembered as sending ``what``."""
        event_id = f"relaykit_{uuid.uuid4().hex}"
        tracked = self._tracked
        tracked[event_id] = what
        if len(tracked) > self._track_limit:
            tracked.popitem(last=False)
        return event_id

    async def _create_items(self, items: list[Json], what: str) -> None:
        """Add ``items`` to the conversation, each event tracked as sending ``what``."""
        for item in items:
            await self._conn.conversation.item.create(
                item=cast(Any, item), event_id=self._track(what)
            )

    async def send_realtime(self, blob: Blob) -> None:
        """Append an audio chunk to the input buffer (in the session's input format)."""
        self._check_open()
        if not blob.mime_type.lower().startswith("audio/"):
            raise ConfigurationError(
                f"openai realtime model {self._model!r}: cannot stream a blob of type "
                f"{blob.mime_type!r} (audio/* only)"
            )
        try:
            await self._conn.input_audio_buffer.append(audio=_b64(blob.data))
        except Exception as exc:
            raise _send_error(self._model, "realtime audio", exc) from exc

    async def receive(self) -> AsyncIterator[LiveResponse]:
        """The model's responses; ends when the server closes normally between turns."""
        while not self._closed:
            try:
                event = await self._conn.recv()
            except websockets.ConnectionClosed as exc:
                if self._closed:
                    return  # our own close() ended the read
                code = exc.rcvd.code if exc.rcvd is not None else None
                if code in NORMAL_CLOSE_CODES and not self._mid_turn:
                    return
                reason = exc.rcvd.reason if exc.rcvd is not None else ""
                subject = f"openai realtime model {self._model!r}"
                raise closed_error(
                    PROVIDER, subject, code, reason, mid_turn=self._mid_turn
                ) from exc
            except Exception as exc:
                if self._closed:
                    return
                raise ModelError(
                    f"openai realtime model {self._model!r}: the connection failed "
                    f"({cause_text(exc)})",
                    provider=PROVIDER,
                ) from exc
            responses = self._read_checked(event)
            if isinstance(event, ResponseDoneEvent) and (
                self._want_response or self._outputs_waiting
            ):
                # Input that waited for the model to be free gets its response now, before the
                # caller sees the end of the turn (and perhaps stops reading).
                try:
                    await self._request_response()
                except Exception as exc:
                    raise _send_error(self._model, "a response request", exc) from exc
            for response in responses:
                yield response

    def _read_checked(self, event: RealtimeServerEvent) -> list[LiveResponse]:
        """``_read``, an event whose fields are not what its type says (the SDK parses events
        without validating them) as a ``ModelError`` naming the event type only."""
        try:
            return self._read(event)
        except ModelError:
            raise
        except Exception as exc:
            kind = getattr(event, "type", None)
            what = f"a {kind!r} event" if isinstance(kind, str) and len(kind) <= 80 else "an event"
            raise ModelError(
                f"openai realtime model {self._model!r}: the server sent {what} relaykit could "
                f"not read ({type(exc).__name__})",
                provider=PROVIDER,
            ) from exc

    def _read(self, event: RealtimeServerEvent) -> list[LiveResponse]:
        buffer = self._buffer
        if isinstance(event, ResponseTextDeltaEvent):
            return [buffer.chunk("text", event.delta)] if event.delta else []
        if isinstance(event, ResponseTextDoneEvent):
            return buffer.complete("text", event.text)
        if isinstance(event, ResponseAudioTranscriptDeltaEvent):
            return [buffer.chunk("output", event.delta)] if event.delta else []
        if isinstance(event, ResponseAudioTranscriptDoneEvent):
            return buffer.complete("output", event.transcript)
        if isinstance(event, ResponseAudioDeltaEvent):
            data = base64.b64decode(event.delta)
            return [LiveResponse(audio=Blob(self._output_mime, data))] if data else []
        if isinstance(event, ConversationItemInputAudioTranscriptionDeltaEvent):
            return [buffer.chunk("input", event.delta)] if event.delta else []
        if isinstance(event, ConversationItemInputAudioTranscriptionCompletedEvent):
            return buffer.complete("input", event.transcript)
        if isinstance(event, ConversationItemInputAudioTranscriptionFailedEvent):
            # An empty complete transcription ends the partial one without storing anything.
            return buffer.complete("input", "")
        if isinstance(event, ResponseFunctionCallArgumentsDoneEvent):
            if not self._batch_started:
                self._batch_started = True
                self._batch = set()
            call = ToolCall(event.call_id, event.name, event.arguments or "{}")
            if not all(isinstance(x, str) for x in (call.id, call.name, call.arguments)):
                raise TypeError("a function call whose call_id, name or arguments are not strings")
            self._batch.add(call.id)
            return [*buffer.complete("text"), LiveResponse(Message.assistant("", [call]))]
        if isinstance(event, ResponseCreatedEvent):
            self._response_active = True
            self._interrupted = False
            self._batch_started = False
            return []
        if isinstance(event, InputAudioBufferSpeechStartedEvent):
            if self._response_active and not self._interrupted:
                self._interrupted = True  # barge-in: the server cancels the response
                return [LiveResponse(interrupted=True)]
            return []
        if isinstance(event, ResponseDoneEvent):
            return self._response_done(event)
        if isinstance(event, RealtimeErrorEvent):
            error = event.error
            if error.code == "conversation_already_has_active_response":
                # The server started a response (its voice detection) just before our request
                # reached it: ask again once that one is done.
                self._response_active = self._want_response = True
                return []
            code = f"/{error.code}" if error.code else ""
            refused = self._tracked.get(error.event_id or "")
            if refused is not None:
                raise ModelError(
                    f"openai realtime model {self._model!r}: the server refused {refused} "
                    f"({error.type}{code}: {error.message})",
                    provider=PROVIDER,
                )
            if (
                error.type == "server_error"
                or error.code in _FATAL_CODES
                or (error.event_id is None and self._response_active)
            ):
                # The server's own failure, or one that names no event while the response
                # asked for is awaited (it may never come).
                raise ModelError(
                    f"openai realtime model {self._model!r}: the server sent an error "
                    f"({error.type}{code}: {error.message})",
                    provider=PROVIDER,
                )
            # The API's other errors leave the session open (an empty audio buffer committed,
            # a cancel with no response running...): said in the log (once per kind), not fatal.
            kind = (error.type or "", error.code or "")
            log = logger.debug if kind in self._warned else logger.warning
            self._warned.add(kind)
            log(
                "openai realtime model %r: the server reported an error and the session goes "
                "on (%s%s: %s)",
                self._model,
                error.type,
                code,
                error.message,
            )
            return []
        # session.*, conversation.item.*, response.output_item.*, response.content_part.*,
        # rate limits, buffer and VAD notices carry nothing a LiveResponse has a place for.
        return []

    def _response_done(self, event: ResponseDoneEvent) -> list[LiveResponse]:
        response = event.response
        self._response_active = False
        details = response.status_details
        if response.status == "failed":
            error = details.error if details is not None else None
            what = ": ".join(x for x in (error and error.type, error and error.message) if x)
            raise ModelError(
                f"openai realtime model {self._model!r}: the response failed"
                + (f" ({what})" if what else ""),
                provider=PROVIDER,
            )
        out = self._buffer.flush()
        interrupted = response.status == "cancelled" and not self._interrupted
        self._interrupted = False
        out.append(LiveResponse(turn_complete=True, interrupted=interrupted))
        return out

    async def close(self) -> None:
        """Close the WebSocket (idempotent); a pending ``receive()`` ends."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._conn.close()


async def _session_updated(conn: AsyncRealtimeConnection, model: str) -> None:
    """Read until the server confirms the session; its ``error`` fails the connect."""
    while True:
        event = await conn.recv()
        if isinstance(event, RealtimeErrorEvent):
            error = event.error
            raise ModelError(
                f"openai realtime model {model!r}: the session was refused "
                f"({error.type}: {error.message})",
                provider=PROVIDER,
            )
        if event.type == "session.updated":
            return


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _modality(modalities: tuple[str, ...]) -> str:
    unknown = [m for m in modalities if m not in ("text", "audio")]
    if unknown or not modalities:
        raise ConfigurationError(
            f"openai: unknown realtime modalities {modalities!r}; use ('text',) or ('audio',)"
        )
    # One output modality per session: audio comes with its transcript, so it covers text too.
    return "audio" if "audio" in modalities else "text"


def _output_mime(session: Json) -> str:
    audio = session.get("audio")
    output = audio.get("output") if isinstance(audio, dict) else None
    fmt = output.get("format") if isinstance(output, dict) else None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    return _OUTPUT_MIME.get(kind, kind) if isinstance(kind, str) else _OUTPUT_MIME["audio/pcm"]


def _user_content(blob: Blob, model: str) -> Json:
    mime = blob.mime_type.lower()
    if mime.startswith("image/"):
        return {"type": "input_image", "image_url": _data_url(blob)}
    if mime.startswith("audio/"):
        return {"type": "input_audio", "audio": _b64(blob.data)}
    raise ConfigurationError(
        f"openai realtime model {model!r}: cannot send an attachment of type "
        f"{blob.mime_type!r} (images and audio only)"
    )


def _items(message: Message, model: str) -> list[Json]:
    """``message`` as Realtime conversation items (system messages are instructions)."""
    if message.role == "user":
        content: list[Json] = [{"type": "input_text", "text": message.content}]
        if not message.content and message.attachments:
            content = []
        content.extend(_user_content(b, model) for b in message.attachments)
        return [{"type": "message", "role": "user", "content": content}]
    if message.role == "assistant":
        items: list[Json] = []
        if message.content:
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": message.content}],
                }
            )
        items.extend(
            {
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": c.arguments or "{}",
            }
            for c in message.tool_calls
        )
        return items
    if message.role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id or "",
                "output": message.content,
            }
        ]
    return []


def _send_error(model: str, what: str, exc: Exception) -> ModelError:
    return send_error(PROVIDER, f"openai realtime model {model!r}", what, exc)
