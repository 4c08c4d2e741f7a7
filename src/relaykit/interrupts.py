"""Interrupts: addresses, signals, contexts, resume info and the constructors agents use.

An interrupt point is identified by its *address* (agent and tool segments). The signal tree an
interrupt carries is what the Runner saves; ``InterruptInfo.contexts`` is the user-facing view
(the root causes, each linked to its composite ancestors through ``parent``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from relaykit.codec import register_type
from relaykit.events import AgentAction, AgentEvent

if TYPE_CHECKING:
    from relaykit.context import RunContext

__all__ = [
    "Address",
    "AddressSegment",
    "InterruptContext",
    "InterruptInfo",
    "InterruptSignal",
    "ResumeInfo",
    "ResumeState",
    "composite_interrupt",
    "interrupt",
    "stateful_interrupt",
]


@register_type("relaykit.AddressSegment")
@dataclass(frozen=True, slots=True)
class AddressSegment:
    """One step of an interrupt address: an agent, or a tool call (``id`` = tool name,
    ``sub_id`` = tool-call id)."""

    kind: Literal["agent", "tool"]
    id: str
    sub_id: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}" + (f":{self.sub_id}" if self.sub_id else "")


Address = tuple[AddressSegment, ...]


@register_type("relaykit.InterruptContext")
@dataclass(slots=True, eq=False)
class InterruptContext:
    """One interrupt point as users see it. ``id`` is what ``Runner.resume(targets=...)`` takes."""

    id: str
    address: Address
    info: Any
    is_root_cause: bool
    parent: InterruptContext | None = None

    def equals_without_id(self, other: InterruptContext) -> bool:
        """Compare address, info, root-cause flag and the parent chain, ignoring ids."""
        if (self.address != other.address or self.info != other.info
                or self.is_root_cause != other.is_root_cause):
            return False
        if self.parent is None or other.parent is None:
            return self.parent is None and other.parent is None
        return self.parent.equals_without_id(other.parent)


@register_type("relaykit.InterruptInfo")
@dataclass(slots=True)
class InterruptInfo:
    """The ``action.interrupted`` of an interrupt event: the agent's data and the root causes.

    ``checkpoint_id`` is where the Runner saved the interrupted run (D21): the id given to
    ``run(checkpoint_id=...)`` or one it generated. ``None`` when the Runner has no checkpoint
    store, on events below the Runner, or when saving failed (the save's error event comes
    first).
    """

    data: Any = None
    contexts: list[InterruptContext] = field(default_factory=list)
    checkpoint_id: str | None = None


@dataclass(slots=True, eq=False)
class InterruptSignal:
    """The internal interrupt tree: what checkpoints save (state included)."""

    id: str
    address: Address
    info: Any
    state: Any
    is_root_cause: bool
    subs: list[InterruptSignal] = field(default_factory=list)

    def walk(self) -> Iterable[tuple[InterruptSignal, InterruptSignal | None]]:
        """Every node with its parent, depth first."""
        stack: list[tuple[InterruptSignal, InterruptSignal | None]] = [(self, None)]
        while stack:
            node, parent = stack.pop()
            yield node, parent
            stack.extend((sub, node) for sub in reversed(node.subs))

    def contexts(self) -> list[InterruptContext]:
        """The root-cause contexts, depth first, each linked to its ancestors."""
        made: dict[int, InterruptContext] = {}
        roots: list[InterruptContext] = []
        for node, parent in self.walk():
            ctx = InterruptContext(node.id, node.address, node.info, node.is_root_cause,
                                   made[id(parent)] if parent is not None else None)
            made[id(node)] = ctx
            if node.is_root_cause:
                roots.append(ctx)
        return roots


@dataclass(slots=True)
class ResumeInfo:
    """What a resumed agent learns about its own interrupt point."""

    enable_streaming: bool = False
    interrupt_info: InterruptInfo | None = None
    was_interrupted: bool = False
    interrupt_state: Any = None
    is_resume_target: bool = False
    resume_data: Any = None


class ResumeState:
    """The resume information of one resume: every saved point, its state and the targets.

    Each point's state is claimed by the first agent that reaches its address (so the next loop
    iteration of the same agent starts fresh); ids stay stable by address (D11).
    """

    __slots__ = ("_data_used", "_id_by_address", "_state_used", "addresses", "data",
                 "flow_pending", "resume_all", "states")

    def __init__(self, addresses: Mapping[str, Address], states: Mapping[str, Any],
                 targets: Mapping[str, Any] | None,
                 flow_pending: Mapping[Address, Any] | None = None) -> None:
        self.addresses = dict(addresses)
        self.states = dict(states)
        self.resume_all = not targets
        self.data: dict[str, Any] = dict(targets or {})
        self.flow_pending: dict[Address, Any] = dict(flow_pending or {})
        self._id_by_address = {addr: pid for pid, addr in self.addresses.items()}
        self._state_used: set[str] = set()
        self._data_used: set[str] = set()

    def id_for(self, address: Address) -> str | None:
        """The id a point at ``address`` had in the checkpoint being resumed (D11)."""
        return self._id_by_address.get(address)

    def claim(self, address: Address, base: ResumeInfo) -> ResumeInfo:
        """The ResumeInfo for the agent at ``address`` (marks its state as used)."""
        pid = self._id_by_address.get(address)
        if pid is None or pid in self._state_used:
            return ResumeInfo(base.enable_streaming, base.interrupt_info)
        self._state_used.add(pid)
        target = False
        data = None
        if self.resume_all:
            target = True
        elif pid in self.data and pid not in self._data_used:
            target, data = True, self.data[pid]
            self._data_used.add(pid)
        elif self.has_points_below(address):
            target = True  # composites are targets when anything below them is interrupted
        return ResumeInfo(base.enable_streaming, base.interrupt_info, True,
                          self.states.get(pid), target, data)

    def has_points_below(self, address: Address) -> bool:
        """True when some saved point's address strictly extends ``address``."""
        n = len(address)
        return any(len(a) > n and a[:n] == address for a in self.addresses.values())

    def next_points(self, address: Address) -> list[str]:
        """The segment ids right below ``address`` on the way to saved points, in order."""
        n = len(address)
        seen: dict[str, None] = {}
        for addr in self.addresses.values():
            if len(addr) > n and addr[:n] == address:
                seen.setdefault(addr[n].id, None)
        return list(seen)


def _signal(ctx: RunContext, info: Any, state: Any,
            subs: list[InterruptSignal]) -> InterruptSignal:
    address = ctx.address
    resume = ctx.resume_state
    pid = resume.id_for(address) if resume is not None else None
    return InterruptSignal(pid or uuid.uuid4().hex, address, info, state, not subs, subs)


def _event(signal: InterruptSignal, data: Any) -> AgentEvent:
    info = InterruptInfo(data, signal.contexts())
    return AgentEvent(action=AgentAction(interrupted=info, signal=signal))


def interrupt(ctx: RunContext, info: Any) -> AgentEvent:
    """An interrupt event for the agent running under ``ctx``; yield it as the last event.

    >>> # inside an agent:  yield rk.interrupt(ctx, {"question": "approve?"})
    """
    return _event(_signal(ctx, info, None, []), info)


def stateful_interrupt(ctx: RunContext, info: Any, state: Any) -> AgentEvent:
    """An interrupt that saves ``state`` (read back as ``ResumeInfo.interrupt_state``)."""
    return _event(_signal(ctx, info, state, []), info)


def composite_interrupt(
    ctx: RunContext, info: Any, state: Any,
    *sub_interrupts: AgentEvent | InterruptInfo | InterruptSignal,
) -> AgentEvent:
    """An interrupt whose root causes are the interrupts the agent's children produced."""
    subs: list[InterruptSignal] = []
    pending: dict[Any, Any] = {}
    for sub in sub_interrupts:
        if isinstance(sub, InterruptSignal):
            subs.append(sub)
        elif isinstance(sub, AgentEvent) and sub.action is not None and sub.action.signal:
            subs.append(sub.action.signal)
            # Transfer chains pending below stay pending through the composite (D3).
            pending.update(sub.action.flow_pending or {})
        elif isinstance(sub, InterruptInfo):
            subs.append(_signal_from_info(sub))
        else:
            raise TypeError(f"composite_interrupt: {sub!r} is not an interrupt event or info")
    event = _event(_signal(ctx, info, state, subs), info)
    if pending and event.action is not None:
        event.action.flow_pending = pending
    return event


def _signal_from_info(info: InterruptInfo) -> InterruptSignal:
    """Rebuild a signal tree (without states) from user-facing contexts."""
    nodes: dict[str, InterruptSignal] = {}
    tops: list[InterruptSignal] = []
    for leaf in info.contexts:
        chain: list[InterruptContext] = []
        c: InterruptContext | None = leaf
        while c is not None:
            chain.append(c)
            c = c.parent
        child: InterruptSignal | None = None
        for c in chain:
            node = nodes.get(c.id)
            fresh = node is None
            if node is None:
                node = nodes[c.id] = InterruptSignal(c.id, c.address, c.info, None, c.is_root_cause)
            if child is not None and child not in node.subs:
                node.subs.append(child)
            child = node
            if not fresh:
                break
        else:
            if child is not None:
                tops.append(child)
    if len(tops) != 1:
        raise ValueError("interrupt contexts do not share a single top-level interrupt point")
    return tops[0]
