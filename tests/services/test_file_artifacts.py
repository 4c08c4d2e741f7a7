"""What only the file artifact store does: its layout on disk, atomic saves, processes saving
the same name at once, corrupt metadata, and links leading outside its root."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from relaykit.artifacts import FileArtifactService
from relaykit.errors import ArtifactStoreError
from relaykit.messages import Blob
from tests.services.conftest import files_under

ROOT = Path(__file__).resolve().parents[2]
APP, USER, SESSION = "shop", "alice", "s-1"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "artifacts"
    folder.mkdir()
    return folder


@pytest.fixture
def store(root: Path) -> FileArtifactService:
    return FileArtifactService(root)


def symlink(link: Path, target: Path) -> None:
    """``link`` -> ``target``, or skip where the platform or user may not make links."""
    try:
        link.symlink_to(target, target_is_directory=target.is_dir())
    except (OSError, NotImplementedError) as exc:
        pytest.skip(f"cannot create symbolic links here: {exc}")


async def test_the_layout_on_disk_is_one_data_file_and_one_json_sidecar_per_version(
    store: FileArtifactService, root: Path
) -> None:
    await store.save(APP, USER, SESSION, "notes.txt", Blob("text/plain", b"v0", "notes.txt"))
    await store.save(APP, USER, SESSION, "notes.txt", Blob("text/markdown", b"# v1"))
    await store.save(APP, USER, SESSION, "user:avatar.png", Blob("image/png", b"\x89PNG"))
    assert files_under(root) == [
        "shop",
        "shop/alice",
        "shop/alice/_user",
        "shop/alice/_user/user:avatar.png",
        "shop/alice/_user/user:avatar.png/0",
        "shop/alice/_user/user:avatar.png/0.json",
        "shop/alice/s-1",
        "shop/alice/s-1/notes.txt",
        "shop/alice/s-1/notes.txt/0",
        "shop/alice/s-1/notes.txt/0.json",
        "shop/alice/s-1/notes.txt/1",
        "shop/alice/s-1/notes.txt/1.json",
    ]
    folder = root / "shop/alice/s-1/notes.txt"
    assert (folder / "1").read_bytes() == b"# v1"
    assert json.loads((folder / "0.json").read_text()) == {
        "format": 1,
        "mime_type": "text/plain",
        "name": "notes.txt",
        "size": 2,
    }
    assert json.loads((folder / "1.json").read_text())["name"] is None


async def test_a_new_service_on_the_same_root_finds_the_artifacts(root: Path) -> None:
    await FileArtifactService(root).save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"x"))
    again = FileArtifactService(str(root))
    assert await again.load(APP, USER, SESSION, "a.txt") == Blob("text/plain", b"x")
    assert await again.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"y")) == 1


async def test_a_save_that_died_half_way_is_never_a_version(
    store: FileArtifactService, root: Path
) -> None:
    await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"done"))
    folder = root / APP / USER / SESSION / "a.txt"
    # What a crash leaves: a claimed number without sidecar, temporary files, a half-removed
    # deleted folder.
    (folder / "1").write_bytes(b"half wri")
    (folder / ".tmp-0123").write_bytes(b"partial")
    (root / APP / USER / SESSION / ".deleted-0123").mkdir()
    (root / APP / USER / SESSION / "b.txt").mkdir()  # a first save that never finished
    assert await store.list_versions(APP, USER, SESSION, "a.txt") == [0]
    assert await store.load(APP, USER, SESSION, "a.txt") == Blob("text/plain", b"done")
    assert await store.load(APP, USER, SESSION, "a.txt", version=1) is None
    assert await store.list_names(APP, USER, SESSION) == ["a.txt"]
    # The claimed number stays taken: the next save skips it.
    assert await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"next")) == 2
    assert await store.list_versions(APP, USER, SESSION, "a.txt") == [0, 2]


async def test_entries_that_are_not_versions_are_ignored(
    store: FileArtifactService, root: Path
) -> None:
    await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"v0"))
    folder = root / APP / USER / SESSION / "a.txt"
    for junk in ["007", "007.json", "x.json", "1.json.bak", "-1.json", "１.json"]:
        (folder / junk).write_text("{}")
    assert await store.list_versions(APP, USER, SESSION, "a.txt") == [0]
    assert await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"v1")) == 1


async def test_a_save_leaves_no_temporary_files(store: FileArtifactService, root: Path) -> None:
    await asyncio.gather(
        *(store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"x")) for _ in range(10))
    )
    await store.delete(APP, USER, SESSION, "a.txt")
    assert files_under(root) == ["shop", "shop/alice", "shop/alice/s-1"]


async def test_file_io_runs_off_the_event_loop(
    store: FileArtifactService, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: set[int] = set()
    real_open = os.open

    def recording_open(*args: Any, **kwargs: Any) -> int:
        threads.add(threading.get_ident())
        return real_open(*args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"x"))
    assert threads
    assert threading.get_ident() not in threads


async def test_two_processes_saving_the_same_name_get_distinct_versions(
    root: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "race"
    folder.mkdir()
    workers, count = ["p1", "p2"], 25
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.services.artifact_worker",
            str(root),
            str(folder),
            worker,
            str(count),
            cwd=ROOT,
            stderr=asyncio.subprocess.PIPE,
        )
        for worker in workers
    ]
    try:
        for _ in range(6000):  # up to a minute for the interpreters to start
            if all((folder / f"{w}.ready").exists() for w in workers):
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

    saved = [json.loads((folder / f"{w}.json").read_text()) for w in workers]
    versions = [int(v) for outcome in saved for v in outcome]
    assert sorted(versions) == list(range(len(workers) * count))  # each number exactly once
    store = FileArtifactService(root)
    for outcome in saved:
        for version, content in outcome.items():
            loaded = await store.load(APP, USER, SESSION, "race.txt", int(version))
            assert loaded == Blob("text/plain", content.encode())


SECRET = "s3cr3t-content"
CORRUPT_SIDECARS = {
    "not JSON": b"{'mime_type': '" + SECRET.encode() + b"'",
    "binary": b"\xff\xfe\x00" + SECRET.encode(),
    "empty": b"",
    "not an object": json.dumps([SECRET]).encode(),
    "no format": json.dumps({"mime_type": SECRET, "name": None, "size": 2}).encode(),
    "mime_type not a string": json.dumps(
        {"format": 1, "mime_type": [SECRET], "name": None, "size": 2}
    ).encode(),
    "name not a string": json.dumps(
        {"format": 1, "mime_type": "text/plain", "name": {"x": SECRET}, "size": 2}
    ).encode(),
    "negative size": json.dumps(
        {"format": 1, "mime_type": SECRET, "name": None, "size": -1}
    ).encode(),
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize("sidecar", list(CORRUPT_SIDECARS.values()), ids=list(CORRUPT_SIDECARS))
async def test_a_corrupt_sidecar_is_a_clear_error_naming_the_artifact_and_version(
    store: FileArtifactService, root: Path, sidecar: bytes
) -> None:
    await store.save(APP, USER, SESSION, "notes.txt", Blob("text/plain", SECRET.encode()))
    await store.save(APP, USER, SESSION, "notes.txt", Blob("text/plain", b"v1"))
    (root / APP / USER / SESSION / "notes.txt" / "1.json").write_bytes(sidecar)
    for version in (None, 1):
        with pytest.raises(ArtifactStoreError) as caught:
            await store.load(APP, USER, SESSION, "notes.txt", version)
        message = str(caught.value)
        assert "version 1 of artifact 'notes.txt' of session 's-1'" in message
        assert "corrupt metadata file" in message
        assert SECRET not in message
    # The other versions stay readable.
    assert await store.load(APP, USER, SESSION, "notes.txt", 0) == Blob(
        "text/plain", SECRET.encode()
    )


async def test_a_sidecar_from_a_newer_relaykit_says_to_upgrade(
    store: FileArtifactService, root: Path
) -> None:
    await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"v0"))
    (root / APP / USER / SESSION / "a.txt" / "0.json").write_text(json.dumps({"format": 2}))
    with pytest.raises(ArtifactStoreError, match=r"newer relaykit .*upgrade relaykit"):
        await store.load(APP, USER, SESSION, "a.txt")


async def test_data_that_does_not_match_its_sidecar_is_an_error(
    store: FileArtifactService, root: Path
) -> None:
    await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", SECRET.encode()))
    folder = root / APP / USER / SESSION / "a.txt"
    (folder / "0").write_bytes(SECRET.encode()[:3])
    with pytest.raises(
        ArtifactStoreError,
        match=r"version 0 of artifact 'a\.txt'.* is damaged: "
        r"its data file has 3 bytes where its metadata file says 14",
    ) as caught:
        await store.load(APP, USER, SESSION, "a.txt")
    assert SECRET[:3] not in str(caught.value)
    (folder / "0").unlink()
    with pytest.raises(ArtifactStoreError, match=r"version 0 of artifact 'a\.txt'.* no data file"):
        await store.load(APP, USER, SESSION, "a.txt", 0)


async def test_a_linked_name_folder_leading_outside_the_root_is_refused(
    store: FileArtifactService, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "0").write_bytes(SECRET.encode())
    (outside / "0.json").write_text(
        json.dumps({"format": 1, "mime_type": "text/plain", "name": None, "size": len(SECRET)})
    )
    (root / APP / USER / SESSION).mkdir(parents=True)
    symlink(root / APP / USER / SESSION / "escape", outside)
    for call in [
        store.load(APP, USER, SESSION, "escape"),
        store.load(APP, USER, SESSION, "escape", 0),
        store.list_versions(APP, USER, SESSION, "escape"),
        store.list_names(APP, USER, SESSION),
        store.save(APP, USER, SESSION, "escape", Blob("text/plain", b"planted")),
    ]:
        with pytest.raises(ArtifactStoreError, match="leads outside the artifact store's root"):
            await call
    assert sorted(os.listdir(outside)) == ["0", "0.json"]  # nothing written through the link
    # Deleting removes the link itself, never what it points to.
    await store.delete(APP, USER, SESSION, "escape")
    assert not (root / APP / USER / SESSION / "escape").is_symlink()
    assert (outside / "0").read_bytes() == SECRET.encode()


async def test_a_linked_version_file_leading_outside_the_root_is_refused(
    store: FileArtifactService, root: Path, tmp_path: Path
) -> None:
    await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"12345678901234"))
    outside = tmp_path / "secret.txt"
    outside.write_text(SECRET)
    data = root / APP / USER / SESSION / "a.txt" / "0"
    data.unlink()
    symlink(data, outside)
    with pytest.raises(ArtifactStoreError, match="leads outside") as caught:
        await store.load(APP, USER, SESSION, "a.txt")
    assert SECRET not in str(caught.value)


async def test_a_linked_session_folder_leading_outside_the_root_is_refused(
    store: FileArtifactService, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / APP / USER).mkdir(parents=True)
    symlink(root / APP / USER / SESSION, outside)
    with pytest.raises(ArtifactStoreError, match="leads outside"):
        await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"planted"))
    with pytest.raises(ArtifactStoreError, match="leads outside"):
        await store.delete(APP, USER, SESSION, "a.txt")
    with pytest.raises(ArtifactStoreError, match="leads outside"):
        await store.list_names(APP, USER, SESSION)
    assert os.listdir(outside) == []


async def test_links_that_stay_inside_the_root_are_followed(
    store: FileArtifactService, root: Path
) -> None:
    await store.save(APP, USER, "s-1", "a.txt", Blob("text/plain", b"shared"))
    symlink(root / APP / USER / "s-2", root / APP / USER / "s-1")
    assert await store.load(APP, USER, "s-2", "a.txt") == Blob("text/plain", b"shared")


async def test_a_storage_failure_is_an_artifact_store_error(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("I am a file")
    store = FileArtifactService(not_a_folder)
    with pytest.raises(
        ArtifactStoreError, match=r"could not save artifact 'a\.txt' of session 's-1'"
    ):
        await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", b"x"))
    assert await store.load(APP, USER, SESSION, "a.txt") is None
