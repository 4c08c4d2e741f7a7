"""The checkpoint document: what an interrupted run saves, and how a resume is set up from it.

Used by the Runner (one checkpoint per interrupted run, in a ``CheckpointStore``) and by
``AgentTool`` (the inner run's checkpoint, saved inside the calling agent's interrupt state).
A checkpoint is a versioned JSON document written by ``relaykit.codec`` (never pickle).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from relaykit.codec import dumps, loads, materialize_streams, register_type
from relaykit.context import RecordedEvent, RunContext, RunHistory
from relaykit.errors import ResumeTargetError, SerializationError
from relaykit.events import AgentEvent, AgentInput
from relaykit.resume import Address, InterruptContext, InterruptInfo, ResumeInfo

__all__ = [
    "CHECKPOINT_FORMAT",
    "Checkpoint",
    "SavedInterruptPoint",
    "decode_checkpoint",
    "encode_checkpoint",
]

CHECKPOINT_FORMAT = "relaykit/checkpoint"


@register_type("relaykit.SavedInterruptPoint")
@dataclass(slots=True)
class SavedInterruptPoint:
    """One point of an interrupt tree as the checkpoint stores it: flat, its parent by id
    (parents come before their children). The fields are those of ``InterruptContext``.

    >>> SavedInterruptPoint("p1", (), "approve?", None, True).parent is None
    True
    """

    #: The point's id (``InterruptContext.id``).
    id: str
    #: Where the point sits in the agent tree.
    address: Address
    #: What the point told the caller (application-defined, hence ``Any``).
    info: Any
    #: What the point's agent saved (application-defined, hence ``Any``).
    state: Any
    #: True for a point that waits; False for a composite.
    is_root_cause: bool
    #: The id of the composite point above this one; None at the top.
    parent: str | None = None


@register_type("relaykit.Checkpoint")
@dataclass(slots=True)
class Checkpoint:
    """Everything needed to resume a run: its input, history, values and interrupt points.

    >>> from relaykit.context import RunContext
    >>> from relaykit.interrupts import interrupt
    >>> ctx = RunContext.new({"user": "ana"})
    >>> cp = Checkpoint.of(ctx, interrupt(ctx, "approve?").action.interrupted)
    >>> cp.values, cp.interrupt().contexts[0].info
    ({'user': 'ana'}, 'approve?')
    """

    #: The run's input (the root agent's messages).
    root_input: AgentInput
    #: The run history so far (what flow agents recorded).
    events: list[AgentEvent]
    #: The run's session values (the application's own, hence ``Any``).
    values: dict[str, Any]
    #: Whether the run streamed.
    enable_streaming: bool
    #: The interrupt's ``InterruptInfo.data`` (application-defined, hence ``Any``).
    interrupt_data: Any
    #: The interrupt tree, flat (parents first).
    points: list[SavedInterruptPoint]
    #: Transfer chains left pending by flow agents, by their address (D3): each value is a
    #: ``relaykit.flow.PendingChain``. Annotated ``Any`` on purpose: the codec checks saved
    #: fields against their annotations, and a loaded value that is not a chain is ignored by
    #: the resume (not refused by the load), as it always was.
    pending_chains: list[tuple[Address, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, ctx: RunContext, info: InterruptInfo) -> Checkpoint:
        """The checkpoint of the run under ``ctx`` that ``info`` interrupted.

        Args:
            ctx: the run's root context (its history, values and root input are saved).
            info: the interrupt that reached the root.
        """
        top = info.top()
        points = (
            []
            if top is None
            else [
                SavedInterruptPoint(
                    p.id,
                    p.address,
                    p.info,
                    p.state,
                    p.is_root_cause,
                    p.parent.id if p.parent is not None else None,
                )
                for p in top.walk()
            ]
        )
        root_input = ctx.root_input or AgentInput()
        return cls(
            root_input,
            [rec.event for rec in ctx.history.events],
            dict(ctx.history.values),
            root_input.enable_streaming,
            info.data,
            points,
            list(info.pending_chains.items()),
        )

    def interrupt(self, what: str = "checkpoint") -> InterruptInfo:
        """The saved interrupt, its tree rebuilt (``SerializationError`` naming ``what`` when
        the points do not form one tree).

        Args:
            what: how error messages name the checkpoint.
        """
        made: dict[str, InterruptContext] = {}
        top: InterruptContext | None = None
        for p in self.points:
            if p.id in made:
                raise SerializationError(f"{what}: interrupt point id repeated")
            parent = None
            if p.parent is not None:
                parent = made.get(p.parent)
                if parent is None:
                    raise SerializationError(
                        f"{what}: an interrupt point names a parent that precedes it nowhere"
                    )
            elif top is not None:
                raise SerializationError(f"{what}: the interrupt points have two tops")
            point = InterruptContext(p.id, p.address, p.info, p.is_root_cause, parent, p.state)
            if parent is None:
                top = point
            else:
                parent.children.append(point)
            made[p.id] = point
        contexts = top.root_causes() if top is not None else []
        return InterruptInfo(self.interrupt_data, contexts, None, dict(self.pending_chains))

    def history(self, values: dict[str, Any] | None = None) -> RunHistory:
        """The run history to resume with (sharing ``values`` when given, else a copy of the
        saved values).

        Args:
            values: the session values to share (an agent tool shares its caller's).
        """
        return RunHistory(
            values if values is not None else dict(self.values),
            [RecordedEvent(e) for e in self.events],
        )

    def check_targets(self, info: InterruptInfo, targets: Mapping[str, Any], what: str) -> None:
        """``ResumeTargetError`` for a resume target that is not one of ``info``'s waiting
        points (a composite point of this checkpoint, or no point at all).

        Args:
            info: the interrupt this checkpoint saved (``decode_checkpoint``'s second value).
            targets: the caller's answers by interrupt id.
            what: how the message names the checkpoint (``checkpoint 'c1'``).
        """
        causes = {c.id for c in info.contexts}
        for target in targets:
            if target not in causes:
                kind = (
                    "a composite point (it wraps others)"
                    if any(p.id == target for p in self.points)
                    else "not an interrupt point"
                )
                raise ResumeTargetError(
                    f"resume target {target!r} is {kind} of {what}; answer one of its waiting "
                    f"points: {sorted(causes)}",
                    target,
                )

    def resume_info(self, info: InterruptInfo) -> ResumeInfo:
        """What the resumed root agent receives.

        Args:
            info: the saved interrupt (``interrupt()``).
        """
        return ResumeInfo(self.enable_streaming, info)


async def encode_checkpoint(cp: Checkpoint, key: bytes | None = None) -> bytes:
    """The checkpoint as a JSON document (streams read to their end first; signed with
    ``key`` when given).

    Args:
        cp: the checkpoint.
        key: the signing key (HMAC-SHA256), or None for an unsigned document.

    >>> import asyncio
    >>> from relaykit.context import RunContext
    >>> from relaykit.interrupts import interrupt
    >>> ctx = RunContext.new()
    >>> cp = Checkpoint.of(ctx, interrupt(ctx, "approve?").action.interrupted)
    >>> data = asyncio.run(encode_checkpoint(cp, b"secret"))
    >>> decode_checkpoint(data, key=b"secret")[1].contexts[0].info
    'approve?'
    """
    await materialize_streams(cp)
    return dumps(cp, kind=CHECKPOINT_FORMAT, key=key)


def decode_checkpoint(
    data: bytes, *, key: bytes | None = None, what: str = "checkpoint"
) -> tuple[Checkpoint, InterruptInfo]:
    """The checkpoint in ``data`` and its interrupt; every failure is a ``SerializationError``
    naming ``what`` (see ``encode_checkpoint`` for a round trip).

    >>> decode_checkpoint(b"not a checkpoint", what="checkpoint 'order-1'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    relaykit.errors.SerializationError: checkpoint 'order-1' ...

    Args:
        data: the document.
        key: the signing key the document must be signed with; None for an unsigned one.
        what: how error messages name the document.
    """
    cp = loads(data, kind=CHECKPOINT_FORMAT, key=key, what=what)
    if not isinstance(cp, Checkpoint):
        raise SerializationError(f"{what} does not hold a checkpoint")
    return cp, cp.interrupt(what)
