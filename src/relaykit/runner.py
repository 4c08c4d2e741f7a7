"""The Runner: runs an agent tree, saves checkpoints on interrupt, resumes them."""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypedDict, Unpack, cast

from relaykit._aio import closing
from relaykit._cancel import CancelSignal, cancelled_event
from relaykit._claims import Claim, claim_ttl, describe_store_failure
from relaykit._invocation import Invocation
from relaykit._live_session import LiveSession, open_live
from relaykit._runner_checks import (
    MAX_SUPPORTED_TRANSFERS,
    agent_names,
    check_runner_options,
    plugin_lifecycle,
)
from relaykit._session_run import DEFAULT_SESSION_LOCK_TIMEOUT, SessionRunner
from relaykit.agent import Agent, AgentInput
from relaykit.artifacts.base import ArtifactService
from relaykit.cancel import RunHandle
from relaykit.checkpoints.base import (
    CheckpointStore,
    validate_checkpoint_id,
)
from relaykit.checkpoints.document import Checkpoint, decode_checkpoint, encode_checkpoint
from relaykit.compaction import CompactionConfig
from relaykit.context import (
    DEFAULT_MAX_TRANSFERS,
    RecordedEvent,
    RunContext,
    RunOptions,
    next_record_seq,
)
from relaykit.errors import (
    ConfigurationError,
    RunnerError,
)
from relaykit.events import AgentEvent
from relaykit.flow import Delegation, FlatItem, FlowAgent, OwnStream, as_flow_agent
from relaykit.interrupts import ResumeState, interrupt_of
from relaykit.memory import MemoryService
from relaykit.messages import Message
from relaykit.models.live import LiveRunConfig
from relaykit.options import AgentOptions, normalize_agent_options
from relaykit.plugins import InvocationContext, Plugin, PluginManager
from relaykit.results import RunResult, collect
from relaykit.resume import InterruptInfo
from relaykit.sessions.base import SessionService
from relaykit.telemetry import with_tracing

__all__ = [
    "MAX_SUPPORTED_TRANSFERS",
    "LiveSession",
    "ResumeKwargs",
    "RunKwargs",
    "RunResult",
    "Runner",
]

logger = logging.getLogger("relaykit")

_new_object = object.__new__


class RunKwargs(TypedDict, total=False):
    """The keyword options of ``Runner.run``, which ``query`` and ``invoke`` take too (each
    key is the parameter of the same name; see ``Runner.run``).

    >>> options: RunKwargs = {"session_values": {"user": "ana"}}
    >>> sorted(options)
    ['session_values']
    """

    #: The id to save an interrupted run under.
    checkpoint_id: str | None
    #: Session mode: the user the session belongs to (required there, else None).
    user_id: str | None
    #: Session mode: the session to run the turn in (required there, else None).
    session_id: str | None
    #: Initial session values (the application's own, hence ``Any``).
    session_values: Mapping[str, Any] | None
    #: Session mode: state changes stored with the user's event, by scope.
    state_delta: Mapping[str, Any] | None
    #: Leave the transfer messages out of the histories agents read.
    skip_transfer_messages: bool
    #: Options for one agent each, by agent name (``AgentOptions`` or a mapping of its fields).
    agent_options: Mapping[str, AgentOptions | Mapping[str, Any]] | None
    #: Session mode: create a missing session (None: ``Runner(auto_create_session=...)``).
    create_session: bool | None


class ResumeKwargs(TypedDict, total=False):
    """The keyword options of ``Runner.resume``, which ``invoke_resume`` takes too (each key is
    the parameter of the same name; see ``Runner.resume``).

    >>> options: ResumeKwargs = {"targets": {"point-id": True}}
    >>> options["targets"]
    {'point-id': True}
    """

    #: The caller's answers by interrupt id: application-defined values, hence ``Any``.
    targets: Mapping[str, Any] | None
    #: Session mode: the user the session belongs to (required there, else None).
    user_id: str | None
    #: Session mode: the session to run the turn in (required there, else None).
    session_id: str | None
    #: Values to set on the restored session values before resuming.
    session_values: Mapping[str, Any] | None
    #: Session mode: state changes stored with the user's event, by scope.
    state_delta: Mapping[str, Any] | None
    #: Leave the transfer messages out of the histories agents read.
    skip_transfer_messages: bool
    #: Options for one agent each, by agent name (``AgentOptions`` or a mapping of its fields).
    agent_options: Mapping[str, AgentOptions | Mapping[str, Any]] | None


class Runner:
    """Runs an agent (tree): ``run``, ``query``, ``resume``, and ``invoke`` /
    ``invoke_resume`` to run to the end.

    Two modes (docs/durable-runner.md). Without a session service each run starts from the
    messages it is given; with a checkpoint store, an interrupted run is saved (under the
    ``checkpoint_id`` given to ``run``, else a generated one, put on the interrupt event) and
    ``resume`` continues it in any process. A resume claims its checkpoint first, so two
    resumes of one checkpoint never both run (the loser gets ``CheckpointBusyError``), and a
    resume that completes consumes it.

    With a session service, every ``run`` is one turn of a stored session (``user_id``,
    ``session_id``): earlier turns are the history, every complete event is stored before the
    caller receives it, a pause is kept with the session, and the next turn starts at the
    agent that spoke last.

    >>> import asyncio
    >>> import relaykit as rk
    >>> model = rk.ScriptedModel([rk.Message.assistant("Hello!")])
    >>> runner = Runner(rk.ChatModelAgent("greeter", model=model))
    >>> async def main() -> None:
    ...     async for event in runner.query("hi"):
    ...         print(event.agent_name, event.message.content)
    >>> asyncio.run(main())
    greeter Hello!

    Args:
        agent: the root agent (a single agent, or the root of a tree). The tree is checked
            now (unique names, one parent per agent): ``ConfigurationError`` otherwise.
        app_name: the application's name (sessions are kept per application).
        streaming: agents stream their model replies (``AgentInput.enable_streaming``).
        checkpoint_store: where interrupted runs are saved; without one an interrupted run
            cannot be resumed.
        session_service: where sessions are stored; None for no sessions (each run on its own
            messages). With one, ``run`` and ``resume`` need ``user_id`` and ``session_id``.
        plugins: hooks around runs, agents, model calls and tool calls (``relaykit.Plugin``;
            unique names), in the order their hooks run.
        artifact_service: where ``ToolContext.save_artifact`` and input attachments go.
        memory_service: what ``load_memory`` and ``ToolContext.search_memory`` search.
        compaction: when to summarise a session's history (session mode; without a
            summarizer the root agent must be a ``ChatModelAgent``, whose model is used).
        auto_create_session: session mode: create a session a run names if it does not
            exist (else ``SessionNotFoundError``).
        save_input_blobs_as_artifacts: session mode: save the user message's attachments as
            artifacts and replace them by ``Uploaded file: <name>`` (needs an artifact
            service).
        checkpoint_signing_key: sign saved checkpoints (HMAC-SHA256) with this secret and
            refuse to resume one whose signature is missing or wrong
            (docs/checkpoints-and-storage.md#d10).
        max_transfers: the most transfers one run may perform, 0 to
            ``MAX_SUPPORTED_TRANSFERS`` (docs/errors-and-limits.md#d23).
        session_lock_timeout: session mode: how long a turn waits for another turn of the
            same session (any process) before ``SessionBusyError``, in seconds.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        app_name: str = "relaykit",
        streaming: bool = False,
        checkpoint_store: CheckpointStore | None = None,
        session_service: SessionService | None = None,
        plugins: Sequence[Plugin] = (),
        artifact_service: ArtifactService | None = None,
        memory_service: MemoryService | None = None,
        compaction: CompactionConfig | None = None,
        auto_create_session: bool = True,
        save_input_blobs_as_artifacts: bool = False,
        checkpoint_signing_key: bytes | None = None,
        max_transfers: int = DEFAULT_MAX_TRANSFERS,
        session_lock_timeout: float = DEFAULT_SESSION_LOCK_TIMEOUT,
    ) -> None:
        lock_timeout = check_runner_options(
            agent,
            checkpoint_store=checkpoint_store,
            session_service=session_service,
            artifact_service=artifact_service,
            compaction=compaction,
            save_input_blobs_as_artifacts=save_input_blobs_as_artifacts,
            session_lock_timeout=session_lock_timeout,
            max_transfers=max_transfers,
        )
        # Tracing on (relaykit.telemetry.enable() or RELAYKIT_TRACING=1): a TracingPlugin last.
        manager = PluginManager(with_tracing(plugins, agent))
        #: The root agent, as given.
        self.agent = agent
        #: The application's name.
        self.app_name = app_name
        #: Whether agents stream their model replies.
        self.streaming = streaming
        #: Where interrupted runs are saved (None: they are not).
        self.checkpoint_store = checkpoint_store
        #: Session mode: create a session a run names if it does not exist.
        self.auto_create_session = auto_create_session
        #: Session mode: save the input's attachments as artifacts.
        self.save_input_blobs_as_artifacts = save_input_blobs_as_artifacts
        #: The most transfers one run may perform.
        self.max_transfers = max_transfers
        self._signing_key = checkpoint_signing_key
        self._root: FlowAgent = as_flow_agent(agent)
        self._warned_unresumable = False
        #: The session service (None: Eino mode, no sessions).
        self.session_service = session_service
        #: The plugins, in the order their hooks run.
        self.plugins: tuple[Plugin, ...] = manager.plugins
        #: Where artifacts are kept (session mode), or None.
        self.artifact_service = artifact_service
        #: The memory ``load_memory`` and ``ToolContext.search_memory`` search, or None.
        self.memory_service = memory_service
        #: The compaction rules (session mode), or None.
        self.compaction = compaction
        self._plugins = manager
        self._sessions: SessionRunner | None = None
        if session_service is not None:
            self._sessions = SessionRunner(
                root=self._root,
                service=session_service,
                app_name=app_name,
                plugins=manager,
                artifact_service=artifact_service,
                memory_service=memory_service,
                compaction=compaction,
                auto_create_session=auto_create_session,
                save_input_blobs_as_artifacts=save_input_blobs_as_artifacts,
                lock_timeout=lock_timeout,
                signing_key=checkpoint_signing_key,
                max_transfers=max_transfers,
                streaming=streaming,
            )

    # -- entry points ----------------------------------------------------------------------
    def run(
        self,
        messages: Sequence[Message],
        *,
        checkpoint_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        session_values: Mapping[str, Any] | None = None,
        state_delta: Mapping[str, Any] | None = None,
        skip_transfer_messages: bool = False,
        agent_options: Mapping[str, AgentOptions | Mapping[str, Any]] | None = None,
        create_session: bool | None = None,
    ) -> RunHandle:
        """Run the agent on ``messages``; nothing runs until the handle is iterated (or its
        ``cancel`` or ``result`` awaited).

        The ``RunHandle`` is the run's event stream (``async for event in handle``), which
        ``handle.cancel(mode)`` stops at a safe point, paused and resumable
        (docs/cancellation.md); ``await handle.result()`` runs it to the end.

        With a checkpoint store, an interrupted run is saved under ``checkpoint_id`` (or a
        generated id) before the caller receives the interrupt event, whose
        ``action.interrupted.checkpoint_id`` says where. Failures while the run goes on are
        error events, never exceptions (docs/errors-and-limits.md#d9).

        Args:
            messages: the run's input.
            checkpoint_id: the id to save an interrupted run under (needs a checkpoint
                store); a generated one by default.
            user_id: session mode: the user the session belongs to.
            session_id: session mode: the session (created on first use unless
                ``auto_create_session=False``).
            session_values: initial session values, visible to every agent (in session mode
                they are stored like ``state_delta``; the application's
                own values, hence ``Any``).
            state_delta: session mode: state changes stored with the user's event (keys
                prefixed ``app:``, ``user:``, ``temp:`` or none, docs/sessions.md).
            skip_transfer_messages: leave the ``transfer_to_agent`` messages out of the
                histories agents read (docs/trees-and-transfer.md#d5).
            agent_options: options for one agent each, by agent name: ``AgentOptions`` (or
                a mapping of its fields) with model options, tool options and a history
                modifier (docs/retries-and-options.md). A name that is not an agent of the
                tree is a ``ConfigurationError``.
            create_session: session mode: create the session when it does not exist
                (``SessionNotFoundError`` otherwise, raised by the iteration); None follows
                ``Runner(auto_create_session=...)``. A server that checked the session before
                the turn passes False, so a session deleted while the turn waited for its lock
                is not created again.

        >>> import asyncio
        >>> import relaykit as rk
        >>> runner = Runner(rk.ChatModelAgent(
        ...     "greeter", model=rk.ScriptedModel([rk.Message.assistant("Hello!")])))
        >>> async def main() -> list[str]:
        ...     return [ev.agent_name async for ev in runner.run([rk.Message.user("hi")])]
        >>> asyncio.run(main())
        ['greeter']
        """
        designated = self._agent_options(agent_options)
        cancel = CancelSignal()
        if self._sessions is not None:
            if checkpoint_id is not None:
                raise ConfigurationError(
                    "a Runner with a session service keeps pauses with the session: "
                    "run(..., user_id=..., session_id=...) without checkpoint_id"
                )
            turn = self._sessions.turn(
                messages,
                user_id=user_id,
                session_id=session_id,
                resume=False,
                targets=None,
                state_delta=state_delta,
                session_values=session_values,
                skip=skip_transfer_messages,
                agent_options=designated,
                cancel=cancel,
                create_session=create_session,
            )
            return RunHandle(turn, cancel)
        if create_session is not None:
            raise ConfigurationError(
                "create_session is for a Runner with a session service (session mode)"
            )
        if checkpoint_id is not None:
            if self.checkpoint_store is None:
                raise ConfigurationError(
                    f"run(checkpoint_id={checkpoint_id!r}) needs a checkpoint store: "
                    "Runner(agent, checkpoint_store=InMemoryCheckpointStore())"
                )
            validate_checkpoint_id(checkpoint_id)
        self._reject_session_options(user_id, session_id, state_delta)
        root_input = AgentInput(list(messages), self.streaming)
        ctx = RunContext(
            root_input=root_input, options=RunOptions(skip_transfer_messages, self.max_transfers)
        )
        ctx.options.cancel = cancel
        if designated:
            ctx.options.agent_options = designated
        if session_values:
            ctx.history.values.update(session_values)
        if self._plugins:
            return RunHandle(self._with_plugins(ctx, root_input, checkpoint_id), cancel)
        if self.artifact_service is not None or self.memory_service is not None:
            self._invocation(ctx)
        return RunHandle(
            self._drive(ctx, self._root.run_flat(ctx, root_input), checkpoint_id, None), cancel
        )

    def query(self, text: str, **options: Unpack[RunKwargs]) -> RunHandle:
        """``run([Message.user(text)], **options)``; see the class example.

        Args:
            text: the user's message.
            **options: the keyword options of ``run``.
        """
        return self.run([Message.user(text)], **options)

    def resume(
        self,
        checkpoint_id: str | None = None,
        *,
        targets: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        session_values: Mapping[str, Any] | None = None,
        state_delta: Mapping[str, Any] | None = None,
        skip_transfer_messages: bool = False,
        agent_options: Mapping[str, AgentOptions | Mapping[str, Any]] | None = None,
    ) -> RunHandle:
        """Continue the run saved under ``checkpoint_id`` (a ``RunHandle``, as ``run``).

        Without ``targets`` every interrupted point resumes with no data; with ``targets``
        (interrupt id → data) only those points are resume targets (D8). When iterated, and
        before any agent runs, the resume claims the checkpoint and raises
        ``CheckpointNotFoundError``, ``CheckpointBusyError`` (another resume holds it),
        ``CheckpointStoreError``, ``SerializationError`` or ``ResumeTargetError``. A resume
        that completes deletes the checkpoint; one that interrupts again replaces it; one the
        caller stops early leaves it in place (D21).

        Args:
            checkpoint_id: the id the run was saved under (``InterruptInfo.checkpoint_id``).
                Required: ``ConfigurationError`` without it.
            targets: the caller's answers by interrupt id (``InterruptContext.id``): the data
                each point's agent reads as ``ResumeInfo.resume_data`` (application-defined,
                hence ``Any``; docs/interrupts-and-resume.md#d8).
            user_id: session mode: the user the session belongs to.
            session_id: session mode: the session (created on first use unless
                ``auto_create_session=False``).
            session_values: values to set on the restored session values before resuming.
            state_delta: session mode: state changes stored with the user's event (keys
                prefixed ``app:``, ``user:``, ``temp:`` or none, docs/sessions.md).
            skip_transfer_messages: as for ``run``.
            agent_options: as for ``run`` (``ResumeOptions`` is ``AgentOptions``); a
                ``history_modifier`` edits a paused agent's conversation before it continues.

        See ``invoke_resume`` for an example.
        """
        designated = self._agent_options(agent_options)
        cancel = CancelSignal()
        if self._sessions is not None:
            if checkpoint_id is not None:
                raise ConfigurationError(
                    "a Runner with a session service resumes the session's pause: "
                    "resume(user_id=..., session_id=...) without checkpoint_id"
                )
            turn = self._sessions.turn(
                [],
                user_id=user_id,
                session_id=session_id,
                resume=True,
                targets=targets,
                state_delta=state_delta,
                session_values=session_values,
                skip=skip_transfer_messages,
                agent_options=designated,
                cancel=cancel,
            )
            return RunHandle(turn, cancel)
        if self.checkpoint_store is None:
            raise ConfigurationError(
                "resume() needs a checkpoint store: Runner(agent, checkpoint_store=...)"
            )
        if checkpoint_id is None:
            raise ConfigurationError("resume() needs the checkpoint_id the run was saved under")
        validate_checkpoint_id(checkpoint_id)
        self._reject_session_options(user_id, session_id, state_delta)
        if targets is not None and not isinstance(targets, Mapping):
            raise ConfigurationError(
                "resume(targets=...) takes a mapping of interrupt id to resume data, not "
                f"{type(targets).__name__}"
            )
        if session_values is not None and not isinstance(session_values, Mapping):
            raise ConfigurationError(
                f"session_values must be a mapping, not {type(session_values).__name__}"
            )
        resumed = self._resume(
            checkpoint_id,
            dict(targets or {}),
            session_values,
            skip_transfer_messages,
            designated,
            cancel,
        )
        return RunHandle(resumed, cancel)

    async def invoke(
        self, messages: str | Message | Sequence[Message], **options: Unpack[RunKwargs]
    ) -> RunResult:
        """Run to the end and return the result (the event stream, collected).

        An interrupted run returns with ``interrupt`` set (not an error); a run whose last
        agent event is an error raises ``AgentRunError`` naming the agent, with the original
        exception as ``__cause__``.

        Args:
            messages: a text (one user message) or a list of messages.
            **options: the keyword options of ``run``.

        >>> import asyncio
        >>> import relaykit as rk
        >>> model = rk.ScriptedModel([rk.Message.assistant("It is sunny in Paris.")])
        >>> runner = Runner(rk.ChatModelAgent("weather", model=model))
        >>> result = asyncio.run(runner.invoke("What is the weather in Paris?"))
        >>> result.output.content
        'It is sunny in Paris.'
        """
        if isinstance(messages, str):
            msgs: Sequence[Message] = [Message.user(messages)]
        elif isinstance(messages, Message):
            msgs = [messages]
        else:
            msgs = messages
        return await collect(self.run(msgs, **options))

    async def pending_interrupt(self, *, user_id: str, session_id: str) -> InterruptInfo | None:
        """What a session's paused invocation waits for, or None when nothing waits.

        Session mode only (``ConfigurationError`` otherwise). Its waiting points are what a
        ``resume(targets=...)`` answers, and a waiting tool call's id is what
        ``Message.tool(..., tool_call_id=...)`` answers. A pause that cannot be read (corrupt,
        or signed with another key) raises ``SerializationError``, as resuming it would.
        """
        if self._sessions is None:
            raise ConfigurationError("pending_interrupt needs a Runner with a session_service")
        return await self._sessions.pending_interrupt(user_id, session_id)

    async def invoke_resume(
        self, checkpoint_id: str | None = None, **options: Unpack[ResumeKwargs]
    ) -> RunResult:
        """``resume`` run to the end, as ``invoke`` does for ``run``.

        Args:
            checkpoint_id: the id the run was saved under (``RunResult.checkpoint_id``).
            **options: the keyword options of ``resume``.

        >>> import asyncio
        >>> import relaykit as rk
        >>> class Approval(rk.BaseAgent):
        ...     async def run(self, ctx, input, **options):
        ...         yield rk.interrupt(ctx, "approve the payment?")
        ...     async def resume(self, ctx, info, **options):
        ...         answer = "paid" if info.resume_data else "cancelled"
        ...         yield rk.AgentEvent.from_message(rk.Message.assistant(answer))
        >>> runner = Runner(Approval("approver"), checkpoint_store=rk.InMemoryCheckpointStore())
        >>> async def main() -> str | None:
        ...     paused = await runner.invoke("pay 10 EUR")
        ...     assert paused.interrupt is not None and paused.checkpoint_id is not None
        ...     point = paused.interrupt.contexts[0]
        ...     print(point.info)
        ...     done = await runner.invoke_resume(paused.checkpoint_id, targets={point.id: True})
        ...     return done.output.content if done.output else None
        >>> asyncio.run(main())
        approve the payment?
        'paid'
        """
        return await collect(self.resume(checkpoint_id, **options))

    def run_live(
        self,
        *,
        user_id: str,
        session_id: str,
        config: LiveRunConfig | None = None,
    ) -> LiveSession:
        """A live session of the agent the next turn would start at, over its ``live_model``
        (session mode; docs/live.md).

        Awaiting the result (then ``close()`` it), or entering it with ``async with``, opens
        it: the turn lock, the session (created if missing), ``before_run`` and the
        connection, so a failure to connect raises there. Then ``send`` / ``send_realtime``
        input while ``events()`` yields what happens; every complete event is stored.

        Args:
            user_id: the user the session belongs to.
            session_id: the session (created on first use unless ``auto_create_session=False``).
            config: the live options (``LiveRunConfig()`` when None).

        See ``LiveSession`` for an example.
        """
        return open_live(self._sessions, user_id, session_id, config)

    def _agent_options(self, given: object) -> dict[str, AgentOptions]:
        """``agent_options`` checked against the tree's agents (``ConfigurationError``)."""
        if given is None:
            return {}
        return normalize_agent_options(given, agent_names(self.agent))

    @staticmethod
    def _reject_session_options(user_id: object, session_id: object, state_delta: object) -> None:
        if user_id is not None or session_id is not None or state_delta is not None:
            raise ConfigurationError(
                "user_id, session_id and state_delta need a session service: "
                "Runner(agent, session_service=InMemorySessionService())"
            )

    async def aclose(self) -> None:
        """Close the plugins (their optional ``close``); the services stay the caller's."""
        await self._plugins.aclose()

    def _invocation(self, ctx: RunContext) -> InvocationContext:
        """Put the plugins and services on ``ctx`` (Eino mode: no session)."""
        context = InvocationContext(self.app_name, None, None, uuid.uuid4().hex)
        ctx.options.invocation = Invocation(
            context, self._plugins, self.artifact_service, self.memory_service
        )
        return context

    async def _with_plugins(
        self, ctx: RunContext, root_input: AgentInput, checkpoint_id: str | None
    ) -> AsyncGenerator[AgentEvent, None]:
        """An Eino-mode run with plugins (see ``plugin_lifecycle``)."""
        context = self._invocation(ctx)
        start = lambda: self._drive(ctx, self._root.run_flat(ctx, root_input), checkpoint_id, None)  # noqa: E731
        async with closing(
            plugin_lifecycle(self._plugins, self._root.name, context, root_input.messages, start)
        ) as events:
            async for ev in events:
                yield ev

    # -- internals -------------------------------------------------------------------------
    async def _resume(
        self,
        checkpoint_id: str,
        targets: dict[str, Any],
        session_values: Mapping[str, Any] | None,
        skip: bool,
        designated: dict[str, AgentOptions],
        cancel: CancelSignal,
    ) -> AsyncGenerator[AgentEvent, None]:
        store = self.checkpoint_store
        assert store is not None
        claim = Claim(store, checkpoint_id, claim_ttl(store))
        data = await claim.acquire()
        try:
            cp, interrupted = decode_checkpoint(
                data, key=self._signing_key, what=f"checkpoint {checkpoint_id!r}"
            )
            cp.check_targets(interrupted, targets, f"checkpoint {checkpoint_id!r}")
            history = cp.history()
            if session_values:
                history.values.update(session_values)
            ctx = RunContext(
                root_input=cp.root_input,
                history=history,
                options=RunOptions(skip, self.max_transfers),
                resume_state=ResumeState.of(interrupted, targets),
            )
            ctx.options.cancel = cancel
            if designated:
                ctx.options.agent_options = designated
            context = (
                self._invocation(ctx)
                if self._plugins or self.artifact_service or self.memory_service
                else None
            )
            gen = self._root.resume_flat(ctx, cp.resume_info(interrupted))
        except BaseException:
            # Nothing ran: the checkpoint stays, unclaimed, for a resume that can use it.
            await claim.release()
            await claim.stop_renewing()
            raise
        if self._plugins and context is not None:

            async def unclaim() -> None:  # the resume never started: the checkpoint stays
                await claim.release()
                await claim.stop_renewing()

            start = lambda: self._drive(ctx, gen, checkpoint_id, claim)  # noqa: E731
            resumed = plugin_lifecycle(
                self._plugins, self._root.name, context, None, start, unclaim
            )
        else:
            resumed = self._drive(ctx, gen, checkpoint_id, claim)
        async with closing(resumed) as events:
            async for ev in events:
                yield ev

    async def _drive(
        self,
        ctx: RunContext,
        gen: AsyncIterator[FlatItem],
        checkpoint_id: str | None,
        claim: Claim | None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """The one path of every run and resume: forward events, save the checkpoint when
        the run interrupts, consume (or release) a resumed checkpoint when it ends.

        ``gen`` is a flat run (``FlowAgent.run_flat``): where a flow agent hands a transfer
        target's stream up (a ``Delegation``), the target's stream is iterated here, as
        ``yield from`` would -- its last event sent to the delegating stream when it ends,
        what it raises thrown into it. A flow agent hands its agent's own stream up too (an
        ``OwnStream``): its plain messages are stamped, recorded and delivered here, a nested
        agent's events (stamped and recorded below) as they are, anything else is sent to the
        flow agent. So an event takes no generator step between the agent that yielded it and
        the caller, however deep the tree.
        """
        interrupted = False
        ended = False
        closed = False
        # The delegating streams below ``top`` (innermost last), each with its delegation and
        # the last event of its own stream before it delegated.
        stack: list[_Delegating] = []
        top = gen
        try:
            try:
                try:
                    step: Callable[[], Awaitable[FlatItem]] = gen.__anext__
                    anext = step
                    last: AgentEvent | None = None  # the last event of ``top``'s stream
                    pending = 0  # how many delegations in ``stack`` have a pending chain
                    own: OwnStream | None = None  # when ``top`` is an agent's own stream
                    own_last: AgentEvent | None = None
                    while True:
                        try:
                            ev = await step()
                        except StopAsyncIteration:
                            if not stack:
                                break
                            below, delegation, before = stack.pop()
                            if own is not None:  # the agent's own stream ended
                                own.last, own = own_last, None
                                step = functools.partial(below.asend, None)
                                top, anext = below, below.__anext__
                                continue
                            if delegation.pending is not None:
                                pending -= 1
                            step = functools.partial(below.asend, last)
                            top, anext = below, below.__anext__
                            if last is None:  # the target yielded nothing
                                last = before
                            continue
                        except BaseException as exc:
                            if not stack:
                                raise
                            below, delegation, before = stack.pop()
                            if own is not None:
                                own.last, own = own_last, None
                            elif delegation.pending is not None:
                                pending -= 1
                            step = functools.partial(below.athrow, exc)
                            top, anext = below, below.__anext__
                            if last is None:
                                last = before
                            continue
                        step = anext
                        if own is not None:  # the agent's own stream: plain messages here
                            own_last = ev  # type: ignore[assignment]  # checked just below
                            if type(ev) is not AgentEvent:
                                # Not an event (an agent yielding a Message, say): its flow
                                # agent fails on it, as the agent's own error (D9).
                                below, _, _ = stack.pop()
                                own.last, own = own_last, None
                                step = functools.partial(below.asend, cast(AgentEvent, ev))
                                top, anext = below, below.__anext__
                                continue
                            if (
                                ev.action is None
                                and own.quiet
                                and ev.error is None
                                and not ev.run_path
                                and (
                                    (out := ev.output) is None
                                    or (
                                        out.stream is None
                                        and ((msg := out.message) is None or not msg.tool_calls)
                                    )
                                )
                            ):
                                # A plain message (the common case): stamped and recorded
                                # here, as ``ev.stamped(own.name, own.path)`` and
                                # ``RecordedEvent.of`` would (inline: their calls would cost
                                # more than the copy and the record), and delivered -- no
                                # action, so no chain to apply and nothing to save.
                                new = _new_object(AgentEvent)
                                new.agent_name = own.name
                                new.run_path = own.path
                                new.output = out
                                new.action = None
                                new.error = None
                                new.state_delta = ev.state_delta
                                new.internal = False
                                new.stored_id = None
                                rec = _new_object(RecordedEvent)
                                rec.event = new
                                rec.seq = next_record_seq()
                                rec.message = out.message if out is not None else None
                                rec.rewritten = None
                                rec.skip = False
                                own.record(rec)
                                last = new
                                yield new
                                continue
                            if not ev.run_path:  # not a nested agent's: its flow agent's
                                below, _, _ = stack.pop()
                                own.last, own = own_last, None  # (kept for its next push)
                                step = functools.partial(below.asend, ev)
                                top, anext = below, below.__anext__
                                continue
                        elif type(ev) is OwnStream:
                            stack.append((cast(_Frame, top), ev, last))
                            # Its last event so far: None for a new stream (not the previous
                            # stream's), kept when the flow agent hands it back.
                            own, own_last, top = ev, ev.last, ev.events
                            step = anext = top.__anext__
                            continue
                        elif type(ev) is Delegation:
                            # Only a flow agent's generator yields a delegation.
                            delegating = cast(_Frame, top)
                            stack.append((delegating, ev, last))
                            if ev.pending is not None:
                                pending += 1
                            top, last = ev.events, None
                            step = anext = top.__anext__
                            continue
                        last = ev
                        if pending:  # the delegating flow agents' chains, innermost first
                            for _, d, _ in reversed(stack):
                                if d.pending is not None:
                                    ev = FlowAgent._with_pending(d.ctx, ev, d.pending)
                        action = ev.action  # inline interrupt_of(): once per event
                        if (
                            action is not None
                            and action.interrupted is not None
                            and action.interrupted.contexts
                        ):
                            if interrupted:
                                yield AgentEvent(
                                    ev.agent_name,
                                    ev.run_path,
                                    error=RunnerError(
                                        "multiple interrupt actions reached the Runner in one "
                                        "run; only the first was saved"
                                    ),
                                )
                                continue
                            interrupted = True
                            cancel = ctx.options.cancel
                            if cancel is not None and cancel.mode is not None:
                                ev = cancelled_event(ev, cancel)  # D26: a paused run
                            failure, ev = await self._save(ctx, ev, checkpoint_id, claim)
                            if failure is not None:
                                yield failure
                            saved = interrupt_of(ev)
                            if cancel is not None and saved is not None:
                                cancel.ended_with(saved)
                        yield ev
                except GeneratorExit:
                    closed = True  # the caller closed the run: nothing more may be yielded
                    raise
                finally:
                    await _close_streams(top, stack)
            except Exception as exc:  # D9: nothing crashes the caller
                if closed:
                    # An agent failed while its stream was closed (a ``finally`` that raised):
                    # the caller closing the run is not told (it cannot be: a closed generator
                    # yields nothing), so it is logged.
                    logger.warning(
                        "an agent raised %s while the run was being closed",
                        type(exc).__name__,
                    )
                    return
                yield AgentEvent(self._root.name, ctx.run_path or (), error=exc)
            ended = True
            if claim is not None and claim.held:
                # The resumed run ended without a new interrupt: consume the checkpoint (D21).
                consumed = await claim.finish(None)
                if consumed is not None:
                    yield AgentEvent(self._root.name, ctx.run_path or (), error=consumed)
        finally:
            if claim is not None and not ended:
                await claim.release()  # stopped early or cancelled: the checkpoint stays
            if claim is not None:
                await claim.stop_renewing()

    async def _save(
        self, ctx: RunContext, ev: AgentEvent, checkpoint_id: str | None, claim: Claim | None
    ) -> tuple[AgentEvent | None, AgentEvent]:
        """Save the checkpoint of an interrupted run; (an error event or None, the interrupt
        event with ``checkpoint_id`` set when saved)."""
        action = ev.action
        info = interrupt_of(ev)
        assert action is not None and info is not None
        store = self.checkpoint_store
        if store is None:
            if not self._warned_unresumable:
                self._warned_unresumable = True
                logger.warning(
                    "agent %r was interrupted, but the Runner has no checkpoint store:"
                    " the run cannot be resumed (Runner(..., checkpoint_store=...))",
                    ev.agent_name,
                )
            return None, ev
        cid = checkpoint_id if checkpoint_id is not None else uuid.uuid4().hex
        try:
            data = await encode_checkpoint(Checkpoint.of(ctx, info), self._signing_key)
        except Exception as exc:
            return AgentEvent(
                ev.agent_name,
                ev.run_path,
                error=RunnerError(f"failed to save checkpoint {cid!r}: {exc}"),
            ), ev
        if claim is not None:
            failure = await claim.finish(data)  # replaces it and ends our claim
            if failure is not None:
                return AgentEvent(ev.agent_name, ev.run_path, error=failure), ev
        else:
            try:
                await store.set(cid, data)
            except Exception as exc:
                return AgentEvent(
                    ev.agent_name,
                    ev.run_path,
                    error=RunnerError(
                        f"failed to save checkpoint {cid!r}: {describe_store_failure(exc)}"
                    ),
                ), ev
        saved = dataclasses.replace(
            action, interrupted=dataclasses.replace(info, checkpoint_id=cid)
        )
        return None, AgentEvent(
            ev.agent_name, ev.run_path, ev.output, saved, ev.error, ev.state_delta
        )


#: A flow agent's stream in a flat run (the Runner sends it events).
_Frame = AsyncGenerator[FlatItem, AgentEvent | None]
#: A flow agent's stream that handed a stream up (a transfer target's, or its agent's own),
#: with what it yielded for it and the last event of its own stream before it did.
_Delegating = tuple[_Frame, Delegation | OwnStream, AgentEvent | None]


async def _close_streams(top: AsyncIterator[FlatItem], stack: list[_Delegating]) -> None:
    """Close ``top``, then the streams that delegated to it, innermost first (as nested
    ``async with closing(...)`` blocks would), each also when closing the one above failed."""
    try:
        aclose = getattr(top, "aclose", None)
        if aclose is not None:
            await aclose()
    finally:
        if stack:
            below, _, _ = stack.pop()
            await _close_streams(below, stack)
