"""The file artifact store: one file per version under a root folder, safe across processes.

Layout::

    <root>/<app>/<user>/<session id, or "_user" for user: names>/<name>/<version>
    <root>/<app>/<user>/<session id, or "_user" for user: names>/<name>/<version>.json

``<version>`` holds the blob's bytes; ``<version>.json`` (the *sidecar*) holds its mime type,
its name and its size, as JSON. How a save stays safe:

1. the bytes and the sidecar are written to temporary files (``.tmp-*``) in the name's folder
   and flushed to disk;
2. the version number is *claimed* by creating the file ``<version>`` with ``O_CREAT | O_EXCL``:
   of two processes saving the same name at once, exactly one creates it and the other moves on
   to the next number;
3. the bytes replace the (empty) claimed file, then the sidecar is moved into place with
   ``os.replace`` — and only a version with its sidecar exists for readers. A save that dies
   half-way leaves an invisible claim (its number is skipped) or a temporary file, never a
   version with partial content.

A delete first renames the name's folder to ``.deleted-*`` (one atomic step: the name is gone at
once for everybody), then removes it. Files and folders whose names start with ``.`` are never
artifacts or versions, which is why names may not start with one.

Names and ids cannot leave their folder (``validate_artifact_name``), and every path is resolved
before use: a symbolic link leading outside the root is refused with ``ArtifactStoreError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from relaykit.artifacts.base import (
    RESERVED_SESSION_ID,
    check_blob,
    check_version,
    describe_artifact,
    is_user_artifact,
    validate_artifact_name,
    validate_artifact_scope,
)
from relaykit.errors import ArtifactNameError, ArtifactStoreError
from relaykit.messages import Blob

__all__ = ["FileArtifactService"]

#: The sidecar format this module writes and reads.
_SIDECAR_FORMAT = 1
#: A version file name: a decimal number without leading zeros (so "007" is never version 7).
_VERSION = re.compile(r"0|[1-9][0-9]*")
#: A save that finds its folder deleted under it starts again this many times at most.
_SAVE_ATTEMPTS = 5
_BINARY = getattr(os, "O_BINARY", 0)  # Windows would otherwise translate line endings


@contextlib.contextmanager
def _storage_errors(operation: str, what: str) -> Iterator[None]:
    """Report a file-system failure as ``ArtifactStoreError`` naming the operation."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ArtifactStoreError(f"could not {operation} {what}: {reason}") from exc


def _write_temp(folder: Path, data: bytes) -> Path:
    """A new ``.tmp-*`` file in ``folder`` holding ``data``, flushed to disk."""
    path = folder / f".tmp-{uuid.uuid4().hex}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY, 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            # On disk before it is renamed into place: after a power cut a version is complete
            # or absent, not an empty file with a sidecar.
            os.fsync(file.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return path


def _fsync_folder(folder: Path) -> None:
    """Make the renames in ``folder`` durable (POSIX only: Windows cannot open a folder)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse to sync a folder; the renames happened all the same
    finally:
        os.close(fd)


def _entries(folder: Path) -> list[str]:
    """The entries of ``folder``; none if it does not exist or is not a folder."""
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _committed_versions(folder: Path) -> list[int]:
    """The versions in a name's folder that have their sidecar (the others are not done)."""
    return sorted(
        int(entry[:-5])
        for entry in _entries(folder)
        if entry.endswith(".json") and _VERSION.fullmatch(entry[:-5])
    )


class FileArtifactService:
    """Artifacts as files under ``root``; several processes may share one root.

    The root is created on the first save. File I/O runs in a worker thread
    (``asyncio.to_thread``), never on the event loop.

    >>> import asyncio, tempfile
    >>> from relaykit import Blob
    >>> artifacts = FileArtifactService(tempfile.mkdtemp())
    >>> async def demo():
    ...     version = await artifacts.save("shop", "alice", "s-1", "user:avatar.png",
    ...                                    Blob("image/png", b"\\x89PNG"))
    ...     names = await artifacts.list_names("shop", "alice", "another-session")
    ...     return version, names
    >>> asyncio.run(demo())
    (0, ['user:avatar.png'])
    """

    def __init__(self, root: str | Path) -> None:
        #: The folder that holds every app's artifacts.
        self.root = Path(root)

    # -- paths ---------------------------------------------------------------------------------
    def _scope_folder(self, app_name: str, user_id: str, session_id: str, name: str) -> Path:
        scope = RESERVED_SESSION_ID if is_user_artifact(name) else session_id
        return self.root / app_name / user_id / scope

    def _require_inside(self, path: Path, what: str, operation: str) -> None:
        """Refuse ``path`` if a symbolic link on its way leads outside the root.

        Names cannot escape (they are checked), but links can be placed in the root by anyone
        who can write there. The check and the use are not one atomic step: this guards
        against links that are there, not against someone racing to swap one in.
        """
        root = os.path.realpath(self.root)
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root:
            raise ArtifactStoreError(
                f"refusing to {operation} {what}: a symbolic link on its path leads outside "
                f"the artifact store's root {str(self.root)!r}; remove the link"
            )

    # -- save ----------------------------------------------------------------------------------
    async def save(
        self, app_name: str, user_id: str, session_id: str, name: str, blob: Blob
    ) -> int:
        """Store ``blob`` as the next version of ``name``; returns that version."""
        validate_artifact_scope(app_name, user_id, session_id)
        validate_artifact_name(name)
        copy = check_blob(blob)
        return await asyncio.to_thread(self._save, app_name, user_id, session_id, name, copy)

    def _save(self, app_name: str, user_id: str, session_id: str, name: str, blob: Blob) -> int:
        what = describe_artifact(app_name, user_id, session_id, name)
        folder = self._scope_folder(app_name, user_id, session_id, name) / name
        # Checked before the folders are made, so no folder is created outside the root.
        self._require_inside(folder, what, "save")
        sidecar = json.dumps(
            {
                "format": _SIDECAR_FORMAT,
                "mime_type": blob.mime_type,
                "name": blob.name,
                "size": len(blob.data),
            }
        ).encode("ascii")
        with _storage_errors("save", what):
            for attempt in range(_SAVE_ATTEMPTS):
                try:
                    return self._save_once(folder, blob.data, sidecar)
                except FileNotFoundError:
                    # A delete moved the folder away while this save ran: the save comes after
                    # the delete, into a fresh folder.
                    if attempt == _SAVE_ATTEMPTS - 1:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _save_once(folder: Path, data: bytes, sidecar: bytes) -> int:
        folder.mkdir(parents=True, exist_ok=True)
        leftovers: list[Path] = []  # temporary files to remove if the save fails
        try:
            data_tmp = _write_temp(folder, data)
            leftovers.append(data_tmp)
            sidecar_tmp = _write_temp(folder, sidecar)
            leftovers.append(sidecar_tmp)
            version = _claim_version(folder)
            os.replace(data_tmp, folder / str(version))
            leftovers.remove(data_tmp)
            # The sidecar comes last: its arrival is what makes the version exist.
            os.replace(sidecar_tmp, folder / f"{version}.json")
            leftovers.remove(sidecar_tmp)
            _fsync_folder(folder)
            return version
        finally:
            for leftover in leftovers:
                with contextlib.suppress(OSError):
                    os.unlink(leftover)

    # -- load ----------------------------------------------------------------------------------
    async def load(
        self, app_name: str, user_id: str, session_id: str, name: str, version: int | None = None
    ) -> Blob | None:
        """Version ``version`` of ``name`` (the latest when ``None``), or ``None``.

        ``ArtifactStoreError`` if the version's sidecar is corrupt or its bytes do not match
        it, or if a link leads outside the root.
        """
        validate_artifact_scope(app_name, user_id, session_id)
        validate_artifact_name(name)
        wanted = check_version(version)
        return await asyncio.to_thread(self._load, app_name, user_id, session_id, name, wanted)

    def _load(
        self, app_name: str, user_id: str, session_id: str, name: str, version: int | None
    ) -> Blob | None:
        what = describe_artifact(app_name, user_id, session_id, name)
        folder = self._scope_folder(app_name, user_id, session_id, name) / name
        with _storage_errors("load", what):
            self._require_inside(folder, what, "load")
            if version is None:
                versions = _committed_versions(folder)
                if not versions:
                    return None
                version = versions[-1]
            sidecar_path = folder / f"{version}.json"
            data_path = folder / str(version)
            what_version = f"version {version} of {what}"
            self._require_inside(sidecar_path, what_version, "load")
            self._require_inside(data_path, what_version, "load")
            try:
                raw = sidecar_path.read_bytes()
            except (FileNotFoundError, NotADirectoryError):
                return None
            mime_type, blob_name, size = _parse_sidecar(raw, what_version)
            try:
                data = data_path.read_bytes()
            except FileNotFoundError:
                if not sidecar_path.exists():
                    return None  # deleted while we read it
                raise ArtifactStoreError(
                    f"{what_version} has no data file (only its metadata file): delete the "
                    "artifact, or restore the file from a backup"
                ) from None
        if len(data) != size:
            raise ArtifactStoreError(
                f"{what_version} is damaged: its data file has {len(data)} bytes where its "
                f"metadata file says {size}; delete the artifact, or restore it from a backup"
            )
        return Blob(mime_type, data, blob_name)

    # -- listing -------------------------------------------------------------------------------
    async def list_names(self, app_name: str, user_id: str, session_id: str) -> list[str]:
        """The session's names and the user's ``user:`` names, sorted."""
        validate_artifact_scope(app_name, user_id, session_id)
        return await asyncio.to_thread(self._list_names, app_name, user_id, session_id)

    def _list_names(self, app_name: str, user_id: str, session_id: str) -> list[str]:
        user_folder = self.root / app_name / user_id
        what = f"the artifacts of session {session_id!r} (user {user_id!r}, app {app_name!r})"
        names: list[str] = []
        with _storage_errors("list", what):
            for scope in (session_id, RESERVED_SESSION_ID):
                folder = user_folder / scope
                self._require_inside(folder, what, "list")
                for entry in _entries(folder):
                    if is_user_artifact(entry) != (scope == RESERVED_SESSION_ID):
                        continue  # not something this store wrote
                    try:
                        validate_artifact_name(entry)
                    except ArtifactNameError:
                        continue  # temporary and deleted folders (".tmp-*", ".deleted-*")
                    self._require_inside(folder / entry, what, "list")
                    # A name whose first save has not finished has no version yet.
                    if _committed_versions(folder / entry):
                        names.append(entry)
        return sorted(names)

    async def list_versions(
        self, app_name: str, user_id: str, session_id: str, name: str
    ) -> list[int]:
        """The versions of ``name``, ascending (empty when there is none)."""
        validate_artifact_scope(app_name, user_id, session_id)
        validate_artifact_name(name)
        return await asyncio.to_thread(self._list_versions, app_name, user_id, session_id, name)

    def _list_versions(self, app_name: str, user_id: str, session_id: str, name: str) -> list[int]:
        what = describe_artifact(app_name, user_id, session_id, name)
        folder = self._scope_folder(app_name, user_id, session_id, name) / name
        with _storage_errors("list the versions of", what):
            self._require_inside(folder, what, "list the versions of")
            return _committed_versions(folder)

    # -- delete --------------------------------------------------------------------------------
    async def delete(self, app_name: str, user_id: str, session_id: str, name: str) -> None:
        """Forget every version of ``name`` (no error if there is none)."""
        validate_artifact_scope(app_name, user_id, session_id)
        validate_artifact_name(name)
        await asyncio.to_thread(self._delete, app_name, user_id, session_id, name)

    def _delete(self, app_name: str, user_id: str, session_id: str, name: str) -> None:
        what = describe_artifact(app_name, user_id, session_id, name)
        scope_folder = self._scope_folder(app_name, user_id, session_id, name)
        with _storage_errors("delete", what):
            # The name's folder itself may be a link: it is renamed and unlinked, never
            # followed, so only its parent has to be inside the root.
            self._require_inside(scope_folder, what, "delete")
            trash = scope_folder / f".deleted-{uuid.uuid4().hex}"
            try:
                os.rename(scope_folder / name, trash)
            except (FileNotFoundError, NotADirectoryError):
                return
            if trash.is_symlink() or not trash.is_dir():
                os.unlink(trash)
            else:
                # Readers no longer see the name; what cannot be removed now stays hidden.
                shutil.rmtree(trash, ignore_errors=True)


def _claim_version(folder: Path) -> int:
    """Claim the next free version number of a name's folder by creating its file, atomically.

    ``O_EXCL`` makes the file system the referee: of two processes creating the same number,
    one fails with ``FileExistsError`` and tries the next.
    """
    taken = [
        int(stem)
        for entry in _entries(folder)
        if _VERSION.fullmatch(stem := entry.removesuffix(".json"))
    ]
    version = max(taken, default=-1) + 1
    while True:
        try:
            fd = os.open(
                folder / str(version), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY, 0o666
            )
        except FileExistsError:
            version += 1
            continue
        os.close(fd)
        return version


def _parse_sidecar(raw: bytes, what_version: str) -> tuple[str, str | None, int]:
    """(mime type, blob name, size) from a sidecar, or ``ArtifactStoreError`` naming why not.

    The message says what is wrong with the file, never what it holds.
    """

    def corrupt(reason: str) -> ArtifactStoreError:
        return ArtifactStoreError(
            f"{what_version} has a corrupt metadata file ({reason}); delete the artifact, "
            "or restore the file from a backup"
        )

    try:
        document: Any = json.loads(raw)
    except (ValueError, RecursionError):
        raise corrupt("it is not valid JSON") from None
    if not isinstance(document, dict):
        raise corrupt("it is not a JSON object")
    found = document.get("format")
    if isinstance(found, int) and not isinstance(found, bool) and found > _SIDECAR_FORMAT:
        raise ArtifactStoreError(
            f"{what_version} was saved by a newer relaykit (metadata format {found}, this "
            f"version reads {_SIDECAR_FORMAT}); upgrade relaykit to read it"
        )
    if found != _SIDECAR_FORMAT:
        raise corrupt("its format is missing or unknown")
    mime_type, blob_name, size = (document.get(key) for key in ("mime_type", "name", "size"))
    if not isinstance(mime_type, str):
        raise corrupt("its mime_type is missing or not a string")
    if blob_name is not None and not isinstance(blob_name, str):
        raise corrupt("its name is not a string")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise corrupt("its size is missing or not a number of bytes")
    return mime_type, blob_name, size
