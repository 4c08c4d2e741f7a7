"""GeminiModel: the Gemini API through the official ``google-genai`` SDK.

Needs ``pip install 'relaykit[gemini]'``.

Gemini may return function calls without ids: the adapter then gives them ids ``call_<n>``
(``n`` counts the calls in the conversation, so ids stay unique and are the same on every read)
and, since Gemini pairs results with calls by name and order, never sends such ids back. Tool
results are sent as ``function_response`` parts named after the tool (``Message.tool_name``, or
the name of the call they answer). Gemini's thought signatures, which it needs back with the
function calls of thinking models, are kept in ``Message.metadata["gemini_thought_signatures"]``
(call id -> base64 text).

A stream abandoned before its end is closed, but google-genai keeps the HTTP response in a
reference cycle and offers no handle to close it, so its connection is released only when
Python's cyclic garbage collector frees it (googleapis/python-genai#2425).
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from relaykit.errors import ConfigurationError
from relaykit.messages import Message, ToolCall
from relaykit.models._retry import (
    DEFAULT_MAX_BACKOFF,
    Failure,
    ProviderModel,
    RetryPolicy,
    arguments_object,
    is_transport_error,
    retry_after_seconds,
)
from relaykit.models.base import ModelRequest, ToolSpec, usage_metadata

__all__ = ["GeminiModel"]

DEFAULT_TIMEOUT = 600.0
"""Seconds; the longest a request may take."""

SIGNATURES_KEY = "gemini_thought_signatures"

_SYNTHETIC_ID = re.compile(r"call_\d+")
_OPTION_ALIASES = {"max_tokens": "max_output_tokens", "stop": "stop_sequences"}
_NO_SDK_RETRIES = types.HttpRetryOptions(attempts=1)
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)s")  # protobuf JSON Duration, e.g. "17s", "1.5s"


class GeminiModel(ProviderModel):
    """A ``ChatModel`` over the Gemini API (``generate_content`` / ``generate_content_stream``).

    ``api_key`` defaults to ``GEMINI_API_KEY`` then ``GOOGLE_API_KEY``; ``base_url`` overrides
    the endpoint. ``client`` is an existing ``genai.Client``. Failures are retried by relaykit
    (``max_retries`` retries, exponential backoff from ``backoff_base`` seconds, at least the
    ``retryDelay`` of the error's ``RetryInfo``, at most ``max_backoff`` seconds; a server asking
    for a longer wait than ``max_backoff`` fails at once, its wait named; the SDK's own retries
    are off) and reported as ``ModelError``. ``default_options`` are
    ``GenerateContentConfig`` fields (``temperature``, ``max_output_tokens``; ``max_tokens`` is
    accepted as an alias); ``ModelRequest.options`` override them; other keys are sent in the
    request body as they are.

    >>> m = GeminiModel("gemini-2.5-flash", api_key="example-key")
    >>> m.name
    'gemini:gemini-2.5-flash'

    Args:
        model: the model name (``gemini-2.5-flash``...).
        api_key: the API key; ``GEMINI_API_KEY``, then ``GOOGLE_API_KEY`` by default.
        base_url: the endpoint, to override Google's.
        client: a ``genai.Client`` to use instead of creating one (then ``api_key``,
            ``base_url`` and ``timeout`` are not used).
        max_retries: retries after the first attempt.
        timeout: seconds; the longest a request may take.
        backoff_base: seconds before the first retry, doubled for each next one.
        max_backoff: the longest wait before a retry, in seconds.
        **default_options: ``GenerateContentConfig`` fields sent with every request
            (provider-specific, hence ``Any``).
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: genai.Client | None = None,
        max_retries: int = 3,
        timeout: float = DEFAULT_TIMEOUT,
        backoff_base: float = 0.5,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        **default_options: Any,
    ) -> None:
        if not model:
            raise ConfigurationError(
                "gemini: a model name is needed, e.g. GeminiModel('gemini-2.5-flash')"
            )
        self._setup("gemini", model, RetryPolicy(max_retries, backoff_base, max_backoff), _classify)
        self.default_options = default_options
        if client is None:
            api_key = gemini_api_key(api_key, f"model {model!r}")
            http_options = types.HttpOptions(
                base_url=base_url, timeout=int(timeout * 1000), retry_options=_NO_SDK_RETRIES
            )
            client = genai.Client(vertexai=False, api_key=api_key, http_options=http_options)
        self.client = client

    def _config(self, request: ModelRequest, system: str | None) -> types.GenerateContentConfig:
        fields: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in {**self.default_options, **request.options}.items():
            key = _OPTION_ALIASES.get(key, key)
            (fields if key in types.GenerateContentConfig.model_fields else extra)[key] = value
        # Ours is the only retry layer, also with a client passed in.
        http_options = types.HttpOptions(retry_options=_NO_SDK_RETRIES, extra_body=extra or None)
        fields.setdefault(
            "automatic_function_calling", types.AutomaticFunctionCallingConfig(disable=True)
        )
        if system is not None:
            fields["system_instruction"] = system
        if request.tools:
            fields["tools"] = to_gemini_tools(request.tools)
        return types.GenerateContentConfig(http_options=http_options, **fields)

    def _prepare(
        self, request: ModelRequest
    ) -> tuple[list[types.Content], types.GenerateContentConfig, int]:
        system, contents = to_gemini_contents(request.messages)
        prior_calls = sum(len(m.tool_calls) for m in request.messages)
        return contents, self._config(request, system), prior_calls

    def _call(self, request: ModelRequest) -> Callable[[], Awaitable[Message]]:
        contents, config, prior_calls = self._prepare(request)

        async def call() -> Message:
            response = await self.client.aio.models.generate_content(
                model=self.model, contents=contents, config=config
            )
            reader = _ResponseReader(prior_calls)
            message = reader.read(response)
            message.metadata.update(reader.metadata())
            for tool_call in message.tool_calls:
                tool_call.index = None  # indexes only order streamed fragments
            return message

        return call

    async def _chunks(self, request: ModelRequest) -> AsyncIterator[Message]:
        # Errors preparing the request come out of the stream, not out of stream().
        contents, config, prior_calls = self._prepare(request)
        responses = await self.client.aio.models.generate_content_stream(
            model=self.model, contents=contents, config=config
        )
        reader = _ResponseReader(prior_calls)
        sent = False
        try:
            async for response in responses:
                chunk = reader.read(response)
                if chunk.content or chunk.tool_calls:
                    sent = True
                    yield chunk
        finally:
            closer = getattr(responses, "aclose", None)
            if closer is not None:
                await closer()
        metadata = reader.metadata()
        if metadata or not sent:
            yield Message("assistant", "", metadata=metadata)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.aio.aclose()


def _classify(exc: Exception) -> Failure | None:
    if isinstance(exc, genai_errors.APIError):
        detail = exc.message or str(exc)
        if isinstance(exc.code, int) and exc.code >= 400:
            # The SDK keeps the whole error body in ``details``; Gemini puts its hint there, not
            # in a header, but a proxy in front of it may send ``Retry-After``.
            retry_after = retry_info_seconds(exc.details)
            if retry_after is None:
                retry_after = retry_after_seconds(getattr(exc.response, "headers", None))
            return Failure.http(exc.code, detail, retry_after)
        return Failure.other(detail)
    if is_transport_error(exc):
        return Failure.connection_error(str(exc) or type(exc).__name__)
    return None


def retry_info_seconds(body: object) -> float | None:
    """The ``retryDelay`` of the ``google.rpc.RetryInfo`` in an error body, in seconds.

    A 429 ``RESOURCE_EXHAUSTED`` (or 503) from Gemini says how long to wait this way. None when
    the body has no RetryInfo or its delay is not a Duration string.

    >>> retry_info_seconds({"error": {"code": 429, "details": [
    ...     {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "17s"}]}})
    17.0
    """
    error = body.get("error", body) if isinstance(body, Mapping) else None
    details = error.get("details") if isinstance(error, Mapping) else None
    for item in details if isinstance(details, list) else []:
        if isinstance(item, Mapping) and item.get("@type") == _RETRY_INFO:
            delay = item.get("retryDelay")
            match = _DURATION.fullmatch(delay.strip()) if isinstance(delay, str) else None
            return float(match[1]) if match else None
    return None


# -- requests ---------------------------------------------------------------------------------


def gemini_api_key(api_key: str | None, subject: str) -> str:
    """``api_key``, else ``GEMINI_API_KEY``, else ``GOOGLE_API_KEY``; a ``ConfigurationError``
    naming ``subject`` (``"model 'x'"``) when there is none."""
    api_key = api_key or os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
    if not api_key:
        raise ConfigurationError(
            f"gemini: no API key for {subject}; set "
            "GEMINI_API_KEY (or GOOGLE_API_KEY) or pass api_key=..."
        )
    return api_key


def to_gemini_tools(tools: Iterable[ToolSpec]) -> list[types.Tool]:
    """ToolSpecs as one Gemini ``Tool`` with function declarations (JSON schema parameters)."""
    declarations = [
        types.FunctionDeclaration(
            name=t.name, description=t.description or None, parameters_json_schema=t.parameters
        )
        for t in tools
    ]
    return [types.Tool(function_declarations=declarations)]


def _real_id(call_id: str | None) -> str | None:
    """The id to send back: None for ids this adapter made up."""
    if not call_id or _SYNTHETIC_ID.fullmatch(call_id):
        return None
    return call_id


def _signature(metadata: Mapping[str, Any], call_id: str) -> bytes | None:
    signatures = metadata.get(SIGNATURES_KEY)
    if isinstance(signatures, Mapping) and isinstance(signatures.get(call_id), str):
        return base64.b64decode(signatures[call_id])
    return None


def to_gemini_contents(messages: Iterable[Message]) -> tuple[str | None, list[types.Content]]:
    """Our messages as ``(system_instruction, contents)``.

    Roles become user/model; consecutive tool results share one user content of
    ``function_response`` parts.
    """
    system: list[str] = []
    contents: list[types.Content] = []
    call_names: dict[str, str] = {}
    for msg in messages:
        if msg.role == "system":
            system.append(msg.content)
        elif msg.role == "user":
            parts = [types.Part(text=msg.content)] if msg.content else []
            parts.extend(
                types.Part(inline_data=types.Blob(mime_type=b.mime_type, data=b.data))
                for b in msg.attachments
            )
            if parts:
                contents.append(types.Content(role="user", parts=parts))
        elif msg.role == "assistant":
            parts = [types.Part(text=msg.content)] if msg.content else []
            for call in msg.tool_calls:
                call_names[call.id] = call.name
                parts.append(
                    types.Part(
                        function_call=types.FunctionCall(
                            id=_real_id(call.id),
                            name=call.name,
                            args=arguments_object(call.arguments),
                        ),
                        thought_signature=_signature(msg.metadata, call.id),
                    )
                )
            if parts:
                contents.append(types.Content(role="model", parts=parts))
        else:
            name = msg.tool_name or call_names.get(msg.tool_call_id or "", "")
            part = types.Part(
                function_response=types.FunctionResponse(
                    id=_real_id(msg.tool_call_id), name=name, response={"output": msg.content}
                )
            )
            last = contents[-1] if contents else None
            if (
                last is not None
                and last.role == "user"
                and last.parts
                and all(p.function_response is not None for p in last.parts)
            ):
                last.parts.append(part)
            else:
                contents.append(types.Content(role="user", parts=[part]))
    return ("\n\n".join(system) if system else None), contents


# -- responses --------------------------------------------------------------------------------


class _ResponseReader:
    """Turns (streamed) ``GenerateContentResponse`` objects into messages; ids stay unique."""

    def __init__(self, prior_calls: int) -> None:
        self.next_call = prior_calls
        self.index = 0
        self.signatures: dict[str, str] = {}
        self.usage: types.GenerateContentResponseUsageMetadata | None = None

    def read(self, response: types.GenerateContentResponse) -> Message:
        if response.usage_metadata is not None:
            self.usage = response.usage_metadata
        texts: list[str] = []
        calls: list[ToolCall] = []
        candidate = response.candidates[0] if response.candidates else None
        parts = candidate.content.parts if candidate and candidate.content else None
        for part in parts or []:
            if part.function_call is not None:
                calls.append(self._call(part))
            elif part.text and not part.thought:
                texts.append(part.text)
        return Message("assistant", "".join(texts), calls)

    def _call(self, part: types.Part) -> ToolCall:
        fc = part.function_call
        assert fc is not None
        call_id = fc.id or f"call_{self.next_call}"
        self.next_call += 1
        if part.thought_signature:
            self.signatures[call_id] = base64.b64encode(part.thought_signature).decode("ascii")
        call = ToolCall(call_id, fc.name or "", json.dumps(fc.args or {}), self.index)
        self.index += 1
        return call

    def metadata(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {}
        if self.usage is not None:
            output = self.usage.candidates_token_count
            if self.usage.thoughts_token_count:
                output = (output or 0) + self.usage.thoughts_token_count
            metadata.update(usage_metadata(self.usage.prompt_token_count, output))
        if self.signatures:
            metadata[SIGNATURES_KEY] = dict(self.signatures)
        return metadata
