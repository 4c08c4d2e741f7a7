"""Session mode: stored events as history records, who spoke last, and where a turn starts.

Pure functions over a session's stored events and the agent tree (no storage): the Runner's
session mode (``relaykit._session_run``) reads the session, then asks these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from relaykit._tree import unwrap_layers
from relaykit.context import RecordedEvent
from relaykit.events import AgentAction, AgentEvent, AgentOutput, RunStep
from relaykit.flow import USER_AUTHOR, FlowAgent
from relaykit.messages import Message
from relaykit.resume import InterruptContext, InterruptInfo
from relaykit.sessions.base import SessionEvent, compaction_range

__all__ = [
    "ABANDONED_TEXT",
    "STOPPED_TEXT",
    "Route",
    "abandoned_marker",
    "earlier_attempt",
    "is_abandon",
    "last_speaker",
    "pending_tool_calls",
    "records_of",
    "routes_of",
    "stopped_calls",
    "stored_action",
    "superseded_ids",
    "superseding",
]

#: The tool result that answers a call left pending by an abandoned pause (D12).
ABANDONED_TEXT = "error: abandoned — the user sent a new message"
#: The tool result that answers a call of a turn that was stopped, cancelled or killed before
#: the call returned (stored when the next turn starts).
STOPPED_TEXT = "error: not completed — the turn ended before this call returned"


def abandoned_marker() -> AgentAction:
    """The action marking a stored answer to an abandoned call (ignored by routing)."""
    return AgentAction(custom={"abandoned": True})


def is_abandon(event: SessionEvent) -> bool:
    """True for the stored answer to a call an abandoned pause left pending."""
    action = event.action
    return action is not None and action.custom == {"abandoned": True}


def superseding(ids: Sequence[str]) -> AgentAction:
    """The action of a stored marker that leaves the events ``ids`` out of histories."""
    return AgentAction(custom={"superseded": list(ids)})


def superseded_ids(event: SessionEvent) -> set[str] | None:
    """The event ids a marker made by ``superseding`` leaves out, else None."""
    action = event.action
    custom = action.custom if action is not None else None
    if not isinstance(custom, dict) or custom.keys() != {"superseded"}:
        return None
    ids = custom["superseded"]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return None
    return set(ids)


def earlier_attempt(
    events: Sequence[SessionEvent], invocation_id: str, after: str | None = None
) -> list[str]:
    """The ids of the agents' events the paused invocation stored after its pause was saved:
    an earlier attempt to continue it that did not finish.

    ``after`` is the id of the last event stored before the pause (``SessionPause``): what
    follows it is the earlier attempt, also when that attempt paused again but died (or failed
    to store) before its own interrupt event was stored. Without it (a pause stored by an
    older relaykit), or when that event is not in ``events``, the attempt starts after the
    invocation's last interrupt event. Interrupt events are never listed (they are no part of
    any history), nor the user's events or state-only ones (their state was applied).
    """
    start = _position(events, after) if after is not None else None
    if start is None:
        start = _last_interrupt(events, invocation_id)
    if start is None:
        return []
    return [
        event.id
        for event in events[start + 1 :]
        if event.invocation_id == invocation_id
        and event.author != USER_AUTHOR
        and event.message is not None
        and (event.action is None or event.action.interrupted is None)
    ]


def _position(events: Sequence[SessionEvent], event_id: str) -> int | None:
    """The index of the event ``event_id`` in ``events`` (searched from the end), or None."""
    for i in range(len(events) - 1, -1, -1):
        if events[i].id == event_id:
            return i
    return None


def _last_interrupt(events: Sequence[SessionEvent], invocation_id: str) -> int | None:
    """The index of the invocation's last interrupt event in ``events``, or None."""
    for i in range(len(events) - 1, -1, -1):
        event = events[i]
        action = event.action
        if event.invocation_id == invocation_id and action is not None and action.interrupted:
            return i
    return None


def record_of(event: SessionEvent) -> RecordedEvent | None:
    """The history record of a stored event, or None when it is not part of any history
    (no message, an interrupt, the user's copy of a tool response)."""
    message = event.message
    if message is None:
        return None
    action = event.action
    if action is not None and action.interrupted is not None:
        return None
    author = event.author
    if compaction_range(event) is not None:
        author = USER_AUTHOR  # a summary reads as one user message (D25)
    elif author == USER_AUTHOR and message.role == "tool":
        return None  # the resumed agent's own tool event carries the result (D12)
    path = tuple(RunStep(name) for name in event.run_path)
    output = AgentOutput(message, None, message.role, message.tool_name)
    rec = RecordedEvent(AgentEvent(author, path, output, action))
    if author == USER_AUTHOR:
        rec.rewritten = message  # every agent reads the user's messages as they are
    return rec


def records_of(events: Iterable[SessionEvent]) -> list[RecordedEvent]:
    """The history records of ``events``, in order (see ``record_of``)."""
    records = []
    for event in events:
        rec = record_of(event)
        if rec is not None:
            records.append(rec)
    return records


def user_record(message: Message) -> RecordedEvent:
    """A record of the user's ``message`` for this turn's run history (read as is)."""
    output = AgentOutput(message, None, message.role, message.tool_name)
    rec = RecordedEvent(AgentEvent(USER_AUTHOR, (), output))
    rec.rewritten = message
    return rec


def stored_action(action: AgentAction | None) -> AgentAction | None:
    """``action`` as a session stores it: an interrupt keeps, per waiting point, its id,
    address, info and root-cause flag (D12) — not the agents' saved state, which lives in
    the pause."""
    if action is None or action.interrupted is None:
        return action
    info = action.interrupted
    points = [InterruptContext(p.id, p.address, p.info, p.is_root_cause) for p in info.contexts]
    return AgentAction(
        action.exit,
        InterruptInfo(info.data, points, None),
        action.transfer_to_agent,
        action.break_loop,
        action.custom,
    )


def pending_tool_calls(
    events: Sequence[SessionEvent], invocation_id: str, text: str = ABANDONED_TEXT
) -> list[SessionEvent]:
    """The calls the invocation's stored events made and no stored event answered, each as a
    stored tool message ``text`` answering it (authored by the calling agent, marked
    abandoned)."""
    answered: set[str] = set()
    calls: list[tuple[SessionEvent, str, str]] = []
    for event in events:
        message = event.message
        if message is None:
            continue
        if message.role == "tool" and message.tool_call_id:
            answered.add(message.tool_call_id)
        if event.invocation_id == invocation_id and event.author != USER_AUTHOR:
            calls.extend((event, call.id, call.name) for call in message.tool_calls)
    return [
        SessionEvent(
            invocation_id=invocation_id,
            author=event.author,
            message=Message.tool(text, tool_call_id=call_id, tool_name=name),
            run_path=event.run_path,
            action=abandoned_marker(),
        )
        for event, call_id, name in calls
        if call_id not in answered
    ]


def stopped_calls(events: Sequence[SessionEvent], text: str = STOPPED_TEXT) -> list[SessionEvent]:
    """``pending_tool_calls`` of the latest invocation (its events at the end of ``events``),
    answered ``text``: the calls it left without a result when it stopped early (or, answered
    ``ABANDONED_TEXT``, those of a paused invocation whose pause cannot be read: the paused
    invocation is always the latest one)."""
    if not events:
        return []
    latest = events[-1].invocation_id
    start = len(events)
    while start > 0 and events[start - 1].invocation_id == latest:
        start -= 1
    return pending_tool_calls(events[start:], latest, text)


def last_speaker(events: Sequence[SessionEvent], agents: Iterable[str]) -> str | None:
    """Who the next turn starts at (D25): the author of the last stored event with a message
    whose author is an agent of the tree (errors, state-only events, interrupts, abandon
    answers and summaries ignored); if that event is a transfer, its target. A compaction
    summary's run path ends with who spoke last in the events it covers: read when no agent
    spoke after it."""
    names = set(agents)
    for event in reversed(events):
        if compaction_range(event) is not None:
            path = event.run_path
            if path and path[-1] in names:
                return path[-1]
            continue
        if event.message is None or event.author not in names:
            continue
        if is_abandon(event):
            continue
        action = event.action
        if action is not None and action.interrupted is not None:
            continue
        if action is not None and action.transfer_to_agent is not None:
            dest = action.transfer_to_agent.dest_agent_name
            return dest if dest in names else event.author
        return event.author
    return None


@dataclass(frozen=True, slots=True)
class Route:
    """Where a turn that starts at an agent runs: the flow agents from the root to it."""

    #: The flow agents from the root to the start agent (both included).
    chain: tuple[FlowAgent, ...]

    @property
    def start(self) -> FlowAgent:
        """The flow agent the turn starts at."""
        return self.chain[-1]


def _is_isolating(layer: Any) -> bool:
    """True for a deterministic-transfer wrapper around a flow agent (an isolated history)."""
    return hasattr(layer, "to_agent_names") and isinstance(getattr(layer, "agent", None), FlowAgent)


def routes_of(root: FlowAgent) -> dict[str, Route | None]:
    """For each agent of the tree, where a turn it should start at runs (D18): its chain of
    flow agents when it and every agent above it (but the root) may transfer to its parent;
    an agent inside an isolated deterministic wrapper starts at the wrapper's flow agent; None
    when the turn must start at the root."""
    routes: dict[str, Route | None] = {}
    # (agent, the chain of outer flow agents above it, the isolating ancestor's chain or None)
    stack: list[tuple[Any, tuple[FlowAgent, ...], tuple[FlowAgent, ...] | None]] = [
        (root, (), None)
    ]
    while stack:
        agent, above, isolated = stack.pop()
        layers = unwrap_layers(agent)
        outer = layers[0] if isinstance(layers[0], FlowAgent) else None
        chain = (*above, outer) if outer is not None else above
        target = isolated if isolated is not None else chain
        ok = bool(target) and all(not fa.disallow_transfer_to_parent for fa in target[1:])
        routes[agent.name] = Route(target) if ok and target and target[-1] is not root else None
        inner_isolated = isolated
        if inner_isolated is None and any(_is_isolating(layer) for layer in layers):
            inner_isolated = chain
        children: dict[int, Any] = {}
        for layer in layers:
            for sub in getattr(layer, "sub_agents", None) or ():
                children.setdefault(id(sub), sub)
        stack.extend((sub, chain, inner_isolated) for sub in children.values())
    return routes
