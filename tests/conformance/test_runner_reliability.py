"""The Runner under hostile conditions (D21, D23, D24): exclusive resumes, consumed
checkpoints, generated ids, bounded runs, agents ending with BaseExceptions.

Every test asserts what happened (executions, stored checkpoints, events); none is timed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit as rk
from relaykit import AgentEvent, Message, ToolCall, errors
from relaykit.checkpoints.base import InMemoryCheckpointStore

from .helpers import ScriptedAgent, names

GUARD = 10.0  # seconds: a hang guard only, so that a regression fails instead of hanging CI


class Payments:
    """A refund tool that pays once per approved execution and can hold mid-payment."""

    def __init__(self) -> None:
        self.paid: list[str] = []
        self.entered = asyncio.Event()
        self.proceed = asyncio.Event()
        self.proceed.set()

    def tool(self) -> rk.FunctionTool:
        payments = self

        @rk.tool
        async def refund(ctx: rk.ToolContext, order_id: str) -> str:
            """Refund an order (a human approves)."""
            if not ctx.is_resume_target:
                raise rk.ToolInterrupt({"question": f"refund {order_id}?"})
            payments.entered.set()
            await payments.proceed.wait()
            payments.paid.append(order_id)
            return "refunded"

        return refund


def _desk(payments: Payments, orders: list[str]) -> rk.ChatModelAgent:
    calls = [ToolCall(f"c{i}", "refund", json.dumps({"order_id": o})) for i, o in enumerate(orders)]

    def respond(request: rk.ModelRequest) -> Message:
        if request.messages[-1].role == "tool":
            return Message.assistant("done")
        return Message.assistant("", calls)

    return rk.ChatModelAgent(
        "desk", "refunds", "Refund.", rk.ScriptedModel(_forever(respond)), tools=[payments.tool()]
    )


def _forever(respond: Any) -> Any:
    while True:
        yield respond


async def _interrupt(runner: rk.Runner, **options: Any) -> rk.InterruptInfo:
    events = [ev async for ev in runner.query("refund please", **options)]
    last = events[-1]
    assert last.action is not None and last.action.interrupted is not None, events
    return last.action.interrupted


async def _drain(events: AsyncIterator[AgentEvent]) -> list[AgentEvent]:
    return [ev async for ev in events]


def _texts(events: list[AgentEvent]) -> list[str]:
    return [
        ev.output.message.content
        for ev in events
        if ev.output is not None and ev.output.message is not None
    ]


# -- D21: checkpoints are consumed, ids are generated ------------------------------------------
async def test_interrupt_without_checkpoint_id_gets_a_generated_id_on_the_event() -> None:
    store = InMemoryCheckpointStore()
    payments = Payments()
    info = await _interrupt(rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store))
    assert info.checkpoint_id is not None and len(info.checkpoint_id) == 32
    assert await store.get(info.checkpoint_id) is not None
    events = await _drain(
        rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store).resume(info.checkpoint_id)
    )
    assert _texts(events)[-1] == "done"
    assert payments.paid == ["o1"]


async def test_given_checkpoint_id_is_named_on_the_interrupt_event() -> None:
    store = InMemoryCheckpointStore()
    info = await _interrupt(
        rk.Runner(_desk(Payments(), ["o1"]), checkpoint_store=store), checkpoint_id="t1"
    )
    assert info.checkpoint_id == "t1"
    assert len(store) == 1


async def test_interrupt_without_store_has_no_checkpoint_id_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = rk.Runner(_desk(Payments(), ["o1"]))
    with caplog.at_level(logging.WARNING, logger="relaykit"):
        first = await _interrupt(runner)
        second = await _interrupt(runner)
    assert first.checkpoint_id is None and second.checkpoint_id is None
    warnings = [r for r in caplog.records if "cannot be resumed" in r.getMessage()]
    assert len(warnings) == 1


async def test_completed_resume_consumes_the_checkpoint() -> None:
    store = InMemoryCheckpointStore()
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    await _interrupt(runner, checkpoint_id="t1")
    await _drain(runner.resume("t1", targets=None))
    assert payments.paid == ["o1"]
    assert await store.get("t1") is None
    with pytest.raises(errors.CheckpointNotFoundError, match="'t1'"):
        await _drain(runner.resume("t1"))
    assert payments.paid == ["o1"]  # an approved tool never runs twice


async def test_resume_that_ends_in_an_error_consumes_the_checkpoint() -> None:
    store = InMemoryCheckpointStore()
    calls = 0

    class Fails(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[AgentEvent]:
            yield rk.interrupt(ctx, "approve?")

        async def resume(
            self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
        ) -> AsyncIterator[AgentEvent]:
            nonlocal calls
            calls += 1
            raise RuntimeError("payment provider down")
            yield  # pragma: no cover

    runner = rk.Runner(Fails("F"), checkpoint_store=store)
    await _drain(runner.query("hi", checkpoint_id="t1"))
    events = await _drain(runner.resume("t1"))
    assert [type(ev.error).__name__ for ev in events] == ["RuntimeError"]
    assert calls == 1 and await store.get("t1") is None


async def test_resume_that_interrupts_again_replaces_the_checkpoint_unclaimed() -> None:
    store = InMemoryCheckpointStore()
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1", "o2"]), checkpoint_store=store)
    info = await _interrupt(runner, checkpoint_id="t1")
    ids = {c.info["question"]: c.id for c in info.contexts}
    events = await _drain(runner.resume("t1", targets={ids["refund o1?"]: True}))
    again = events[-1].action.interrupted
    assert again is not None and again.checkpoint_id == "t1"
    assert [c.id for c in again.contexts] == [ids["refund o2?"]]  # D11: the same id
    assert payments.paid == ["o1"]
    # Unclaimed: a new resume (another client) can take it at once.
    await _drain(runner.resume("t1", targets={ids["refund o2?"]: True}))
    assert payments.paid == ["o1", "o2"]
    assert await store.get("t1") is None


async def test_caller_stopping_early_leaves_the_checkpoint_resumable() -> None:
    store = InMemoryCheckpointStore()
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    await _interrupt(runner, checkpoint_id="t1")
    payments.proceed.clear()
    events = runner.resume("t1")
    reader = asyncio.ensure_future(anext(events))
    await asyncio.wait_for(payments.entered.wait(), GUARD)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    await events.aclose()  # type: ignore[attr-defined]
    assert payments.paid == []
    assert await store.get("t1") is not None
    payments.proceed.set()
    await _drain(runner.resume("t1"))  # not busy: the claim was released
    assert payments.paid == ["o1"]


async def test_cancelled_resume_releases_its_claim() -> None:
    store = InMemoryCheckpointStore()
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    await _interrupt(runner, checkpoint_id="t1")
    payments.proceed.clear()
    task = asyncio.ensure_future(_drain(runner.resume("t1")))
    await asyncio.wait_for(payments.entered.wait(), GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert payments.paid == []
    payments.proceed.set()
    await _drain(runner.resume("t1"))
    assert payments.paid == ["o1"]


# -- D21: resumes are exclusive ----------------------------------------------------------------
async def test_two_concurrent_resumes_run_the_approved_tool_once() -> None:
    store = InMemoryCheckpointStore()
    payments = Payments()
    first = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    second = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    info = await _interrupt(first, checkpoint_id="t1")
    target = {info.contexts[0].id: True}
    payments.proceed.clear()
    winner = asyncio.ensure_future(_drain(first.resume("t1", targets=target)))
    await asyncio.wait_for(payments.entered.wait(), GUARD)
    with pytest.raises(errors.CheckpointBusyError, match="'t1'"):
        await asyncio.wait_for(_drain(second.resume("t1", targets=target)), GUARD)
    payments.proceed.set()
    events = await asyncio.wait_for(winner, GUARD)
    assert _texts(events)[-1] == "done"
    assert payments.paid == ["o1"]


async def test_many_racing_resumes_pay_once() -> None:
    """20 resumes at once while the first holds the checkpoint inside the approved tool: the
    other 19 are refused (busy -- the checkpoint is not consumed yet), the tool pays once."""
    store = InMemoryCheckpointStore()
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    await _interrupt(runner, checkpoint_id="t1")
    payments.proceed.clear()
    tasks = [asyncio.ensure_future(_drain(runner.resume("t1"))) for _ in range(20)]
    await asyncio.wait_for(payments.entered.wait(), GUARD)
    for _ in range(int(GUARD / 0.01)):  # until the 19 losers have been refused
        if sum(t.done() for t in tasks) == 19:
            break
        await asyncio.sleep(0.01)
    payments.proceed.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), GUARD)
    failures = [type(o).__name__ for o in outcomes if isinstance(o, BaseException)]
    assert failures == ["CheckpointBusyError"] * 19
    assert payments.paid == ["o1"]


async def test_two_clients_answering_two_points_pay_twice_not_three_times() -> None:
    """Two clients answer the two points of one checkpoint at once: the second is refused
    while the first runs (it really overlaps: the first waits in its tool until the second
    was refused), retries, finds the first point done and pays only its own."""
    store = InMemoryCheckpointStore()
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1", "o2"]), checkpoint_store=store)
    info = await _interrupt(runner, checkpoint_id="t1")
    ids = {c.info["question"]: c.id for c in info.contexts}
    refused = asyncio.Event()
    payments.proceed.clear()

    async def answer(point: str) -> None:
        while True:  # a client retries while the other one holds the checkpoint
            try:
                await _drain(runner.resume("t1", targets={ids[point]: True}))
                return
            except errors.CheckpointBusyError:
                refused.set()
                payments.proceed.set()  # the first client may finish now
                await asyncio.sleep(0.01)

    first = asyncio.ensure_future(answer("refund o1?"))
    await asyncio.wait_for(payments.entered.wait(), GUARD)
    await asyncio.wait_for(asyncio.gather(first, answer("refund o2?")), GUARD)
    assert refused.is_set()
    assert sorted(payments.paid) == ["o1", "o2"]
    assert await store.get("t1") is None
    with pytest.raises(errors.CheckpointNotFoundError):
        await _drain(runner.resume("t1"))
    assert sorted(payments.paid) == ["o1", "o2"]


async def test_claim_of_a_dead_process_expires() -> None:
    now = [1000.0]
    store = InMemoryCheckpointStore(claim_ttl=30, clock=lambda: now[0])
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    await _interrupt(runner, checkpoint_id="t1")
    await store.claim("t1", "a-process-that-died", 30)
    with pytest.raises(errors.CheckpointBusyError):
        await _drain(runner.resume("t1"))
    now[0] += 31
    await _drain(runner.resume("t1"))
    assert payments.paid == ["o1"]


async def test_long_resume_keeps_renewing_its_claim() -> None:
    store = InMemoryCheckpointStore(claim_ttl=0.15)
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    await _interrupt(runner, checkpoint_id="t1")
    payments.proceed.clear()
    winner = asyncio.ensure_future(_drain(runner.resume("t1")))
    await asyncio.wait_for(payments.entered.wait(), GUARD)
    await asyncio.sleep(0.5)  # three ttls: without renewal the claim would have expired
    with pytest.raises(errors.CheckpointBusyError):
        await asyncio.wait_for(_drain(runner.resume("t1")), GUARD)
    payments.proceed.set()
    await asyncio.wait_for(winner, GUARD)
    assert payments.paid == ["o1"]


async def test_resume_errors_before_any_agent_runs_release_the_claim() -> None:
    store = InMemoryCheckpointStore()
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    await _interrupt(runner, checkpoint_id="t1")
    with pytest.raises(errors.ResumeTargetError, match="nope"):
        await _drain(runner.resume("t1", targets={"nope": True}))
    await store.set("bad", b"not json")
    with pytest.raises(errors.SerializationError, match="checkpoint 'bad'"):
        await _drain(runner.resume("bad"))
    assert payments.paid == []
    await _drain(runner.resume("t1"))  # neither failure left a claim behind
    assert payments.paid == ["o1"]
    await store.claim("bad", "someone", 10)  # and the corrupt one is not claimed either


# -- store failures and bad ids ----------------------------------------------------------------
class _BrokenStore(InMemoryCheckpointStore):
    def __init__(self, fail: set[str]) -> None:
        super().__init__()
        self.fail = fail

    async def set(self, checkpoint_id: str, data: bytes) -> None:
        if "set" in self.fail:
            raise OSError(f"disk full while writing {data[:40]!r}")
        await super().set(checkpoint_id, data)

    async def claim(self, checkpoint_id: str, owner: str, ttl: float) -> bytes:
        if "claim" in self.fail:
            raise ConnectionRefusedError("store down")
        return await super().claim(checkpoint_id, owner, ttl)


async def test_failed_save_is_an_error_event_before_the_interrupt_without_content() -> None:
    store = _BrokenStore({"set"})
    events = await _drain(
        rk.Runner(_desk(Payments(), ["secret-order"]), checkpoint_store=store).query(
            "refund please"
        )
    )
    assert events[-2].error is not None
    message = str(events[-2].error)
    assert "failed to save checkpoint" in message and "OSError" in message
    assert "secret-order" not in message and "refund" not in message
    last = events[-1].action
    assert last is not None and last.interrupted is not None
    assert last.interrupted.checkpoint_id is None


async def test_store_failure_on_claim_is_a_checkpoint_store_error() -> None:
    store = _BrokenStore(set())
    runner = rk.Runner(_desk(Payments(), ["o1"]), checkpoint_store=store)
    await _interrupt(runner, checkpoint_id="t1")
    store.fail = {"claim"}
    with pytest.raises(errors.CheckpointStoreError, match="'t1'"):
        await _drain(runner.resume("t1"))


@pytest.mark.parametrize("bad", ["", "x" * 256, "a\x00b", "\ud800"])
async def test_invalid_checkpoint_ids_are_refused_before_any_write(bad: str) -> None:
    store = InMemoryCheckpointStore()
    runner = rk.Runner(_desk(Payments(), ["o1"]), checkpoint_store=store)
    with pytest.raises(errors.CheckpointStoreError):
        runner.query("hi", checkpoint_id=bad)
    with pytest.raises(errors.CheckpointStoreError):
        runner.resume(bad)
    assert len(store) == 0


def test_store_without_claims_is_refused_when_the_runner_is_built() -> None:
    class OldStore:
        async def get(self, checkpoint_id: str) -> bytes | None:
            return None

        async def set(self, checkpoint_id: str, data: bytes) -> None: ...

        async def delete(self, checkpoint_id: str) -> None: ...

    with pytest.raises(errors.ConfigurationError, match="claim, renew, release, finish"):
        rk.Runner(ScriptedAgent("A", ["hi"]), checkpoint_store=OldStore())  # type: ignore[arg-type]


async def test_store_works_as_an_async_context_manager() -> None:
    async with InMemoryCheckpointStore() as store:
        await store.set("a", b"1")
        assert await store.get("a") == b"1"


# -- one path: runs without checkpoint_id are guarded too --------------------------------------
async def test_run_without_checkpoint_id_reports_multiple_interrupts() -> None:
    class Twice(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[AgentEvent]:
            yield rk.interrupt(ctx, "one")
            yield rk.interrupt(ctx, "two")

    events = await _drain(rk.Runner(Twice("T")).query("hi"))
    assert events[0].action is not None and events[0].action.interrupted is not None
    assert "multiple interrupt actions" in str(events[1].error)


# -- D23: runs are bounded ---------------------------------------------------------------------
def _ping_pong(calls: list[str]) -> rk.FlowAgent:
    def agent(name: str, other: str) -> rk.ChatModelAgent:
        def respond(request: rk.ModelRequest) -> Message:
            calls.append(name)
            return Message.assistant(
                "",
                [
                    ToolCall(
                        f"t{len(calls)}", "transfer_to_agent", json.dumps({"agent_name": other})
                    )
                ],
            )

        return rk.ChatModelAgent(
            name, f"agent {name}", "Hand over.", rk.ScriptedModel(_forever(respond))
        )

    return rk.set_sub_agents(agent("a", "b"), [agent("b", "a")])


async def test_agents_handing_control_back_and_forth_stop_at_max_transfers() -> None:
    calls: list[str] = []
    events = await _drain(rk.Runner(_ping_pong(calls), max_transfers=7).query("go"))
    errors_seen = [ev for ev in events if ev.error is not None]
    assert len(errors_seen) == 1 and events[-1] is errors_seen[0]
    err = errors_seen[0].error
    assert isinstance(err, errors.MaxTransfersError)
    assert "max_transfers=7" in str(err) and "a → b → a" in str(err)
    assert len(calls) == 8  # the 8th call asked for the transfer that was refused
    performed = [
        ev for ev in events if ev.action is not None and ev.action.transfer_to_agent is not None
    ]
    assert len(performed) == 8
    assert names(events[-1].run_path)[:3] == ["a", "b", "a"]


async def test_default_limit_ends_a_ping_pong_with_a_clear_error() -> None:
    calls: list[str] = []
    events = await _drain(rk.Runner(_ping_pong(calls)).query("go"))
    assert isinstance(events[-1].error, errors.MaxTransfersError)
    assert "max_transfers=100" in str(events[-1].error)
    assert len(calls) == 101


@pytest.mark.parametrize("bad", [-1, 251, 10_000, True, 2.5])
def test_max_transfers_is_validated(bad: object) -> None:
    with pytest.raises(errors.ConfigurationError, match="max_transfers must be an int from 0"):
        rk.Runner(ScriptedAgent("A", ["hi"]), max_transfers=bad)  # type: ignore[arg-type]


async def test_the_largest_transfer_limit_ends_with_max_transfers_not_recursion() -> None:
    calls: list[str] = []
    runner = rk.Runner(_ping_pong(calls), max_transfers=250, streaming=True)
    events = await _drain(runner.query("go"))
    assert isinstance(events[-1].error, errors.MaxTransfersError)
    assert len(calls) == 251


# -- D24 / D9: agents ending with BaseExceptions -----------------------------------------------
class _Ends(rk.BaseAgent):
    def __init__(self, name: str, exc: BaseException) -> None:
        super().__init__(name, name)
        self.exc = exc

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        yield AgentEvent.from_message(Message.assistant("before"))
        raise self.exc


@pytest.mark.parametrize(
    "exc", [asyncio.CancelledError(), GeneratorExit(), type("Custom", (BaseException,), {})()]
)
async def test_agent_ending_with_a_base_exception_is_an_error_event(exc: BaseException) -> None:
    events = await asyncio.wait_for(_drain(rk.Runner(_Ends("A", exc)).query("hi")), GUARD)
    assert _texts(events) == ["before"]
    err = events[-1].error
    assert isinstance(err, errors.RelayKitError)
    assert f"agent 'A' ended with {type(exc).__name__}" in str(err)
    assert err.__cause__ is exc


async def test_agent_awaiting_a_future_cancelled_elsewhere_is_an_error_event() -> None:
    class Waits(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[AgentEvent]:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(fut.cancel)
            await fut
            yield AgentEvent.from_message(Message.assistant("never"))

    events = await asyncio.wait_for(_drain(rk.Runner(Waits("W")).query("hi")), GUARD)
    assert "ended with CancelledError" in str(events[-1].error)


async def test_outside_cancellation_propagates_and_closes_the_agents() -> None:
    closed = asyncio.Event()
    started = asyncio.Event()

    class Slow(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[AgentEvent]:
            try:
                started.set()
                await asyncio.sleep(3600)
                yield AgentEvent.from_message(Message.assistant("never"))
            finally:
                closed.set()

    task = asyncio.ensure_future(_drain(rk.Runner(Slow("S")).query("hi")))
    await asyncio.wait_for(started.wait(), GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed.is_set()


async def test_resume_arguments_of_the_wrong_type_are_refused_at_call_time() -> None:
    store = InMemoryCheckpointStore()
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    await _interrupt(runner, checkpoint_id="t1")
    with pytest.raises(errors.ConfigurationError, match="targets"):
        runner.resume("t1", targets=["id"])  # type: ignore[arg-type]
    with pytest.raises(errors.ConfigurationError, match="session_values must be a mapping"):
        runner.resume("t1", session_values=[1, 2])  # type: ignore[arg-type]
    await _drain(runner.resume("t1"))  # nothing was claimed by the refused calls
    assert payments.paid == ["o1"]


async def test_a_composite_point_as_target_is_refused_and_the_claim_released() -> None:
    """Only the points that wait (root causes) take resume data; naming their composite
    parent (here the chat agent's own point) is a ResumeTargetError, before anything runs."""
    store = InMemoryCheckpointStore()
    payments = Payments()
    runner = rk.Runner(_desk(payments, ["o1"]), checkpoint_store=store)
    info = await _interrupt(runner, checkpoint_id="t1")
    parent = info.contexts[0].parent
    assert parent is not None
    with pytest.raises(errors.ResumeTargetError, match="composite point"):
        await _drain(runner.resume("t1", targets={parent.id: True}))
    await _drain(runner.resume("t1", targets={info.contexts[0].id: True}))
    assert payments.paid == ["o1"]


async def test_invoke_accepts_a_single_message() -> None:
    result = await rk.Runner(_desk(Payments(), ["o1"])).invoke(Message.user("refund please"))
    assert result.interrupt is not None
