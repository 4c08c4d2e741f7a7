"""DatabaseCheckpointStore on SQLite, and on PostgreSQL when RELAYKIT_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import relaykit as rk
from relaykit import AgentEvent, Message

POSTGRES_URL = os.environ.get("RELAYKIT_TEST_POSTGRES_URL")



@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'cp.db'}"
        table = "relaykit_checkpoints"
    else:
        if not POSTGRES_URL:
            pytest.skip("PostgreSQL not configured: set RELAYKIT_TEST_POSTGRES_URL "
                        "(postgresql+asyncpg://...) — .ci/run does")
        url = POSTGRES_URL
        table = f"cp_{uuid.uuid4().hex[:12]}"
    s = rk.DatabaseCheckpointStore(url, table=table)
    yield s
    if request.param == "postgres":
        async with s._engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
    await s.aclose()


async def test_set_get_overwrite_delete(store: Any) -> None:
    assert await store.get("missing") is None
    await store.set("c1", b'{"a": 1}')
    assert await store.get("c1") == b'{"a": 1}'
    await store.set("c1", b"second")
    assert await store.get("c1") == b"second"
    await store.delete("c1")
    assert await store.get("c1") is None
    await store.delete("c1")  # unknown ids are fine


class _Approve(rk.BaseAgent):
    async def run(self, ctx: rk.RunContext, input: rk.AgentInput,
                  **options: Any) -> AsyncIterator[AgentEvent]:
        yield AgentEvent.from_message(Message.assistant("asking"))
        yield rk.interrupt(ctx, {"question": "approve?"})

    async def resume(self, ctx: rk.RunContext, info: rk.ResumeInfo,
                     **options: Any) -> AsyncIterator[AgentEvent]:
        yield AgentEvent.from_message(Message.assistant(f"approved={info.resume_data}"))


async def test_runner_resumes_from_a_database_checkpoint_in_a_new_store_object(
        store: Any, tmp_path: Path) -> None:
    runner = rk.Runner(_Approve("approver", "asks"), checkpoint_store=store)
    events = [ev async for ev in runner.query("refund please", checkpoint_id="t1")]
    point = events[-1].action.interrupted.contexts[0]
    raw = await store.get("t1")
    assert raw is not None and b"relaykit/checkpoint" in raw
    again = rk.DatabaseCheckpointStore(store.url, table=store._table.name)
    try:
        fresh = rk.Runner(_Approve("approver", "asks"), checkpoint_store=again)
        out = [ev async for ev in fresh.resume("t1", targets={point.id: True})]
    finally:
        await again.aclose()
    assert [e.output.message.content for e in out] == ["approved=True"]
