"""Cancels racing other things: a cancellation of the task from outside, the run's own
interrupt being saved, a retry's wait, an agent tool's last model reply."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import relaykit as rk
from relaykit import AgentEvent, Message
from tests.cancel.support import Counter, Gate, asks, call


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
