"""A process that uses a session's turn lock while others do (test_lock_processes).

``python -m tests.sessions.lock_worker MODE URL DIR NAME ARG``

- ``hold``: takes the lock of session ``s1``, writes ``DIR/NAME.held``, keeps it until
  ``DIR/release`` exists (forever if ARG is ``forever``: the test kills the process).
- ``try``: waits for ``DIR/go``, then tries the lock with a timeout of ARG seconds; the outcome
  is ``acquired`` or ``busy``.
- ``turns``: waits for ``DIR/go``, then takes ARG turns: each holds the lock while it reads the
  session's ``count`` and appends an event that increments it.

Before waiting each worker writes ``DIR/NAME.ready``. The result goes to ``DIR/NAME.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from relaykit import Message
from relaykit.errors import SessionBusyError
from relaykit.sessions import DatabaseSessionService, SessionEvent

APP, USER, SESSION = "shop", "u1", "s1"


async def _wait_for(path: Path, name: str) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: {path.name} never came")
        await asyncio.sleep(0.002)


async def hold(
    service: DatabaseSessionService, folder: Path, name: str, arg: str
) -> dict[str, Any]:
    async with service.lock(APP, USER, SESSION, timeout=30):
        (folder / f"{name}.held").touch()
        if arg == "forever":
            await asyncio.Event().wait()
        await _wait_for(folder / "release", name)
    return {"outcome": "released"}


async def try_lock(
    service: DatabaseSessionService, folder: Path, name: str, arg: str
) -> dict[str, Any]:
    await service.open()  # connected and migrated: the wait is about the lock only
    (folder / f"{name}.ready").touch()
    await _wait_for(folder / "go", name)
    try:
        async with service.lock(APP, USER, SESSION, timeout=float(arg)):
            return {"outcome": "acquired"}
    except SessionBusyError as exc:
        return {"outcome": "busy", "message": str(exc)}


async def turns(
    service: DatabaseSessionService, folder: Path, name: str, arg: str
) -> dict[str, Any]:
    await service.open()
    (folder / f"{name}.ready").touch()
    await _wait_for(folder / "go", name)
    failed: list[str] = []
    for n in range(int(arg)):
        try:
            async with service.lock(APP, USER, SESSION, timeout=60):
                session = await service.get_session(APP, USER, SESSION)
                assert session is not None
                count = session.state.get("count", 0)
                await service.append_event(
                    session,
                    SessionEvent(
                        author=name,
                        message=Message.assistant(f"{name} {n}"),
                        state_delta={"count": count + 1},
                    ),
                )
        except Exception as exc:
            failed.append(repr(exc))
    return {"outcome": "done", "failed": failed}


async def main(mode: str, url: str, folder: Path, name: str, arg: str) -> None:
    service = DatabaseSessionService(url)
    try:
        run = {"hold": hold, "try": try_lock, "turns": turns}[mode]
        outcome = await run(service, folder, name, arg)
    finally:
        await service.aclose()
    tmp = folder / f"{name}.tmp"
    tmp.write_text(json.dumps(outcome))
    os.replace(tmp, folder / f"{name}.json")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4], sys.argv[5]))
