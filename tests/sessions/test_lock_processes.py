"""The turn lock across processes, on SQLite and PostgreSQL: a process waits for another's turn
(bounded, then SessionBusyError), takes it once released, takes it from a process that was killed
while holding it, and processes taking turns on one session never interleave.

The workers (``lock_worker``) signal with files: ``NAME.ready`` / ``NAME.held`` from them,
``go`` / ``release`` from the test.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from relaykit.errors import SessionBusyError
from relaykit.sessions import DatabaseSessionService

ROOT = Path(__file__).resolve().parents[2]
APP, USER, SESSION = "shop", "u1", "s1"


class Worker:
    """One ``lock_worker`` process."""

    def __init__(self, proc: asyncio.subprocess.Process, folder: Path, name: str) -> None:
        self.proc, self.folder, self.name = proc, folder, name

    @classmethod
    async def start(cls, mode: str, url: str, folder: Path, name: str, arg: str) -> Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.sessions.lock_worker",
            mode,
            url,
            str(folder),
            name,
            arg,
            cwd=ROOT,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc, folder, name)

    async def signalled(self, suffix: str) -> None:
        """Wait until the worker wrote ``NAME.<suffix>`` (a minute at most)."""
        for _ in range(6000):
            if (self.folder / f"{self.name}.{suffix}").exists():
                return
            if self.proc.returncode is not None:
                break
            await asyncio.sleep(0.01)
        stderr = await self.proc.stderr.read() if self.proc.stderr else b""
        pytest.fail(f"worker {self.name} never wrote .{suffix}: {stderr.decode()}")

    async def outcome(self) -> dict[str, Any]:
        """Wait for the worker to end; its result."""
        _, stderr = await asyncio.wait_for(self.proc.communicate(), timeout=120)
        assert self.proc.returncode == 0, stderr.decode()
        result: dict[str, Any] = json.loads((self.folder / f"{self.name}.json").read_text())
        return result

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    made = tmp_path / "signals"
    made.mkdir()
    return made


async def test_a_process_waits_for_anothers_turn_gets_busy_after_the_timeout_then_takes_it(
    database_url: str, folder: Path
) -> None:
    holder = await Worker.start("hold", database_url, folder, "holder", "until-release")
    try:
        await holder.signalled("held")
        async with DatabaseSessionService(database_url) as service:
            with pytest.raises(SessionBusyError, match="'s1'"):
                async with service.lock(APP, USER, SESSION, timeout=0.3):
                    pytest.fail("another process holds the lock")
            (folder / "release").touch()
            assert (await holder.outcome())["outcome"] == "released"
            async with service.lock(APP, USER, SESSION, timeout=30):
                pass
    finally:
        await holder.stop()


async def test_a_process_gets_the_lock_this_process_releases_and_busy_while_it_is_held(
    database_url: str, folder: Path
) -> None:
    async with DatabaseSessionService(database_url) as service:
        impatient = await Worker.start("try", database_url, folder, "impatient", "0.3")
        patient = await Worker.start("try", database_url, folder, "patient", "60")
        try:
            await impatient.signalled("ready")
            await patient.signalled("ready")
            async with service.lock(APP, USER, SESSION, timeout=5):
                (folder / "go").touch()
                busy = await impatient.outcome()
                await asyncio.sleep(0.2)  # the patient worker is waiting meanwhile
            assert busy["outcome"] == "busy" and "'s1'" in busy["message"]
            assert (await patient.outcome())["outcome"] == "acquired"
        finally:
            await impatient.stop()
            await patient.stop()


async def test_the_lock_of_a_process_killed_with_sigkill_is_taken_by_another_process(
    database_url: str, folder: Path
) -> None:
    holder = await Worker.start("hold", database_url, folder, "holder", "forever")
    try:
        await holder.signalled("held")
        async with DatabaseSessionService(database_url) as service:
            with pytest.raises(SessionBusyError):
                async with service.lock(APP, USER, SESSION, timeout=0.2):
                    pass
            holder.proc.send_signal(signal.SIGKILL)
            assert await holder.proc.wait() == -signal.SIGKILL
            # The kernel (flock) or the server (the connection dropped) releases it: the wait is
            # bounded, never a lease that has to expire.
            async with service.lock(APP, USER, SESSION, timeout=30):
                pass
    finally:
        await holder.stop()


async def test_processes_taking_turns_under_the_lock_never_interleave(
    database_url: str, folder: Path
) -> None:
    async with DatabaseSessionService(database_url) as service:
        await service.create_session(APP, USER, SESSION)
    names, count = ["p1", "p2", "p3"], 25
    workers = [
        await Worker.start("turns", database_url, folder, name, str(count)) for name in names
    ]
    try:
        for worker in workers:
            await worker.signalled("ready")
        (folder / "go").touch()
        outcomes = [await worker.outcome() for worker in workers]
    finally:
        for worker in workers:
            await worker.stop()

    assert [o["failed"] for o in outcomes] == [[]] * len(names)
    async with DatabaseSessionService(database_url) as service:
        session = await service.get_session(APP, USER, SESSION)
    assert session is not None
    # Every turn read the count its predecessor wrote: no two turns overlapped.
    assert [e.state_delta["count"] for e in session.events] == list(range(1, 76))
    assert session.state["count"] == len(names) * count
    for name in names:
        assert [e.message.content for e in session.events if e.author == name] == [
            f"{name} {n}" for n in range(count)
        ]
