"""Interrupt points and what a resume needs: addresses, interrupt contexts, resume info.

This module is pure data (no agents, events or contexts), so that events, contexts and the
checkpoint document can all use it. An interrupt is a tree of ``InterruptContext`` points: the
points that actually wait (*root causes*) and the composites above them (workflows, chat
agents, agent tools...). The same tree is what the caller sees (``InterruptInfo.contexts``
lists the root causes, each linked to its ancestors through ``parent``), what checkpoints save,
and what a resume claims point by point (``ResumeState``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from relaykit.codec import register_type

__all__ = [
    "Address",
    "AddressSegment",
    "InterruptContext",
    "InterruptInfo",
    "ResumeInfo",
    "ResumeState",
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


@register_type("relaykit.InterruptContext", exclude=("parent", "children"))
@dataclass(slots=True, eq=False)
class InterruptContext:
    """One interrupt point. ``id`` is what ``Runner.resume(targets=...)`` takes.

    ``parent`` links a point to the composite that wrapped it (``None`` at the top);
    ``children`` are the points right below a composite; ``state`` is what the point's agent
    saved (it reads it back as ``ResumeInfo.interrupt_state``).
    """

    id: str
    address: Address
    info: Any
    is_root_cause: bool
    parent: InterruptContext | None = None
    state: Any = field(default=None, repr=False)
    children: list[InterruptContext] = field(default_factory=list, repr=False)

    def top(self) -> InterruptContext:
        """The outermost point above this one (itself at the top)."""
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def walk(self) -> Iterator[InterruptContext]:
        """This point and every point below it, depth first, parents before children."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def root_causes(self) -> list[InterruptContext]:
        """The points below this one (itself included) that actually wait, depth first."""
        return [node for node in self.walk() if node.is_root_cause]

    def equals_without_id(self, other: InterruptContext) -> bool:
        """Compare address, info, root-cause flag and the parent chain, ignoring ids."""
        a: InterruptContext | None = self
        b: InterruptContext | None = other
        while a is not None and b is not None:
            if (a.address != b.address or a.info != b.info
                    or a.is_root_cause != b.is_root_cause):
                return False
            a, b = a.parent, b.parent
        return a is None and b is None


@register_type("relaykit.InterruptInfo", exclude=("pending_chains",))
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
    #: Transfer chains that flow agents left pending on the way up, by their address (D3):
    #: internal state the checkpoint saves so the resume continues the chain.
    pending_chains: dict[Address, Any] = field(default_factory=dict, repr=False,
                                               compare=False)

    def top(self) -> InterruptContext | None:
        """The outermost point of this interrupt (``None`` for an info without contexts)."""
        return self.contexts[0].top() if self.contexts else None


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

    __slots__ = ("_data_used", "_id_by_address", "_points", "_state_used", "addresses",
                 "data", "pending_chains", "resume_all", "states")

    def __init__(self, addresses: Mapping[str, Address], states: Mapping[str, Any],
                 targets: Mapping[str, Any] | None,
                 pending_chains: Mapping[Address, Any] | None = None) -> None:
        self.addresses = dict(addresses)
        self.states = dict(states)
        self.resume_all = not targets
        self.data: dict[str, Any] = dict(targets or {})
        self.pending_chains: dict[Address, Any] = dict(pending_chains or {})
        self._id_by_address = {addr: pid for pid, addr in self.addresses.items()}
        self._state_used: set[str] = set()
        self._data_used: set[str] = set()
        self._points: list[InterruptContext] = []

    @classmethod
    def of(cls, info: InterruptInfo, targets: Mapping[str, Any] | None) -> ResumeState:
        """The resume state of the interrupt ``info`` (every point below its top)."""
        top = info.top()
        points = list(top.walk()) if top is not None else []
        state = cls({p.id: p.address for p in points}, {p.id: p.state for p in points},
                    targets, info.pending_chains)
        state._points = points
        return state

    def interrupt_below(self, address: Address) -> InterruptInfo | None:
        """The interrupt of the outermost saved point at or below ``address``: what a composite
        hands the child it resumes (the child's own interrupt info, not the composite's)."""
        n = len(address)
        best: InterruptContext | None = None
        for point in self._points:
            if point.address[:n] == address and (
                    best is None or len(point.address) < len(best.address)):
                best = point
        return InterruptInfo(best.info, best.root_causes()) if best is not None else None

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
