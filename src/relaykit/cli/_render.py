"""Events, stored events and interrupts as readable terminal lines (Rich markup)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.text import Text

from relaykit.cancel import Cancelled
from relaykit.errors import StreamCancelledError, WillRetryError
from relaykit.events import AgentEvent
from relaykit.messages import Message, ToolCall
from relaykit.resume import InterruptContext
from relaykit.sessions.base import SessionEvent

__all__ = [
    "EventPrinter",
    "Working",
    "call_text",
    "clip",
    "interrupt_line",
    "is_cancelled",
    "is_tool_pause",
    "message_lines",
    "pause_lines",
    "question_label",
    "stopped_line",
]

TRANSFER = "transfer_to_agent"


def clip(text: str, width: int = 200) -> str:
    """``text`` on one line, cut to ``width`` characters.

    >>> clip("a\\nb"), clip("abcdef", 4)
    ('a ⏎ b', 'abc…')
    """
    text = text.replace("\n", " ⏎ ")
    return text if len(text) <= width else text[: width - 1] + "…"


def call_text(call: ToolCall) -> str:
    """A tool call as ``name(key=value, ...)``.

    >>> call_text(ToolCall("c1", "lookup", '{"order": "7"}'))
    'lookup(order="7")'
    """
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return f"{call.name}({call.arguments})"
    if not isinstance(arguments, dict):
        return f"{call.name}({call.arguments})"
    inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return f"{call.name}({inner})"


def _transfer_target(call: ToolCall) -> str:
    try:
        target = json.loads(call.arguments or "{}").get("agent_name")
    except (ValueError, AttributeError):
        return "?"
    return str(target)


def _who(author: str) -> str:
    return "[bold green]you[/]" if author == "user" else f"[bold cyan]{escape(author)}[/]"


def message_lines(author: str, message: Message, *, text: bool = True) -> list[str]:
    """The lines of one message: its text, its tool calls and transfers, a tool result.

    >>> message_lines("orders", Message.assistant("Hi", [ToolCall("c", "lookup", "{}")]))
    ['[bold cyan]orders[/]: Hi', '  [yellow]→ orders calls[/] lookup()']
    """
    who = _who(author)
    if message.role == "tool" and author == "user":  # the answer to a paused call
        answered = escape(message.tool_call_id or "?")
        return [f"  {who} [dim]answer call {answered}[/]: {escape(clip(message.content))}"]
    if message.role == "tool":
        if message.tool_name == TRANSFER:
            return []  # the call's line already says where the conversation goes
        name = escape(message.tool_name or "tool")
        return [f"  [magenta]← {name}[/]: {escape(clip(message.content))}"]
    lines = [f"{who}: {escape(message.content)}"] if text and message.content else []
    for call in message.tool_calls:
        if call.name == TRANSFER:
            target = escape(_transfer_target(call))
            lines.append(f"  [blue]⇢ {escape(author)} transfers to[/] [bold cyan]{target}[/]")
        else:
            lines.append(f"  [yellow]→ {escape(author)} calls[/] {escape(clip(call_text(call)))}")
    return lines


def is_tool_pause(point: InterruptContext) -> bool:
    """True for the pause of a long-running tool (answered by a tool response)."""
    info = point.info
    return isinstance(info, dict) and "tool_call_id" in info and "tool" in info


def is_cancelled(point: InterruptContext) -> bool:
    """True for a point where a cancel stopped the run (Ctrl-C): it asks nothing, a resume
    without an answer continues it."""
    return isinstance(point.info, Cancelled)


def _stopped_at(point: InterruptContext) -> str:
    """Where a cancel stopped: the agent, and the tool call it was running."""
    agents = [segment.id for segment in point.address if segment.kind == "agent"]
    where = agents[-1] if agents else "the run"
    last = point.address[-1] if point.address else None
    if last is not None and last.kind == "tool":
        where += f", running {last.id}"
    return where


def stopped_line(points: list[InterruptContext]) -> str:
    """One line for the points a cancel stopped.

    >>> from relaykit.cancel import CancelMode
    >>> from relaykit.resume import AddressSegment
    >>> stopped = Cancelled(CancelMode.IMMEDIATE)
    >>> at = (AddressSegment("agent", "orders"), AddressSegment("tool", "lookup", "c1"))
    >>> stopped_line([InterruptContext("p1", at, stopped, True)])
    '[bold yellow]⏸ stopped[/] — the turn is paused at orders, running lookup'
    """
    where = "; ".join(dict.fromkeys(_stopped_at(point) for point in points))
    return f"[bold yellow]⏸ stopped[/] — the turn is paused at {escape(where)}"


def interrupt_line(author: str, point: InterruptContext) -> str:
    """What a waiting point asks, as one line."""
    info = point.info
    if is_cancelled(point):
        return stopped_line([point])
    if is_tool_pause(point):
        started = json.dumps(info.get("started"), ensure_ascii=False, default=str)
        return (
            f"[bold yellow]⏸ {escape(author)}[/]: {escape(str(info['tool']))} started "
            f"{escape(clip(started))} and waits for its result"
        )
    text = _question(point)
    return f"[bold yellow]⏸ {escape(author)} asks[/]: {escape(clip(text))}"


def _question(point: InterruptContext) -> str:
    """The text of what a point asks (the one value of a one-key dict, else the info)."""
    info = point.info
    if isinstance(info, dict) and len(info) == 1:
        (shown,) = info.values()
    else:
        shown = info
    return shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False, default=str)


def pause_lines(author: str, points: list[InterruptContext]) -> list[str]:
    """The lines of a pause: one for the points a cancel stopped, then each question."""
    stopped = [point for point in points if is_cancelled(point)]
    lines = [stopped_line(stopped)] if stopped else []
    return lines + [interrupt_line(author, p) for p in points if not is_cancelled(p)]


def question_label(point: InterruptContext) -> str:
    """Which point an answer is for, when several wait: the paused call of a long-running
    tool, a tool's question after the tool's name, or the agent's question.

    >>> from relaykit.resume import AddressSegment
    >>> at = (AddressSegment("agent", "refunds"), AddressSegment("tool", "issue_refund", "c1"))
    >>> question_label(InterruptContext("p1", at, {"question": "Refund order 9?"}, True))
    'issue_refund: Refund order 9?'
    >>> asks = InterruptContext("p2", (AddressSegment("agent", "payer"),), "Pay 10 EUR?", True)
    >>> question_label(asks)
    'Pay 10 EUR?'
    """
    info = point.info
    if is_tool_pause(point):
        arguments = json.dumps(info.get("arguments") or {}, ensure_ascii=False, default=str)
        return clip(call_text(ToolCall("", str(info["tool"]), arguments)), 60)
    last = point.address[-1] if point.address else None
    tool = f"{last.id}: " if last is not None and last.kind == "tool" else ""
    return clip(tool + _question(point), 60)


def stored_lines(event: SessionEvent) -> list[str]:
    """The lines of a stored event (``sessions show``)."""
    if event.error is not None:
        return [f"[red]✗ {escape(event.author)}: {escape(clip(event.error))}[/]"]
    action = event.action
    if action is not None and action.interrupted is not None:
        return pause_lines(event.author, list(action.interrupted.contexts))
    if event.message is None:
        return []
    return message_lines(event.author, event.message)


def waiting_text(author: str, message: Message | None) -> str | None:
    """What the spinner says after ``author``'s ``message``: who works on what next (None:
    what it said still holds).

    >>> waiting_text("orders", Message.assistant("", [ToolCall("c", "lookup", "{}")]))
    'orders runs lookup…'
    >>> waiting_text("orders", Message.tool("{}", tool_call_id="c", tool_name="lookup"))
    'orders is thinking…'
    """
    if message is None:
        return "working…"
    if message.role == "tool":
        return None if message.tool_name == TRANSFER else f"{author} is thinking…"
    transfers = [_transfer_target(c) for c in message.tool_calls if c.name == TRANSFER]
    if transfers:
        return f"{transfers[-1]} takes over…"
    if message.tool_calls:
        return f"{author} runs {', '.join(c.name for c in message.tool_calls)}…"
    return "working…"


class Working:
    """A spinner line while a model or a tool works: on a terminal only, and transient (it
    leaves nothing behind). Lines printed meanwhile appear above it."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live: Live | None = None

    def show(self, text: str) -> None:
        """Spin with ``text`` (started, or its text changed)."""
        if not self.console.is_terminal:
            return
        spinner = Spinner("dots", Text(text, style="dim"), style="cyan")
        if self._live is None:
            self._live = Live(
                spinner, console=self.console, transient=True, refresh_per_second=12.5
            )
            self._live.start(refresh=True)
        else:
            self._live.update(spinner, refresh=True)

    def hide(self) -> None:
        """Stop spinning (before a prompt, or while text streams)."""
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()


class EventPrinter:
    """Prints a run's events as they arrive; streamed replies token by token, and a spinner
    while the next event is on its way."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.working = Working(console)
        #: The error a streamed reply just failed with (already printed): the error event
        #: that follows it carries the same error and is not printed again.
        self._stream_error: tuple[str, BaseException] | None = None
        #: True while a streamed reply's text is being printed (its line is not ended yet).
        self.streaming = False

    def line(self, markup: str, internal: bool = False) -> None:
        """One line (indented for an agent tool's inner event)."""
        self.console.print(("  ┆ " if internal else "") + markup, soft_wrap=True, highlight=False)

    async def show(self, event: AgentEvent) -> list[InterruptContext]:
        """Print ``event``; return the points it waits on (an interrupt event), else []."""
        internal = event.internal
        streamed, self._stream_error = self._stream_error, None
        if event.error is not None:
            if streamed is not None and _same_error(streamed, event.agent_name, event.error):
                self.working.show("working…")
                return []
            self.line(f"[red]✗ {escape(event.agent_name)}: {escape(clip(str(event.error)))}[/]")
            self.working.show("working…")
            return []
        action = event.action
        if action is not None and action.interrupted is not None and action.interrupted.contexts:
            if internal:
                return []
            self.working.hide()
            points = list(action.interrupted.contexts)
            for line in pause_lines(event.agent_name, points):
                self.line(line)
            return points
        output = event.output
        if output is None:
            return []
        message = output.message
        if output.stream is not None:
            message = await self._stream(event, internal)
            if message is not None:
                for line in message_lines(event.agent_name, message, text=False):
                    self.line(line, internal)
        elif message is not None:
            for line in message_lines(event.agent_name, message):
                self.line(line, internal)
        elif output.custom is not None:
            shown = clip(json.dumps(output.custom, ensure_ascii=False, default=str))
            self.line(f"{_who(event.agent_name)}: {escape(shown)}", internal)
        waiting = waiting_text(event.agent_name, message)
        if waiting is not None:
            self.working.show(waiting)
        return []

    async def _stream(self, event: AgentEvent, internal: bool) -> Message | None:
        """Print a streamed reply's text as it comes; the whole message, or None if it failed."""
        assert event.output is not None and event.output.stream is not None
        prefix = ("  ┆ " if internal else "") + _who(event.agent_name) + ": "
        started = False
        self.working.show(f"{event.agent_name} is thinking…")
        try:
            async for chunk in event.output.stream:
                if chunk.content:
                    if not started:
                        self.working.hide()  # the text takes the spinner's place
                        self.console.print(prefix, end="", highlight=False)
                        started = self.streaming = True
                    self.console.print(escape(chunk.content), end="", highlight=False)
                    self.console.file.flush()
        except WillRetryError:
            self.console.print(("" if not started else "\n") + "  [dim](retrying…)[/]")
            return None
        except StreamCancelledError:  # Ctrl-C cut it: the pause's line follows
            if started:
                self.console.print(" [dim]✂[/]")
            return None
        except Exception as exc:
            if started:
                self.console.print()
            self.line(f"[red]✗ {escape(event.agent_name)}: {escape(clip(str(exc)))}[/]")
            self._stream_error = (event.agent_name, exc)
            return None
        finally:
            self.streaming = False
        if started:
            self.console.print()
        return await event.output.stream.collect()


def _same_error(shown: tuple[str, BaseException], agent: str, error: BaseException) -> bool:
    """Whether an error event's error is the one a streamed reply of ``agent`` failed with."""
    who, exc = shown
    if error is exc:
        return True
    return who == agent and type(error) is type(exc) and str(error) == str(exc)


def answer_value(text: str) -> Any:
    """What a typed answer resumes a core interrupt with: JSON when it parses, else the text.

    >>> answer_value('{"approved": true}'), answer_value("yes")
    ({'approved': True}, 'yes')
    """
    try:
        return json.loads(text)
    except ValueError:
        return text
