"""The cancel signal the agents of one run share (``RunOptions.cancel``, D26).

``RunHandle.cancel`` requests a cancel on it; agents read it at their safe points and stop there
with an interrupt, so that a cancelled run is paused, not failed:

* a flow agent about to start its agent (any mode): the agent does not start
  (``NotStarted``), the resume starts it;
* a ``ChatModelAgent`` after a model reply with tool calls (``AFTER_MODEL``), before a model call
  (``AFTER_TOOLS``, after its tool batch), and at once (``IMMEDIATE``);
* an immediate cancel (or a timeout escalating to one) also cuts what is being awaited: a model
  call, an async tool call, a stream's next chunk (a plain function tool's call that has
  started runs in a thread, which cannot be stopped: it is waited for and keeps its result).
  Those awaits are cut points (``CutPoint``),
  which cancel the awaiting task the way ``asyncio.timeout`` does (a targeted ``cancel``, then
  ``uncancel``), so a cancellation from outside still propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from relaykit.codec import register_type
from relaykit.errors import StreamCancelledError
from relaykit.events import AgentEvent

if TYPE_CHECKING:
    from relaykit.resume import InterruptInfo

__all__ = [
    "CallCut",
    "CancelMode",
    "CancelSignal",
    "Cancelled",
    "CutPoint",
    "NotStarted",
    "cancelled_event",
]

T = TypeVar("T")

logger = logging.getLogger("relaykit")

#: Seconds after a cut after which a call that has not stopped is reported (logged): it caught
#: the cancellation and carried on, and the run -- and ``cancel`` -- wait until it returns.
STUCK_AFTER = 5.0


@register_type("relaykit.CancelMode")
class CancelMode(enum.Enum):
    """Where a cancelled run stops (``RunHandle.cancel(mode=...)``).

    >>> CancelMode.AFTER_TOOLS.value
    'after_tools'
    """

    #: Now: model calls, async tool calls and streams in progress are cut (a cut stream ends
    #: with ``StreamCancelledError``); the resume makes them again. A plain function tool's
    #: call that has started is waited for and keeps its result.
    IMMEDIATE = "immediate"
    #: When the model call in progress (or the next one) has completed: its reply is kept, the
    #: tools it asked for have not run; the resume runs them. No agent starts a model call
    #: after that reply (one running tools stops before its next call).
    AFTER_MODEL = "after_model"
    #: When the tool batch in progress (or the next one) has finished: its results are kept,
    #: the next model call is the resume's.
    AFTER_TOOLS = "after_tools"


@register_type("relaykit.Cancelled")
@dataclass(frozen=True, slots=True)
class Cancelled:
    """The data of a cancelled run's interrupt (``InterruptInfo.data``), and the ``info`` of
    each point the cancel stopped.

    >>> Cancelled(CancelMode.AFTER_TOOLS)
    Cancelled(mode=<CancelMode.AFTER_TOOLS: 'after_tools'>, escalated=False)
    """

    #: The mode the cancel asked for.
    mode: CancelMode
    #: True when the safe point was not reached within the cancel's ``timeout`` and the cancel
    #: became immediate.
    escalated: bool = False


@register_type("relaykit.NotStarted")
@dataclass(slots=True)
class NotStarted:
    """The interrupt state of an agent a cancel stopped before it started: the resume starts it.

    >>> NotStarted()
    NotStarted()
    """


class CallCut(Exception):
    """An awaited call was cut by an immediate cancel (raised by a ``CutPoint``, caught
    by its caller, never delivered)."""


class CutPoint:
    """One await an immediate cancel may cut (``with signal.cut_point(): await ...``).

    While the await is in progress the signal knows its task; a cut cancels that task, and
    leaving the block turns that cancellation into ``CallCut`` -- unless the task was also
    cancelled from outside (then ``CancelledError`` propagates), as ``asyncio.timeout`` tells
    its own cancellation from others. Entering after an immediate cancel raises ``CallCut``
    at once. A plain ``with`` (not a coroutine): a cut point costs no frame of its own.
    """

    __slots__ = ("level", "signal", "task")

    def __init__(self, signal: CancelSignal) -> None:
        self.signal = signal
        self.task: asyncio.Task[object] | None = None
        # How many cancellations the task had on entering: more than that on leaving, once
        # the cut's own is withdrawn, means a cancellation from outside came too -- also one
        # that came before the cut, in the same loop iteration (it must propagate, D9).
        self.level = 0

    def __enter__(self) -> None:
        signal = self.signal
        if signal.immediate:
            raise CallCut
        loop = signal._loop
        if loop is None:
            # Found once per run: looking the running loop up is a system call (the process
            # id check) on some Pythons.
            loop = signal._loop = asyncio.get_running_loop()
        task = self.task = asyncio.current_task(loop)
        if task is not None:
            self.level = task.cancelling()
            waiting = signal._waiting
            waiting[task] = waiting.get(task, 0) + 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        task = self.task
        if task is None:
            return
        signal = self.signal
        waiting = signal._waiting
        n = waiting[task] - 1
        if n:
            waiting[task] = n
        else:
            del waiting[task]
        sent = signal._sent
        if sent and task in sent:
            sent.discard(task)
            # A cut came: withdraw its cancellation (a call that swallowed it and finished
            # keeps its result); its CancelledError becomes CallCut, unless the task was also
            # cancelled from outside (as ``asyncio.timeout`` tells its own cancellation apart).
            if (
                task.uncancel() <= self.level
                and exc_type is not None
                and issubclass(exc_type, asyncio.CancelledError)
            ):
                raise CallCut from None


class CancelSignal:
    """One run's cancel state, shared by its agents through ``RunOptions.cancel``.

    >>> signal = CancelSignal()
    >>> signal.request(CancelMode.AFTER_TOOLS)
    >>> signal.stops_before_model(), signal.stops_after_model(), signal.info()
    (True, False, Cancelled(mode=<CancelMode.AFTER_TOOLS: 'after_tools'>, escalated=False))
    """

    __slots__ = (
        "_loop",
        "_sent",
        "_waiting",
        "cancelled",
        "escalated",
        "final",
        "immediate",
        "mode",
        "replied",
    )

    def __init__(self) -> None:
        #: The mode asked for; None while nobody asked to cancel.
        self.mode: CancelMode | None = None
        #: Cut everything now (``IMMEDIATE``, or a timeout escalated).
        self.immediate = False
        #: The cancel's timeout passed before a safe point: it became immediate.
        self.escalated = False
        #: A model reply arrived after the cancel was asked for (set by the agents): with
        #: ``AFTER_MODEL`` that was the safe point, and no agent starts another model call.
        self.replied = False
        #: The interrupt the run ended with (set by the Runner when it saves one), else None.
        self.final: InterruptInfo | None = None
        #: ``final`` when a cancel caused it (its data is ``Cancelled``), else None.
        self.cancelled: InterruptInfo | None = None
        # The tasks awaiting at a cut point now (how many cut points each: they may nest).
        self._waiting: dict[asyncio.Task[object], int] = {}
        # The tasks a cut was sent to (until they leave their cut point).
        self._sent: set[asyncio.Task[object]] = set()
        # The run's event loop, found by the first cut point.
        self._loop: asyncio.AbstractEventLoop | None = None

    def request(self, mode: CancelMode) -> None:
        """Ask the run to stop at ``mode``'s safe point (an immediate request wins over a
        pending one; two safe-point modes: the first one asked for stays)."""
        if self.mode is None or mode is CancelMode.IMMEDIATE:
            self.mode = mode
        if mode is CancelMode.IMMEDIATE:
            self._cut()

    def escalate(self) -> None:
        """The cancel's timeout passed: stop now (unless the run has already stopped at its
        safe point and only its last steps, after the pause was saved, are still running)."""
        if not self.immediate and self.final is None:
            self.escalated = True
            self._cut()

    def _cut(self) -> None:
        self.immediate = True
        current = asyncio.current_task()
        cut: list[asyncio.Task[object]] = []
        for task in list(self._waiting):
            # A call that cancels its own run (a tool calling ``cancel``) is not cut here.
            if task is not current and task not in self._sent:
                self._sent.add(task)
                task.cancel()
                cut.append(task)
        if cut:
            asyncio.get_running_loop().call_later(STUCK_AFTER, self._report_stuck, cut)

    def _report_stuck(self, cut: list[asyncio.Task[object]]) -> None:
        """Log the calls a cut did not stop: they caught the cancellation and carried on (an
        ``except BaseException`` around an await, say), and nothing can stop them but their
        own return -- the run, and ``cancel``, wait for it."""
        stuck = sum(1 for task in cut if task in self._sent and not task.done())
        if stuck:
            logger.warning(
                "%d model or tool call(s) cut by an immediate cancel %.0f s ago have not stopped: "
                "they caught the cancellation (CancelledError) and went on; the run pauses only "
                "once they return",
                stuck,
                STUCK_AFTER,
            )

    def awaited_by_current_task(self) -> bool:
        """True when the current task is inside a call of the run (a tool calling ``cancel``
        on its own run would wait for itself)."""
        task = asyncio.current_task()
        return task is not None and task in self._waiting

    def info(self) -> Cancelled:
        """What the points the cancel stops say (and the interrupt's data)."""
        assert self.mode is not None
        return Cancelled(self.mode, self.escalated)

    def stops_before_model(self) -> bool:
        """True when an agent must not make its next model call: an immediate or
        ``AFTER_TOOLS`` cancel, or an ``AFTER_MODEL`` one once a model reply has arrived (an
        agent that was running tools then stops before its model call, not after it)."""
        return self.immediate or self.mode is CancelMode.AFTER_TOOLS or self.replied

    def stops_after_model(self) -> bool:
        """True when an agent must not run the tools its model just asked for."""
        return self.immediate or self.mode is CancelMode.AFTER_MODEL

    def ended_with(self, info: InterruptInfo) -> None:
        """The Runner saved ``info``, the run's last interrupt (a cancel's when its data is
        ``Cancelled``: an interrupt of the run's own that reached the Runner before the cancel
        was asked for stays the run's own, and the cancel finds the run ended)."""
        self.final = info
        if self.mode is not None and isinstance(info.data, Cancelled):
            self.cancelled = info

    def cut_point(self) -> CutPoint:
        """``with signal.cut_point(): await ...``: an immediate cancel cuts that await
        (``CallCut``)."""
        return CutPoint(self)

    async def next_chunk(self, chunks: AsyncIterator[T]) -> T:
        """The next chunk of a model stream; ``StreamCancelledError`` when an immediate
        cancel cut it (the model's stream is closed)."""
        try:
            with CutPoint(self):
                return await anext(chunks)
        except CallCut:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            raise StreamCancelledError(
                "the streamed reply was cut by an immediate cancel of the run; the partial "
                "reply is not kept and the resumed run calls the model again"
            ) from None


def cancelled_event(ev: AgentEvent, cancel: CancelSignal) -> AgentEvent:
    """The interrupt event ``ev`` reaching the Runner while a cancel is pending, as the run's
    last event: its data is ``Cancelled(mode, escalated)`` (D26; the points stay as they are,
    an interrupt of the run's own among them)."""
    action = ev.action
    assert action is not None and action.interrupted is not None
    info = dataclasses.replace(action.interrupted, data=cancel.info())
    return AgentEvent(
        ev.agent_name,
        ev.run_path,
        ev.output,
        dataclasses.replace(action, interrupted=info),
        ev.error,
        ev.state_delta,
    )
