"""Resume through custom wrappers (eino-reference wrapper delegation): a wrapper around a tree
that is not resumable fails with a message that names it and says what to implement."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import relaykit as rk
from relaykit import AgentEvent, Message


class _Asks(rk.BaseAgent):
    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        yield rk.interrupt(ctx, "approve?")

    async def resume(
        self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        yield AgentEvent.from_message(Message.assistant("resumed"))


class PlainWrapper(rk.BaseAgent):
    """Runs an inner tree but cannot resume it."""

    def __init__(self, inner: rk.FlowAgent) -> None:
        super().__init__("W", "wraps a tree")
        self.inner = inner

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        async for ev in self.inner.run(ctx, input):
            yield ev


class ResumableWrapper(PlainWrapper):
    async def resume(
        self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        async for ev in self.inner.resume(ctx, info):
            yield ev


async def test_resume_through_a_wrapper_that_is_not_resumable_names_it() -> None:
    store = rk.InMemoryCheckpointStore()
    runner = rk.Runner(PlainWrapper(rk.as_flow_agent(_Asks("inner"))), checkpoint_store=store)
    first = await runner.invoke("hi", checkpoint_id="c1")
    assert first.interrupt is not None
    assert [str(s) for s in first.interrupt.contexts[0].address] == ["agent:W", "agent:inner"]
    events = [ev async for ev in runner.resume("c1")]
    assert len(events) == 1 and events[0].agent_name == "W"
    assert str(events[0].error) == (
        "failed to resume agent: agent 'W' (type PlainWrapper) has no sub-agents and does not "
        "implement ResumableAgent interface. To support resume, your custom agent wrapper "
        "must implement the ResumableAgent interface"
    )


async def test_resume_through_a_resumable_wrapper_reaches_the_inner_tree() -> None:
    store = rk.InMemoryCheckpointStore()
    runner = rk.Runner(ResumableWrapper(rk.as_flow_agent(_Asks("inner"))), checkpoint_store=store)
    await runner.invoke("hi", checkpoint_id="c1")
    result = await runner.invoke_resume("c1")
    assert result.output is not None and result.output.content == "resumed"
    assert [s.agent_name for s in result.events[-1].run_path] == ["W", "inner"]
