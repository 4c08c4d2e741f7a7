"""A process saving one artifact name at the same moment as others (test_file_artifacts).

``python -m tests.services.artifact_worker ROOT DIR WORKER COUNT``

Writes ``DIR/WORKER.ready``, waits for ``DIR/go``, then saves ``COUNT`` versions of the artifact
``race.txt`` (session ``s-1`` of user ``alice`` in app ``shop``) under ``ROOT``, each holding
``WORKER-<i>``, all at once. Writes ``{"<version>": "WORKER-<i>", ...}`` to ``DIR/WORKER.json``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from relaykit.artifacts import FileArtifactService
from relaykit.messages import Blob


async def main(root: str, folder: Path, worker: str, count: int) -> None:
    store = FileArtifactService(root)
    (folder / f"{worker}.ready").touch()
    deadline = time.monotonic() + 60
    while not (folder / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{worker}: nobody said go")
        await asyncio.sleep(0.002)
    contents = [f"{worker}-{i}" for i in range(count)]
    versions = await asyncio.gather(
        *(
            store.save("shop", "alice", "s-1", "race.txt", Blob("text/plain", content.encode()))
            for content in contents
        )
    )
    saved = dict(zip(map(str, versions), contents, strict=True))
    (folder / f"{worker}.json").write_text(json.dumps(saved))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
