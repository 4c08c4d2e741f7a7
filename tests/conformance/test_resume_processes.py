"""D21 across processes: two processes resuming one checkpoint on SQLite or PostgreSQL run the
approved tool once; the other gets CheckpointBusyError; a completed resume consumed it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import relaykit as rk
from relaykit import errors

from .resume_worker import interrupt

ROOT = Path(__file__).resolve().parents[2]


async def test_two_processes_resuming_one_checkpoint_pay_once(
    database_url: str, tmp_path: Path
) -> None:
    url = database_url
    checkpoint_id = f"race-{uuid.uuid4().hex}"
    await interrupt(url, checkpoint_id)
    folder = tmp_path / "race"
    folder.mkdir()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.conformance.resume_worker",
                url,
                checkpoint_id,
                str(folder),
                name,
            ],
            cwd=ROOT,
        )
        for name in ("p1", "p2")
    ]
    (folder / "go").touch()
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    outcomes = sorted((folder / f"{name}.out").read_text() for name in ("p1", "p2"))
    assert outcomes == ["busy", "ok"]
    paid = (folder / "paid").read_text().splitlines()
    assert len(paid) == 1 and paid[0].endswith(" o1")
    async with rk.DatabaseCheckpointStore(url) as store:
        assert await store.get(checkpoint_id) is None
        runner = rk.Runner(rk.BaseAgent("x"), checkpoint_store=store)
        with pytest.raises(errors.CheckpointNotFoundError):
            await runner.invoke_resume(checkpoint_id)
