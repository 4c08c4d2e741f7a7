"""Cancelling a run (D26): each mode stops at its safe point with a checkpoint, and the resume
finishes the run exactly once -- finished tools and completed model calls are not repeated."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import relaykit as rk
from relaykit import (
    AgentEvent,
    Cancelled,
    CancelMode,
    CancelOutcome,
    Message,
    RunHandle,
    StreamCancelledError,
)
from relaykit.checkpoints.document import decode_checkpoint
from relaykit.errors import CheckpointBusyError, ConfigurationError
from tests.cancel.support import (
    Counter,
    Gate,
    GatedModel,
    asks,
    call,
    cancel_at,
    last_interrupt,
    point_addresses,
    texts,
)


def _runner(agent: rk.Agent, **options: Any) -> rk.Runner:
    return rk.Runner(agent, checkpoint_store=rk.InMemoryCheckpointStore(), **options)


def _is_reply_with_calls(ev: AgentEvent) -> bool:
    return ev.message is not None and ev.message.role == "assistant" and bool(ev.message.tool_calls)


# -- the three modes, each with a resume that finishes the run once --------------------------
async def test_after_tools_cancel_runs_the_batch_and_stops_before_the_next_model_call() -> None:
    search = Counter("search")
    model = rk.ScriptedModel(
        [
            asks(call("c1", "search", "a"), call("c2", "search", "b")),
            Message.assistant("found a and b"),
        ]
    )
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[search.tool]))

    events, outcome = await cancel_at(
        runner.query("find"), _is_reply_with_calls, CancelMode.AFTER_TOOLS
    )

    assert outcome is not None and not outcome.already_ended and not outcome.timed_out
    assert outcome.checkpoint_id is not None
    info = last_interrupt(events)
    assert info.data == Cancelled(CancelMode.AFTER_TOOLS) and info == outcome.interrupt
    assert info.checkpoint_id == outcome.checkpoint_id
    assert point_addresses(info) == [["agent:helper"]]  # the agent, before its model call
    assert sorted(search.finished) == ["a", "b"] and len(model.requests) == 1
    assert not any(ev.error for ev in events)

    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [("helper", "assistant", "found a and b")]
    assert sorted(search.started) == ["a", "b"]  # not run again
    assert len(model.requests) == 2
    # The resumed model call sees both results, once each.
    assert [m.content for m in model.requests[1].messages if m.role == "tool"] == [
        "search did a",
        "search did b",
    ]


async def test_after_model_cancel_keeps_the_reply_and_the_resume_runs_its_tools() -> None:
    search = Counter("search")
    model = GatedModel([asks(call("c1", "search", "a")), Message.assistant("found a")], gated=[1])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[search.tool]))
    handle = runner.query("find")

    running = asyncio.ensure_future(handle.result())
    await model.gate.entered.wait()  # the model call is in progress
    cancelling = asyncio.ensure_future(handle.cancel(CancelMode.AFTER_MODEL))
    await asyncio.sleep(0)
    model.gate.opened.set()  # the call completes
    outcome = await cancelling
    result = await running

    assert outcome.checkpoint_id is not None and result.checkpoint_id == outcome.checkpoint_id
    assert result.interrupt is not None
    assert result.interrupt.data == Cancelled(CancelMode.AFTER_MODEL)
    assert texts(result.events) == [("helper", "assistant", "")]  # the reply is delivered
    assert point_addresses(result.interrupt) == [["agent:helper", "tool:search:c1"]]
    assert search.started == [] and len(model.requests) == 1

    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [
        ("helper", "tool", "search did a"),
        ("helper", "assistant", "found a"),
    ]
    assert search.started == ["a"] and len(model.requests) == 2  # the reply was not asked again


async def test_immediate_cancel_cuts_a_running_tool_and_keeps_the_finished_one() -> None:
    fast = Counter("fast")
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel(
        [asks(call("c1", "fast", "x"), call("c2", "slow", "y")), Message.assistant("both done")]
    )
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[fast.tool, slow.tool]))
    handle = runner.query("go")
    running = asyncio.ensure_future(handle.result())
    assert slow.gate is not None
    await slow.gate.entered.wait()

    outcome = await handle.cancel(CancelMode.IMMEDIATE)
    result = await running

    assert slow.cut == ["y"] and slow.finished == [] and fast.finished == ["x"]
    assert result.interrupt is not None and result.interrupt.data == Cancelled(CancelMode.IMMEDIATE)
    assert point_addresses(result.interrupt) == [["agent:helper", "tool:slow:c2"]]
    assert [p.info for p in result.interrupt.contexts] == [Cancelled(CancelMode.IMMEDIATE)]
    assert texts(result.events) == [("helper", "assistant", ""), ("helper", "tool", "fast did x")]

    slow.gate = None  # the resumed call does not block
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [
        ("helper", "tool", "slow did y"),
        ("helper", "assistant", "both done"),
    ]
    assert fast.started == ["x"]  # finished: not run again
    assert slow.started == ["y", "y"] and slow.finished == ["y"]  # cut: run again, from the start
    assert len(model.requests) == 2


async def test_immediate_cancel_cuts_a_model_call_and_the_resume_makes_it_once() -> None:
    model = GatedModel([Message.assistant("late"), Message.assistant("answer")], gated=[1])
    runner = _runner(rk.ChatModelAgent("helper", model=model))
    handle = runner.query("hi")
    running = asyncio.ensure_future(handle.result())
    await model.gate.entered.wait()

    outcome = await handle.cancel()  # IMMEDIATE by default
    result = await running

    assert result.output is None and result.events[-1].action is not None
    assert point_addresses(last_interrupt(result.events)) == [["agent:helper"]]
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    # The cut call never replied; the resume made the call again, once.
    assert done.output is not None and done.output.content == "late"
    assert model.calls == 2 and len(model.requests) == 1
    assert [m.role for m in model.requests[0].messages] == ["user"]


# -- timeout, after the end, before the start --------------------------------------------------
async def test_a_timeout_escalates_a_pending_cancel_to_immediate() -> None:
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel([asks(call("c1", "slow", "y")), Message.assistant("ok")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[slow.tool]))
    handle = runner.query("go")
    running = asyncio.ensure_future(handle.result())
    assert slow.gate is not None
    await slow.gate.entered.wait()

    # The tool never finishes: the after-tools safe point is never reached by itself.
    outcome = await handle.cancel(CancelMode.AFTER_TOOLS, timeout=0.05)
    result = await running

    assert outcome.timed_out and not outcome.already_ended and slow.cut == ["y"]
    assert result.interrupt is not None
    assert result.interrupt.data == Cancelled(CancelMode.AFTER_TOOLS, escalated=True)
    slow.gate = None
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert done.output is not None and done.output.content == "ok"
    assert slow.finished == ["y"]


async def test_a_cancel_after_the_run_ended_says_so() -> None:
    runner = _runner(rk.ChatModelAgent("helper", model=rk.ScriptedModel([Message.assistant("hi")])))
    handle = runner.query("hello")
    assert [ev.message.content for ev in [ev async for ev in handle] if ev.message] == ["hi"]

    assert await handle.cancel(CancelMode.AFTER_TOOLS) == CancelOutcome(already_ended=True)


async def test_a_cancel_after_an_interrupt_of_the_run_leaves_that_interrupt_alone() -> None:
    class Approval(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
            yield rk.interrupt(ctx, "approve?")

    runner = _runner(Approval("approver"))
    handle = runner.query("pay")
    first = await anext(handle)
    outcome = await handle.cancel()

    assert outcome.already_ended and outcome.checkpoint_id is None
    info = first.action.interrupted if first.action is not None else None
    assert info is not None and info.data == "approve?" and info.checkpoint_id is not None
    assert [ev async for ev in handle] == []


async def test_a_cancel_before_the_run_starts_pauses_it_before_the_root_agent() -> None:
    model = rk.ScriptedModel([Message.assistant("hi")])
    runner = _runner(rk.ChatModelAgent("helper", model=model))
    handle = runner.query("hello")

    outcome = await handle.cancel(CancelMode.AFTER_MODEL)
    delivered = [ev async for ev in handle]  # the events the cancel pulled are kept

    assert model.requests == [] and len(delivered) == 1
    assert last_interrupt(delivered) == outcome.interrupt
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert done.output is not None and done.output.content == "hi"


async def test_cancel_refuses_a_mode_or_timeout_it_cannot_use() -> None:
    handle = rk.Runner(rk.ChatModelAgent("a", model=rk.ScriptedModel([]))).query("x")
    with pytest.raises(ConfigurationError, match=r"relaykit\.CancelMode"):
        await handle.cancel("immediate")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"timeout"):
        await handle.cancel(timeout=-1)
    await handle.aclose()


async def test_a_tool_cannot_await_the_cancel_of_its_own_run() -> None:
    handles: list[RunHandle] = []
    refused: list[str] = []

    async def stop(item: str) -> str:
        try:
            await handles[0].cancel()
        except ConfigurationError as exc:
            refused.append(str(exc))
        return "went on"

    stop.__doc__ = "Stop the run."
    model = rk.ScriptedModel([asks(call("c1", "stop", "x")), Message.assistant("done")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[rk.FunctionTool(stop)]))
    handles.append(runner.query("go"))
    result = await handles[0].result()

    assert result.output is not None and result.output.content == "done"
    assert len(refused) == 1 and "would wait for itself" in refused[0]


# -- trees --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(CancelMode))
async def test_a_transfer_target_started_after_the_cancel_never_calls_its_model(
    mode: CancelMode,
) -> None:
    triage_model = rk.ScriptedModel(
        [asks(rk.ToolCall("t1", "transfer_to_agent", '{"agent_name": "billing"}'))]
    )
    billing_model = rk.ScriptedModel([Message.assistant("your invoice is paid")])
    billing = rk.ChatModelAgent("billing", "pays invoices", model=billing_model)
    root = rk.set_sub_agents(rk.ChatModelAgent("triage", model=triage_model), [billing])
    runner = _runner(root)

    def transferred(ev: AgentEvent) -> bool:
        return ev.output is not None and ev.output.tool_name == "transfer_to_agent"

    events, outcome = await cancel_at(runner.query("pay my invoice"), transferred, mode)

    assert billing_model.requests == []
    assert outcome is not None and outcome.checkpoint_id is not None
    assert point_addresses(last_interrupt(events)) == [["agent:triage", "agent:billing"]]
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [("billing", "assistant", "your invoice is paid")]
    assert len(billing_model.requests) == 1 and len(triage_model.requests) == 1


async def test_a_cancel_after_the_model_asked_for_a_transfer_transfers_on_resume() -> None:
    triage_model = rk.ScriptedModel(
        [asks(rk.ToolCall("t1", "transfer_to_agent", '{"agent_name": "billing"}'))]
    )
    billing_model = rk.ScriptedModel([Message.assistant("paid")])
    billing = rk.ChatModelAgent("billing", "pays invoices", model=billing_model)
    root = rk.set_sub_agents(rk.ChatModelAgent("triage", model=triage_model), [billing])
    runner = _runner(root)

    events, outcome = await cancel_at(
        runner.query("pay"), _is_reply_with_calls, CancelMode.AFTER_MODEL
    )

    assert outcome is not None and outcome.checkpoint_id is not None
    assert point_addresses(last_interrupt(events)) == [
        ["agent:triage", "tool:transfer_to_agent:t1"]
    ]
    assert not any(ev.output is not None and ev.output.role == "tool" for ev in events)
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [
        ("triage", "tool", "successfully transferred to agent [billing]"),
        ("billing", "assistant", "paid"),
    ]
    assert len(triage_model.requests) == 1 and len(billing_model.requests) == 1


async def test_a_sequential_workflow_stops_between_its_agents_and_resumes_the_next() -> None:
    first = rk.ScriptedModel([Message.assistant("draft")])
    second = rk.ScriptedModel([Message.assistant("reviewed")])
    pipeline = rk.SequentialAgent(
        "pipeline",
        [rk.ChatModelAgent("writer", model=first), rk.ChatModelAgent("reviewer", model=second)],
    )
    runner = _runner(pipeline)

    events, outcome = await cancel_at(
        runner.query("write"),
        lambda ev: ev.message is not None and ev.message.content == "draft",
        CancelMode.AFTER_MODEL,
    )

    assert second.requests == [] and outcome is not None and outcome.checkpoint_id is not None
    assert point_addresses(last_interrupt(events)) == [["agent:pipeline", "agent:reviewer"]]
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [("reviewer", "assistant", "reviewed")]
    assert len(first.requests) == 1 and len(second.requests) == 1
    # The reviewer reads the writer's draft, which ran before the cancel.
    assert "draft" in second.requests[0].messages[-1].content


async def test_a_loop_workflow_resumes_in_the_iteration_it_was_cancelled_in() -> None:
    replies = rk.ScriptedModel([Message.assistant(f"round {n}") for n in range(1, 5)])
    loop = rk.LoopAgent("rounds", [rk.ChatModelAgent("worker", model=replies)], max_iterations=4)
    runner = _runner(loop)

    events, outcome = await cancel_at(
        runner.query("go"),
        lambda ev: ev.message is not None and ev.message.content == "round 2",
        CancelMode.AFTER_TOOLS,
    )

    assert [t for _, _, t in texts(events)] == ["round 1", "round 2"]
    assert outcome is not None and outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert [t for _, _, t in texts(done.events)] == ["round 3", "round 4"]
    assert len(replies.requests) == 4


async def test_parallel_branches_cut_by_a_cancel_resume_and_a_finished_branch_does_not() -> None:
    gate = Gate()
    slow_a, slow_b = Counter("slow_a", gate), Counter("slow_b", gate)
    quick_model = rk.ScriptedModel([Message.assistant("quick answer")])
    a_model = rk.ScriptedModel([asks(call("a1", "slow_a", "p")), Message.assistant("a answer")])
    b_model = rk.ScriptedModel([asks(call("b1", "slow_b", "q")), Message.assistant("b answer")])
    fan_out = rk.ParallelAgent(
        "research",
        [
            rk.ChatModelAgent("quick", model=quick_model),
            rk.ChatModelAgent("branch_a", model=a_model, tools=[slow_a.tool]),
            rk.ChatModelAgent("branch_b", model=b_model, tools=[slow_b.tool]),
        ],
    )
    runner = _runner(fan_out)
    handle = runner.query("search")
    running = asyncio.ensure_future(handle.result())
    while len(slow_a.started) + len(slow_b.started) < 2:  # both slow tools are running
        await asyncio.sleep(0)

    outcome = await handle.cancel(CancelMode.IMMEDIATE)
    result = await running

    assert result.interrupt is not None
    assert sorted(point_addresses(result.interrupt)) == [
        ["agent:research", "agent:branch_a", "tool:slow_a:a1"],
        ["agent:research", "agent:branch_b", "tool:slow_b:b1"],
    ]
    assert ("quick", "assistant", "quick answer") in texts(result.events)
    assert slow_a.cut == ["p"] and slow_b.cut == ["q"]

    slow_a.gate = slow_b.gate = None
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert sorted(texts(done.events)) == [
        ("branch_a", "assistant", "a answer"),
        ("branch_a", "tool", "slow_a did p"),
        ("branch_b", "assistant", "b answer"),
        ("branch_b", "tool", "slow_b did q"),
    ]
    assert len(quick_model.requests) == 1  # finished before the cancel: not run again
    assert slow_a.finished == ["p"] and slow_b.finished == ["q"]


async def test_an_agent_tool_stops_its_inner_agent_and_resumes_through_the_tool() -> None:
    lookup = Counter("lookup", Gate())
    inner_model = rk.ScriptedModel([asks(call("i1", "lookup", "k")), Message.assistant("inner")])
    inner = rk.ChatModelAgent("researcher", "finds", model=inner_model, tools=[lookup.tool])
    outer_model = rk.ScriptedModel(
        [
            asks(rk.ToolCall("o1", "researcher", '{"request": "find k"}')),
            Message.assistant("outer answer"),
        ]
    )
    runner = _runner(rk.ChatModelAgent("lead", model=outer_model, tools=[rk.AgentTool(inner)]))
    handle = runner.query("go")
    running = asyncio.ensure_future(handle.result())
    assert lookup.gate is not None
    await lookup.gate.entered.wait()  # the inner agent's tool batch is running

    cancelling = asyncio.ensure_future(handle.cancel(CancelMode.AFTER_TOOLS))
    await asyncio.sleep(0)
    lookup.gate.opened.set()
    outcome = await cancelling
    result = await running

    assert outcome.checkpoint_id is not None and result.interrupt is not None
    assert point_addresses(result.interrupt) == [
        ["agent:lead", "tool:researcher:o1", "agent:researcher"]
    ]
    assert len(inner_model.requests) == 1 and lookup.finished == ["k"]
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [
        ("lead", "tool", "inner"),
        ("lead", "assistant", "outer answer"),
    ]
    assert lookup.started == ["k"] and len(inner_model.requests) == 2
    assert len(outer_model.requests) == 2


# -- streams ----------------------------------------------------------------------------------
async def test_a_stream_cut_by_an_immediate_cancel_ends_with_stream_cancelled_error() -> None:
    model = rk.ScriptedModel(
        [Message.assistant("one two three four"), Message.assistant("whole answer")]
    )
    store = rk.InMemoryCheckpointStore()
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model), checkpoint_store=store, streaming=True
    )
    handle = runner.query("count")
    read: list[str] = []
    events: list[AgentEvent] = []
    outcome: CancelOutcome | None = None
    async for ev in handle:
        events.append(ev)
        if ev.output is not None and ev.output.stream is not None:
            chunks = aiter(ev.output.stream)
            read.append((await anext(chunks)).content)
            outcome = await handle.cancel(CancelMode.IMMEDIATE)
            with pytest.raises(StreamCancelledError):
                await anext(chunks)

    assert read == ["one "] and outcome is not None and outcome.checkpoint_id is not None
    assert [ev.action is not None for ev in events] == [False, True]
    # The checkpoint does not keep the partial reply.
    saved = await store.get(outcome.checkpoint_id)
    assert saved is not None and b"one" not in saved
    cp, _ = decode_checkpoint(saved)
    stream = cp.events[0].output.stream if cp.events[0].output is not None else None
    assert stream is not None and stream.chunks == []
    assert isinstance(stream.error, StreamCancelledError)

    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert done.output is not None and done.output.content == "whole answer"
    assert [m.role for m in model.requests[1].messages] == ["user"]  # no partial reply


async def test_a_retried_stream_cut_by_a_cancel_is_not_retried() -> None:
    model = rk.ScriptedModel([Message.assistant("one two three"), Message.assistant("again")])
    retry = rk.ModelRetry(max_retries=3, backoff=lambda attempt: 0.0)
    runner = _runner(rk.ChatModelAgent("helper", model=model, retry=retry), streaming=True)
    handle = runner.query("count")
    streams = 0
    async for ev in handle:
        if ev.output is not None and ev.output.stream is not None:
            streams += 1
            chunks = aiter(ev.output.stream)
            await anext(chunks)
            outcome = await handle.cancel()
            with pytest.raises(StreamCancelledError):
                await anext(chunks)

    assert streams == 1 and len(model.requests) == 1  # one attempt: a cut is not a failure
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert done.output is not None and done.output.content == "again"


async def test_an_immediate_cancel_from_another_task_cuts_a_stream_waiting_for_a_chunk() -> None:
    model = GatedModel([Message.assistant("one two"), Message.assistant("again")], gated=[1])
    runner = _runner(rk.ChatModelAgent("helper", model=model), streaming=True)
    handle = runner.query("count")
    first = await anext(handle)
    assert first.output is not None and first.output.stream is not None
    chunks = aiter(first.output.stream)
    assert (await anext(chunks)).content == "one "

    waiting = asyncio.ensure_future(anext(chunks))
    await model.gate.entered.wait()  # the stream waits for its second chunk
    outcome = await handle.cancel()

    with pytest.raises(StreamCancelledError):
        await waiting
    rest = [ev async for ev in handle]
    assert last_interrupt(rest) == outcome.interrupt and outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert done.output is not None and done.output.content == "again"


# -- checkpoints ----------------------------------------------------------------------------
async def test_two_concurrent_resumes_of_the_cancel_checkpoint_run_the_continuation_once() -> None:
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel([asks(call("c1", "slow", "y")), Message.assistant("done")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[slow.tool]))
    _, outcome = await cancel_at(runner.query("go"), _is_reply_with_calls, CancelMode.AFTER_MODEL)
    assert outcome is not None and outcome.checkpoint_id is not None
    cid = outcome.checkpoint_id

    first = asyncio.ensure_future(runner.invoke_resume(cid))
    assert slow.gate is not None
    await slow.gate.entered.wait()  # the first resume holds the checkpoint
    with pytest.raises(CheckpointBusyError):
        await runner.invoke_resume(cid)
    slow.gate.opened.set()
    done = await first

    assert done.output is not None and done.output.content == "done"
    assert slow.started == ["y"] and len(model.requests) == 2
    assert await runner.checkpoint_store.get(cid) is None  # type: ignore[union-attr]


async def test_a_cancelled_run_without_a_checkpoint_store_still_ends_paused() -> None:
    model = rk.ScriptedModel([asks(call("c1", "search", "a")), Message.assistant("x")])
    search = Counter("search")
    runner = rk.Runner(rk.ChatModelAgent("helper", model=model, tools=[search.tool]))
    events, outcome = await cancel_at(
        runner.query("go"), _is_reply_with_calls, CancelMode.AFTER_MODEL
    )
    assert outcome is not None and outcome.checkpoint_id is None and not outcome.already_ended
    assert outcome.interrupt is not None and not any(ev.error for ev in events)
    assert search.started == []


async def test_a_cancel_reaches_the_agents_of_a_runner_with_plugins() -> None:
    ended: list[str] = []

    class Audit(rk.Plugin):
        name = "audit"

        async def after_run(self, ctx: rk.InvocationContext) -> None:
            ended.append(ctx.invocation_id)

    model = rk.ScriptedModel([asks(call("c1", "search", "a")), Message.assistant("x")])
    search = Counter("search")
    runner = _runner(
        rk.ChatModelAgent("helper", model=model, tools=[search.tool]), plugins=[Audit()]
    )
    _, outcome = await cancel_at(runner.query("go"), _is_reply_with_calls, CancelMode.AFTER_MODEL)
    assert outcome is not None and outcome.checkpoint_id is not None and len(ended) == 1
    assert search.started == []
