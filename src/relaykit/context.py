"""RunContext: what every agent receives — run path, session values, run history, resume info."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol

from relaykit.events import AgentEvent, AgentInput, RunPath
from relaykit.messages import Message
from relaykit.resume import Address, ResumeState

if TYPE_CHECKING:
    # agent.py imports this module: the agent type is only needed by the type checker.
    from relaykit._cancel import CancelSignal
    from relaykit._invocation import Invocation
    from relaykit.agent import Agent
    from relaykit.options import AgentOptions

__all__ = [
    "DEFAULT_MAX_TRANSFERS",
    "UNCHANGED",
    "PriorTurns",
    "RecordedEvent",
    "RunContext",
    "RunHistory",
    "RunOptions",
    "TransferScope",
    "Unchanged",
]


#: The next recording order (``RecordedEvent.seq``); the flat run's fast paths, which build
#: records inline, take theirs here too.
next_record_seq = itertools.count().__next__
_new_object = object.__new__


class RecordedEvent:
    """An event in the run history, with its message resolved once and its rewrite cached.

    >>> from relaykit.messages import Message
    >>> RecordedEvent(AgentEvent.from_message(Message.assistant("hi"))).message.content
    'hi'
    """

    __slots__ = ("event", "message", "rewritten", "seq", "skip")

    def __init__(self, event: AgentEvent) -> None:
        #: The event as recorded (stamped with its agent and run path).
        self.event = event
        #: Global recording order: parallel lanes' events are joined by it.
        self.seq = next_record_seq()
        out = event.output
        # Streams are resolved lazily (when a history is built); plain messages at once.
        #: The event's message; ``None`` for actions, errors and streams not read yet.
        self.message: Message | None = out.message if out is not None else None
        #: ``message`` as another agent reads it (a user-role context line), cached.
        self.rewritten: Message | None = None
        #: True for a stream that ended with ``WillRetryError``, or was cut by a cancel
        #: (``StreamCancelledError``): left out of histories.
        self.skip = False

    @staticmethod
    def of(event: AgentEvent) -> RecordedEvent:
        """``RecordedEvent(event)``, built without the class call: flow agents record every
        event, and the call of ``__init__`` through the class costs more than the record.
        (The fast paths of ``FlowAgent._drive`` and ``Runner._drive`` build a plain message's
        record inline, setting the same fields: change them together.)

        >>> from relaykit.messages import Message
        >>> RecordedEvent.of(AgentEvent.from_message(Message.assistant("hi"))).message.content
        'hi'
        """
        rec = _new_object(RecordedEvent)
        rec.event = event
        rec.seq = next_record_seq()
        out = event.output
        rec.message = out.message if out is not None else None
        rec.rewritten = None
        rec.skip = False
        return rec

    async def resolve(self) -> Message | None:
        """The event's message, concatenating a stream on first use (None for an event without
        one, a stream that will be retried, or one a cancel cut)."""
        out = self.event.output
        if self.message is None and out is not None and out.stream is not None:
            from relaykit.errors import StreamCancelledError, WillRetryError

            try:
                self.message = await out.stream.collect()
            except (WillRetryError, StreamCancelledError):
                self.skip = True
                return None
        return self.message


class PriorTurns:
    """Session mode: the earlier turns' stored events as history records, and the message
    lists built from them for each agent that read them (so a long session's history is
    built once and then extended, not rebuilt every turn).

    >>> from relaykit.messages import Message
    >>> prior = PriorTurns([RecordedEvent(AgentEvent.from_message(Message.assistant("hi")))])
    >>> len(prior), prior.built
    (1, {})
    """

    __slots__ = ("built", "records")

    def __init__(self, records: list[RecordedEvent] | None = None) -> None:
        #: The records, oldest first; only ever appended to.
        self.records: list[RecordedEvent] = records if records is not None else []
        #: Per (reading agent, transfer messages skipped): how many records were read, and
        #: the messages built from them.
        self.built: dict[tuple[str, bool], tuple[int, list[Message]]] = {}

    def __len__(self) -> int:
        return len(self.records)


@dataclass(slots=True)
class RunHistory:
    """The run history: the events flow agents recorded, and the values shared with them.

    Several histories can share one ``values`` dict (a deterministic wrapper's isolated history,
    an agent tool's inner run, parallel lanes).

    >>> history = RunHistory({"user": "ana"})
    >>> lane = history.fork()
    >>> lane.values is history.values, lane.visible()
    (True, [])
    """

    #: The session values shared by every agent of the run. ``Any``: the values are the
    #: application's own (anything the codec can save, when the run is checkpointed).
    values: dict[str, Any] = field(default_factory=dict)
    #: The events recorded into this history, in order.
    events: list[RecordedEvent] = field(default_factory=list)
    #: The enclosing lane's history (parallel branches), or None for a run's own history.
    parent: RunHistory | None = None
    #: How many events of ``parent`` this lane sees: ``parent.visible()[:base]``.
    base: int = 0
    #: Session mode: the stored events of earlier turns, which every agent of the run reads
    #: before the root input (docs/sessions.md); None outside session mode and in the
    #: separate history of an agent tool.
    prior: PriorTurns | None = None

    def record(self, event: AgentEvent) -> None:
        """Append ``event`` (already stamped) to the history."""
        self.events.append(RecordedEvent.of(event))

    def visible(self) -> list[RecordedEvent]:
        """Everything this history sees: enclosing lanes' events up to the fork, then its own."""
        if self.parent is None:
            return self.events
        return self.parent.visible()[: self.base] + self.events if self.base else self.events

    def fork(self) -> RunHistory:
        """A lane that sees what this history has now, records into its own list."""
        return RunHistory(self.values, [], self, len(self.visible()), self.prior)


#: The default of ``Runner(max_transfers=...)`` (docs/errors-and-limits.md#d23).
DEFAULT_MAX_TRANSFERS = 100


@dataclass(slots=True)
class RunOptions:
    """Options and counters shared by every flow agent of one ``run`` or ``resume`` call.

    >>> options = RunOptions(max_transfers=1)
    >>> options.count_transfer("triage", "billing") is None
    True
    >>> options.count_transfer("billing", "triage")[:35]
    'run exceeded max_transfers=1: the t'
    """

    #: Leave the ``transfer_to_agent`` call and its result out of the histories agents read
    #: (``Runner.run(skip_transfer_messages=True)``, see docs/trees-and-transfer.md#d5).
    skip_transfer_messages: bool = False
    #: The most transfers one run may perform (docs/errors-and-limits.md#d23); the one that
    #: would exceed it is refused.
    max_transfers: int = DEFAULT_MAX_TRANSFERS
    #: Transfers performed so far in this run (LLM, chains, deterministic, back to the parent).
    transfers: int = 0
    #: The agents of the latest transfers, oldest first (named by the limit's error).
    trail: list[str] = field(default_factory=list)
    #: Session mode: the session values written since the last stored event, in order, as
    #: (agent, key, value); the Runner stores them as ``state_delta`` of the writing agent's
    #: next event (docs/durable-runner.md). None outside session mode (writes not tracked).
    writes: list[tuple[str, str, Any]] | None = None
    #: The plugins and services of the invocation (``relaykit.Invocation``), when the Runner
    #: has any; agents, model calls and tools reach them here.
    invocation: Invocation | None = None
    #: Session mode: the user's text messages sent with tool responses that continue a paused
    #: invocation; the first resumed chat agent reads them after its tool results.
    resume_messages: list[Message] = field(default_factory=list)
    #: The options of this ``run`` or ``resume`` call meant for one agent each, by agent name
    #: (``Runner.run(agent_options=...)``, docs/retries-and-options.md).
    agent_options: Mapping[str, AgentOptions] = field(default_factory=dict)
    #: The run's cancel signal (``RunHandle.cancel``, docs/cancellation.md); agents stop at
    #: their safe points when a cancel is asked for. None: nothing can cancel the run.
    cancel: CancelSignal | None = None

    def count_transfer(self, source: str, dest: str) -> str | None:
        """Count one transfer from ``source`` to ``dest``; the error text if it exceeds the
        limit (then it must not be performed), else None."""
        trail = self.trail
        if not trail or trail[-1] != source:
            trail.append(source)
        trail.append(dest)
        if len(trail) > 8:
            del trail[:-8]
        self.transfers += 1
        if self.transfers <= self.max_transfers:
            return None
        return (
            f"run exceeded max_transfers={self.max_transfers}: the transfer from "
            f"'{source}' to '{dest}' was not performed; the last agents were "
            f"{' → '.join(trail)} → … (agents that keep handing control back and forth; "
            "raise Runner(max_transfers=...) if the run really needs more)"
        )


class TransferScope(Protocol):
    """What an agent can learn about the tree it runs in: ``RunContext.flow``.

    The flow agent an agent runs under (``relaykit.FlowAgent``) is one; a ``ChatModelAgent``
    reads it to offer ``transfer_to_agent`` with the right targets. Declared here, not in
    ``relaykit.flow`` (which imports this module), so that the context needs no agent tree.

    >>> import relaykit as rk
    >>> class Noop(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.AgentEvent.exit()
    >>> root = rk.set_sub_agents(Noop("triage"), [Noop("billing")])
    >>> scope: TransferScope = root
    >>> scope.name, [a.name for a in scope.transfer_targets()]
    ('triage', ['billing'])
    """

    @property
    def name(self) -> str:
        """The name of the agent this scope belongs to."""
        ...

    def transfer_targets(self) -> list[Agent]:
        """The agents the current agent may transfer to, in the order to offer them."""
        ...


class Unchanged(enum.Enum):
    """The type of ``UNCHANGED``: "keep this field" for ``RunContext.derive``.

    A sentinel rather than ``None``, because ``None`` is a value some fields take (no flow, no
    root input, no resume state).

    >>> RunContext.new().derive(root_input=UNCHANGED).root_input is None
    True
    """

    UNCHANGED = "unchanged"


#: The default of every ``RunContext.derive`` parameter: keep the field as it is.
UNCHANGED: Final = Unchanged.UNCHANGED


class RunContext:
    """Passed to every agent's ``run``/``resume``: where the agent runs, the run's history and
    session values, and what a resume found.

    The Runner creates one per run; flow agents and workflows hand each agent a copy
    (``derive``) with its own ``run_path`` and ``address``. Agents read it and use the
    session-value methods; the other fields belong to the framework.

    >>> ctx = RunContext.new({"user": "ana"})
    >>> ctx.set_session_value("k", 1); ctx.get_session_value("k")
    1
    >>> dict(ctx.session_values)
    {'user': 'ana', 'k': 1}
    """

    __slots__ = ("address", "flow", "history", "options", "resume_state", "root_input", "run_path")

    def __init__(
        self,
        *,
        run_path: RunPath = (),
        address: Address = (),
        history: RunHistory | None = None,
        root_input: AgentInput | None = None,
        options: RunOptions | None = None,
        resume_state: ResumeState | None = None,
    ) -> None:
        """A context; agents receive theirs, only the Runner and agent tools build one.

        Args:
            run_path: the agents from the root to the current one.
            address: where the current agent sits, for interrupts (one segment per flow
                agent, and per tool call).
            history: the run history; a new, empty one by default.
            root_input: the input the run started with.
            options: the run's options and counters; the defaults by default.
            resume_state: what the checkpoint being resumed saved; None outside a resume.
        """
        #: The agents from the root to the current one (see docs/trees-and-transfer.md#d6).
        self.run_path = run_path
        #: Where the current agent sits in the tree, for its interrupt points (D11).
        self.address = address
        #: The events recorded so far, and the session values.
        self.history = history if history is not None else RunHistory()
        #: The messages the run started with (what the root agent received).
        self.root_input = root_input
        #: Options and counters shared by every agent of the run.
        self.options = options if options is not None else RunOptions()
        #: The saved interrupt points and resume targets of a resume; None in a fresh run.
        self.resume_state = resume_state
        #: The flow agent the current agent runs under (its transfer targets); None outside a
        #: tree (and for an agent a deterministic-transfer wrapper runs: it transfers for it).
        self.flow: TransferScope | None = None

    @classmethod
    def new(cls, session_values: Mapping[str, Any] | None = None) -> RunContext:
        """A fresh root context (what the Runner creates for each run).

        Args:
            session_values: initial session values (the application's own, hence ``Any``).
        """
        ctx = cls()
        if session_values:
            ctx.history.values.update(session_values)
        return ctx

    def derive(
        self,
        *,
        run_path: RunPath | Unchanged = UNCHANGED,
        address: Address | Unchanged = UNCHANGED,
        history: RunHistory | Unchanged = UNCHANGED,
        root_input: AgentInput | Unchanged | None = UNCHANGED,
        options: RunOptions | Unchanged = UNCHANGED,
        resume_state: ResumeState | Unchanged | None = UNCHANGED,
        flow: TransferScope | Unchanged | None = UNCHANGED,
    ) -> RunContext:
        """A copy with the given fields replaced; the others (``UNCHANGED``) are kept, and the
        history and options objects are shared, not copied.

        Each argument replaces the attribute of the same name.

        >>> from relaykit.resume import AddressSegment
        >>> ctx = RunContext.new()
        >>> tool_ctx = ctx.derive(address=(AddressSegment("tool", "search", "call_1"),))
        >>> tool_ctx.history is ctx.history, [str(s) for s in tool_ctx.address]
        (True, ['tool:search:call_1'])
        """
        # Explicit keywords (not ``**changes``): typed, and no dict to build per call -- this
        # runs for every agent a flow agent starts and every tool call.
        new = RunContext.__new__(RunContext)
        new.run_path = self.run_path if run_path is UNCHANGED else run_path
        new.address = self.address if address is UNCHANGED else address
        new.history = self.history if history is UNCHANGED else history
        new.root_input = self.root_input if root_input is UNCHANGED else root_input
        new.options = self.options if options is UNCHANGED else options
        new.resume_state = self.resume_state if resume_state is UNCHANGED else resume_state
        new.flow = self.flow if flow is UNCHANGED else flow
        return new

    # -- session values -------------------------------------------------------------------
    # Values are typed ``Any``: they are the application's own (each key holds whatever the
    # application put there), and the codec saves any registered type.
    @property
    def session_values(self) -> Mapping[str, Any]:
        """A read-only view of the values shared by all agents of this run."""
        return MappingProxyType(self.history.values)

    def get_session_value(self, key: str, default: Any = None) -> Any:
        """The value under ``key``, or ``default``.

        >>> RunContext.new({"city": "Paris"}).get_session_value("city")
        'Paris'
        """
        return self.history.values.get(key, default)

    def set_session_value(self, key: str, value: Any) -> None:
        """Set one value, visible to every agent of the run (and saved with a checkpoint).

        In session mode the write is also stored: as ``state_delta`` of the agent's next
        stored event, by the scope its prefix names (docs/sessions.md).
        """
        self.history.values[key] = value
        writes = self.options.writes
        if writes is not None:
            path = self.run_path
            writes.append((path[-1].agent_name if path else "", key, value))

    def set_session_values(self, values: Mapping[str, Any]) -> None:
        """Set several values at once.

        >>> ctx = RunContext.new()
        >>> ctx.set_session_values({"a": 1, "b": 2}); sorted(ctx.session_values)
        ['a', 'b']
        """
        for key, value in values.items():
            self.set_session_value(key, value)
