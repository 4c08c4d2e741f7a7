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

import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any

from relaykit._aio import closing
from relaykit._cancel import CancelSignal
from relaykit._invocation import Invocation
from relaykit._session_history import (
    ABANDONED_TEXT,
    Route,
    pending_tool_calls,
    routes_of,
    stopped_calls,
)
from relaykit._session_invocation import Run
from relaykit._session_state import (
    CACHED_SESSIONS,
    DEFAULT_SESSION_LOCK_TIMEOUT,
    SessionPause,
    _Cached,
    _check_user_message,
    _decode_pause,
    _point_for_call,
    _read_plainly,
    _root_model,
    _stored_responses,
    _StoreFailed,
    _Turn,
)
from relaykit.checkpoints.document import Checkpoint, decode_checkpoint
from relaykit.codec import dumps
from relaykit.compaction import (
    CompactionConfig,
    Summarizer,
)
from relaykit.errors import (
    CheckpointNotFoundError,
    ConfigurationError,
    ResumeTargetError,
    SerializationError,
    SessionExistsError,
    SessionStoreError,
)
from relaykit.events import AgentEvent, RunStep
from relaykit.flow import FlowAgent
from relaykit.messages import Message
from relaykit.options import AgentOptions
from relaykit.plugins import InvocationContext, PluginManager
from relaykit.resume import InterruptInfo
from relaykit.sessions._records import SessionRef, prepare_state
from relaykit.sessions.base import (
    TEMP_PREFIX,
    HistoryMark,
    SessionService,
    TurnView,
)

__all__ = ["DEFAULT_SESSION_LOCK_TIMEOUT", "SessionPause", "SessionRunner"]

logger = logging.getLogger("relaykit")


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
        cancel: CancelSignal | None = None,
        create_session: bool | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """Check the call now (``ConfigurationError``), run nothing until iterated."""
        if create_session is not None and not isinstance(create_session, bool):
            raise ConfigurationError(
                f"create_session must be True, False or None, not {type(create_session).__name__}"
            )
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
        turn = _Turn(
            ref,
            msgs,
            resume,
            dict(targets or {}),
            delta,
            skip,
            agent_options or {},
            cancel,
            create_session,
        )
        return self._locked(turn)

    # -- the turn ---------------------------------------------------------------------------
    async def _locked(self, turn: _Turn) -> AsyncGenerator[AgentEvent, None]:
        ref = turn.ref
        async with self.service.lock(
            ref.app_name, ref.user_id, ref.session_id, timeout=self.lock_timeout
        ):
            view, cached = await self._read(
                ref, create=not turn.resume, auto_create=turn.create_session
            )
            runs: list[Run] = []
            try:
                async with closing(self._invocation(turn, view, cached, runs)) as events:
                    async for ev in events:
                        yield ev
            finally:
                if runs:
                    self._remember(ref, runs[0])

    def _remember(self, ref: SessionRef, run: Run) -> None:
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

    async def _read(
        self, ref: SessionRef, *, create: bool = True, auto_create: bool | None = None
    ) -> tuple[TurnView, _Cached]:
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
            if not (self.auto_create_session if auto_create is None else auto_create):
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

    async def pending_interrupt(self, user_id: str, session_id: str) -> InterruptInfo | None:
        """The interrupt the session's paused invocation waits on, or None (read as a
        continuation would: a corrupt or wrongly signed pause is a ``SerializationError``)."""
        try:
            ref = SessionRef.of(self.app_name, user_id, session_id)
        except SessionStoreError as exc:
            raise ConfigurationError(str(exc)) from None
        data = await self.service.get_checkpoint(self.app_name, user_id, session_id)
        if data is None:
            return None
        pause = _decode_pause(data, ref, self.signing_key)
        _, interrupted = decode_checkpoint(
            pause.checkpoint, key=self.signing_key, what=f"the pause of {ref}"
        )
        return interrupted

    async def _invocation(
        self, turn: _Turn, view: TurnView, cached: _Cached, runs: list[Run]
    ) -> AsyncIterator[AgentEvent]:
        ref, session = turn.ref, view.session
        responses = [m for m in turn.messages if m.role == "tool"]
        texts = [m for m in turn.messages if m.role != "tool"]
        resuming = turn.resume or bool(responses)
        pause: SessionPause | None = None
        unreadable = False
        if view.checkpoint is not None:
            try:
                pause = _decode_pause(view.checkpoint, ref, self.signing_key)
            except SerializationError:
                if resuming:
                    raise  # nothing to continue from: the caller must know
                unreadable = True  # a new text turn abandons it all the same (D12)
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
            cp.check_targets(interrupted, targets, f"the paused invocation of {ref}")
        invocation_id = pause.invocation_id if resuming and pause is not None else uuid.uuid4().hex
        context = InvocationContext(
            ref.app_name, ref.user_id, ref.session_id, invocation_id, session
        )
        invocation = Invocation(
            context, self.plugins, self.artifact_service, self.memory_service, session
        )
        run = Run(self, turn, session, invocation)
        run.read(cached)
        runs.append(run)
        try:
            async with closing(
                self._turn_events(run, turn, pause, unreadable, responses, texts, cached)
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
        run: Run,
        turn: _Turn,
        pause: SessionPause | None,
        unreadable: bool,
        responses: list[Message],
        texts: list[Message],
        cached: _Cached,
    ) -> AsyncIterator[AgentEvent]:
        """Store the user's messages (after abandoning or repairing what an earlier turn left
        open); an error event, and ``run.ended``, when the turn cannot go on. ``unreadable``:
        a pause is stored but cannot be read (only a new text turn gets here with one)."""
        invocation_id = run.context.invocation_id
        resuming = turn.resume or bool(responses)
        try:
            if unreadable:
                # Abandoned all the same (a text turn must not depend on it): the calls its
                # invocation -- always the latest one -- left open, from the stored events.
                logger.warning(
                    "the pause of %s cannot be read; the new text message abandons it (the "
                    "calls left open are answered from the stored events)",
                    turn.ref,
                )
                await run.abandon(stopped_calls(cached.events, ABANDONED_TEXT))
            elif pause is not None and not resuming:
                await run.abandon(pending_tool_calls(cached.events, pause.invocation_id))
            elif pause is None:
                await run.repair(cached)
            else:
                await run.supersede(pause, cached)
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
