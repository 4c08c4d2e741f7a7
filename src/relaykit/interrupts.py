"""The interrupt events agents yield: ``interrupt``, ``stateful_interrupt`` and
``composite_interrupt``.

Each builds the ``InterruptContext`` point of the agent running under ``ctx`` (its address, a
stable id, D11) and an event whose ``action.interrupted`` carries it. A composite becomes the
parent of its children's points, so the root causes' ``parent`` chains always lead to the top.
The data types live in ``relaykit.resume`` and are re-exported here.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from relaykit.context import RunContext
from relaykit.events import AgentAction, AgentEvent
from relaykit.resume import (
    Address,
    AddressSegment,
    InterruptContext,
    InterruptInfo,
    ResumeInfo,
    ResumeState,
)

if TYPE_CHECKING:
    from relaykit._chains import PendingChain  # flow imports this module

__all__ = [
    "Address",
    "AddressSegment",
    "InterruptContext",
    "InterruptInfo",
    "ResumeInfo",
    "ResumeState",
    "composite_interrupt",
    "interrupt",
    "interrupt_of",
    "stateful_interrupt",
]


def interrupt_of(ev: AgentEvent | None) -> InterruptInfo | None:
    """The interrupt ``ev`` carries — one made by the functions below (it has points) — or
    None. An ``InterruptInfo`` without contexts is not a resumable interrupt.

    >>> from relaykit.context import RunContext
    >>> interrupt_of(interrupt(RunContext.new(), "approve?")).data
    'approve?'
    >>> interrupt_of(AgentEvent.exit()) is None
    True
    """
    if ev is None:
        return None
    action = ev.action
    if action is None:
        return None
    info = action.interrupted
    return info if info is not None and info.contexts else None


# ``info`` and ``state`` below are typed ``Any``: they are the application's own values (what
# to tell the caller, what to save), stored by the codec and handed back untouched.
def _point(
    ctx: RunContext, info: Any, state: Any, children: list[InterruptContext]
) -> InterruptContext:
    address = ctx.address
    resume = ctx.resume_state
    pid = resume.id_for(address) if resume is not None else None
    point = InterruptContext(
        pid or uuid.uuid4().hex, address, info, not children, None, state, children
    )
    for child in children:
        child.parent = point
    return point


def _event(
    point: InterruptContext, data: Any, pending: dict[Address, PendingChain] | None = None
) -> AgentEvent:
    info = InterruptInfo(data, point.root_causes(), None, pending or {})
    return AgentEvent(action=AgentAction(interrupted=info))


def interrupt(ctx: RunContext, info: Any) -> AgentEvent:
    """An interrupt event for the agent running under ``ctx``; yield it as the last event.

    The agent's ``resume`` is called when the run is resumed (see ``ResumableAgent``).

    Args:
        ctx: the context the interrupting agent runs under (its address names the point).
        info: what to tell the caller (``InterruptContext.info``), any value the codec saves.

    >>> from relaykit.context import RunContext
    >>> ev = interrupt(RunContext.new(), {"question": "approve?"})
    >>> ev.action.interrupted.contexts[0].info
    {'question': 'approve?'}
    """
    return _event(_point(ctx, info, None, []), info)


def stateful_interrupt(ctx: RunContext, info: Any, state: Any) -> AgentEvent:
    """An interrupt that saves ``state`` (read back as ``ResumeInfo.interrupt_state``).

    Args:
        ctx: the context the interrupting agent runs under.
        info: what to tell the caller, any value the codec saves.
        state: what the agent needs to continue, any value the codec saves.

    >>> from relaykit.context import RunContext
    >>> ev = stateful_interrupt(RunContext.new(), "approve?", {"step": 2})
    >>> ev.action.interrupted.contexts[0].state
    {'step': 2}
    """
    return _event(_point(ctx, info, state, []), info)


def composite_interrupt(
    ctx: RunContext,
    info: Any,
    state: Any,
    *sub_interrupts: AgentEvent | InterruptInfo | InterruptContext,
) -> AgentEvent:
    """An interrupt whose root causes are the interrupts the agent's children produced.

    The new point becomes the parent of each sub-interrupt's top point.

    Args:
        ctx: the context the composite agent runs under.
        info: what to tell the caller about the composite, any value the codec saves.
        state: what the composite needs to continue (which children to resume, say).
        *sub_interrupts: the children's interrupt events, their ``InterruptInfo``s or their
            points.

    >>> from relaykit.context import RunContext
    >>> ctx = RunContext.new()
    >>> child = interrupt(ctx.derive(address=(AddressSegment("agent", "approver"),)), "ok?")
    >>> ev = composite_interrupt(ctx, "workflow paused", {"index": 0}, child)
    >>> [p.info for p in ev.action.interrupted.contexts], ev.action.interrupted.top().info
    (['ok?'], 'workflow paused')
    """
    children: list[InterruptContext] = []
    pending: dict[Address, PendingChain] = {}
    for sub in sub_interrupts:
        if isinstance(sub, InterruptContext):
            top: InterruptContext | None = sub.top()
        else:
            sub_info = interrupt_of(sub) if isinstance(sub, AgentEvent) else sub
            if not isinstance(sub_info, InterruptInfo) or not sub_info.contexts:
                raise TypeError(
                    f"composite_interrupt: {sub!r} is not an interrupt event, info or point"
                )
            top = sub_info.top()
            # Transfer chains pending below stay pending through the composite (D3).
            pending.update(sub_info.pending_chains)
        if top is not None and all(top is not c for c in children):
            children.append(top)
    return _event(_point(ctx, info, state, children), info, pending)
