"""The ArtifactService protocol and the rules every artifact store shares.

An artifact is a named, versioned ``Blob`` (a report, an image, a file a tool produced) kept for
one session of one user of one app. Each ``save`` adds a version — 0, 1, 2, ... per name — and
``load`` returns the latest one or a chosen one. Names that start with ``user:`` belong to the
user instead of the session: every session of that user sees them.

Names and ids are checked here, before any store touches storage, so that every store accepts and
refuses the same ones. The file store turns them into folder names, so anything that could leave
its folder is refused: path separators, a leading dot (``.``, ``..``, hidden files), drive
letters, NUL, and names longer than a file name may be.
"""

from __future__ import annotations

import re
from typing import Protocol, runtime_checkable

from relaykit.errors import ArtifactNameError
from relaykit.messages import Blob

__all__ = [
    "MAX_ARTIFACT_NAME_LENGTH",
    "RESERVED_SESSION_ID",
    "USER_PREFIX",
    "ArtifactService",
    "check_blob",
    "check_version",
    "describe_artifact",
    "is_user_artifact",
    "validate_artifact_name",
    "validate_artifact_scope",
]

#: Longest artifact name, app name, user id or session id, in characters and in UTF-8 bytes.
MAX_ARTIFACT_NAME_LENGTH = 255
#: Names with this prefix are shared by all sessions of a user.
USER_PREFIX = "user:"
#: The file store keeps a user's ``user:`` artifacts in a folder of this name, next to the
#: user's session folders, so no session may take this id.
RESERVED_SESSION_ID = "_user"

_DRIVE_LETTER = re.compile(r"[A-Za-z]:")


def _shown(value: str) -> str:
    """``value`` quoted for an error message, cut short (a 10,000-character name helps nobody)."""
    return repr(value) if len(value) <= 40 else repr(value[:40]) + "..."


def _component_problem(value: str) -> str | None:
    """Why ``value`` cannot be one file or folder name inside the store, or None if it can."""
    if not value:
        return "is empty"
    if len(value) > MAX_ARTIFACT_NAME_LENGTH:
        return f"has {len(value)} characters (at most {MAX_ARTIFACT_NAME_LENGTH})"
    if "\x00" in value:
        return "contains a NUL character"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return "does not encode as UTF-8 (it contains an unpaired surrogate)"
    if size > MAX_ARTIFACT_NAME_LENGTH:
        # File systems limit a file name in bytes, not characters: refuse it here rather than
        # half-way through a save of the file store.
        return f"takes {size} bytes in UTF-8 (at most {MAX_ARTIFACT_NAME_LENGTH})"
    if "/" in value or "\\" in value:
        return "contains a path separator ('/' or '\\')"
    if value.startswith("."):
        return "starts with '.' ('.', '..' and hidden names are not allowed)"
    if _DRIVE_LETTER.match(value):
        return "starts with a drive letter (like 'C:')"
    return None


def validate_artifact_name(name: object) -> str:
    """``name`` if it can name an artifact, else ``ArtifactNameError``.

    A valid name is a ``str`` of 1 to 255 characters (and at most 255 bytes in UTF-8), without
    NUL, ``/`` or ``\\``, that does not start with ``.`` or a drive letter (``C:``). A ``user:``
    name follows the same rules after its prefix.

    >>> validate_artifact_name("report.pdf")
    'report.pdf'
    >>> validate_artifact_name("../secrets")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    relaykit.errors.ArtifactNameError: artifact name '../secrets' contains a path separator ...
    """
    if not isinstance(name, str):
        raise ArtifactNameError(f"an artifact name must be a str, not {type(name).__name__}")
    problem = _component_problem(name)
    if problem is None and name.startswith(USER_PREFIX):
        rest = _component_problem(name[len(USER_PREFIX) :])
        problem = None if rest is None else f"{rest} after its {USER_PREFIX!r} prefix"
    if problem is not None:
        raise ArtifactNameError(
            f"artifact name {_shown(name)} {problem}; use a plain file name such as "
            "'report.pdf' (or 'user:report.pdf' to share it with all of the user's sessions)"
        )
    return name


def validate_artifact_scope(app_name: object, user_id: object, session_id: object) -> None:
    """Check the app name, user id and session id of an artifact (``ArtifactNameError``).

    They follow the rules of artifact names (they become folder names in the file store), and
    the session id may not be ``"_user"``, the folder of the user's shared artifacts.

    >>> validate_artifact_scope("shop", "alice", "s-1")
    >>> validate_artifact_scope("shop", "..", "s-1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    relaykit.errors.ArtifactNameError: user id '..' starts with '.' ...
    """
    for kind, value in (("app name", app_name), ("user id", user_id), ("session id", session_id)):
        if not isinstance(value, str):
            raise ArtifactNameError(
                f"an artifact's {kind} must be a str, not {type(value).__name__}"
            )
        problem = _component_problem(value)
        if problem is not None:
            raise ArtifactNameError(
                f"{kind} {_shown(value)} {problem}; artifacts need ids that can be folder names"
            )
    if session_id == RESERVED_SESSION_ID:
        raise ArtifactNameError(
            f"session id {RESERVED_SESSION_ID!r} is reserved by the artifact stores: it is where "
            f"the user's shared {USER_PREFIX!r} artifacts are kept; use another session id"
        )


def is_user_artifact(name: str) -> bool:
    """True if ``name`` belongs to the user (all sessions) rather than to one session.

    >>> is_user_artifact("user:avatar.png"), is_user_artifact("draft.txt")
    (True, False)
    """
    return name.startswith(USER_PREFIX)


def describe_artifact(app_name: str, user_id: str, session_id: str, name: str) -> str:
    """How error messages name an artifact and the scope it lives in.

    >>> describe_artifact("shop", "alice", "s-1", "user:avatar.png")
    "artifact 'user:avatar.png' of user 'alice' (app 'shop')"
    """
    if is_user_artifact(name):
        return f"artifact {_shown(name)} of user {_shown(user_id)} (app {_shown(app_name)})"
    return (
        f"artifact {_shown(name)} of session {_shown(session_id)} "
        f"(user {_shown(user_id)}, app {_shown(app_name)})"
    )


def check_version(version: object) -> int | None:
    """``version`` if it is ``None`` (the latest) or a version number (an ``int`` from 0).

    >>> check_version(3)
    3
    """
    if version is None:
        return None
    if not isinstance(version, int) or isinstance(version, bool):
        raise TypeError(f"an artifact version must be an int or None, not {type(version).__name__}")
    if version < 0:
        raise ValueError(f"artifact versions count from 0 (got {version})")
    return version


def check_blob(blob: object) -> Blob:
    """A copy of ``blob`` with ``bytes`` data, or ``TypeError`` for anything a store can't keep.

    Stores keep the copy, so a caller changing its ``Blob`` afterwards changes nothing stored.

    >>> check_blob(Blob("text/plain", bytearray(b"hi"))).data
    b'hi'
    """
    if not isinstance(blob, Blob):
        raise TypeError(f"an artifact must be a relaykit.Blob, not {type(blob).__name__}")
    if not isinstance(blob.mime_type, str):
        raise TypeError(
            f"an artifact's mime_type must be a str, not {type(blob.mime_type).__name__}"
        )
    if blob.name is not None and not isinstance(blob.name, str):
        raise TypeError(f"an artifact's name must be a str or None, not {type(blob.name).__name__}")
    data: object = blob.data
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"an artifact's data must be bytes, not {type(data).__name__}")
    return Blob(blob.mime_type, bytes(data), blob.name)


@runtime_checkable
class ArtifactService(Protocol):
    """Named, versioned blobs per session, and per user for ``user:`` names.

    Rules every store follows:

    - versions count from 0 for each name in its scope (the session, or the user for ``user:``
      names); ``save`` returns the version it created;
    - ``load`` of a missing artifact or version returns ``None``; ``delete`` of a missing one
      does nothing;
    - ``list_names`` of a session includes the user's ``user:`` names;
    - names and ids are checked first (``validate_artifact_name``,
      ``validate_artifact_scope``): an invalid one raises ``ArtifactNameError`` before any
      storage is touched;
    - storage failures and unreadable versions raise ``ArtifactStoreError``.

    >>> from relaykit.artifacts import InMemoryArtifactService
    >>> isinstance(InMemoryArtifactService(), ArtifactService)
    True
    """

    async def save(
        self, app_name: str, user_id: str, session_id: str, name: str, blob: Blob
    ) -> int:
        """Store ``blob`` as the next version of ``name`` and return that version."""
        ...

    async def load(
        self, app_name: str, user_id: str, session_id: str, name: str, version: int | None = None
    ) -> Blob | None:
        """Version ``version`` of ``name`` (the latest when ``None``), or ``None``."""
        ...

    async def list_names(self, app_name: str, user_id: str, session_id: str) -> list[str]:
        """The session's artifact names and the user's ``user:`` names, sorted."""
        ...

    async def list_versions(
        self, app_name: str, user_id: str, session_id: str, name: str
    ) -> list[int]:
        """The versions of ``name``, ascending (empty when there is none)."""
        ...

    async def delete(self, app_name: str, user_id: str, session_id: str, name: str) -> None:
        """Forget every version of ``name`` (no error if there is none)."""
        ...
