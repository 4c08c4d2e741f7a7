"""``relaykit run``: a terminal chat with an app, one stored session."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import aclosing, contextmanager
from types import FrameType, TracebackType
from typing import Any

from rich.console import Console
from rich.markup import escape

from relaykit.cancel import CancelMode, CancelOutcome, RunHandle
from relaykit.errors import RelayKitError
from relaykit.messages import Message
from relaykit.resume import InterruptContext
from relaykit.runner import Runner
from relaykit.sessions.base import SessionService

from ._errors import CliError
from ._render import (
    EventPrinter,
    answer_value,
    is_cancelled,
    is_tool_pause,
    pause_lines,
    question_label,
)

__all__ = ["Chat"]

#: What ends the chat when typed alone on a line (EOF ends it too).
EXIT_WORDS = frozenset({"exit", "quit", ":q"})


class _EndOfInput(Exception):
    """The user typed ``exit`` or closed the input."""


@contextmanager
def _interruptible() -> Iterator[None]:
    """Let Ctrl-C interrupt a blocking read at once. (asyncio's own handler only cancels the
    main task, which a read that blocks the event loop never notices: Ctrl-C would seem to do
    nothing until Enter.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


#: How Ctrl-C stops a turn. Immediate, because a user pressing Ctrl-C wants the turn to stop
#: now: a safe-point mode (``AFTER_MODEL``) would let the reply being streamed -- the very thing
#: the user may want to stop -- run on, and a timeout only delays every stop by that much. The
#: cost is that the calls the cut stopped (a model call, a tool call in progress) run again
#: when the turn is continued; what had finished is kept.
CTRL_C_MODE = CancelMode.IMMEDIATE


class _CtrlCStops:
    """While a turn runs (``async with``): the first Ctrl-C cancels it, so that it pauses
    where it is, and a second one does what Ctrl-C did before (asyncio's handler: the chat
    ends with exit code 130).

    Installed with ``loop.add_signal_handler`` on the main thread; where the loop cannot take
    signal handlers (Windows) a plain ``signal.signal`` handler hands Ctrl-C to the loop; off
    the main thread, or when SIGINT is ignored, nothing is installed and Ctrl-C does what it
    did before. The previous handler is restored on the way out.
    """

    def __init__(self, handle: RunHandle, pressed: Callable[[], None]) -> None:
        self.handle = handle
        #: Called on the first Ctrl-C (the chat says it is stopping).
        self.pressed = pressed
        #: The cancel the first Ctrl-C started.
        self.cancel: asyncio.Task[CancelOutcome] | None = None
        self._previous: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._by_loop = False

    async def __aenter__(self) -> _CtrlCStops:
        if threading.current_thread() is not threading.main_thread():
            return self
        previous = signal.getsignal(signal.SIGINT)
        if previous is None or previous == signal.SIG_IGN:  # set from C, or ignored: leave it
            return self
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, self._ctrl_c)
            self._by_loop = True
        except (NotImplementedError, RuntimeError):  # an event loop without signal handlers

            def handler(signum: int, frame: FrameType | None) -> None:
                loop.call_soon_threadsafe(self._ctrl_c)

            signal.signal(signal.SIGINT, handler)
        self._previous, self._loop = previous, loop
        return self

    def _ctrl_c(self) -> None:
        if self.cancel is None:
            self.cancel = asyncio.ensure_future(self.handle.cancel(CTRL_C_MODE))
            self.pressed()
            return
        # Pressed again while the turn stops: end the chat as Ctrl-C did before.
        previous = self._previous
        self._restore()
        if callable(previous):
            previous(signal.SIGINT, None)
        else:
            raise KeyboardInterrupt

    def _restore(self) -> None:
        if self._loop is None:
            return
        if self._by_loop:
            self._loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, self._previous)
        self._loop = None

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._restore()
        cancel = self.cancel
        if cancel is None:
            return
        if error is not None:  # the turn failed or the chat ends: the cancel goes too
            cancel.cancel()
        await asyncio.wait([cancel])
        if not cancel.cancelled():
            # A run that failed before it started fails its cancel the same way, and its
            # iteration has already said so.
            cancel.exception()


class Chat:
    """A chat over one session of ``runner``: read a line, run a turn, show its events; an
    interrupt asks its question, and the answer continues the paused invocation.

    Ctrl-C while a turn runs stops it (``RunHandle.cancel``): the turn pauses where it is, and
    the next prompt offers to continue it (Enter) or to leave it for a new message. A second
    Ctrl-C while it stops, or Ctrl-C at a prompt, ends the chat."""

    def __init__(
        self,
        runner: Runner,
        service: SessionService,
        console: Console,
        user_id: str,
        command: str = "relaykit run APP",
    ) -> None:
        self.runner = runner
        self.service = service
        self.console = console
        self.user_id = user_id
        #: The command line that chats again (``--session ID`` is added), for the last line.
        self.command = command
        self.printer = EventPrinter(console)
        # Echo what was read when the input is not a terminal, so the transcript reads whole.
        self.echo = not sys.stdin.isatty()

    def _read(self, prompt: str) -> str:
        try:
            with _interruptible():
                text = self.console.input(prompt)
        except (EOFError, KeyboardInterrupt):  # Ctrl-D, Ctrl-C: the chat ends, nothing is lost
            self.console.print()
            raise _EndOfInput from None
        if self.echo:
            self.console.print(escape(text), highlight=False)
        if text.strip().lower() in EXIT_WORDS:
            raise _EndOfInput
        return text

    async def start(self, session_id: str | None) -> str:
        """The session to talk in: ``session_id`` if stored (else ``CliError``), or a new one."""
        app = self.runner.app_name
        if session_id is None:
            session_id = uuid.uuid4().hex[:12]
            await self.service.create_session(app, self.user_id, session_id)
            self.console.print(
                f"[dim]new session[/] [bold]{session_id}[/] [dim](user {escape(self.user_id)}, "
                f"app {escape(app)}; continue it with --session {session_id})[/]",
                highlight=False,
                soft_wrap=True,
            )
            return session_id
        session = await self.service.get_session(app, self.user_id, session_id)
        if session is None:
            raise CliError(
                f"no session {session_id!r} of user {self.user_id!r} in app {app!r} "
                "(relaykit sessions list shows them; leave out --session to start a new one)"
            )
        self.console.print(
            f"[dim]session[/] [bold]{escape(session_id)}[/] [dim]continues "
            f"({len(session.events)} stored events)[/]",
            highlight=False,
            soft_wrap=True,
        )
        return session_id

    async def waiting_points(self, session_id: str) -> tuple[str, list[InterruptContext]]:
        """The stored pause of the session, as (author, its waiting points); none: ("", []).

        The points a cancel stopped (Ctrl-C) are among them, their ``info`` a ``Cancelled``
        (``is_cancelled``): they ask nothing, and the chat offers to continue them."""
        app = self.runner.app_name
        if await self.service.get_checkpoint(app, self.user_id, session_id) is None:
            return "", []
        session = await self.service.get_session(app, self.user_id, session_id)
        for event in reversed(session.events if session is not None else []):
            if event.action is not None and event.action.interrupted is not None:
                return event.author, list(event.action.interrupted.contexts)
        return "", []

    async def loop(self, session_id: str) -> None:
        """Chat until the input ends or the user types ``exit``."""
        author, pending = await self.waiting_points(session_id)
        self.console.print("[dim]type a message; exit or Ctrl-D ends the chat[/]")
        for line in pause_lines(author, pending):
            self.printer.line(line)
        if pending:
            self._answer_hint(pending)
        try:
            while True:
                try:
                    events = self._next_turn(session_id, pending)
                    if events is None:
                        continue
                except RelayKitError as exc:  # a message the Runner refuses: say so, go on
                    self.printer.line(f"[red]✗ {escape(type(exc).__name__)}: {escape(str(exc))}[/]")
                    continue
                pending = await self._show(events)
                if pending:
                    self._answer_hint(pending)
        except _EndOfInput:
            pass
        again = f"{self.command} --session {session_id}"
        if any(is_cancelled(point) for point in pending):
            left = f"; its stopped turn can be continued: {escape(again)}"
        elif pending:
            left = f"; its pause waits for an answer: {escape(again)}"
        else:
            left = ""
        self.console.print(
            f"[dim]bye — session {escape(session_id)} is stored{left}[/]",
            highlight=False,
            soft_wrap=True,
        )

    def _next_turn(self, session_id: str, pending: list[InterruptContext]) -> RunHandle | None:
        """Read what the user wants next; the turn that does it (None: nothing to do).

        A stopped turn (Ctrl-C) is continued by an empty line -- after the answers its other
        waiting points need -- and abandoned by a new message; a pause that only asks
        questions takes their answers."""
        stopped = any(is_cancelled(point) for point in pending)
        if pending and not stopped:
            return self._answer(session_id, pending)
        text = self._read("[bold green]you>[/] ")
        if text.strip():
            # A new message; it abandons a stopped turn (its pending calls are answered
            # as abandoned).
            return self.runner.run(
                [Message.user(text)], user_id=self.user_id, session_id=session_id
            )
        if stopped:
            return self._answer(session_id, pending)
        return None

    def _answer_hint(self, points: list[InterruptContext]) -> None:
        """Say what the next prompt expects."""
        questions = [point for point in points if not is_cancelled(point)]
        if len(questions) < len(points):
            first = "answer what it asks and " if questions else ""
            self.console.print(
                f"[dim]  press Enter to {first}continue the stopped turn, or type a new message "
                "(the stopped turn is then abandoned)[/]",
                highlight=False,
                soft_wrap=True,
            )
            return
        if all(is_tool_pause(point) for point in points):
            tools = ", ".join(str(point.info["tool"]) for point in points)
            what = f"the result of {tools}"
        else:
            what = "your answer (JSON or text)"
        self.console.print(
            f"[dim]  type {escape(what)} to resume; exit leaves it waiting[/]", highlight=False
        )

    def _read_answer(self, label: str | None) -> str:
        """One answer, its prompt naming the point it is for (``label``) when several wait.
        An empty line (an Enter pressed by mistake) is no answer, and is asked again rather
        than sent as an empty result."""
        prompt = "[bold yellow]answer>[/] "
        if label is not None:
            prompt = f"[bold yellow]answer[/] [dim]({escape(label)})[/][bold yellow]>[/] "
        while True:
            text = self._read(prompt)
            if text.strip():
                return text

    def _answer(self, session_id: str, points: list[InterruptContext]) -> RunHandle:
        """Ask each waiting point for its answer; the turn that continues the invocation.

        The points a cancel stopped take no answer: they continue with the others (a resume
        continues every stopped point, with or without targets), or alone, by a resume
        without targets."""
        questions = [point for point in points if not is_cancelled(point)]
        several = len(questions) > 1
        answers = [self._read_answer(question_label(p) if several else None) for p in questions]
        if not questions:
            return self.runner.resume(user_id=self.user_id, session_id=session_id)
        if all(is_tool_pause(point) for point in questions):
            responses = [
                Message.tool(answer, tool_call_id=point.info["tool_call_id"])
                for point, answer in zip(questions, answers, strict=True)
            ]
            return self.runner.run(responses, user_id=self.user_id, session_id=session_id)
        targets = {
            point.id: answer_value(answer) for point, answer in zip(questions, answers, strict=True)
        }
        return self.runner.resume(user_id=self.user_id, session_id=session_id, targets=targets)

    def _stopping(self) -> None:
        """Ctrl-C was pressed during the turn: say so while it stops (on the spinner, which
        does not take the place of a reply's text while it streams)."""
        if not self.printer.streaming:
            self.printer.working.show("stopping… (Ctrl-C again ends the chat)")

    async def _show(self, events: RunHandle) -> list[InterruptContext]:
        """Print a turn's events; the points its last interrupt waits on. Ctrl-C meanwhile
        stops the turn (it pauses, and its pause's points are returned)."""
        pending: list[InterruptContext] = []
        self.printer.working.show("thinking…")
        try:
            async with aclosing(events), _CtrlCStops(events, self._stopping):
                async for event in events:
                    points = await self.printer.show(event)
                    if points:
                        pending = points
        except RelayKitError as exc:  # raised before the turn started: nothing was stored
            self.printer.working.hide()
            self.printer.line(f"[red]✗ {escape(type(exc).__name__)}: {escape(str(exc))}[/]")
            return []
        finally:
            self.printer.working.hide()
        return pending
