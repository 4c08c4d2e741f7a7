"""A ``ChatModelAgent``'s model retries (``ModelRetry``, docs/retries-and-options.md).

* Not streamed: a failed ``generate`` is retried invisibly (``RetryingModel``); the plugins'
  model hooks run once around all the attempts.
* Streamed: the caller already holds the stream when it fails. When a retry follows, the
  stream ends with ``WillRetryError`` (so no history uses it, FA-17) and the retried reply is
  a new event (``stream_with_retry``).
* Refused by ``should_retry``: the failure itself ends the agent. Spent: a ``ModelError``
  ``model call failed after <n> attempts: ...``, the last failure as its ``__cause__``.

>>> import asyncio
>>> from relaykit.models.scripted import ScriptedModel
>>> model = ScriptedModel([ConnectionError("reset"), Message.assistant("hi")])
>>> retrying = RetryingModel(model, ModelRetry(backoff=lambda attempt: 0.0), "helper")
>>> asyncio.run(retrying.generate(ModelRequest([]))).content
'hi'
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from relaykit._cancel import CancelSignal
from relaykit.agents._tool_calls import ReplyStream
from relaykit.errors import ModelError, WillRetryError
from relaykit.events import AgentEvent, AgentOutput
from relaykit.messages import Message, MessageStream
from relaykit.models.base import ChatModel, ModelRequest
from relaykit.options import ModelRetry

__all__ = ["RetryingModel", "exhausted", "stream_with_retry"]

# The only way the retries wait: tests replace it to record the delays instead of sleeping.
_sleep = asyncio.sleep


def exhausted(agent_name: str, attempts: int, exc: BaseException) -> ModelError:
    """The error of a model call whose retries are spent (raise it ``from exc``).

    >>> str(exhausted("helper", 4, TimeoutError("read timed out")))
    "agent 'helper': model call failed after 4 attempts: TimeoutError: read timed out"
    """
    what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    plural = "s" if attempts != 1 else ""
    return ModelError(
        f"agent {agent_name!r}: model call failed after {attempts} attempt{plural}: {what}",
        provider=getattr(exc, "provider", ""),
        status=getattr(exc, "status", None),
    )


async def _wait(retry: ModelRetry, attempt: int) -> None:
    delay = retry.backoff(attempt)
    if delay > 0:
        await _sleep(delay)


class RetryingModel:
    """``model`` with ``generate`` retried as ``retry`` says (``stream`` is passed through:
    the agent retries streams itself, see ``stream_with_retry``)."""

    __slots__ = ("agent_name", "model", "retry")

    def __init__(self, model: ChatModel, retry: ModelRetry, agent_name: str) -> None:
        self.model = model
        self.retry = retry
        self.agent_name = agent_name

    async def generate(self, request: ModelRequest) -> Message:
        """The model's reply, calling it again after a failure ``retry`` accepts."""
        retry = self.retry
        attempt = 1
        while True:
            try:
                return await self.model.generate(request)
            except Exception as exc:
                if not retry.should_retry(exc):
                    raise
                if attempt > retry.max_retries:
                    raise exhausted(self.agent_name, attempt, exc) from exc
                await _wait(retry, attempt)
                attempt += 1

    def stream(self, request: ModelRequest) -> MessageStream:
        """The model's stream, as it is (not retried here)."""
        return self.model.stream(request)


class _Attempt:
    """One streamed attempt: the model's chunks, its failure turned into ``WillRetryError``
    when a retry follows."""

    __slots__ = ("exhausted", "number")

    def __init__(self, number: int) -> None:
        self.number = number
        self.exhausted = False

    async def chunks(
        self, model: ChatModel, request: ModelRequest, retry: ModelRetry
    ) -> AsyncIterator[Message]:
        stream: MessageStream | None = None
        try:
            stream = model.stream(request)  # here: a failure to start is retried too
            async for chunk in stream:
                yield chunk
        except Exception as exc:
            if not retry.should_retry(exc):
                raise
            if self.number > retry.max_retries:
                self.exhausted = True
                raise
            raise WillRetryError(str(exc) or type(exc).__name__, self.number) from exc
        finally:
            if stream is not None:
                await stream.aclose()


async def stream_with_retry(
    model: ChatModel,
    request: ModelRequest,
    retry: ModelRetry,
    agent_name: str,
    out: list[Message],
    cancel: CancelSignal | None = None,
) -> AsyncIterator[AgentEvent]:
    """Yield one streamed event per attempt; append the accepted reply (with unique tool-call
    ids, D24) to ``out``. An immediate cancel of the run (``cancel``) cuts the attempt's stream
    (``StreamCancelledError``, not retried) or the wait before the next attempt (``CallCut``).

    Raises:
        CallCut: an immediate cancel cut the wait between two attempts.
        ModelError: the retries are spent (the last stream ended with the failure itself).
        Exception: a failure ``should_retry`` refused (the stream ended with it too).
    """
    attempt = _Attempt(1)
    while True:
        stream = ReplyStream(MessageStream(attempt.chunks(model, request, retry)), cancel)
        try:
            yield AgentEvent("", (), AgentOutput(None, stream, "assistant"))
            reply = await stream.collect()
        except WillRetryError:
            if cancel is None:
                await _wait(retry, attempt.number)
            else:
                # An immediate cancel cuts the wait (CallCut), or comes before the next
                # attempt starts: no new stream is delivered only to be cut.
                with cancel.cut_point():
                    await _wait(retry, attempt.number)
            attempt = _Attempt(attempt.number + 1)
            continue
        except Exception as exc:
            if attempt.exhausted:
                raise exhausted(agent_name, attempt.number, exc) from exc
            raise
        finally:
            if not stream.done:  # the caller stopped early: close the model call
                await stream.aclose()
        out.append(reply)
        return
