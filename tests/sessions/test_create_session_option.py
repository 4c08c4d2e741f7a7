"""``runner.run(..., create_session=...)``: whether one turn creates a missing session."""

from __future__ import annotations

import pytest

import relaykit as rk
from relaykit import Message
from relaykit.errors import ConfigurationError, SessionNotFoundError


def _runner(service: rk.InMemorySessionService, **options: object) -> rk.Runner:
    model = rk.ScriptedModel([Message.assistant("hi")])
    agent = rk.ChatModelAgent("helper", model=model)
    return rk.Runner(agent, app_name="app", session_service=service, **options)  # type: ignore[arg-type]


async def test_create_session_false_refuses_a_missing_session_and_stores_nothing() -> None:
    service = rk.InMemorySessionService()
    runner = _runner(service)
    with pytest.raises(SessionNotFoundError):
        await runner.invoke("hello", user_id="u", session_id="s", create_session=False)
    assert await service.get_session("app", "u", "s") is None
    # The Runner's own rule (create) still holds for the next turn.
    result = await runner.invoke("hello", user_id="u", session_id="s")
    assert result.output is not None and result.output.content == "hi"


async def test_create_session_true_creates_where_the_runner_would_not() -> None:
    service = rk.InMemorySessionService()
    runner = _runner(service, auto_create_session=False)
    with pytest.raises(SessionNotFoundError):
        await runner.invoke("hello", user_id="u", session_id="s")
    result = await runner.invoke("hello", user_id="u", session_id="s", create_session=True)
    assert result.output is not None and result.output.content == "hi"
    session = await service.get_session("app", "u", "s")
    assert session is not None and [e.author for e in session.events] == ["user", "helper"]


def test_create_session_is_checked_when_called() -> None:
    runner = _runner(rk.InMemorySessionService())
    with pytest.raises(ConfigurationError, match="create_session must be True, False or None"):
        runner.run([Message.user("hi")], user_id="u", session_id="s", create_session="no")  # type: ignore[arg-type]
    plain = rk.Runner(rk.ChatModelAgent("helper", model=rk.ScriptedModel([])))
    with pytest.raises(ConfigurationError, match="session mode"):
        plain.run([Message.user("hi")], create_session=False)
