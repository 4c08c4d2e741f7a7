"""The Runner: runs an agent tree, saves checkpoints on interrupt, resumes them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from relaykit._aio import closing
from relaykit._tree import validate_tree
from relaykit.agent import Agent, AgentInput
from relaykit.checkpoints.base import CheckpointStore
from relaykit.codec import dumps, loads, materialize_streams, register_type
from relaykit.context import RecordedEvent, RunContext, RunHistory, RunOptions
from relaykit.errors import (
    CheckpointNotFoundError,
    ConfigurationError,
    RelayKitError,
    ResumeTargetError,
    SerializationError,
)
from relaykit.events import AgentEvent
from relaykit.flow import FlowAgent, as_flow_agent
from relaykit.interrupts import (
    Address,
    InterruptContext,
    InterruptInfo,
    InterruptSignal,
    ResumeInfo,
    ResumeState,
)
from relaykit.messages import Message

__all__ = ["CHECKPOINT_FORMAT", "Checkpoint", "Runner", "SavedInterruptPoint"]

CHECKPOINT_FORMAT = "relaykit/checkpoint"


@register_type("relaykit.SavedInterruptPoint")
@dataclass(slots=True)
class SavedInterruptPoint:
    """One node of a saved interrupt tree."""

    id: str
    address: Address
    info: Any
    state: Any
    is_root_cause: bool
    parent: str | None = None


@register_type("relaykit.Checkpoint")
@dataclass(slots=True)
class Checkpoint:
    """Everything needed to resume a run: its input, history, values and interrupt points."""

    root_input: AgentInput
    events: list[AgentEvent]
    values: dict[str, Any]
    enable_streaming: bool
    interrupt_data: Any
    points: list[SavedInterruptPoint]
    flow_pending: list[tuple[Address, Any]] = field(default_factory=list)

    def contexts(self) -> list[InterruptContext]:
        """The root-cause contexts of the saved interrupt, linked to their ancestors."""
        made: dict[str, InterruptContext] = {}
        roots: list[InterruptContext] = []
        for p in self.points:
            ctx = InterruptContext(p.id, p.address, p.info, p.is_root_cause,
                                   made.get(p.parent) if p.parent else None)
            made[p.id] = ctx
            if p.is_root_cause:
                roots.append(ctx)
        return roots


class Runner:
    """Runs an agent (tree): ``run``, ``query``, ``resume``.

    >>> runner = Runner(agent, checkpoint_store=InMemoryCheckpointStore())  # doctest: +SKIP
    >>> async for event in runner.query("hello", checkpoint_id="c1"): ...  # doctest: +SKIP
    """

    def __init__(self, agent: Agent, *, app_name: str = "relaykit", streaming: bool = False,
                 checkpoint_store: CheckpointStore | None = None,
                 session_service: Any = None, plugins: Sequence[Any] = (),
                 artifact_service: Any = None, memory_service: Any = None,
                 compaction: Any = None, auto_create_session: bool = True,
                 save_input_blobs_as_artifacts: bool = False,
                 checkpoint_signing_key: bytes | None = None) -> None:
        unsupported = {"session_service": session_service, "artifact_service": artifact_service,
                       "memory_service": memory_service, "compaction": compaction,
                       "plugins": tuple(plugins) or None}
        for option, value in unsupported.items():
            if value is not None:
                raise ConfigurationError(
                    f"Runner option {option!r} belongs to the durable Runner, which this "
                    "version does not include yet; leave it unset")
        validate_tree(agent)
        self.agent = agent
        self.app_name = app_name
        self.streaming = streaming
        self.checkpoint_store = checkpoint_store
        self.auto_create_session = auto_create_session
        self.save_input_blobs_as_artifacts = save_input_blobs_as_artifacts
        self._signing_key = checkpoint_signing_key
        self._root: FlowAgent = as_flow_agent(agent)

    # -- entry points ----------------------------------------------------------------------
    def run(self, messages: Sequence[Message], *, checkpoint_id: str | None = None,
            user_id: str | None = None, session_id: str | None = None,
            session_values: Mapping[str, Any] | None = None,
            state_delta: Mapping[str, Any] | None = None,
            skip_transfer_messages: bool = False) -> AsyncIterator[AgentEvent]:
        """Run the agent on ``messages``; nothing runs until the result is iterated.

        With ``checkpoint_id`` an interrupted run is saved under that id (needs a store).
        """
        if checkpoint_id is not None and self.checkpoint_store is None:
            raise ConfigurationError(
                f"run(checkpoint_id={checkpoint_id!r}) needs a checkpoint store: "
                "Runner(agent, checkpoint_store=InMemoryCheckpointStore())")
        self._reject_session_options(user_id, session_id, state_delta)
        root_input = AgentInput(list(messages), self.streaming)
        ctx = RunContext(root_input=root_input,
                         options=RunOptions(skip_transfer_messages))
        if session_values:
            ctx.history.values.update(session_values)
        events = self._root.run(ctx, root_input)
        if checkpoint_id is None:
            return events  # nothing to save: the root flow agent's stream is the run
        return self._drive(ctx, events, checkpoint_id)

    def query(self, text: str, **options: Any) -> AsyncIterator[AgentEvent]:
        """``run([Message.user(text)], **options)``."""
        return self.run([Message.user(text)], **options)

    def resume(self, checkpoint_id: str | None = None, *,
               targets: Mapping[str, Any] | None = None,
               user_id: str | None = None, session_id: str | None = None,
               session_values: Mapping[str, Any] | None = None,
               state_delta: Mapping[str, Any] | None = None,
               skip_transfer_messages: bool = False) -> AsyncIterator[AgentEvent]:
        """Continue the run saved under ``checkpoint_id``.

        Without ``targets`` every interrupted point resumes with no data; with ``targets``
        (interrupt id → data) only those points are resume targets (D8). Raises, when
        iterated and before any agent runs, ``CheckpointNotFoundError``,
        ``SerializationError`` or ``ResumeTargetError``.
        """
        if self.checkpoint_store is None:
            raise ConfigurationError("resume() needs a checkpoint store: "
                                     "Runner(agent, checkpoint_store=...)")
        if checkpoint_id is None:
            raise ConfigurationError("resume() needs the checkpoint_id the run was saved under")
        self._reject_session_options(user_id, session_id, state_delta)
        return self._resume(checkpoint_id, dict(targets or {}), session_values,
                            skip_transfer_messages)

    @staticmethod
    def _reject_session_options(user_id: Any, session_id: Any, state_delta: Any) -> None:
        if user_id is not None or session_id is not None or state_delta is not None:
            raise ConfigurationError("user_id, session_id and state_delta need a session "
                                     "service, which this version does not include yet")

    # -- internals -------------------------------------------------------------------------
    async def _resume(self, checkpoint_id: str, targets: dict[str, Any],
                      session_values: Mapping[str, Any] | None,
                      skip: bool) -> AsyncIterator[AgentEvent]:
        cp = await self._load(checkpoint_id)
        known = {p.id for p in cp.points}
        for target in targets:
            if target not in known:
                raise ResumeTargetError(
                    f"resume target {target!r} is not an interrupt point of checkpoint "
                    f"{checkpoint_id!r}; its points are {sorted(known)}", target)
        state = ResumeState({p.id: p.address for p in cp.points},
                            {p.id: p.state for p in cp.points}, targets, dict(cp.flow_pending))
        history = RunHistory(dict(cp.values), [RecordedEvent(e) for e in cp.events])
        if session_values:
            history.values.update(session_values)
        ctx = RunContext(root_input=cp.root_input, history=history,
                         options=RunOptions(skip), resume_state=state)
        info = ResumeInfo(cp.enable_streaming, InterruptInfo(cp.interrupt_data, cp.contexts()))
        async with closing(self._drive(ctx, self._root.resume(ctx, info),
                                        checkpoint_id)) as events:
            async for ev in events:
                yield ev

    async def _load(self, checkpoint_id: str) -> Checkpoint:
        assert self.checkpoint_store is not None
        data = await self.checkpoint_store.get(checkpoint_id)
        if data is None:
            raise CheckpointNotFoundError(checkpoint_id)
        cp = loads(data, kind=CHECKPOINT_FORMAT, key=self._signing_key,
                   what=f"checkpoint {checkpoint_id!r}")
        if not isinstance(cp, Checkpoint):
            raise SerializationError(f"checkpoint {checkpoint_id!r} does not hold a checkpoint")
        return cp

    async def _drive(self, ctx: RunContext, gen: AsyncIterator[AgentEvent],
                     checkpoint_id: str | None) -> AsyncIterator[AgentEvent]:
        interrupted = False
        try:
            async with closing(gen):
                async for ev in gen:
                    action = ev.action
                    if action is not None and action.signal is not None:
                        if interrupted:
                            yield AgentEvent(ev.agent_name, ev.run_path, error=RelayKitError(
                                "multiple interrupt actions reached the Runner in one run"))
                            continue
                        interrupted = True
                        if checkpoint_id is not None:
                            failure = await self._save(ctx, ev, checkpoint_id)
                            if failure is not None:
                                yield failure
                    yield ev
        except Exception as exc:  # D9: nothing crashes the caller
            yield AgentEvent(self._root.name, ctx.run_path or (), error=exc)

    async def _save(self, ctx: RunContext, ev: AgentEvent,
                    checkpoint_id: str) -> AgentEvent | None:
        action = ev.action
        assert action is not None and action.signal is not None
        assert self.checkpoint_store is not None
        try:
            cp = build_checkpoint(ctx, action.signal, action.interrupted, action.flow_pending)
            await materialize_streams(cp)
            data = dumps(cp, kind=CHECKPOINT_FORMAT, key=self._signing_key)
            await self.checkpoint_store.set(checkpoint_id, data)
        except Exception as exc:
            return AgentEvent(ev.agent_name, ev.run_path, error=RelayKitError(
                f"failed to save checkpoint {checkpoint_id!r}: {exc}"))
        return None


def build_checkpoint(ctx: RunContext, signal: InterruptSignal, info: InterruptInfo | None,
                     flow_pending: Mapping[Address, Any] | None) -> Checkpoint:
    """The checkpoint of a run that ``signal`` interrupted."""
    points = [SavedInterruptPoint(node.id, node.address, node.info, node.state,
                                  node.is_root_cause, parent.id if parent else None)
              for node, parent in signal.walk()]
    root_input = ctx.root_input or AgentInput()
    return Checkpoint(root_input, [rec.event for rec in ctx.history.events],
                      dict(ctx.history.values), root_input.enable_streaming,
                      info.data if info is not None else None, points,
                      list((flow_pending or {}).items()))
