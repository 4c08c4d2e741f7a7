"""Several processes on one database at the same moment (D21): claims have one winner per
checkpoint, and a cold database (no table yet) saves every checkpoint of every process.

The workers (``store_worker``) wait at a barrier (a file) until all of them are ready, so their
bursts overlap.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from relaykit.checkpoints.database import DatabaseCheckpointStore
from tests.checkpoints.support import fetch

ROOT = Path(__file__).resolve().parents[2]


async def run_workers(
    mode: str, url: str, folder: Path, names: list[str], count: int
) -> dict[str, dict[str, list[str]]]:
    """Start one worker per name, say go once all are ready, return their outcomes by name."""
    folder.mkdir()
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.checkpoints.store_worker",
            mode,
            url,
            str(folder),
            name,
            str(count),
            cwd=ROOT,
            stderr=asyncio.subprocess.PIPE,
        )
        for name in names
    ]
    try:
        for _ in range(6000):  # up to a minute for the interpreters to start
            if all((folder / f"{name}.ready").exists() for name in names):
                break
            if any(proc.returncode is not None for proc in procs):
                break
            await asyncio.sleep(0.01)
        (folder / "go").touch()
        for proc in procs:
            _, stderr = await asyncio.wait_for(proc.communicate(), timeout=120)
            assert proc.returncode == 0, stderr.decode()
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    return {name: json.loads((folder / f"{name}.json").read_text()) for name in names}


async def test_processes_racing_to_claim_get_one_winner_per_checkpoint(
    database_url: str, tmp_path: Path
) -> None:
    count = 20
    async with DatabaseCheckpointStore(database_url) as store:
        for i in range(count):
            await store.set(f"cp-{i}", f"doc {i}".encode())
    names = ["p1", "p2", "p3", "p4"]
    outcomes = await run_workers("claim", database_url, tmp_path / "race", names, count)

    assert [o["failed"] for o in outcomes.values()] == [[]] * len(names)
    winners = {
        checkpoint_id: name
        for name, outcome in outcomes.items()
        for checkpoint_id in outcome["won"]
    }
    won = sorted(checkpoint_id for outcome in outcomes.values() for checkpoint_id in outcome["won"])
    assert won == sorted(f"cp-{i}" for i in range(count))  # each exactly once
    for name, outcome in outcomes.items():
        assert sorted(outcome["won"] + outcome["busy"]) == sorted(winners)
        assert all(winners[checkpoint_id] != name for checkpoint_id in outcome["busy"])
    rows = await fetch(database_url, "SELECT checkpoint_id, claim_owner FROM relaykit_checkpoints")
    assert dict(rows) == winners


async def test_processes_starting_on_a_cold_database_save_every_checkpoint(
    database_url: str, tmp_path: Path
) -> None:
    count = 300
    names = ["p1", "p2", "p3"]
    outcomes = await run_workers("save", database_url, tmp_path / "burst", names, count)

    assert [o["failed"] for o in outcomes.values()] == [[]] * len(names)
    rows = await fetch(database_url, "SELECT checkpoint_id, data FROM relaykit_checkpoints")
    assert {checkpoint_id: bytes(data) for checkpoint_id, data in rows} == {
        f"{name}-{i}": f"{name} {i}".encode() for name in names for i in range(count)
    }
    assert await fetch(database_url, "SELECT count(*) FROM relaykit_alembic_version") == [(1,)]
