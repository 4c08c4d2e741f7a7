"""Workflow agents: sequential, parallel and loop (docs/workflows.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from relaykit._aio import closing, ended_with, must_propagate, thrown_into_us
from relaykit.agent import Agent, AgentInput
from relaykit.codec import register_type
from relaykit.context import RecordedEvent, RunContext
from relaykit.errors import AbortedError, ConfigurationError
from relaykit.events import AgentEvent
from relaykit.flow import FlowAgent, as_flow_agent
from relaykit.interrupts import AddressSegment, ResumeInfo, composite_interrupt, interrupt_of

__all__ = [
    "LoopAgent",
    "LoopState",
    "ParallelAgent",
    "ParallelState",
    "SequentialAgent",
    "SequentialState",
]

Mode = Literal["sequential", "parallel", "loop"]
"""How a workflow runs its sub-agents."""


@register_type("relaykit.SequentialState")
@dataclass(slots=True)
class SequentialState:
    """Where a sequential workflow was interrupted (its interrupt state).

    >>> SequentialState(1).index
    1
    """

    #: The position of the interrupted sub-agent (0-based); the resume continues there.
    index: int


@register_type("relaykit.LoopState")
@dataclass(slots=True)
class LoopState:
    """Where a loop workflow was interrupted: iteration and sub-agent index.

    >>> LoopState(iteration=2, index=0)
    LoopState(iteration=2, index=0)
    """

    #: The iteration (0-based) the loop was in.
    iteration: int
    #: The position of the interrupted sub-agent (0-based) in that iteration.
    index: int


@register_type("relaykit.ParallelState")
@dataclass(slots=True)
class ParallelState:
    """A parallel workflow's interrupted branches and every branch's events so far.

    >>> ParallelState({"web": [], "docs": []}, ["docs"]).interrupted
    ['docs']
    """

    #: Each branch's recorded events so far, by sub-agent name (its history lane).
    lane_events: dict[str, list[AgentEvent]] = field(default_factory=dict)
    #: The sub-agents whose branch interrupted, in sub-agent order: they resume.
    interrupted: list[str] = field(default_factory=list)


def _child_resume(ctx: RunContext, sub: FlowAgent, info: ResumeInfo) -> ResumeInfo:
    """The ResumeInfo a resumed child receives: its own interrupt's info, not the
    workflow's (as Eino's workflows hand each child its own interrupt info)."""
    state = ctx.resume_state
    own = (
        state.interrupt_below((*ctx.address, AddressSegment("agent", sub.name)))
        if state is not None
        else None
    )
    return ResumeInfo(info.enable_streaming, own if own is not None else info.interrupt_info)


class _Workflow:
    """The agent a workflow's flow agent wraps: runs the sub-agents in its mode."""

    def __init__(self, name: str, description: str, mode: Mode, max_iterations: int) -> None:
        self.name = name
        self.description = description
        self.mode = mode
        self.max_iterations = max_iterations
        self.sub_agents: list[FlowAgent] = []

    def run(self, ctx: RunContext, input: AgentInput, **options: Any) -> AsyncIterator[AgentEvent]:
        if self.mode == "parallel":
            return self._parallel(ctx, None, options)
        return self._sequence(ctx, 0, 0, None, options)  # sequential or loop

    def resume(
        self, ctx: RunContext, info: ResumeInfo, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        state = info.interrupt_state
        if isinstance(state, SequentialState) and self.mode == "sequential":
            return self._sequence(ctx, 0, state.index, info, options)
        if isinstance(state, LoopState) and self.mode == "loop":
            return self._sequence(ctx, state.iteration, state.index, info, options)
        if isinstance(state, ParallelState) and self.mode == "parallel":
            return self._parallel(ctx, (state, info), options)
        return _error(
            ConfigurationError(
                f"workflow {self.name!r} ({self.mode}) cannot resume from an interrupt state of "
                f"type {type(state).__name__}"
            )
        )

    async def _sequence(
        self,
        ctx: RunContext,
        start_iter: int,
        start_index: int,
        resume: ResumeInfo | None,
        options: dict[str, Any],
    ) -> AsyncIterator[AgentEvent]:
        loop = self.mode == "loop"
        subs = self.sub_agents
        iteration = start_iter
        index = start_index
        while subs and (not loop or self.max_iterations <= 0 or iteration < self.max_iterations):
            while index < len(subs):
                sub = subs[index]
                last: AgentEvent | None = None
                broke = False
                try:
                    if resume is not None:
                        gen = sub.resume(ctx, _child_resume(ctx, sub, resume), **options)
                        resume = None
                    else:
                        gen = sub.run(ctx, None, **options)
                    async with closing(gen):
                        async for ev in gen:
                            if ev.error is not None:
                                yield ev
                                return  # D17: an error stops the workflow
                            last = ev
                            action = ev.action
                            if action is None:
                                yield ev
                                continue
                            if action.interrupted is not None and action.interrupted.contexts:
                                continue  # becomes this workflow's composite interrupt
                            brk = action.break_loop
                            if loop and brk is not None and not brk.done:
                                brk.done = True
                                brk.current_iterations = iteration
                                broke = True
                            yield ev
                except BaseException as exc:
                    # D24: a sub-agent ending with CancelledError, GeneratorExit or another
                    # exception is its error event, which stops the workflow (D17); outside
                    # cancellation and our own generator being closed propagate.
                    if must_propagate(exc) or thrown_into_us(exc):
                        raise
                    yield AgentEvent(
                        sub.name, ctx.run_path, error=ended_with(exc, f"agent '{sub.name}'")
                    )
                    return
                if last is not None and last.action is not None:
                    if interrupt_of(last) is not None:
                        state: LoopState | SequentialState = (
                            LoopState(iteration, index) if loop else SequentialState(index)
                        )
                        label = "Loop" if loop else "Sequential"
                        event = composite_interrupt(
                            ctx, f"{label} workflow interrupted", state, last
                        )
                        # Reported as the interrupted child's event (as Eino does).
                        event.agent_name, event.run_path = last.agent_name, last.run_path
                        yield event
                        return
                    if last.action.exit:
                        return
                if broke:
                    return
                index += 1
            if not loop:
                return
            index = 0
            iteration += 1

    async def _parallel(
        self,
        ctx: RunContext,
        resume: tuple[ParallelState, ResumeInfo] | None,
        options: dict[str, Any],
    ) -> AsyncIterator[AgentEvent]:
        subs = self.sub_agents
        if not subs:
            return
        lanes = [ctx.history.fork() for _ in subs]
        to_resume: set[str] = set()
        info: ResumeInfo | None = None
        if resume is not None:
            state, info = resume
            to_resume = set(state.interrupted)
            for sub, lane in zip(subs, lanes, strict=True):
                lane.events.extend(RecordedEvent(e) for e in state.lane_events.get(sub.name, []))
        # Unbounded: a branch never waits to put an event (or its end marker), so a branch is
        # only ever suspended inside its own sub-agent, where cancelling it reaches.
        queue: asyncio.Queue[tuple[int, AgentEvent | None]] = asyncio.Queue()
        # Branches that ended with a BaseException (D24), first one first: it stops them all.
        failed: list[tuple[int, BaseException]] = []

        async def branch(i: int, sub: FlowAgent) -> None:
            lane_ctx = ctx.derive(history=lanes[i])
            try:
                if resume is not None:
                    if sub.name not in to_resume:
                        return
                    assert info is not None
                    gen = sub.resume(lane_ctx, _child_resume(ctx, sub, info), **options)
                else:
                    gen = sub.run(lane_ctx, None, **options)
                try:
                    async with closing(gen):
                        async for ev in gen:
                            queue.put_nowait((i, ev))
                except Exception as exc:  # this branch ends; its siblings run on
                    queue.put_nowait((i, AgentEvent(sub.name, lane_ctx.run_path, error=exc)))
            except BaseException as exc:
                failed.append((i, exc))
                if must_propagate(exc):  # this task cancelled, KeyboardInterrupt, SystemExit
                    raise
            finally:
                queue.put_nowait((i, None))  # always: the consumer counts the branches' ends

        tasks = [asyncio.ensure_future(branch(i, sub)) for i, sub in enumerate(subs)]
        interrupts: dict[int, AgentEvent] = {}
        try:
            running = len(tasks)
            while running:
                i, ev = await queue.get()
                if ev is None:
                    if failed and failed[0][0] == i:
                        break  # D24: after that branch's events, stop every branch
                    running -= 1
                    continue
                if isinstance(ev.error, AbortedError):
                    # An agent (or tool) of this branch ended with a BaseException and its flow
                    # agent made it an error event: the branch ended that way (D24).
                    failed.insert(0, (i, ev.error.__cause__ or ev.error))
                    break
                if interrupt_of(ev) is not None:
                    interrupts[i] = ev
                    continue
                if i in interrupts:
                    continue  # a lane's events after its interrupt are dropped
                yield ev
        finally:
            # Also when the consumer stops early or is cancelled: no branch outlives us.
            await _cancel_and_wait(tasks)
        if failed:
            i, exc = failed[0]
            if must_propagate(exc):
                raise exc
            # The siblings were cancelled: there is nothing consistent to resume, so the run
            # ends with this error (no composite interrupt, no joined history).
            name = subs[i].name
            yield AgentEvent(name, ctx.run_path, error=ended_with(exc, f"parallel branch '{name}'"))
            return
        if interrupts:
            state = ParallelState(
                {
                    sub.name: [r.event for r in lane.events]
                    for sub, lane in zip(subs, lanes, strict=True)
                },
                [subs[i].name for i in sorted(interrupts)],
            )
            yield composite_interrupt(
                ctx,
                "Parallel workflow interrupted",
                state,
                *(interrupts[i] for i in sorted(interrupts)),
            )
            return
        joined = sorted((r for lane in lanes for r in lane.events), key=lambda r: r.seq)
        ctx.history.events.extend(joined)


async def _cancel_and_wait(tasks: Sequence[asyncio.Future[None]]) -> None:
    """Cancel ``tasks`` and wait until every one has ended, even when we are cancelled
    meanwhile (D24: a branch never outlives its parallel workflow); then re-raise that
    cancellation. Like ``asyncio.TaskGroup`` on exit, without its wrapping of errors."""
    for task in tasks:
        task.cancel()
    pending = {task for task in tasks if not task.done()}
    cancelled: asyncio.CancelledError | None = None
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError as exc:
            cancelled = exc
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved: the consumer re-raises what must propagate
    if cancelled is not None:
        raise cancelled


async def _error(exc: Exception) -> AsyncIterator[AgentEvent]:
    yield AgentEvent(error=exc)


class _WorkflowAgent(FlowAgent):
    """A flow agent whose agent is a workflow over its sub-agents."""

    builds_own_input = True
    #: How the workflow runs its sub-agents (set by each subclass).
    mode: Mode = "sequential"

    def __init__(
        self,
        name: str,
        sub_agents: Sequence[Agent],
        *,
        description: str = "",
        max_iterations: int = 0,
    ) -> None:
        """Build the workflow and make ``sub_agents`` its children.

        Args:
            name: the workflow's name, unique in its tree (it appears in run paths).
            sub_agents: the agents it runs, in order; each becomes a child that may not
                transfer to the workflow (a workflow decides who runs next).
            description: what the workflow does (a parent LLM agent reads it).
            max_iterations: loops only: the most rounds (0 = until a break).
        """
        if not name:
            raise ConfigurationError(f"{type(self).__name__} needs a non-empty name")
        if not isinstance(max_iterations, int) or max_iterations < 0:
            raise ConfigurationError(
                f"{type(self).__name__} {name!r}: max_iterations must be an int >= 0"
            )
        workflow = _Workflow(name, description, self.mode, max_iterations)
        super().__init__(workflow)
        subs = [as_flow_agent(s, disallow_transfer_to_parent=True) for s in sub_agents]
        for sub in subs:
            if sub.parent is not None:
                raise ConfigurationError(
                    f"agent {sub.name!r} has already been set as a sub-agent of {sub.parent.name!r}"
                )
        for sub in subs:
            sub.parent = self
        self.sub_agents = subs
        workflow.sub_agents = subs
        #: Loops only: the most rounds (0 = until a break).
        self.max_iterations = max_iterations


class SequentialAgent(_WorkflowAgent):
    """Runs its sub-agents one after another; each sees the earlier ones' output.

    An error event from a sub-agent stops the workflow (docs/workflows.md#d17); an interrupt
    pauses it, and the resume continues with the interrupted sub-agent.

    >>> import asyncio
    >>> import relaykit as rk
    >>> class Say(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.AgentEvent.from_message(rk.Message.assistant(f"{self.name} done"))
    >>> pipeline = SequentialAgent("pipeline", [Say("draft"), Say("review")])
    >>> result = asyncio.run(rk.Runner(pipeline).invoke("write"))
    >>> [ev.message.content for ev in result.events]
    ['draft done', 'review done']
    """

    mode: Mode = "sequential"

    def __init__(self, name: str, sub_agents: Sequence[Agent], *, description: str = "") -> None:
        """Build the workflow and make ``sub_agents`` its children.

        Args:
            name: the workflow's name, unique in its tree (it appears in run paths).
            sub_agents: the agents to run, in order; each becomes a child that may not
                transfer to the workflow.
            description: what the workflow does (a parent LLM agent reads it).
        """
        super().__init__(name, sub_agents, description=description)


class ParallelAgent(_WorkflowAgent):
    """Runs its sub-agents concurrently, each in its own history lane.

    A branch whose sub-agent fails with an ordinary exception yields that error event and
    ends; its siblings run on (their events and interrupts are still delivered). A branch
    that ends with ``CancelledError``, ``GeneratorExit`` or another ``BaseException`` (D24)
    stops the whole workflow: every sibling is cancelled and awaited, then one error event
    ``parallel branch '<name>' ended with ...`` ends the run. Cancelling or closing the
    consumer cancels and awaits every branch too; no task is left behind.

    >>> import asyncio
    >>> import relaykit as rk
    >>> class Say(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.AgentEvent.from_message(rk.Message.assistant(f"{self.name} done"))
    >>> fan_out = ParallelAgent("research", [Say("web"), Say("docs")])
    >>> result = asyncio.run(rk.Runner(fan_out).invoke("search"))
    >>> sorted(ev.message.content for ev in result.events)
    ['docs done', 'web done']
    """

    mode: Mode = "parallel"

    def __init__(self, name: str, sub_agents: Sequence[Agent], *, description: str = "") -> None:
        """Build the workflow and make ``sub_agents`` its children.

        Args:
            name: the workflow's name, unique in its tree (it appears in run paths).
            sub_agents: the agents to run concurrently; each becomes a child that may not
                transfer to the workflow.
            description: what the workflow does (a parent LLM agent reads it).
        """
        super().__init__(name, sub_agents, description=description)


class LoopAgent(_WorkflowAgent):
    """Runs its sub-agents in order, again and again, until ``max_iterations`` rounds
    (0 = no limit) or a sub-agent's ``BreakLoopAction`` (an LLM agent calls ``exit_loop``).

    >>> import asyncio
    >>> import relaykit as rk
    >>> class Say(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.AgentEvent.from_message(rk.Message.assistant(self.name))
    >>> refine = LoopAgent("refine", [Say("writer"), Say("critic")], max_iterations=2)
    >>> result = asyncio.run(rk.Runner(refine).invoke("draft"))
    >>> [ev.message.content for ev in result.events]
    ['writer', 'critic', 'writer', 'critic']
    """

    mode: Mode = "loop"

    def __init__(
        self,
        name: str,
        sub_agents: Sequence[Agent],
        *,
        max_iterations: int = 0,
        description: str = "",
    ) -> None:
        """Build the workflow and make ``sub_agents`` its children.

        Args:
            name: the workflow's name, unique in its tree (it appears in run paths).
            sub_agents: the agents to run, in order, each round; each becomes a child that
                may not transfer to the workflow.
            max_iterations: the most rounds; 0 (the default) runs until a sub-agent breaks
                the loop. Must be an int >= 0 (``ConfigurationError`` otherwise).
            description: what the workflow does (a parent LLM agent reads it).
        """
        super().__init__(name, sub_agents, description=description, max_iterations=max_iterations)
