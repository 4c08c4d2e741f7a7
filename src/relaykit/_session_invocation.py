"""Session mode: one invocation's run — its stored events, state deltas, pause, plugins and
compaction (``Run``, created by ``SessionRunner`` in ``_session_run``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from relaykit._aio import closing
from relaykit._cancel import cancelled_event
from relaykit._invocation import Invocation
from relaykit._session_history import (
    Route,
    earlier_attempt,
    last_speaker,
    record_of,
    stopped_calls,
    stored_action,
    superseded_ids,
    superseding,
    user_record,
)
from relaykit._session_state import (
    _PLACEHOLDER,
    AFTER_RUN_GRACE,
    PAUSE_FORMAT,
    SessionPause,
    _Cached,
    _check_user_message,
    _may_compact,
    _prompt_tokens,
    _runs,
    _StoreFailed,
    _Turn,
)
from relaykit.agent import AgentInput
from relaykit.checkpoints.document import Checkpoint, encode_checkpoint
from relaykit.codec import dumps
from relaykit.compaction import (
    sliding_window_range,
    summarize,
    summary_event,
    token_retention_range,
)
from relaykit.context import PriorTurns, RecordedEvent, RunContext, RunHistory, RunOptions
from relaykit.errors import (
    ConfigurationError,
    PluginError,
    RunnerError,
    SerializationError,
    StreamCancelledError,
    WillRetryError,
)
from relaykit.events import AgentEvent, AgentOutput, RunStep
from relaykit.interrupts import ResumeState, interrupt_of
from relaykit.messages import Message
from relaykit.resume import AddressSegment, InterruptInfo
from relaykit.sessions.base import (
    TEMP_PREFIX,
    Session,
    SessionEvent,
)

if TYPE_CHECKING:
    from relaykit._session_run import SessionRunner

logger = logging.getLogger("relaykit")


class Run:
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
        # The id of the history's last event (the cache's, then this turn's; markers left
        # out): a pause saved now records it (SessionPause.last_event_id).
        self.last_event_id: str | None = None
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
        if superseded_ids(stored) is None:
            self.last_event_id = stored.id
        return stored

    def read(self, cached: _Cached) -> None:
        """Take ``cached`` as the session's history read for this turn."""
        self.cached = cached
        if cached.events:
            self.last_event_id = cached.events[-1].id

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
        await self._answer(stopped_calls(cached.events))

    async def supersede(self, pause: SessionPause, cached: _Cached) -> None:
        """A continuation retried (the earlier attempt stopped, failed to store, or died):
        what that attempt stored after the pause is left out of every later history, so the
        retry's events do not repeat or cross it (the resumed step runs at least once)."""
        ids = earlier_attempt(cached.events, self.context.invocation_id, pause.last_event_id)
        if ids:
            await self.append(
                SessionEvent(
                    invocation_id=self.context.invocation_id,
                    author=self.owner.root.name,
                    timestamp=time.time(),
                    action=superseding(ids),
                )
            )

    async def abandon(self, answers: list[SessionEvent]) -> None:
        """A new text turn while paused: store the ``answers`` to the pending calls, drop the
        pause (D12)."""
        ref = self.turn.ref
        await self._answer(answers)
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
        stored: SessionEvent | None = None
        for event in self.session_event(ev, message):
            stored = await self.append(event)
        if stored is not None:
            ev.stored_id = stored.id  # the last one is ``ev`` itself (state-only ones first)

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
        options.cancel = self.turn.cancel
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
                    self.read(cached)
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
                            cancel = ctx.options.cancel
                            if cancel is not None and cancel.mode is not None and not interrupted:
                                ev = cancelled_event(ev, cancel)  # D26: a paused run
                                info = interrupt_of(ev)
                                assert info is not None
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
                            # The pause, then its interrupt event: a crash between the writes
                            # is safe, the pause names the event it follows (earlier_attempt).
                            saved = await self._save_pause(ctx, ev, info)
                            if saved is not None:  # the pause could not be saved
                                await self.store(saved, None)
                                errored = True
                                yield saved
                                if isinstance(saved.error, SerializationError):
                                    continue  # the interrupt itself is replaced by the error
                            interrupted = True
                            if cancel is not None:
                                cancel.ended_with(info)
                        out = ev.output
                        if out is not None and out.stream is not None:
                            yield ev  # delivered while it streams, stored once complete
                            try:
                                message: Message | None = await out.stream.collect()
                            except (WillRetryError, StreamCancelledError):
                                # Never stored: the retried message is (D28); a reply a cancel
                                # cut is made again by the resume (D26).
                                continue
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
                SessionPause(self.context.invocation_id, data, self.last_event_id),
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
