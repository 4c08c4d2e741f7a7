"""The run-level plugin hooks around an Eino-mode resume (no session service)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit as rk
from relaykit.errors import CheckpointNotFoundError


class Approval(rk.BaseAgent):
    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        yield rk.interrupt(ctx, "approve?")

    async def resume(
        self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        yield rk.AgentEvent.from_message(rk.Message.assistant(f"answer: {info.resume_data}"))


class Recorder(rk.Plugin):
    def __init__(self, answer_early: bool = False) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.answer_early = answer_early

    async def before_run(self, ctx: Any) -> rk.Message | None:
        self.calls.append("before_run")
        return rk.Message.assistant("not now") if self.answer_early else None

    async def on_event(self, ctx: Any, event: rk.AgentEvent) -> rk.AgentEvent | None:
        self.calls.append(f"on_event:{event.agent_name}")
        return None

    async def after_run(self, ctx: Any) -> None:
        self.calls.append("after_run")


async def test_a_resume_runs_the_run_level_hooks() -> None:
    plugin = Recorder()
    runner = rk.Runner(
        Approval("approver"), checkpoint_store=rk.InMemoryCheckpointStore(), plugins=[plugin]
    )
    paused = await runner.invoke("pay")
    assert paused.checkpoint_id is not None and paused.interrupt is not None
    plugin.calls.clear()
    point = paused.interrupt.contexts[0].id
    done = await runner.invoke_resume(paused.checkpoint_id, targets={point: "yes"})
    assert done.output is not None and done.output.content == "answer: yes"
    assert plugin.calls == ["before_run", "on_event:approver", "after_run"]


async def test_an_early_answer_to_a_resume_leaves_the_checkpoint() -> None:
    store = rk.InMemoryCheckpointStore()
    early = Recorder(answer_early=True)
    quiet = rk.Runner(Approval("approver"), checkpoint_store=store)
    paused = await quiet.invoke("pay")
    assert paused.checkpoint_id is not None
    runner = rk.Runner(Approval("approver"), checkpoint_store=store, plugins=[early])
    result = await runner.invoke_resume(paused.checkpoint_id)
    assert result.output is not None and result.output.content == "not now"
    assert early.calls == ["before_run", "on_event:approver", "after_run"]
    # The pause stays, unclaimed: a later resume continues it.
    done = await quiet.invoke_resume(paused.checkpoint_id)
    assert done.output is not None and done.output.content == "answer: None"
    with pytest.raises(CheckpointNotFoundError):
        await quiet.invoke_resume(paused.checkpoint_id)
