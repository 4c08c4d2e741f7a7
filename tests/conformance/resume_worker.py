"""A process that resumes one checkpoint (used by test_resume_processes).

``python -m tests.conformance.resume_worker URL CHECKPOINT_ID DIR NAME`` waits for ``DIR/go``,
resumes the checkpoint approving the refund, and writes its outcome to ``DIR/NAME.out``
(``ok``, ``busy`` or ``not found``). The refund tool appends one line to ``DIR/paid`` and,
before paying, waits (bounded) until the other process has written its outcome, so that the
two resumes really overlap.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import relaykit as rk
from relaykit import Message, ToolCall, errors


def desk(folder: Path, me: str) -> rk.ChatModelAgent:
    @rk.tool
    async def refund(ctx: rk.ToolContext, order_id: str) -> str:
        """Refund an order (a human approves)."""
        if not ctx.is_resume_target:
            raise rk.ToolInterrupt({"question": f"refund {order_id}?"})
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:  # hold the claim until the other one tried
            if any(p.name != f"{me}.out" for p in folder.glob("*.out")):
                break
            await asyncio.sleep(0.02)
        with open(folder / "paid", "a") as f:
            f.write(f"{me} {order_id}\n")
        return "refunded"

    def respond(request: rk.ModelRequest) -> Message:
        if request.messages[-1].role == "tool":
            return Message.assistant("done")
        return Message.assistant("", [ToolCall("c1", "refund", json.dumps({"order_id": "o1"}))])

    def forever():  # type: ignore[no-untyped-def]
        while True:
            yield respond

    return rk.ChatModelAgent(
        "desk", "refunds", "Refund.", rk.ScriptedModel(forever()), tools=[refund]
    )


async def interrupt(url: str, checkpoint_id: str) -> None:
    async with rk.DatabaseCheckpointStore(url) as store:
        result = await rk.Runner(desk(Path("."), "parent"), checkpoint_store=store).invoke(
            "refund o1", checkpoint_id=checkpoint_id
        )
        assert result.interrupt is not None


async def main(url: str, checkpoint_id: str, folder: Path, me: str) -> None:
    async with rk.DatabaseCheckpointStore(url) as store:
        await store.get(checkpoint_id)  # connect and migrate before the race starts
        deadline = time.monotonic() + 30
        while not (folder / "go").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        runner = rk.Runner(desk(folder, me), checkpoint_store=store)
        try:
            await runner.invoke_resume(checkpoint_id)
            outcome = "ok"
        except errors.CheckpointBusyError:
            outcome = "busy"
        except errors.CheckpointNotFoundError:
            outcome = "not found"
        tmp = folder / f"{me}.tmp"
        tmp.write_text(outcome)
        os.replace(tmp, folder / f"{me}.out")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]))
