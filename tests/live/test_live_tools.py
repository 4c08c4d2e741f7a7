"""Tools in live mode (D27): they run when the model calls them and their results go back
over the connection; a long-running call pauses and is answered by ``send``; a failing tool
ends the session; a transfer reconnects the target with the session as stored."""

from __future__ import annotations

import json
from typing import Any

import pytest

import relaykit as rk
from relaykit import Message
from relaykit.errors import ResumeTargetError
from relaykit.models.live import ScriptedLiveModel
from tests.live.support import (
    WAIT,
    Recorder,
    call,
    live,
    lookup,
    partial,
    read_all,
    rows,
    runner,
    shown,
    stored,
    transcript,
)


@rk.tool
def explode() -> str:
    """Fail."""
    raise RuntimeError("the warehouse is on fire")


@rk.tool(long_running=True)
def refund(amount: int) -> str:
    """Start a refund that a human approves."""
    return f"refund of {amount} requested"


def transfer(to: str, call_id: str = "t1") -> Message:
    return call(call_id, "transfer_to_agent", json.dumps({"agent_name": to}))


async def test_tools_run_and_their_results_go_back_over_the_connection(
    session_service: Any,
) -> None:
    model = ScriptedLiveModel(
        [
            [
                call("c1", "lookup", '{"order": "7"}', text="Checking."),
                WAIT,
                call("c2", "lookup", '{"order": "0"}'),
                WAIT,
                Message.assistant("Order 7 shipped; order 0 does not exist."),
            ]
        ]
    )
    r = runner(rk.ChatModelAgent("desk", live_model=model, tools=[lookup]), session_service)
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [
        ("call", "lookup"),
        ("tool", "order 7 shipped"),
        ("call", "lookup"),
        ("tool", "error: order 0 does not exist"),
        ("assistant", "Order 7 shipped; order 0 does not exist."),
    ]
    sent = model.connections[0].sent
    assert [(m.tool_call_id, m.content) for m in sent if isinstance(m, Message)] == [
        ("c1", "order 7 shipped"),
        ("c2", "error: order 0 does not exist"),
    ]
    assert rows(await stored(session_service)) == [
        ("desk", "assistant", "Checking."),
        ("desk", "tool", "order 7 shipped"),
        ("desk", "assistant", ""),
        ("desk", "tool", "error: order 0 does not exist"),
        ("desk", "assistant", "Order 7 shipped; order 0 does not exist."),
    ]


async def test_repeated_tool_call_ids_are_made_unique(session_service: Any) -> None:
    both = Message.assistant(
        "",
        [
            rk.ToolCall("c", "lookup", '{"order": "1"}'),
            rk.ToolCall("c", "lookup", '{"order": "2"}'),
        ],
    )
    model = ScriptedLiveModel([[both]])
    r = runner(rk.ChatModelAgent("desk", live_model=model, tools=[lookup]), session_service)
    async with live(r) as session:
        await read_all(session)
    sent = [m.tool_call_id for m in model.connections[0].sent if isinstance(m, Message)]
    assert sent == ["c", "c_1"]


async def test_a_long_running_call_pauses_and_is_answered_over_send(session_service: Any) -> None:
    recorder = Recorder()
    model = ScriptedLiveModel(
        [
            [
                call("r1", "refund", '{"amount": 20}'),
                WAIT,
                Message.assistant("Your refund is approved."),
            ]
        ]
    )
    agent = rk.ChatModelAgent("desk", live_model=model, tools=[refund])
    r = runner(agent, session_service, plugins=[recorder])
    async with live(r) as session:
        reader = session.events()
        assert shown([await anext(reader), await anext(reader)]) == [("call", "refund"), ("pause",)]
        before = list(model.connections[0].sent)
        with pytest.raises(ResumeTargetError, match=r"call 'nope' matches no pending"):
            await session.send(Message.tool("approved", tool_call_id="nope"))
        assert model.connections[0].sent == before == []
        await session.send(Message.tool("approved", tool_call_id="r1"))
        rest = [ev async for ev in reader]
    assert shown(rest) == [("tool", "approved"), ("assistant", "Your refund is approved.")]
    assert model.connections[0].sent == [
        Message.tool("approved", tool_call_id="r1", tool_name="refund")
    ]
    saved = await stored(session_service)
    assert rows(saved) == [
        ("desk", "assistant", ""),
        ("desk", "tool", "approved"),
        ("desk", "assistant", "Your refund is approved."),
    ]
    pause = [e for e in saved if e.action is not None and e.action.interrupted is not None]
    assert len(pause) == 1 and pause[0].author == "desk"
    point = pause[0].action.interrupted.contexts[0]  # type: ignore[union-attr]
    assert point.info["tool_call_id"] == "r1" and point.address[-1].sub_id == "r1"
    assert await session_service.get_checkpoint("live-tests", "u1", "s1") is None  # no checkpoint


async def test_calls_still_pending_when_the_session_ends_are_answered(session_service: Any) -> None:
    model = ScriptedLiveModel([[call("r1", "refund", '{"amount": 20}'), WAIT]])
    r = runner(rk.ChatModelAgent("desk", live_model=model, tools=[refund]), session_service)
    async with live(r) as session:
        reader = session.events()
        await anext(reader)
        await anext(reader)
    rest = [ev async for ev in reader]
    assert rest == []  # the answer is stored, not delivered
    last = (await stored(session_service))[-1]
    assert last.author == "desk" and last.message is not None
    assert (last.message.tool_call_id, last.message.content) == (
        "r1",
        "error: abandoned — the live session ended",
    )


async def test_a_tool_that_raises_ends_the_session_with_its_error_event(
    session_service: Any,
) -> None:
    model = ScriptedLiveModel([[call("c1", "explode"), WAIT, Message.assistant("never")]])
    r = runner(rk.ChatModelAgent("desk", live_model=model, tools=[explode]), session_service)
    session = await live(r)
    events = await read_all(session)
    assert session.closed
    assert shown(events) == [("call", "explode"), ("error", "RuntimeError")]
    assert "warehouse is on fire" in str(events[-1].error)
    assert model.connections[0].sent == [] and model.connections[0].closed
    saved = await stored(session_service)
    assert saved[-1].error == "RuntimeError: the warehouse is on fire"
    answer = saved[-2].message
    assert answer is not None and answer.tool_call_id == "c1"  # the call has an answer
    with pytest.raises(rk.errors.LiveSessionClosedError):
        await session.send(Message.user("hello?"))


async def test_a_transfer_reconnects_the_target_with_the_session_as_context(
    session_service: Any,
) -> None:
    recorder = Recorder()
    triage_model = ScriptedLiveModel(
        [[WAIT, transcript("My order is late.", "input"), transfer("orders"), WAIT]]
    )
    orders_model = ScriptedLiveModel([[WAIT, Message.assistant("Order 7 arrives tomorrow.")]])
    triage = rk.ChatModelAgent("triage", "routes", "Route the user.", live_model=triage_model)
    orders = rk.ChatModelAgent(
        "orders", "order questions", "Answer about orders.", live_model=orders_model
    )
    r = runner(rk.set_sub_agents(triage, [orders]), session_service, plugins=[recorder])
    async with live(r) as session:
        await session.send(Message.user("Hi."))
        reader = session.events()
        got = [await anext(reader) for _ in range(3)]
        await session.send(Message.user("It is order 7."))  # waits for the new connection
        assert session.agent_name == "orders"
        got += [ev async for ev in reader]
    assert shown(got) == [
        ("user", "My order is late."),
        ("call", "transfer_to_agent"),
        ("tool", "successfully transferred to agent [orders]"),
        ("assistant", "Order 7 arrives tomorrow."),
    ]
    assert [[s.agent_name for s in ev.run_path] for ev in got] == [["triage"]] * 3 + [
        ["triage", "orders"]
    ]
    # the transfer result was not sent to the closing connection; later input went to orders
    assert triage_model.connections[0].sent == [Message.user("Hi.")]
    assert triage_model.connections[0].closed
    assert orders_model.connections[0].sent == [Message.user("It is order 7.")]
    context = [(m.role, m.content) for m in orders_model.connects[0].messages]
    assert context[0][0] == "system" and context[0][1].startswith("Answer about orders.")
    assert ("user", "Hi.") in context and ("user", "My order is late.") in context
    saved = await stored(session_service)
    assert len({e.invocation_id for e in saved}) == 1
    assert rows(saved)[-2:] == [
        ("user", "user", "It is order 7."),
        ("orders", "assistant", "Order 7 arrives tomorrow."),
    ]
    assert saved[-1].run_path == ("triage", "orders")
    assert recorder.calls == ["before_run", "after_run"]


async def test_a_transfer_to_an_agent_that_cannot_run_live_ends_the_session(
    session_service: Any,
) -> None:
    triage_model = ScriptedLiveModel([[transfer("billing"), WAIT]])
    triage = rk.ChatModelAgent("triage", live_model=triage_model)
    billing = rk.ChatModelAgent("billing", model=rk.ScriptedModel([]))
    r = runner(rk.set_sub_agents(triage, [billing]), session_service)
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [
        ("call", "transfer_to_agent"),
        ("tool", "successfully transferred to agent [billing]"),
        ("error", "ConfigurationError"),
    ]
    assert "agent 'billing' cannot run live" in str(events[-1].error)
    assert triage_model.connections[0].closed


async def test_a_transfer_while_transcribing_flushes_the_held_events_first(
    session_service: Any,
) -> None:
    triage_model = ScriptedLiveModel([[partial("I want", "input"), transfer("orders"), WAIT]])
    orders_model = ScriptedLiveModel([[]])
    triage = rk.ChatModelAgent("triage", live_model=triage_model)
    orders = rk.ChatModelAgent("orders", live_model=orders_model)
    r = runner(rk.set_sub_agents(triage, [orders]), session_service)
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [
        ("partial", "I want"),
        ("call", "transfer_to_agent"),
        ("tool", "successfully transferred to agent [orders]"),
    ]
    assert len(orders_model.connects) == 1


async def test_tool_writes_to_session_values_are_stored_with_its_result(
    session_service: Any,
) -> None:
    @rk.tool
    def remember(ctx: rk.ToolContext, city: str) -> str:
        """Remember the user's city."""
        ctx.state["user:city"] = city
        return "noted"

    model = ScriptedLiveModel([[call("c1", "remember", '{"city": "Lyon"}')]])
    r = runner(rk.ChatModelAgent("desk", live_model=model, tools=[remember]), session_service)
    async with live(r) as session:
        await read_all(session)
    saved = await stored(session_service)
    assert saved[-1].message is not None and saved[-1].message.content == "noted"
    assert saved[-1].state_delta == {"user:city": "Lyon"}
    state = (await session_service.get_session("live-tests", "u1", "s1")).state
    assert state["user:city"] == "Lyon"


async def test_a_transfer_answers_the_calls_its_agent_left_pending(session_service: Any) -> None:
    triage_model = ScriptedLiveModel(
        [[call("r1", "refund", '{"amount": 5}'), WAIT, transfer("orders")]]
    )
    orders_model = ScriptedLiveModel([[]])
    triage = rk.ChatModelAgent("triage", tools=[refund], live_model=triage_model)
    orders = rk.ChatModelAgent("orders", live_model=orders_model)
    r = runner(rk.set_sub_agents(triage, [orders]), session_service)
    async with live(r) as session:
        reader = session.events()
        await anext(reader)
        await anext(reader)  # the pause
        await session.send(Message.user("never mind"))
        rest = [ev async for ev in reader]
    assert shown(rest)[-2:] == [
        ("call", "transfer_to_agent"),
        ("tool", "successfully transferred to agent [orders]"),
    ]
    context = [m.content for m in orders_model.connects[0].messages]
    assert (
        "For context: [triage] `refund` tool returned result: error: abandoned — the live "
        "session ended."
    ) in context
    answer = [
        e for e in await stored(session_service) if e.message and e.message.tool_call_id == "r1"
    ]
    assert answer[0].author == "triage" and answer[0].message is not None
    assert answer[0].message.content == "error: abandoned — the live session ended"


async def test_transfers_beyond_max_transfers_end_the_session(session_service: Any) -> None:
    a_model = ScriptedLiveModel([[transfer("b")], [transfer("b", "t3")]])
    b_model = ScriptedLiveModel([[transfer("a", "t2")]])
    a = rk.ChatModelAgent("a", live_model=a_model)
    b = rk.ChatModelAgent("b", live_model=b_model)
    r = runner(rk.set_sub_agents(a, [b]), session_service, max_transfers=2)
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events)[-1] == ("error", "MaxTransfersError")
    assert [[s.agent_name for s in ev.run_path] for ev in events[-3:]] == [["a", "b", "a"]] * 3
    assert len(a_model.connects) == 2 and len(b_model.connects) == 1


async def test_an_event_a_plugin_rejects_becomes_a_stored_error_and_the_session_goes_on(
    session_service: Any,
) -> None:
    class Guard(rk.Plugin):
        async def on_event(self, ctx: rk.InvocationContext, event: rk.AgentEvent) -> None:
            if event.message is not None and "secret" in event.message.content:
                raise ValueError("leak")

    model = ScriptedLiveModel([[Message.assistant("the secret is 42"), Message.assistant("ok")]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[Guard()])
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [("error", "PluginError"), ("assistant", "ok")]
    saved = await stored(session_service)
    assert "leak" in (saved[0].error or "") and rows(saved) == [("desk", "assistant", "ok")]


def request_history(chat: rk.ScriptedModel) -> list[tuple[str, str, str | None, list[str]]]:
    """(role, content, tool_call_id, call ids) of the first request's non-system messages."""
    return [
        (m.role, m.content, m.tool_call_id, [c.id for c in m.tool_calls])
        for m in chat.requests[0].messages
        if m.role != "system"
    ]


async def test_a_call_answered_late_reads_right_after_its_call_in_later_histories(
    session_service: Any,
) -> None:
    # The model goes on talking while a long-running call waits; the answer is stored when it
    # comes, after those messages. A later turn's history puts the result right after its
    # call (providers reject a call whose result does not follow it).
    model = ScriptedLiveModel(
        [
            [
                call("r1", "refund", '{"amount": 20}', text="Starting your refund."),
                WAIT,
                Message.assistant("Anything else meanwhile?"),
                WAIT,
                Message.assistant("Your refund is approved."),
            ]
        ]
    )
    chat = rk.ScriptedModel([Message.assistant("You're welcome.")])
    agent = rk.ChatModelAgent("desk", model=chat, live_model=model, tools=[refund])
    r = runner(agent, session_service)
    async with live(r) as session:
        reader = session.events()
        assert shown([await anext(reader), await anext(reader)]) == [("call", "refund"), ("pause",)]
        await session.send(Message.user("Is it quick?"))
        assert shown([await anext(reader)]) == [("assistant", "Anything else meanwhile?")]
        await session.send(Message.tool("approved", tool_call_id="r1"))
        assert shown([ev async for ev in reader]) == [
            ("tool", "approved"),
            ("assistant", "Your refund is approved."),
        ]
    assert [row[1:] for row in rows(await stored(session_service))] == [
        ("assistant", "Starting your refund."),
        ("user", "Is it quick?"),
        ("assistant", "Anything else meanwhile?"),
        ("tool", "approved"),
        ("assistant", "Your refund is approved."),
    ]
    await r.invoke(Message.user("Thanks!"), user_id="u1", session_id="s1")
    assert request_history(chat) == [
        ("assistant", "Starting your refund.", None, ["r1"]),
        ("tool", "approved", "r1", []),
        ("user", "Is it quick?", None, []),
        ("assistant", "Anything else meanwhile?", None, []),
        ("assistant", "Your refund is approved.", None, []),
        ("user", "Thanks!", None, []),
    ]


async def test_answering_a_call_twice_or_one_of_the_agent_before_a_transfer_is_refused(
    session_service: Any,
) -> None:
    triage_model = ScriptedLiveModel(
        [
            [
                call("r1", "refund", '{"amount": 5}'),
                call("r2", "refund", '{"amount": 6}'),
                WAIT,
                transfer("orders"),
            ]
        ]
    )
    orders_model = ScriptedLiveModel([[WAIT]])
    triage = rk.ChatModelAgent("triage", tools=[refund], live_model=triage_model)
    orders = rk.ChatModelAgent("orders", live_model=orders_model)
    r = runner(rk.set_sub_agents(triage, [orders]), session_service)
    async with live(r) as session:
        reader = session.events()
        assert [s[0] for s in shown([await anext(reader) for _ in range(4)])] == [
            "call",
            "pause",
            "call",
            "pause",
        ]
        await session.send(Message.tool("done", tool_call_id="r1"))
        with pytest.raises(ResumeTargetError, match="'r1' matches no pending"):
            await session.send(Message.tool("done again", tool_call_id="r1"))
        rest = [await anext(reader) for _ in range(3)]  # r1's result, the transfer pair
        with pytest.raises(ResumeTargetError, match="'r2' matches no pending"):
            await session.send(Message.tool("late", tool_call_id="r2"))  # (after the switch)
        assert session.agent_name == "orders"
    assert shown(rest)[0] == ("tool", "done")
    assert triage_model.connections[0].sent == [
        Message.tool("done", tool_call_id="r1", tool_name="refund")
    ]
    assert orders_model.connections[0].sent == []
    answers = {
        e.message.tool_call_id: e.message.content
        for e in await stored(session_service)
        if e.message is not None and e.message.role == "tool"
    }
    assert answers["r1"] == "done" and answers["r2"] == "error: abandoned — the live session ended"
