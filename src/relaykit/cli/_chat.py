"""``relaykit run``: a terminal chat with an app, one stored session."""

from __future__ import annotations

import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import aclosing, contextmanager

from rich.console import Console
from rich.markup import escape

from relaykit.cancel import RunHandle
from relaykit.errors import RelayKitError
from relaykit.messages import Message
from relaykit.resume import InterruptContext
from relaykit.runner import Runner
from relaykit.sessions.base import SessionService

from ._errors import CliError
from ._render import EventPrinter, answer_value, interrupt_line, is_tool_pause

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


class Chat:
    """A chat over one session of ``runner``: read a line, run a turn, show its events; an
    interrupt asks its question, and the answer continues the paused invocation."""

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
        """The stored pause of the session, as (author, its waiting points); none: ("", [])."""
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
        for point in pending:
            self.printer.line(interrupt_line(author, point))
        if pending:
            self._answer_hint(pending)
        try:
            while True:
                try:
                    if pending:
                        events = self._answer(session_id, pending)
                    else:
                        text = self._read("[bold green]you>[/] ")
                        if not text.strip():
                            continue
                        events = self.runner.run(
                            [Message.user(text)], user_id=self.user_id, session_id=session_id
                        )
                except RelayKitError as exc:  # a message the Runner refuses: say so, go on
                    self.printer.line(f"[red]✗ {escape(type(exc).__name__)}: {escape(str(exc))}[/]")
                    continue
                pending = await self._show(events)
                if pending:
                    self._answer_hint(pending)
        except _EndOfInput:
            pass
        again = f"{self.command} --session {session_id}"
        self.console.print(
            f"[dim]bye — session {escape(session_id)} is stored"
            + (f"; its pause waits for an answer: {escape(again)}[/]" if pending else "[/]"),
            highlight=False,
            soft_wrap=True,
        )

    def _answer_hint(self, points: list[InterruptContext]) -> None:
        """Say what the answer prompt expects."""
        if all(is_tool_pause(point) for point in points):
            tools = ", ".join(str(point.info["tool"]) for point in points)
            what = f"the result of {tools}"
        else:
            what = "your answer (JSON or text)"
        self.console.print(
            f"[dim]  type {escape(what)} to resume; exit leaves it waiting[/]", highlight=False
        )

    def _read_answer(self) -> str:
        """One answer: an empty line (an Enter pressed by mistake) is no answer, and is asked
        again rather than sent as an empty result."""
        while True:
            text = self._read("[bold yellow]answer>[/] ")
            if text.strip():
                return text

    def _answer(self, session_id: str, points: list[InterruptContext]) -> RunHandle:
        """Ask each waiting point for its answer; the turn that continues the invocation."""
        answers = [self._read_answer() for _ in points]
        if all(is_tool_pause(point) for point in points):
            responses = [
                Message.tool(answer, tool_call_id=point.info["tool_call_id"])
                for point, answer in zip(points, answers, strict=True)
            ]
            return self.runner.run(responses, user_id=self.user_id, session_id=session_id)
        targets = {
            point.id: answer_value(answer) for point, answer in zip(points, answers, strict=True)
        }
        return self.runner.resume(user_id=self.user_id, session_id=session_id, targets=targets)

    async def _show(self, events: RunHandle) -> list[InterruptContext]:
        """Print a turn's events; the points its last interrupt waits on."""
        pending: list[InterruptContext] = []
        self.printer.working.show("thinking…")
        try:
            async with aclosing(events):
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
