"""Tool calls an immediate cancel stops (D26) never run twice: a result the resume gives for a
cut call is that call's result (the tool does not run again, D12), and a plain function tool,
whose worker thread nothing can stop, is not cut once started -- the cancel waits for it and
keeps its result, so no resume can start the call while its first run may still be going."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import relaykit as rk
from relaykit import AgentEvent, Cancelled, CancelMode, Message, RunHandle
from relaykit.sessions import SessionEvent
from tests.cancel.support import Counter, Gate, asks, call, point_addresses, texts

APP, USER, SID = "desk", "u1", "s1"

# A bound on waits that only a bug could make endless (never reached when the code is right).
HANG = 30


def _runner(agent: rk.Agent, **options: Any) -> rk.Runner:
    return rk.Runner(agent, checkpoint_store=rk.InMemoryCheckpointStore(), **options)


async def _stored(service: Any) -> list[SessionEvent]:
    session = await service.get_session(APP, USER, SID)
    assert session is not None
    return list(session.events)


def _answers(events: list[SessionEvent], call_id: str) -> list[tuple[str, str]]:
    """(author, text) of every stored tool message answering ``call_id``."""
    return [
        (e.author, e.message.content)
        for e in events
        if e.message is not None and e.message.role == "tool" and e.message.tool_call_id == call_id
    ]


def _seen(model: rk.ScriptedModel, n: int = -1) -> list[tuple[str, str]]:
    """(role, text) of the messages the model's ``n``-th request held."""
    return [(m.role, m.content) for m in model.requests[n].messages]


async def _cut_while_running(handle: RunHandle, gate: Gate) -> rk.RunResult:
    """Run ``handle`` until its tool waits at ``gate``, cancel it at once, return the result."""
    running = asyncio.ensure_future(handle.result())
    await asyncio.wait_for(gate.entered.wait(), HANG)
    await handle.cancel(CancelMode.IMMEDIATE)
    return await running


class Blocking:
    """A plain function tool (it runs in a worker thread) that blocks until released, and
    counts its runs and how many ran at once."""

    def __init__(self, name: str = "charge") -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.started: list[str] = []
        self.finished: list[str] = []
        self.most_at_once = 0
        self._running = 0
        self._lock = threading.Lock()

        def run(item: str) -> str:
            with self._lock:
                self.started.append(item)
                self._running += 1
                self.most_at_once = max(self.most_at_once, self._running)
            self.entered.set()
            self.release.wait(HANG)
            with self._lock:
                self._running -= 1
                self.finished.append(item)
            return f"{name}d {item}"

        run.__doc__ = f"{name} an item (blocks its thread)."
        self.tool = rk.FunctionTool(run, name=name)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, HANG)


async def _still_waiting(task: asyncio.Future[Any]) -> bool:
    """Let the loop run a while: True when ``task`` has not finished meanwhile."""
    for _ in range(50):
        await asyncio.sleep(0)
    return not task.done()


# -- a result given for a cut call is its result ----------------------------------------------
async def test_a_tool_response_for_a_cut_call_is_its_result_and_the_tool_does_not_run_again(
    service: Any,
) -> None:
    work = Counter("work", Gate())
    model = rk.ScriptedModel(
        [asks(call("c1", "work", "x")), Message.assistant("end"), Message.assistant("bye")]
    )
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model, tools=[work.tool]),
        app_name=APP,
        session_service=service,
    )
    assert work.gate is not None
    cut = await _cut_while_running(
        runner.run([Message.user("go")], user_id=USER, session_id=SID), work.gate
    )
    assert cut.interrupt is not None and work.cut == ["x"]

    work.gate = None  # (were it run again, it would not block)
    done = await runner.invoke(
        [Message.tool("user-supplied result", tool_call_id="c1")], user_id=USER, session_id=SID
    )

    assert work.started == ["x"] and work.finished == []  # not run again
    assert texts(done.events) == [
        ("helper", "tool", "user-supplied result"),
        ("helper", "assistant", "end"),
    ]
    assert _seen(model) == [("user", "go"), ("assistant", ""), ("tool", "user-supplied result")]
    assert await service.get_checkpoint(APP, USER, SID) is None  # consumed
    # The user's copy records what came in; the agent's own event answers the call, once.
    assert _answers(await _stored(service), "c1") == [
        ("user", "user-supplied result"),
        ("helper", "user-supplied result"),
    ]
    # The next turn's history answers the call once, with the given result.
    await runner.invoke("thanks", user_id=USER, session_id=SID)
    assert _seen(model) == [
        ("user", "go"),
        ("assistant", ""),
        ("tool", "user-supplied result"),
        ("assistant", "end"),
        ("user", "thanks"),
    ]


async def test_a_tool_response_answers_one_cut_call_and_the_other_runs_again() -> None:
    service = rk.InMemorySessionService()
    work = Counter("work")
    model = rk.ScriptedModel(
        [asks(call("c1", "work", "a"), call("c2", "work", "b")), Message.assistant("end")]
    )
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model, tools=[work.tool]),
        app_name=APP,
        session_service=service,
    )
    handle = runner.run([Message.user("go")], user_id=USER, session_id=SID)
    async for ev in handle:
        if ev.message is not None and ev.message.tool_calls:
            await handle.cancel(CancelMode.AFTER_MODEL)  # both calls cut before they start
    assert work.started == []

    done = await runner.invoke(
        [Message.tool("b, from the user", tool_call_id="c2")], user_id=USER, session_id=SID
    )

    assert work.started == ["a"]  # the cut call without a response runs; c2 never does
    assert sorted(texts(done.events)[:2]) == [
        ("helper", "tool", "b, from the user"),
        ("helper", "tool", "work did a"),
    ]
    assert _seen(model)[2:] == [("tool", "work did a"), ("tool", "b, from the user")]  # call order


async def test_a_resume_target_for_a_cut_point_is_its_result_other_cut_points_run_again() -> None:
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel(
        [asks(call("c1", "slow", "x"), call("c2", "slow", "y")), Message.assistant("done")]
    )
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[slow.tool]))
    assert slow.gate is not None
    result = await _cut_while_running(runner.query("go"), slow.gate)
    assert result.interrupt is not None and sorted(slow.cut) == ["x", "y"]
    points = {p.address[-1].sub_id: p for p in result.interrupt.contexts}
    assert points["c1"].info == points["c2"].info == Cancelled(CancelMode.IMMEDIATE)

    slow.gate = None
    assert result.checkpoint_id is not None
    done = await runner.invoke_resume(
        result.checkpoint_id, targets={points["c1"].id: {"paid": True, "amount": 5}}
    )

    assert done.interrupt is None and done.output is not None and done.output.content == "done"
    assert sorted(slow.started) == ["x", "y", "y"]  # c1 does not run again, c2 does
    assert _seen(model)[2:] == [("tool", '{"paid": true, "amount": 5}'), ("tool", "slow did y")]


async def test_a_resume_without_targets_still_runs_every_cut_call_again() -> None:
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel([asks(call("c1", "slow", "x")), Message.assistant("done")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[slow.tool]))
    assert slow.gate is not None
    result = await _cut_while_running(runner.query("go"), slow.gate)

    slow.gate = None
    assert result.checkpoint_id is not None
    done = await runner.invoke_resume(result.checkpoint_id)

    assert slow.started == ["x", "x"] and slow.finished == ["x"]
    assert texts(done.events)[0] == ("helper", "tool", "slow did x")


async def test_a_target_of_none_for_a_cut_point_gives_no_result_and_the_call_runs_again() -> None:
    # None is what a resume of every point gives each point (D8): no answer, so the call runs.
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel([asks(call("c1", "slow", "x")), Message.assistant("done")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[slow.tool]))
    assert slow.gate is not None
    result = await _cut_while_running(runner.query("go"), slow.gate)
    assert result.interrupt is not None and result.checkpoint_id is not None
    [point] = result.interrupt.contexts

    slow.gate = None
    await runner.invoke_resume(result.checkpoint_id, targets={point.id: None})

    assert slow.started == ["x", "x"] and _seen(model)[-1] == ("tool", "slow did x")


async def test_a_given_result_goes_through_after_tool_and_not_before_tool() -> None:
    seen: list[tuple[str, str, object]] = []

    class Audit(rk.Plugin):
        async def before_tool(
            self, ctx: Any, agent_name: str, tool_name: str, arguments: Any
        ) -> Any:
            seen.append(("before", tool_name, dict(arguments)))
            return None

        async def after_tool(
            self, ctx: Any, agent_name: str, tool_name: str, arguments: Any, result: object
        ) -> Any:
            seen.append(("after", tool_name, result))
            return f"audited: {result}"

    work = Counter("work")
    model = rk.ScriptedModel([asks(call("c1", "work", "x")), Message.assistant("end")])
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model, tools=[work.tool]),
        app_name=APP,
        session_service=rk.InMemorySessionService(),
        plugins=[Audit()],
    )
    handle = runner.run([Message.user("go")], user_id=USER, session_id=SID)
    async for ev in handle:
        if ev.message is not None and ev.message.tool_calls:
            await handle.cancel(CancelMode.AFTER_MODEL)

    done = await runner.invoke(
        [Message.tool("given", tool_call_id="c1")], user_id=USER, session_id=SID
    )

    assert work.started == [] and seen == [("after", "work", "given")]
    assert texts(done.events)[0] == ("helper", "tool", "audited: given")


async def test_a_target_answers_a_call_cut_inside_an_agent_tool() -> None:
    slow = Counter("slow", Gate())
    inner_model = rk.ScriptedModel([asks(call("i1", "slow", "x")), Message.assistant("inner done")])
    inner = rk.ChatModelAgent("worker", "does the work", model=inner_model, tools=[slow.tool])
    model = rk.ScriptedModel(
        [asks(rk.ToolCall("o1", "worker", '{"request": "go"}')), Message.assistant("outer done")]
    )
    runner = _runner(rk.ChatModelAgent("boss", model=model, tools=[rk.AgentTool(inner)]))
    assert slow.gate is not None
    result = await _cut_while_running(runner.query("go"), slow.gate)
    assert result.interrupt is not None and slow.cut == ["x"]
    [point] = [p for p in result.interrupt.contexts if p.address[-1].sub_id == "i1"]

    slow.gate = None
    assert result.checkpoint_id is not None
    done = await runner.invoke_resume(result.checkpoint_id, targets={point.id: "given"})

    assert done.output is not None and done.output.content == "outer done"
    assert slow.started == ["x"]  # not run again
    assert _seen(inner_model)[-1] == ("tool", "given")


# -- a plain function tool is not cut once it started -----------------------------------------
async def test_an_immediate_cancel_waits_for_a_sync_tools_thread_and_keeps_its_result() -> None:
    charge = Blocking()
    model = rk.ScriptedModel([asks(call("c1", "charge", "card")), Message.assistant("paid")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[charge.tool]))
    handle = runner.query("pay")
    running = asyncio.ensure_future(handle.result())
    try:
        await charge.wait_entered()
        cancelling = asyncio.ensure_future(handle.cancel(CancelMode.IMMEDIATE))
        assert await _still_waiting(cancelling)  # the thread still runs: the cancel waits
    finally:
        charge.release.set()
    outcome = await asyncio.wait_for(cancelling, HANG)
    result = await running

    assert not outcome.timed_out and outcome.interrupt is not None
    assert outcome.interrupt.data == Cancelled(CancelMode.IMMEDIATE)
    # The call finished: its result is kept; the agent paused before its next model call.
    assert point_addresses(outcome.interrupt) == [["agent:helper"]]
    assert texts(result.events) == [("helper", "assistant", ""), ("helper", "tool", "charged card")]
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [("helper", "assistant", "paid")]
    assert charge.started == ["card"] and len(model.requests) == 2


async def test_an_escalated_cancel_never_lets_a_resume_run_a_sync_call_twice(service: Any) -> None:
    # The hostile case: a timeout escalates while the thread charges the card, and the resume
    # follows at once. The run pauses only once the thread returned, with its result.
    charge = Blocking()
    model = rk.ScriptedModel([asks(call("c1", "charge", "card")), Message.assistant("paid")])
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model, tools=[charge.tool]),
        app_name=APP,
        session_service=service,
    )
    handle = runner.run([Message.user("pay")], user_id=USER, session_id=SID)
    running = asyncio.ensure_future(handle.result())
    try:
        await charge.wait_entered()
        cancelling = asyncio.ensure_future(handle.cancel(CancelMode.AFTER_TOOLS, timeout=0))
        assert await _still_waiting(cancelling)
    finally:
        charge.release.set()
    outcome = await asyncio.wait_for(cancelling, HANG)
    await running

    assert outcome.timed_out and outcome.interrupt is not None
    assert outcome.interrupt.data == Cancelled(CancelMode.AFTER_TOOLS, escalated=True)
    assert point_addresses(outcome.interrupt) == [["agent:helper"]]
    done = await runner.invoke_resume(user_id=USER, session_id=SID)
    assert done.output is not None and done.output.content == "paid"
    assert charge.started == ["card"] and charge.most_at_once == 1
    assert _answers(await _stored(service), "c1") == [("helper", "charged card")]


async def test_an_immediate_cancel_cuts_the_async_call_and_waits_for_the_sync_one() -> None:
    charge = Blocking()
    slow = Counter("slow", Gate())
    model = rk.ScriptedModel(
        [asks(call("c1", "charge", "card"), call("c2", "slow", "y")), Message.assistant("done")]
    )
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[charge.tool, slow.tool]))
    handle = runner.query("go")
    running = asyncio.ensure_future(handle.result())
    assert slow.gate is not None
    try:
        await charge.wait_entered()
        await asyncio.wait_for(slow.gate.entered.wait(), HANG)
        cancelling = asyncio.ensure_future(handle.cancel())
        assert await _still_waiting(cancelling)
        assert slow.cut == ["y"]  # the async call was cut at once
    finally:
        charge.release.set()
    outcome = await asyncio.wait_for(cancelling, HANG)
    result = await running

    assert outcome.interrupt is not None
    assert point_addresses(outcome.interrupt) == [["agent:helper", "tool:slow:c2"]]
    assert ("helper", "tool", "charged card") in texts(result.events)
    slow.gate = None
    assert outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert texts(done.events) == [("helper", "tool", "slow did y"), ("helper", "assistant", "done")]
    assert charge.started == ["card"] and slow.started == ["y", "y"]
    assert _seen(model)[2:] == [("tool", "charged card"), ("tool", "slow did y")]


async def test_a_sync_tool_inside_an_agent_tool_is_not_cut_either() -> None:
    charge = Blocking()
    inner_model = rk.ScriptedModel([asks(call("i1", "charge", "card")), Message.assistant("ok")])
    inner = rk.ChatModelAgent("cashier", "takes payments", model=inner_model, tools=[charge.tool])
    model = rk.ScriptedModel(
        [asks(rk.ToolCall("o1", "cashier", '{"request": "pay"}')), Message.assistant("paid")]
    )
    runner = _runner(rk.ChatModelAgent("boss", model=model, tools=[rk.AgentTool(inner)]))
    handle = runner.query("pay")
    running = asyncio.ensure_future(handle.result())
    try:
        await charge.wait_entered()
        cancelling = asyncio.ensure_future(handle.cancel())
        assert await _still_waiting(cancelling)
    finally:
        charge.release.set()
    outcome = await asyncio.wait_for(cancelling, HANG)
    await running

    assert outcome.interrupt is not None and outcome.checkpoint_id is not None
    done = await runner.invoke_resume(outcome.checkpoint_id)
    assert done.output is not None and done.output.content == "paid"
    assert charge.started == ["card"]
    assert _seen(inner_model)[-1] == ("tool", "charged card")


async def test_a_sync_call_a_cancel_stopped_before_it_started_runs_once_on_resume() -> None:
    charge = Blocking()
    charge.release.set()
    model = rk.ScriptedModel([asks(call("c1", "charge", "card")), Message.assistant("paid")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[charge.tool]))
    handle = runner.query("pay")
    outcome = None
    async for ev in handle:
        if ev.message is not None and ev.message.tool_calls:
            outcome = await handle.cancel(CancelMode.IMMEDIATE)
    assert outcome is not None and outcome.interrupt is not None
    assert point_addresses(outcome.interrupt) == [["agent:helper", "tool:charge:c1"]]
    assert charge.started == []

    assert outcome.checkpoint_id is not None
    await runner.invoke_resume(outcome.checkpoint_id)
    assert charge.started == ["card"]


async def test_a_task_cancelled_from_outside_while_a_sync_tool_runs_still_propagates() -> None:
    # Not a cancel of the run (D9): the cancellation propagates at once and nothing is saved.
    charge = Blocking()
    model = rk.ScriptedModel([asks(call("c1", "charge", "card")), Message.assistant("paid")])
    runner = _runner(rk.ChatModelAgent("helper", model=model, tools=[charge.tool]))
    events: list[AgentEvent] = []

    async def consume() -> None:
        async for ev in runner.query("pay"):
            events.append(ev)

    consumer = asyncio.ensure_future(consume())
    try:
        await charge.wait_entered()
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
    finally:
        charge.release.set()
    assert not any(ev.action is not None and ev.action.interrupted for ev in events)
