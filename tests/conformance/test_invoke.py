"""``Runner.invoke`` / ``invoke_resume``: run to the end, return a ``RunResult``; an agent's
final error raises ``AgentRunError`` (D28), a Runner-level error does not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit as rk
from relaykit import AgentEvent, Message, errors

from .helpers import ScriptedAgent, stream_of


async def test_invoke_returns_the_last_message_and_every_event() -> None:
    tree = rk.set_sub_agents(
        ScriptedAgent("R", ["routing", rk.AgentEvent.transfer("A")]),
        [ScriptedAgent("A", ["first", "the answer"])],
    )
    result = await rk.Runner(tree).invoke("hi")
    assert result.output is not None and result.output.content == "the answer"
    assert [ev.agent_name for ev in result.events] == ["R", "R", "A", "A"]
    assert result.interrupt is None and result.checkpoint_id is None
    assert result.session_id is None


async def test_invoke_accepts_a_message_list_and_collects_streams() -> None:
    agent = ScriptedAgent("A", [stream_of("hello ", "world")])
    result = await rk.Runner(agent, streaming=True).invoke([Message.user("hi")])
    assert result.output is not None and result.output.content == "hello world"


async def test_invoke_raises_agent_run_error_for_a_final_agent_error() -> None:
    tree = rk.set_sub_agents(
        ScriptedAgent("R", [rk.AgentEvent.transfer("A")]),
        [ScriptedAgent("A", ["partial", ValueError("boom")])],
    )
    with pytest.raises(rk.AgentRunError) as caught:
        await rk.Runner(tree).invoke("hi")
    err = caught.value
    assert err.agent_name == "A" and err.run_path == ("R", "A")
    assert isinstance(err.__cause__, ValueError)
    assert "agent 'A' failed: ValueError: boom" in str(err)


async def test_invoke_returns_an_interrupt_with_its_checkpoint_and_resumes() -> None:
    class Approve(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[AgentEvent]:
            yield AgentEvent.from_message(Message.assistant("asking"))
            yield rk.interrupt(ctx, {"question": "approve?"})

        async def resume(
            self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
        ) -> AsyncIterator[AgentEvent]:
            yield AgentEvent.from_message(Message.assistant(f"approved={info.resume_data}"))

    runner = rk.Runner(Approve("A"), checkpoint_store=rk.InMemoryCheckpointStore())
    result = await runner.invoke("refund")
    assert result.interrupt is not None and result.checkpoint_id is not None
    assert result.interrupt.checkpoint_id == result.checkpoint_id
    assert result.output is not None and result.output.content == "asking"
    point = result.interrupt.contexts[0]
    resumed = await runner.invoke_resume(result.checkpoint_id, targets={point.id: True})
    assert resumed.output is not None and resumed.output.content == "approved=True"
    assert resumed.interrupt is None


async def test_runner_level_error_does_not_raise() -> None:
    class Broken(rk.InMemoryCheckpointStore):
        async def set(self, checkpoint_id: str, data: bytes) -> None:
            raise OSError("disk full")

    class Asks(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[AgentEvent]:
            yield rk.interrupt(ctx, "approve?")

    result = await rk.Runner(Asks("A"), checkpoint_store=Broken()).invoke("hi")
    assert isinstance(result.events[0].error, errors.RunnerError)
    assert result.interrupt is not None and result.checkpoint_id is None
