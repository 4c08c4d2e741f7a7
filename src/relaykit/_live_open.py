"""Opening a live session (D27): the turn lock, the session, the routed agent, ``before_run``,
the connection, the answers to what earlier invocations left pending. ``LiveRun.open`` runs
it; ``connect_agent`` also connects a transfer's target."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from relaykit._agent_hooks import before_agent
from relaykit._invocation import Invocation
from relaykit._live_events import AgentStream, close_quietly, describe, live_agent, open_calls
from relaykit._session_history import ABANDONED_TEXT, last_speaker, records_of, stopped_calls
from relaykit._session_invocation import Run
from relaykit._session_state import _decode_pause, _StoreFailed, _Turn
from relaykit.context import PriorTurns, RunContext, RunHistory
from relaykit.errors import (
    ConfigurationError,
    ModelError,
    PluginError,
    RunnerError,
    SerializationError,
)
from relaykit.events import AgentEvent, AgentOutput, RunStep
from relaykit.models.live import LiveConfig
from relaykit.plugins import InvocationContext
from relaykit.resume import AddressSegment

if TYPE_CHECKING:
    from relaykit._live_run import LiveRun
    from relaykit._session_state import SessionPause
    from relaykit.agents.chat import ChatModelAgent
    from relaykit.flow import FlowAgent
    from relaykit.sessions.base import SessionEvent

__all__ = ["connect_agent", "open_run"]

logger = logging.getLogger("relaykit")


async def open_run(live: LiveRun) -> None:
    """Open ``live`` (D27): on success ``live.stream`` is connected, or, when ``before_run``
    answered or raised, that event is stored and buffered and ``live`` has ended. A failure
    raises, with nothing stored but a created session, ``after_run`` run if ``before_run``
    did, and the lock released."""
    owner, ref = live.owner, live.ref
    connected: AgentStream | None = None
    try:
        await live.lock.enter_async_context(
            owner.service.lock(
                ref.app_name, ref.user_id, ref.session_id, timeout=owner.lock_timeout
            )
        )
        view, cached = await owner._read(ref)
        name = last_speaker(cached.events, owner.routes)
        route = owner.routes.get(name) if name is not None else None
        chain = route.chain if route is not None else (owner.root,)
        flow = chain[-1]
        agent = live_agent(flow)
        paused = view.checkpoint is not None
        pause: SessionPause | None = None
        if view.checkpoint is not None:
            try:
                pause = _decode_pause(view.checkpoint, ref, owner.signing_key)
            except SerializationError:
                # Abandoned all the same, as a new text turn abandons it: the calls the latest
                # invocation left open, from the stored events.
                logger.warning(
                    "the pause of %s cannot be read; the live session abandons it (the calls "
                    "left open are answered from the stored events)",
                    ref,
                )
        if paused and pause is None:
            answers = stopped_calls(cached.events, ABANDONED_TEXT)
        else:
            answers = open_calls(cached.events, pause)
        invocation_id = uuid.uuid4().hex
        context = InvocationContext(
            ref.app_name, ref.user_id, ref.session_id, invocation_id, view.session
        )
        invocation = Invocation(
            context, owner.plugins, owner.artifact_service, owner.memory_service, view.session
        )
        run = Run(owner, _Turn(ref, [], False, {}, {}, False, {}), view.session, invocation)
        run.cached = cached
        live.run = run
        live.options.writes = run.writes
        live.options.invocation = invocation
        live.before_run_ran = True
        try:
            early = await run._before_run()
        except PluginError as exc:
            root = owner.root
            err = AgentEvent(root.name, (RunStep(root.name),), error=exc)
            await _end_early(live, paused, answers, err)
            return
        if early is not None:
            root = owner.root
            ev = AgentEvent(root.name, (RunStep(root.name),), AgentOutput(early))
            await _end_early(live, paused, answers, ev)
            return
        above = chain[:-1]
        ctx = RunContext(
            run_path=tuple(RunStep(fa.name) for fa in above),
            address=tuple(AddressSegment("agent", fa.name) for fa in above),
            history=RunHistory(
                run.values, prior=PriorTurns([*cached.prior.records, *records_of(answers)])
            ),
            options=live.options,
        )
        entered = flow._enter(ctx)
        try:
            answered = await before_agent(invocation, flow.name)
        except PluginError as exc:
            err = AgentEvent(flow.name, entered.run_path, error=exc)
            await _end_early(live, paused, answers, err)
            return
        if answered is not None:  # the hook answers instead of the agent: nothing connects
            ev = AgentEvent(flow.name, entered.run_path, AgentOutput(answered))
            await _end_early(live, paused, answers, ev)
            return
        try:
            connected = await connect_agent(flow, agent, entered, live.config.modalities)
        except ConfigurationError:
            raise
        except Exception as exc:
            raise ModelError(
                f"the live model of agent {flow.name!r} failed to connect: {describe(exc)}",
                provider="live",
            ) from exc
        try:
            await _drop_pause(live, paused, answers)
        except _StoreFailed as failed:
            cause = failed.args[0]
            raise RunnerError(
                f"failed to store the answers to the calls left pending in {ref}; the live "
                f"session did not open: {describe(cause)}"
            ) from cause
        live.stream = connected
    except BaseException:
        live.ended = True
        if connected is not None:
            await close_quietly(connected)
        await live._release()
        raise


async def connect_agent(
    flow: FlowAgent, agent: ChatModelAgent, ctx: RunContext, modalities: tuple[str, ...]
) -> AgentStream:
    """Connect ``agent``'s live model with its system message and its history."""
    prepared = agent._prepare(ctx)
    system = agent._system_message(ctx, prepared)
    history = (await flow.build_input(ctx)).messages
    messages = [system, *history] if system is not None else list(history)
    config = LiveConfig(messages, list(prepared.specs), modalities)
    live_model = agent.live_model
    assert live_model is not None
    connection = await live_model.connect(config)
    return AgentStream(flow, agent, ctx, prepared, connection, messages)


async def _drop_pause(live: LiveRun, paused: bool, answers: list[SessionEvent]) -> None:
    """Store the answers to what earlier invocations left pending; delete the pause (when one
    is stored, read or not)."""
    run = live.run
    assert run is not None
    await run._answer(answers)
    if paused:
        ref = live.ref
        try:
            await live.owner.service.set_checkpoint(ref.app_name, ref.user_id, ref.session_id, None)
        except Exception as exc:
            raise _StoreFailed(exc) from exc


async def _end_early(
    live: LiveRun, paused: bool, answers: list[SessionEvent], ev: AgentEvent
) -> None:
    """``before_run`` or the agent's ``before_agent`` answered or raised: that event is
    stored and delivered, nothing connects (D19, D25); the session has ended."""
    run = live.run
    assert run is not None
    try:
        await _drop_pause(live, paused, answers)
        live.buffer.put(await run._deliverable(ev))
    except _StoreFailed as failed:
        live.buffer.put(run.failure_event(failed))
    live.ended = True
    await live._release()
