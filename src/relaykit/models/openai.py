"""OpenAIModel: the Chat Completions API through the official ``openai`` SDK.

Works with api.openai.com and with any server that speaks the same protocol (vLLM, Ollama,
llama.cpp, LiteLLM...) through ``base_url``. Needs ``pip install 'relaykit[openai]'``.
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, cast

import openai
from openai import AsyncOpenAI
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from relaykit.errors import ConfigurationError, ModelError
from relaykit.messages import Blob, Message, ToolCall
from relaykit.models._retry import (
    DEFAULT_MAX_BACKOFF,
    Failure,
    ProviderModel,
    RetryPolicy,
    error_detail,
    is_transport_error,
    retry_after_seconds,
    split_options,
)
from relaykit.models.base import ModelRequest, ToolSpec, usage_metadata

__all__ = ["OpenAIModel"]

DEFAULT_TIMEOUT = 120.0
"""Seconds; for a stream, the longest wait for the next bytes."""

_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}

Json = dict[str, Any]


class OpenAIModel(ProviderModel):
    """A ``ChatModel`` over the OpenAI Chat Completions API (or a compatible server).

    ``api_key`` defaults to ``OPENAI_API_KEY`` and ``base_url`` to ``OPENAI_BASE_URL``; with a
    ``base_url`` and no key a placeholder key is sent (local servers usually ignore it).
    ``client`` is an existing ``AsyncOpenAI`` (its own retries are switched off).
    Failures are retried by relaykit (``max_retries`` retries, exponential backoff from
    ``backoff_base`` seconds, at least the server's ``Retry-After``, at most ``max_backoff``
    seconds; a server asking for a longer wait than ``max_backoff`` fails at once, its wait
    named) and reported as ``ModelError``. ``default_options`` (``temperature``,
    ``max_tokens``...) go with every request; ``ModelRequest.options`` override them, and options
    the SDK does not name are sent in the request body as they are.

    >>> m = OpenAIModel("llama3.2", base_url="http://localhost:11434/v1")
    >>> m.provider, m.model
    ('openai', 'llama3.2')

    Args:
        model: the model name (``gpt-4o-mini``, ``llama3.2``...).
        api_key: the API key; ``OPENAI_API_KEY`` by default.
        base_url: the server's URL; ``OPENAI_BASE_URL`` or api.openai.com by default.
        client: an ``AsyncOpenAI`` to use instead of creating one (then ``api_key``,
            ``base_url`` and ``timeout`` are not used).
        max_retries: retries after the first attempt.
        timeout: seconds; for a stream, the longest wait for the next bytes.
        backoff_base: seconds before the first retry, doubled for each next one.
        max_backoff: the longest wait before a retry, in seconds.
        provider_name: the name errors and ``name`` use (``openai-compatible`` for
            ``from_string("openai-compatible:...")``).
        **default_options: request options sent with every request (provider-specific,
            hence ``Any``).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: AsyncOpenAI | None = None,
        max_retries: int = 3,
        timeout: float = DEFAULT_TIMEOUT,
        backoff_base: float = 0.5,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        provider_name: str = "openai",
        **default_options: Any,
    ) -> None:
        if not model:
            raise ConfigurationError(
                f"{provider_name}: a model name is needed, e.g. OpenAIModel('gpt-4o-mini')"
            )
        self._setup(
            provider_name, model, RetryPolicy(max_retries, backoff_base, max_backoff), _classify
        )
        self.default_options = default_options
        if client is not None:
            self.client = client.with_options(max_retries=0)
        else:
            base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
            api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
            if api_key is None:
                if base_url is None:
                    raise ConfigurationError(
                        f"{provider_name}: no API key for model {model!r}; set OPENAI_API_KEY "
                        "or pass api_key=..."
                    )
                api_key = "not-needed"
            self.client = AsyncOpenAI(
                api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout
            )

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        options = {**self.default_options, **request.options}
        kwargs = split_options(self.client.chat.completions.create, options)
        kwargs["model"] = self.model
        kwargs["messages"] = to_openai_messages(request.messages, self.provider)
        if request.tools:
            kwargs["tools"] = to_openai_tools(request.tools)
        return kwargs

    def _call(self, request: ModelRequest) -> Callable[[], Awaitable[Message]]:
        params = self._params(request)

        async def call() -> Message:
            completion = await self.client.chat.completions.create(**params)
            return from_openai_completion(cast(ChatCompletion, completion))

        return call

    async def _chunks(self, request: ModelRequest) -> AsyncIterator[Message]:
        params = self._params(request)  # errors here come out of the stream, not stream()
        params["stream"] = True
        params.setdefault("stream_options", {"include_usage": True})
        events = cast(
            openai.AsyncStream[ChatCompletionChunk],
            await self.client.chat.completions.create(**params),
        )
        sent = False
        try:
            async for event in events:
                chunk = from_openai_chunk(event)
                if chunk is not None:
                    sent = True
                    yield chunk
        finally:
            await events.close()
        if not sent:
            yield Message.assistant("")

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.close()


def _classify(exc: Exception) -> Failure | None:
    if isinstance(exc, openai.APIStatusError):
        return Failure.http(
            exc.status_code,
            error_detail(exc.body, exc.message),
            retry_after_seconds(exc.response.headers),
        )
    if isinstance(exc, openai.APIConnectionError):  # timeouts included
        cause = exc.__cause__
        return Failure.connection_error(f"{exc.message} {cause}" if cause else exc.message)
    if isinstance(exc, openai.OpenAIError):
        return Failure.other(str(exc))
    if is_transport_error(exc):
        return Failure.connection_error(str(exc) or type(exc).__name__)
    return None


# -- requests ---------------------------------------------------------------------------------


def to_openai_tools(tools: Iterable[ToolSpec]) -> list[Json]:
    """ToolSpecs as Chat Completions ``tools``."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def _data_url(blob: Blob) -> str:
    return f"data:{blob.mime_type};base64,{base64.b64encode(blob.data).decode('ascii')}"


def _attachment_part(blob: Blob, provider: str) -> Json:
    mime = blob.mime_type.lower()
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": _data_url(blob)}}
    if mime == "application/pdf":
        return {
            "type": "file",
            "file": {"file_data": _data_url(blob), "filename": blob.name or "document.pdf"},
        }
    if mime in _AUDIO_FORMATS:
        return {
            "type": "input_audio",
            "input_audio": {
                "data": base64.b64encode(blob.data).decode("ascii"),
                "format": _AUDIO_FORMATS[mime],
            },
        }
    if mime.startswith("text/"):
        return {"type": "text", "text": blob.data.decode("utf-8", errors="replace")}
    raise ModelError(
        f"{provider}: cannot send an attachment of type {blob.mime_type!r} "
        "(supported: images, PDF, WAV/MP3 audio, text)",
        provider=provider,
    )


def to_openai_messages(messages: Iterable[Message], provider: str = "openai") -> list[Json]:
    """Our messages as Chat Completions ``messages``."""
    out: list[Json] = []
    for msg in messages:
        if msg.role == "system":
            out.append({"role": "system", "content": msg.content})
        elif msg.role == "user":
            if msg.attachments:
                parts: list[Json] = [{"type": "text", "text": msg.content}] if msg.content else []
                parts.extend(_attachment_part(b, provider) for b in msg.attachments)
                out.append({"role": "user", "content": parts})
            else:
                out.append({"role": "user", "content": msg.content})
        elif msg.role == "assistant":
            item: Json = {"role": "assistant", "content": msg.content or None}
            if msg.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments or "{}"},
                    }
                    for c in msg.tool_calls
                ]
            elif not msg.content:
                item["content"] = ""
            out.append(item)
        else:
            out.append(
                {"role": "tool", "tool_call_id": msg.tool_call_id or "", "content": msg.content}
            )
    return out


# -- responses --------------------------------------------------------------------------------


def _usage(usage: CompletionUsage | None) -> dict[str, Any]:
    if usage is None:
        return {}
    return usage_metadata(usage.prompt_tokens, usage.completion_tokens)


def from_openai_completion(completion: ChatCompletion) -> Message:
    """A ``ChatCompletion`` as our assistant message."""
    metadata = _usage(completion.usage)
    if not completion.choices:
        return Message("assistant", "", metadata=metadata)
    msg = completion.choices[0].message
    calls: list[ToolCall] = []
    for call in msg.tool_calls or []:
        if call.type == "function":
            calls.append(ToolCall(call.id, call.function.name, call.function.arguments or ""))
        else:
            calls.append(ToolCall(call.id, call.custom.name, call.custom.input))
    content = msg.content or ""
    if not content and not calls and msg.refusal:
        content = msg.refusal
    return Message("assistant", content, calls, metadata=metadata)


def from_openai_chunk(event: ChatCompletionChunk) -> Message | None:
    """A ``ChatCompletionChunk`` as a message chunk (None when it carries nothing)."""
    text = ""
    calls: list[ToolCall] = []
    if event.choices:
        delta = event.choices[0].delta
        text = delta.content or ""
        for frag in delta.tool_calls or []:
            fn = frag.function
            calls.append(
                ToolCall(
                    frag.id or "",
                    (fn.name if fn else None) or "",
                    (fn.arguments if fn else None) or "",
                    frag.index,
                )
            )
    metadata = _usage(event.usage)
    if not text and not calls and not metadata:
        return None
    return Message("assistant", text, calls, metadata=metadata)
