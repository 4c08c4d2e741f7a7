"""Opening a live session (D27): the connection opens during the call, routing, the checks,
before_run, the session lock, an abandoned pause."""

from __future__ import annotations

from typing import Any

import pytest

import relaykit as rk
from relaykit import Message
from relaykit.errors import ConfigurationError, ModelError, SessionBusyError
from relaykit.models.live import ScriptedLiveModel
from tests.live.support import (
    APP,
    SESSION,
    USER,
    WAIT,
    Recorder,
    call,
    live,
    read_all,
    rows,
    runner,
    shown,
    stored,
)


async def test_the_connection_opens_while_run_live_is_awaited(session_service: Any) -> None:
    model = ScriptedLiveModel([[WAIT, Message.assistant("Hello!")]])
    agent = rk.ChatModelAgent("desk", instruction="Be kind to {user:name}.", live_model=model)
    r = runner(agent, session_service)
    session = live(r)
    assert model.connects == []  # nothing before the await
    await session_service.create_session(APP, USER, SESSION, state={"user:name": "Ada"})
    opened = await session
    try:
        assert len(model.connects) == 1
        config = model.connects[0]
        assert [(m.role, m.content) for m in config.messages] == [("system", "Be kind to Ada.")]
        assert config.tools == [] and config.modalities == ("text",)
        assert opened.agent_name == "desk" and opened.invocation_id
    finally:
        await opened.close()
    assert model.connections[0].closed


async def test_a_failing_connect_raises_from_run_live_and_stores_nothing(
    session_service: Any,
) -> None:
    recorder = Recorder()
    model = ScriptedLiveModel([ConnectionRefusedError("no route to the model")])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[recorder])
    with pytest.raises(ModelError, match=r"agent 'desk' failed to connect: .*no route"):
        await live(r)
    assert await stored(session_service) == []  # the session was created, nothing else
    assert recorder.calls == ["before_run", "after_run"]
    # the turn lock was released: a second attempt opens
    with pytest.raises(ModelError):
        async with live(r):
            pass
    assert recorder.calls == ["before_run", "after_run"] * 2


async def test_the_session_starts_at_the_agent_that_spoke_last(session_service: Any) -> None:
    triage_live = ScriptedLiveModel([])
    orders_live = ScriptedLiveModel([[]])
    triage = rk.ChatModelAgent(
        "triage",
        model=rk.ScriptedModel([call("t1", "transfer_to_agent", '{"agent_name": "orders"}')]),
        live_model=triage_live,
    )
    orders = rk.ChatModelAgent(
        "orders",
        instruction="Orders desk.",
        model=rk.ScriptedModel([Message.assistant("Order 7 left on Monday.")]),
        live_model=orders_live,
    )
    r = runner(rk.set_sub_agents(triage, [orders]), session_service)
    await r.invoke("Where is order 7?", user_id=USER, session_id=SESSION)
    async with live(r) as session:
        events = await read_all(session)
    assert triage_live.connects == []
    assert session.agent_name == "orders"
    messages = [(m.role, m.content) for m in orders_live.connects[0].messages]
    assert messages[0][0] == "system" and messages[0][1].startswith("Orders desk.")
    assert ("user", "Where is order 7?") in messages
    assert messages[-1] == ("assistant", "Order 7 left on Monday.")
    assert [t.name for t in orders_live.connects[0].tools] == ["transfer_to_agent"]
    assert events == []  # the model closed at once: nothing happened, nothing failed


async def test_an_agent_that_cannot_run_live_is_refused_before_before_run(
    session_service: Any,
) -> None:
    recorder = Recorder()
    agent = rk.ChatModelAgent("chat", model=rk.ScriptedModel([]))
    r = runner(agent, session_service, plugins=[recorder])
    with pytest.raises(ConfigurationError, match=r"agent 'chat' cannot run live"):
        await live(r)
    assert recorder.calls == []


def test_run_live_checks_its_arguments_when_called() -> None:
    model = ScriptedLiveModel([])
    agent = rk.ChatModelAgent("desk", live_model=model)
    with pytest.raises(ConfigurationError, match="needs a session service"):
        rk.Runner(agent).run_live(user_id=USER, session_id=SESSION)
    r = rk.Runner(agent, session_service=rk.InMemorySessionService())
    with pytest.raises(ConfigurationError, match="LiveRunConfig"):
        r.run_live(user_id=USER, session_id=SESSION, config={"modalities": ["text"]})  # type: ignore[arg-type]


async def test_an_agent_with_only_a_live_model_is_an_error_event_in_a_run() -> None:
    agent = rk.ChatModelAgent("desk", live_model=ScriptedLiveModel([]))
    events = [ev async for ev in rk.Runner(agent).query("hi")]
    assert len(events) == 1 and events[0].agent_name == "desk"
    assert "agent 'desk' has only a live_model" in str(events[0].error)
    with pytest.raises(ConfigurationError, match="needs a model"):
        rk.ChatModelAgent("nothing")


async def test_before_run_answers_and_no_connection_opens(session_service: Any) -> None:
    recorder = Recorder(answer="We are closed today.")
    model = ScriptedLiveModel([])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[recorder])
    session = await live(r)
    assert session.closed
    events = await read_all(session)
    await session.close()
    assert model.connects == []
    assert shown(events) == [("assistant", "We are closed today.")]
    assert rows(await stored(session_service)) == [("desk", "assistant", "We are closed today.")]
    assert recorder.calls == ["before_run", "after_run"]
    assert [ev.message.content for ev in recorder.seen if ev.message] == ["We are closed today."]


async def test_a_failing_before_run_is_a_stored_error_event(session_service: Any) -> None:
    recorder = Recorder(fail_before_run=True)
    model = ScriptedLiveModel([])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[recorder])
    async with live(r) as session:
        events = await read_all(session)
    assert model.connects == []
    assert shown(events) == [("error", "PluginError")]
    saved = await stored(session_service)
    assert len(saved) == 1 and "before_run refused" in (saved[0].error or "")
    assert recorder.calls == ["before_run", "after_run"]


async def test_a_live_session_holds_the_session_lock_until_it_ends(session_service: Any) -> None:
    model = ScriptedLiveModel([[WAIT, Message.assistant("ok")]])
    agent = rk.ChatModelAgent(
        "desk", model=rk.ScriptedModel([Message.assistant("run")]), live_model=model
    )
    r = runner(agent, session_service, session_lock_timeout=0.05)
    async with live(r):
        with pytest.raises(SessionBusyError):
            await r.invoke("a turn meanwhile", user_id=USER, session_id=SESSION)
        with pytest.raises(SessionBusyError):
            await live(r)
    result = await r.invoke("a turn after", user_id=USER, session_id=SESSION)
    assert result.output is not None and result.output.content == "run"


@rk.tool(long_running=True)
def approve(amount: int) -> str:
    """Ask a human to approve a payment."""
    return "asked"


async def _paused_desk(session_service: Any) -> tuple[rk.Runner, ScriptedLiveModel]:
    """A desk whose text turn paused on an approval (call c1); its live model."""
    model = ScriptedLiveModel([[]])
    agent = rk.ChatModelAgent(
        "desk",
        model=rk.ScriptedModel([call("c1", "approve", '{"amount": 5}')]),
        tools=[approve],
        live_model=model,
    )
    r = runner(agent, session_service)
    paused = await r.invoke("pay 5", user_id=USER, session_id=SESSION)
    assert paused.interrupt is not None
    return r, model


async def _abandoned(session_service: Any, model: ScriptedLiveModel) -> None:
    """The live session opened on an abandoned pause: the call answered, the pause gone."""
    history = [(m.role, m.content) for m in model.connects[0].messages]
    assert history[-1] == ("tool", "error: abandoned — the user sent a new message")
    assert await session_service.get_checkpoint(APP, USER, SESSION) is None
    last = (await stored(session_service))[-1]
    assert last.author == "desk" and last.message is not None
    assert last.message.tool_call_id == "c1"


async def test_opening_abandons_a_paused_run_and_gives_the_model_the_answered_call(
    session_service: Any,
) -> None:
    r, model = await _paused_desk(session_service)
    async with live(r) as session:
        await read_all(session)
    await _abandoned(session_service, model)


async def test_opening_abandons_a_pause_that_cannot_be_read(
    session_service: Any, caplog: pytest.LogCaptureFixture
) -> None:
    r, model = await _paused_desk(session_service)
    # The stored pause is damaged (a disk fault, a bad manual edit).
    await session_service.set_checkpoint(APP, USER, SESSION, b'{"format": "secret-marker')
    with caplog.at_level("WARNING", logger="relaykit"):
        async with live(r) as session:
            await read_all(session)
    assert any("cannot be read" in r.getMessage() for r in caplog.records)
    assert not any("secret-marker" in r.getMessage() for r in caplog.records)
    await _abandoned(session_service, model)
