"""PlanExecute: a planner model makes a plan, an executor agent carries out its steps one by one,
a replanner model revises the plan or answers (docs/plan-execute.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from relaykit._aio import closing, ended_with, must_propagate, thrown_into_us
from relaykit._cancel import CallCut
from relaykit.agent import Agent, AgentInput
from relaykit.agents._hooks import model_reply
from relaykit.agents._plan_prompts import (
    EXECUTOR_PROMPT,
    PLAN_TOOL,
    PLANNER_INSTRUCTION,
    REPLANNER_INSTRUCTION,
    REPLANNER_PROMPT,
    RESPOND_TOOL,
    objective_of,
    render_past_steps,
    render_steps,
)
from relaykit.agents._tool_calls import with_unique_call_ids
from relaykit.codec import register_type
from relaykit.context import RecordedEvent, RunContext, RunHistory
from relaykit.errors import ConfigurationError, RelayKitError
from relaykit.events import AgentEvent
from relaykit.flow import FlowAgent, as_flow_agent
from relaykit.interrupts import (
    AddressSegment,
    ResumeInfo,
    composite_interrupt,
    interrupt_of,
    stateful_interrupt,
)
from relaykit.messages import Message, ToolCall
from relaykit.models.base import ChatModel, ModelRequest, ToolSpec

__all__ = [
    "FINAL_ANSWER_KEY",
    "PAST_STEPS_KEY",
    "PLAN_KEY",
    "PlanExecute",
    "PlanExecuteError",
    "PlanExecuteState",
]

#: The session value holding the steps still to do (``list[str]``, the current step first).
PLAN_KEY = "plan"
#: The session value holding the completed steps (``list[{"step": str, "result": str}]``).
PAST_STEPS_KEY = "past_steps"
#: The session value holding the final answer (``str``).
FINAL_ANSWER_KEY = "final_answer"


class PlanExecuteError(RelayKitError):
    """The planner or the replanner gave a reply ``PlanExecute`` cannot use: no tool call, an
    unknown tool, several calls, or arguments that do not match the tool's schema.

    >>> issubclass(PlanExecuteError, RelayKitError)
    True
    """


@register_type("relaykit.PlanExecuteState")
@dataclass(slots=True)
class PlanExecuteState:
    """Where a ``PlanExecute`` run paused: inside the executor, at one step; or, stopped by a
    cancel (D26), before the planner's or the replanner's model call (``resume_at``).

    >>> state = PlanExecuteState("Compare Paris and Rome.", ["Find Rome's population."],
    ...                          [{"step": "Find Paris' population.", "result": "2.1M"}], 1)
    >>> state.plan[0], state.round, state.resume_at
    ("Find Rome's population.", 1, 'step')
    """

    #: The request the plan serves (what the executor and the replanner read).
    objective: str
    #: The steps still to do; the first one is the interrupted step (at ``"replan"``: the
    #: step just done, as the replanner last set the plan; at ``"plan"``: empty).
    plan: list[str]
    #: The completed steps and their results.
    past_steps: list[dict[str, str]]
    #: The execute-replan round (0-based) the interrupted step belongs to (at ``"replan"``:
    #: the round of the step just done).
    round: int
    #: The events the executor recorded during the interrupted step (its own history).
    step_events: list[AgentEvent] = field(default_factory=list)
    #: What the resume does first: ``"step"`` continues the executor's step (``plan[0]``);
    #: ``"plan"`` asks the planner, whose call a cancel stopped before it replied;
    #: ``"replan"`` asks the replanner about the step just done (the last of
    #: ``past_steps``), whose call a cancel stopped before it replied. A state saved before
    #: this field existed loads as ``"step"``.
    resume_at: Literal["step", "plan", "replan"] = "step"
    #: At ``"plan"``: the conversation the planner is asked about (the agent's input).
    messages: list[Message] = field(default_factory=list)


@dataclass(slots=True)
class _Decision:
    """A planner's or replanner's valid decision: its call and what the call says."""

    call: ToolCall
    kind: Literal["plan", "respond"]
    steps: list[str]
    response: str


class _PlanExecuteCore:
    """The agent ``PlanExecute``'s flow agent wraps: plans, runs the steps, replans."""

    def __init__(
        self,
        name: str,
        description: str,
        planner: ChatModel,
        replanner: ChatModel,
        max_steps: int,
    ) -> None:
        self.name = name
        self.description = description
        self.planner = planner
        self.replanner = replanner
        self.max_steps = max_steps
        self.executor: FlowAgent | None = None  # set by PlanExecute

    def run(self, ctx: RunContext, input: AgentInput, **options: Any) -> AsyncIterator[AgentEvent]:
        return self._plan(ctx, list(input.messages), bool(input.enable_streaming), options)

    def resume(
        self, ctx: RunContext, info: ResumeInfo, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        state = info.interrupt_state
        if isinstance(state, PlanExecuteState):
            if state.resume_at == "plan":
                return self._plan(ctx, list(state.messages), info.enable_streaming, options)
            if state.plan and (state.resume_at == "step" or state.past_steps):
                return self._rounds(
                    ctx,
                    state.objective,
                    list(state.plan),
                    list(state.past_steps),
                    state.round,
                    info.enable_streaming,
                    (info, state.step_events) if state.resume_at == "step" else None,
                    options,
                    replan=state.resume_at == "replan",
                )
        return _error(
            ConfigurationError(
                f"PlanExecute {self.name!r} cannot resume from an interrupt state of type "
                f"{type(state).__name__} (expected a PlanExecuteState with a current step, or "
                "one stopped before the planner's or the replanner's call)"
            )
        )

    async def _plan(
        self, ctx: RunContext, messages: list[Message], streaming: bool, options: dict[str, Any]
    ) -> AsyncIterator[AgentEvent]:
        """Ask the planner about ``messages``, then run the rounds of its plan."""
        objective = objective_of(messages)
        cancel = ctx.options.cancel
        reply: Message | None = None
        if cancel is None or cancel.mode is None or not cancel.stops_before_model():
            request = ModelRequest([Message.system(PLANNER_INSTRUCTION), *messages], [PLAN_TOOL])
            reply = await self._ask(ctx, self.planner, request)
        if reply is None:
            # D26: a cancel stopped the planner's call (before it started, or cut it): the
            # resume asks the planner again.
            assert cancel is not None
            state = PlanExecuteState(objective, [], [], 0, resume_at="plan", messages=messages)
            yield stateful_interrupt(ctx, cancel.info(), state)
            return
        yield AgentEvent.from_message(reply)
        try:
            decision = self._decide(reply, "planner", (PLAN_TOOL,))
        except PlanExecuteError as exc:
            yield AgentEvent(error=exc)
            return
        ctx.set_session_value(PLAN_KEY, list(decision.steps))
        ctx.set_session_value(PAST_STEPS_KEY, [])
        yield _result(decision.call, f"plan set:\n{render_steps(decision.steps)}")
        rounds = self._rounds(ctx, objective, decision.steps, [], 0, streaming, None, options)
        async with closing(rounds) as events:
            async for ev in events:
                yield ev

    async def _rounds(
        self,
        ctx: RunContext,
        objective: str,
        plan: list[str],
        past: list[dict[str, str]],
        round: int,
        streaming: bool,
        resume: tuple[ResumeInfo, list[AgentEvent]] | None,
        options: dict[str, Any],
        *,
        replan: bool = False,
    ) -> AsyncIterator[AgentEvent]:
        """Execute-replan rounds from ``round`` on: the first one's step resumed when
        ``resume``; with ``replan``, that step is done (the last of ``past``) and the rounds
        start with the replanner's decision on it."""
        executor = self.executor
        assert executor is not None
        cancel = ctx.options.cancel
        while True:
            if replan:
                # The replanner decides on the step just done (the last of ``past``).
                reply: Message | None = None
                if cancel is None or cancel.mode is None or not cancel.stops_before_model():
                    reply = await self._ask(
                        ctx, self.replanner, _replan_request(objective, plan, past)
                    )
                if reply is None:
                    # D26: a cancel stopped the replanner's call (before it started, or cut
                    # it): the step stays done, and the resume asks the replanner again.
                    assert cancel is not None
                    state = PlanExecuteState(objective, plan, past, round, resume_at="replan")
                    yield stateful_interrupt(ctx, cancel.info(), state)
                    return
                yield AgentEvent.from_message(reply)
                try:
                    decision = self._decide(reply, "replanner", (PLAN_TOOL, RESPOND_TOOL))
                except PlanExecuteError as exc:
                    yield AgentEvent(error=exc)
                    return
                if decision.kind == "respond":
                    yield _result(decision.call, "final answer given")
                    async for ev in self._finish(ctx, decision.response):
                        yield ev
                    return
                plan = decision.steps
                ctx.set_session_value(PLAN_KEY, list(plan))
                round += 1
                if round >= self.max_steps:
                    yield _result(
                        decision.call,
                        f"max_steps={self.max_steps} reached: the plan is not carried out "
                        "further; the last step's result is the answer",
                    )
                    async for ev in self._finish(ctx, past[-1]["result"]):
                        yield ev
                    return
                yield _result(decision.call, f"plan updated:\n{render_steps(plan)}")
            replan = True
            step = plan[0]
            prompt = EXECUTOR_PROMPT.format(
                objective=objective,
                plan=render_steps(plan),
                past_steps=render_past_steps(past),
                step=step,
            )
            saved = resume[1] if resume is not None else []
            lane = RunHistory(ctx.history.values, [RecordedEvent(e) for e in saved])
            step_ctx = ctx.derive(
                history=lane, root_input=AgentInput([Message.user(prompt)], streaming)
            )
            if resume is not None:
                gen = executor.resume(step_ctx, _child_resume(ctx, executor, resume[0]), **options)
                resume = None
            else:
                # A cancel pending here stops the executor before it starts (its flow agent
                # interrupts with NotStarted, D26); the resume starts it.
                gen = executor.run(step_ctx, None, **options)
            # The step's last message (its result), possibly from before an interrupt.
            last_output = next((e for e in reversed(saved) if e.output is not None), None)
            last: AgentEvent | None = None
            try:
                async with closing(gen):
                    async for ev in gen:
                        a = ev.action
                        if a is None or a.interrupted is None:
                            ctx.history.record(ev)  # the run's history has the step too
                        last = ev
                        if ev.output is not None:
                            last_output = ev
                        if interrupt_of(ev) is not None:
                            continue  # becomes our composite interrupt below
                        yield ev
                        if ev.error is not None:
                            return  # an error in a step ends the run (as in workflows, D17)
            except BaseException as exc:
                # D24: the executor ending with CancelledError, GeneratorExit... is its error
                # event; cancellation from outside and our own closing propagate.
                if must_propagate(exc) or thrown_into_us(exc):
                    raise
                what = f"agent '{executor.name}'"
                yield AgentEvent(executor.name, ctx.run_path, error=ended_with(exc, what))
                return
            if last is not None and interrupt_of(last) is not None:
                state = PlanExecuteState(
                    objective, plan, past, round, [r.event for r in lane.events]
                )
                info = f"plan-execute interrupted at step {len(past) + 1}: {step}"
                event = composite_interrupt(ctx, info, state, last)
                # Reported as the interrupted executor's event (as workflows do).
                event.agent_name, event.run_path = last.agent_name, last.run_path
                yield event
                return
            if last is not None and last.action is not None and last.action.exit:
                return  # the executor ended the whole flow
            out = last_output.output if last_output is not None else None
            message = await out.get_message() if out is not None else None
            result = message.content if message is not None else ""
            past = [*past, {"step": step, "result": result}]
            ctx.set_session_value(PAST_STEPS_KEY, [dict(p) for p in past])

    async def _finish(self, ctx: RunContext, answer: str) -> AsyncIterator[AgentEvent]:
        ctx.set_session_value(FINAL_ANSWER_KEY, answer)
        yield AgentEvent.from_message(Message.assistant(answer))

    async def _ask(
        self, ctx: RunContext, model: ChatModel, request: ModelRequest
    ) -> Message | None:
        """The model's reply, through the plugins' model hooks when the Runner has any; None
        when an immediate cancel of the run cut the call (D26: nothing of it is kept)."""
        cancel = ctx.options.cancel
        if cancel is None:
            return await self._reply(ctx, model, request)
        try:
            with cancel.cut_point():
                reply = await self._reply(ctx, model, request)
        except CallCut:
            return None
        if cancel.mode is not None:
            # A reply arrived after the cancel: with AFTER_MODEL that was the safe point, and
            # no agent of the run starts another model call.
            cancel.replied = True
        return reply

    async def _reply(self, ctx: RunContext, model: ChatModel, request: ModelRequest) -> Message:
        inv = ctx.options.invocation
        reply: Message | None = None
        if inv is not None and inv.plugins:
            reply = await model_reply(inv, self.name, model, request)
        if reply is None:
            reply = await model.generate(request)
        return with_unique_call_ids(reply)

    def _decide(self, reply: Message, who: str, tools: tuple[ToolSpec, ...]) -> _Decision:
        """The decision ``reply`` makes, or a ``PlanExecuteError`` saying what is wrong."""
        names = " or ".join(f"'{t.name}'" for t in tools)
        where = f"PlanExecute {self.name!r}: the {who}"
        calls = reply.tool_calls
        if not calls:
            text = reply.content if len(reply.content) <= 200 else reply.content[:200] + "…"
            raise PlanExecuteError(
                f"{where} replied without calling a tool (it must call {names}); "
                f"its reply: {text!r}"
            )
        if len(calls) > 1:
            raise PlanExecuteError(
                f"{where} called {len(calls)} tools ({', '.join(c.name for c in calls)}); it "
                f"must call exactly one, {names}"
            )
        call = calls[0]
        if call.name not in {t.name for t in tools}:
            raise PlanExecuteError(f"{where} called an unexpected tool {call.name!r} (not {names})")
        try:
            args = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as exc:
            raise PlanExecuteError(
                f"{where} called {call.name!r} with arguments that are not JSON: {exc}"
            ) from None
        if not isinstance(args, dict):
            raise PlanExecuteError(
                f"{where} called {call.name!r} with arguments that are not an object"
            )
        if call.name == RESPOND_TOOL.name:
            response = args.get("response")
            if not isinstance(response, str):
                raise PlanExecuteError(f"{where} called 'respond' without a string 'response'")
            return _Decision(call, "respond", [], response)
        steps = args.get("steps")
        if (
            not isinstance(steps, list)
            or not steps
            or not all(isinstance(s, str) and s.strip() for s in steps)
        ):
            finish = " (to finish, it calls 'respond')" if who == "replanner" else ""
            raise PlanExecuteError(
                f"{where} called 'plan' without 'steps' as a non-empty list of non-empty "
                f"strings{finish}: {call.arguments[:200]!r}"
            )
        return _Decision(call, "plan", list(steps), "")


def _result(call: ToolCall, text: str) -> AgentEvent:
    """The tool result answering a decision call (so the history pairs every call)."""
    return AgentEvent.from_message(Message.tool(text, tool_call_id=call.id, tool_name=call.name))


def _replan_request(objective: str, plan: list[str], past: list[dict[str, str]]) -> ModelRequest:
    """The replanner's request after a step: the objective, the plan it last set (the step
    just done first) and every completed step with its result."""
    prompt = REPLANNER_PROMPT.format(
        objective=objective, plan=render_steps(plan), past_steps=render_past_steps(past)
    )
    return ModelRequest(
        [Message.system(REPLANNER_INSTRUCTION), Message.user(prompt)], [PLAN_TOOL, RESPOND_TOOL]
    )


def _child_resume(ctx: RunContext, sub: FlowAgent, info: ResumeInfo) -> ResumeInfo:
    """The executor's own interrupt info for its resume (not the plan-execute composite's)."""
    state = ctx.resume_state
    own = (
        state.interrupt_below((*ctx.address, AddressSegment("agent", sub.name)))
        if state is not None
        else None
    )
    return ResumeInfo(info.enable_streaming, own if own is not None else info.interrupt_info)


async def _error(exc: Exception) -> AsyncIterator[AgentEvent]:
    yield AgentEvent(error=exc)


class PlanExecute(FlowAgent):
    """Plan, execute, replan: a planner model breaks the request into steps, the executor agent
    carries out the first remaining step, the replanner model revises the rest of the plan or
    gives the final answer; until it answers or ``max_steps`` rounds have run.

    Session values: ``plan`` (the steps still to do), ``past_steps`` (``{"step", "result"}``
    for each step done, the result being the executor's last message), ``final_answer``.
    The planner's and replanner's decisions are events of this agent (their tool call, then a
    tool result); the executor's events are its own. An interrupt inside the executor pauses
    the whole agent; the resume continues that step. A cancel of the run (D26) treats the
    planner's and the replanner's calls as a chat agent's model calls: an immediate one cuts
    the call, the resume makes it again. Prompts: docs/plan-execute.md.

    >>> import asyncio
    >>> import relaykit as rk
    >>> def call(name, args):
    ...     return rk.Message.assistant("", [rk.ToolCall("c1", name, args)])
    >>> planner = rk.ScriptedModel([call("plan", '{"steps": ["Find the answer."]}')])
    >>> replanner = rk.ScriptedModel([call("respond", '{"response": "It is 42."}')])
    >>> executor = rk.ChatModelAgent("executor", model=rk.ScriptedModel(
    ...     [rk.Message.assistant("The answer is 42.")]))
    >>> agent = PlanExecute(planner, executor, replanner)
    >>> result = asyncio.run(rk.Runner(agent).invoke("What is the answer?"))
    >>> [(ev.agent_name, ev.output.role) for ev in result.events]  # doctest: +NORMALIZE_WHITESPACE
    [('plan_execute', 'assistant'), ('plan_execute', 'tool'), ('executor', 'assistant'),
     ('plan_execute', 'assistant'), ('plan_execute', 'tool'), ('plan_execute', 'assistant')]
    >>> result.output.content
    'It is 42.'

    Args:
        planner: the model that makes the plan; it is offered the ``plan`` tool
            (``{"steps": [str]}``) and must call it.
        executor: the agent that carries out one step at a time (typically a
            ``ChatModelAgent`` with tools); it receives one user message naming the
            objective, the plan, the completed steps and its step.
        replanner: the model that decides after each step; it is offered ``plan`` (the steps
            that remain) and ``respond`` (``{"response": str}``, the final answer) and must
            call one of them.
        max_steps: the most execute-replan rounds (an int >= 1). When the last one ends
            without ``respond``, the last step's result is the answer (not an error).
        name: the agent's name, unique in its tree.
        description: what the agent does (an LLM agent that may transfer to it reads it).
    """

    def __init__(
        self,
        planner: ChatModel,
        executor: Agent,
        replanner: ChatModel,
        *,
        max_steps: int = 10,
        name: str = "plan_execute",
        description: str = "",
    ) -> None:
        if not name:
            raise ConfigurationError("PlanExecute needs a non-empty name")
        for role, model in (("planner", planner), ("replanner", replanner)):
            if not isinstance(model, ChatModel):
                raise ConfigurationError(
                    f"PlanExecute {name!r}: the {role} must be a ChatModel (with generate and "
                    f"stream), not {type(model).__name__}"
                )
        if not isinstance(executor, Agent):
            raise ConfigurationError(
                f"PlanExecute {name!r}: the executor must be an agent, not "
                f"{type(executor).__name__}"
            )
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ConfigurationError(f"PlanExecute {name!r}: max_steps must be an int >= 1")
        if executor.name == name:
            raise ConfigurationError(
                f"PlanExecute {name!r}: the executor needs a name of its own (names are unique "
                "in a tree)"
            )
        core = _PlanExecuteCore(name, description, planner, replanner, max_steps)
        super().__init__(core)
        sub = as_flow_agent(executor, disallow_transfer_to_parent=True)
        if sub.parent is not None:
            raise ConfigurationError(
                f"agent {sub.name!r} has already been set as a sub-agent of {sub.parent.name!r}"
            )
        sub.parent = self
        self.sub_agents = [sub]
        core.executor = sub
        #: The model that makes the plan.
        self.planner = planner
        #: The executor, as the flow agent that runs it.
        self.executor = sub
        #: The model that revises the plan or answers after each step.
        self.replanner = replanner
        #: The most execute-replan rounds.
        self.max_steps = max_steps
