"""D23 for agents used as tools: recursion through AgentTool is bounded with relaykit's own
error, and nested agent tools that pause save a checkpoint that grows linearly with depth."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import relaykit as rk
from relaykit import Message, ToolCall
from relaykit.agents.agent_tool import MAX_AGENT_TOOL_DEPTH


def _forever(respond: Any) -> Iterator[Any]:
    while True:
        yield respond


def _calling(
    tool_name: str, arguments: dict[str, Any], calls: list[str] | None = None
) -> rk.ScriptedModel:
    def respond(request: rk.ModelRequest) -> Message:
        if calls is not None:
            calls.append(tool_name)
        if request.messages[-1].role == "tool":
            return Message.assistant("done")
        return Message.assistant("", [ToolCall("c1", tool_name, json.dumps(arguments))])

    return rk.ScriptedModel(_forever(respond))


async def test_an_agent_calling_itself_as_a_tool_stops_at_the_depth_limit() -> None:
    calls: list[str] = []
    a = rk.ChatModelAgent("A", "recurses", model=_calling("A", {"request": "again"}, calls))
    a.tools = (rk.AgentTool(a),)
    with pytest.raises(rk.AgentRunError) as caught:
        await rk.Runner(a).invoke("go")
    assert isinstance(caught.value.__cause__, rk.errors.MaxTransfersError)
    assert f"nested deeper than {MAX_AGENT_TOOL_DEPTH} levels" in str(caught.value)
    assert len(calls) == MAX_AGENT_TOOL_DEPTH + 1  # one model call per level, then the stop


def _nested(depth: int, paid: list[int]) -> rk.ChatModelAgent:
    @rk.tool
    async def pay(ctx: rk.ToolContext, amount: int) -> str:
        """Pay after approval."""
        if not ctx.is_resume_target:
            raise rk.ToolInterrupt({"approve": amount})
        paid.append(amount)
        return "paid"

    agent = rk.ChatModelAgent("a0", "pays", model=_calling("pay", {"amount": 5}), tools=[pay])
    for i in range(1, depth):
        agent = rk.ChatModelAgent(
            f"a{i}",
            f"level {i}",
            model=_calling(f"a{i - 1}", {"request": "go"}),
            tools=[rk.AgentTool(agent)],
        )
    return agent


async def _checkpoint_size(depth: int) -> int:
    store = rk.InMemoryCheckpointStore()
    result = await rk.Runner(_nested(depth, []), checkpoint_store=store).invoke("go")
    assert result.checkpoint_id is not None
    return len(await store.get(result.checkpoint_id) or b"")


async def test_nested_agent_tools_pause_and_resume_at_the_depth_limit() -> None:
    paid: list[int] = []
    store = rk.InMemoryCheckpointStore()
    runner = rk.Runner(_nested(MAX_AGENT_TOOL_DEPTH + 1, paid), checkpoint_store=store)
    first = await runner.invoke("go")
    assert first.interrupt is not None and first.checkpoint_id is not None
    [point] = first.interrupt.contexts
    assert point.info == {"approve": 5}
    assert sum(1 for s in point.address if s.kind == "tool") == MAX_AGENT_TOOL_DEPTH + 1
    resumed = await runner.invoke_resume(first.checkpoint_id, targets={point.id: None})
    assert paid == [5] and resumed.output is not None and resumed.output.content == "done"


async def test_the_checkpoint_of_nested_agent_tools_grows_linearly() -> None:
    """Each agent tool's saved state holds its inner run once (its points live in the
    caller's tree): doubling the depth roughly doubles the size, never squares it."""
    small, large = await _checkpoint_size(4), await _checkpoint_size(8)
    assert large < 3 * small
