"""Cancels racing other things: a cancellation of the task from outside, the run's own
interrupt being saved, a retry's wait, an agent tool's last model reply."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit as rk
from relaykit import AgentEvent, Message
from relaykit.agents import _retry
from relaykit.messages import MessageStream
from relaykit.models.base import ModelRequest
from tests.cancel.support import Counter, Gate, GatedModel, asks, call

# A bound on waits that only a bug could make endless (never reached when the code is right).
HANG = 30


def _runner(agent: rk.Agent, **options: Any) -> rk.Runner:
    return rk.Runner(agent, checkpoint_store=rk.InMemoryCheckpointStore(), **options)


async def test_a_task_cancelled_from_outside_in_the_same_tick_as_a_cancel_stays_cancelled() -> None:
    # The consumer's task is cancelled from outside (a timeout around the loop, a TaskGroup
    # shutting down) and, before it runs again, the run is cancelled too: the cut must not
    # swallow the outside cancellation (D9: it propagates).
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel([asks(call("c1", "slow", "y")), Message.assistant("ok")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[slow.tool]))
    handle = runner.query("go")
    events: list[AgentEvent] = []

    async def consume() -> str:
        async for ev in handle:
            events.append(ev)
        return "the loop ended"

    consumer = asyncio.ensure_future(consume())
    assert slow.gate is not None
    await slow.gate.entered.wait()
    consumer.cancel()
    outcome = await handle.cancel()  # in the same tick: before the consumer runs again

    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert slow.cut == ["y"]
    # The run was cancelled from outside first: it did not pause, nothing was saved.
    assert outcome.already_ended and outcome.checkpoint_id is None
    assert not any(ev.action is not None and ev.action.interrupted for ev in events)


async def test_a_cancel_while_the_runs_own_interrupt_is_saved_says_the_run_had_ended() -> None:
    class SlowStore(rk.InMemoryCheckpointStore):
        def __init__(self) -> None:
            super().__init__()
            self.gate = Gate()

        async def set(self, checkpoint_id: str, data: bytes) -> None:
            await self.gate.wait()
            await super().set(checkpoint_id, data)

    class Approval(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
            yield rk.interrupt(ctx, "approve?")

    store = SlowStore()
    handle = rk.Runner(Approval("approver"), checkpoint_store=store).query("pay")
    first = asyncio.ensure_future(anext(handle))
    await store.gate.entered.wait()  # the run's own interrupt reached the Runner
    cancelling = asyncio.ensure_future(handle.cancel())
    await asyncio.sleep(0)
    store.gate.opened.set()
    ev = await first
    outcome = await cancelling

    info = ev.action.interrupted if ev.action is not None else None
    assert info is not None and info.data == "approve?"  # the run's own pause, saved as it was
    assert outcome.already_ended and outcome.interrupt is None and outcome.checkpoint_id is None


class _FailingStream(GatedModel):
    """Streams one chunk, then fails (a retry follows); the next calls answer normally."""

    def stream(self, request: ModelRequest) -> MessageStream:
        self.calls += 1
        if self.calls == 1:
            return MessageStream(self._broken())
        return super().stream(request)

    async def _broken(self) -> AsyncIterator[Message]:
        yield Message.assistant("par")
        raise ConnectionError("reset")


async def test_an_immediate_cancel_cuts_a_streamed_retrys_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waiting = Gate()
    cut: list[float] = []

    async def sleep(delay: float) -> None:
        try:
            await waiting.wait()  # a long backoff
        except asyncio.CancelledError:
            cut.append(delay)
            raise

    monkeypatch.setattr(_retry, "_sleep", sleep)
    model = _FailingStream([Message.assistant("whole answer")])
    retry = rk.ModelRetry(max_retries=3, backoff=lambda attempt: 60.0)
    runner = _runner(rk.ChatModelAgent("helper", model=model, retry=retry), streaming=True)
    handle = runner.query("go")
    running = asyncio.ensure_future(handle.result())
    await waiting.entered.wait()  # the first stream failed: the retry waits

    outcome = await asyncio.wait_for(handle.cancel(), HANG)
    result = await running

    assert cut == [60.0] and model.calls == 1  # the wait was cut, no second attempt
    assert result.interrupt is not None and result.interrupt == outcome.interrupt
    streams = [ev for ev in result.events if ev.output is not None and ev.output.stream]
    assert len(streams) == 1  # only the failed attempt's stream was delivered
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert done.output is not None and done.output.content == "whole answer"
