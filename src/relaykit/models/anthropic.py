"""AnthropicModel: the Messages API through the official ``anthropic`` SDK.

Needs ``pip install 'relaykit[anthropic]'``.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, cast

import anthropic
from anthropic import AsyncAnthropic
from anthropic.types import Message as AnthropicMessage
from anthropic.types import MessageDeltaUsage, RawMessageStreamEvent, Usage

from relaykit.errors import ConfigurationError, ModelError
from relaykit.messages import Blob, Message, ToolCall
from relaykit.models._retry import (
    DEFAULT_MAX_BACKOFF,
    Failure,
    ProviderModel,
    RetryPolicy,
    arguments_object,
    error_detail,
    is_transport_error,
    retry_after_seconds,
    split_options,
)
from relaykit.models.base import ModelRequest, ToolSpec, usage_metadata

__all__ = ["AnthropicModel"]

DEFAULT_TIMEOUT = 600.0
"""Seconds; the longest wait for response bytes (a whole non-streamed answer)."""

DEFAULT_MAX_TOKENS = 1024

_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_RETRYABLE_STREAM_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})
_OVERLOADED = 529  # Anthropic's "overloaded" status, retried like a 503

Json = dict[str, Any]


class AnthropicModel(ProviderModel):
    """A ``ChatModel`` over the Anthropic Messages API.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY`` (the SDK's other credential sources also
    work); ``base_url`` to ``ANTHROPIC_BASE_URL`` or api.anthropic.com. ``client`` is an existing
    ``AsyncAnthropic`` (its own retries are switched off). ``max_tokens`` is sent with every
    request (the API requires it). Failures are retried by relaykit (``max_retries`` retries,
    exponential backoff from ``backoff_base`` seconds, at least the server's ``Retry-After``, at
    most ``max_backoff`` seconds; a server asking for a longer wait than ``max_backoff`` fails at
    once, its wait named) and reported as ``ModelError``.
    ``default_options`` go with every request; ``ModelRequest.options`` override them, and options
    the SDK does not name (``temperature`` in recent SDKs...) are sent in the request body.

    >>> m = AnthropicModel("claude-sonnet-4-5", api_key="sk-ant-example")
    >>> m.name, m.max_tokens
    ('anthropic:claude-sonnet-4-5', 1024)

    Args:
        model: the model name (``claude-sonnet-4-5``...).
        api_key: the API key; ``ANTHROPIC_API_KEY`` by default.
        base_url: the server's URL; ``ANTHROPIC_BASE_URL`` or api.anthropic.com by default.
        client: an ``AsyncAnthropic`` to use instead of creating one (then ``api_key``,
            ``base_url`` and ``timeout`` are not used).
        max_retries: retries after the first attempt.
        timeout: seconds; the longest wait for response bytes.
        backoff_base: seconds before the first retry, doubled for each next one.
        max_backoff: the longest wait before a retry, in seconds.
        max_tokens: the most tokens of one reply (sent with every request).
        **default_options: request options sent with every request (provider-specific,
            hence ``Any``).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: AsyncAnthropic | None = None,
        max_retries: int = 3,
        timeout: float = DEFAULT_TIMEOUT,
        backoff_base: float = 0.5,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        **default_options: Any,
    ) -> None:
        if not model:
            raise ConfigurationError(
                "anthropic: a model name is needed, e.g. AnthropicModel('claude-sonnet-4-5')"
            )
        self._setup(
            "anthropic", model, RetryPolicy(max_retries, backoff_base, max_backoff), _classify
        )
        self.max_tokens = max_tokens
        self.default_options = default_options
        if client is not None:
            self.client = client.with_options(max_retries=0)
        else:
            api_key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
            try:
                self.client = AsyncAnthropic(
                    api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout
                )
            except anthropic.AnthropicError as exc:  # a broken credentials profile...
                raise ConfigurationError(
                    f"anthropic: cannot set up a client for model {model!r}: {exc}"
                ) from exc
            if not (self.client.api_key or self.client.auth_token or self.client.credentials):
                raise ConfigurationError(
                    f"anthropic: no API key for model {model!r}; set ANTHROPIC_API_KEY or pass "
                    "api_key=..."
                )

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        options = {"max_tokens": self.max_tokens, **self.default_options, **request.options}
        kwargs = split_options(self.client.messages.create, options)
        system, messages = to_anthropic_messages(request.messages)
        kwargs["model"] = self.model
        kwargs["messages"] = messages
        if system is not None:
            kwargs["system"] = system
        if request.tools:
            kwargs["tools"] = to_anthropic_tools(request.tools)
        return kwargs

    def _call(self, request: ModelRequest) -> Callable[[], Awaitable[Message]]:
        params = self._params(request)

        async def call() -> Message:
            reply = await self.client.messages.create(**params)
            return from_anthropic_message(cast(AnthropicMessage, reply))

        return call

    async def _chunks(self, request: ModelRequest) -> AsyncIterator[Message]:
        params = self._params(request)  # errors here come out of the stream, not stream()
        params["stream"] = True
        events = cast(
            anthropic.AsyncStream[RawMessageStreamEvent],
            await self.client.messages.create(**params),
        )
        reader = _StreamReader()
        sent = False
        try:
            async for event in events:
                for chunk in reader.read(event):
                    sent = True
                    yield chunk
        finally:
            await events.close()
        if reader.usage or not sent:
            yield Message("assistant", "", metadata=reader.usage_metadata())

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.close()


def _classify(exc: Exception) -> Failure | None:
    if isinstance(exc, anthropic.APIStatusError):
        detail = error_detail(exc.body, exc.message)
        if exc.status_code >= 400:
            if exc.status_code == _OVERLOADED:
                return Failure(_OVERLOADED, detail, True, retry_after_seconds(exc.response.headers))
            return Failure.http(exc.status_code, detail, retry_after_seconds(exc.response.headers))
        # An ``error`` event inside a 200 stream: no HTTP status of its own.
        kind = _error_type(exc.body)
        text = f"{kind}: {detail}" if kind else detail
        return Failure(None, text, kind in _RETRYABLE_STREAM_ERRORS)
    if isinstance(exc, anthropic.APIConnectionError):  # timeouts included
        cause = exc.__cause__
        return Failure.connection_error(f"{exc.message} {cause}" if cause else exc.message)
    if isinstance(exc, anthropic.AnthropicError):
        return Failure.other(str(exc))
    if is_transport_error(exc):
        return Failure.connection_error(str(exc) or type(exc).__name__)
    return None


def _error_type(body: object) -> str:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("type"), str):
            return str(inner["type"])
    return ""


# -- requests ---------------------------------------------------------------------------------


def to_anthropic_tools(tools: Iterable[ToolSpec]) -> list[Json]:
    """ToolSpecs as Messages API ``tools``."""
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _attachment_block(blob: Blob) -> Json:
    mime = blob.mime_type.lower()
    if mime in _IMAGE_TYPES:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": mime, "data": _b64(blob.data)},
        }
    if mime == "application/pdf":
        return {
            "type": "document",
            "source": {"type": "base64", "media_type": mime, "data": _b64(blob.data)},
        }
    if mime.startswith("text/"):
        return {
            "type": "document",
            "source": {
                "type": "text",
                "media_type": "text/plain",
                "data": blob.data.decode("utf-8", errors="replace"),
            },
        }
    raise ModelError(
        f"anthropic: cannot send an attachment of type {blob.mime_type!r} "
        "(supported: JPEG/PNG/GIF/WebP images, PDF, text)",
        provider="anthropic",
    )


def to_anthropic_messages(messages: Iterable[Message]) -> tuple[str | None, list[Json]]:
    """Our messages as ``(system, messages)`` for the Messages API.

    System messages are joined into ``system``; tool results become ``tool_result`` blocks of a
    user message (consecutive results share one); empty assistant messages are left out.
    """
    system: list[str] = []
    out: list[Json] = []
    for msg in messages:
        if msg.role == "system":
            system.append(msg.content)
        elif msg.role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": msg.tool_call_id or "",
                "content": msg.content,
            }
            last = out[-1] if out else None
            if (
                last is not None
                and last["role"] == "user"
                and isinstance(last["content"], list)
                and all(b.get("type") == "tool_result" for b in last["content"])
            ):
                last["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif msg.role == "user":
            if msg.attachments:
                blocks: list[Json] = [_attachment_block(b) for b in msg.attachments]
                if msg.content:
                    blocks.append({"type": "text", "text": msg.content})
                out.append({"role": "user", "content": blocks})
            else:
                out.append({"role": "user", "content": msg.content})
        else:
            blocks = [{"type": "text", "text": msg.content}] if msg.content else []
            blocks.extend(
                {
                    "type": "tool_use",
                    "id": c.id,
                    "name": c.name,
                    "input": arguments_object(c.arguments),
                }
                for c in msg.tool_calls
            )
            if blocks:
                out.append({"role": "assistant", "content": blocks})
    return ("\n\n".join(system) if system else None), out


# -- responses --------------------------------------------------------------------------------


def _input_tokens(usage: Usage | MessageDeltaUsage) -> int | None:
    """Input tokens including prompt-cache reads and writes (which the API counts apart)."""
    base = usage.input_tokens
    cached = (usage.cache_creation_input_tokens or 0) + (usage.cache_read_input_tokens or 0)
    if base is None and not cached:
        return None
    return (base or 0) + cached


def from_anthropic_message(reply: AnthropicMessage) -> Message:
    """A Messages API response as our assistant message."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in reply.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            calls.append(ToolCall(block.id, block.name, json.dumps(block.input)))
    usage = usage_metadata(_input_tokens(reply.usage), reply.usage.output_tokens)
    return Message("assistant", "".join(texts), calls, metadata=usage)


class _StreamReader:
    """Turns Messages API stream events into message chunks."""

    def __init__(self) -> None:
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.usage = False
        self.tool_json: dict[int, bool] = {}  # tool_use block index -> got arguments

    def usage_metadata(self) -> dict[str, Any]:
        return usage_metadata(self.input_tokens, self.output_tokens)

    def _take_usage(self, usage: Usage | MessageDeltaUsage) -> None:
        if usage.input_tokens is not None:  # a message_delta may leave it out
            self.input_tokens = _input_tokens(usage)
        self.output_tokens = usage.output_tokens
        self.usage = True

    def read(self, event: RawMessageStreamEvent) -> list[Message]:
        if event.type == "message_start":
            self._take_usage(event.message.usage)
        elif event.type == "message_delta":
            self._take_usage(event.usage)
        elif event.type == "content_block_start":
            block = event.content_block
            if block.type == "text" and block.text:
                return [Message("assistant", block.text)]
            if block.type == "tool_use":
                args = json.dumps(block.input) if block.input else ""
                self.tool_json[event.index] = bool(args)
                return [
                    Message(
                        "assistant", tool_calls=[ToolCall(block.id, block.name, args, event.index)]
                    )
                ]
        elif event.type == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta" and delta.text:
                return [Message("assistant", delta.text)]
            if delta.type == "input_json_delta" and delta.partial_json:
                self.tool_json[event.index] = True
                return [
                    Message(
                        "assistant", tool_calls=[ToolCall("", "", delta.partial_json, event.index)]
                    )
                ]
        elif event.type == "content_block_stop" and self.tool_json.get(event.index) is False:
            # A call without arguments streams no JSON: send "{}" like the non-streamed answer.
            self.tool_json[event.index] = True
            return [Message("assistant", tool_calls=[ToolCall("", "", "{}", event.index)])]
        return []
