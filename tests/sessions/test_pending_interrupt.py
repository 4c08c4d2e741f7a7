"""``Runner.pending_interrupt``: what a session's paused invocation waits for."""

from __future__ import annotations

import pytest

import relaykit as rk
from relaykit import Message, ToolCall
from relaykit.errors import ConfigurationError, SerializationError


def approval_runner(service: rk.SessionService) -> rk.Runner:
    @rk.tool(long_running=True)
    def ask_manager(amount: int) -> dict[str, object]:
        """Ask a manager to approve a refund."""
        return {"status": "waiting", "amount": amount}

    model = rk.ScriptedModel(
        [
            Message.assistant("", [ToolCall("c1", "ask_manager", '{"amount": 5}')]),
            Message.assistant("approved"),
        ]
    )
    agent = rk.ChatModelAgent("desk", "d", "i", model=model, tools=[ask_manager])
    return rk.Runner(agent, app_name="shop", session_service=service)


async def test_the_pause_a_session_waits_on_then_none_once_answered() -> None:
    runner = approval_runner(rk.InMemorySessionService())
    assert await runner.pending_interrupt(user_id="u", session_id="s") is None  # no session
    result = await runner.invoke([Message.user("refund")], user_id="u", session_id="s")
    assert result.interrupt is not None
    waiting = await runner.pending_interrupt(user_id="u", session_id="s")
    assert waiting is not None
    assert [p.id for p in waiting.contexts] == [p.id for p in result.interrupt.contexts]
    assert str(waiting.contexts[0].address[-1]) == "tool:ask_manager:c1"
    answered = await runner.invoke(
        [Message.tool("yes", tool_call_id="c1")], user_id="u", session_id="s"
    )
    assert answered.output is not None and answered.output.content == "approved"
    assert await runner.pending_interrupt(user_id="u", session_id="s") is None


async def test_a_corrupt_pause_is_a_serialization_error_naming_the_session() -> None:
    service = rk.InMemorySessionService()
    runner = approval_runner(service)
    await runner.invoke([Message.user("refund")], user_id="u", session_id="s")
    await service.set_checkpoint("shop", "u", "s", b"{not json")
    with pytest.raises(SerializationError, match="the pause of"):
        await runner.pending_interrupt(user_id="u", session_id="s")


async def test_needs_session_mode_and_valid_ids() -> None:
    with pytest.raises(ConfigurationError, match="session_service"):
        await rk.Runner(
            rk.ChatModelAgent("a", "d", "i", model=rk.ScriptedModel([]))
        ).pending_interrupt(user_id="u", session_id="s")
    runner = approval_runner(rk.InMemorySessionService())
    with pytest.raises(ConfigurationError):
        await runner.pending_interrupt(user_id="u", session_id="")
