"""FailoverModel: a ChatModel that tries several models in order until one answers.

Each model is tried once, in the order given. When a model fails with an error that
``should_fail_over`` accepts (by default: a rate limit, a server error, a timeout, a connection
error -- see :func:`default_should_fail_over`), the next model gets the same request; any other
error ends the call at once, as it would without failover. The answer says which models were
tried in ``message.metadata["attempts"]``.

A provider adapter runs its own retries (``max_retries``) before its error reaches the failover:
pass ``max_retries=0`` to a primary model that should hand over to the next one at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from relaykit.errors import ConfigurationError, ModelError
from relaykit.messages import Message, MessageStream
from relaykit.models._retry import is_transport_error
from relaykit.models.base import ChatModel, ModelRequest

__all__ = ["FAIL_OVER_STATUSES", "FailoverModel", "FailoverPredicate", "default_should_fail_over"]

FailoverPredicate = Callable[[Exception], bool]
"""Decides whether an error of one model hands the request on to the next model."""

FAIL_OVER_STATUSES: frozenset[int] = frozenset({408, 429})
"""The 4xx HTTP statuses that fail over by default (every 5xx status does too)."""


def default_should_fail_over(exc: Exception) -> bool:
    """True for the errors another model may not have: the provider is limited, down or
    unreachable.

    That is a ``ModelError`` with HTTP status 408, 429 or 5xx, a ``ModelError`` caused by a
    connection error or a timeout, and a connection error or a timeout raised as it is
    (``OSError``, ``TimeoutError``, an httpx transport error). Anything else -- a
    ``ConfigurationError``, a bad request (another 4xx), an error of your own -- would fail
    the same way on the next model, or is a bug to see at once: it does not fail over.

    >>> default_should_fail_over(ModelError("rate limited", provider="openai", status=429))
    True
    >>> default_should_fail_over(ModelError("bad request", provider="openai", status=400))
    False
    >>> default_should_fail_over(TimeoutError("read timed out"))
    True
    >>> default_should_fail_over(ConfigurationError("no API key"))
    False
    """
    if isinstance(exc, ModelError):
        if exc.status is not None:
            return exc.status in FAIL_OVER_STATUSES or 500 <= exc.status <= 599
        # The provider adapters raise a connection failure as ``ModelError(...) from exc``.
        return _caused_by_transport_error(exc)
    if isinstance(exc, ConfigurationError):
        return False
    return is_transport_error(exc)


def _caused_by_transport_error(exc: BaseException) -> bool:
    """True when ``exc``'s chain of causes holds a connection error or a timeout."""
    seen: set[int] = set()
    cause = exc.__cause__
    while cause is not None and id(cause) not in seen:
        if is_transport_error(cause):
            return True
        seen.add(id(cause))
        cause = cause.__cause__
    return False


def _model_name(model: object) -> str:
    """A model's ``name`` when it has one (a non-empty string), else its type's name."""
    name = getattr(model, "name", None)
    return name if isinstance(name, str) and name else type(model).__name__


def _describe(exc: BaseException) -> str:
    """``TypeName: text``, as an attempt records its error."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _aclose(stream: object) -> None:
    """Close an abandoned stream of chunks (its own errors while closing are of no interest)."""
    closer = getattr(stream, "aclose", None)
    if closer is not None:
        with contextlib.suppress(Exception):
            await closer()


class FailoverModel:
    """A ``ChatModel`` that tries each of ``models`` once, in order, until one answers.

    A model's error hands the request on to the next model when ``should_fail_over(error)``
    is true (by default :func:`default_should_fail_over`: rate limits, 5xx, timeouts and
    connection errors); any other error is raised at once. When every model failed, the call
    raises a ``ModelError`` naming every attempt, the last error as its ``__cause__``.

    The answer's ``metadata["attempts"]`` lists the models tried, in order, as
    ``{"model": name, "error": "TypeName: text"}``, the error being ``None`` for the model
    that answered. A stream fails over only before its first chunk (later, the caller has
    already seen output, and the error is raised); its attempts are in the first chunk's
    metadata, hence in the collected message's.

    >>> import asyncio
    >>> from relaykit.models.scripted import ScriptedModel
    >>> primary = ScriptedModel([ModelError("overloaded", provider="demo", status=503)],
    ...                         name="primary")
    >>> backup = ScriptedModel([Message.assistant("Paris.")], name="backup")
    >>> model = FailoverModel([primary, backup])
    >>> model.name
    'failover(primary, backup)'
    >>> reply = asyncio.run(model.generate(ModelRequest([Message.user("Capital of France?")])))
    >>> reply.content
    'Paris.'
    >>> for attempt in reply.metadata["attempts"]:
    ...     print(attempt)
    {'model': 'primary', 'error': 'ModelError: overloaded'}
    {'model': 'backup', 'error': None}

    Args:
        models: the models to try, in order (at least one).
        should_fail_over: ``(error) -> bool``: whether a model's error hands the request on
            to the next model.
        name: the model's name; by default ``failover(<name>, <name>, ...)`` from the models'
            names.

    Raises:
        ConfigurationError: no models, an item that is not a ``ChatModel``, or a
            ``should_fail_over`` that is not callable.
    """

    def __init__(
        self,
        models: Sequence[ChatModel],
        *,
        should_fail_over: FailoverPredicate = default_should_fail_over,
        name: str | None = None,
    ) -> None:
        if isinstance(models, (ChatModel, str, bytes)):
            raise ConfigurationError(
                f"FailoverModel takes a list of models, got {models!r}: "
                "write FailoverModel([primary, fallback])"
            )
        try:
            items = list(models)
        except TypeError:
            raise ConfigurationError(
                f"FailoverModel takes a list of models, got {type(models).__name__}"
            ) from None
        if not items:
            raise ConfigurationError("FailoverModel needs at least one model to try")
        for i, item in enumerate(items):
            if not isinstance(item, ChatModel):
                hint = (
                    f"; build it with relaykit.models.from_string({item!r})"
                    if isinstance(item, str)
                    else ""
                )
                raise ConfigurationError(
                    f"FailoverModel: model {i} ({item!r}) is not a ChatModel: it needs "
                    f"async generate(request) and stream(request){hint}"
                )
        if not callable(should_fail_over):
            raise ConfigurationError(
                f"FailoverModel: should_fail_over must be a function (error) -> bool, got "
                f"{should_fail_over!r}"
            )
        #: The models, in the order they are tried.
        self.models: tuple[ChatModel, ...] = tuple(items)
        #: Whether a model's error hands the request on to the next model.
        self.should_fail_over: FailoverPredicate = should_fail_over
        #: The model's name (``failover(a, b)`` by default).
        self.name: str = (
            name if name else f"failover({', '.join(_model_name(m) for m in self.models)})"
        )

    def __repr__(self) -> str:
        return f"FailoverModel({list(self.models)!r})"

    async def generate(self, request: ModelRequest) -> Message:
        """The first answer of the models, tried in order; ``metadata["attempts"]`` lists them."""
        attempts: list[dict[str, Any]] = []
        for index, model in enumerate(self.models):
            try:
                reply = await model.generate(request)
            except Exception as exc:
                self._failed(index, model, exc, attempts)
                continue
            attempts.append({"model": _model_name(model), "error": None})
            return dataclasses.replace(reply, metadata={**reply.metadata, "attempts": attempts})
        raise AssertionError("unreachable: the last model's error is raised")  # pragma: no cover

    def stream(self, request: ModelRequest) -> MessageStream:
        """The first model's stream that yields a chunk, the models tried in order.

        A model whose stream fails before its first chunk hands the request on; an error after
        the first chunk is raised. The first chunk's ``metadata["attempts"]`` lists the models
        tried (it is in the collected message's metadata too).
        """
        return MessageStream(self._chunks(request))

    async def _chunks(self, request: ModelRequest) -> AsyncIterator[Message]:
        attempts: list[dict[str, Any]] = []
        for index, model in enumerate(self.models):
            stream: MessageStream | None = None
            try:
                stream = model.stream(request)
                chunks = aiter(stream)
                first = await anext(chunks)
            except StopAsyncIteration:
                return  # an empty answer: nothing to fail over from, nothing to mark
            except Exception as exc:
                await _aclose(stream)
                self._failed(index, model, exc, attempts)
                continue
            attempts.append({"model": _model_name(model), "error": None})
            try:
                yield dataclasses.replace(first, metadata={**first.metadata, "attempts": attempts})
                async for chunk in chunks:
                    yield chunk
            finally:
                # A caller that stops reading early ends the model's call too.
                await _aclose(chunks)
                await _aclose(stream)
            return

    def _failed(
        self, index: int, model: ChatModel, exc: Exception, attempts: list[dict[str, Any]]
    ) -> None:
        """Record the failed attempt; raise unless the next model should be tried."""
        attempts.append({"model": _model_name(model), "error": _describe(exc)})
        if not self.should_fail_over(exc):
            if len(attempts) > 1:
                exc.add_note(f"{self.name}: {self._summary(attempts)}; not failed over")
            raise exc
        if index == len(self.models) - 1:
            raise ModelError(
                f"{self.name}: all {len(self.models)} models failed: {self._summary(attempts)}",
                provider="failover",
                status=exc.status if isinstance(exc, ModelError) else None,
            ) from exc

    @staticmethod
    def _summary(attempts: list[dict[str, Any]]) -> str:
        return "; ".join(f"{a['model']} -> {a['error']}" for a in attempts)
