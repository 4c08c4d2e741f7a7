"""Transfer chains (D3): which trailing events of an agent transfer, how they group, and
which are delivered at once or held until their target runs."""

from __future__ import annotations

from dataclasses import dataclass

from relaykit._aio import must_propagate
from relaykit.codec import register_type
from relaykit.events import TRANSFER_TOOL_NAME, AgentEvent
from relaykit.messages import Message

__all__ = [
    "PendingChain",
    "TrailingTransfers",
    "TransferGroup",
    "ended_abnormally",
    "transfer_dest",
]


@register_type("relaykit.TransferGroup")
@dataclass(slots=True)
class TransferGroup:
    """One step of a transfer chain (D3): an assistant message calling ``transfer_to_agent``
    together with the tool results answering it, or one transfer pair of a deterministic
    wrapper. ``targets`` are the agents it transfers to, in call order.

    >>> TransferGroup([], ["billing"]).targets
    ['billing']
    """

    #: The call message and the tool results answering it (or one transfer pair).
    events: list[AgentEvent]
    #: The agents the group transfers to, in call order.
    targets: list[str]


@register_type("relaykit.PendingChain")
@dataclass(slots=True)
class PendingChain:
    """The rest of a transfer chain: the targets of the group being run that have not run
    yet, then the later groups, each delivered right before its first target runs (D3).
    Saved in checkpoints when one of the targets interrupts.

    >>> PendingChain(["refunds"], []).targets
    ['refunds']
    """

    #: The targets of the current group still to run, in order.
    targets: list[str]
    #: The later transfer groups, in order.
    groups: list[TransferGroup]


def transfer_dest(ev: AgentEvent) -> str | None:
    a = ev.action
    if a is None or a.interrupted is not None or a.exit or a.transfer_to_agent is None:
        return None
    return a.transfer_to_agent.dest_agent_name


def _transfer_like_now(ev: AgentEvent) -> bool | None:
    """Part of a trailing transfer run: a transfer action, or an assistant message whose only
    tool calls are ``transfer_to_agent`` calls. None: an assistant stream, undecided until read."""
    a = ev.action
    if a is not None:
        if a.interrupted is not None or a.exit:
            return False
        if a.transfer_to_agent is not None:
            return True
    out = ev.output
    if ev.error is not None or out is None:
        return False
    if out.message is None and out.stream is not None:
        return None if out.role == "assistant" else False
    return _only_transfer_calls(out.message)


def _only_transfer_calls(msg: Message | None) -> bool:
    return (
        msg is not None
        and msg.role == "assistant"
        and bool(msg.tool_calls)
        and all(c.name == TRANSFER_TOOL_NAME for c in msg.tool_calls)
    )


async def _is_transfer_like(ev: AgentEvent) -> bool:
    """``_transfer_like_now``, reading an assistant stream to its end when needed."""
    known = _transfer_like_now(ev)
    if known is not None:
        return known
    assert ev.output is not None and ev.output.stream is not None
    try:
        return _only_transfer_calls(await ev.output.stream.collect())
    except Exception:
        return False


def _split_groups(tail: list[AgentEvent]) -> list[TransferGroup]:
    """Transfer groups: one assistant message with the results answering it, or one pair."""
    groups: list[TransferGroup] = []
    for ev in tail:
        dest = transfer_dest(ev)
        out = ev.output
        is_call = out is not None and out.role == "assistant"
        if not groups or (groups[-1].targets and (is_call or out is None)):
            groups.append(TransferGroup([], []))
        groups[-1].events.append(ev)
        if dest is not None:
            groups[-1].targets.append(dest)
    return [g for g in groups if g.targets or g.events]


class TrailingTransfers:
    """The trailing transfer run of a flow agent's own events, tracked while they stream (D3).

    Events that may start a transfer run are delivered at once; after the first transfer
    action, later transfer-like events are *held* (so a target never sees a later group's
    "transferred to agent [c]" before c ran). Any other event ends the run: the held events
    are delivered before it.
    """

    __slots__ = ("delivered", "events", "holding")

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []  # the trailing transfer run so far
        self.delivered = 0  # how many of ``events`` were delivered
        self.holding = False  # after the first transfer action, transfer events are held

    @property
    def active(self) -> bool:
        """True while a trailing transfer run is being tracked (no fast path then)."""
        return self.holding or bool(self.events)

    async def offer(self, ev: AgentEvent) -> list[AgentEvent]:
        """The events to deliver now for own event ``ev``, in order (``ev`` last unless held)."""
        if self.holding:
            transfer_like = await _is_transfer_like(ev)
        else:  # a stream that may call transfer_to_agent counts for now
            transfer_like = _transfer_like_now(ev) is not False
        if transfer_like:
            self.events.append(ev)
            if self.holding:
                return []
            self.delivered = len(self.events)
            if transfer_dest(ev) is not None:
                self.holding = True
            return [ev]
        released = self.events[self.delivered :]
        released.append(ev)
        self.events = []
        self.delivered = 0
        self.holding = False
        return released

    async def chain(self) -> tuple[list[AgentEvent], PendingChain] | None:
        """Once the agent's stream ended: the held events of the first group (to deliver now)
        and the chain to run, or None when the stream did not end with a transfer."""
        if not self.holding:
            return None
        # Streams among the delivered events are complete now: drop a prefix that turned out
        # not to be transfer-like (an assistant stream that called no transfer).
        begin = 0
        for i in range(self.delivered):
            if not await _is_transfer_like(self.events[i]):
                begin = i + 1
        groups = _split_groups(self.events[begin:])
        first = groups[0]
        held = self.events[self.delivered : begin + len(first.events)]
        return held, PendingChain(list(first.targets), groups[1:])


async def ended_abnormally(last: AgentEvent | None) -> bool:
    """True when a stream of events ended with an error, an exit or an interrupt (a message
    stream that ended in an error counts as an error, D1)."""
    if last is None:
        return False
    if last.error is not None:
        return True
    a = last.action
    if a is not None and (a.interrupted is not None or a.exit):
        return True
    out = last.output
    if out is not None and out.stream is not None:
        try:
            await out.stream.collect()
        except BaseException as exc:
            # A stream ending in a CancelledError of its own (not the run's) ended abnormally
            # too: it must not escape to the caller (D9).
            if must_propagate(exc):
                raise
            return True
    return False
