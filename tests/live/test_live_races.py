"""Races and misuse of a live session: responses of a connection a transfer replaced, sends
and closes at awkward moments, cancelled callers, a reading task stopped from outside (D27)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import pytest

import relaykit as rk
from relaykit import Message
from relaykit._session_history import STOPPED_TEXT
from relaykit.errors import ConfigurationError, LiveSessionClosedError
from tests.live.support import (
    PushedModel,
    Recorder,
    call,
    live,
    read_all,
    rows,
    runner,
    settle,
    shown,
    stored,
)


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


def blocking_tool(entered: asyncio.Event, seen: list[str]) -> Any:
    """A tool that waits forever (until cancelled), recording that it was cancelled."""

    @rk.tool
    async def slow() -> str:
        """Wait for a warehouse that never answers."""
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    return slow


ABANDONED = "error: abandoned — the live session ended"


async def test_close_while_a_tool_runs_cancels_the_tool_and_answers_its_call(
    session_service: Any,
) -> None:
    entered, seen = asyncio.Event(), []
    recorder = Recorder()
    model = PushedModel()
    agent = rk.ChatModelAgent("desk", live_model=model, tools=[blocking_tool(entered, seen)])
    r = runner(agent, session_service, plugins=[recorder])
    session = await live(r)
    model.connections[0].push(call("c1", "slow"))
    await entered.wait()
    await session.close()
    assert seen == ["cancelled"]
    assert recorder.calls == ["before_run", "after_run"]
    assert shown(await read_all(session)) == [("call", "slow")]
    saved = await stored(session_service)
    assert rows(saved) == [("desk", "assistant", ""), ("desk", "tool", ABANDONED)]
    assert model.connections[0].sent == [] and model.connections[0].closed
    again = await live(runner(rk.ChatModelAgent("desk", live_model=PushedModel()), session_service))
    await again.close()  # the lock was released


async def test_a_cancelled_close_still_ends_the_session(session_service: Any) -> None:
    # A caller cancelled while it waits for close() (a timeout around ``async with``): the
    # session still ends -- after_run runs and the lock is released -- instead of staying open.
    entered, seen = asyncio.Event(), []
    recorder = Recorder()
    model = PushedModel()
    agent = rk.ChatModelAgent("desk", live_model=model, tools=[blocking_tool(entered, seen)])
    r = runner(agent, session_service, plugins=[recorder])
    session = await live(r)
    reader = session.events()
    model.connections[0].push(call("c1", "slow"))
    await entered.wait()

    async def leave() -> None:
        async with asyncio.timeout(0):  # expires at once, while close() runs
            await session.close()

    with pytest.raises(TimeoutError):
        await leave()
    assert shown([ev async for ev in reader]) == [("call", "slow")]  # ends once the session did
    assert session.closed and seen == ["cancelled"]
    assert recorder.calls == ["before_run", "after_run"]
    again = await live(runner(rk.ChatModelAgent("desk", live_model=PushedModel()), session_service))
    await again.close()


async def test_close_while_an_answer_runs_its_tool_fails_that_send(session_service: Any) -> None:
    entered = asyncio.Event()

    @rk.tool
    async def approve(ctx: rk.ToolContext) -> str:
        """Approve once a human answered, after a slow check."""
        if not ctx.was_interrupted:
            raise rk.ToolInterrupt({"ask": "a human"})
        entered.set()
        await asyncio.Event().wait()
        return "approved"

    model = PushedModel()
    r = runner(rk.ChatModelAgent("desk", live_model=model, tools=[approve]), session_service)
    session = await live(r)
    model.connections[0].push(call("a1", "approve"))
    reader = session.events()
    assert shown([await anext(reader), await anext(reader)]) == [("call", "approve"), ("pause",)]
    answering = asyncio.ensure_future(session.send(Message.tool("yes", tool_call_id="a1")))
    await entered.wait()
    await session.close()
    with pytest.raises(LiveSessionClosedError, match=r"closed while the tool of call 'a1' ran"):
        await answering
    assert [ev async for ev in reader] == []
    assert rows(await stored(session_service)) == [
        ("desk", "assistant", ""),
        ("desk", "tool", ABANDONED),
    ]
    assert model.connections[0].sent == []


async def test_sending_while_it_opens_is_refused_and_close_waits_for_the_opening(
    session_service: Any,
) -> None:
    gate, started = asyncio.Event(), asyncio.Event()

    class SlowStart(Recorder):
        async def before_run(self, ctx: rk.InvocationContext) -> Message | None:
            started.set()
            await gate.wait()
            return await super().before_run(ctx)

    recorder = SlowStart()
    model = PushedModel()
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[recorder])
    session = live(r)
    opening = asyncio.ensure_future(session._open())
    await started.wait()
    with pytest.raises(ConfigurationError, match="still opening"):
        await session.send(Message.user("too early"))
    with pytest.raises(ConfigurationError, match="still opening"):
        await session.send_realtime(rk.Blob("audio/pcm", b"\x00"))
    closing = asyncio.ensure_future(session.close())
    await settle()
    assert not closing.done()  # waits for the opening
    gate.set()
    await opening
    await closing
    assert session.closed and model.connections[0].closed
    assert recorder.calls == ["before_run", "after_run"]
    assert await stored(session_service) == []


def test_a_session_left_open_when_the_event_loop_ends_runs_after_run() -> None:
    # asyncio.run cancels the reading task of a session its program forgot to close: the
    # session ends as a crash would (nothing more stored), with its connection closed and
    # after_run run, instead of the task vanishing with the session's lock held.
    recorder = Recorder()
    model = PushedModel()

    async def forget() -> None:
        r = runner(
            rk.ChatModelAgent("desk", live_model=model),
            rk.InMemorySessionService(),
            plugins=[recorder],
        )
        await live(r)

    asyncio.run(forget())
    assert recorder.calls == ["before_run", "after_run"]
    assert model.connections[0].closed


CRASHING = """
import asyncio, os, sys
import relaykit as rk
from relaykit.models.live import LiveResponse, ScriptedLiveModel

@rk.tool(long_running=True)
def refund(amount: int) -> str:
    '''Start a refund that a human approves.'''
    return "refund requested"

@rk.tool
def lookup(order: str) -> str:
    '''Look an order up.'''
    return "order " + order + " shipped"

async def main() -> None:
    model = ScriptedLiveModel([[
        LiveResponse(rk.Message.assistant("Where is order 7?"), transcription="input"),
        rk.Message.assistant("", [rk.ToolCall("r1", "refund", '{"amount": 5}')]),
        rk.Message.assistant("", [rk.ToolCall("c2", "lookup", '{"order": "7"}')]),
        ScriptedLiveModel.WAIT,
        ScriptedLiveModel.WAIT,
    ]])
    agent = rk.ChatModelAgent("desk", live_model=model, tools=[refund, lookup])
    async with rk.DatabaseSessionService(sys.argv[1]) as service:
        runner = rk.Runner(agent, app_name="live-tests", session_service=service)
        live = await runner.run_live(user_id="u1", session_id="s1")
        seen = 0
        async for ev in live.events():
            seen += 1
            if seen == 5:  # transcription, call, pause, call, result: then the process dies
                os._exit(3)
asyncio.run(main())
"""


async def test_a_process_killed_mid_session_leaves_a_history_the_next_turn_can_use(
    sqlite_url: str, tmp_path: Any
) -> None:
    script = tmp_path / "crash.py"
    script.write_text(CRASHING)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), sqlite_url, cwd=os.getcwd()
    )
    assert await proc.wait() == 3
    chat = rk.ScriptedModel([Message.assistant("How can I help?")])
    agent = rk.ChatModelAgent("desk", model=chat, live_model=PushedModel())
    async with rk.DatabaseSessionService(sqlite_url) as service:
        r = runner(agent, service)
        await r.invoke(Message.user("Hello again."), user_id="u1", session_id="s1")
    history = [
        (m.role, m.content, m.tool_call_id, [c.id for c in m.tool_calls])
        for m in chat.requests[0].messages
        if m.role != "system"
    ]
    assert history == [
        ("user", "Where is order 7?", None, []),
        ("assistant", "", None, ["r1"]),
        ("tool", STOPPED_TEXT, "r1", []),  # the call the crash left open is answered
        ("assistant", "", None, ["c2"]),
        ("tool", "order 7 shipped", "c2", []),
        ("user", "Hello again.", None, []),
    ]


async def test_audio_is_forwarded_while_a_tool_runs(session_service: Any) -> None:
    # Streaming audio does not wait for a tool (or a store) of the session: only text, which
    # is stored, keeps the storage order.
    gate, entered = asyncio.Event(), asyncio.Event()

    @rk.tool
    async def check() -> str:
        """Check the warehouse (slowly)."""
        entered.set()
        await gate.wait()
        return "in stock"

    model = PushedModel()
    r = runner(rk.ChatModelAgent("desk", live_model=model, tools=[check]), session_service)
    async with live(r) as session:
        connection = model.connections[0]
        connection.push(call("c1", "check"))
        await entered.wait()
        chunk = rk.Blob("audio/pcm", b"\x01\x02")
        await session.send_realtime(chunk)  # returns while the tool still runs
        assert connection.sent == [chunk]
        gate.set()
        connection.end()
        assert shown(await read_all(session)) == [("call", "check"), ("tool", "in stock")]
    assert connection.sent == [
        chunk,
        Message.tool("in stock", tool_call_id="c1", tool_name="check"),
    ]


class GatedModel(PushedModel):
    """A pushed model whose connect waits for ``gate``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.connecting = asyncio.Event()

    async def connect(self, config: Any) -> Any:
        self.connecting.set()
        await self.gate.wait()
        return await super().connect(config)


async def test_audio_sent_during_a_transfer_waits_for_the_new_connection(
    session_service: Any,
) -> None:
    triage_model, orders_model = PushedModel(), GatedModel()
    triage = rk.ChatModelAgent("triage", live_model=triage_model)
    orders = rk.ChatModelAgent("orders", live_model=orders_model)
    r = runner(rk.set_sub_agents(triage, [orders]), session_service)
    async with live(r) as session:
        triage_model.connections[0].push(
            call("t1", "transfer_to_agent", '{"agent_name": "orders"}')
        )
        await orders_model.connecting.wait()
        chunk = rk.Blob("audio/pcm", b"\x03")
        sending = asyncio.ensure_future(session.send_realtime(chunk))
        await settle()
        assert not sending.done()  # waits for the target's connection
        orders_model.gate.set()
        await sending
    assert triage_model.connections[0].sent == []
    assert orders_model.connections[0].sent == [chunk]


async def test_close_while_a_transfer_connects_cancels_the_connect(session_service: Any) -> None:
    recorder = Recorder()
    triage_model, orders_model = PushedModel(), GatedModel()  # orders never connects
    triage = rk.ChatModelAgent("triage", live_model=triage_model)
    orders = rk.ChatModelAgent("orders", live_model=orders_model)
    r = runner(rk.set_sub_agents(triage, [orders]), session_service, plugins=[recorder])
    session = await live(r)
    triage_model.connections[0].push(call("t1", "transfer_to_agent", '{"agent_name": "orders"}'))
    await orders_model.connecting.wait()
    await session.close()
    assert recorder.calls == ["before_run", "after_run"]
    assert shown(await read_all(session)) == [
        ("call", "transfer_to_agent"),
        ("tool", "successfully transferred to agent [orders]"),
    ]
    assert orders_model.connections == [] and triage_model.connections[0].closed
    assert [e.error for e in await stored(session_service)] == [None, None]


async def test_concurrent_sends_are_stored_in_the_order_they_were_sent(
    session_service: Any,
) -> None:
    model = PushedModel()
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    async with live(r) as session:
        texts = [f"part {i}" for i in range(6)]
        await asyncio.gather(*(session.send(Message.user(t)) for t in texts))
        sent = [m.content for m in model.connections[0].sent]
    assert sorted(sent) == texts
    assert [row[2] for row in rows(await stored(session_service))] == sent


async def test_a_send_racing_close_is_either_sent_and_stored_or_refused(
    session_service: Any,
) -> None:
    model = PushedModel()
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    session = await live(r)
    results = await asyncio.gather(
        session.send(Message.user("first")),
        session.close(),
        session.send(Message.user("too late")),
        return_exceptions=True,
    )
    assert results[0] is None and results[1] is None
    assert isinstance(results[2], LiveSessionClosedError)
    assert [m.content for m in model.connections[0].sent] == ["first"]
    assert rows(await stored(session_service)) == [("user", "user", "first")]


class StuckSendModel(PushedModel):
    """A pushed model whose first text send never completes."""

    async def connect(self, config: Any) -> Any:
        connection = await super().connect(config)
        plain = connection.send
        stuck = asyncio.Event()

        async def send(message: Message) -> None:
            if not stuck.is_set():
                stuck.set()
                await asyncio.Event().wait()
            await plain(message)

        connection.send = send  # type: ignore[method-assign]
        return connection


async def test_a_cancelled_send_stores_nothing_and_the_session_goes_on(
    session_service: Any,
) -> None:
    model = StuckSendModel()
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service)
    async with live(r) as session:
        sending = asyncio.ensure_future(session.send(Message.user("lost")))
        await settle()
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending
        await session.send(Message.user("again"))  # the storage order was released
    assert [m.content for m in model.connections[0].sent] == ["again"]
    assert rows(await stored(session_service)) == [("user", "user", "again")]


@pytest.mark.parametrize("where", ["before_run", "connect"])
async def test_cancelling_the_opening_releases_the_session(
    session_service: Any, where: str
) -> None:
    started = asyncio.Event()

    class Stuck(Recorder):
        async def before_run(self, ctx: rk.InvocationContext) -> Message | None:
            await super().before_run(ctx)
            if where == "before_run":
                started.set()
                await asyncio.Event().wait()
            return None

    recorder = Stuck()
    model = GatedModel()  # never connects
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[recorder])
    opening = asyncio.ensure_future(live(r)._open())
    await (started.wait() if where == "before_run" else model.connecting.wait())
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert recorder.calls == ["before_run", "after_run"]
    again = await live(runner(rk.ChatModelAgent("desk", live_model=PushedModel()), session_service))
    await again.close()  # the lock was released
    assert await stored(session_service) == []


def test_a_full_buffer_nobody_reads_ends_at_close_with_no_task_left() -> None:
    recorder = Recorder()
    model = PushedModel()
    left: list[asyncio.Task[Any]] = []

    async def main() -> None:
        r = runner(
            rk.ChatModelAgent("desk", live_model=model),
            rk.InMemorySessionService(),
            plugins=[recorder],
        )
        session = await live(r, rk.LiveRunConfig(max_buffered_events=2))
        model.connections[0].push(*(Message.assistant(f"line {i}") for i in range(10)))
        await settle()  # the reader stops at two events: nobody reads them
        await session.close()
        left.extend(t for t in asyncio.all_tasks() if t is not asyncio.current_task())

    asyncio.run(main())
    assert left == []
    assert recorder.calls == ["before_run", "after_run"]
    assert model.connections[0].closed
