"""Retry with exponential backoff, and request helpers shared by the provider adapters.

The adapters switch their SDK's own retries off (``max_retries=0``) so that this module is the
only retry layer: it retries HTTP 429, 500, 502, 503, 504 and connection errors, waits
``backoff_base * 2**n`` seconds (with a little jitter, at least the server's retry hint when it
sends one, at most ``max_backoff``) and, after the last attempt or at once for any other status,
raises :class:`relaykit.errors.ModelError` naming the provider, the model and the HTTP status.

The server's hint is ``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date, RFC 9110) or,
from Gemini, a ``google.rpc.RetryInfo`` error detail. A hint longer than ``max_backoff`` is not
cut short: the call fails at once with a ``ModelError`` that says how long the server asked to
wait. Retrying sooner than asked would almost surely fail again (a rate-limit window does not end
early) and spend the remaining attempts; the caller, told the wait, can raise ``max_backoff``,
switch model or try later. The OpenAI SDK, likewise, does not retry when ``Retry-After`` is
longer than its limit (two minutes).

A stream is retried only when it fails before its first chunk: once a chunk has been handed on,
retrying would repeat it.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import inspect
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from relaykit.errors import ModelError
from relaykit.messages import Message, MessageStream
from relaykit.models.base import ModelRequest

__all__ = [
    "DEFAULT_MAX_BACKOFF",
    "RETRYABLE_STATUSES",
    "Classifier",
    "Failure",
    "ProviderModel",
    "Retrier",
    "RetryPolicy",
    "error_detail",
    "is_transport_error",
    "retry_after_seconds",
    "split_options",
]

T = TypeVar("T")

RETRYABLE_STATUSES: frozenset[int] = frozenset({429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt."""

DEFAULT_MAX_BACKOFF = 60.0
"""Seconds: the longest wait before a retry, unless a model is given another ``max_backoff``."""

# The retry loop's only way to wait: tests replace it to record the delays instead of sleeping.
_sleep = asyncio.sleep


@dataclass(frozen=True, slots=True)
class Failure:
    """A provider call failure as the retry loop sees it.

    ``status`` is the HTTP status, or None for a connection error (``connection=True``) or another
    SDK error. ``retry_after`` is the server's retry hint in seconds, if any (``Retry-After``,
    ``retry-after-ms``, Gemini's ``RetryInfo``).

    >>> Failure.http(503, "overloaded").retryable, Failure.http(400, "bad request").retryable
    (True, False)
    """

    #: The HTTP status, or None for a connection error or another SDK error.
    status: int | None
    #: The provider's error text.
    detail: str
    #: Whether another attempt may succeed.
    retryable: bool
    #: The server's retry hint in seconds, if it sent one.
    retry_after: float | None = None
    #: True for a connection error or timeout.
    connection: bool = False

    @classmethod
    def http(cls, status: int, detail: str, retry_after: float | None = None) -> Failure:
        """A failure with an HTTP status: retryable when the status is in RETRYABLE_STATUSES."""
        return cls(status, detail, status in RETRYABLE_STATUSES, retry_after)

    @classmethod
    def connection_error(cls, detail: str) -> Failure:
        """A connection error or timeout: always retryable."""
        return cls(None, detail, True, None, True)

    @classmethod
    def other(cls, detail: str) -> Failure:
        """Any other SDK error (bad response data...): never retried."""
        return cls(None, detail, False)


Classifier = Callable[[Exception], Failure | None]
"""Maps an exception to a Failure, or None for an exception that is not the provider's."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry.

    ``max_retries`` retries follow the first attempt; retry ``n`` (0-based) waits
    ``backoff_base * 2**n`` seconds plus up to 10 % jitter, or the server's hint if that is
    longer, and never more than ``max_backoff``. A server hint above ``max_backoff`` is not
    retried at all (see :meth:`Retrier.call`).

    >>> policy = RetryPolicy(max_retries=5, backoff_base=1.0, max_backoff=4.0)
    >>> policy.delay(10)
    4.0
    >>> policy.exceeds(30.0)
    True
    """

    #: Retries after the first attempt (>= 0).
    max_retries: int = 3
    #: Seconds before the first retry; doubled for each next one (>= 0).
    backoff_base: float = 0.5
    #: The longest wait before a retry, in seconds (>= 0).
    max_backoff: float = DEFAULT_MAX_BACKOFF

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if not self.backoff_base >= 0 or not self.max_backoff >= 0:  # NaN fails too
            raise ValueError(
                f"backoff_base and max_backoff must be >= 0, got "
                f"{self.backoff_base} and {self.max_backoff}"
            )

    def exceeds(self, retry_after: float | None) -> bool:
        """True when the server's hint asks for a longer wait than ``max_backoff``."""
        return retry_after is not None and retry_after > self.max_backoff

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based): at most ``max_backoff``."""
        # The exponent is bounded so that a long retry budget cannot overflow the float.
        wait = self.backoff_base * (2.0 ** min(retry, 64)) * (1.0 + 0.1 * random.random())
        if retry_after is not None and retry_after > 0:
            wait = max(wait, retry_after)
        return min(wait, self.max_backoff)


class Retrier:
    """Runs provider calls with retries and turns their failures into ``ModelError``.

    >>> import asyncio
    >>> def classify(exc: Exception) -> Failure | None:
    ...     return Failure.http(400, str(exc))
    >>> retrier = Retrier("example", "m1", RetryPolicy(max_retries=0), classify)
    >>> async def bad_request() -> str:
    ...     raise ValueError("bad request")
    >>> asyncio.run(retrier.call(bad_request))
    Traceback (most recent call last):
    ...
    relaykit.errors.ModelError: example: HTTP 400 from model 'm1': bad request
    """

    def __init__(
        self, provider: str, model: str, policy: RetryPolicy, classify: Classifier
    ) -> None:
        self.provider = provider
        self.model = model
        self.policy = policy
        self.classify = classify

    def error(self, failure: Failure, attempts: int, note: str = "") -> ModelError:
        """The ModelError reporting ``failure`` after ``attempts`` attempts (``note`` appended)."""
        where = f"model {self.model!r}"
        if failure.status is not None:
            head = f"{self.provider}: HTTP {failure.status} from {where}"
        elif failure.connection:
            head = f"{self.provider}: connection error calling {where}"
        else:
            head = f"{self.provider}: error from {where}"
        if attempts > 1:
            head += f" (gave up after {attempts} attempts)"
        return ModelError(
            f"{head}: {failure.detail}{note}", provider=self.provider, status=failure.status
        )

    async def _backoff_or_raise(self, exc: Exception, retry: int) -> None:
        """Sleep before retry number ``retry``, or raise the final error for ``exc``."""
        failure = self.classify(exc)
        if failure is None:
            raise exc
        if not failure.retryable or retry >= self.policy.max_retries:
            raise self.error(failure, retry + 1) from exc
        if self.policy.exceeds(failure.retry_after):
            # Retrying before the server's time would fail again: report the wait instead.
            note = (
                f" (the server asked to wait {failure.retry_after:g} s before retrying, more "
                f"than max_backoff={self.policy.max_backoff:g} s: not retried; pass a larger "
                "max_backoff to wait that long)"
            )
            raise self.error(failure, retry + 1, note) from exc
        await _sleep(self.policy.delay(retry, failure.retry_after))

    async def call(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Await ``fn()``, retrying retryable failures.

        Before each retry it waits :meth:`RetryPolicy.delay`. A failure whose server hint is
        longer than ``max_backoff`` raises ``ModelError`` at once, naming the wait asked for.
        """
        retry = 0
        while True:
            try:
                return await fn()
            except Exception as exc:
                await self._backoff_or_raise(exc, retry)
            retry += 1

    async def stream(
        self, open_chunks: Callable[[], AsyncIterator[Message]]
    ) -> AsyncIterator[Message]:
        """Yield the chunks of ``open_chunks()``, retrying only before the first chunk."""
        retry = 0
        while True:
            chunks = open_chunks()
            try:
                first = await anext(chunks)
            except StopAsyncIteration:
                return
            except Exception as exc:
                await _aclose(chunks)
                await self._backoff_or_raise(exc, retry)
                retry += 1
                continue
            break
        try:
            yield first
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    return
                except Exception as exc:
                    failure = self.classify(exc)
                    if failure is None:
                        raise
                    raise self.error(failure, retry + 1) from exc
                yield chunk
        finally:
            await _aclose(chunks)


async def _aclose(iterator: AsyncIterator[Message]) -> None:
    closer = getattr(iterator, "aclose", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            await closer()


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The server's wait, in seconds, from ``retry-after-ms`` or ``Retry-After``; None if absent.

    ``Retry-After`` is seconds or an HTTP date (RFC 9110); a date in the past means 0. A number
    too large for a float counts as an endless wait (``inf``), which no ``max_backoff`` allows.

    >>> retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})
    0.0
    >>> retry_after_seconds({"retry-after-ms": "1500", "retry-after": "2"})
    1.5
    """
    if headers is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        if seconds >= 0:  # NaN and negative values are no hint
            return seconds
    return _http_date_seconds(headers.get("retry-after"))


def _http_date_seconds(value: str | None) -> float | None:
    """Seconds from now until the HTTP date ``value`` (0 for a past date); None if not a date."""
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with no claim about the sender's zone
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


_TRANSPORT_ERROR_NAMES = frozenset({"TransportError", "TimeoutException", "NetworkError"})
_HTTP_LIBRARIES = frozenset({"httpx", "httpx2", "httpcore", "httpcore2"})


def is_transport_error(exc: BaseException) -> bool:
    """True for connection-level failures: OSError or an httpx/httpx2/httpcore transport error.

    >>> is_transport_error(ConnectionResetError()), is_transport_error(ValueError())
    (True, False)
    """
    if isinstance(exc, OSError):  # TimeoutError and ConnectionError included
        return True
    return any(
        cls.__name__ in _TRANSPORT_ERROR_NAMES and cls.__module__.split(".")[0] in _HTTP_LIBRARIES
        for cls in type(exc).__mro__
    )


def error_detail(body: object, fallback: str) -> str:
    """The human-readable error text of an error response body (``{"error": {"message"}}``).

    >>> error_detail({"error": {"message": "model not found"}}, "HTTP 404")
    'model not found'
    """
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            message = inner.get("message")
            if isinstance(message, str) and message:
                return message
        elif isinstance(inner, str) and inner:
            return inner
    elif isinstance(body, str) and body.strip():
        return body.strip()
    return fallback


def split_options(fn: Callable[..., Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for the SDK call ``fn``: the options it names, the rest in
    ``extra_body``.

    Lets callers pass provider options the installed SDK version does not name (``top_k`` for a
    vLLM server, say): they are sent in the request body as they are.

    >>> def create(*, model: str, temperature: float = 1.0, extra_body: object = None) -> None:
    ...     pass
    >>> split_options(create, {"temperature": 0.2, "top_k": 5})
    {'temperature': 0.2, 'extra_body': {'top_k': 5}}
    """
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return dict(options)
    known: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in options.items():
        (known if key in params else extra)[key] = value
    if extra:
        known["extra_body"] = {**extra, **known.get("extra_body", {})}
    return known


class ProviderModel:
    """What the provider adapters share: their identity, and ``generate``/``stream`` run
    through the retrier. A subclass says how to make one call (``_call``) and how to read one
    stream (``_chunks``).

    >>> from relaykit.models.openai import OpenAIModel
    >>> OpenAIModel("llama3.2", base_url="http://localhost:11434/v1").name
    'openai:llama3.2'
    """

    model: str
    provider: str
    _retrier: Retrier

    def _setup(self, provider: str, model: str, policy: RetryPolicy, classify: Classifier) -> None:
        self.model = model
        self.provider = provider
        self._retrier = Retrier(provider, model, policy, classify)

    @property
    def name(self) -> str:
        """``provider:model``."""
        return f"{self.provider}:{self.model}"

    def __repr__(self) -> str:
        base_url = getattr(getattr(self, "client", None), "base_url", None)
        where = f", base_url={str(base_url)!r}" if base_url is not None else ""
        return f"{type(self).__name__}({self.model!r}{where})"

    def _call(self, request: ModelRequest) -> Callable[[], Awaitable[Message]]:
        """Prepare ``request`` once; return the call that the retrier may repeat."""
        raise NotImplementedError

    def _chunks(self, request: ModelRequest) -> AsyncIterator[Message]:
        """Open one streamed call (errors preparing it come out of the stream)."""
        raise NotImplementedError

    async def generate(self, request: ModelRequest) -> Message:
        """Send the request and return the assistant message (usage in metadata)."""
        return await self._retrier.call(self._call(request))

    def stream(self, request: ModelRequest) -> MessageStream:
        """Stream the assistant message: text deltas, tool-call fragments, then usage."""
        return MessageStream(self._retrier.stream(lambda: self._chunks(request)))


def arguments_object(arguments: str) -> dict[str, Any]:
    """Tool-call arguments (JSON text) as the object providers want: ``{}`` when empty,
    ``{"_raw_arguments": text}`` when not JSON, ``{"_value": v}`` when not an object."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_value": value}
