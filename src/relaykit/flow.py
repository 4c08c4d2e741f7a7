"""Flow agents: agent trees, transfer to a child or the parent, history rewriting.

A ``FlowAgent`` wraps an agent. It stamps the events its agent yields (its *own* events, D6),
records them in the run history, and acts on the last own action: exit and interrupt stop,
a transfer runs the target (several trailing transfers form a chain, D3). With a Runner's
plugins it runs the ``before_agent`` / ``after_agent`` hooks around its agent (rules in
``relaykit._agent_hooks``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast, final

from relaykit._agent_hooks import HeldExit, after_agent_event, before_agent, ended_in_failure
from relaykit._agent_hooks import answer as hook_answer
from relaykit._aio import closing, ended_with, must_propagate, thrown_into_us
from relaykit._cancel import NotStarted
from relaykit._chains import (
    PendingChain,
    TrailingTransfers,
    TransferGroup,
    ended_abnormally,
)
from relaykit._history import (
    HistoryEntry,
    HistoryRewriter,
    default_history,
    rewrite_message,
    strip_transfer,
    transfer_call_ids,
)
from relaykit.agent import Agent, AgentInput
from relaykit.context import PriorTurns, RecordedEvent, RunContext, RunHistory, next_record_seq
from relaykit.errors import ConfigurationError, MaxTransfersError
from relaykit.events import AgentAction, AgentEvent, RunPath, RunStep
from relaykit.interrupts import AddressSegment, ResumeInfo, interrupt_of, stateful_interrupt
from relaykit.messages import Message

if TYPE_CHECKING:
    from relaykit._invocation import Invocation

__all__ = [
    "AppendingAgent",
    "FlowAgent",
    "HistoryEntry",
    "HistoryRewriter",
    "PendingChain",
    "TransferGroup",
    "as_flow_agent",
    "ended_abnormally",
    "rewrite_message",
    "set_sub_agents",
]


#: The keyword options that carry an agent's designated options (``AgentOptions`` fields).
_DESIGNATED_KEYS = frozenset({"model_options", "tool_options", "history_modifier"})

#: The author of the user's events in a session; no agent may have this name (D28).
USER_AUTHOR = "user"

_Arg = TypeVar("_Arg")
_new_object = object.__new__
#: What an ``AppendingAgent`` adds once its agent's stream ended: given the stream's last event
#: (None: it yielded nothing), the events that follow it.
Epilogue = Callable[[AgentEvent | None], Awaitable[Sequence[AgentEvent]]]
#: An ``AppendingAgent``'s stream taken apart: its agent's stream and the epilogue that follows
#: it (None: nothing follows, and the stream turns its own exceptions into error events).
Opened = tuple[AsyncIterator[AgentEvent], Epilogue | None]
# How ``_drive`` starts the agent's stream: from an input (run) or a ResumeInfo (resume). With
# the stream come the pending chain saved for this flow agent (when a resume passes through
# it), the invocation whose ``after_agent`` hooks run once the stream completes (None: none)
# and, for an ``AppendingAgent``, the epilogue of its stream (None: none).
_Start = Callable[
    [RunContext, _Arg, dict[str, Any]],
    Awaitable[
        tuple[
            AsyncIterator[AgentEvent],
            "PendingChain | None",
            "Invocation | None",
            "Epilogue | None",
        ]
    ],
]


class AppendingAgent:
    """Base of an agent that runs one other agent and only adds events once that agent's
    stream ended -- its *epilogue* (the deterministic-transfer wrapper's transfers).

    ``run`` (and a resumable subclass's ``resume``, through ``appended``) forwards the inner
    stream and then the epilogue; an exception of the inner stream instead ends it with the
    wrapper's error event (D24) and no epilogue. A flow agent running the wrapper takes the
    two apart (``open_run``, ``open_resume``) and does the same itself: in a flat run the
    Runner iterates the inner stream (``OwnStream``), so the wrapper costs no generator step
    per event.

    >>> import asyncio
    >>> import relaykit as rk
    >>> class Say(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.AgentEvent.from_message(rk.Message.assistant("hi"))
    >>> class Signed(AppendingAgent):
    ...     def __init__(self, agent):
    ...         self.agent, self.name, self.description = agent, agent.name, ""
    ...     def open_run(self, ctx, input, options):
    ...         async def sign(last):
    ...             return [rk.AgentEvent.from_message(rk.Message.assistant("-- signed"))]
    ...         return self.agent.run(ctx, input, **options), sign
    >>> result = asyncio.run(rk.Runner(Signed(Say("poet"))).invoke("go"))
    >>> [ev.message.content for ev in result.events]
    ['hi', '-- signed']
    """

    #: The wrapper's name (its agent's, as it takes that agent's place in a tree).
    name: str
    #: The wrapper's description.
    description: str

    def open_run(self, ctx: RunContext, input: AgentInput, options: dict[str, Any]) -> Opened:
        """Start the inner agent's run: its stream and the epilogue that follows it."""
        raise NotImplementedError(f"{type(self).__name__}.open_run is not implemented")

    def open_resume(self, ctx: RunContext, info: ResumeInfo, options: dict[str, Any]) -> Opened:
        """Start the inner agent's resume (a resumable wrapper only): as ``open_run``."""
        raise NotImplementedError(f"{type(self).__name__}.open_resume is not implemented")

    def run(self, ctx: RunContext, input: AgentInput, **options: Any) -> AsyncIterator[AgentEvent]:
        """The inner agent's events, then the epilogue's."""
        return appended(self.name, self.open_run(ctx, input, options))


def appended(name: str, opened: Opened) -> AsyncIterator[AgentEvent]:
    """The stream of ``AppendingAgent`` ``name`` whose inner stream and epilogue are
    ``opened``: the inner events, then the epilogue's (or the wrapper's error event)."""
    events, epilogue = opened
    return events if epilogue is None else _appended(name, events, epilogue)


async def _appended(
    name: str, events: AsyncIterator[AgentEvent], epilogue: Epilogue
) -> AsyncIterator[AgentEvent]:
    last: AgentEvent | None = None
    try:
        async with closing(events):
            async for ev in events:
                last = ev
                yield ev
    except BaseException as exc:
        # D24: the inner agent ending with CancelledError, GeneratorExit... is its error event
        # (ended_with never hands on a bare BaseException); cancellation from outside and the
        # GeneratorExit of our own generator being closed propagate.
        if must_propagate(exc) or thrown_into_us(exc):
            raise
        yield AgentEvent(error=ended_with(exc, f"agent '{name}'"))
        return
    for ev in await epilogue(last):
        yield ev


@final
class Delegation:
    """What a flow agent's stream yields in a flat run (``FlowAgent.run_flat``) where it would
    forward a transfer target's events: the target's stream, for the Runner to iterate.

    Every level of a tree that forwards its target's events is one more generator step per
    event; in a flat run the Runner iterates the innermost stream itself, applies each
    delegating flow agent's pending chain to the events (``pending``, D3), and sends the
    target's last event back (``asend``) when the target's stream ends -- or throws what it
    raised into the delegating stream (``athrow``), as ``yield from`` would. Nothing outside
    the Runner ever sees one: ``run`` and ``resume`` forward the events themselves.
    """

    __slots__ = ("ctx", "events", "pending")

    def __init__(
        self,
        events: AsyncIterator[FlatItem],
        ctx: RunContext,
        pending: PendingChain | None,
    ) -> None:
        #: The transfer target's stream.
        self.events = events
        #: The delegating flow agent's context (its address keys the pending chain).
        self.ctx = ctx
        #: The rest of the delegating flow agent's transfer chain, saved on an interrupt of
        #: the target's (``FlowAgent._with_pending``); None when nothing follows the target.
        self.pending = pending


@final
class OwnStream:
    """A flow agent's own events: stamping, recording and the transfers they end with.

    ``FlowAgent._drive`` keeps its agent's stream here. In a flat run it yields this object
    and the Runner iterates the agent's stream itself: it delivers a nested agent's event as
    it is (stamped and recorded below) and, while ``quiet``, a plain message (an event with
    neither action nor error whose output is none, or a message without tool calls) stamped
    and recorded; it hands every other event to the flow agent (``asend``), which passes it
    to ``handle``, sends None when the stream ends (``last`` set), and throws what the
    stream raised into the flow agent's stream.
    """

    __slots__ = (
        "after",
        "events",
        "last",
        "name",
        "path",
        "quiet",
        "record",
        "tracker",
        "trailing",
    )

    #: Nothing of a delegating chain to apply (see ``Delegation.pending``).
    pending: None = None

    def __init__(
        self,
        events: AsyncIterator[AgentEvent],
        name: str,
        path: RunPath,
        history: RunHistory,
        after: Invocation | None,
    ) -> None:
        #: The agent's own stream.
        self.events = events
        #: The flow agent's name and run path, stamped on the agent's events.
        self.name = name
        self.path = path
        #: Appends to the flow agent's run history.
        self.record = history.events.append
        #: The invocation whose ``after_agent`` hooks run once the agent completes, if any.
        self.after = after
        #: The trailing transfer run of the agent's events (D3).
        self.tracker = TrailingTransfers()
        #: ``tracker``, or a ``HeldExit`` while an own exit waits for ``after_agent``.
        self.trailing: TrailingTransfers | HeldExit = self.tracker
        #: True while ``trailing`` is the tracker and it is neither holding nor tracking
        #: transfers: a plain message is then delivered as it is.
        self.quiet = True
        #: The last event of the stream (set by the Runner when it ends, in a flat run).
        self.last: AgentEvent | None = None

    async def handle(self, ev: AgentEvent) -> AsyncIterator[AgentEvent]:
        """The events to deliver for own event ``ev`` that is not a plain message (or comes
        while transfers are tracked or an exit is held), each recorded before it is
        delivered (an interrupt is not recorded)."""
        action = ev.action
        ev = ev.stamped(self.name, self.path)
        record, tracker, trailing = self.record, self.tracker, self.trailing
        if isinstance(trailing, HeldExit):  # the exit was not the last event
            self.trailing = tracker
            record(RecordedEvent.of(trailing.event))
            yield trailing.event
        outs = await tracker.offer(ev)
        if (
            self.after is not None
            and action is not None
            and action.exit
            and action.interrupted is None
            and outs[-1] is ev
        ):
            self.trailing = HeldExit(outs.pop())
        self.quiet = self.trailing is tracker and not tracker.holding and not tracker.events
        for out_ev in outs:
            a = out_ev.action
            if a is None or a.interrupted is None:
                record(RecordedEvent.of(out_ev))
            yield out_ev


#: What a flat run's streams yield (``FlowAgent.run_flat``).
FlatItem = AgentEvent | Delegation | OwnStream


class FlowAgent:
    """An agent that takes part in a tree: it records, stamps and transfers.

    Build trees with ``set_sub_agents``; set options with ``as_flow_agent`` (both return the
    flow agent). A flow agent is itself an ``Agent``: give it to a ``Runner``, or as a child of
    another tree.

    >>> import relaykit as rk
    >>> class Noop(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.AgentEvent.exit()
    >>> root = rk.set_sub_agents(Noop("triage"), [Noop("billing")])
    >>> root.name, [a.name for a in root.transfer_targets()]
    ('triage', ['billing'])

    Args:
        agent: the agent to wrap (not a flow agent already).
        disallow_transfer_to_parent: the agent may not transfer back to its parent (D4).
        history_rewriter: builds the agent's input from the history entries instead of the
            default rewriting.
    """

    #: Whether the wrapped agent builds its own input (workflows do: they hand their children
    #: the history through the flow agents below them), so no history is built for it.
    builds_own_input = False

    def __init__(
        self,
        agent: Agent,
        *,
        disallow_transfer_to_parent: bool = False,
        history_rewriter: HistoryRewriter | None = None,
    ) -> None:
        if isinstance(agent, FlowAgent):
            raise ConfigurationError(f"agent {agent.name!r} is already a flow agent")
        #: The wrapped agent.
        self.agent = agent
        #: The wrapped agent's name.
        self.name: str = agent.name
        #: The wrapped agent's description.
        self.description: str = agent.description
        #: The children (set by ``set_sub_agents``).
        self.sub_agents: list[FlowAgent] = []
        #: The parent in the tree; None at the root.
        self.parent: FlowAgent | None = None
        #: The agent may not transfer back to its parent (D4).
        self.disallow_transfer_to_parent = disallow_transfer_to_parent
        #: Builds the agent's input instead of the default history rewriting, when set.
        self.history_rewriter = history_rewriter
        self._step = RunStep(self.name)
        self._segment = AddressSegment("agent", self.name)

    def __repr__(self) -> str:
        return f"FlowAgent({self.agent!r}, sub_agents={[a.name for a in self.sub_agents]})"

    # -- tree ------------------------------------------------------------------------------
    def transfer_targets(self) -> list[Agent]:
        """The agents this one may transfer to: its children, then its parent unless disallowed."""
        targets: list[Agent] = list(self.sub_agents)
        if self.parent is not None and not self.disallow_transfer_to_parent:
            targets.append(self.parent)
        return targets

    def find_target(self, name: str, *, for_resume: bool = False) -> FlowAgent | None:
        """A child named ``name``, else the parent if so named (and allowed, D4).

        Args:
            name: the agent to look for.
            for_resume: look the parent up even when transfers to it are disallowed (a resume
                goes back down the path it came).
        """
        for sub in self.sub_agents:
            if sub.name == name:
                return sub
        parent = self.parent
        if (
            parent is not None
            and parent.name == name
            and (for_resume or not self.disallow_transfer_to_parent)
        ):
            return parent
        return None

    def _enter(self, ctx: RunContext) -> RunContext:
        path = ctx.run_path
        if not path or path[-1].agent_name != self.name:
            path = (*path, self._step)
        child = ctx.derive(run_path=path, address=(*ctx.address, self._segment))
        child.flow = self
        return child

    # -- run -------------------------------------------------------------------------------
    def run(
        self, ctx: RunContext, input: AgentInput | None = None, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        """Run the wrapped agent on the history built for it, then act on its last action.

        Args:
            ctx: the parent's context (the flow agent adds its own step and address segment).
            input: the run's input at the root; below the root the flow agent builds the input
                from the run history (None).
            **options: per-run options, passed on to the wrapped agent.
        """
        child = self._enter(ctx)
        if not ctx.run_path and input is not None:
            child.root_input = input
        return cast(
            "AsyncIterator[AgentEvent]", self._drive(child, self._start_run, input, options, False)
        )

    def run_flat(self, ctx: RunContext, input: AgentInput) -> AsyncIterator[FlatItem]:
        """``run`` for the Runner: the stream yields a ``Delegation`` where a transfer target
        runs, for the Runner to iterate the target's stream itself (one generator step per
        event however deep the tree). A subclass that overrides ``run`` is run by it."""
        if type(self).run is not FlowAgent.run:
            return self.run(ctx, input)
        child = self._enter(ctx)
        if not ctx.run_path:
            child.root_input = input
        return self._drive(child, self._start_run, input, {}, True)

    def resume_flat(self, ctx: RunContext, info: ResumeInfo) -> AsyncIterator[FlatItem]:
        """``resume`` for the Runner, its transfer targets delegated as in ``run_flat``."""
        if type(self).resume is not FlowAgent.resume:
            return self.resume(ctx, info)
        return self._drive(self._enter(ctx), self._start_resume, info, {}, True)

    def resume(
        self, ctx: RunContext, info: ResumeInfo, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        """Continue an interrupted run: resume the agent itself, or pass the resume down.

        Args:
            ctx: the parent's context; its ``resume_state`` holds the saved points.
            info: the resume as the parent hands it on.
            **options: per-run options, passed on.
        """
        return cast(
            "AsyncIterator[AgentEvent]",
            self._drive(self._enter(ctx), self._start_resume, info, options, False),
        )

    async def _start_run(
        self, child: RunContext, input: AgentInput | None, options: dict[str, Any]
    ) -> tuple[AsyncIterator[AgentEvent], None, Invocation | None, Epilogue | None]:
        cancel = child.options.cancel
        if cancel is not None and cancel.mode is not None:
            # D26: an agent starting after a cancel does not start (a transfer target never
            # calls its model); the resume starts it.
            return _one(stateful_interrupt(child, cancel.info(), NotStarted())), None, None, None
        after: Invocation | None = None
        inv = child.options.invocation
        if inv is not None and inv.plugins and not self._inside_itself(child):
            answer = await before_agent(inv, self.name)
            if answer is not None:  # the agent's whole answer: it does not run
                return hook_answer(answer), None, None, None
            if inv.plugins.has("after_agent"):
                after = inv
        if self.builds_own_input:
            agent_input = input if input is not None else AgentInput()
        else:
            agent_input = await self.build_input(child)
        if child.options.agent_options or options:
            options = self._designated(child, options)
        agent = self.agent
        if isinstance(agent, AppendingAgent):
            events, epilogue = agent.open_run(child, agent_input, options)
            return events, None, after, epilogue
        return agent.run(child, agent_input, **options), None, after, None

    def _designated(self, child: RunContext, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` for this agent's ``run``/``resume``: the run's options, without the
        ones designated to another agent, plus this agent's own designated options
        (``Runner.run(agent_options={name: AgentOptions(...)})``) as keyword options."""
        mine = child.options.agent_options.get(self.name)
        kept = {k: v for k, v in options.items() if k not in _DESIGNATED_KEYS}
        if mine is not None:
            kept.update(
                model_options=mine.model_options,
                tool_options=mine.tool_options,
                history_modifier=mine.history_modifier,
            )
        return kept

    async def _start_resume(
        self, child: RunContext, info: ResumeInfo, options: dict[str, Any]
    ) -> tuple[AsyncIterator[AgentEvent], PendingChain | None, Invocation | None, Epilogue | None]:
        state = child.resume_state
        if state is None:
            raise ConfigurationError(
                f"failed to resume agent {self.name!r}: the run has no resume information"
            )
        # before_agent ran when the agent started; after_agent runs when a resumed agent
        # completes -- not when the resume passes through to a transfer target (the agent
        # itself had completed, and its after_agent ran, before the target started).
        inv = child.options.invocation
        after = (
            inv
            if inv is not None and inv.plugins.has("after_agent") and not self._inside_itself(child)
            else None
        )
        mine = state.claim(child.address, info)
        if mine.was_interrupted:
            if isinstance(mine.interrupt_state, NotStarted):  # a cancel stopped it (D26)
                return await self._start_run(child, None, options)
            resume = getattr(self.agent, "resume", None)
            if resume is None:
                raise ConfigurationError(
                    f"failed to resume agent: agent '{self.name}' is an interrupt point but is "
                    "not a ResumableAgent"
                )
            if child.options.agent_options or options:
                options = self._designated(child, options)
            agent = self.agent
            if isinstance(agent, AppendingAgent):
                events, epilogue = agent.open_resume(child, mine, options)
                return events, None, after, epilogue
            return resume(child, mine, **options), None, after, None
        names = state.next_points(child.address)
        if not names:
            raise ConfigurationError(
                f"failed to resume agent '{self.name}': no child agents "
                "leading to interrupted agent were found"
            )
        if len(names) > 1:
            raise ConfigurationError(
                f"failed to resume agent '{self.name}': agent has multiple child agents leading "
                "to interruption, but concurrent transfer is not supported"
            )
        pending = state.pending_chains.pop(child.address, None)
        sub = self.find_target(names[0], for_resume=True)
        if sub is not None:
            return sub.resume(child, info, **options), pending, None, None
        if not self.sub_agents:  # a custom wrapper around a tree: it resumes what it wraps
            resume_wrapped = getattr(self.agent, "resume", None)
            if resume_wrapped is None:
                raise ConfigurationError(
                    f"failed to resume agent: agent '{self.name}' (type "
                    f"{type(self.agent).__name__}) has no sub-agents and does not implement "
                    "ResumableAgent interface. To support resume, your custom agent wrapper "
                    "must implement the ResumableAgent interface"
                )
            return resume_wrapped(child, info, **options), pending, after, None
        raise ConfigurationError(
            f"failed to resume agent: sub-agent '{names[0]}' not found in agent '{self.name}'"
        )

    def _inside_itself(self, child: RunContext) -> bool:
        """True for a flow agent run by a wrapper of the same agent (a deterministic transfer
        around a flow agent): the outer flow agent runs the agent hooks, once."""
        address = child.address
        return len(address) > 1 and address[-2] == self._segment

    # -- the run loop ----------------------------------------------------------------------
    async def _drive(
        self,
        ctx: RunContext,
        start: _Start[_Arg],
        arg: _Arg,
        options: dict[str, Any],
        flat: bool,
    ) -> AsyncGenerator[FlatItem, AgentEvent | None]:
        """Stamp, record and forward the agent's events; then run the transfer chain its
        stream ended with (or, after a resume passed down, the chain saved for this agent).

        Transfer chains (D3): an agent ending with transfers to b and then c (one message
        calling ``transfer_to_agent`` twice, or two transfer groups) delivers
        ``[its events, call→b+c, result→b]``, runs b, delivers ``result→c``, runs c. A
        target that ends with an exit, an interrupt or an error stops the chain; an
        interrupt saves the rest of it (``PendingChain``) so the resume continues with c.

        Plugins (``RunOptions.invocation``): ``before_agent`` runs in ``_start_run``;
        ``after_agent`` runs here once the agent completed (not after an interrupt or an
        error), its message delivered after the agent's own events and before a transfer's
        target runs. An exit stays the agent's last event: while ``after_agent`` may follow,
        an own exit is held (``HeldExit``) and delivered after the hook's message.

        ``flat`` (``run_flat``): a transfer target's stream is handed to the Runner as a
        ``Delegation`` (the Runner sends back its last event) instead of forwarded here, and
        the agent's own stream as its ``OwnStream`` (the Runner delivers the plain messages
        and sends every other event here, for ``OwnStream.handle``).
        """
        name, path, history = self.name, ctx.run_path, ctx.history
        record = history.events.append
        try:
            gen, pending, after, epilogue = await start(ctx, arg, options)
        except BaseException as exc:
            if must_propagate(exc):
                raise
            yield AgentEvent(name, path, error=ended_with(exc, f"agent '{name}'"))
            return
        own_stream = flat and pending is None
        if epilogue is not None and not own_stream:
            gen, epilogue = _appended(name, gen, epilogue), None
        own = OwnStream(gen, name, path, history, after)
        last: AgentEvent | None = None
        try:
            async with closing(gen):
                if own_stream:
                    # The Runner iterates the agent's stream and delivers its plain messages
                    # (``Runner._drive``); it hands every other event here, None at the end,
                    # and throws in what the stream raised.
                    tail: Sequence[AgentEvent] = ()
                    while True:
                        try:
                            ev = yield own
                        except BaseException as exc:
                            # An appending agent's inner stream raised: the wrapper's error
                            # event, and no epilogue (as ``appended`` would yield, D24).
                            if epilogue is None or must_propagate(exc) or thrown_into_us(exc):
                                raise
                            tail = (AgentEvent(error=ended_with(exc, f"agent '{name}'")),)
                            break
                        if ev is None:
                            last = own.last
                            if epilogue is not None:  # an appending agent's last events
                                tail = await epilogue(last)
                            break
                        last = ev
                        async with closing(own.handle(ev)) as outs:
                            async for out_ev in outs:
                                yield out_ev
                    for ev in tail:  # own events, as if the agent's stream had yielded them
                        last = ev
                        async with closing(own.handle(ev)) as outs:
                            async for out_ev in outs:
                                yield out_ev
                else:
                    async for ev in gen:
                        last = ev
                        if ev.run_path:  # a nested agent's event: stamped and recorded below
                            if pending is not None:
                                ev = self._with_pending(ctx, ev, pending)
                            yield ev
                            continue
                        # The fast path, as in ``Runner._drive``: it runs for every event.
                        if ev.action is None and own.quiet and ev.error is None:
                            out = ev.output  # the common case: a plain message, no transfer
                            if out is None or (
                                out.stream is None
                                and ((msg := out.message) is None or not msg.tool_calls)
                            ):
                                # ``ev.stamped(name, path)`` and ``RecordedEvent.of`` inline
                                # (their calls would cost more than the copy and the record).
                                new = _new_object(AgentEvent)
                                new.agent_name = name
                                new.run_path = path
                                new.output = out
                                new.action = None
                                new.error = None
                                new.state_delta = ev.state_delta
                                new.internal = False
                                new.stored_id = None
                                rec = _new_object(RecordedEvent)
                                rec.event = new
                                rec.seq = next_record_seq()
                                rec.message = out.message if out is not None else None
                                rec.rewritten = None
                                rec.skip = False
                                record(rec)
                                yield new
                                continue
                        async with closing(own.handle(ev)) as outs:
                            async for out_ev in outs:
                                yield out_ev
        except BaseException as exc:
            # D9/D24: the agent ending with any exception (a CancelledError it caught from
            # something else, a GeneratorExit it raised...) is its error event; cancellation
            # from outside, and our own generator being closed, propagate.
            if must_propagate(exc) or thrown_into_us(exc):
                raise
            if isinstance(own.trailing, HeldExit):
                history.record(own.trailing.event)
                yield own.trailing.event
            err = AgentEvent(name, path, error=ended_with(exc, f"agent '{name}'"))
            history.record(err)
            yield err
            return
        if isinstance(own.trailing, HeldExit):  # the agent ended with an exit: its hook first
            extra = await after_agent_event(after, name, path) if after is not None else None
            if extra is not None and extra.error is None:
                history.record(extra)
                yield extra
            history.record(own.trailing.event)
            yield own.trailing.event
            if extra is not None and extra.error is not None:
                history.record(extra)
                yield extra
            return
        if isinstance(pending, PendingChain):
            if await ended_abnormally(last):
                return
            chain = pending
        else:
            found = await own.tracker.chain()
            if found is None:  # exit, interrupt, error or a plain end: nothing to transfer
                if after is not None and not await ended_in_failure(last):
                    extra = await after_agent_event(after, name, path)
                    if extra is not None:
                        history.record(extra)
                        yield extra
                        a = last.action if last is not None else None
                        if extra.error is None and a is not None and a.exit:
                            # A nested agent's exit (own exits are held): the exit must stay
                            # the last event, for the flow agents above -- end with our own.
                            exit_ev = AgentEvent(name, path, action=AgentAction(exit=True))
                            history.record(exit_ev)
                            yield exit_ev
                return
            held, chain = found
            for ev in held:
                history.record(ev)
                yield ev
        if after is not None:  # the agent transferred: it completed, its target runs next
            extra = await after_agent_event(after, name, path)
            if extra is not None:
                history.record(extra)
                yield extra
                if extra.error is not None:
                    return  # D1: the agent failed, nothing transfers
        while True:
            while chain.targets:
                dest = chain.targets.pop(0)
                target = self.find_target(dest)
                if target is None:
                    err = AgentEvent(
                        name,
                        path,
                        error=ConfigurationError(
                            f"transfer failed: agent '{dest}' not found when transferring from "
                            f"'{name}'"
                        ),
                    )
                    history.record(err)
                    yield err
                    return
                refused = ctx.options.count_transfer(name, dest)
                if refused is not None:  # D23: runs are bounded
                    err = AgentEvent(name, path, error=MaxTransfersError(refused))
                    history.record(err)
                    yield err
                    return
                rest = (
                    PendingChain(list(chain.targets), list(chain.groups))
                    if chain.targets or chain.groups
                    else None
                )
                last = None
                if flat:  # the Runner iterates the target's stream and sends its last event
                    events: AsyncIterator[FlatItem]
                    if type(target).run is FlowAgent.run and "run" not in vars(target):
                        events = target._drive(
                            target._enter(ctx), target._start_run, None, options, True
                        )
                    else:
                        events = target.run(ctx, None, **options)
                    last = yield Delegation(events, ctx, rest)
                else:
                    async with closing(target.run(ctx, None, **options)) as sub_events:
                        async for ev in sub_events:
                            last = ev
                            if rest is not None:
                                ev = self._with_pending(ctx, ev, rest)
                            yield ev
                if await ended_abnormally(last):
                    return
            if not chain.groups:
                return
            group = chain.groups.pop(0)
            chain.targets = list(group.targets)
            for ev in group.events:
                history.record(ev)
                yield ev

    @staticmethod
    def _with_pending(ctx: RunContext, ev: AgentEvent, pending: PendingChain | None) -> AgentEvent:
        """``ev`` with the rest of this flow agent's transfer chain saved on its interrupt (D3)."""
        info = interrupt_of(ev)
        if info is None or not isinstance(pending, PendingChain):
            return ev
        assert ev.action is not None
        chains = {**info.pending_chains, ctx.address: pending}
        action = dataclasses.replace(
            ev.action, interrupted=dataclasses.replace(info, pending_chains=chains)
        )
        return AgentEvent(ev.agent_name, ev.run_path, ev.output, action, ev.error, ev.state_delta)

    # -- history ---------------------------------------------------------------------------
    async def build_input(self, ctx: RunContext) -> AgentInput:
        """Earlier turns (session mode), the root input, then the run history, rewritten for
        this agent (FA-03, FA-07)."""
        root = ctx.root_input
        root_messages = root.messages if root is not None else []
        streaming = root.enable_streaming if root is not None else False
        prior = ctx.history.prior
        records = ctx.history.visible()
        if not records and not prior and self.history_rewriter is None:
            return AgentInput(list(root_messages), streaming)
        if self.history_rewriter is None:
            for rec in records:  # streams are read here; the rest is built on first use
                if rec.message is None and not rec.skip:
                    out = rec.event.output
                    if out is not None and out.stream is not None:
                        await rec.resolve()
        skip = ctx.options.skip_transfer_messages
        skip_ids = transfer_call_ids(records) if skip else None
        if self.history_rewriter is None:
            name = self.name
            if not prior:
                args = (name, list(root_messages), records, len(records), skip_ids)
                return AgentInput.deferred(lambda: default_history(*args), streaming)
            count, first, earlier = len(records), list(root_messages), prior

            def build() -> list[Message]:
                messages = _prior_messages(earlier, name, skip)
                messages.extend(first)
                return default_history(name, messages, records, count, skip_ids)

            return AgentInput.deferred(build, streaming)
        entries = [
            HistoryEntry(rec.event.agent_name == USER_AUTHOR, rec.event.agent_name, rec.message)
            for rec in (prior.records if prior is not None else ())
            if rec.message is not None
        ]
        entries += [HistoryEntry(True, "", m) for m in root_messages]
        for rec in records:
            msg = await rec.resolve()
            if msg is None:
                continue
            if skip_ids:
                stripped = strip_transfer(rec, msg, skip_ids)
                if stripped is None:
                    continue
                msg = stripped
            entries.append(HistoryEntry(False, rec.event.agent_name, msg))
        return AgentInput(await self.history_rewriter(ctx, entries), streaming)


async def _one(event: AgentEvent) -> AsyncIterator[AgentEvent]:
    yield event


def _prior_messages(prior: PriorTurns, name: str, skip: bool) -> list[Message]:
    """The earlier turns as ``name`` reads them: built once per agent, then extended with the
    records added since (a transfer pair is always stored within one turn, so the skipped ids
    of the new records are all a new part needs)."""
    key = (name, skip)
    count, messages = prior.built.get(key, (0, []))
    records = prior.records
    if count < len(records):
        new = records[count:]
        default_history(name, messages, new, len(new), transfer_call_ids(new) if skip else None)
        prior.built[key] = (len(records), messages)
    return list(messages)


def as_flow_agent(
    agent: Agent,
    *,
    disallow_transfer_to_parent: bool = False,
    history_rewriter: HistoryRewriter | None = None,
) -> FlowAgent:
    """Wrap ``agent`` in a flow agent with these options (or apply them to a flow agent).

    Args:
        agent: the agent; a flow agent gets the options set (an option left at its default
            keeps the flow agent's current value).
        disallow_transfer_to_parent: the agent may not transfer back to its parent (D4).
        history_rewriter: builds the agent's input from the history entries instead of the
            default rewriting.

    >>> import relaykit as rk
    >>> class Noop(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.AgentEvent.exit()
    >>> fa = as_flow_agent(Noop("worker"), disallow_transfer_to_parent=True)
    >>> fa.disallow_transfer_to_parent, as_flow_agent(fa) is fa
    (True, True)
    """
    if isinstance(agent, FlowAgent):
        if disallow_transfer_to_parent:
            agent.disallow_transfer_to_parent = True
        if history_rewriter is not None:
            agent.history_rewriter = history_rewriter
        return agent
    return FlowAgent(
        agent,
        disallow_transfer_to_parent=disallow_transfer_to_parent,
        history_rewriter=history_rewriter,
    )


def set_sub_agents(agent: Agent, sub_agents: Sequence[Agent]) -> FlowAgent:
    """Make ``sub_agents`` the children of ``agent``; returns the parent's flow agent (D14).

    Each agent is wrapped in a flow agent (``as_flow_agent``) unless it is one; an agent can be
    the child of one parent only, and a parent gets its children once.

    Args:
        agent: the parent.
        sub_agents: its children, in the order an LLM parent lists them as transfer targets.

    >>> import relaykit as rk
    >>> class Noop(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.AgentEvent.exit()
    >>> root = set_sub_agents(Noop("triage"), [Noop("orders"), Noop("refunds")])
    >>> [sub.name for sub in root.sub_agents], root.sub_agents[0].parent is root
    (['orders', 'refunds'], True)
    """
    parent = as_flow_agent(agent)
    if parent.sub_agents:
        raise ConfigurationError(f"agent {parent.name!r}: sub-agents have already been set")
    subs = [as_flow_agent(s) for s in sub_agents]
    for sub in subs:
        if sub.parent is not None:
            raise ConfigurationError(
                f"agent {sub.name!r} has already been set as a sub-agent of {sub.parent.name!r}"
            )
    for sub in subs:
        sub.parent = parent
    parent.sub_agents = subs
    return parent
