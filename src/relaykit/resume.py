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
from typing import TYPE_CHECKING, Any, Literal

from relaykit.codec import register_type

if TYPE_CHECKING:
    # The flow module imports this one (through events and contexts): a type only.
    from relaykit._chains import PendingChain

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
    ``sub_id`` = tool-call id).

    >>> str(AddressSegment("tool", "search", "call_1"))
    'tool:search:call_1'
    """

    #: An agent (one segment per flow agent) or a tool call.
    kind: Literal["agent", "tool"]
    #: The agent's name, or the tool's name.
    id: str
    #: For a tool call: the tool-call id; None for an agent.
    sub_id: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}" + (f":{self.sub_id}" if self.sub_id else "")


Address = tuple[AddressSegment, ...]
"""Where an interrupt point sits: the segments from the root agent down (D11)."""


@register_type("relaykit.InterruptContext", exclude=("parent", "children"))
@dataclass(slots=True, eq=False)
class InterruptContext:
    """One interrupt point. ``id`` is what ``Runner.resume(targets=...)`` takes.

    ``parent`` links a point to the composite that wrapped it (``None`` at the top);
    ``children`` are the points right below a composite; ``state`` is what the point's agent
    saved (it reads it back as ``ResumeInfo.interrupt_state``).

    >>> leaf = InterruptContext("p1", (AddressSegment("agent", "approver"),), "approve?", True)
    >>> leaf.top() is leaf, [p.id for p in leaf.root_causes()]
    (True, ['p1'])
    """

    #: The point's id, stable across resumes of one run (docs/interrupts-and-resume.md#d11).
    id: str
    #: Where the point sits in the agent tree.
    address: Address
    #: What the interrupting agent or tool said to the caller (the question to answer, say).
    #: Application-defined, hence ``Any``; saved by the codec.
    info: Any
    #: True for a point that actually waits; False for a composite above such points.
    is_root_cause: bool
    #: The composite point that wrapped this one; None at the top.
    parent: InterruptContext | None = None
    #: What the point's agent saved to continue from (read back as
    #: ``ResumeInfo.interrupt_state``). Application-defined, hence ``Any``.
    state: Any = field(default=None, repr=False)
    #: The points right below a composite point.
    children: list[InterruptContext] = field(default_factory=list, repr=False)

    def top(self) -> InterruptContext:
        """The outermost point above this one (itself at the top).

        >>> top = InterruptContext("t", (), "wrapper", False)
        >>> InterruptContext("p", (), "q", True, parent=top).top() is top
        True
        """
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
            if a.address != b.address or a.info != b.info or a.is_root_cause != b.is_root_cause:
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

    >>> point = InterruptContext("p1", (), "approve?", True)
    >>> InterruptInfo("approve?", [point]).top().id
    'p1'
    """

    #: The ``info`` of the outermost interrupt (what the top agent said). Application-defined,
    #: hence ``Any``.
    data: Any = None
    #: The root causes: the points that wait. Answer them by id in ``Runner.resume(targets=)``.
    contexts: list[InterruptContext] = field(default_factory=list)
    #: Where the Runner saved the interrupted run (docs/checkpoints-and-storage.md#d21).
    checkpoint_id: str | None = None
    #: Transfer chains that flow agents left pending on the way up, by their address (D3):
    #: internal state the checkpoint saves so the resume continues the chain.
    pending_chains: dict[Address, PendingChain] = field(
        default_factory=dict, repr=False, compare=False
    )

    def top(self) -> InterruptContext | None:
        """The outermost point of this interrupt (``None`` for an info without contexts).

        >>> InterruptInfo("nothing").top() is None
        True
        """
        return self.contexts[0].top() if self.contexts else None


@dataclass(slots=True)
class ResumeInfo:
    """What a resumed agent learns about its own interrupt point.

    >>> info = ResumeInfo(was_interrupted=True, is_resume_target=True, resume_data="yes")
    >>> info.resume_data if info.is_resume_target else None
    'yes'
    """

    #: Whether the run streams (as ``AgentInput.enable_streaming``).
    enable_streaming: bool = False
    #: The interrupt being resumed, from this agent's point down.
    interrupt_info: InterruptInfo | None = None
    #: True when this agent itself interrupted (its point was saved).
    was_interrupted: bool = False
    #: What this agent saved when it interrupted (``stateful_interrupt``'s ``state``).
    #: Application-defined, hence ``Any``.
    interrupt_state: Any = None
    #: True when the caller answered this point (or resumed every point, D8).
    is_resume_target: bool = False
    #: The caller's answer for this point (``Runner.resume(targets={id: data})``).
    #: Application-defined, hence ``Any``.
    resume_data: Any = None


class ResumeState:
    """The resume information of one resume: every saved point, its state and the targets.

    Each point's state is claimed by the first agent that reaches its address (so the next loop
    iteration of the same agent starts fresh); ids stay stable by address (D11). Built by the
    Runner (``ResumeState.of``); agents read the result of ``claim`` as their ``ResumeInfo``.

    >>> seg = AddressSegment("agent", "approver")
    >>> state = ResumeState({"p1": (seg,)}, {"p1": {"step": 2}}, {"p1": "yes"})
    >>> mine = state.claim((seg,), ResumeInfo())
    >>> mine.interrupt_state, mine.resume_data
    ({'step': 2}, 'yes')
    """

    __slots__ = (
        "_data_used",
        "_id_by_address",
        "_points",
        "_state_used",
        "addresses",
        "data",
        "pending_chains",
        "resume_all",
        "states",
    )

    def __init__(
        self,
        addresses: Mapping[str, Address],
        states: Mapping[str, Any],
        targets: Mapping[str, Any] | None,
        pending_chains: Mapping[Address, PendingChain] | None = None,
    ) -> None:
        """Args:
        addresses: every saved point's address, by point id.
        states: every saved point's state, by point id (application-defined values).
        targets: the resume targets' data by point id; None or empty resumes every point.
        pending_chains: the transfer chains saved with the interrupt, by address.
        """
        #: Every saved point's address, by id.
        self.addresses = dict(addresses)
        #: Every saved point's state, by id.
        self.states = dict(states)
        #: True when the caller named no targets: every point resumes (D8).
        self.resume_all = not targets
        #: The caller's data for each targeted point, by id.
        self.data: dict[str, Any] = dict(targets or {})
        #: Transfer chains still to run, by the address of the flow agent that runs them.
        self.pending_chains: dict[Address, PendingChain] = dict(pending_chains or {})
        self._id_by_address = {addr: pid for pid, addr in self.addresses.items()}
        self._state_used: set[str] = set()
        self._data_used: set[str] = set()
        self._points: list[InterruptContext] = []

    @classmethod
    def of(cls, info: InterruptInfo, targets: Mapping[str, Any] | None) -> ResumeState:
        """The resume state of the interrupt ``info`` (every point below its top).

        Args:
            info: the saved interrupt.
            targets: the caller's data by point id; None or empty resumes every point.
        """
        top = info.top()
        points = list(top.walk()) if top is not None else []
        state = cls(
            {p.id: p.address for p in points},
            {p.id: p.state for p in points},
            targets,
            info.pending_chains,
        )
        state._points = points
        return state

    def interrupt_below(self, address: Address) -> InterruptInfo | None:
        """The interrupt of the outermost saved point at or below ``address``: what a composite
        hands the child it resumes (the child's own interrupt info, not the composite's)."""
        n = len(address)
        best: InterruptContext | None = None
        for point in self._points:
            if point.address[:n] == address and (
                best is None or len(point.address) < len(best.address)
            ):
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
        return ResumeInfo(
            base.enable_streaming, base.interrupt_info, True, self.states.get(pid), target, data
        )

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
