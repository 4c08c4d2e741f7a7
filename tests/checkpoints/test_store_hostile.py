"""Hostile storage: corrupt rows and claim columns, unusable leases, a resume cancelled while
it takes its claim. Each ends in a clear relaykit error or a claim that still works."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import relaykit as rk
from relaykit import errors
from relaykit.checkpoints.database import DatabaseCheckpointStore
from tests.checkpoints.support import fetch

GUARD = 10.0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "300", True, 1e-6, 1e9])
def test_an_unusable_claim_ttl_is_a_configuration_error(bad: Any, sqlite_url: str) -> None:
    with pytest.raises(errors.ConfigurationError, match="claim_ttl must be"):
        rk.InMemoryCheckpointStore(claim_ttl=bad)
    with pytest.raises(errors.ConfigurationError, match="claim_ttl must be"):
        DatabaseCheckpointStore(sqlite_url, claim_ttl=bad)

    class Store(rk.InMemoryCheckpointStore):
        claim_ttl = bad  # type: ignore[assignment]

    with pytest.raises(errors.ConfigurationError, match="claim_ttl must be"):
        rk.Runner(rk.BaseAgent("a"), checkpoint_store=Store.__new__(Store))


@pytest.mark.parametrize("value", ["'hello'", "10000000000000", "1.5", "-1"])
async def test_a_corrupt_data_column_is_a_store_error_and_is_not_claimed(
    database_url: str, value: str
) -> None:
    if database_url.startswith("postgresql"):
        pytest.skip("PostgreSQL's bytea column only holds bytes: no row is corrupt this way")
    async with DatabaseCheckpointStore(database_url) as store:
        await store.set("cp", b"doc")
        await fetch(database_url, f"UPDATE relaykit_checkpoints SET data = {value}")
        with pytest.raises(errors.CheckpointStoreError, match="stored row is corrupt"):
            await store.get("cp")
        with pytest.raises(errors.CheckpointStoreError, match="stored row is corrupt"):
            await store.claim("cp", "me", 30)
        assert await fetch(database_url, "SELECT claim_owner FROM relaykit_checkpoints") == [
            (None,)
        ]


@pytest.mark.parametrize("expiry", ["NULL", "'soon'", "1e300"])
async def test_a_corrupt_claim_expiry_counts_as_expired(database_url: str, expiry: str) -> None:
    if database_url.startswith("postgresql") and expiry == "'soon'":
        expiry = "'NaN'"  # a double precision column cannot hold text; NaN is its odd value
    async with DatabaseCheckpointStore(database_url) as store:
        await store.set("cp", b"doc")
        await fetch(
            database_url,
            f"UPDATE relaykit_checkpoints SET claim_owner = 'ghost', claim_expires_at = {expiry}",
        )
        assert await store.claim("cp", "me", 30) == b"doc"
        with pytest.raises(errors.CheckpointBusyError):
            await store.claim("cp", "someone else", 30)


async def test_a_resume_cancelled_while_claiming_leaves_no_claim() -> None:
    claimed = asyncio.Event()

    class SlowToAnswer(rk.InMemoryCheckpointStore):
        async def claim(self, checkpoint_id: str, owner: str, ttl: float) -> bytes:
            data = await super().claim(checkpoint_id, owner, ttl)
            claimed.set()  # the claim is taken; the answer is still on its way
            await asyncio.sleep(0.05)
            return data

    class Asks(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
            yield rk.interrupt(ctx, "approve?")

        async def resume(self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any) -> Any:
            yield rk.AgentEvent.from_message(rk.Message.assistant("resumed"))

    store = SlowToAnswer()
    runner = rk.Runner(Asks("A"), checkpoint_store=store)
    await runner.invoke("go", checkpoint_id="cp")
    task = asyncio.ensure_future(runner.invoke_resume("cp"))
    await asyncio.wait_for(claimed.wait(), GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(int(GUARD / 0.01)):  # the release runs once the claim call has answered
        try:
            await rk.InMemoryCheckpointStore.claim(store, "cp", "other", 30)
            break
        except errors.CheckpointBusyError:
            await asyncio.sleep(0.01)
    else:
        pytest.fail("the cancelled resume's claim was never released")
