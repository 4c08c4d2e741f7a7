"""RN-05 / D12: stopping early closes every started stream at once and leaves no task running."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import relaykit as rk
from relaykit import AgentEvent, Message


class Endless(rk.BaseAgent):
    """Yields forever (with a pause) and records whether its generator was closed."""

    def __init__(self, name: str) -> None:
        super().__init__(name, name)
        self.closed = False

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        try:
            n = 0
            while True:
                await asyncio.sleep(0)
                n += 1
                yield AgentEvent.from_message(Message.assistant(f"{self.name} {n}"))
        finally:
            self.closed = True


async def test_rn05_early_stop_in_a_parallel_workflow_cancels_every_branch_task() -> None:
    """RN-05: breaking out of a run whose parallel branches are still producing closes both
    branch generators and leaves no task behind, before aclose() returns."""
    a, b = Endless("a"), Endless("b")
    runner = rk.Runner(rk.ParallelAgent("fan", [a, b]))
    before = asyncio.all_tasks()
    seen = []
    async with contextlib.aclosing(runner.query("go")) as events:
        async for ev in events:
            seen.append(ev.agent_name)
            if len(seen) == 6:
                break
    assert a.closed and b.closed
    assert asyncio.all_tasks() == before
    assert set(seen) <= {"a", "b"}


async def test_rn05_early_stop_closes_a_streaming_model_call() -> None:
    """RN-05: a caller that stops while a streamed model answer is open closes the model's
    stream source (no half-read generator is left for the garbage collector)."""
    closed: list[bool] = []

    class SlowModel:
        async def generate(self, request: rk.ModelRequest) -> Message:
            raise AssertionError("streaming mode calls stream()")

        def stream(self, request: rk.ModelRequest) -> rk.MessageStream:
            async def chunks() -> AsyncIterator[Message]:
                try:
                    for word in ("one ", "two ", "three"):
                        await asyncio.sleep(0)
                        yield Message.assistant(word)
                finally:
                    closed.append(True)

            return rk.MessageStream(chunks())

    agent = rk.ChatModelAgent("talker", "talks", "Talk.", SlowModel())
    runner = rk.Runner(agent, streaming=True)
    async with contextlib.aclosing(runner.query("hi")) as events:
        async for ev in events:
            assert ev.output is not None and ev.output.is_streaming
            stream = ev.output.stream
            assert stream is not None
            async for chunk in stream:
                assert chunk.content == "one "
                break
            break
    assert closed == [True]
