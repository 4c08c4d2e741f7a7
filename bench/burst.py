"""Burst: many concurrent interrupting runs and resumes against a cold database (D21).

For each backend (a fresh SQLite file; a fresh PostgreSQL database when
``RELAYKIT_TEST_POSTGRES_URL`` is set): N concurrent runs that each stop for an approval
(saving a checkpoint on a store that has never been used), then N concurrent resumes that
approve, then P pairs of resumes racing for the same checkpoint. Reports what was lost,
duplicated or executed twice (all must be 0) and the time of each phase.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import relaykit as rk
from relaykit import Message, ToolCall, errors

N_RUNS = 1_000
N_PAIRS = 100


class Ledger:
    """Counts how often each order was paid."""

    def __init__(self) -> None:
        self.paid: collections.Counter[str] = collections.Counter()

    def agent(self) -> rk.ChatModelAgent:
        ledger = self

        @rk.tool
        async def refund(ctx: rk.ToolContext, order_id: str) -> str:
            """Refund an order (a human approves)."""
            if not ctx.is_resume_target:
                raise rk.ToolInterrupt({"question": f"refund {order_id}?"})
            await asyncio.sleep(0)  # let racing resumes interleave
            ledger.paid[order_id] += 1
            return "refunded"

        def respond(request: rk.ModelRequest) -> Message:
            last = request.messages[-1]
            if last.role == "tool":
                return Message.assistant("done")
            order = last.content.split()[-1]
            return Message.assistant(
                "", [ToolCall("c1", "refund", json.dumps({"order_id": order}))]
            )

        def forever() -> Any:
            while True:
                yield respond

        return rk.ChatModelAgent(
            "desk", "refunds", "Refund.", rk.ScriptedModel(forever()), tools=[refund]
        )


async def _drain(events: AsyncIterator[rk.AgentEvent]) -> list[rk.AgentEvent]:
    return [ev async for ev in events]


async def _interrupt(runner: rk.Runner, order: str) -> str | None:
    events = await _drain(runner.query(f"refund {order}"))
    info = events[-1].action.interrupted if events[-1].action is not None else None
    return info.checkpoint_id if info is not None else None


async def _resume(runner: rk.Runner, checkpoint_id: str) -> str:
    try:
        events = await _drain(runner.resume(checkpoint_id))
    except errors.CheckpointBusyError:
        return "busy"
    except errors.CheckpointNotFoundError:
        return "not found"
    if any(ev.error is not None for ev in events):
        return "error"
    return "ok"


async def burst(url: str) -> dict[str, Any]:
    """Run the three phases against a fresh database at ``url``."""
    ledger = Ledger()
    report: dict[str, Any] = {}
    async with rk.DatabaseCheckpointStore(url) as store:
        runner = rk.Runner(ledger.agent(), checkpoint_store=store)
        orders = [f"o{i}" for i in range(N_RUNS)]
        t0 = time.perf_counter()
        ids = await asyncio.gather(*(_interrupt(runner, o) for o in orders))
        report["interrupt_s"] = time.perf_counter() - t0
        saved = [cid for cid in ids if cid is not None]
        stored = await asyncio.gather(*(store.get(cid) for cid in saved))
        report["lost_checkpoints"] = len(ids) - sum(1 for d in stored if d is not None)

        t0 = time.perf_counter()
        outcomes = await asyncio.gather(*(_resume(runner, cid) for cid in saved))
        report["resume_s"] = time.perf_counter() - t0
        report["failed_resumes"] = sum(1 for o in outcomes if o != "ok")
        report["unpaid"] = sum(1 for o in orders if ledger.paid[o] == 0)
        report["double_executed"] = sum(1 for o in orders if ledger.paid[o] > 1)
        left = await asyncio.gather(*(store.get(cid) for cid in saved))
        report["checkpoints_left"] = sum(1 for d in left if d is not None)

        pairs = [f"p{i}" for i in range(N_PAIRS)]
        pair_ids = await asyncio.gather(*(_interrupt(runner, o) for o in pairs))
        t0 = time.perf_counter()
        races = await asyncio.gather(
            *(
                asyncio.gather(_resume(runner, cid), _resume(runner, cid))
                for cid in pair_ids
                if cid is not None
            )
        )
        report["race_s"] = time.perf_counter() - t0
        report["race_double_executed"] = sum(1 for o in pairs if ledger.paid[o] > 1)
        report["race_unpaid"] = sum(1 for o in pairs if ledger.paid[o] == 0)
        report["race_losers"] = collections.Counter(o for pair in races for o in pair if o != "ok")
    return report


async def _fresh_postgres(base: str) -> tuple[str, Any]:
    """A fresh database next to the one ``base`` names; returns its URL and a dropper."""
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import create_async_engine

    name = f"rk_burst_{uuid.uuid4().hex[:10]}"
    admin = create_async_engine(base, isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.make_url(base).set(database=name).render_as_string(hide_password=False)

    async def drop() -> None:
        async with admin.connect() as conn:
            await conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()

    return url, drop


def _row(backend: str, r: dict[str, Any]) -> str:
    losers = ", ".join(f"{k}: {v}" for k, v in sorted(r["race_losers"].items())) or "none"
    return (
        f"| {backend} | {r['lost_checkpoints']} | {r['failed_resumes']} | {r['unpaid']} | "
        f"{r['double_executed']} | {r['checkpoints_left']} | {r['race_double_executed']} | "
        f"{r['race_unpaid']} | {losers} | {r['interrupt_s']:.2f} | {r['resume_s']:.2f} | "
        f"{r['race_s']:.2f} |"
    )


async def main() -> None:
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(_row("SQLite (fresh file)", await burst(f"sqlite+aiosqlite:///{tmp}/burst.db")))
    pg = os.environ.get("RELAYKIT_TEST_POSTGRES_URL")
    if pg:
        url, drop = await _fresh_postgres(pg)
        try:
            rows.append(_row("PostgreSQL (fresh database)", await burst(url)))
        finally:
            await drop()
    print(
        f"# Burst: {N_RUNS:,} concurrent interrupting runs on a cold store, {N_RUNS:,} "
        f"concurrent resumes, {N_PAIRS} pairs of racing resumes\n"
    )
    print(
        f"Python {sys.version.split()[0]}; one process, asyncio. Counts must all be 0 except "
        "the racing losers (one per pair: busy, or not found when the winner already "
        "finished).\n"
    )
    print(
        "| backend | lost checkpoints | failed resumes | unpaid | paid twice | checkpoints "
        "left | race: paid twice | race: unpaid | race: losers | interrupts s | resumes s | "
        "races s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for row in rows:
        print(row)
    if not pg:
        print("\nPostgreSQL skipped: set RELAYKIT_TEST_POSTGRES_URL to include it.")


if __name__ == "__main__":
    asyncio.run(main())
