"""The ArtifactService rules, alike on the in-memory and the file store.

Every test runs against both stores and asserts what load/list return and, for refused names,
that nothing at all was stored.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relaykit.artifacts import ArtifactService
from relaykit.errors import ArtifactNameError, ConfigurationError
from relaykit.messages import Blob
from tests.services.conftest import ArtifactCase

APP, USER, SESSION = "shop", "alice", "s-1"


def text(data: str, name: str | None = None) -> Blob:
    return Blob("text/plain", data.encode(), name)


async def test_service_satisfies_the_protocol(case: ArtifactCase) -> None:
    assert isinstance(case.service, ArtifactService)


async def test_versions_count_from_zero_and_load_returns_the_latest_or_the_chosen_one(
    case: ArtifactCase,
) -> None:
    store = case.service
    assert [await store.save(APP, USER, SESSION, "notes.txt", text(f"v{i}")) for i in range(3)] == [
        0,
        1,
        2,
    ]
    assert await store.load(APP, USER, SESSION, "notes.txt") == text("v2")
    assert await store.load(APP, USER, SESSION, "notes.txt", version=0) == text("v0")
    assert await store.load(APP, USER, SESSION, "notes.txt", 1) == text("v1")
    assert await store.list_versions(APP, USER, SESSION, "notes.txt") == [0, 1, 2]


async def test_versions_are_counted_per_name_and_per_session(case: ArtifactCase) -> None:
    store = case.service
    assert await store.save(APP, USER, SESSION, "a.txt", text("a")) == 0
    assert await store.save(APP, USER, SESSION, "b.txt", text("b")) == 0
    assert await store.save(APP, USER, "s-2", "a.txt", text("other session")) == 0
    assert await store.save(APP, "bob", SESSION, "a.txt", text("other user")) == 0
    assert await store.save("other-app", USER, SESSION, "a.txt", text("other app")) == 0
    assert await store.load(APP, USER, SESSION, "a.txt") == text("a")
    assert await store.load(APP, USER, "s-2", "a.txt") == text("other session")
    assert await store.load(APP, "bob", SESSION, "a.txt") == text("other user")
    assert await store.load("other-app", USER, SESSION, "a.txt") == text("other app")


async def test_loading_a_missing_artifact_or_version_returns_none(case: ArtifactCase) -> None:
    store = case.service
    assert await store.load(APP, USER, SESSION, "missing.txt") is None
    assert await store.load(APP, USER, SESSION, "missing.txt", version=0) is None
    await store.save(APP, USER, SESSION, "notes.txt", text("v0"))
    assert await store.load(APP, USER, SESSION, "notes.txt", version=1) is None
    assert await store.load(APP, USER, SESSION, "notes.txt", version=10**6) is None
    assert await store.list_versions(APP, USER, SESSION, "missing.txt") == []
    assert await store.list_names(APP, USER, "no-such-session") == []


async def test_delete_forgets_every_version_and_the_next_save_starts_at_zero(
    case: ArtifactCase,
) -> None:
    store = case.service
    await store.save(APP, USER, SESSION, "notes.txt", text("v0"))
    await store.save(APP, USER, SESSION, "notes.txt", text("v1"))
    await store.save(APP, USER, SESSION, "keep.txt", text("kept"))
    await store.delete(APP, USER, SESSION, "notes.txt")
    assert await store.load(APP, USER, SESSION, "notes.txt") is None
    assert await store.load(APP, USER, SESSION, "notes.txt", version=0) is None
    assert await store.list_versions(APP, USER, SESSION, "notes.txt") == []
    assert await store.list_names(APP, USER, SESSION) == ["keep.txt"]
    assert await store.save(APP, USER, SESSION, "notes.txt", text("again")) == 0
    assert await store.load(APP, USER, SESSION, "notes.txt") == text("again")


async def test_deleting_a_missing_artifact_is_not_an_error(case: ArtifactCase) -> None:
    await case.service.delete(APP, USER, SESSION, "never-saved.txt")
    await case.service.delete(APP, USER, SESSION, "user:never-saved.txt")
    assert case.stored() == []


async def test_user_names_are_shared_by_all_sessions_of_the_user_only(case: ArtifactCase) -> None:
    store = case.service
    assert await store.save(APP, USER, "s-1", "user:profile.json", text("v0")) == 0
    # Another session of the same user adds the next version of the same artifact.
    assert await store.save(APP, USER, "s-2", "user:profile.json", text("v1")) == 1
    assert await store.load(APP, USER, "s-3", "user:profile.json") == text("v1")
    assert await store.list_versions(APP, USER, "s-1", "user:profile.json") == [0, 1]
    assert await store.list_names(APP, USER, "s-9") == ["user:profile.json"]
    # Another user, or the same user in another app, does not see it.
    assert await store.load(APP, "bob", "s-1", "user:profile.json") is None
    assert await store.list_names(APP, "bob", "s-1") == []
    assert await store.load("other-app", USER, "s-1", "user:profile.json") is None
    # A session name and a user name with the same rest are different artifacts.
    await store.save(APP, USER, "s-1", "profile.json", text("session's own"))
    assert await store.load(APP, USER, "s-2", "profile.json") is None
    assert await store.load(APP, USER, "s-1", "user:profile.json") == text("v1")


async def test_list_names_is_sorted_and_includes_the_users_names(case: ArtifactCase) -> None:
    store = case.service
    for name in ["zeta.txt", "user:b.txt", "alpha.txt", "user:a.txt"]:
        await store.save(APP, USER, SESSION, name, text(name))
    await store.save(APP, USER, "s-2", "elsewhere.txt", text("not this session"))
    assert await store.list_names(APP, USER, SESSION) == [
        "alpha.txt",
        "user:a.txt",
        "user:b.txt",
        "zeta.txt",
    ]
    assert await store.list_names(APP, USER, "s-2") == ["elsewhere.txt", "user:a.txt", "user:b.txt"]


async def test_a_user_artifact_deleted_from_any_session_is_gone_for_all(case: ArtifactCase) -> None:
    store = case.service
    await store.save(APP, USER, "s-1", "user:avatar.png", Blob("image/png", b"\x89PNG"))
    await store.delete(APP, USER, "s-2", "user:avatar.png")
    assert await store.load(APP, USER, "s-1", "user:avatar.png") is None
    assert await store.list_names(APP, USER, "s-1") == []


async def test_blobs_round_trip_exactly(case: ArtifactCase) -> None:
    store = case.service
    blobs = [
        Blob("application/octet-stream", bytes(range(256)) * 4),  # every byte, NULs included
        Blob("text/plain; charset=utf-8", "ünïcødé ✓ 😀".encode(), "résumé ✓.txt"),
        Blob("application/x-empty", b"", None),
    ]
    for blob in blobs:
        await store.save(APP, USER, SESSION, "data.bin", blob)
    for version, blob in enumerate(blobs):
        loaded = await store.load(APP, USER, SESSION, "data.bin", version)
        assert loaded == blob
        assert type(loaded.data) is bytes


async def test_stored_blobs_are_copies(case: ArtifactCase) -> None:
    store = case.service
    mutable = bytearray(b"original")
    blob = Blob("text/plain", mutable, "a.txt")  # type: ignore[arg-type]
    await store.save(APP, USER, SESSION, "a.txt", blob)
    mutable[:] = b"changed!"
    blob.mime_type = "text/html"
    loaded = await store.load(APP, USER, SESSION, "a.txt")
    assert loaded == Blob("text/plain", b"original", "a.txt")
    loaded.name = "renamed"
    assert await store.load(APP, USER, SESSION, "a.txt") == Blob("text/plain", b"original", "a.txt")


async def test_unusual_but_valid_names_and_ids_work(case: ArtifactCase) -> None:
    store = case.service
    names = [
        "x" * 255,
        "ünïcødé ✓ 😀.txt",
        "with space",
        "v1..v2.txt",
        "ab:c",
        "user:x",
        "user:" + "y" * 250,
        "_user",
        "COLON:",
        "'; DROP TABLE x; --",
    ]
    for name in names:
        assert await store.save(APP, USER, SESSION, name, text(name)) == 0
    for name in names:
        assert await store.load(APP, USER, SESSION, name) == text(name)
    assert await store.list_names(APP, USER, SESSION) == sorted(names)
    assert await store.save("app ✓", "user@example.com", "a" * 255, "n", text("ids")) == 0
    assert await store.load("app ✓", "user@example.com", "a" * 255, "n") == text("ids")


BAD_NAMES = [
    "../x",
    "a/../../b",
    "/etc/passwd",
    "..",
    ".",
    ".hidden",
    "C:\\x",
    "c:x",
    "a\\b",
    "a/b",
    "\\\\server\\share",
    "nul\x00byte",
    "x" * 256,
    "é" * 128,
    "",
    "user:",
    "user:../x",
    "user:..",
    "user:.hidden",
    "user:a/b",
    "user:C:x",
    "bad\ud800surrogate",
]


def _calls(name: str) -> list[tuple[str, Any]]:
    """Every method of the protocol, called with ``name`` as the artifact name."""
    return [
        ("save", lambda s: s.save(APP, USER, SESSION, name, text("content"))),
        ("load", lambda s: s.load(APP, USER, SESSION, name)),
        ("list_versions", lambda s: s.list_versions(APP, USER, SESSION, name)),
        ("delete", lambda s: s.delete(APP, USER, SESSION, name)),
    ]


@pytest.mark.parametrize("name", BAD_NAMES, ids=lambda n: repr(n)[:20])
async def test_unsafe_names_are_refused_before_anything_is_written(
    case: ArtifactCase, name: str
) -> None:
    for method, call in _calls(name):
        with pytest.raises(ArtifactNameError, match="artifact name") as caught:
            await call(case.service)
        assert isinstance(caught.value, ConfigurationError), method
    assert case.stored() == []


@pytest.mark.parametrize("name", [None, 7, b"bytes"], ids=repr)
async def test_names_that_are_not_strings_are_refused(case: ArtifactCase, name: Any) -> None:
    with pytest.raises(ArtifactNameError, match="must be a str"):
        await case.service.save(APP, USER, SESSION, name, text("content"))
    assert case.stored() == []


@pytest.mark.parametrize("position", ["app name", "user id", "session id"])
@pytest.mark.parametrize(
    "bad", ["..", ".", "../etc", "/abs", "a\\b", "C:x", "", "z" * 256, "nul\x00", 42]
)
async def test_unsafe_ids_are_refused_before_anything_is_written(
    case: ArtifactCase, position: str, bad: Any
) -> None:
    ids = {"app name": APP, "user id": USER, "session id": SESSION} | {position: bad}
    scope = (ids["app name"], ids["user id"], ids["session id"])
    store = case.service
    for call in [
        store.save(*scope, "a.txt", text("content")),
        store.load(*scope, "a.txt"),
        store.list_names(*scope),
        store.list_versions(*scope, "a.txt"),
        store.delete(*scope, "a.txt"),
    ]:
        with pytest.raises(ArtifactNameError, match=position):
            await call
    assert case.stored() == []


async def test_the_session_id_of_the_users_folder_is_reserved(case: ArtifactCase) -> None:
    with pytest.raises(ArtifactNameError, match="'_user' is reserved"):
        await case.service.save(APP, USER, "_user", "a.txt", text("content"))
    with pytest.raises(ArtifactNameError, match="'_user' is reserved"):
        await case.service.list_names(APP, USER, "_user")
    assert case.stored() == []


async def test_wrong_blobs_and_versions_raise_clear_errors(case: ArtifactCase) -> None:
    store = case.service
    with pytest.raises(TypeError, match=r"must be a relaykit\.Blob"):
        await store.save(APP, USER, SESSION, "a.txt", b"raw bytes")
    with pytest.raises(TypeError, match="data must be bytes"):
        await store.save(APP, USER, SESSION, "a.txt", Blob("text/plain", "text"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mime_type must be a str"):
        await store.save(APP, USER, SESSION, "a.txt", Blob(None, b""))  # type: ignore[arg-type]
    assert case.stored() == []
    await store.save(APP, USER, SESSION, "a.txt", text("v0"))
    with pytest.raises(ValueError, match="count from 0"):
        await store.load(APP, USER, SESSION, "a.txt", version=-1)
    with pytest.raises(TypeError, match="int or None"):
        await store.load(APP, USER, SESSION, "a.txt", version="0")
    with pytest.raises(TypeError, match="int or None"):
        await store.load(APP, USER, SESSION, "a.txt", version=True)


async def test_concurrent_saves_of_one_name_get_distinct_versions(case: ArtifactCase) -> None:
    store = case.service
    versions = await asyncio.gather(
        *(store.save(APP, USER, SESSION, "log.txt", text(f"{i}")) for i in range(30))
    )
    assert sorted(versions) == list(range(30))
    for i, version in enumerate(versions):
        assert await store.load(APP, USER, SESSION, "log.txt", version) == text(f"{i}")
