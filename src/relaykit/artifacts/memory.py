"""The in-memory artifact store: for tests and single-process apps."""

from __future__ import annotations

from relaykit.artifacts.base import (
    check_blob,
    check_version,
    is_user_artifact,
    validate_artifact_name,
    validate_artifact_scope,
)
from relaykit.messages import Blob

__all__ = ["InMemoryArtifactService"]

# (app name, user id, session id) — or None instead of the session id for ``user:`` names.
_Scope = tuple[str, str, str | None]


class InMemoryArtifactService:
    """Artifacts in a dict: nothing survives the process.

    Every method runs to its end without awaiting, so concurrent tasks never see a save half
    done, and two tasks saving the same name get distinct versions. Blobs are copied in and out:
    changing a loaded ``Blob`` changes nothing stored.

    >>> import asyncio
    >>> from relaykit import Blob
    >>> artifacts = InMemoryArtifactService()
    >>> async def demo():
    ...     await artifacts.save("shop", "alice", "s-1", "notes.txt", Blob("text/plain", b"v0"))
    ...     await artifacts.save("shop", "alice", "s-1", "notes.txt", Blob("text/plain", b"v1"))
    ...     first = await artifacts.load("shop", "alice", "s-1", "notes.txt", version=0)
    ...     latest = await artifacts.load("shop", "alice", "s-1", "notes.txt")
    ...     return first.data, latest.data
    >>> asyncio.run(demo())
    (b'v0', b'v1')
    """

    def __init__(self) -> None:
        # scope -> name -> versions; version n is index n (a delete drops all of a name's
        # versions at once, so the list never has holes).
        self._artifacts: dict[_Scope, dict[str, list[Blob]]] = {}

    @staticmethod
    def _scope(app_name: str, user_id: str, session_id: str, name: str) -> _Scope:
        validate_artifact_scope(app_name, user_id, session_id)
        validate_artifact_name(name)
        return (app_name, user_id, None if is_user_artifact(name) else session_id)

    async def save(
        self, app_name: str, user_id: str, session_id: str, name: str, blob: Blob
    ) -> int:
        """Store a copy of ``blob`` as the next version of ``name``; returns that version."""
        scope = self._scope(app_name, user_id, session_id, name)
        copy = check_blob(blob)
        versions = self._artifacts.setdefault(scope, {}).setdefault(name, [])
        versions.append(copy)
        return len(versions) - 1

    async def load(
        self, app_name: str, user_id: str, session_id: str, name: str, version: int | None = None
    ) -> Blob | None:
        """A copy of version ``version`` of ``name`` (the latest when ``None``), or ``None``."""
        scope = self._scope(app_name, user_id, session_id, name)
        wanted = check_version(version)
        versions = self._artifacts.get(scope, {}).get(name)
        if not versions:
            return None
        if wanted is None:
            wanted = len(versions) - 1
        if wanted >= len(versions):
            return None
        stored = versions[wanted]
        return Blob(stored.mime_type, stored.data, stored.name)

    async def list_names(self, app_name: str, user_id: str, session_id: str) -> list[str]:
        """The session's names and the user's ``user:`` names, sorted."""
        validate_artifact_scope(app_name, user_id, session_id)
        own = self._artifacts.get((app_name, user_id, session_id), {})
        shared = self._artifacts.get((app_name, user_id, None), {})
        return sorted([*own, *shared])

    async def list_versions(
        self, app_name: str, user_id: str, session_id: str, name: str
    ) -> list[int]:
        """The versions of ``name``, ascending (empty when there is none)."""
        scope = self._scope(app_name, user_id, session_id, name)
        return list(range(len(self._artifacts.get(scope, {}).get(name, []))))

    async def delete(self, app_name: str, user_id: str, session_id: str, name: str) -> None:
        """Forget every version of ``name`` (no error if there is none)."""
        scope = self._scope(app_name, user_id, session_id, name)
        names = self._artifacts.get(scope)
        if names is None:
            return
        names.pop(name, None)
        if not names:
            del self._artifacts[scope]
