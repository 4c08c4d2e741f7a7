"""Ctrl-C in ``relaykit run``: it stops the running turn, which pauses and can be continued.

The Ctrl-C tests send a real SIGINT to the chat running in a process of its own
(``python -m relaykit.cli run tests/cli/stop_app.py``), each at a moment the chat's output or
the app's tool has announced: while a reply streams, or while a tool waits. What the app waits
for is a gate file the test creates. The tests of the prompts a pause gets drive ``Chat``
in-process, on a session whose turn the test cancelled through its ``RunHandle``.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from rich.console import Console
from typer.testing import CliRunner

import relaykit as rk
from relaykit import CancelMode, Message, ModelRequest, ToolCall
from relaykit.cli._app import app
from relaykit.cli._chat import Chat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
APP = str(HERE / "stop_app.py")

#: How long a test waits for an output it expects before it fails: a guard against a hang,
#: not a measured time.
HANG = 60.0

posix_only = pytest.mark.skipif(os.name != "posix", reason="sends SIGINT to a child process")


class ChatProcess:
    """``relaykit run`` on the stop app in a process of its own: lines are typed into its
    stdin, its stdout and stderr are collected as they come."""

    def __init__(self, db: str, gate: Path, *extra: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "STOP_APP_GATE": str(gate)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "relaykit.cli", "run", APP, "--db", db, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            env=env,
            cwd=ROOT,
        )
        self.shown = {"out": "", "err": ""}
        self._changed = threading.Condition()
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [
            threading.Thread(target=self._collect, args=("out", self.process.stdout)),
            threading.Thread(target=self._collect, args=("err", self.process.stderr)),
        ]
        for reader in self._readers:
            reader.start()

    def _collect(self, name: str, stream: IO[str]) -> None:
        while text := stream.read(1):
            with self._changed:
                self.shown[name] += text
                self._changed.notify_all()
        with self._changed:
            self.shown[name] += "\0"  # the end of the stream
            self._changed.notify_all()

    def wait_for(self, text: str, *, count: int = 1, stream: str = "out") -> None:
        """Wait until ``stream`` has shown ``text`` ``count`` times."""
        with self._changed:
            self._changed.wait_for(
                lambda: self.shown[stream].count(text) >= count or "\0" in self.shown[stream],
                timeout=HANG,
            )
            assert self.shown[stream].count(text) >= count, self.shown

    def type(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def ctrl_c(self) -> None:
        self.process.send_signal(signal.SIGINT)

    def finish(self) -> tuple[int, str, str]:
        """End the input; the exit code, the output and the error output."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=HANG)
        for reader in self._readers:
            reader.join(timeout=HANG)
        return code, self.shown["out"].rstrip("\0"), self.shown["err"].rstrip("\0")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    """The gate file of the stop app: open once it exists."""
    return tmp_path / "gate"


@pytest.fixture
def start(db: str, gate: Path) -> Iterator[Callable[[], ChatProcess]]:
    """Starts a chat process on ``db`` and ``gate``; one the test leaves running is killed."""
    started: list[ChatProcess] = []

    def chat() -> ChatProcess:
        started.append(ChatProcess(db, gate))
        return started[-1]

    yield chat
    for process in started:
        process.kill()


def stop_in_reply(chat: ChatProcess) -> None:
    """Ask a question, and press Ctrl-C while the answer streams (it waits for the gate)."""
    chat.type("what is it")
    chat.wait_for("bot: The answer ")
    chat.ctrl_c()


def stop_in_tool(chat: ChatProcess) -> None:
    """Ask ``bot`` to wait, and press Ctrl-C while its tool waits for the gate; return once
    the tool is cut (it cleans up until the gate opens: the turn is still stopping)."""
    chat.type("please wait")
    chat.wait_for("wait_for_gate: waiting", stream="err")
    chat.ctrl_c()
    chat.wait_for("wait_for_gate: cut, cleaning up", stream="err")


def lines(out: str) -> list[str]:
    return [line.rstrip() for line in out.splitlines()]


def session_of(out: str) -> str:
    return lines(out)[0].split()[2]


def show(db: str, session_id: str) -> str:
    result = CliRunner().invoke(app, ["sessions", "show", APP, session_id, "--db", db])
    assert result.exit_code == 0, result.output
    return result.stdout


STOPPED_HINT = (
    "  press Enter to continue the stopped turn, or type a new message "
    "(the stopped turn is then abandoned)"
)


@posix_only
def test_ctrl_c_while_a_reply_streams_pauses_the_turn_and_enter_continues_it(
    db: str, gate: Path, start: Callable[[], ChatProcess]
) -> None:
    chat = start()
    stop_in_reply(chat)
    chat.wait_for("you> ", count=2)  # back at the prompt
    session_id = session_of(chat.shown["out"])

    # The stopped turn is stored as the session's pause.
    stored = show(db, session_id)
    assert "⏸ stopped — the turn is paused at bot" in stored
    assert "paused: a stopped turn waits to be continued" in stored

    gate.touch()
    chat.type("")  # Enter continues it
    chat.wait_for("you> ", count=3)
    code, out, err = chat.finish()
    assert code == 0, err
    assert lines(out)[2:] == [
        "you> what is it",
        '  → bot calls lookup(topic="what is it")',
        "  ← lookup: the facts about what is it",
        "bot: The answer  ✂",
        "⏸ stopped — the turn is paused at bot",
        STOPPED_HINT,
        "you>",
        "bot: The answer is 42.",
        "you>",
        f"bye — session {session_id} is stored",
    ]
    # The finished lookup was not run again; the answer is stored once, and nothing waits.
    stored = show(db, session_id)
    assert stored.count("← lookup:") == 1
    assert stored.count("bot: The answer is 42.") == 1
    assert "paused:" not in stored


@posix_only
def test_a_new_message_abandons_the_stopped_turn(
    db: str, gate: Path, start: Callable[[], ChatProcess]
) -> None:
    chat = start()
    stop_in_tool(chat)
    gate.touch()  # the tool's cleanup ends: the turn pauses
    chat.wait_for(STOPPED_HINT)
    chat.type("what is it")
    chat.wait_for("bot: The answer is 42.")
    code, out, err = chat.finish()
    assert code == 0, err
    session_id = session_of(out)
    assert lines(out)[2:8] == [
        "you> please wait",
        "  → bot calls wait_for_gate()",
        "⏸ stopped — the turn is paused at bot, running wait_for_gate",
        STOPPED_HINT,
        "you> what is it",
        '  → bot calls lookup(topic="what is it")',
    ]
    assert "Waited" not in out
    stored = show(db, session_id)
    # The stopped call is answered as abandoned, and the new message's turn completed.
    assert "  ← wait_for_gate: error: abandoned — the user sent a new message" in stored
    assert "bot: The answer is 42." in stored
    assert "paused:" not in stored


@posix_only
def test_a_stopped_turn_is_offered_again_when_the_chat_continues_the_session(
    db: str, gate: Path, start: Callable[[], ChatProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    chat = start()
    stop_in_reply(chat)
    chat.wait_for(STOPPED_HINT)
    code, out, err = chat.finish()  # the input ends: the chat ends, the pause stays
    assert code == 0, err
    session_id = session_of(out)
    assert lines(out)[-1] == (
        f"bye — session {session_id} is stored; its stopped turn can be continued: "
        f"relaykit run {APP} --db {db} --session {session_id}"
    )

    # A new chat reads the stored pause back (its points' info decodes to Cancelled).
    gate.touch()
    monkeypatch.setenv("STOP_APP_GATE", str(gate))
    result = CliRunner().invoke(app, ["run", APP, "--db", db, "--session", session_id], input="\n")
    assert result.exit_code == 0, result.output
    assert lines(result.stdout)[1:7] == [
        "type a message; exit or Ctrl-D ends the chat",
        "⏸ stopped — the turn is paused at bot",
        STOPPED_HINT,
        "you>",
        "bot: The answer is 42.",
        "you>",
    ]
    assert show(db, session_id).count("← lookup:") == 1


@posix_only
def test_a_second_ctrl_c_while_the_turn_stops_ends_the_chat_with_130(
    db: str, start: Callable[[], ChatProcess]
) -> None:
    chat = start()
    stop_in_tool(chat)  # the turn is stopping
    chat.ctrl_c()
    code, out, err = chat.finish()
    assert code == 130, (out, err)
    assert "relaykit: interrupted" in err
    # What the turn had stored stays; the turn was ended, not paused.
    stored = show(db, session_of(out))
    assert "you: please wait" in stored
    assert "  → bot calls wait_for_gate()" in stored
    assert "paused:" not in stored


@posix_only
def test_ctrl_c_at_the_prompt_ends_the_chat_and_keeps_the_stopped_turn(
    db: str, start: Callable[[], ChatProcess]
) -> None:
    chat = start()
    stop_in_reply(chat)
    chat.wait_for("you> ", count=2)  # the prompt reads
    chat.ctrl_c()
    code, out, err = chat.finish()
    assert code == 0, err
    session_id = session_of(out)
    assert lines(out)[-1].startswith(
        f"bye — session {session_id} is stored; its stopped turn can be continued:"
    )
    assert "paused: a stopped turn waits to be continued" in show(db, session_id)


# -- the prompts of a pause, in-process ------------------------------------------------------
class Steps:
    """Where the clerk's tools are (events of the running test's loop: ``reset`` in each)."""

    def reset(self) -> None:
        self.asked = asyncio.Event()  # approve or ticket has asked
        self.holding = asyncio.Event()  # then hold waits for held
        self.held = asyncio.Event()


steps = Steps()


@rk.tool
async def hold(order_id: str) -> str:
    """Put an order on hold (once another tool has asked; then it waits until ``held``)."""
    await steps.asked.wait()
    steps.holding.set()
    await steps.held.wait()
    return f"held {order_id}"


@rk.tool
async def approve(ctx: rk.ToolContext, order_id: str) -> str:
    """Approve an order; a human decides."""
    if not ctx.is_resume_target:
        steps.asked.set()
        raise rk.ToolInterrupt({"question": f"Approve order {order_id}?"})
    return f"{order_id}: {ctx.resume_data}"


@rk.tool(long_running=True)
async def ticket(order_id: str) -> str:
    """Open a ticket about an order; its answer comes later, as the call's result."""
    steps.asked.set()
    return f"ticket {order_id}"


def clerk(calls: list[tuple[str, str]]) -> rk.ChatModelAgent:
    """An agent that calls ``calls`` (tool, order) in one batch, then reports the results."""

    def reply(request: ModelRequest) -> Message:
        results = [m.content for m in request.messages if m.role == "tool"]
        if results:
            return Message.assistant("Done: " + ", ".join(sorted(results)) + ".")
        return Message.assistant(
            "",
            [
                ToolCall(f"call_{n}", tool, json.dumps({"order_id": order}))
                for n, (tool, order) in enumerate(calls)
            ],
        )

    model = rk.ScriptedModel(iter(lambda: reply, None), record_requests=False)
    return rk.ChatModelAgent(
        "clerk", "Handles orders.", "Handle.", model=model, tools=[hold, approve, ticket]
    )


async def chat_on(
    runner: rk.Runner, service: rk.SessionService, typed: str, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """Chat in session s1 with ``typed`` as the input; the lines shown."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    out = io.StringIO()
    if await service.get_session("shop", "dev", "s1") is None:
        await service.create_session("shop", "dev", "s1")
    talk = Chat(runner, service, Console(file=out, width=200), "dev")
    await talk.loop(await talk.start("s1"))
    return lines(out.getvalue())


@pytest.mark.parametrize(
    ("asker", "asks", "answered"),
    [
        ("approve", "⏸ clerk asks: Approve order 5?", "  ← approve: 5: yes"),
        (
            "ticket",
            '⏸ clerk: ticket started "ticket 5" and waits for its result',
            "  ← ticket: yes",
        ),
    ],
)
async def test_a_stopped_turn_that_also_asks_gets_its_answer_then_continues(
    asker: str, asks: str, answered: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps.reset()
    service = rk.InMemorySessionService()
    runner = rk.Runner(
        clerk([("hold", "5"), (asker, "5")]), app_name="shop", session_service=service
    )
    handle = runner.run([Message.user("Order 5")], user_id="dev", session_id="s1")

    async def stop() -> rk.CancelOutcome:
        await steps.holding.wait()  # the other tool has asked, hold waits: the cancel cuts hold
        return await handle.cancel(CancelMode.IMMEDIATE)

    stopping = asyncio.create_task(stop())
    async for _ in handle:
        pass
    outcome = await stopping
    assert outcome.interrupt is not None and len(outcome.interrupt.contexts) == 2
    steps.held.set()

    # Enter asks the question, and the answer continues both calls (hold runs again).
    shown = await chat_on(runner, service, "\nyes\n", monkeypatch)
    assert shown[1:6] == [
        "type a message; exit or Ctrl-D ends the chat",
        "⏸ stopped — the turn is paused at clerk, running hold",
        asks,
        "  press Enter to answer what it asks and continue the stopped turn, or type a new "
        "message (the stopped turn is then abandoned)",
        "you>",
    ]
    assert shown[6] == "answer> yes"
    assert sorted(shown[7:9]) == sorted(["  ← hold: held 5", answered]), shown
    assert shown[9:] == [
        f"clerk: Done: {', '.join(sorted(['held 5', answered.split(': ', 1)[1]]))}.",
        "you>",
        "bye — session s1 is stored",
    ]


async def test_the_answer_prompt_names_the_point_when_several_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = rk.InMemorySessionService()
    runner = rk.Runner(
        clerk([("approve", "5"), ("approve", "6")]), app_name="shop", session_service=service
    )
    shown = await chat_on(runner, service, "Orders 5 and 6\nyes\nno\n", monkeypatch)
    assert shown[2:12] == [
        "you> Orders 5 and 6",
        '  → clerk calls approve(order_id="5")',
        '  → clerk calls approve(order_id="6")',
        "⏸ clerk asks: Approve order 5?",
        "⏸ clerk asks: Approve order 6?",
        "  type your answer (JSON or text) to resume; exit leaves it waiting",
        "answer (approve: Approve order 5?)> yes",
        "answer (approve: Approve order 6?)> no",
        "  ← approve: 5: yes",
        "  ← approve: 6: no",
    ]


def test_off_the_main_thread_ctrl_c_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # No signal handler can be installed there: the chat runs its turns all the same.
    service = rk.InMemorySessionService()
    runner = rk.Runner(clerk([("approve", "7")]), app_name="shop", session_service=service)
    before = signal.getsignal(signal.SIGINT)
    shown: list[list[str]] = []

    def chat() -> None:
        shown.append(asyncio.run(chat_on(runner, service, "Order 7\nyes\n", monkeypatch)))

    worker = threading.Thread(target=chat)
    worker.start()
    worker.join()
    assert "clerk: Done: 7: yes." in shown[0]
    assert signal.getsignal(signal.SIGINT) is before


@rk.tool
async def press_ctrl_c() -> str:
    """Press Ctrl-C (SIGINT to this process) while the turn runs, then wait to be cut."""
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, signal.SIG_DFL):
        return "the chat installed no Ctrl-C handler"  # the test fails on this, not on a ^C
    signal.raise_signal(signal.SIGINT)
    await asyncio.Event().wait()
    return "not cut"


async def test_ctrl_c_on_a_terminal_says_the_turn_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")  # not a "dumb" terminal
    monkeypatch.setattr(sys, "stdin", io.StringIO("stop now\n"))
    model = rk.ScriptedModel(
        [Message.assistant("", [ToolCall("call_1", "press_ctrl_c", "{}")])], record_requests=False
    )
    agent = rk.ChatModelAgent(
        "presser", "Presses Ctrl-C.", "Press.", model=model, tools=[press_ctrl_c]
    )
    service = rk.InMemorySessionService()
    runner = rk.Runner(agent, app_name="keys", session_service=service, streaming=True)
    await service.create_session("keys", "dev", "s1")
    before = signal.getsignal(signal.SIGINT)
    out = io.StringIO()
    talk = Chat(
        runner, service, Console(file=out, force_terminal=True, color_system=None, width=200), "dev"
    )
    await talk.loop(await talk.start("s1"))
    shown = out.getvalue()
    # The spinner says the turn stops, and how to end the chat; then the turn is paused.
    assert "stopping… (Ctrl-C again ends the chat)" in shown
    assert "⏸ stopped — the turn is paused at presser, running press_ctrl_c" in shown
    assert "not cut" not in shown and "no Ctrl-C handler" not in shown
    assert await service.get_checkpoint("keys", "dev", "s1") is not None
    assert signal.getsignal(signal.SIGINT) is before  # restored after the turn
