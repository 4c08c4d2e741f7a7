"""The CheckpointStore protocol (D21, D28), alike on the in-memory, SQLite and PostgreSQL stores.

Every test runs against each store and asserts what is stored afterwards (documents and claim
owners), the bytes returned and the errors raised.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relaykit.checkpoints import CheckpointStore
from relaykit.errors import CheckpointBusyError, CheckpointNotFoundError, CheckpointStoreError
from tests.checkpoints.support import SHORT_TTL, StoreCase

TTL = 60.0


async def test_store_satisfies_the_protocol_and_exposes_claim_ttl(case: StoreCase) -> None:
    assert isinstance(case.store, CheckpointStore)
    assert case.store.claim_ttl == 300.0


async def test_set_get_overwrite_delete(case: StoreCase) -> None:
    store = case.store
    assert await store.get("missing") is None
    await store.set("c1", b'{"a": 1}')
    assert await store.get("c1") == b'{"a": 1}'
    await store.set("c1", bytearray(b"second"))
    assert await store.get("c1") == b"second"
    assert await case.rows() == {"c1": (b"second", None)}
    await store.delete("c1")
    assert await store.get("c1") is None
    await store.delete("c1")  # unknown ids are fine
    assert await case.rows() == {}


async def test_ids_and_documents_round_trip_exactly(case: StoreCase) -> None:
    document = bytes(range(256)) * 4  # every byte value, NULs included
    ids = ["x" * 255, "ünïcødé-✓-😀", "with space/and:colon", "'; DROP TABLE x; --"]
    for checkpoint_id in ids:
        await case.store.set(checkpoint_id, document)
    for checkpoint_id in ids:
        assert await case.store.get(checkpoint_id) == document
    assert set(await case.rows()) == set(ids)


async def test_claim_returns_the_document_and_records_the_owner(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    assert await case.store.claim("c1", "owner-a", TTL) == b"doc"
    assert await case.rows() == {"c1": (b"doc", "owner-a")}


async def test_claim_of_a_missing_checkpoint_is_not_found(case: StoreCase) -> None:
    with pytest.raises(CheckpointNotFoundError, match="'nope'") as caught:
        await case.store.claim("nope", "owner-a", TTL)
    assert caught.value.checkpoint_id == "nope"
    assert await case.rows() == {}


async def test_claim_held_by_another_owner_is_busy(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", TTL)
    with pytest.raises(CheckpointBusyError, match="'c1'") as caught:
        await case.store.claim("c1", "owner-b", TTL)
    assert caught.value.checkpoint_id == "c1"
    assert await case.rows() == {"c1": (b"doc", "owner-a")}


async def test_the_same_owner_may_claim_again(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", TTL)
    assert await case.store.claim("c1", "owner-a", TTL) == b"doc"
    assert await case.rows() == {"c1": (b"doc", "owner-a")}


async def test_release_lets_another_owner_claim(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", TTL)
    await case.store.release("c1", "owner-a")
    assert await case.rows() == {"c1": (b"doc", None)}
    assert await case.store.claim("c1", "owner-b", TTL) == b"doc"
    assert await case.rows() == {"c1": (b"doc", "owner-b")}


async def test_release_by_a_non_holder_keeps_the_claim_and_does_not_raise(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", TTL)
    await case.store.release("c1", "owner-b")
    await case.store.release("unknown", "owner-b")
    assert await case.rows() == {"c1": (b"doc", "owner-a")}
    with pytest.raises(CheckpointBusyError):
        await case.store.claim("c1", "owner-b", TTL)


async def test_finish_with_data_replaces_the_document_and_unclaims(case: StoreCase) -> None:
    await case.store.set("c1", b"old")
    await case.store.claim("c1", "owner-a", TTL)
    await case.store.finish("c1", "owner-a", b"new")
    assert await case.rows() == {"c1": (b"new", None)}
    assert await case.store.claim("c1", "owner-b", TTL) == b"new"


async def test_finish_with_none_deletes_the_checkpoint(case: StoreCase) -> None:
    await case.store.set("c1", b"old")
    await case.store.claim("c1", "owner-a", TTL)
    await case.store.finish("c1", "owner-a", None)
    assert await case.rows() == {}
    with pytest.raises(CheckpointNotFoundError):
        await case.store.claim("c1", "owner-a", TTL)


@pytest.mark.parametrize("data", [b"new", None])
async def test_finish_by_a_non_holder_is_busy_and_writes_nothing(
    case: StoreCase, data: bytes | None
) -> None:
    await case.store.set("c1", b"old")
    await case.store.claim("c1", "owner-a", TTL)
    with pytest.raises(CheckpointBusyError, match="cannot finish the resume of checkpoint 'c1'"):
        await case.store.finish("c1", "owner-b", data)
    assert await case.rows() == {"c1": (b"old", "owner-a")}


@pytest.mark.parametrize("data", [b"new", None])
async def test_finish_without_a_claim_is_busy_and_writes_nothing(
    case: StoreCase, data: bytes | None
) -> None:
    await case.store.set("c1", b"old")
    with pytest.raises(CheckpointBusyError):
        await case.store.finish("c1", "owner-a", data)
    with pytest.raises(CheckpointBusyError):
        await case.store.finish("missing", "owner-a", data)
    assert await case.rows() == {"c1": (b"old", None)}


async def test_renew_by_the_holder_keeps_the_claim(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", TTL)
    await case.store.renew("c1", "owner-a", TTL)
    assert await case.rows() == {"c1": (b"doc", "owner-a")}
    with pytest.raises(CheckpointBusyError):
        await case.store.claim("c1", "owner-b", TTL)


async def test_renew_by_a_non_holder_is_busy(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", TTL)
    with pytest.raises(CheckpointBusyError, match="the claim on checkpoint 'c1' was lost"):
        await case.store.renew("c1", "owner-b", TTL)
    with pytest.raises(CheckpointBusyError):
        await case.store.renew("missing", "owner-b", TTL)
    assert await case.rows() == {"c1": (b"doc", "owner-a")}


async def test_an_expired_claim_is_taken_over_and_the_old_owner_cannot_finish(
    case: StoreCase,
) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", SHORT_TTL)
    await case.expire_claims()
    assert await case.store.claim("c1", "owner-b", TTL) == b"doc"
    with pytest.raises(CheckpointBusyError):
        await case.store.finish("c1", "owner-a", b"stale result")
    with pytest.raises(CheckpointBusyError):
        await case.store.renew("c1", "owner-a", TTL)
    assert await case.rows() == {"c1": (b"doc", "owner-b")}


async def test_an_expired_claim_nobody_took_over_can_still_be_finished(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", SHORT_TTL)
    await case.expire_claims()
    await case.store.finish("c1", "owner-a", b"result")
    assert await case.rows() == {"c1": (b"result", None)}


async def test_renewing_an_expired_claim_is_busy_and_drops_it(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", SHORT_TTL)
    await case.expire_claims()
    with pytest.raises(CheckpointBusyError):
        await case.store.renew("c1", "owner-a", TTL)
    # Told that its claim is lost, the owner cannot write its result either.
    with pytest.raises(CheckpointBusyError):
        await case.store.finish("c1", "owner-a", b"result")
    assert await case.rows() == {"c1": (b"doc", None)}


async def test_set_drops_a_claim(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", TTL)
    await case.store.set("c1", b"replaced")
    assert await case.rows() == {"c1": (b"replaced", None)}
    with pytest.raises(CheckpointBusyError):
        await case.store.finish("c1", "owner-a", b"stale result")
    assert await case.store.claim("c1", "owner-b", TTL) == b"replaced"


async def test_delete_drops_a_claim(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", TTL)
    await case.store.delete("c1")
    await case.store.set("c1", b"again")
    assert await case.rows() == {"c1": (b"again", None)}
    assert await case.store.claim("c1", "owner-b", TTL) == b"again"


async def test_concurrent_claims_of_one_checkpoint_have_exactly_one_winner(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    owners = [f"owner-{n}" for n in range(50)]
    results = await asyncio.gather(
        *(case.store.claim("c1", owner, TTL) for owner in owners), return_exceptions=True
    )
    winners = [owner for owner, result in zip(owners, results, strict=True) if result == b"doc"]
    assert len(winners) == 1
    assert all(isinstance(result, CheckpointBusyError) for result in results if result != b"doc")
    assert await case.rows() == {"c1": (b"doc", winners[0])}


async def test_concurrent_finishes_by_racing_owners_write_once(case: StoreCase) -> None:
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", TTL)
    owners = ["owner-a", *(f"owner-{n}" for n in range(20))]
    results = await asyncio.gather(
        *(case.store.finish("c1", owner, owner.encode()) for owner in owners),
        return_exceptions=True,
    )
    assert results[0] is None
    assert all(isinstance(result, CheckpointBusyError) for result in results[1:])
    assert await case.rows() == {"c1": (b"owner-a", None)}


BAD_IDS: list[Any] = ["", "x" * 256, "a\x00b", "\ud800", "ok\udfffok", 42, None, b"bytes"]


def _calls(checkpoint_id: Any) -> dict[str, Any]:
    return {
        "get": lambda store: store.get(checkpoint_id),
        "set": lambda store: store.set(checkpoint_id, b"doc"),
        "delete": lambda store: store.delete(checkpoint_id),
        "claim": lambda store: store.claim(checkpoint_id, "owner-a", TTL),
        "renew": lambda store: store.renew(checkpoint_id, "owner-a", TTL),
        "release": lambda store: store.release(checkpoint_id, "owner-a"),
        "finish-data": lambda store: store.finish(checkpoint_id, "owner-a", b"doc"),
        "finish-none": lambda store: store.finish(checkpoint_id, "owner-a", None),
    }


@pytest.mark.parametrize("bad_id", BAD_IDS, ids=repr)
async def test_invalid_ids_are_refused_by_every_method_and_nothing_is_written(
    case: StoreCase, bad_id: Any
) -> None:
    for method, call in _calls(bad_id).items():
        with pytest.raises(CheckpointStoreError, match="checkpoint id must"):
            await call(case.store)
        assert await case.rows() == {}, method


async def test_data_that_is_not_bytes_is_a_type_error_and_nothing_is_written(
    case: StoreCase,
) -> None:
    with pytest.raises(TypeError, match="must be bytes, not str"):
        await case.store.set("c1", "text")
    await case.store.set("c1", b"doc")
    await case.store.claim("c1", "owner-a", TTL)
    with pytest.raises(TypeError, match="must be bytes, not dict"):
        await case.store.finish("c1", "owner-a", {"a": 1})
    assert await case.rows() == {"c1": (b"doc", "owner-a")}
