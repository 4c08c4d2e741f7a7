"""A tool raising ``SystemExit`` or ``KeyboardInterrupt`` among concurrent calls: it reaches
whoever runs the agent, as a single call's does, instead of stopping the event loop from the
call's own task; the other calls are cancelled and awaited."""

from __future__ import annotations

import asyncio

import pytest

import relaykit as rk
from relaykit import Message, ToolCall


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()])
async def test_an_exit_among_concurrent_calls_reaches_the_caller(exc: BaseException) -> None:
    finished: list[str] = []
    cancelled: list[str] = []

    @rk.tool
    async def slow() -> str:
        """Takes a while."""
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append("slow")
            raise
        finished.append("slow")
        return "done"

    @rk.tool
    async def leave() -> str:
        """Leaves."""
        await asyncio.sleep(0)
        raise exc

    model = rk.ScriptedModel(
        [
            Message.assistant("", [ToolCall("c1", "slow", "{}"), ToolCall("c2", "leave", "{}")]),
            Message.assistant("never"),
        ]
    )
    agent = rk.ChatModelAgent("a", "d", "i", model=model, tools=[slow, leave])
    with pytest.raises(type(exc)):
        async for _ in rk.Runner(agent).run([Message.user("go")]):
            pass
    assert cancelled == ["slow"] and finished == []
    # The loop is still running: the test goes on.
    await asyncio.sleep(0)
