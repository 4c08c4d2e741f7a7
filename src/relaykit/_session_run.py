"""The Runner's session mode: one turn (invocation) of a durable session, stored as it runs.

What a turn does, in order (docs/durable-runner.md has the rules for users):

1. takes the session's turn lock (``SessionBusyError`` after ``session_lock_timeout``);
2. reads the session in one read (created when missing and ``auto_create_session``), with its
   pause and its history since this Runner's last read of it;
3. decides what the turn is: a new invocation, the continuation of the paused one (a
   ``resume`` call, or user tool responses answering pending calls), or a new text turn that
   abandons the pause (its pending calls answered with an error, stored, not delivered);
4. stores the user's message(s) first, then runs the agents, storing every complete event
   before the caller receives it, with the session values each agent wrote as its
   ``state_delta``; saves a pause with the session when the invocation is interrupted;
5. consumes the pause a resumed invocation continued when it ends; compacts the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relaykit._aio import closing
from relaykit._invocation import Invocation
from relaykit._session_history import (
    STOPPED_TEXT,
    Route,
    earlier_attempt,
    last_speaker,
    pending_tool_calls,
    record_of,
    routes_of,
    stored_action,
    superseded_ids,
    superseding,
    user_record,
)
from relaykit.agent import AgentInput
from relaykit.checkpoints.document import Checkpoint, decode_checkpoint, encode_checkpoint
from relaykit.codec import dumps, loads, register_type
from relaykit.compaction import (
    CompactionConfig,
    Summarizer,
    sliding_window_range,
    summarize,
    summary_event,
    token_retention_range,
)
from relaykit.context import PriorTurns, RecordedEvent, RunContext, RunHistory, RunOptions
from relaykit.errors import (
    CheckpointNotFoundError,
    ConfigurationError,
    PluginError,
    ResumeTargetError,
    RunnerError,
    SerializationError,
    SessionExistsError,
    SessionStoreError,
    WillRetryError,
)
from relaykit.events import AgentEvent, AgentOutput, RunStep
from relaykit.flow import FlowAgent
from relaykit.interrupts import ResumeState, interrupt_of
from relaykit.messages import Message
from relaykit.options import AgentOptions
from relaykit.plugins import InvocationContext, PluginManager
from relaykit.resume import AddressSegment, InterruptInfo
from relaykit.sessions._records import SessionRef, prepare_state
from relaykit.sessions.base import (
    TEMP_PREFIX,
    HistoryMark,
    Session,
    SessionEvent,
    SessionService,
    TurnView,
    compaction_range,
)

__all__ = ["DEFAULT_SESSION_LOCK_TIMEOUT", "SessionPause", "SessionRunner"]

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


class _StoreFailed(Exception):
    """Storing an agent's event failed: the invocation ends (D20)."""


class SessionRunner:
    """The session mode of one ``Runner``: see the module docstring."""

    def __init__(
        self,
        *,
        root: FlowAgent,
        service: SessionService,
        app_name: str,
        plugins: PluginManager,
        artifact_service: Any,
        memory_service: Any,
        compaction: CompactionConfig | None,
        auto_create_session: bool,
        save_input_blobs_as_artifacts: bool,
        lock_timeout: float,
        signing_key: bytes | None,
        max_transfers: int,
        streaming: bool,
    ) -> None:
        self.root = root
        self.service = service
        self.app_name = app_name
        self.plugins = plugins
        self.artifact_service = artifact_service
        self.memory_service = memory_service
        self.compaction = compaction
        self.auto_create_session = auto_create_session
        self.save_blobs = save_input_blobs_as_artifacts
        self.lock_timeout = lock_timeout
        self.signing_key = signing_key
        self.max_transfers = max_transfers
        self.streaming = streaming
        self.routes: dict[str, Route | None] = routes_of(root)
        self.summarizer: Summarizer | None = None
        if compaction is not None:
            self.summarizer = compaction.summarizer or _root_model(root)
        self._cache: OrderedDict[SessionRef, _Cached] = OrderedDict()

    # -- entry points -----------------------------------------------------------------------
    def turn(
        self,
        messages: Sequence[Message],
        *,
        user_id: object,
        session_id: object,
        resume: bool,
        targets: Mapping[str, Any] | None,
        state_delta: Mapping[str, Any] | None,
        session_values: Mapping[str, Any] | None,
        skip: bool,
        agent_options: dict[str, AgentOptions] | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """Check the call now (``ConfigurationError``), run nothing until iterated."""
        if user_id is None or session_id is None:
            raise ConfigurationError(
                "a Runner with a session service needs user_id and session_id: "
                "runner.run(messages, user_id='u1', session_id='s1')"
            )
        msgs = list(messages)
        if not resume and not msgs:
            raise ConfigurationError(
                "run() needs at least one message; to continue a paused invocation without "
                "one, call resume(user_id=..., session_id=...)"
            )
        answered: set[str] = set()
        for msg in msgs:
            if not isinstance(msg, Message):
                raise ConfigurationError(f"run() takes Message objects, not {type(msg).__name__}")
            _check_user_message(msg)
            if msg.tool_call_id:
                if msg.tool_call_id in answered:
                    raise ConfigurationError(
                        f"two tool responses answer call {msg.tool_call_id!r}; send one"
                    )
                answered.add(msg.tool_call_id)
        delta: dict[str, Any] = {}
        for what, given in (("state_delta", state_delta), ("session_values", session_values)):
            if given is None:
                continue
            if not isinstance(given, Mapping):
                raise ConfigurationError(f"{what} must be a mapping, not {type(given).__name__}")
            delta.update(given)
        if targets is not None and not isinstance(targets, Mapping):
            raise ConfigurationError(
                "resume(targets=...) takes a mapping of interrupt id to resume data, not "
                f"{type(targets).__name__}"
            )
        try:
            ref = SessionRef.of(self.app_name, user_id, session_id)
        except SessionStoreError as exc:
            raise ConfigurationError(str(exc)) from None
        if delta:
            prepare_state(delta, ref)  # a key or value that cannot be stored fails here
            temp = {
                k: v for k, v in delta.items() if isinstance(k, str) and k.startswith(TEMP_PREFIX)
            }
            if temp:
                dumps(temp, kind="relaykit/temp-state")  # kept in a pause: must be savable
        turn = _Turn(ref, msgs, resume, dict(targets or {}), delta, skip, agent_options or {})
        return self._locked(turn)

    # -- the turn ---------------------------------------------------------------------------
    async def _locked(self, turn: _Turn) -> AsyncIterator[AgentEvent]:
        ref = turn.ref
        async with self.service.lock(
            ref.app_name, ref.user_id, ref.session_id, timeout=self.lock_timeout
        ):
            view, cached = await self._read(ref, create=not turn.resume)
            runs: list[_Run] = []
            try:
                async with closing(self._invocation(turn, view, cached, runs)) as events:
                    async for ev in events:
                        yield ev
            finally:
                if runs:
                    self._remember(ref, runs[0])

    def _remember(self, ref: SessionRef, run: _Run) -> None:
        """Add what the turn stored to the cache, so the next turn does not read it back.

        The next ``read_turn`` checks that the event at the remembered position is the last
        one stored here (an event appended around the lock by someone else shifts it, and the
        history is read whole again).
        """
        cached = run.cached
        if cached is None or self._cache.get(ref) is not cached:
            return
        if run.compacted:
            self._cache.pop(ref, None)  # the summary changes where the history starts
            return
        if run.stored:
            mark = cached.mark
            cached.extend(run.stored)
            cached.mark = HistoryMark(
                mark.incarnation,
                mark.last_seq + len(run.stored),
                mark.summary_seq,
                run.stored[-1].id,
            )

    async def _read(self, ref: SessionRef, *, create: bool = True) -> tuple[TurnView, _Cached]:
        """The session (created if allowed) and its history, from this Runner's cache plus
        what was stored since."""
        service = self.service
        cached = self._cache.get(ref)
        read_turn = getattr(service, "read_turn", None)
        view: TurnView | None
        if read_turn is not None:
            view = await read_turn(
                ref.app_name,
                ref.user_id,
                ref.session_id,
                after=cached.mark if cached is not None else None,
            )
        else:
            view = await _read_plainly(service, ref)
        if view is None:
            if not create:  # a resume creates nothing
                raise CheckpointNotFoundError(f"{ref} has no paused invocation to resume")
            if not self.auto_create_session:
                raise ref.not_found("run a turn of")
            # Created meanwhile by someone else (outside the turn lock): read it then.
            with contextlib.suppress(SessionExistsError):
                await service.create_session(ref.app_name, ref.user_id, ref.session_id)
            view = (
                await read_turn(ref.app_name, ref.user_id, ref.session_id)
                if read_turn is not None
                else await _read_plainly(service, ref)
            )
            if view is None:
                raise ref.not_found("run a turn of")
        if view.delta and cached is not None:
            cached.mark = view.mark
            cached.extend(view.events)
        else:
            cached = _Cached(view.mark)
            cached.extend(view.events)
        self._cache[ref] = cached
        self._cache.move_to_end(ref)
        while len(self._cache) > CACHED_SESSIONS:
            self._cache.popitem(last=False)
        return view, cached

    async def _invocation(
        self, turn: _Turn, view: TurnView, cached: _Cached, runs: list[_Run]
    ) -> AsyncIterator[AgentEvent]:
        ref, session = turn.ref, view.session
        pause = _decode_pause(view.checkpoint, ref) if view.checkpoint is not None else None
        responses = [m for m in turn.messages if m.role == "tool"]
        texts = [m for m in turn.messages if m.role != "tool"]
        resuming = turn.resume or bool(responses)
        targets = dict(turn.targets)
        cp: Checkpoint | None = None
        interrupted: InterruptInfo | None = None
        if resuming:
            if pause is None:
                if responses:
                    raise ResumeTargetError(
                        f"tool response for call {responses[0].tool_call_id!r}: {ref} has no "
                        "paused invocation waiting for it",
                        responses[0].tool_call_id,
                    )
                raise CheckpointNotFoundError(f"{ref} has no paused invocation to resume")
            cp, interrupted = decode_checkpoint(
                pause.checkpoint, key=self.signing_key, what=f"the pause of {ref}"
            )
            for response in responses:
                point = _point_for_call(interrupted, response.tool_call_id or "")
                if point is None:
                    raise ResumeTargetError(
                        f"tool response for call {response.tool_call_id!r} matches no pending "
                        f"call of the paused invocation of {ref}",
                        response.tool_call_id,
                    )
                targets[point] = response.content
            _check_targets(interrupted, targets, ref)
        invocation_id = pause.invocation_id if resuming and pause is not None else uuid.uuid4().hex
        context = InvocationContext(
            ref.app_name, ref.user_id, ref.session_id, invocation_id, session
        )
        invocation = Invocation(
            context, self.plugins, self.artifact_service, self.memory_service, session
        )
        run = _Run(self, turn, session, invocation)
        run.cached = cached
        runs.append(run)
        try:
            async with closing(
                self._turn_events(run, turn, pause, resuming, responses, texts, cached)
            ) as events:
                async for ev in events:
                    yield ev
            if run.ended:
                return
            async with closing(
                run.drive(cp, interrupted, targets, run.stored_texts, cached)
            ) as events:
                async for ev in events:
                    yield ev
        finally:
            # after_run runs however the turn ends: completed, rejected, stopped early by the
            # caller (aclose), cancelled (shielded, at most AFTER_RUN_GRACE seconds).
            await run.after_run()

    async def _turn_events(
        self,
        run: _Run,
        turn: _Turn,
        pause: SessionPause | None,
        resuming: bool,
        responses: list[Message],
        texts: list[Message],
        cached: _Cached,
    ) -> AsyncIterator[AgentEvent]:
        """Store the user's messages (after abandoning or repairing what an earlier turn left
        open); an error event, and ``run.ended``, when the turn cannot go on."""
        invocation_id = run.context.invocation_id
        try:
            if pause is not None and not resuming:
                await run.abandon(pause, cached)
            elif pause is None:
                await run.repair(cached)
            else:
                await run.supersede(cached)
            already = _stored_responses(cached.events, invocation_id) if resuming else set()
            first = True
            for message in [*responses, *texts]:
                if message.role == "tool" and message.tool_call_id in already:
                    continue  # stored by an earlier attempt to resume (D25)
                message = await run.user_message(message)
                await run.store_user(message, turn.delta if first else {})
                first = False
                if message.role != "tool":
                    run.stored_texts.append(message)
            if first and turn.delta:
                await run.store_user(None, turn.delta)
        except _StoreFailed as failed:
            run.ended = True
            yield run.failure_event(failed)
        except Exception as exc:
            # on_user_message raised (a PluginError) or an attachment could not be saved: the
            # turn ends with an error event (stored, when it can be) before any agent runs.
            run.ended = True
            root = self.root
            err = AgentEvent(root.name, (RunStep(root.name),), error=exc)
            with contextlib.suppress(_StoreFailed):
                await run.store(err, None)
            yield err


class _Run:
    """One invocation's state: the session, the values, the pending writes, the plugins."""

    def __init__(
        self, owner: SessionRunner, turn: _Turn, session: Session, invocation: Invocation
    ) -> None:
        self.owner = owner
        self.turn = turn
        self.session = session
        self.invocation = invocation
        self.context = invocation.context
        self.service = owner.service
        self.plugins = owner.plugins
        self.writes: list[tuple[str, str, Any]] = []
        self.values: dict[str, Any] = dict(session.state)
        self.values.update(turn.delta)
        self.after_run_done = False
        # The turn ended before its agents ran (its input could not be stored).
        self.ended = False
        # The user's text messages as stored (the root input, or history of a continuation).
        self.stored_texts: list[Message] = []
        # The answers to an abandoned pause's calls, stored by this turn.
        self.answered: list[RecordedEvent] = []
        # Every event this turn stored, in order.
        self.stored: list[SessionEvent] = []
        self.cached: _Cached | None = None
        # A compaction summary was appended (the cached history no longer starts right).
        self.compacted = False
        # Attachments saved as artifacts so far by this turn.
        self.blobs = 0

    # -- storing ----------------------------------------------------------------------------
    async def append(self, event: SessionEvent) -> SessionEvent:
        try:
            stored = await self.service.append_event(self.session, event)
        except Exception as exc:
            raise _StoreFailed(exc) from exc
        self.stored.append(stored)
        return stored

    def failure_event(self, failed: _StoreFailed) -> AgentEvent:
        exc = failed.args[0]
        root = self.owner.root
        return AgentEvent(
            root.name,
            (RunStep(root.name),),
            error=RunnerError(
                f"failed to store an event of {self.turn.ref}; the invocation ended: "
                f"{type(exc).__name__}: {exc}"
            ),
        )

    async def user_message(self, message: Message) -> Message:
        if self.plugins.has("on_user_message"):
            replaced = await self.plugins.on_user_message(self.context, message)
            if replaced is not None:
                if replaced.role != message.role or replaced.tool_call_id != message.tool_call_id:
                    raise PluginError(
                        "on_user_message replaced the user's message with one of another role "
                        "or tool call; return a message of the same kind",
                        hook="on_user_message",
                    )
                _check_user_message(replaced)
                message = replaced
        if self.owner.save_blobs and message.attachments:
            message = await self._save_blobs(message)
        return message

    async def _save_blobs(self, message: Message) -> Message:
        service = self.owner.artifact_service
        if service is None:
            raise ConfigurationError(
                "save_input_blobs_as_artifacts needs Runner(..., artifact_service=...)"
            )
        ref = self.turn.ref
        texts = [message.content] if message.content else []
        for blob in message.attachments:
            # Numbered across the turn's messages: every attachment gets a name of its own.
            name = f"artifact_{self.context.invocation_id}_{self.blobs}"
            self.blobs += 1
            await service.save(ref.app_name, ref.user_id, ref.session_id, name, blob)
            texts.append(_PLACEHOLDER.format(name))
        return Message(
            message.role,
            "\n".join(texts),
            [],
            message.tool_call_id,
            message.tool_name,
            message.name,
            [],
            dict(message.metadata),
        )

    async def store_user(self, message: Message | None, delta: dict[str, Any]) -> None:
        await self.append(
            SessionEvent(
                invocation_id=self.context.invocation_id,
                author="user",
                timestamp=time.time(),
                message=message,
                state_delta=dict(delta),
            )
        )

    async def repair(self, cached: _Cached) -> None:
        """Answer the calls the latest invocation left without a result when it was stopped
        early, cancelled or killed (no pause waits for them): a history never holds a call
        without its result (providers reject it). Stored, not delivered."""
        events = cached.events
        if not events:
            return
        latest = events[-1].invocation_id
        start = len(events)
        while start > 0 and events[start - 1].invocation_id == latest:
            start -= 1
        await self._answer(pending_tool_calls(events[start:], latest, STOPPED_TEXT))

    async def supersede(self, cached: _Cached) -> None:
        """A continuation retried (the earlier attempt stopped, failed to store, or died):
        what that attempt stored after the pause is left out of every later history, so the
        retry's events do not repeat or cross it (the resumed step runs at least once)."""
        ids = earlier_attempt(cached.events, self.context.invocation_id)
        if ids:
            await self.append(
                SessionEvent(
                    invocation_id=self.context.invocation_id,
                    author=self.owner.root.name,
                    timestamp=time.time(),
                    action=superseding(ids),
                )
            )

    async def abandon(self, pause: SessionPause, cached: _Cached) -> None:
        """A new text turn while paused: answer the pending calls, drop the pause (D12)."""
        ref = self.turn.ref
        await self._answer(pending_tool_calls(cached.events, pause.invocation_id))
        try:
            await self.service.set_checkpoint(ref.app_name, ref.user_id, ref.session_id, None)
        except Exception as exc:
            raise _StoreFailed(exc) from exc

    async def _answer(self, answers: list[SessionEvent]) -> None:
        for answer in answers:
            answer.timestamp = time.time()
            stored = await self.append(answer)
            rec = record_of(stored)
            if rec is not None:
                self.answered.append(rec)  # history of this turn (the cache reads them later)

    def session_event(self, ev: AgentEvent, message: Message | None) -> list[SessionEvent]:
        """``ev`` as stored, preceded by state-only events for other agents' pending writes."""
        out: list[SessionEvent] = []
        writes = self.writes
        delta = dict(ev.state_delta) if ev.state_delta else {}
        if delta:
            self.values.update(delta)  # an event's own delta is state the next agents see
        if writes:
            # The writes the event's agent made last go on its event; the ones before them
            # are stored first, in the order they were made, as state-only events of their
            # agents -- so replaying the stored deltas gives the values the agents saw.
            cut = len(writes)
            while cut and writes[cut - 1][0] == ev.agent_name:
                cut -= 1
            out.extend(self._state_only(agent, group) for agent, group in _runs(writes[:cut]))
            mine = {key: value for _, key, value in writes[cut:]}
            writes.clear()
            if mine:
                mine.update(delta)  # the event's own delta came after the agent's writes
                delta = mine
        error = ev.error
        out.append(
            SessionEvent(
                invocation_id=self.context.invocation_id,
                author=ev.agent_name,
                timestamp=time.time(),
                message=message,
                run_path=tuple(step.agent_name for step in ev.run_path),
                action=stored_action(ev.action),
                error=f"{type(error).__name__}: {error}" if error is not None else None,
                state_delta=delta,
            )
        )
        return out

    def _state_only(self, agent: str, delta: dict[str, Any]) -> SessionEvent:
        return SessionEvent(
            invocation_id=self.context.invocation_id,
            author=agent or self.owner.root.name,
            timestamp=time.time(),
            state_delta=dict(delta),
        )

    async def store(self, ev: AgentEvent, message: Message | None) -> None:
        for event in self.session_event(ev, message):
            await self.append(event)

    async def flush_writes(self) -> None:
        pending = list(self.writes)
        self.writes.clear()
        for agent, group in _runs(pending):
            await self.append(self._state_only(agent, group))

    # -- running ----------------------------------------------------------------------------
    def context_for(self, cached: _Cached, paused: str | None) -> RunHistory:
        if paused is None and not self.answered and not self.compacted:
            return RunHistory(self.values, prior=cached.prior)  # built messages reused
        records = cached.prior.records
        if paused is None:
            # (after a compaction read the cache again, it holds this turn's user event)
            own = {event.id for event in self.stored}
            kept = [rec for rec, i in zip(records, cached.ids, strict=True) if i not in own]
            if not self.compacted:
                kept += self.answered  # (else the read after the compaction has them)
        else:
            kept = [
                rec for rec, inv in zip(records, cached.invocations, strict=True) if inv != paused
            ]
        return RunHistory(self.values, prior=PriorTurns(kept))

    async def drive(
        self,
        cp: Checkpoint | None,
        interrupted: InterruptInfo | None,
        targets: dict[str, Any],
        stored_texts: list[Message],
        cached: _Cached,
    ) -> AsyncIterator[AgentEvent]:
        owner, root = self.owner, self.owner.root
        options = RunOptions(self.turn.skip, owner.max_transfers)
        options.agent_options = self.turn.agent_options
        options.writes = self.writes
        options.invocation = self.invocation
        try:
            early = await self._before_run()
        except PluginError as exc:
            err = AgentEvent(root.name, (RunStep(root.name),), error=exc)
            yield await self._deliverable(err)
            await self.after_run()
            return
        except _StoreFailed as failed:
            yield self.failure_event(failed)
            await self.after_run()
            return
        if early is not None:
            ev = AgentEvent(root.name, (RunStep(root.name),), AgentOutput(early))
            try:
                delivered = await self._deliverable(ev)
            except _StoreFailed as failed:
                yield self.failure_event(failed)
            else:
                yield delivered
            await self.after_run()
            return
        if cp is not None and interrupted is not None:
            paused = self.context.invocation_id
            history = self.context_for(cached, paused)
            for key, value in cp.values.items():
                if key.startswith(TEMP_PREFIX) and key not in self.values:
                    self.values[key] = value  # temp: values survive the pause (D12)
            history.events = [RecordedEvent(e) for e in cp.events]
            history.events.extend(user_record(m) for m in stored_texts)
            options.resume_messages = list(stored_texts)
            ctx = RunContext(
                root_input=cp.root_input,
                history=history,
                options=options,
                resume_state=ResumeState.of(interrupted, targets),
            )
            gen = root.resume(ctx, cp.resume_info(interrupted))
        else:
            threshold = owner.compaction.token_threshold if owner.compaction else None
            if threshold is not None and _prompt_tokens(cached.events) >= threshold:
                # The token rule runs before the turn's first model call (D25).
                failure = await self._compact(cached.events)
                if failure is not None:
                    with contextlib.suppress(_StoreFailed):
                        await self.store(failure, None)
                    yield failure
                else:
                    _, cached = await owner._read(self.turn.ref)
                    self.cached = cached
                    self.compacted = True  # this turn's own events are in the cache now
            history = self.context_for(cached, None)
            root_input = AgentInput(list(stored_texts), owner.streaming)
            route = self._route(cached)
            if route is None:
                ctx = RunContext(root_input=root_input, history=history, options=options)
                gen = root.run(ctx, root_input)
            else:
                above = route.chain[:-1]
                ctx = RunContext(
                    run_path=tuple(RunStep(fa.name) for fa in above),
                    address=tuple(AddressSegment("agent", fa.name) for fa in above),
                    root_input=root_input,
                    history=history,
                    options=options,
                )
                gen = route.start.run(ctx, None)
        resumed = cp is not None
        async with closing(self._events(ctx, gen, resumed)) as events:
            async for ev in events:
                yield ev

    def _route(self, cached: _Cached) -> Route | None:
        name = last_speaker(cached.events, self.owner.routes)
        return self.owner.routes.get(name) if name is not None else None

    async def _before_run(self) -> Message | None:
        if not self.plugins.has("before_run"):
            return None
        return await self.plugins.before_run(self.context)

    async def _on_event(self, ev: AgentEvent) -> tuple[AgentEvent, bool]:
        """``ev`` as the ``on_event`` plugins replaced it, and False; or, when a plugin
        rejected it (AR-05), the stored error event that replaces it, and True."""
        if not self.plugins.has("on_event"):
            return ev, False
        try:
            return await self.plugins.on_event(self.context, ev), False
        except PluginError as exc:
            err = AgentEvent(ev.agent_name, ev.run_path, error=exc)
            await self.store(err, None)
            return err, True

    async def _deliverable(self, ev: AgentEvent) -> AgentEvent:
        """``ev`` after ``on_event``, stored (or the stored error event of its rejection)."""
        ev, rejected = await self._on_event(ev)
        if not rejected:
            await self.store(ev, ev.output.message if ev.output is not None else None)
        return ev

    async def _events(
        self, ctx: RunContext, gen: AsyncIterator[AgentEvent], resumed: bool
    ) -> AsyncIterator[AgentEvent]:
        """Store and deliver the agents' events; save the pause; consume the resumed one."""
        root = self.owner.root
        ref = self.turn.ref
        interrupted = False
        errored = False
        finished = False
        try:
            try:
                async with closing(gen):
                    async for ev in gen:
                        ev, rejected = await self._on_event(ev)
                        if rejected:
                            errored = True
                            yield ev
                            continue
                        if ev.internal:  # an agent tool's inner event: delivered only (D28)
                            yield ev
                            continue
                        info = interrupt_of(ev)
                        if info is not None and info.contexts:
                            if interrupted:
                                err = AgentEvent(
                                    ev.agent_name,
                                    ev.run_path,
                                    error=RunnerError(
                                        "multiple interrupt actions reached the Runner in one "
                                        "run; only the first was saved"
                                    ),
                                )
                                await self.store(err, None)
                                yield err
                                continue
                            saved = await self._save_pause(ctx, ev, info)
                            if saved is not None:  # the pause could not be saved
                                await self.store(saved, None)
                                errored = True
                                yield saved
                                if isinstance(saved.error, SerializationError):
                                    continue  # the interrupt itself is replaced by the error
                            interrupted = True
                        out = ev.output
                        if out is not None and out.stream is not None:
                            yield ev  # delivered while it streams, stored once complete
                            try:
                                message: Message | None = await out.stream.collect()
                            except WillRetryError:
                                continue  # never stored: the retried message is (D28)
                            except Exception:
                                # A broken stream: the agent's own error event reports it
                                # (stored next); the partial message is never stored.
                                errored = True
                                continue
                            await self.store(ev, message)
                            continue
                        await self.store(ev, out.message if out is not None else None)
                        if ev.error is not None:
                            errored = True
                        yield ev
                await self.flush_writes()  # writes after the last event, or after an interrupt
            except _StoreFailed as failed:
                yield self.failure_event(failed)
                finished = True
                return
            except Exception as exc:  # D9: nothing crashes the caller
                err = AgentEvent(root.name, ctx.run_path or (RunStep(root.name),), error=exc)
                with contextlib.suppress(_StoreFailed):
                    await self.store(err, None)
                errored = True
                yield err
            if resumed and not interrupted:
                try:  # the resumed invocation ended: its pause is consumed (D12)
                    await self.service.set_checkpoint(
                        ref.app_name, ref.user_id, ref.session_id, None
                    )
                except Exception as exc:
                    err = AgentEvent(
                        root.name,
                        (RunStep(root.name),),
                        error=RunnerError(f"failed to consume the pause of {ref}: {exc}"),
                    )
                    with contextlib.suppress(_StoreFailed):
                        await self.store(err, None)
                    yield err
            if not interrupted and not errored and self.owner.compaction is not None:
                failure = await self._compact(self.history_view())
                if failure is not None:
                    with contextlib.suppress(_StoreFailed):
                        await self.store(failure, None)
                    yield failure
            finished = True
        finally:
            if not finished:
                logger.debug("invocation %s of %s stopped early", self.context.invocation_id, ref)
            await self.after_run()

    async def _save_pause(
        self, ctx: RunContext, ev: AgentEvent, info: InterruptInfo
    ) -> AgentEvent | None:
        ref = self.turn.ref
        try:
            data = await encode_checkpoint(Checkpoint.of(ctx, info), self.owner.signing_key)
            pause = dumps(
                SessionPause(self.context.invocation_id, data),
                kind=PAUSE_FORMAT,
                key=self.owner.signing_key,
            )
        except SerializationError as exc:
            return AgentEvent(ev.agent_name, ev.run_path, error=exc)
        try:
            await self.service.set_checkpoint(ref.app_name, ref.user_id, ref.session_id, pause)
        except Exception as exc:
            return AgentEvent(
                ev.agent_name,
                ev.run_path,
                error=RunnerError(f"failed to save the pause of {ref}: {exc}"),
            )
        return None

    async def after_run(self) -> None:
        """Run the ``after_run`` hooks once; shielded from a cancellation (at most
        ``AFTER_RUN_GRACE`` seconds), a failure logged."""
        if self.after_run_done or not self.plugins.has("after_run"):
            return
        self.after_run_done = True
        task = asyncio.ensure_future(self.plugins.after_run(self.context))
        try:
            await asyncio.wait_for(asyncio.shield(task), AFTER_RUN_GRACE)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, AFTER_RUN_GRACE)
            raise
        except Exception as exc:
            logger.warning("after_run failed for %s: %s", self.turn.ref, exc)

    # -- compaction -------------------------------------------------------------------------
    def history_view(self) -> list[SessionEvent]:
        """The history as loaded at the start of the turn, then what the turn stored."""
        cached = self.cached
        return [*(cached.events if cached is not None else ()), *self.stored]

    async def _compact(self, view: Sequence[SessionEvent]) -> AgentEvent | None:
        """Summarise the history when a rule says so; an error event when it failed.

        ``view`` (the loaded history plus this turn's events) tells cheaply whether a rule can
        fire; only then is the whole session read, so a turn pays for compaction once every
        ``compaction_interval`` invocations, not every time.
        """
        config, summarizer = self.owner.compaction, self.owner.summarizer
        assert config is not None
        if summarizer is None or not _may_compact(view, config):
            return None
        ref = self.turn.ref
        try:
            stored = await self.service.get_session(ref.app_name, ref.user_id, ref.session_id)
            if stored is None:
                return None
            events = stored.events
            span = sliding_window_range(events, config)
            if span is None:
                span = token_retention_range(events, config, _prompt_tokens(events))
            if span is None:
                return None
            start, stop = span
            text = await summarize(events[start:stop], summarizer)
            summary = summary_event(
                events[start:stop],
                text,
                invocation_id=self.context.invocation_id,
                author=self.owner.root.name,
            )
            summary.timestamp = time.time()
            # Who spoke last in what the summary covers: routing reads it there (D18).
            speaker = last_speaker(events[:stop], self.owner.routes)
            if speaker is not None:
                summary.run_path = (speaker,)
            self.compacted = True
            await self.service.append_event(self.session, summary)
        except Exception as exc:
            root = self.owner.root
            return AgentEvent(
                root.name,
                (RunStep(root.name),),
                error=RunnerError(f"compaction of {ref} failed: {exc}"),
            )
        return None


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


def _decode_pause(data: bytes, ref: SessionRef) -> SessionPause:
    pause = loads(data, kind=PAUSE_FORMAT, what=f"the pause of {ref}")
    if not isinstance(pause, SessionPause):
        raise SerializationError(f"the pause of {ref} does not hold a paused invocation")
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


def _check_targets(info: InterruptInfo, targets: Mapping[str, Any], ref: SessionRef) -> None:
    causes = {c.id for c in info.contexts}
    for target in targets:
        if target not in causes:
            raise ResumeTargetError(
                f"resume target {target!r} is not a waiting point of the paused invocation of "
                f"{ref}; answer one of: {sorted(causes)}",
                target,
            )


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
