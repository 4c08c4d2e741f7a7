"""Cancelling a ``PlanExecute`` run (D26): its planner's and replanner's model calls are cut by
an immediate cancel and are safe points of the other modes, like a chat agent's model calls;
the pause is kept in its ``PlanExecuteState``, and the resume finishes the run exactly once --
no finished step, kept plan or kept decision is made again."""

from __future__ import annotations

import asyncio
import json
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
    ToolCall,
    codec,
)
from relaykit.agents.planexecute import PlanExecuteState
from relaykit.checkpoints.document import decode_checkpoint
from relaykit.sessions import SessionEvent
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

PE = "plan_execute"
OBJECTIVE = "Do both steps."
PLAN_SET = "plan set:\n1. Step one.\n2. Step two."
PLAN_UPDATED = "plan updated:\n1. Step two."


def decide(tool: str, **args: Any) -> Message:
    """A planner's or replanner's reply calling ``tool``."""
    return Message.assistant("", [ToolCall("d1", tool, json.dumps(args))])


class Setup:
    """A two-step plan: the planner plans both steps, the executor (a chat agent) runs one
    ``work`` tool call per step and answers, the replanner keeps step two, then answers.
    Each model may hold the calls numbered in its ``gated`` (1 = its first call); the tool
    waits at ``tool`` when given."""

    def __init__(
        self,
        *,
        planner: tuple[int, ...] = (),
        executor: tuple[int, ...] = (),
        replanner: tuple[int, ...] = (),
        tool: Gate | None = None,
        plugins: tuple[rk.Plugin, ...] = (),
    ) -> None:
        self.work = Counter("work", tool)
        self.planner = GatedModel([decide("plan", steps=["Step one.", "Step two."])], planner)
        self.executor = GatedModel(
            [
                asks(call("t1", "work", "one")),
                Message.assistant("did one"),
                asks(call("t2", "work", "two")),
                Message.assistant("did two"),
            ],
            executor,
        )
        self.replanner = GatedModel(
            [decide("plan", steps=["Step two."]), decide("respond", response="all done")],
            replanner,
        )
        worker = rk.ChatModelAgent("worker", model=self.executor, tools=[self.work.tool])
        self.agent = rk.PlanExecute(self.planner, worker, self.replanner)
        self.store = rk.InMemoryCheckpointStore()
        self.runner = rk.Runner(self.agent, checkpoint_store=self.store, plugins=plugins)

    def assert_finished_once(self, done: rk.RunResult) -> None:
        """The run answered, and every model reply and tool call it needed happened once."""
        assert done.interrupt is None and done.output is not None
        assert done.output.content == "all done"
        assert self.work.started == ["one", "two"] and self.work.finished == ["one", "two"]
        assert len(self.executor.requests) == 4
        assert len(self.planner.requests) == 1 and len(self.replanner.requests) == 2

    async def state(self, checkpoint_id: str | None) -> PlanExecuteState:
        """The plan-execute state kept in the stored checkpoint (decoded from its bytes)."""
        assert checkpoint_id is not None
        data = await self.store.get(checkpoint_id)
        assert data is not None
        _, info = decode_checkpoint(data)
        top = info.top()
        assert top is not None and [str(s) for s in top.address] == [f"agent:{PE}"]
        assert isinstance(top.state, PlanExecuteState)
        return top.state


async def _cancel_at(
    handle: RunHandle, when: Any, mode: CancelMode
) -> tuple[list[AgentEvent], CancelOutcome]:
    """Iterate ``handle``; cancel (from the loop body) at the first event ``when`` accepts."""
    events, outcome = await cancel_at(handle, when, mode)
    assert outcome is not None
    return events, outcome


async def _cancel_in_call(
    handle: RunHandle, gate: Gate, mode: CancelMode = CancelMode.IMMEDIATE
) -> tuple[CancelOutcome, rk.RunResult]:
    """Run ``handle`` to its end; once a call waits at ``gate``, cancel with ``mode``, then
    open the gate (an immediate cancel has cut the call by then; the other modes wait for its
    reply). The cancel's outcome and the run's result."""
    running = asyncio.ensure_future(handle.result())
    await gate.entered.wait()
    cancelling = asyncio.ensure_future(handle.cancel(mode))
    await asyncio.sleep(0)
    gate.opened.set()
    return await cancelling, await running


def _says(text: str) -> Any:
    return lambda ev: ev.message is not None and ev.message.content == text


def _own_point(info: rk.InterruptInfo, mode: CancelMode) -> None:
    """The pause is the plan-execute agent's own point, its info the cancel's."""
    assert info.data == Cancelled(mode)
    assert point_addresses(info) == [[f"agent:{PE}"]]
    assert [p.info for p in info.contexts] == [Cancelled(mode)]


# -- the planner's call ------------------------------------------------------------------------
async def test_an_immediate_cancel_cuts_the_planner_call_and_the_resume_plans_once() -> None:
    s = Setup(planner=(1,))
    # The planner's call is in progress when the cancel comes.
    outcome, result = await _cancel_in_call(s.runner.query(OBJECTIVE), s.planner.gate)

    assert not outcome.already_ended and outcome.checkpoint_id is not None
    assert result.interrupt is not None and result.interrupt == outcome.interrupt
    _own_point(result.interrupt, CancelMode.IMMEDIATE)
    assert texts(result.events) == []  # the cut reply is not delivered
    assert s.planner.requests == [] and s.executor.calls == 0 and s.replanner.calls == 0
    state = await s.state(outcome.checkpoint_id)
    assert state.resume_at == "plan" and state.plan == [] and state.past_steps == []
    assert [(m.role, m.content) for m in state.messages] == [("user", OBJECTIVE)]

    done = await s.runner.invoke_resume(outcome.checkpoint_id)
    s.assert_finished_once(done)
    assert s.planner.calls == 2  # the cut call, then the resume's
    assert [(m.role, m.content) for m in s.planner.requests[0].messages[1:]] == [
        ("user", OBJECTIVE)
    ]
    assert texts(done.events)[:2] == [(PE, "assistant", ""), (PE, "tool", PLAN_SET)]


@pytest.mark.parametrize("mode", [CancelMode.AFTER_MODEL, CancelMode.AFTER_TOOLS])
async def test_a_cancel_during_the_planner_call_keeps_the_plan_and_stops_before_step_one(
    mode: CancelMode,
) -> None:
    s = Setup(planner=(1,))
    outcome, result = await _cancel_in_call(s.runner.query(OBJECTIVE), s.planner.gate, mode)

    assert result.interrupt is not None and result.interrupt.data == Cancelled(mode)
    # The plan is kept; the executor never started: the resume starts it.
    assert texts(result.events) == [(PE, "assistant", ""), (PE, "tool", PLAN_SET)]
    assert point_addresses(result.interrupt) == [[f"agent:{PE}", "agent:worker"]]
    assert s.executor.calls == 0 and s.work.started == []

    done = await s.runner.invoke_resume(outcome.checkpoint_id)
    s.assert_finished_once(done)
    assert s.planner.calls == 1  # the plan was not asked for again
    assert texts(done.events)[0] == ("worker", "assistant", "")


# -- the end of a step and the replanner's call -------------------------------------------------
async def test_an_immediate_cancel_cuts_the_replanner_call_and_keeps_the_step_done() -> None:
    s = Setup(replanner=(1,))
    # Step one is done; the replanner is deciding on it when the cancel comes.
    outcome, result = await _cancel_in_call(s.runner.query(OBJECTIVE), s.replanner.gate)

    assert result.interrupt is not None
    _own_point(result.interrupt, CancelMode.IMMEDIATE)
    assert texts(result.events)[-1] == ("worker", "assistant", "did one")
    assert s.work.finished == ["one"] and s.replanner.requests == []
    state = await s.state(outcome.checkpoint_id)
    assert state.resume_at == "replan" and state.round == 0
    assert state.plan == ["Step one.", "Step two."]
    assert state.past_steps == [{"step": "Step one.", "result": "did one"}]

    done = await s.runner.invoke_resume(outcome.checkpoint_id)
    s.assert_finished_once(done)  # step one did not run again
    assert s.replanner.calls == 3 and s.planner.calls == 1
    assert texts(done.events)[:2] == [(PE, "assistant", ""), (PE, "tool", PLAN_UPDATED)]
    # The resumed replanner call is the one that was cut: it decides on step one.
    assert "1. Step one.\n   Result: did one" in s.replanner.requests[0].messages[1].content


@pytest.mark.parametrize("mode", [CancelMode.AFTER_MODEL, CancelMode.AFTER_TOOLS])
async def test_a_cancel_during_the_replanner_call_keeps_its_plan_and_stops_before_the_next_step(
    mode: CancelMode,
) -> None:
    s = Setup(replanner=(1,))
    outcome, result = await _cancel_in_call(s.runner.query(OBJECTIVE), s.replanner.gate, mode)

    assert result.interrupt is not None and result.interrupt.data == Cancelled(mode)
    assert texts(result.events)[-2:] == [(PE, "assistant", ""), (PE, "tool", PLAN_UPDATED)]
    assert point_addresses(result.interrupt) == [[f"agent:{PE}", "agent:worker"]]
    assert s.work.started == ["one"] and len(s.executor.requests) == 2

    done = await s.runner.invoke_resume(outcome.checkpoint_id)
    s.assert_finished_once(done)
    assert s.replanner.calls == 2  # the kept decision was not asked for again


@pytest.mark.parametrize("mode", list(CancelMode))
async def test_a_cancel_as_a_step_ends_stops_before_the_replanner(mode: CancelMode) -> None:
    s = Setup()
    # The executor's answer to step one is delivered; the caller cancels there (with
    # AFTER_MODEL, that reply is the safe point, as for a chat agent).
    events, outcome = await _cancel_at(s.runner.query(OBJECTIVE), _says("did one"), mode)

    _own_point(last_interrupt(events), mode)
    assert s.replanner.calls == 0  # it does not decide on the step (nor end the run)
    assert (await s.state(outcome.checkpoint_id)).resume_at == "replan"

    done = await s.runner.invoke_resume(outcome.checkpoint_id)
    s.assert_finished_once(done)


async def test_an_after_model_cancel_in_the_steps_last_model_call_stops_before_the_replanner() -> (
    None
):
    s = Setup(executor=(2,))  # the executor's answer to step one is held
    outcome, result = await _cancel_in_call(
        s.runner.query(OBJECTIVE), s.executor.gate, CancelMode.AFTER_MODEL
    )

    # That reply was the safe point: no model call after it, the replanner's neither.
    assert result.interrupt is not None
    _own_point(result.interrupt, CancelMode.AFTER_MODEL)
    assert texts(result.events)[-1] == ("worker", "assistant", "did one")
    assert s.replanner.calls == 0

    done = await s.runner.invoke_resume(outcome.checkpoint_id)
    s.assert_finished_once(done)


@pytest.mark.parametrize("mode", list(CancelMode))
@pytest.mark.parametrize("after", [PLAN_SET, PLAN_UPDATED])
async def test_a_cancel_between_rounds_stops_before_the_next_step(
    mode: CancelMode, after: str
) -> None:
    s = Setup()
    events, outcome = await _cancel_at(s.runner.query(OBJECTIVE), _says(after), mode)

    info = last_interrupt(events)
    assert info.data == Cancelled(mode)
    assert point_addresses(info) == [[f"agent:{PE}", "agent:worker"]]
    assert texts(events)[-1] == (PE, "tool", after)
    steps_done = 0 if after == PLAN_SET else 1
    assert len(s.executor.requests) == 2 * steps_done
    assert len(s.replanner.requests) == steps_done

    done = await s.runner.invoke_resume(outcome.checkpoint_id)
    s.assert_finished_once(done)


async def test_a_resume_cancelled_before_it_starts_pauses_at_the_planner_again() -> None:
    s = Setup(planner=(1,))
    first, _ = await _cancel_in_call(s.runner.query(OBJECTIVE), s.planner.gate)

    resumed = s.runner.resume(first.checkpoint_id)
    second = await resumed.cancel(CancelMode.AFTER_TOOLS)  # before the planner's call
    assert [ev async for ev in resumed][-1].action is not None

    assert second.checkpoint_id is not None and s.planner.calls == 1
    assert second.interrupt is not None
    _own_point(second.interrupt, CancelMode.AFTER_TOOLS)
    assert (await s.state(second.checkpoint_id)).resume_at == "plan"
    done = await s.runner.invoke_resume(second.checkpoint_id)
    s.assert_finished_once(done)
    assert s.planner.calls == 2


async def test_a_timeout_escalates_and_cuts_a_replanner_call_that_hangs() -> None:
    s = Setup(replanner=(1,))
    handle = s.runner.query(OBJECTIVE)
    running = asyncio.ensure_future(handle.result())
    await s.replanner.gate.entered.wait()  # never opened: the call hangs

    outcome = await handle.cancel(CancelMode.AFTER_TOOLS, timeout=0.05)
    result = await running

    assert outcome.timed_out and result.interrupt is not None
    assert result.interrupt.data == Cancelled(CancelMode.AFTER_TOOLS, escalated=True)
    assert (await s.state(outcome.checkpoint_id)).resume_at == "replan"
    done = await s.runner.invoke_resume(outcome.checkpoint_id)
    s.assert_finished_once(done)


async def test_an_immediate_cancel_in_a_step_cuts_the_executor_and_the_resume_continues_it() -> (
    None
):
    gate = Gate()
    s = Setup(tool=gate)
    # Step one's tool call is in progress when the cancel comes.
    outcome, result = await _cancel_in_call(s.runner.query(OBJECTIVE), gate)

    assert result.interrupt is not None and s.work.cut == ["one"]
    assert point_addresses(result.interrupt) == [[f"agent:{PE}", "agent:worker", "tool:work:t1"]]
    assert (await s.state(outcome.checkpoint_id)).resume_at == "step"
    s.work.gate = None
    done = await s.runner.invoke_resume(outcome.checkpoint_id)
    assert done.output is not None and done.output.content == "all done"
    assert s.work.started == ["one", "one", "two"]  # the cut call ran again, from the start
    assert s.work.finished == ["one", "two"] and len(s.executor.requests) == 4
    assert len(s.planner.requests) == 1 and len(s.replanner.requests) == 2


class ModelHooks(rk.Plugin):
    """Records the model hooks the plan-execute agent's calls go through."""

    def __init__(self) -> None:
        super().__init__("model-hooks")
        self.log: list[tuple[str, str]] = []

    async def before_model(
        self, ctx: rk.InvocationContext, agent_name: str, request: rk.ModelRequest
    ) -> Message | None:
        self.log.append(("before", agent_name))
        return None

    async def after_model(
        self, ctx: rk.InvocationContext, agent_name: str, response: Message
    ) -> Message | None:
        self.log.append(("after", agent_name))
        return None


async def test_an_immediate_cancel_cuts_a_planner_call_made_through_the_model_hooks() -> None:
    hooks = ModelHooks()
    s = Setup(planner=(1,), plugins=(hooks,))
    outcome, _ = await _cancel_in_call(s.runner.query(OBJECTIVE), s.planner.gate)

    assert hooks.log == [("before", PE)]  # the cut call never replied
    done = await s.runner.invoke_resume(outcome.checkpoint_id)
    s.assert_finished_once(done)
    assert hooks.log[:3] == [("before", PE), ("before", PE), ("after", PE)]


# -- after the end, and cancellation from outside -----------------------------------------------
async def test_a_cancel_after_the_run_ended_says_so() -> None:
    s = Setup()
    handle = s.runner.query(OBJECTIVE)
    s.assert_finished_once(await handle.result())

    assert await handle.cancel() == CancelOutcome(already_ended=True)
    assert (await handle.result()).events == []  # nothing ran again
    assert (s.planner.calls, s.executor.calls, s.replanner.calls) == (1, 4, 2)
    assert s.work.started == ["one", "two"]


async def test_an_after_model_cancel_in_the_final_decision_lets_the_run_end() -> None:
    s = Setup(replanner=(2,))  # the replanner's answer is held
    outcome, result = await _cancel_in_call(
        s.runner.query(OBJECTIVE), s.replanner.gate, CancelMode.AFTER_MODEL
    )

    assert outcome.already_ended and outcome.checkpoint_id is None
    s.assert_finished_once(result)


@pytest.mark.parametrize("held", ["planner", "replanner"])
async def test_a_task_cancellation_in_a_decision_call_propagates_and_saves_nothing(
    held: str,
) -> None:
    s = Setup(planner=(1,)) if held == "planner" else Setup(replanner=(1,))
    model = s.planner if held == "planner" else s.replanner
    running = asyncio.ensure_future(
        s.runner.run([Message.user(OBJECTIVE)], checkpoint_id="cp").result()
    )
    await model.gate.entered.wait()

    running.cancel()  # the task, not the run: not a pause (D9)
    with pytest.raises(asyncio.CancelledError):
        await running
    assert await s.store.get("cp") is None


# -- the stored state ---------------------------------------------------------------------------
def test_the_state_round_trips_through_the_codec_and_old_states_still_load() -> None:
    state = PlanExecuteState(
        OBJECTIVE,
        [],
        [],
        0,
        resume_at="plan",
        messages=[Message.system("Be brief."), Message.user(OBJECTIVE)],
    )
    assert codec.loads(codec.dumps(state, kind="test"), kind="test") == state
    replan = PlanExecuteState(
        OBJECTIVE, ["Step one."], [{"step": "Step one.", "result": "ok"}], 2, resume_at="replan"
    )
    assert codec.loads(codec.dumps(replan, kind="test"), kind="test") == replan

    # A state stored before ``resume_at`` and ``messages`` existed loads as a step's pause.
    old = json.loads(codec.dumps(PlanExecuteState(OBJECTIVE, ["Step two."], [], 1), kind="test"))
    data = old["payload"]["data"]
    del data["resume_at"], data["messages"]
    loaded = codec.loads(json.dumps(old).encode(), kind="test")
    assert loaded == PlanExecuteState(OBJECTIVE, ["Step two."], [], 1)
    assert loaded.resume_at == "step" and loaded.messages == []

    bad = json.loads(codec.dumps(replan, kind="test"))
    bad["payload"]["data"]["resume_at"] = "later"
    with pytest.raises(rk.errors.SerializationError):
        codec.loads(json.dumps(bad).encode(), kind="test")


# -- session mode -------------------------------------------------------------------------------
APP, USER, SID = "desk", "u1", "s1"


async def _stored(service: Any) -> list[SessionEvent]:
    session = await service.get_session(APP, USER, SID)
    assert session is not None
    return list(session.events)


@pytest.mark.parametrize("held", ["planner", "replanner"])
async def test_a_cut_decision_call_pauses_the_session_and_resume_continues_it(
    service: Any, held: str
) -> None:
    s = Setup(planner=(1,)) if held == "planner" else Setup(replanner=(1,))
    model = s.planner if held == "planner" else s.replanner
    runner = rk.Runner(s.agent, app_name=APP, session_service=service)
    handle = runner.run([Message.user(OBJECTIVE)], user_id=USER, session_id=SID)
    outcome, _ = await _cancel_in_call(handle, model.gate)

    assert outcome.checkpoint_id is None and outcome.interrupt is not None  # kept with the session
    _own_point(outcome.interrupt, CancelMode.IMMEDIATE)
    assert await service.get_checkpoint(APP, USER, SID) is not None
    paused = await _stored(service)
    last = paused[-1].action
    assert last is not None and last.interrupted is not None
    assert last.interrupted.data == Cancelled(CancelMode.IMMEDIATE)
    assert not any(e.error for e in paused)

    done = await runner.invoke_resume(user_id=USER, session_id=SID)
    s.assert_finished_once(done)
    assert model.calls == (3 if held == "replanner" else 2)  # the cut call, then once each
    assert await service.get_checkpoint(APP, USER, SID) is None  # consumed
    stored = [(e.author, e.message.content) for e in await _stored(service) if e.message]
    assert stored == [
        ("user", OBJECTIVE),
        (PE, ""),
        (PE, PLAN_SET),
        ("worker", ""),
        ("worker", "work did one"),
        ("worker", "did one"),
        (PE, ""),
        (PE, PLAN_UPDATED),
        ("worker", ""),
        ("worker", "work did two"),
        ("worker", "did two"),
        (PE, ""),
        (PE, "final answer given"),
        (PE, "all done"),
    ]
    session = await service.get_session(APP, USER, SID)
    assert session is not None
    assert session.state["past_steps"] == [
        {"step": "Step one.", "result": "did one"},
        {"step": "Step two.", "result": "did two"},
    ]
    assert session.state["final_answer"] == "all done"
