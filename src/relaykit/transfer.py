"""Deterministic transfer: hand control to fixed agents when the wrapped agent finishes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast, overload

from relaykit._aio import closing, ended_with, must_propagate, thrown_into_us
from relaykit.agent import Agent, AgentInput, ResumableAgent
from relaykit.codec import register_type
from relaykit.context import RecordedEvent, RunContext, RunHistory
from relaykit.events import AgentAction, AgentEvent, TransferToAgentAction, transfer_messages
from relaykit.flow import AppendingAgent, FlowAgent, Opened, appended, ended_abnormally
from relaykit.interrupts import ResumeInfo, composite_interrupt, interrupt_of

__all__ = ["DeterministicTransferState", "with_deterministic_transfer"]


@register_type("relaykit.DeterministicTransferState")
@dataclass(slots=True)
class DeterministicTransferState:
    """What a wrapper around a flow agent saves when it interrupts: the isolated history.

    >>> DeterministicTransferState().events
    []
    """

    #: The events the wrapped flow agent's run recorded so far (its isolated history).
    events: list[AgentEvent] = field(default_factory=list)


def _transfer_events(names: Sequence[str]) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for name in names:
        call, result = transfer_messages(name)
        events.append(AgentEvent.from_message(call, role="assistant"))
        ev = AgentEvent.from_message(result, role="tool", tool_name=result.tool_name)
        ev.action = AgentAction(transfer_to_agent=TransferToAgentAction(name))
        events.append(ev)
    return events


class _DeterministicTransfer(AppendingAgent):
    """Runs ``agent``, then appends a transfer pair for each of ``to_agent_names``.

    Around an agent that is not a flow agent, the transfers are the wrapper's epilogue
    (``AppendingAgent``): the flow agent running the wrapper delivers the inner agent's
    events and then them, with no generator of the wrapper's between.
    """

    def __init__(self, agent: Agent, to_agent_names: Sequence[str]) -> None:
        self.agent = agent
        self.name: str = agent.name
        self.description: str = agent.description
        self.to_agent_names = list(to_agent_names)

    def __repr__(self) -> str:
        return f"with_deterministic_transfer({self.agent!r}, {self.to_agent_names!r})"

    def open_run(self, ctx: RunContext, input: AgentInput, options: dict[str, Any]) -> Opened:
        """Run the wrapped agent (a flow agent in an isolated run history); the transfers
        follow (``run`` yields them; a flow agent running the wrapper delivers them)."""
        agent = self.agent
        if isinstance(agent, FlowAgent):
            return self._isolated(ctx, [], lambda c: agent.run(c, input, **options)), None
        # The inner agent never learns the tree it sits in: the wrapper transfers for it.
        return agent.run(ctx.derive(flow=None), input, **options), self._transfers

    async def _transfers(self, last: AgentEvent | None) -> list[AgentEvent]:
        """The epilogue: a transfer pair for each target, unless the agent ended with an
        error, an exit or an interrupt (D1)."""
        if await ended_abnormally(last):
            return []
        return _transfer_events(self.to_agent_names)

    async def _isolated(
        self,
        ctx: RunContext,
        saved: list[AgentEvent],
        start: Callable[[RunContext], AsyncIterator[AgentEvent]],
    ) -> AsyncIterator[AgentEvent]:
        """DT-09: the flow agent sees the root input and its own history, shares the values;
        its events are recorded into the parent history too (once, here)."""
        isolated = RunHistory(
            ctx.history.values, [RecordedEvent(e) for e in saved], prior=ctx.history.prior
        )
        parent = ctx.history
        last: AgentEvent | None = None
        try:
            gen = start(ctx.derive(history=isolated))
            async with closing(gen):
                async for ev in gen:
                    a = ev.action
                    if a is None or a.interrupted is None:
                        parent.record(ev)
                    last = ev
                    if interrupt_of(ev) is not None:
                        continue  # becomes the composite interrupt below
                    yield ev
        except BaseException as exc:
            if must_propagate(exc) or thrown_into_us(exc):  # D24, as in ``appended``
                raise
            yield AgentEvent(error=ended_with(exc, f"agent '{self.name}'"))
            return
        interrupted = interrupt_of(last)
        if interrupted is not None:
            state = DeterministicTransferState([r.event for r in isolated.events])
            yield composite_interrupt(
                ctx, "deterministic transfer wrapper interrupted", state, interrupted
            )
            return
        if not await ended_abnormally(last):
            for ev in _transfer_events(self.to_agent_names):
                yield ev


class _ResumableDeterministicTransfer(_DeterministicTransfer):
    """The wrapper of a resumable agent: its resume also appends the transfers (DT-08)."""

    def resume(
        self, ctx: RunContext, info: ResumeInfo, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        """Resume the wrapped agent, then transfer."""
        return appended(self.name, self.open_resume(ctx, info, options))

    def open_resume(self, ctx: RunContext, info: ResumeInfo, options: dict[str, Any]) -> Opened:
        """Resume the wrapped agent; the transfers follow, as in ``open_run``."""
        agent = self.agent
        if isinstance(agent, FlowAgent):
            state = info.interrupt_state
            if not isinstance(state, DeterministicTransferState):
                return _error(
                    "invalid interrupt state for flowAgent resume in deterministic "
                    f"transfer: got {type(state).__name__}"
                ), None
            isolated = self._isolated(ctx, state.events, lambda c: agent.resume(c, info, **options))
            return isolated, None
        # This class wraps only agents that have ``resume`` (with_deterministic_transfer).
        resumable = cast(ResumableAgent, agent)
        return resumable.resume(ctx.derive(flow=None), info, **options), self._transfers


async def _error(message: str) -> AsyncIterator[AgentEvent]:
    from relaykit.errors import ConfigurationError

    yield AgentEvent(error=ConfigurationError(message))


@overload
def with_deterministic_transfer(
    agent: ResumableAgent, to_agent_names: Sequence[str]
) -> ResumableAgent: ...


@overload
def with_deterministic_transfer(agent: Agent, to_agent_names: Sequence[str]) -> Agent: ...


def with_deterministic_transfer(agent: Agent, to_agent_names: Sequence[str]) -> Agent:
    """Wrap ``agent`` so that, when it finishes normally, control goes to ``to_agent_names``
    in order (a chain, D3). The result is resumable exactly when ``agent`` is.

    An agent that ends with an error, an exit or an interrupt does not transfer
    (docs/trees-and-transfer.md#d1). The wrapper takes the agent's name and description; put
    it in the tree in the agent's place.

    Args:
        agent: the agent to wrap (a flow agent, with children, runs in an isolated history).
        to_agent_names: the agents to transfer to, in order; each must be a child or the
            parent of the wrapper in its tree.

    >>> import asyncio
    >>> import relaykit as rk
    >>> class Say(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.AgentEvent.from_message(rk.Message.assistant(f"{self.name} here"))
    >>> worker = with_deterministic_transfer(Say("worker"), ["reviewer"])
    >>> result = asyncio.run(rk.Runner(rk.set_sub_agents(worker, [Say("reviewer")])).invoke("go"))
    >>> [ev.agent_name for ev in result.events], result.output.content
    (['worker', 'worker', 'worker', 'reviewer'], 'reviewer here')
    """
    if hasattr(agent, "resume"):
        return _ResumableDeterministicTransfer(agent, to_agent_names)
    return _DeterministicTransfer(agent, to_agent_names)
