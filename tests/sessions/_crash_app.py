"""A session-mode app that test_two_processes, test_crash and bench/crash.py run in processes of
its own (and kill), with the harness that starts it and checks the sessions it leaves.

``python -m tests.sessions._crash_app URL SESSION COMMAND [ARG] [--seed N] [--sleep S]
[--gap S] [--lock-timeout T] [--signals DIR] [--name NAME] [--hold-at WHERE]
[--die-after PREFIX]``

The harness (``start``, ``run_app``, ``Checker``, ``crash_trial``, below ``main``) forks each
app process from a server that imported this module once (``python -m
tests.sessions._crash_app --serve``): the same app and command line, without paying the import
of relaykit, SQLAlchemy and the drivers at every start.

The app: ``desk`` (root) transfers every question to ``billing``; ``billing`` looks the order up
(``lookup``, a tool that writes the session value ``last_lookup``), then either answers, or —
for a ``refund`` question — starts ``refund``, a long-running tool: the invocation pauses until
the user sends the tool's result. Every message the models, the tools and the user produce
carries a fresh 32-hex token, so each stored event can be matched to the line the app printed
when it was delivered. The models and tools sleep up to ``--sleep`` seconds (random, seeded).

Commands:

- ``turn KIND``: one turn, the user asking ``KIND <token>`` (KIND: ``ask`` or ``refund``).
- ``answer``: answer the paused ``refund`` call (``Message.tool("refunded <token>", ...)``),
  again if it was answered already (see ``pending_refund``).
- ``continue [retry]``: ``answer`` when the session is paused, else ``turn ask`` — also when
  the invocation's events after the answer were stored already, unless ``retry``.
- ``turns N``: N ``ask`` turns (after ``DIR/go`` exists, with ``--signals``), up to ``--gap``
  seconds apart.
- ``crash``: turns forever (``ask`` or ``refund``, then the answer): the harness kills it.
- ``hold KIND``: one turn like ``turn KIND``, whose first model call (``--hold-at model``) or
  first ``lookup`` call (``--hold-at lookup``) writes ``DIR/held`` and waits for
  ``DIR/release``.

``--die-after PREFIX``: the process kills itself (SIGKILL) right after it delivered an event
whose content starts with PREFIX.

The models also report each tool call of their request that no tool message answers
(``{"kind": "dangling", ...}``: a call a crash left unanswered), or more than one does
(``{"kind": "repeated", ...}``).

Output, one JSON object per line (with ``t``, the time), flushed: ``{"kind": "ready"}`` once
connected; ``{"kind": "turn", "token": ...}`` before each turn (``call``: the call a tool
response answers); ``{"kind": "event", ...}`` for each event delivered (author, role, content,
tool call ids, tool_call_id, error, interrupt); ``{"kind": "busy"}`` on ``SessionBusyError``;
``{"kind": "stale_pause", ...}`` (see ``pending_refund``); ``{"kind": "end", "turns": n}`` at
the end.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import collections
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import relaykit as rk
from relaykit import Message, ToolCall
from relaykit.errors import SessionBusyError
from relaykit.sessions import SessionEvent
from relaykit.sessions.database import DatabaseSessionService

APP, USER = "desk", "u1"
#: A user question: ``ask <token>`` or ``refund <token>``.
QUESTION = re.compile(r"^(ask|refund) [0-9a-f]{32}$")


def token() -> str:
    return uuid.uuid4().hex


def emit(**line: Any) -> None:
    line["t"] = time.time()
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


class App:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.signals = Path(args.signals) if args.signals else None
        self.hold_at: str | None = None

    def nap(self) -> None:
        """A model call's latency (blocking, as a slow client library would be)."""
        if self.args.sleep:
            time.sleep(self.rng.uniform(0, self.args.sleep))

    def _hold(self, where: str) -> None:
        if self.hold_at != where or self.signals is None:
            return
        self.hold_at = None
        (self.signals / "held").touch()
        deadline = time.monotonic() + 60
        while not (self.signals / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    # -- the models -------------------------------------------------------------------------
    def _dangling(self, agent: str, request: rk.ModelRequest) -> None:
        answered = collections.Counter(m.tool_call_id for m in request.messages if m.role == "tool")
        for m in request.messages:
            for call in m.tool_calls:
                if call.id not in answered:
                    emit(kind="dangling", agent=agent, call=call.id, name=call.name)
                elif answered[call.id] > 1:
                    emit(kind="repeated", agent=agent, call=call.id, name=call.name)

    def desk_reply(self, request: rk.ModelRequest) -> Message:
        self._hold("model")
        self._dangling("desk", request)
        self.nap()
        last = request.messages[-1]
        if last.role == "tool":  # the transfer's result: desk's turn is over
            return Message.assistant(f"handed over {token()}")
        call = ToolCall(f"t-{token()}", "transfer_to_agent", '{"agent_name": "billing"}')
        return Message.assistant("", [call])

    def billing_reply(self, request: rk.ModelRequest) -> Message:
        self._hold("model")
        self._dangling("billing", request)
        self.nap()
        last = request.messages[-1]
        # How many questions of the user the model sees: the history of earlier turns,
        # including other processes' turns, must be complete.
        seen = sum(
            1 for m in request.messages if m.role == "user" and QUESTION.match(m.content or "")
        )
        if last.role == "tool" and last.tool_name == "lookup":
            question = next(
                m.content
                for m in reversed(request.messages)
                if m.role == "user" and QUESTION.match(m.content or "")
            )
            if question.startswith("refund"):
                call = ToolCall(f"r-{token()}", "refund", json.dumps({"order": question[7:]}))
                return Message.assistant("", [call])
            return Message.assistant(f"answer {token()} seen={seen}")
        if last.role == "tool" and last.tool_name == "refund":
            return Message.assistant(f"done {token()} seen={seen}")
        call = ToolCall(f"l-{token()}", "lookup", '{"order": "o1"}')
        return Message.assistant("", [call])

    def runner(self, service: DatabaseSessionService) -> rk.Runner:
        app = self

        @rk.tool
        async def lookup(ctx: rk.ToolContext, order: str) -> str:
            """Look an order up."""
            app._hold("lookup")
            if app.args.sleep:
                await asyncio.sleep(app.rng.uniform(0, app.args.sleep))
            found = f"found {token()}"
            ctx.run_context.set_session_value("last_lookup", found)
            return found

        @rk.tool(long_running=True)
        async def refund(order: str) -> str:
            """Start a refund; a human confirms it later."""
            if app.args.sleep:
                await asyncio.sleep(app.rng.uniform(0, app.args.sleep))
            return f"started {token()}"

        def forever(reply: Any) -> Iterator[Any]:
            while True:
                yield reply

        desk = rk.ChatModelAgent(
            "desk", "front desk", "Route.", rk.ScriptedModel(forever(self.desk_reply))
        )
        billing = rk.ChatModelAgent(
            "billing",
            "orders and refunds",
            "Help.",
            rk.ScriptedModel(forever(self.billing_reply), record_requests=False),
            tools=[lookup, refund],
        )
        return rk.Runner(
            rk.set_sub_agents(desk, [billing]),
            app_name=APP,
            session_service=service,
            session_lock_timeout=self.args.lock_timeout,
        )


def describe(ev: rk.AgentEvent) -> dict[str, Any]:
    message = ev.output.message if ev.output is not None else None
    return {
        "kind": "event",
        "author": ev.agent_name,
        "role": message.role if message is not None else None,
        "content": message.content if message is not None else None,
        "calls": [c.id for c in message.tool_calls] if message is not None else [],
        "call_id": message.tool_call_id if message is not None else None,
        "error": str(ev.error) if ev.error is not None else None,
        "interrupt": ev.action is not None and ev.action.interrupted is not None,
    }


async def deliver(events: Any, die_after: str | None = None) -> None:
    async for ev in events:
        line = describe(ev)
        emit(**line)
        if die_after is not None and (line["content"] or "").startswith(die_after):
            os.kill(os.getpid(), signal.SIGKILL)


async def pending_refund(
    service: DatabaseSessionService, session_id: str, *, retry: bool = False
) -> str | None:
    """The id of the ``refund`` call to answer when the session is paused, or None (not paused,
    or a pause the client leaves: it sends a new message, which abandons it).

    The pause waits for the last ``refund`` call. When its answer was stored already (the
    process that resumed the invocation died), it says how far that resume got with a
    ``stale_pause`` line — ``response`` (the user's response stored, the invocation's events
    not), ``resumed`` (the tool's result stored, not the final answer), ``finished`` (all
    stored, the pause not consumed) — and returns the call (the client sends its response
    again) for ``response``, or with ``retry``; else None.
    """
    if await service.get_checkpoint(APP, USER, session_id) is None:
        return None
    session = await service.get_session(APP, USER, session_id)
    assert session is not None
    events = session.events
    found = [
        (n, call.id)
        for n, e in enumerate(events)
        if e.message is not None
        for call in e.message.tool_calls
        if call.name == "refund"
    ]
    if not found:
        raise AssertionError(f"session {session_id} is paused but made no refund call")
    at, call = found[-1]
    invocation = events[at].invocation_id
    results = [
        (n, e.author)
        for n, e in enumerate(events)
        if e.message is not None and e.message.role == "tool" and e.message.tool_call_id == call
    ]
    if not results:
        return call
    agent = [n for n, author in results if author != "user"]
    if not agent:
        state = "response"
    elif any(
        e.invocation_id == invocation
        and e.author == "billing"
        and e.message is not None
        and e.message.role == "assistant"
        and not e.message.tool_calls
        for e in events[agent[0] :]
    ):
        state = "finished"
    else:
        state = "resumed"
    emit(kind="stale_pause", call=call, state=state)
    return call if retry or state == "response" else None


async def turn(runner: rk.Runner, session_id: str, kind: str, die_after: str | None = None) -> None:
    text = f"{kind} {token()}"
    emit(kind="turn", token=text)
    events = runner.run([Message.user(text)], user_id=USER, session_id=session_id)
    await deliver(events, die_after)


async def answer(
    runner: rk.Runner, session_id: str, call_id: str, die_after: str | None = None
) -> None:
    text = f"refunded {token()}"
    emit(kind="turn", token=text, call=call_id)
    response = Message.tool(text, tool_call_id=call_id)
    await deliver(runner.run([response], user_id=USER, session_id=session_id), die_after)


async def main(args: argparse.Namespace) -> int:
    app = App(args)
    service = DatabaseSessionService(args.url)
    try:
        await service.open()
        runner = app.runner(service)
        sid = args.session
        emit(kind="ready")
        done = 0
        try:
            if args.command == "turn":
                await turn(runner, sid, args.arg or "ask", args.die_after)
                done = 1
            elif args.command == "answer":
                call = await pending_refund(service, sid, retry=True)
                assert call is not None, f"session {sid} is not paused"
                await answer(runner, sid, call, args.die_after)
                done = 1
            elif args.command == "continue":
                call = await pending_refund(service, sid, retry=args.arg == "retry")
                if call is not None:
                    await answer(runner, sid, call)
                else:
                    await turn(runner, sid, "ask")
                done = 1
            elif args.command == "turns":
                if app.signals is not None:
                    (app.signals / f"{args.name}.ready").touch()
                    while not (app.signals / "go").exists():
                        await asyncio.sleep(0.002)
                for _ in range(int(args.arg)):
                    await turn(runner, sid, "ask")
                    done += 1
                    if args.gap:  # the user reads the answer: the other writer may go
                        await asyncio.sleep(app.rng.uniform(0, args.gap))
            elif args.command == "hold":
                app.hold_at = args.hold_at
                await turn(runner, sid, args.arg or "ask")
                done = 1
            elif args.command == "crash":
                while True:
                    call = await pending_refund(service, sid)
                    if call is not None:
                        await answer(runner, sid, call)
                    else:
                        await turn(runner, sid, app.rng.choice(["ask", "refund"]))
                    done += 1
            else:
                raise SystemExit(f"unknown command {args.command!r}")
        except SessionBusyError as exc:
            emit(kind="busy", error=str(exc))
        emit(kind="end", turns=done)
    finally:
        await service.aclose()
    return 0


# -- the harness (in the parent process) ----------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
HEX = "[0-9a-f]{32}"
#: The Runner's answer to a call a pause left open when it was abandoned, or a killed turn.
CLOSED = "error: (abandoned|not completed) .*"
#: What each stored message may be, by (author, role): content, tool call, answered call.
WELL_FORMED: dict[tuple[str, str], list[tuple[str, str | None, str | None]]] = {
    ("user", "user"): [(f"(ask|refund) {HEX}", None, None)],
    ("user", "tool"): [(f"refunded {HEX}", None, f"r-{HEX}")],
    ("desk", "assistant"): [("", "transfer_to_agent", None), (f"handed over {HEX}", None, None)],
    ("desk", "tool"): [
        (r"successfully transferred to agent \[billing\]", None, f"t-{HEX}"),
        (CLOSED, None, f"t-{HEX}"),
    ],
    ("billing", "assistant"): [
        ("", "lookup", None),
        ("", "refund", None),
        (rf"(answer|done) {HEX} seen=\d+", None, None),
    ],
    ("billing", "tool"): [
        (f"found {HEX}", None, f"l-{HEX}"),
        (f"refunded {HEX}", None, f"r-{HEX}"),
        (CLOSED, None, f"[lr]-{HEX}"),
    ],
}
CALL_ARGUMENTS = {
    "transfer_to_agent": '{"agent_name": "billing"}',
    "lookup": '{"order": "o1"}',
    "refund": f'{{"order": "{HEX}"}}',
}
CALL_PREFIX = {"transfer_to_agent": "t", "lookup": "l", "refund": "r"}

#: (author, role, content, tool call ids, answered call id, interrupt, error) of an event.
Print = tuple[str, str | None, str | None, tuple[str, ...], str | None, bool, bool]


@dataclass
class Outcome:
    """One run of the app: its exit code, its output lines and its stderr."""

    returncode: int | None
    lines: list[dict[str, Any]]
    stderr: str
    killed: bool = False

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["kind"] == kind]


def argv_of(
    url: str, session_id: str, command: str, arg: str | None = None, **options: Any
) -> list[str]:
    """The app's command line (after ``python -m tests.sessions._crash_app``)."""
    argv = [url, session_id, command]
    if arg is not None:
        argv.append(arg)
    for name, value in options.items():
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


def serve() -> None:
    """The fork server (``python -m tests.sessions._crash_app --serve``): for each request on
    stdin, ``{"argv": [...], "out": PATH}``, forks a process that runs the app on ``argv``
    (stdout to PATH, stderr to PATH.err) and replies ``{"pid": ...}``; when that process ends,
    writes its exit code (negative: the signal that killed it) to PATH.code."""
    outs: dict[int, str] = {}

    def reap(*_: object) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            out = outs.pop(pid, None)
            if out is not None:
                Path(out + ".code.tmp").write_text(str(os.waitstatus_to_exitcode(status)))
                os.replace(out + ".code.tmp", out + ".code")

    signal.signal(signal.SIGCHLD, reap)
    for request in sys.stdin:
        job = json.loads(request)
        # No reaping between the fork and the bookkeeping of the new pid.
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
            _run_forked(job["argv"], job["out"])
        outs[pid] = job["out"]
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()


def _run_forked(argv: list[str], out: str) -> None:
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        for fd, path in ((1, out), (2, out + ".err")):
            opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        code = asyncio.run(main(parse(argv)))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class ForkServer:
    """The harness's side of ``serve``: one server per process, started on first use."""

    _lock = threading.Lock()
    _server: subprocess.Popen[str] | None = None

    @classmethod
    def fork(cls, argv: list[str], out: Path) -> int:
        """Start the app on ``argv`` (output to ``out``); its pid."""
        with cls._lock:
            server = cls._server
            if server is None or server.poll() is not None:
                server = cls._server = subprocess.Popen(
                    [sys.executable, "-m", "tests.sessions._crash_app", "--serve"],
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                atexit.register(cls.close)
            assert server.stdin is not None and server.stdout is not None
            server.stdin.write(json.dumps({"argv": argv, "out": str(out)}) + "\n")
            server.stdin.flush()
            reply = server.stdout.readline()
            if not reply:
                raise RuntimeError("the fork server died")
            pid: int = json.loads(reply)["pid"]
            return pid

    @classmethod
    def close(cls) -> None:
        server = cls._server
        cls._server = None
        if server is not None and server.poll() is None:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(10)


class AppProcess:
    """One app process, forked from a server that imported this module once (so it starts in
    milliseconds, not the ~0.7 s of importing relaykit, SQLAlchemy and the drivers); still a
    process of its own, with its own connections and Runner, that the harness SIGKILLs.

    ``await start(...)``, then ``ready()``, ``kill()``, ``finish()``.
    """

    def __init__(self, argv: list[str]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="rk-crash-app-"))
        self.out = self.folder / "out"
        self.out.touch()
        self.pid = ForkServer.fork(argv, self.out)
        self.code: int | None = None

    @property
    def returncode(self) -> int | None:
        if self.code is None:
            path = self.folder / "out.code"
            if path.exists():
                self.code = int(path.read_text())
        return self.code

    def lines(self) -> list[dict[str, Any]]:
        return parse_lines(self.out.read_bytes() if self.out.exists() else b"")

    def kill(self) -> None:
        """SIGKILL, unless it already ended."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    async def ready(self, timeout: float = 60) -> None:
        """Wait for the app's ``ready`` line."""
        deadline = time.monotonic() + timeout
        while not any(line["kind"] == "ready" for line in self.lines()):
            if self.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the app never got ready: {self.stderr()}")
            await asyncio.sleep(0.005)

    def stderr(self) -> str:
        err = self.folder / "out.err"
        return err.read_text(errors="replace") if err.exists() else ""

    async def finish(self, timeout: float = 120) -> Outcome:
        """Wait for the app to end (killed after ``timeout`` seconds); its outcome."""
        deadline = time.monotonic() + timeout
        while self.returncode is None:
            if time.monotonic() > deadline:
                self.kill()
            await asyncio.sleep(0.005)
        outcome = Outcome(self.returncode, self.lines(), self.stderr())
        shutil.rmtree(self.folder, ignore_errors=True)
        return outcome


async def start(
    url: str, session_id: str, command: str, arg: str | None = None, **options: Any
) -> AppProcess:
    """Start the app in a process of its own."""
    return AppProcess(argv_of(url, session_id, command, arg, **options))


def parse_lines(out: bytes) -> list[dict[str, Any]]:
    lines = []
    for raw in out.decode(errors="replace").splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            lines.append({"kind": "torn", "raw": raw})
    return lines


async def finish(proc: AppProcess, timeout: float = 120) -> Outcome:
    """Wait for the app to end; its outcome."""
    return await proc.finish(timeout)


async def run_app(
    url: str, session_id: str, command: str, arg: str | None = None, **options: Any
) -> Outcome:
    """Run the app to its end, in a process of its own."""
    return await finish(await start(url, session_id, command, arg, **options))


def printed(line: dict[str, Any]) -> Print:
    return (
        line["author"],
        line["role"],
        line["content"],
        tuple(line["calls"]),
        line["call_id"],
        line["interrupt"],
        line["error"] is not None,
    )


def stored_print(event: SessionEvent) -> Print:
    m = event.message
    return (
        event.author,
        m.role if m is not None else None,
        m.content if m is not None else None,
        tuple(c.id for c in m.tool_calls) if m is not None else (),
        m.tool_call_id if m is not None else None,
        event.action is not None and event.action.interrupted is not None,
        event.error is not None,
    )


def superseded(event: SessionEvent) -> list[str] | None:
    """The ids of the events a retried continuation's marker leaves out of the histories (the
    earlier attempt's), or None when the event is not such a marker."""
    custom = event.action.custom if event.action is not None else None
    if isinstance(custom, dict) and custom.keys() == {"superseded"}:
        return list(custom["superseded"])
    return None


def malformed(event: SessionEvent) -> str | None:
    """Why the stored event is not one the app can have produced whole, or None."""
    m = event.message
    if m is None:
        if event.action is not None and event.action.interrupted is not None:
            return None if event.author == "billing" and event.error is None else "interrupt"
        if superseded(event) is not None and event.author == "desk":
            return None
        return f"no message ({event.author}, error={event.error!r})"
    if event.error is not None:
        return f"error event: {event.error}"
    for pattern, call_name, answers in WELL_FORMED.get((event.author, m.role), []):
        if not re.fullmatch(pattern, m.content or ""):
            continue
        if (answers is None) != (m.tool_call_id is None):
            continue
        if answers is not None and not re.fullmatch(answers, m.tool_call_id or ""):
            continue
        if call_name is None:
            if not m.tool_calls:
                return None
            continue
        if len(m.tool_calls) != 1:
            continue
        call = m.tool_calls[0]
        if (
            call.name == call_name
            and re.fullmatch(f"{CALL_PREFIX[call_name]}-{HEX}", call.id)
            and re.fullmatch(CALL_ARGUMENTS[call_name], call.arguments)
        ):
            return None
    return f"{event.author}/{m.role}: {m.content!r} {m.tool_calls} {m.tool_call_id}"


@dataclass
class Report:
    """What a check of a session found (every list empty, ``load_error`` None: all good)."""

    load_error: str | None = None
    stored: int = 0
    delivered: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    half_written: list[str] = field(default_factory=list)
    interleaved: list[str] = field(default_factory=list)
    paused: bool = False

    def problems(self) -> list[str]:
        found = [f"load failed: {self.load_error}"] if self.load_error else []
        found += [f"lost: {x}" for x in self.lost]
        found += [f"duplicated: {x}" for x in self.duplicated]
        found += [f"half-written: {x}" for x in self.half_written]
        found += [f"interleaved: {x}" for x in self.interleaved]
        return found


class Checker:
    """Reads a session back (through the service, and its rows raw) and checks it against what
    the app printed: ``async with Checker(url) as checker: await checker.check(sid, outcomes)``.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.service = DatabaseSessionService(url)
        self.engine: Any = None

    async def __aenter__(self) -> Checker:
        from sqlalchemy.ext.asyncio import create_async_engine
        from sqlalchemy.pool import NullPool

        await self.service.open()
        self.engine = create_async_engine(self.url, poolclass=NullPool)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.service.aclose()
        await self.engine.dispose()

    async def rows(self, session_id: str) -> tuple[int, int, int, int]:
        """(the session row's last_seq, the number of event rows, their min and max seq)."""
        import sqlalchemy as sa

        query = sa.text(
            "SELECT s.last_seq, count(e.seq), coalesce(min(e.seq), 0), coalesce(max(e.seq), 0) "
            "FROM relaykit_sessions s LEFT JOIN relaykit_session_events e "
            "ON e.session_pk = s.pk WHERE s.app_name = :a AND s.user_id = :u "
            "AND s.session_id = :s GROUP BY s.pk, s.last_seq"
        )
        async with self.engine.connect() as conn:
            row = (await conn.execute(query, {"a": APP, "u": USER, "s": session_id})).one()
        return int(row[0]), int(row[1]), int(row[2]), int(row[3])

    async def check(self, session_id: str, outcomes: list[Outcome]) -> Report:
        report = Report()
        try:
            session = await self.service.get_session(APP, USER, session_id)
            if session is not None:
                await self.service.load_history(APP, USER, session_id)
                pause = await self.service.get_checkpoint(APP, USER, session_id)
                report.paused = pause is not None
        except Exception as exc:  # the session must always load
            report.load_error = f"{type(exc).__name__}: {exc}"
            return report
        if session is None:  # killed before it was created: then nothing was delivered
            report.delivered = sum(len(o.of("event")) for o in outcomes)
            if report.delivered:
                report.lost.append(f"the session, after {report.delivered} delivered events")
            return report
        events = session.events
        report.stored = len(events)

        # Half-written: the rows agree with the session's row; each event is whole; the state
        # is what the stored deltas say.
        last_seq, count, low, high = await self.rows(session_id)
        if not (last_seq == count == high == len(events) and low == (1 if count else 0)):
            report.half_written.append(
                f"rows: last_seq={last_seq}, {count} event rows ({low}..{high}), "
                f"{len(events)} loaded"
            )
        last_lookup = None
        for event in events:
            why = malformed(event)
            if why is not None:
                report.half_written.append(why)
            m = event.message
            if event.author == "billing" and m is not None and m.content.startswith("found "):
                last_lookup = m.content
                if event.state_delta != {"last_lookup": m.content}:
                    report.half_written.append(f"lookup without its delta: {event.state_delta}")
            elif event.state_delta:
                report.half_written.append(f"unexpected delta {event.state_delta}")
        if session.state.get("last_lookup") != last_lookup:
            report.half_written.append(
                f"state {session.state} is not the last stored lookup {last_lookup!r}"
            )

        # Interleaved: each invocation is one block of events that begins with a user event.
        blocks: list[str] = []
        for event in events:
            if not blocks or blocks[-1] != event.invocation_id:
                if event.invocation_id in blocks:
                    report.interleaved.append(f"invocation {event.invocation_id} split")
                blocks.append(event.invocation_id)
                if event.author != "user":
                    report.interleaved.append(
                        f"invocation {event.invocation_id} begins with {event.author}"
                    )

        # Duplicated: ids, messages within an invocation, user questions, results of a
        # call, interrupts and final answers of an invocation -- among the events the
        # histories read: a retried continuation leaves the earlier attempt's out with a marker.
        ids = collections.Counter(e.id for e in events)
        report.duplicated += [f"event id {i}" for i, n in ids.items() if n > 1]
        left_out: set[str] = set()
        for event in events:
            marked = superseded(event)
            if marked is not None:
                unknown = set(marked) - set(ids)
                if unknown:
                    report.half_written.append(f"a marker leaves out unknown events {unknown}")
                left_out.update(marked)
        live = [e for e in events if e.id not in left_out]
        keyed = collections.Counter(
            (e.invocation_id, *stored_print(e)) for e in live if e.message is not None
        )
        report.duplicated += [f"{k[1:4]}" for k, n in keyed.items() if n > 1]
        questions = collections.Counter(
            e.message.content
            for e in live
            if e.author == "user" and e.message is not None and e.message.role == "user"
        )
        report.duplicated += [f"question {q}" for q, n in questions.items() if n > 1]
        answers = collections.Counter(
            (e.author, e.message.tool_call_id)
            for e in live
            if e.message is not None and e.message.tool_call_id
        )
        report.duplicated += [f"answer to {k}" for k, n in answers.items() if n > 1]
        interrupts = collections.Counter(
            e.invocation_id for e in live if e.action is not None and e.action.interrupted
        )
        report.duplicated += [f"interrupts of {i}" for i, n in interrupts.items() if n > 1]
        finals = collections.Counter(
            e.invocation_id
            for e in live
            if e.author == "billing"
            and e.message is not None
            and e.message.role == "assistant"
            and not e.message.tool_calls
        )
        report.duplicated += [f"final answers of {i}" for i, n in finals.items() if n > 1]

        # Lost: every event the app printed as delivered is stored, and so is the user's
        # message of every turn that delivered something.
        stored = collections.Counter(stored_print(e) for e in events)
        user_calls = {
            e.message.tool_call_id
            for e in events
            if e.author == "user" and e.message is not None and e.message.role == "tool"
        }
        for outcome in outcomes:
            turn: dict[str, Any] | None = None
            for line in outcome.lines:
                if line["kind"] == "turn":
                    turn = line
                    continue
                if line["kind"] != "event":
                    continue
                report.delivered += 1
                key = printed(line)
                if stored[key] > 0:
                    stored[key] -= 1
                else:
                    report.lost.append(f"delivered {key[:5]}")
                if turn is not None:
                    if turn.get("call") is None and questions[turn["token"]] == 0:
                        report.lost.append(f"question {turn['token']}")
                    if turn.get("call") is not None and turn["call"] not in user_calls:
                        report.lost.append(f"tool response to {turn['call']}")
                    turn = None
        return report


@dataclass
class Trial:
    """One crash trial: the kill, then the continuation in a new process."""

    seed: int
    sleep: float
    delay: float
    after_kill: Report
    after_continue: Report
    continued: Outcome
    killed: Outcome
    #: What the killed process printed last (where the kill landed, roughly).
    phase: str = ""
    #: Events stored by the killed process but never delivered (killed in between).
    undelivered: int = 0
    #: Tool calls a model saw without their result, in the continuation.
    dangling: list[dict[str, Any]] = field(default_factory=list)
    #: Checks repeated after the kill until an in-flight commit of the killed process landed.
    rechecks: int = 0
    #: The continuation found a pause whose call was answered already: how far the resume
    #: of the killed process got (``response``, ``resumed``, ``finished``: ``pending_refund``).
    stale: str | None = None

    def problems(self) -> list[str]:
        found = [f"after the kill, {p}" for p in self.after_kill.problems()]
        found += [f"after the continuation, {p}" for p in self.after_continue.problems()]
        cont = self.continued
        if cont.returncode != 0:
            found.append(f"the continuation failed ({cont.returncode}): {cont.stderr[-2000:]}")
        errors = [line["error"] for line in cont.of("event") if line["error"]]
        found += [f"the continuation delivered an error: {e}" for e in errors]
        ends = cont.of("event")
        if cont.returncode == 0 and (
            not ends or not re.match("(answer|done) ", ends[-1]["content"] or "")
        ):
            found.append(f"the continuation did not end with an answer: {ends[-1:]}")
        if self.after_continue.paused:
            found.append("still paused after the continuation")
        found += [f"a model saw a call without its result: {x}" for x in self.dangling]
        found += [f"a model saw a call answered twice: {x}" for x in self.continued.of("repeated")]
        return found


def phase_of(outcome: Outcome) -> str:
    """Where the killed process was, from the last line it printed."""
    last = next((x for x in reversed(outcome.lines) if x["kind"] in ("event", "turn")), None)
    if last is None:
        return "before its first turn"
    if last["kind"] == "turn":
        if last.get("call"):
            return "tool response sent (resuming)"
        return "question sent (its store, the first model call)"
    if last["interrupt"]:
        return "interrupt delivered (paused)"
    calls = "".join(c[0] for c in last["calls"])
    if calls:
        return {
            "t": "transfer call delivered (the transfer)",
            "l": "lookup call delivered (the tool)",
            "r": "refund call delivered (the tool, the pause)",
        }[calls]
    if last["role"] == "tool":
        return "tool result delivered (the next model call)"
    return "answer delivered (the end of the turn)"


async def crash_trial(
    checker: Checker,
    session_id: str,
    seed: int,
    *,
    max_delay: float = 0.6,
    retry_stale: bool = False,
) -> Trial:
    """Run the app on a fresh session, SIGKILL it at a random moment (``seed`` picks the
    moment and how long the models and tools take), check the session, continue it in a new
    process (``continue``; ``retry_stale``: ``continue retry``), check it again."""
    rng = random.Random(seed)
    sleep = rng.choice([0.0, 0.002, 0.01, 0.03])
    delay = rng.uniform(0, max_delay)
    proc = await start(checker.url, session_id, "crash", seed=seed, sleep=sleep)
    try:
        await proc.ready()
        await asyncio.sleep(delay)
    finally:
        proc.kill()
    killed = await finish(proc)
    killed.killed = True
    after_kill = await checker.check(session_id, [killed])
    rechecks = 0
    while rechecks < 10 and any(h.startswith("rows:") for h in after_kill.half_written):
        # On PostgreSQL a COMMIT the killed client had sent completes on the server a moment
        # after its death: between the check's two reads the session can gain that event.
        # What must hold is that the rows agree once it has landed.
        rechecks += 1
        await asyncio.sleep(0.1)
        after_kill = await checker.check(session_id, [killed])
    continued = await run_app(checker.url, session_id, "continue", "retry" if retry_stale else None)
    after_continue = await checker.check(session_id, [killed, continued])
    delivered = collections.Counter(printed(x) for x in killed.of("event"))
    session = await checker.service.get_session(APP, USER, session_id)
    undelivered = 0
    if session is not None and after_kill.load_error is None:
        stored_then = collections.Counter(
            stored_print(e) for e in session.events[: after_kill.stored] if e.author != "user"
        )
        undelivered = sum((stored_then - delivered).values())
    return Trial(
        seed,
        sleep,
        delay,
        after_kill,
        after_continue,
        continued,
        killed,
        phase_of(killed),
        undelivered,
        continued.of("dangling"),
        rechecks=rechecks,
        stale=next((x["state"] for x in continued.of("stale_pause")), None),
    )


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.sessions._crash_app")
    parser.add_argument("url")
    parser.add_argument("session")
    parser.add_argument("command")
    parser.add_argument("arg", nargs="?")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--gap", type=float, default=0.0)
    parser.add_argument("--lock-timeout", type=float, default=10.0)
    parser.add_argument("--signals")
    parser.add_argument("--name", default="worker")
    parser.add_argument("--hold-at", default="model", choices=["model", "lookup"])
    parser.add_argument("--die-after")
    return parser.parse_args(argv)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
