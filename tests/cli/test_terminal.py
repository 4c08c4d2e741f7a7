"""What a terminal shows during a turn: a spinner while a model or tool works, tokens as they
stream. (Typer's CliRunner is no terminal: these drive the chat with a terminal console.)"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import AsyncIterator

import pytest
from rich.console import Console

import relaykit as rk
from relaykit import Message, MessageStream, ModelRequest
from relaykit.cli._chat import Chat
from relaykit.cli._render import EventPrinter
from tests.cli import chat_app


def terminal(out: io.StringIO) -> Console:
    return Console(file=out, force_terminal=True, color_system=None, width=120)


async def test_a_spinner_says_who_works_on_what_while_the_turn_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")  # not a "dumb" terminal
    monkeypatch.setattr(sys, "stdin", io.StringIO("Where is order 7?\n"))
    service = rk.InMemorySessionService()
    runner = rk.Runner(chat_app.build(), app_name="desk", session_service=service, streaming=True)
    await service.create_session("desk", "dev", "s1")
    out = io.StringIO()
    talk = Chat(runner, service, terminal(out), "dev")
    await talk.loop(await talk.start("s1"))
    shown = out.getvalue()
    # The spinner's texts, in the order the turn went: the model, the transfer, the tool.
    said = [
        "triage is thinking…",
        "orders takes over…",
        "orders is thinking…",
        "orders runs lookup_order…",
    ]
    positions = [shown.find(text) for text in said]
    assert -1 not in positions, shown
    assert positions == sorted(positions)
    # The events themselves are printed as on any console, and the chat ends normally.
    assert "orders: Order 7 has shipped." in shown
    assert "bye — session s1 is stored" in shown


def test_no_spinner_when_the_output_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("Where is order 7?\n"))
    service = rk.InMemorySessionService()
    runner = rk.Runner(chat_app.build(), app_name="desk", session_service=service, streaming=True)
    out = io.StringIO()

    async def chat() -> None:
        talk = Chat(runner, service, Console(file=out, width=120), "dev")
        await talk.loop(await talk.start(None))

    asyncio.run(chat())
    assert "orders: Order 7 has shipped." in out.getvalue()
    assert "thinking" not in out.getvalue() and "\x1b" not in out.getvalue()


class _Gated:
    """A model whose reply streams "Hello ", then waits for ``gate``, then "world"."""

    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate

    async def generate(self, request: ModelRequest) -> Message:
        raise AssertionError("the chat streams")

    def stream(self, request: ModelRequest) -> MessageStream:
        return MessageStream(self._chunks())

    async def _chunks(self) -> AsyncIterator[Message]:
        yield Message.assistant("Hello ")
        await self.gate.wait()
        yield Message.assistant("world")


async def test_tokens_are_shown_as_they_stream() -> None:
    gate = asyncio.Event()
    runner = rk.Runner(rk.ChatModelAgent("greeter", model=_Gated(gate)), streaming=True)
    out = io.StringIO()
    printer = EventPrinter(Console(file=out, width=120))

    async def show_turn() -> None:
        async for event in runner.query("hi"):
            await printer.show(event)

    turn = asyncio.create_task(show_turn())
    for _ in range(10_000):  # until the first chunk is printed (a few loop turns)
        if "Hello" in out.getvalue():
            break
        await asyncio.sleep(0)
    # The first token is on the screen while the model is still producing the rest.
    assert out.getvalue() == "greeter: Hello "
    assert not turn.done()
    gate.set()
    await turn
    assert out.getvalue() == "greeter: Hello world\n"


class _Breaks:
    """A model whose reply streams "Hel", then fails."""

    async def generate(self, request: ModelRequest) -> Message:
        raise AssertionError("the chat streams")

    def stream(self, request: ModelRequest) -> MessageStream:
        return MessageStream(self._chunks())

    async def _chunks(self) -> AsyncIterator[Message]:
        yield Message.assistant("Hel")
        raise ValueError("the model broke off")


async def test_a_reply_that_fails_while_it_streams_shows_its_error_once() -> None:
    runner = rk.Runner(rk.ChatModelAgent("greeter", model=_Breaks()), streaming=True)
    out = io.StringIO()
    printer = EventPrinter(Console(file=out, width=120))
    async for event in runner.query("hi"):
        await printer.show(event)
    shown = out.getvalue()
    # The streamed text, then the error: once, though both the stream and the error event
    # that follows it carry it.
    assert shown.startswith("greeter: Hel\n"), shown
    assert shown.count("the model broke off") == 1, shown
