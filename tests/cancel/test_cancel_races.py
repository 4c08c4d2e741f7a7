"""Cancels racing other things: a cancellation of the task from outside, the run's own
interrupt being saved, a retry's wait, an agent tool's last model reply."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit as rk
from relaykit import AgentEvent, Cancelled, CancelMode, Message, _cancel
from relaykit.agents import _retry
from relaykit.errors import ConfigurationError
from relaykit.messages import MessageStream
from relaykit.models.base import ModelRequest
from tests.cancel.support import Counter, Gate, GatedModel, asks, call, point_addresses, texts

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


async def test_an_after_model_cancel_stops_the_caller_of_an_agent_tool_after_its_reply() -> None:
    # The cancel comes while the agent inside the tool makes its last model call: that reply
    # is the safe point; the calling agent must not make a model call of its own afterwards.
    inner_model = GatedModel([Message.assistant("inner answer")], gated=[1])
    inner = rk.ChatModelAgent("researcher", "finds", model=inner_model)
    outer_model = rk.ScriptedModel(
        [
            asks(rk.ToolCall("o1", "researcher", '{"request": "find k"}')),
            Message.assistant("outer answer"),
        ]
    )
    runner = _runner(rk.ChatModelAgent("lead", model=outer_model, tools=[rk.AgentTool(inner)]))
    handle = runner.query("go")
    running = asyncio.ensure_future(handle.result())
    await inner_model.gate.entered.wait()

    cancelling = asyncio.ensure_future(handle.cancel(CancelMode.AFTER_MODEL))
    await asyncio.sleep(0)
    inner_model.gate.opened.set()
    outcome = await cancelling
    result = await running

    assert not outcome.already_ended and outcome.checkpoint_id is not None
    assert len(outer_model.requests) == 1  # no model call after the safe point
    assert result.interrupt is not None
    assert result.interrupt.data == Cancelled(CancelMode.AFTER_MODEL)
    assert point_addresses(result.interrupt) == [["agent:lead"]]
    assert texts(result.events) == [("lead", "assistant", ""), ("lead", "tool", "inner answer")]

    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [("lead", "assistant", "outer answer")]
    assert len(outer_model.requests) == 2 and inner_model.calls == 1


async def test_an_after_model_cancel_stops_a_parallel_branch_before_its_next_model_call() -> None:
    # One branch is in a model call, the other runs a tool: once the reply has arrived, the
    # other branch does not start another model call.
    tool = Counter("lookup", Gate())
    talker = GatedModel([Message.assistant("talked")], gated=[1])
    worker = rk.ScriptedModel([asks(call("w1", "lookup", "k")), Message.assistant("worked")])
    fan = rk.ParallelAgent(
        "fan",
        [
            rk.ChatModelAgent("talker", model=talker),
            rk.ChatModelAgent("worker", model=worker, tools=[tool.tool]),
        ],
    )
    runner = _runner(fan)
    handle = runner.query("go")
    events: list[AgentEvent] = []
    assert tool.gate is not None
    gate = tool.gate

    async def consume() -> None:
        async for ev in handle:
            events.append(ev)
            if ev.agent_name == "talker":  # the reply arrived: now the tool may finish
                gate.opened.set()

    consuming = asyncio.ensure_future(consume())
    await talker.gate.entered.wait()
    await gate.entered.wait()
    cancelling = asyncio.ensure_future(handle.cancel(CancelMode.AFTER_MODEL))
    await asyncio.sleep(0)
    talker.gate.opened.set()
    outcome = await cancelling
    await consuming

    assert len(worker.requests) == 1 and tool.finished == ["k"]
    assert texts(events) == [
        ("worker", "assistant", ""),
        ("talker", "assistant", "talked"),
        ("worker", "tool", "lookup did k"),
    ]
    last = events[-1].action
    assert last is not None and last.interrupted is not None
    assert point_addresses(last.interrupted) == [["agent:fan", "agent:worker"]]
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [("worker", "assistant", "worked")]
    assert tool.started == ["k"] and talker.calls == 1


async def test_a_call_that_swallows_the_cut_is_reported_and_waited_for(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing can stop a call that catches the cancellation and goes on: the run pauses once
    # it returns, and a warning says what the cancel is waiting for.
    monkeypatch.setattr(_cancel, "STUCK_AFTER", 0.0)
    started, release = Gate(), asyncio.Event()
    swallowed: list[str] = []

    async def stubborn(item: str) -> str:
        started.entered.set()
        while True:
            try:
                await release.wait()
                return f"did {item} anyway"
            except asyncio.CancelledError:
                swallowed.append(item)  # and carries on

    stubborn.__doc__ = "Never stops."
    model = rk.ScriptedModel([asks(call("c1", "stubborn", "y")), Message.assistant("ok")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[rk.FunctionTool(stubborn)]))
    handle = runner.query("go")
    await anext(handle)  # the reply asking for the call
    consuming = asyncio.ensure_future(anext(handle))
    await started.entered.wait()
    cancelling = asyncio.ensure_future(handle.cancel())

    async def reported() -> None:
        while not any("have not stopped" in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0)

    try:
        await asyncio.wait_for(reported(), HANG)
        assert swallowed == ["y"] and not cancelling.done()  # the cancel waits for the call
    finally:
        release.set()  # (also when the test fails: the loop could not end otherwise)
    outcome = await cancelling
    ev = await consuming

    assert texts([ev]) == [("helper", "tool", "did y anyway")]  # its result is kept
    rest = [e async for e in handle]
    assert [e.action.interrupted for e in rest if e.action is not None] == [outcome.interrupt]
    assert outcome.interrupt is not None
    assert point_addresses(outcome.interrupt) == [["agent:helper"]]


async def test_a_timeout_passing_after_the_pause_was_saved_does_not_escalate() -> None:
    # The run reached its safe point in time; only its last steps (after_run here) were
    # still running when the timeout passed: the cancel did not time out.
    timers: list[Any] = []
    loop = asyncio.get_running_loop()
    real_call_later = loop.call_later

    def call_later(delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        if getattr(callback, "__name__", "") == "escalate":
            timers.append(callback)
        return real_call_later(delay, callback, *args)

    gate = Gate()

    class Slow(rk.Plugin):
        name = "slow"

        async def after_run(self, ctx: rk.InvocationContext) -> None:
            await gate.wait()

    search = Counter("search")
    model = rk.ScriptedModel([asks(call("c1", "search", "a")), Message.assistant("x")])
    runner = _runner(
        rk.ChatModelAgent("helper", model=model, tools=[search.tool]), plugins=[Slow()]
    )
    handle = runner.query("go")
    await anext(handle)  # the reply asking for the call
    loop.call_later = call_later  # type: ignore[method-assign]
    try:
        cancelling = asyncio.ensure_future(handle.cancel(CancelMode.AFTER_TOOLS, timeout=60))
        await gate.entered.wait()  # paused and saved; after_run runs
    finally:
        del loop.call_later  # type: ignore[method-assign]
    assert len(timers) == 1
    timers[0]()  # the timeout passes now
    gate.opened.set()
    outcome = await cancelling

    assert not outcome.timed_out and outcome.interrupt is not None
    assert outcome.interrupt.data == Cancelled(CancelMode.AFTER_TOOLS)
    assert search.finished == ["a"]


async def test_events_a_cancel_kept_are_not_delivered_after_aclose() -> None:
    model = rk.ScriptedModel([Message.assistant("hi")])
    handle = _runner(rk.ChatModelAgent("helper", model=model)).query("hello")
    outcome = await handle.cancel()
    assert outcome.interrupt is not None  # the pause event is kept for the caller...

    await handle.aclose()  # ...who closes the handle instead of reading it
    assert [ev async for ev in handle] == []


async def test_a_plugin_hook_cannot_await_its_runs_cancel_but_can_start_it() -> None:
    # Awaiting it inside the run would wait for itself (this hung); started in a task of its
    # own, the cancel takes effect once that task runs, and the run goes on to its safe point.
    handles: list[rk.RunHandle] = []
    refused: list[str] = []
    started: list[asyncio.Future[rk.CancelOutcome]] = []

    class Guard(rk.Plugin):
        name = "guard"

        async def on_event(self, ctx: rk.InvocationContext, ev: AgentEvent) -> AgentEvent:
            if ev.message is not None and ev.message.tool_calls and not refused:
                try:
                    await handles[0].cancel(CancelMode.AFTER_TOOLS)
                except ConfigurationError as exc:
                    refused.append(str(exc))
                started.append(asyncio.ensure_future(handles[0].cancel(CancelMode.AFTER_TOOLS)))
            return ev

    search = Counter("search", Gate())
    model = rk.ScriptedModel([asks(call("c1", "search", "a")), Message.assistant("x")])
    runner = _runner(
        rk.ChatModelAgent("helper", model=model, tools=[search.tool]), plugins=[Guard()]
    )
    handles.append(runner.query("go"))
    running = asyncio.ensure_future(handles[0].result())
    assert search.gate is not None
    await search.gate.entered.wait()  # the cancel's task has run meanwhile
    search.gate.opened.set()
    result = await asyncio.wait_for(running, HANG)
    outcome = await started[0]

    assert len(refused) == 1 and "would wait for itself" in refused[0]
    assert result.interrupt is not None and result.interrupt == outcome.interrupt
    assert result.interrupt.data == Cancelled(CancelMode.AFTER_TOOLS)
    assert search.finished == ["a"] and len(model.requests) == 1


async def test_a_resume_with_targets_continues_the_calls_a_cancel_cut_too() -> None:
    # The pause holds a point of the run's own (an approval) and a call the cancel cut:
    # answering the approval by its id must not leave the cut call waiting (it waits for no
    # answer), as the agents a cancel stopped do not wait either.
    slow = Counter("slow", Gate())
    asked: list[str] = []

    async def approve(item: str) -> str:
        """Ask a person to approve."""
        asked.append(item)
        return "waiting for a person"

    model = rk.ScriptedModel(
        [asks(call("c1", "approve", "x"), call("c2", "slow", "y")), Message.assistant("done")]
    )
    tools = [rk.FunctionTool(approve, long_running=True), slow.tool]
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=tools))
    handle = runner.query("go")
    running = asyncio.ensure_future(handle.result())
    assert slow.gate is not None
    await slow.gate.entered.wait()  # (the approval call, started first, has returned)
    outcome = await handle.cancel()
    result = await running

    assert result.interrupt is not None and slow.cut == ["y"] and asked == ["x"]
    points = {p.address[-1].sub_id: p for p in result.interrupt.contexts}
    assert points["c2"].info == Cancelled(CancelMode.IMMEDIATE)
    approval = points["c1"]
    assert approval.info != Cancelled(CancelMode.IMMEDIATE)

    slow.gate = None
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id, targets={approval.id: "approved"})
    assert done.interrupt is None and done.output is not None
    assert done.output.content == "done"
    assert texts(done.events) == [
        ("helper", "tool", "approved"),
        ("helper", "tool", "slow did y"),
        ("helper", "assistant", "done"),
    ]
    assert asked == ["x"] and slow.finished == ["y"]


async def test_the_task_of_a_cancel_driving_a_session_turn_cancelled_from_outside(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # cancel() drives the turn itself (nobody iterates); its own task is cancelled from
    # outside: the cancellation propagates, nothing pauses, after_run runs once, the session
    # is free for the next turn and its history is valid for a provider.
    ended: list[str] = []

    class Audit(rk.Plugin):
        name = "audit"

        async def after_run(self, ctx: rk.InvocationContext) -> None:
            ended.append(ctx.invocation_id)

    slow = Counter("slow", Gate())
    model = rk.ScriptedModel(
        [asks(call("c1", "slow", "y")), Message.assistant("ok"), Message.assistant("next")]
    )
    service = rk.InMemorySessionService()
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model, tools=[slow.tool]),
        app_name="app",
        session_service=service,
        plugins=[Audit()],
        session_lock_timeout=1,
    )
    handle = runner.run([Message.user("go")], user_id="u", session_id="s")
    await anext(handle)  # the reply asking for the call
    cancelling = asyncio.ensure_future(handle.cancel(CancelMode.AFTER_TOOLS))
    assert slow.gate is not None
    await slow.gate.entered.wait()  # the cancel's task runs the tool
    cancelling.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelling

    assert slow.cut == ["y"] and len(ended) == 1
    assert [ev async for ev in handle] == []  # the turn ended, without a pause
    assert await service.get_checkpoint("app", "u", "s") is None
    done = await runner.invoke([Message.user("again")], user_id="u", session_id="s")
    assert done.output is not None and done.output.content == "ok"
    assert [(m.role, m.content) for m in model.requests[-1].messages] == [
        ("user", "go"),
        ("assistant", ""),
        ("tool", "error: not completed — the turn ended before this call returned"),
        ("user", "again"),
    ]
    assert len(ended) == 2
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_timeout_waits_for_a_sync_tools_thread_and_keeps_its_result() -> None:
    # A plain function tool runs in a worker thread, which nothing can stop: the escalated
    # cancel waits for it and keeps its result, so the resume never runs the call again (it
    # ran twice, the second run starting while the first was still going, before).
    release = threading.Event()
    entered = threading.Event()
    runs: list[str] = []

    def blocking(item: str) -> str:
        """Blocks its thread."""
        runs.append(item)
        entered.set()
        release.wait(HANG)
        return f"did {item}"

    model = rk.ScriptedModel([asks(call("c1", "blocking", "y")), Message.assistant("ok")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[rk.FunctionTool(blocking)]))
    handle = runner.query("go")
    running = asyncio.ensure_future(handle.result())
    try:
        while not entered.is_set():
            await asyncio.sleep(0)
        cancelling = asyncio.ensure_future(handle.cancel(CancelMode.AFTER_TOOLS, timeout=0))
        for _ in range(100):
            await asyncio.sleep(0)
        assert not cancelling.done()  # the thread blocks: the cancel waits for it
    finally:
        release.set()
    outcome = await asyncio.wait_for(cancelling, HANG)
    result = await running

    assert outcome.timed_out and result.interrupt is not None
    assert result.interrupt.data == Cancelled(CancelMode.AFTER_TOOLS, escalated=True)
    assert texts(result.events) == [("helper", "assistant", ""), ("helper", "tool", "did y")]
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [("helper", "assistant", "ok")]
    assert runs == ["y"]


async def test_two_concurrent_cancels_with_different_modes_stop_the_run_once() -> None:
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel([asks(call("c1", "slow", "y")), Message.assistant("ok")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[slow.tool]))
    handle = runner.query("go")
    events: list[AgentEvent] = []

    async def consume() -> None:
        async for ev in handle:
            events.append(ev)

    consuming = asyncio.ensure_future(consume())
    assert slow.gate is not None
    await slow.gate.entered.wait()
    waiting = asyncio.ensure_future(handle.cancel(CancelMode.AFTER_TOOLS))
    await asyncio.sleep(0)
    now = asyncio.ensure_future(handle.cancel(CancelMode.IMMEDIATE))  # makes it immediate
    first, second = await asyncio.gather(waiting, now)
    await consuming

    assert first == second and first.interrupt is not None
    assert first.interrupt.data == Cancelled(CancelMode.IMMEDIATE)
    paused = [ev for ev in events if ev.action is not None and ev.action.interrupted]
    assert len(paused) == 1 and paused[0] is events[-1]
    assert slow.cut == ["y"]


async def test_a_cancel_right_after_the_last_event_finds_the_run_ended() -> None:
    # The caller holds the final answer; the run has not yet returned: the cancel must say the
    # run ended, add no pause, and lose nothing.
    store = rk.InMemoryCheckpointStore()
    model = rk.ScriptedModel([Message.assistant("the answer")])
    runner = rk.Runner(rk.ChatModelAgent("helper", model=model), checkpoint_store=store)
    handle = runner.query("q")
    last = await anext(handle)

    outcome = await handle.cancel(CancelMode.AFTER_TOOLS)

    assert last.message is not None and last.message.content == "the answer"
    assert outcome.already_ended and outcome.interrupt is None
    assert [ev async for ev in handle] == []
    result = await handle.result()
    assert result.interrupt is None and result.events == []
