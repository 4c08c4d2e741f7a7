"""Races and misuse of a live session: responses of a connection a transfer replaced, sends
and closes at awkward moments, cancelled callers, a reading task stopped from outside (D27)."""

from __future__ import annotations

import asyncio
from typing import Any

import relaykit as rk
from relaykit import Message
from tests.live.support import PushedModel, call, live, rows, runner, settle, shown, stored


def escalating_tool(gate: asyncio.Event, entered: asyncio.Event) -> Any:
    """A long-running tool that, once answered, waits for ``gate`` and hands over to orders."""

    @rk.tool
    async def escalate(ctx: rk.ToolContext) -> str:
        """Ask a human, then hand over to orders."""
        if not ctx.was_interrupted:
            raise rk.ToolInterrupt({"ask": "a human"})
        entered.set()
        await gate.wait()
        ctx.set_action(rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction("orders")))
        return "handing over"

    return escalate


async def test_a_response_of_the_connection_a_transfer_replaced_is_dropped(
    session_service: Any,
) -> None:
    # The answer to a long-running call transfers (in the sender's task) while the reading task
    # holds a response it read from the old connection: that response belongs to an agent that
    # no longer speaks and is neither stored, delivered nor acted on.
    gate, entered = asyncio.Event(), asyncio.Event()
    triage_model, orders_model = PushedModel(), PushedModel()
    triage = rk.ChatModelAgent(
        "triage", live_model=triage_model, tools=[escalating_tool(gate, entered)]
    )
    orders = rk.ChatModelAgent("orders", live_model=orders_model)
    r = runner(rk.set_sub_agents(triage, [orders]), session_service)
    async with live(r) as session:
        reader = session.events()
        old = triage_model.connections[0]
        old.push(call("e1", "escalate"))
        assert shown([await anext(reader), await anext(reader)]) == [
            ("call", "escalate"),
            ("pause",),
        ]
        answering = asyncio.ensure_future(session.send(Message.tool("ok", tool_call_id="e1")))
        await entered.wait()
        old.push(Message.assistant("late words of triage"), call("c9", "escalate"))
        await settle()  # the reading task has read them and waits for the storage order
        gate.set()
        await answering
        assert session.agent_name == "orders"
        orders_model.connections[0].push(Message.assistant("Orders here."))
        orders_model.connections[0].end()
        rest = [ev async for ev in reader]
    assert shown(rest) == [("tool", "handing over"), ("assistant", "Orders here.")]
    assert rows(await stored(session_service)) == [
        ("triage", "assistant", ""),
        ("triage", "tool", "handing over"),
        ("orders", "assistant", "Orders here."),
    ]
    assert old.sent == []  # nothing was sent to the closed connection
