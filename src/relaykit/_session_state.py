"""Session mode's pieces shared by the turn (``_session_run``) and the invocation
(``_session_invocation``): the stored pause, the cached history, the checks and small rules."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from relaykit._cancel import CancelSignal
from relaykit._session_history import (
    record_of,
    superseded_ids,
)
from relaykit.codec import loads, register_type
from relaykit.compaction import (
    CompactionConfig,
    Summarizer,
)
from relaykit.context import PriorTurns
from relaykit.errors import (
    ConfigurationError,
    SerializationError,
)
from relaykit.flow import FlowAgent
from relaykit.messages import Message
from relaykit.options import AgentOptions
from relaykit.resume import InterruptInfo
from relaykit.sessions._records import SessionRef
from relaykit.sessions.base import (
    HistoryMark,
    Session,
    SessionEvent,
    SessionService,
    TurnView,
    compaction_range,
)

__all__ = ["AFTER_RUN_GRACE", "DEFAULT_SESSION_LOCK_TIMEOUT", "SessionPause"]

logger = logging.getLogger("relaykit")

#: The default of ``Runner(session_lock_timeout=...)``: seconds a turn waits for the session.
DEFAULT_SESSION_LOCK_TIMEOUT = 10.0
#: How long ``after_run`` may take once the caller cancelled the run (D25).
AFTER_RUN_GRACE = 5.0
#: How many sessions' histories a Runner keeps decoded between turns.
CACHED_SESSIONS = 128
PAUSE_FORMAT = "relaykit/session-pause"
_PLACEHOLDER = "Uploaded file: {}"


@register_type("relaykit.SessionPause")
@dataclass(slots=True)
class SessionPause:
    """A session's paused invocation, as ``SessionService.set_checkpoint`` stores it.

    >>> SessionPause("inv-1", b"...").invocation_id
    'inv-1'
    """

    #: The paused invocation's id (the continuation runs under it).
    invocation_id: str
    #: The checkpoint document of the interrupted run (``encode_checkpoint``).
    checkpoint: bytes
    #: The id of the last event of the session's history when the pause was saved: what the
    #: invocation's agents stored after it belongs to an attempt to continue this pause, which
    #: a retry leaves out (``earlier_attempt``). None in pauses an older relaykit stored (the
    #: invocation's last interrupt event marks the pause then).
    last_event_id: str | None = None


@dataclass(slots=True)
class _Cached:
    """A session's history as this Runner last read it: the stored events, and their
    records (built once, rewritten messages cached on them)."""

    mark: HistoryMark
    events: list[SessionEvent] = field(default_factory=list)
    prior: PriorTurns = field(default_factory=PriorTurns)
    # The invocation id and event id of each record (to leave events out: the paused
    # invocation's on a resume, the turn's own after a compaction read them back).
    invocations: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    def extend(self, events: Sequence[SessionEvent]) -> None:
        for event in events:
            dropped = superseded_ids(event)
            if dropped:
                self._drop(dropped)
                continue
            self.events.append(event)
            rec = record_of(event)
            if rec is not None:
                self.prior.records.append(rec)
                self.invocations.append(event.invocation_id)
                self.ids.append(event.id)

    def _drop(self, ids: set[str]) -> None:
        """Leave out the events an attempt that was retried stored (rare: rebuilt whole)."""
        self.events = [e for e in self.events if e.id not in ids]
        kept = [i for i, event_id in enumerate(self.ids) if event_id not in ids]
        self.prior = PriorTurns([self.prior.records[i] for i in kept])
        self.invocations = [self.invocations[i] for i in kept]
        self.ids = [self.ids[i] for i in kept]


@dataclass(slots=True)
class _Turn:
    """What one call asked for."""

    ref: SessionRef
    messages: list[Message]
    resume: bool
    targets: dict[str, Any]
    delta: dict[str, Any]
    skip: bool
    agent_options: dict[str, AgentOptions] = field(default_factory=dict)
    #: The run's cancel signal (``RunHandle.cancel``, D26).
    cancel: CancelSignal | None = None
    #: Create the session when it does not exist (None: the Runner's ``auto_create_session``).
    create_session: bool | None = None


class _StoreFailed(Exception):
    """Storing an agent's event failed: the invocation ends (D20)."""


# -- helpers ------------------------------------------------------------------------------
def _check_user_message(message: Message) -> None:
    """A message a user may send in session mode (``ConfigurationError`` otherwise)."""
    if message.role not in ("user", "tool"):
        raise ConfigurationError(
            f"in session mode a turn sends the user's messages (role 'user') or tool "
            f"responses (role 'tool'), not a {message.role!r} message: earlier turns are the "
            "session's own history"
        )
    if message.tool_calls:
        raise ConfigurationError(
            "a user message cannot carry tool calls (only tool responses, "
            "Message.tool(result, tool_call_id=...), answering a paused call)"
        )
    if message.role == "tool" and not message.tool_call_id:
        raise ConfigurationError(
            "a tool response needs the id of the call it answers: "
            "Message.tool(result, tool_call_id=...)"
        )
    try:
        message.content.encode("utf-8")
    except (UnicodeEncodeError, AttributeError):
        raise ConfigurationError(
            "a message's content must be a str that encodes as UTF-8 (it holds an unpaired "
            "surrogate, or is not text)"
        ) from None


def _runs(writes: Sequence[tuple[str, str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """``writes`` grouped into runs of one agent, in order: (agent, its values)."""
    runs: list[tuple[str, dict[str, Any]]] = []
    for agent, key, value in writes:
        if not runs or runs[-1][0] != agent:
            runs.append((agent, {}))
        runs[-1][1][key] = value
    return runs


async def _read_plainly(service: SessionService, ref: SessionRef) -> TurnView | None:
    """``read_turn`` for a service without it: the whole session, every turn."""
    session = await service.get_session(ref.app_name, ref.user_id, ref.session_id)
    if session is None:
        return None
    history = await service.load_history(ref.app_name, ref.user_id, ref.session_id)
    pause = await service.get_checkpoint(ref.app_name, ref.user_id, ref.session_id)
    count = len(session.events)
    plain = Session(session.app_name, session.user_id, session.id, session.state, [], 0.0)
    plain.last_update_time = session.last_update_time
    return TurnView(plain, HistoryMark(0, count, None), history, False, pause)


def _decode_pause(data: bytes, ref: SessionRef, key: bytes | None = None) -> SessionPause:
    """The pause stored with the session ``ref``; a ``SerializationError`` when it cannot be
    read: corrupt, not a pause, or -- with a signing ``key`` -- unsigned or not signed with
    ``key`` (as the checkpoint inside it would be)."""
    what = f"the pause of {ref}"
    pause = loads(data, kind=PAUSE_FORMAT, key=key, what=what)
    if not isinstance(pause, SessionPause):
        raise SerializationError(f"{what} does not hold a paused invocation")
    if not pause.invocation_id or pause.last_event_id == "":
        raise SerializationError(f"{what} is corrupt: it names no invocation or no event")
    return pause


def _point_for_call(info: InterruptInfo, call_id: str) -> str | None:
    """The id of the waiting point whose address ends with the tool call ``call_id``."""
    for point in info.contexts:
        for segment in reversed(point.address):
            if segment.kind == "tool":
                if segment.sub_id == call_id:
                    return point.id
                break
    return None


def _stored_responses(events: Sequence[SessionEvent], invocation_id: str) -> set[str]:
    """The tool-call ids the user's stored tool responses of the invocation answer."""
    return {
        event.message.tool_call_id
        for event in events
        if event.invocation_id == invocation_id
        and event.author == "user"
        and event.message is not None
        and event.message.role == "tool"
        and event.message.tool_call_id
    }


def _may_compact(events: Sequence[SessionEvent], config: CompactionConfig) -> bool:
    """Whether a compaction rule could fire on ``events`` (the latest summary, if any, then
    the events after it): enough new invocations, or a large enough prompt."""
    interval = config.compaction_interval
    if interval is not None:
        invocations: set[str] = set()
        for event in reversed(events):
            if compaction_range(event) is not None:
                break
            if event.author == "user" and event.message is not None:
                invocations.add(event.invocation_id)
        if len(invocations) >= interval:
            return True
    threshold = config.token_threshold
    return threshold is not None and _prompt_tokens(events) >= threshold


def _prompt_tokens(events: Sequence[SessionEvent]) -> int:
    """The input tokens of the latest model reply stored after the latest summary."""
    for event in reversed(events):
        if compaction_range(event) is not None:
            return 0
        message = event.message
        if message is None:
            continue
        usage = message.metadata.get("usage") if message.metadata else None
        if isinstance(usage, dict):
            tokens = usage.get("input_tokens")
            if isinstance(tokens, int) and not isinstance(tokens, bool):
                return tokens
    return 0


def _root_model(root: FlowAgent) -> Summarizer:
    """The default summarizer: the root LLM agent's model (D28)."""
    from relaykit.agents.chat import ChatModelAgent

    agent: Any = root.agent
    while not isinstance(agent, ChatModelAgent) and getattr(agent, "agent", None) is not None:
        agent = agent.agent
    if not isinstance(agent, ChatModelAgent):
        raise ConfigurationError(
            "compaction without a summarizer uses the root LLM agent's model, but the root "
            f"agent {root.name!r} is not a ChatModelAgent: set CompactionConfig(summarizer=...)"
        )
    model: Summarizer = agent.model
    return model
