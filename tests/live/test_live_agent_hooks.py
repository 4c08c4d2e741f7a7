"""The agent hooks in live sessions: ``before_agent`` before an agent connects (at opening and
for a transfer's target), ``after_agent`` once its live part completed (the model ended the
stream, the caller closed the session, or it transferred) -- not after an error."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import relaykit as rk
from relaykit import Message
from relaykit.models.live import ScriptedLiveModel
from tests.live.support import WAIT, call, live, read_all, rows, runner, shown, stored


class AgentHooks(rk.Plugin):
    """Records the hooks it sees; answers or fails them for the agents it is told."""

    def __init__(
        self,
        *,
        answer_before: dict[str, str] | None = None,
        answer_after: dict[str, str] | None = None,
        fail: set[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__("agent-hooks")
        self.calls: list[tuple[str, ...]] = []
        self._before = answer_before or {}
        self._after = answer_after or {}
        self._fail = fail or set()

    async def before_run(self, ctx: rk.InvocationContext) -> Message | None:
        self.calls.append(("before_run",))
        return None

    async def before_agent(self, ctx: rk.InvocationContext, agent_name: str) -> Message | None:
        self.calls.append(("before_agent", agent_name))
        if ("before_agent", agent_name) in self._fail:
            raise RuntimeError(f"{agent_name} may not start")
        text = self._before.get(agent_name)
        return Message.assistant(text) if text else None

    async def after_agent(self, ctx: rk.InvocationContext, agent_name: str) -> Message | None:
        self.calls.append(("after_agent", agent_name))
        if ("after_agent", agent_name) in self._fail:
            raise RuntimeError(f"{agent_name} may not end")
        text = self._after.get(agent_name)
        return Message.assistant(text) if text else None

    async def after_run(self, ctx: rk.InvocationContext) -> None:
        self.calls.append(("after_run",))


def transfer(to: str) -> Message:
    return call("t1", "transfer_to_agent", json.dumps({"agent_name": to}))


def desk(triage_steps: list[Any], orders_steps: list[Any]) -> tuple[Any, Any, Any]:
    """triage (live) with orders (live) below it; their scripted live models."""
    triage_model = ScriptedLiveModel([triage_steps])
    orders_model = ScriptedLiveModel([orders_steps])
    triage = rk.ChatModelAgent("triage", "routes", "Route.", live_model=triage_model)
    orders = rk.ChatModelAgent("orders", "orders", "Answer.", live_model=orders_model)
    return rk.set_sub_agents(triage, [orders]), triage_model, orders_model


async def test_hooks_run_around_each_live_agent_across_a_transfer_and_the_close(
    session_service: Any,
) -> None:
    hooks = AgentHooks(answer_after={"orders": "Anything else?"})
    root, triage_model, orders_model = desk(
        [WAIT, transfer("orders"), WAIT], [WAIT, Message.assistant("Order 7 left."), WAIT]
    )
    r = runner(root, session_service, plugins=[hooks])
    async with live(r) as session:
        await session.send(Message.user("Where is order 7?"))
        reader = session.events()
        got = [await anext(reader) for _ in range(2)]
        await session.send(Message.user("Order 7."))
        got.append(await anext(reader))
    got += [ev async for ev in reader]
    assert hooks.calls == [
        ("before_run",),
        ("before_agent", "triage"),
        ("after_agent", "triage"),
        ("before_agent", "orders"),
        ("after_agent", "orders"),
        ("after_run",),
    ]
    assert shown(got) == [
        ("call", "transfer_to_agent"),
        ("tool", "successfully transferred to agent [orders]"),
        ("assistant", "Order 7 left."),
        ("assistant", "Anything else?"),
    ]
    saved = await stored(session_service)
    assert rows(saved)[-1] == ("orders", "assistant", "Anything else?")
    assert saved[-1].run_path == ("triage", "orders")
    assert triage_model.connections[0].closed
    assert orders_model.connections[0].sent == [Message.user("Order 7.")]


async def test_after_agent_runs_when_the_model_ends_the_stream(session_service: Any) -> None:
    hooks = AgentHooks(answer_after={"desk": "Goodbye."})
    model = ScriptedLiveModel([[Message.assistant("We are done here.")]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[hooks])
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events) == [("assistant", "We are done here."), ("assistant", "Goodbye.")]
    assert [c for c in hooks.calls if c[0].endswith("_agent")] == [
        ("before_agent", "desk"),
        ("after_agent", "desk"),
    ]


async def test_before_agent_answers_at_opening_and_nothing_connects(
    session_service: Any,
) -> None:
    hooks = AgentHooks(answer_before={"desk": "The desk is closed today."})
    model = ScriptedLiveModel([])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[hooks])
    session = await live(r)
    assert session.closed
    events = await read_all(session)
    await session.close()
    assert model.connects == []
    assert shown(events) == [("assistant", "The desk is closed today.")]
    saved = await stored(session_service)
    assert rows(saved) == [("desk", "assistant", "The desk is closed today.")]
    assert saved[0].run_path == ("desk",)
    # Answered instead of the agent: its after_agent does not run.
    assert hooks.calls == [("before_run",), ("before_agent", "desk"), ("after_run",)]


async def test_a_failing_before_agent_at_opening_is_the_agents_stored_error(
    session_service: Any,
) -> None:
    hooks = AgentHooks(fail={("before_agent", "desk")})
    model = ScriptedLiveModel([])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[hooks])
    async with live(r) as session:
        events = await read_all(session)
    assert model.connects == []
    assert shown(events) == [("error", "PluginError")]
    assert events[0].agent_name == "desk"
    saved = await stored(session_service)
    assert len(saved) == 1 and "desk may not start" in (saved[0].error or "")
    assert hooks.calls[-1] == ("after_run",)


async def test_before_agent_answering_for_a_transfer_target_ends_the_session_unconnected(
    session_service: Any,
) -> None:
    hooks = AgentHooks(answer_before={"orders": "Orders is closed; call tomorrow."})
    root, triage_model, orders_model = desk([WAIT, transfer("orders"), WAIT], [WAIT])
    r = runner(root, session_service, plugins=[hooks])
    async with live(r) as session:
        await session.send(Message.user("Where is order 7?"))
        events = await read_all(session)
        assert session.closed
    assert orders_model.connects == []
    assert triage_model.connections[0].closed
    assert shown(events)[-1] == ("assistant", "Orders is closed; call tomorrow.")
    saved = await stored(session_service)
    assert rows(saved)[-1] == ("orders", "assistant", "Orders is closed; call tomorrow.")
    assert saved[-1].run_path == ("triage", "orders")
    assert ("after_agent", "orders") not in hooks.calls
    assert hooks.calls[-1] == ("after_run",)


async def test_a_failing_hook_at_a_transfer_ends_the_session_with_that_agents_error(
    session_service: Any,
) -> None:
    for failing, author in (("after_agent", "triage"), ("before_agent", "orders")):
        hooks = AgentHooks(fail={(failing, author)})
        root, _, orders_model = desk([WAIT, transfer("orders"), WAIT], [WAIT])
        r = runner(root, session_service, plugins=[hooks])
        async with live(r) as session:
            await session.send(Message.user("Where is order 7?"))
            events = await read_all(session)
        assert orders_model.connects == [], failing
        assert shown(events)[-1] == ("error", "PluginError"), failing
        assert events[-1].agent_name == author
        saved = await stored(session_service)
        assert saved[-1].author == author and f"{author} may not" in (saved[-1].error or "")
        await session_service.delete_session("live-tests", "u1", "s1")


async def test_after_agent_does_not_run_after_a_failed_connection(session_service: Any) -> None:
    hooks = AgentHooks()
    model = ScriptedLiveModel([[RuntimeError("the socket broke")]])
    r = runner(rk.ChatModelAgent("desk", live_model=model), session_service, plugins=[hooks])
    async with live(r) as session:
        events = await read_all(session)
    assert shown(events)[-1][0] == "error"
    assert ("after_agent", "desk") not in hooks.calls
    assert hooks.calls[-1] == ("after_run",)


class Hanging:
    """A live model whose connect waits until cancelled (``started`` once it waits)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def connect(self, config: Any) -> Any:
        self.started.set()
        await asyncio.Event().wait()


async def test_close_during_a_transfer_runs_after_agent_once_and_starts_no_target(
    session_service: Any,
) -> None:
    hooks = AgentHooks(answer_after={"triage": "Passing you on."})
    triage_model = ScriptedLiveModel([[WAIT, transfer("orders"), WAIT]])
    orders_model = Hanging()
    triage = rk.ChatModelAgent("triage", "routes", "Route.", live_model=triage_model)
    orders = rk.ChatModelAgent("orders", "orders", "Answer.", live_model=orders_model)
    r = runner(rk.set_sub_agents(triage, [orders]), session_service, plugins=[hooks])
    session = await live(r)
    await session.send(Message.user("Where is order 7?"))
    await asyncio.wait_for(orders_model.started.wait(), 5)  # the target connects...
    await asyncio.wait_for(session.close(), 5)  # ...and the caller hangs up
    await read_all(session)
    assert hooks.calls == [
        ("before_run",),
        ("before_agent", "triage"),
        ("after_agent", "triage"),
        ("before_agent", "orders"),
        ("after_run",),
    ]
    saved = await stored(session_service)
    assert [e.message.content for e in saved if e.message].count("Passing you on.") == 1


class HangingHook(AgentHooks):
    """``before_agent`` for ``orders`` never returns the first time (until cancelled)."""

    async def before_agent(self, ctx: rk.InvocationContext, agent_name: str) -> Message | None:
        await super().before_agent(ctx, agent_name)
        if self.calls.count(("before_agent", "orders")) == 1 and agent_name == "orders":
            await asyncio.Event().wait()
        return None


async def test_close_is_not_held_up_by_a_transfer_targets_hook_that_hangs(
    session_service: Any,
) -> None:
    hooks = HangingHook()
    root, _, orders_model = desk([WAIT, transfer("orders"), WAIT], [WAIT])
    r = runner(root, session_service, plugins=[hooks])
    session = await live(r)
    await session.send(Message.user("Where is order 7?"))
    while ("before_agent", "orders") not in hooks.calls:
        await asyncio.sleep(0)
    await asyncio.wait_for(session.close(), 5)
    assert orders_model.connects == []
    assert hooks.calls[-1] == ("after_run",)
    # The lock is free: the session takes the next live session.
    async with live(r) as again:
        assert not again.closed


async def test_after_agent_does_not_run_when_a_call_still_waits_at_the_close(
    session_service: Any,
) -> None:
    @rk.tool(long_running=True)
    def approve(amount: int) -> str:
        """Ask a human to approve a payment."""
        return "asked"

    hooks = AgentHooks()
    model = ScriptedLiveModel([[WAIT, call("c1", "approve", '{"amount": 5}'), WAIT]])
    agent = rk.ChatModelAgent("desk", live_model=model, tools=[approve])
    r = runner(agent, session_service, plugins=[hooks])
    async with live(r) as session:
        await session.send(Message.user("Pay 5."))
        reader = session.events()
        while not any(ev.action and ev.action.interrupted for ev in [await anext(reader)]):
            pass
    assert ("after_agent", "desk") not in hooks.calls
    assert hooks.calls[-1] == ("after_run",)
