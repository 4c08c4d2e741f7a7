"""RunContext: what every agent receives — run path, session values, run history, resume info."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from relaykit.events import AgentEvent, AgentInput, RunPath
from relaykit.messages import Message
from relaykit.resume import Address, ResumeState

__all__ = ["DEFAULT_MAX_TRANSFERS", "RecordedEvent", "RunContext", "RunHistory", "RunOptions"]


_sequence = itertools.count()


class RecordedEvent:
    """An event in the run history, with its message resolved once and its rewrite cached."""

    __slots__ = ("event", "message", "rewritten", "seq", "skip")

    def __init__(self, event: AgentEvent) -> None:
        self.event = event
        self.seq = next(_sequence)  # global recording order (parallel lanes are joined by it)
        out = event.output
        # Streams are resolved lazily (when a history is built); plain messages at once.
        self.message: Message | None = out.message if out is not None else None
        self.rewritten: Message | None = None
        self.skip = False  # a stream that ended with WillRetryError (FA-17)

    async def resolve(self) -> Message | None:
        """The event's message, concatenating a stream on first use."""
        out = self.event.output
        if self.message is None and out is not None and out.stream is not None:
            from relaykit.errors import WillRetryError

            try:
                self.message = await out.stream.collect()
            except WillRetryError:
                self.skip = True
                return None
        return self.message


@dataclass(slots=True)
class RunHistory:
    """The run history: the events flow agents recorded, and the values shared with them.

    Several histories can share one ``values`` dict (a deterministic wrapper's isolated history,
    an agent tool's inner run, parallel lanes).
    """

    values: dict[str, Any] = field(default_factory=dict)
    events: list[RecordedEvent] = field(default_factory=list)
    parent: RunHistory | None = None  # the enclosing lane's history (parallel branches)
    base: int = 0  # events of ``parent`` visible to this lane: parent.events[:base]

    def record(self, event: AgentEvent) -> None:
        """Append ``event`` (already stamped) to the history."""
        self.events.append(RecordedEvent(event))

    def visible(self) -> list[RecordedEvent]:
        """Everything this history sees: enclosing lanes' events up to the fork, then its own."""
        if self.parent is None:
            return self.events
        return self.parent.visible()[: self.base] + self.events if self.base else self.events

    def fork(self) -> RunHistory:
        """A lane that sees what this history has now, records into its own list."""
        return RunHistory(self.values, [], self, len(self.visible()))


DEFAULT_MAX_TRANSFERS = 100


@dataclass(slots=True)
class RunOptions:
    """Options and counters shared by every flow agent of one ``run`` or ``resume`` call."""

    skip_transfer_messages: bool = False
    #: The most transfers one run may perform (D23); the one that would exceed it is refused.
    max_transfers: int = DEFAULT_MAX_TRANSFERS
    #: Transfers performed so far in this run (LLM, chains, deterministic, back to the parent).
    transfers: int = 0
    #: The agents of the latest transfers, oldest first (named by the limit's error).
    trail: list[str] = field(default_factory=list)

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
        return (f"run exceeded max_transfers={self.max_transfers}: the transfer from "
                f"'{source}' to '{dest}' was not performed; the last agents were "
                f"{' → '.join(trail)} → … (agents that keep handing control back and forth; "
                "raise Runner(max_transfers=...) if the run really needs more)")


class RunContext:
    """Passed to every agent's ``run``/``resume``.

    >>> ctx = RunContext.new()
    >>> ctx.set_session_value("k", 1); ctx.get_session_value("k")
    1
    """

    __slots__ = ("address", "flow", "history", "options", "resume_state", "root_input",
                 "run_path")

    def __init__(self, *, run_path: RunPath = (), address: Address = (),
                 history: RunHistory | None = None, root_input: AgentInput | None = None,
                 options: RunOptions | None = None,
                 resume_state: ResumeState | None = None) -> None:
        self.run_path = run_path
        self.address = address
        self.history = history if history is not None else RunHistory()
        self.root_input = root_input
        self.options = options if options is not None else RunOptions()
        self.resume_state = resume_state
        # The flow agent the current agent runs under (its transfer targets); None outside trees.
        self.flow: Any = None

    @classmethod
    def new(cls, session_values: Mapping[str, Any] | None = None) -> RunContext:
        """A fresh root context (what the Runner creates for each run)."""
        ctx = cls()
        if session_values:
            ctx.history.values.update(session_values)
        return ctx

    def derive(self, **changes: Any) -> RunContext:
        """A copy with some fields replaced; history and options are shared."""
        new = RunContext.__new__(RunContext)
        new.run_path = changes.get("run_path", self.run_path)
        new.address = changes.get("address", self.address)
        new.history = changes.get("history", self.history)
        new.root_input = changes.get("root_input", self.root_input)
        new.options = changes.get("options", self.options)
        new.resume_state = changes.get("resume_state", self.resume_state)
        new.flow = changes.get("flow", self.flow)
        return new

    # -- session values -------------------------------------------------------------------
    @property
    def session_values(self) -> Mapping[str, Any]:
        """A read-only view of the values shared by all agents of this run."""
        return MappingProxyType(self.history.values)

    def get_session_value(self, key: str, default: Any = None) -> Any:
        """The value under ``key``, or ``default``."""
        return self.history.values.get(key, default)

    def set_session_value(self, key: str, value: Any) -> None:
        """Set one value, visible to every agent of the run."""
        self.history.values[key] = value

    def set_session_values(self, values: Mapping[str, Any]) -> None:
        """Set several values at once."""
        for key, value in values.items():
            self.set_session_value(key, value)
