"""Cancelling a run: ``RunHandle`` (what ``Runner.run``, ``resume`` and ``query`` return),
``CancelMode``, ``Cancelled`` and ``CancelOutcome`` (docs/cancellation.md, D26).

A cancelled run is paused, not failed: it stops at the mode's safe point and ends like an
interrupt whose data is ``Cancelled(mode, escalated)``, saved as a checkpoint (or as the
session's pause) so that ``resume`` continues exactly there.

Iterating a handle costs one small call per event: until ``cancel`` or ``result`` is called,
``__anext__`` hands out the run's own generator step. From then on the handle
serialises the pulls, because ``cancel`` may have to drive the run to its safe point itself
(when the caller is not iterating, or calls ``cancel`` between two events), keeping the events
it pulled for the caller's next iterations.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from operator import attrgetter
from types import FrameType
from typing import TYPE_CHECKING

from relaykit._cancel import Cancelled, CancelMode, CancelSignal
from relaykit.errors import ConfigurationError
from relaykit.events import AgentEvent
from relaykit.results import RunResult, summarize
from relaykit.resume import InterruptInfo

__all__ = ["CancelMode", "CancelOutcome", "Cancelled", "RunHandle"]

# The buffer of a handle nobody cancelled: never written to (made per handle once it is needed).
_NO_EVENTS: deque[AgentEvent] = deque(maxlen=0)

# While the caller's own step of the run is in flight, ``cancel`` checks this often (seconds,
# doubling up to the second value) whether it ended -- only then can it drive the run.
_POLL = (0.001, 0.05)


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    """What ``RunHandle.cancel`` did.

    >>> CancelOutcome(already_ended=True)
    CancelOutcome(checkpoint_id=None, interrupt=None, already_ended=True, timed_out=False)
    """

    #: Where the cancelled run was saved (``Runner.resume(checkpoint_id)``); None in session
    #: mode (the pause is kept with the session), without a checkpoint store, or when the run
    #: had already ended.
    checkpoint_id: str | None = None
    #: The run's last interrupt: data ``Cancelled(mode, escalated)``, its contexts the points
    #: the resume continues. None when the run had already ended.
    interrupt: InterruptInfo | None = None
    #: True when the run ended (completed, failed or paused by an interrupt of its own) before
    #: the cancel could stop it: there is nothing to resume.
    already_ended: bool = False
    #: True when the safe point was not reached within ``timeout``: the cancel became
    #: ``IMMEDIATE`` (``Cancelled.escalated``).
    timed_out: bool = False


class RunHandle:
    """One run, as ``Runner.run``, ``resume`` and ``query`` return it: iterate it for the
    events (as before), ``cancel`` it, or ``await result()``.

    Nothing runs until the handle is iterated, or ``cancel`` or ``result`` is awaited.

    >>> import asyncio
    >>> import relaykit as rk
    >>> agent = rk.ChatModelAgent("greeter", model=rk.ScriptedModel([rk.Message.assistant("Hi")]))
    >>> async def main() -> None:
    ...     handle = rk.Runner(agent).query("hello")
    ...     print((await handle.result()).output.content)
    ...     print(await handle.cancel())
    >>> asyncio.run(main())
    Hi
    CancelOutcome(checkpoint_id=None, interrupt=None, already_ended=True, timed_out=False)
    """

    __slots__ = (
        "_buffer",
        "_done",
        "_error",
        "_events",
        "_failure",
        "_lock",
        "_signal",
        "_step",
    )

    def __init__(self, events: AsyncGenerator[AgentEvent, None], signal: CancelSignal) -> None:
        """A handle on ``events`` (the Runner's generator) whose agents share ``signal``."""
        self._events = events
        self._signal = signal
        # What __anext__ calls: the generator's own step until cancel() or result() is
        # called, then _next (the pulls are serialised, the kept events delivered first).
        self._step: Callable[[], Awaitable[AgentEvent]] = events.__anext__
        self._buffer: deque[AgentEvent] = _NO_EVENTS  # a deque of its own once slow
        self._lock: asyncio.Lock | None = None
        self._done = False
        # The error the run raised before any agent ran, when a cancel or result pulled it:
        # for the caller's next iteration (once), and for result() (always).
        self._error: Exception | None = None
        self._failure: Exception | None = None

    # -- iterating ------------------------------------------------------------------------
    def __aiter__(self) -> RunHandle:
        return self

    if TYPE_CHECKING:

        def __anext__(self) -> Awaitable[AgentEvent]: ...

    else:
        # The cancel check of every event (bench/core.py measures it). ``async for`` looks
        # ``__anext__`` up on the class and calls what the lookup gives: this property hands
        # out ``self._step``, so a step costs an attribute read and the call of the step
        # itself -- the generator's own ``__anext__`` until the handle is cancelled, then
        # ``_next`` -- without a Python frame of ours per event.
        __anext__ = property(attrgetter("_step"))

    async def _next(self) -> AgentEvent:
        buffer = self._buffer
        if not buffer:
            assert self._lock is not None
            async with self._lock:  # a cancel driving the run finishes its step first
                if not buffer:
                    ev = await self._pull()
                    if ev is None:
                        error, self._error = self._error, None
                        if error is not None:
                            raise error
                        raise StopAsyncIteration
                    return ev
        return buffer.popleft()

    async def _pull(self) -> AgentEvent | None:
        """One step of the run (the caller holds the lock); None at its end."""
        if self._done:
            return None
        try:
            return await self._events.__anext__()
        except StopAsyncIteration:
            self._done = True
            return None
        except BaseException:
            self._done = True
            raise

    async def aclose(self) -> None:
        """Stop the run (as closing its generator did): nothing more runs or is delivered
        (events a cancel kept are dropped), a resumed checkpoint stays for another resume.
        While a ``cancel`` takes a step of the run, ``aclose`` waits for that step."""
        if self._lock is None:
            await self._events.aclose()
            return
        async with self._lock:
            self._done = True
            self._buffer.clear()
            await self._events.aclose()

    # -- cancel and result ----------------------------------------------------------------
    def _go_slow(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
            self._buffer = deque()
        self._step = self._next
        return self._lock

    def _ended(self) -> bool:
        # An async generator's frame is gone once it has ended (or was closed).
        return self._done or getattr(self._events, "ag_frame", True) is None

    def _running(self) -> bool:
        """True while a step of the run is in flight (someone awaits its next event)."""
        return bool(getattr(self._events, "ag_running", False))

    def _inside(self) -> bool:
        """True when the caller runs inside a step of the run (a plugin hook, an agent): the
        run's frame is among the callers' frames. Waiting for the run there never ends."""
        frame = getattr(self._events, "ag_frame", None)
        if frame is None or not self._running():
            return False
        caller: FrameType | None = sys._getframe(1)
        while caller is not None:
            if caller is frame:
                return True
            caller = caller.f_back
        return False

    async def _drive(self, taken: list[AgentEvent] | None) -> None:
        """Run to the end, keeping the events for the caller's iterations (or in ``taken``).

        A step the caller started before the handle went slow is waited for; steps are then
        taken under the lock, in turn with the caller's."""
        lock = self._go_slow()
        buffer = self._buffer
        delay = _POLL[0]
        while True:
            if self._running() and not lock.locked():
                await asyncio.sleep(delay)  # the caller's own step is in flight
                delay = min(delay * 2, _POLL[1])
                continue
            async with lock:
                if taken is not None:
                    taken.extend(buffer)
                    buffer.clear()
                if self._done:
                    if taken is not None and self._failure is not None:
                        raise self._failure
                    return
                if self._running():
                    continue
                try:
                    ev = await self._pull()
                except Exception as exc:
                    # The run could not start (a busy checkpoint or session...): the caller's
                    # next iteration raises it too.
                    self._error = self._failure = exc
                    raise
                if ev is not None:
                    (taken if taken is not None else buffer).append(ev)

    async def cancel(
        self, mode: CancelMode = CancelMode.IMMEDIATE, *, timeout: float | None = None
    ) -> CancelOutcome:
        """Stop the run at ``mode``'s safe point and return once it has stopped.

        The run ends like an interrupt: its last event's ``action.interrupted`` holds
        ``Cancelled(mode, escalated)`` and the points the resume continues; it is saved as a
        checkpoint (with a checkpoint store) or as the session's pause (session mode), and
        ``resume`` continues exactly there: what finished does not run again. The events the
        run yields meanwhile are kept for the caller's next iterations. A cancel after the run
        ended says so (``already_ended``); a second cancel returns the first one's outcome.

        Args:
            mode: ``IMMEDIATE`` (cut model calls, tool calls and streams in progress),
                ``AFTER_MODEL`` (once the model call in progress has completed, before its
                tools run) or ``AFTER_TOOLS`` (once the tool batch in progress has finished).
            timeout: seconds to wait for the safe point before the cancel becomes immediate
                (``CancelOutcome.timed_out``); None waits as long as it takes.

        Raises:
            ConfigurationError: a mode that is not a ``CancelMode``, a negative timeout, or
                code of the run itself (a tool, an agent, a plugin hook) awaiting its own run's
                ``cancel``, which would wait for itself.
            Exception: the error the run raised before any agent ran (a resume whose
                checkpoint is busy, say), raised by the caller's iteration too.
        """
        if not isinstance(mode, CancelMode):
            raise ConfigurationError(
                f"cancel(mode=...) takes a relaykit.CancelMode, not {type(mode).__name__}"
            )
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or math.isnan(timeout)
            or timeout < 0
        ):
            raise ConfigurationError(
                f"cancel(timeout=...) must be None or a number of seconds >= 0, not {timeout!r}"
            )
        signal = self._signal
        if self._ended() or (signal.final is not None and signal.cancelled is None):
            return self._outcome()
        if signal.awaited_by_current_task() or self._inside():
            raise ConfigurationError(
                "cancel() was awaited inside the run it cancels (by a tool, an agent or a "
                "plugin hook), which would wait for itself; call it from outside the run, or "
                "start it in a task of its own without awaiting it (a tool can pause its run "
                "with ToolInterrupt)"
            )
        signal.request(mode)
        timer = None
        if timeout is not None and not signal.immediate:
            timer = asyncio.get_running_loop().call_later(timeout, signal.escalate)
        try:
            await self._drive(None)
        finally:
            if timer is not None:
                timer.cancel()
        return self._outcome()

    def _outcome(self) -> CancelOutcome:
        signal = self._signal
        info = signal.cancelled
        if info is None:
            return CancelOutcome(already_ended=True, timed_out=signal.escalated)
        return CancelOutcome(info.checkpoint_id, info, False, signal.escalated)

    async def result(self) -> RunResult:
        """Run to the end and return its result, as ``Runner.invoke`` does: the events not yet
        delivered by iterating the handle (all of them when it was not iterated), the output,
        and the interrupt the run ended with (a cancelled run's too: not an error).

        Raises:
            AgentRunError: the run's last agent event is an error.
            Exception: the error the run raised before any agent ran.
        """
        taken: list[AgentEvent] = []
        await self._drive(taken)
        return await summarize(taken, self._signal.final)
