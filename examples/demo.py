"""``make demo``: the support desk in the terminal, exactly as ``relaykit run`` shows it.

Two processes, one after the other, on one SQLite file (``--db``, default ``.demo/desk.db``):

1. ``relaykit run examples/support_desk --db .demo/desk.db`` — a customer asks about an order,
   asks a follow-up, then wants a refund. The refund needs a manager's approval: the run
   pauses, the customer leaves (``exit``), and the pause stays stored with the session.
2. ``relaykit run examples/support_desk --db .demo/desk.db --session ID`` — a new process
   opens the session and asks for the waiting approval; the manager's answer resumes the paused
   run where it stopped, and the customer asks one more question.

What is typed at the prompts comes from the lists below, piped to each command's stdin (the chat
then echoes it after its prompt). Offline on the desk's scripted models by default (in a
terminal they take a moment and stream their words, as real models do; ``--pace 0`` makes them
instant); ``--model openai:gpt-4o-mini`` runs the same conversation on a real model.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from examples.support_desk import APP_NAME
from relaykit.sessions.database import DatabaseSessionService

ROOT = Path(__file__).resolve().parents[1]
APP = "examples/support_desk"
USER = "dev"  # relaykit run's default user
DEFAULT_DB = ".demo/desk.db"
#: What the customer types in process 1 (``exit`` at the approval: the run stays paused).
CUSTOMER = [
    "Where is my order 1234?",
    "Can you give me the tracking number?",
    "It arrived broken. I want a refund.",
    "exit",
]
#: What is typed in process 2: the manager's answer to the approval, then the customer again.
MANAGER = ["approved by Ana (manager)", "Thanks! When will I see the money?", "exit"]


def database_url(db: str) -> str:
    """A ``--db`` value as a URL (a file path is a SQLite file), as ``relaykit`` reads it."""
    if "://" in db:
        return db
    return f"sqlite+aiosqlite:///{Path(db).expanduser().resolve()}"


async def sessions(db: str) -> dict[str, bool]:
    """The stored sessions of the desk's user: whether each has a pause waiting."""
    async with DatabaseSessionService(database_url(db)) as service:
        listed = await service.list_sessions(APP_NAME, USER)
        return {
            s.id: await service.get_checkpoint(APP_NAME, USER, s.id) is not None for s in listed
        }


def fresh_database(db: str) -> None:
    """Delete the SQLite file (and its lock folder) so that each run starts clean."""
    if "://" in db:
        return
    path = Path(db).expanduser()
    for extra in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    shutil.rmtree(f"{path}.locks", ignore_errors=True)


def relaykit(number: int, args: list[str], typed: list[str], pace: float) -> int:
    """Run ``relaykit ARGS`` as a process of its own, ``typed`` piped to its stdin."""
    print(f"── process {number}", flush=True)
    print(f"$ relaykit {shlex.join(args)}", flush=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "relaykit.cli", *args],
        stdin=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "DESK_PACE": str(pace)},
        text=True,
    )
    process.communicate("".join(f"{line}\n" for line in typed))
    print(f"── process {number} (pid {process.pid}) has exited\n", flush=True)
    return process.returncode


def demo(db: str, model: str | None, keep: bool, pace: float) -> int:
    where = f"on {model}" if model else "on scripted models (offline)"
    print(f"relaykit support desk {where}; sessions in {db}\n", flush=True)
    if not keep:
        fresh_database(db)
    if "://" not in db:
        Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
    common = ["--db", db] + (["--model", model] if model else [])
    before = asyncio.run(sessions(db))
    code = relaykit(1, ["run", APP, *common], CUSTOMER, pace)
    if code != 0:
        return code
    after = asyncio.run(sessions(db))
    paused = [sid for sid, waits in after.items() if waits and sid not in before]
    if not paused:
        print("no run is paused: there is no approval for process 2 to answer")
        return 0
    code = relaykit(2, ["run", APP, *common, "--session", paused[0]], MANAGER, pace)
    if code != 0:
        return code
    print(
        "Your turn (the relaykit command is in .venv/bin):\n"
        f"  relaykit run {APP}          chat with the desk (approve with: approved by Ana)\n"
        f"  relaykit sessions show {APP} {paused[0]} --db {db}\n"
        f"  relaykit web {APP}          the same desk in the web UI"
    )
    return 0


def main() -> None:
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
        "--pace",
        type=float,
        default=None,
        help="seconds each scripted model takes to answer (default: 0.4 in a terminal, else 0)",
    )
    args = parser.parse_args()
    pace = args.pace if args.pace is not None else (0.4 if sys.stdout.isatty() else 0.0)
    sys.exit(demo(args.db, args.model, args.keep, pace))


if __name__ == "__main__":
    main()
