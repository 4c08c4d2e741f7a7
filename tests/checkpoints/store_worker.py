"""A process that uses a DatabaseCheckpointStore at the same moment as others (test_processes).

``python -m tests.checkpoints.store_worker MODE URL DIR NAME COUNT``

- ``claim``: opens the store, then claims checkpoints ``cp-0`` .. ``cp-<COUNT-1>`` as owner
  ``NAME``, all at once; writes ``{"won": [...], "busy": [...], "failed": [...]}``.
- ``save``: saves ``COUNT`` new checkpoints ``NAME-<i>`` with its first use of the store (the
  database may have no table yet); writes ``{"failed": [...]}``.

Before the burst each worker writes ``DIR/NAME.ready`` and waits for ``DIR/go``, so that the
processes really run at the same time. The result goes to ``DIR/NAME.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from relaykit.checkpoints.database import DatabaseCheckpointStore
from relaykit.errors import CheckpointBusyError


async def _wait_for_go(folder: Path, name: str) -> None:
    (folder / f"{name}.ready").touch()
    deadline = time.monotonic() + 60
    while not (folder / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{name}: nobody said go")
        await asyncio.sleep(0.002)


async def claim(
    store: DatabaseCheckpointStore, folder: Path, name: str, count: int
) -> dict[str, list[str]]:
    await store.open()  # connected and migrated: the race is about the claims only
    await _wait_for_go(folder, name)
    ids = [f"cp-{i}" for i in range(count)]
    results = await asyncio.gather(*(store.claim(i, name, 60) for i in ids), return_exceptions=True)
    outcome: dict[str, list[str]] = {"won": [], "busy": [], "failed": []}
    for checkpoint_id, result in zip(ids, results, strict=True):
        if isinstance(result, CheckpointBusyError):
            outcome["busy"].append(checkpoint_id)
        elif isinstance(result, BaseException):
            outcome["failed"].append(f"{checkpoint_id}: {result!r}")
        else:
            outcome["won"].append(checkpoint_id)
    return outcome


async def save(
    store: DatabaseCheckpointStore, folder: Path, name: str, count: int
) -> dict[str, list[str]]:
    await _wait_for_go(folder, name)
    results = await asyncio.gather(
        *(store.set(f"{name}-{i}", f"{name} {i}".encode()) for i in range(count)),
        return_exceptions=True,
    )
    return {"failed": [repr(result) for result in results if result is not None]}


async def main(mode: str, url: str, folder: Path, name: str, count: int) -> None:
    store = DatabaseCheckpointStore(url)  # not "async with": that would open it before "go"
    try:
        outcome = await (claim if mode == "claim" else save)(store, folder, name, count)
    finally:
        await store.aclose()
    tmp = folder / f"{name}.tmp"
    tmp.write_text(json.dumps(outcome))
    os.replace(tmp, folder / f"{name}.json")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4], int(sys.argv[5])))
