"""``make demo``: a multi-turn support desk whose session lives in a SQLite file.

The demo runs two processes, one after the other, on one database (``--db``):

- process 1 (``--step desk``) opens a new session and runs three turns: an order question
  (triage hands over to ``orders``), a follow-up (it starts at ``orders``, the agent that spoke
  last, and reads the order number from the first turn), and a refund request (``orders`` hands
  back to triage, triage to ``refunds``, whose long-running ``request_refund`` tool asks a
  manager: the invocation pauses, the pause is stored with the session) — then it exits;
- process 2 (``--step approve``) opens the same database, finds the paused invocation, sends
  the manager's decision as the paused call's tool result (the invocation continues under its
  id), runs one more turn, and prints what the database holds.

Offline on ScriptedModel by default; ``--model openai:gpt-4o-mini`` uses a real model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import relaykit as rk
from examples.support_desk import build_desk
from relaykit import Message
from relaykit.sessions.database import DatabaseSessionService

ROOT = Path(__file__).resolve().parents[1]
APP = "desk"
USER = "ada"
DEFAULT_DB = ".demo/desk.db"
TURNS = [
    "Where is my order 1234?",
    "Can you give me the tracking number?",
    "It arrived broken. I want a refund.",
]
LAST_TURN = "Thanks! When will I see the money?"
DECISION = {"approved": True, "by": "Ana (manager)"}


class Invocations(rk.Plugin):
    """Remembers the id of the invocation that runs (to print it beside each event)."""

    current = ""

    async def before_run(self, ctx: rk.InvocationContext) -> Message | None:
        self.current = ctx.invocation_id
        return None


def short(invocation_id: str) -> str:
    return invocation_id[:8]


def clip(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def call_text(call: rk.ToolCall) -> str:
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return f"{call.name}({call.arguments})"
    inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    return f"{call.name}({inner})"


def describe(ev: rk.AgentEvent, message: Message | None) -> str | None:
    """One transcript line for an event (None: nothing worth a line)."""
    if ev.error is not None:
        return f"ERROR {ev.error}"
    action = ev.action
    if action is not None and action.interrupted is not None:
        info = action.interrupted.contexts[0].info
        if isinstance(info, dict) and "tool" in info:
            started = json.dumps(info.get("started"), ensure_ascii=False)
            return f"⏸ {info['tool']} started {started}: the invocation pauses"
        return f"⏸ paused: {info}"
    if message is None:
        return None
    if message.role == "tool":
        if message.tool_name == "transfer_to_agent":
            return None  # the call's line already says where control goes
        return f"← {message.tool_name}: {clip(message.content, 80)}"
    parts = [f'says "{message.content}"'] if message.content else []
    for call in message.tool_calls:
        if call.name == "transfer_to_agent":
            dest = json.loads(call.arguments or "{}").get("agent_name")
            parts.append(f"→ hands over to {dest}")
        else:
            parts.append(f"calls {call_text(call)}")
    return " ".join(parts) or None


async def show(
    events: Any, invocations: Invocations, pause: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """Print a turn's events; return the info of its pause (None: it did not pause)."""
    async for ev in events:
        message = await ev.output.get_message() if ev.output is not None else None
        line = describe(ev, message)
        if line is not None:
            print(f"  inv {short(invocations.current)} │ {ev.agent_name:<7} │ {line}")
        if ev.action is not None and ev.action.interrupted is not None:
            info = ev.action.interrupted.contexts[0].info
            pause = info if isinstance(info, dict) else {"info": info}
    return pause


def database_url(db: str) -> str:
    if "://" in db:
        return db
    path = Path(db).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite+aiosqlite:///{path}"


# -- process 1 --------------------------------------------------------------------------------
async def desk(model: str | None, db: str) -> None:
    print(f"── process 1 starts (pid {os.getpid()})")
    invocations = Invocations()
    svc = DatabaseSessionService(database_url(db))
    try:
        runner = rk.Runner(
            build_desk(model), app_name=APP, session_service=svc, plugins=[invocations]
        )
        # A fresh session each run (``--keep`` keeps the earlier ones in the database).
        session_id = f"chat-{len(await svc.list_sessions(APP, USER)) + 1}"
        print(f"  new session {session_id!r} of user {USER!r} in {db}")
        pause = None
        for number, text in enumerate(TURNS, 1):
            print(f"\nTurn {number} · {USER}: {text}")
            turn = runner.run([Message.user(text)], user_id=USER, session_id=session_id)
            pause = await show(turn, invocations)
            if pause is not None:
                break
        stored = await svc.get_checkpoint(APP, USER, session_id)
        if pause is None or stored is None:
            print("\n  (no invocation paused: process 2 will find nothing to approve)")
        else:
            print(
                f"\n  invocation {short(invocations.current)} is paused, waiting for a "
                f"manager; its pause is stored with session {session_id!r} "
                f"({len(stored)} bytes)"
            )
    finally:
        await svc.aclose()
    print("── process 1 exits")


# -- process 2 --------------------------------------------------------------------------------
async def find_pause(
    svc: DatabaseSessionService, session_id: str | None
) -> tuple[str, rk.SessionEvent] | None:
    """The session with a paused invocation (the newest, unless named) and its interrupt event."""
    if session_id is not None:
        candidates = [session_id]
    else:
        candidates = [s.id for s in reversed(await svc.list_sessions(APP, USER))]
    for sid in candidates:
        if await svc.get_checkpoint(APP, USER, sid) is None:
            continue
        session = await svc.get_session(APP, USER, sid)
        assert session is not None
        for event in reversed(session.events):
            if event.action is not None and event.action.interrupted is not None:
                return sid, event
    return None


async def approve(model: str | None, db: str, session_id: str | None) -> None:
    print(f"── process 2 starts (pid {os.getpid()})")
    svc = DatabaseSessionService(database_url(db))
    try:
        found = await find_pause(svc, session_id)
        if found is None:
            print(f"  no paused invocation in {db}: nothing to approve")
        else:
            await continue_paused(svc, model, db, *found)
    finally:
        await svc.aclose()
    print("── process 2 exits")


async def continue_paused(
    svc: DatabaseSessionService,
    model: str | None,
    db: str,
    session_id: str,
    event: rk.SessionEvent,
) -> None:
    """Answer the paused call with the manager's decision, then run one more turn."""
    assert event.action is not None and event.action.interrupted is not None
    info = event.action.interrupted.contexts[0].info
    call_id = info["tool_call_id"]
    print(
        f"  opened {db}: session {session_id!r} has invocation {short(event.invocation_id)} "
        f"paused at {info['tool']} (call {call_id!r} of the {event.author} agent)"
    )
    print(f"  the manager decides: {json.dumps(DECISION, ensure_ascii=False)}")

    invocations = Invocations()
    runner = rk.Runner(build_desk(model), app_name=APP, session_service=svc, plugins=[invocations])
    answer = Message.tool(json.dumps(DECISION, ensure_ascii=False), tool_call_id=call_id)
    print(f"\nTurn 3, continued · the decision, as the result of call {call_id}")
    await show(runner.run([answer], user_id=USER, session_id=session_id), invocations)

    print(f"\nTurn 4 · {USER}: {LAST_TURN}")
    turn = runner.run([Message.user(LAST_TURN)], user_id=USER, session_id=session_id)
    await show(turn, invocations)

    await summary(svc, db, session_id)


async def summary(svc: DatabaseSessionService, db: str, session_id: str) -> None:
    """What the database holds for the session: events per invocation, their authors."""
    session = await svc.get_session(APP, USER, session_id)
    assert session is not None
    order: list[str] = []
    by_invocation: dict[str, list[rk.SessionEvent]] = {}
    for event in session.events:
        if event.invocation_id not in by_invocation:
            order.append(event.invocation_id)
            by_invocation[event.invocation_id] = []
        by_invocation[event.invocation_id].append(event)
    print(f"\nRead back from {db}: session {session_id!r}, {len(session.events)} events")
    for number, invocation_id in enumerate(order, 1):
        events = by_invocation[invocation_id]
        authors = list(dict.fromkeys(e.author for e in events))
        print(
            f"  invocation {number} {short(invocation_id)}: {len(events):>2} events by "
            f"{', '.join(authors)}"
        )
    pause = await svc.get_checkpoint(APP, USER, session_id)
    print(f"  pause: {'none (consumed)' if pause is None else f'{len(pause)} bytes'}")


# -- the two processes, one after the other -------------------------------------------------
def fresh_database(db: str) -> None:
    """Delete the SQLite file (and its lock folder) so that each run starts clean."""
    if "://" in db:
        return
    path = Path(db).expanduser()
    for extra in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    shutil.rmtree(f"{path}.locks", ignore_errors=True)


def both(args: argparse.Namespace) -> int:
    model = f"on {args.model}" if args.model else "on a scripted model (offline)"
    print(f"relaykit support desk {model}; sessions in {args.db}\n", flush=True)
    if not args.keep:
        fresh_database(args.db)
    extra = ["--model", args.model] if args.model else []
    for step in ("desk", "approve"):
        command = [sys.executable, "-m", "examples.demo", "--step", step, "--db", args.db]
        done = subprocess.run([*command, *extra], cwd=ROOT, check=False)
        if done.returncode != 0:
            return done.returncode
        if step == "desk":
            print(flush=True)
    return 0


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--model",
        default=None,
        help="a provider string such as openai:gpt-4o-mini (default: scripted, offline)",
    )
    parser.add_argument(
        "--db",
        default=DEFAULT_DB,
        help=f"the SQLite file that keeps the sessions (default: {DEFAULT_DB}), or a "
        "database URL such as postgresql+asyncpg://user@host/db",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the database's earlier sessions (default: delete the SQLite file first)",
    )
    parser.add_argument(
        "--step",
        choices=("both", "desk", "approve"),
        default="both",
        help="desk: process 1 only; approve: process 2 only; both (default): process 1, then "
        "process 2, each a process of its own",
    )
    parser.add_argument(
        "--session",
        default=None,
        help="approve: the session to continue (default: the newest one with a pause)",
    )
    args = parser.parse_args()
    try:
        if args.step == "desk":
            asyncio.run(desk(args.model, args.db))
        elif args.step == "approve":
            asyncio.run(approve(args.model, args.db, args.session))
        else:
            sys.exit(both(args))
    except rk.errors.ConfigurationError as exc:  # e.g. --model without its API key
        sys.exit(f"demo: {exc}")


if __name__ == "__main__":
    cli()
