"""The Runner in session mode (AR-01..13, D12, D18, D20, D21, D25), on every session service."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit as rk
from relaykit.compaction import CompactionConfig
from relaykit.errors import (
    CheckpointNotFoundError,
    ConfigurationError,
    ResumeTargetError,
    SessionBusyError,
    SessionNotFoundError,
)
from relaykit.sessions import InMemorySessionService, SessionEvent

APP, USER, SID = "desk", "u1", "s1"


def call(call_id: str, name: str, arguments: str = "{}") -> rk.Message:
    return rk.Message.assistant("", [rk.ToolCall(call_id, name, arguments)])


def transfer(call_id: str, dest: str) -> rk.Message:
    return call(call_id, "transfer_to_agent", f'{{"agent_name": "{dest}"}}')


@rk.tool
def lookup(order: str) -> str:
    """Look an order up.

    Args:
        order: the order id.
    """
    return f"order {order} shipped"


STARTED: list[str] = []


@rk.tool(long_running=True)
def refund(amount: int) -> str:
    """Start a refund that a manager approves later.

    Args:
        amount: the amount in EUR.
    """
    STARTED.append(f"refund {amount}")
    return f"ticket-{amount}"


def desk(
    triage: list[Any], orders: list[Any], refunds: list[Any] | None = None
) -> tuple[rk.FlowAgent, dict[str, rk.ScriptedModel]]:
    models = {
        "triage": rk.ScriptedModel(triage),
        "orders": rk.ScriptedModel(orders),
        "refunds": rk.ScriptedModel(refunds or []),
    }
    root = rk.set_sub_agents(
        rk.ChatModelAgent("triage", description="routes", model=models["triage"]),
        [
            rk.ChatModelAgent(
                "orders", description="orders", model=models["orders"], tools=[lookup]
            ),
            rk.ChatModelAgent(
                "refunds", description="refunds", model=models["refunds"], tools=[refund]
            ),
        ],
    )
    return root, models


async def events_of(stream: AsyncIterator[rk.AgentEvent]) -> list[rk.AgentEvent]:
    return [ev async for ev in stream]


async def stored(service: Any) -> list[SessionEvent]:
    session = await service.get_session(APP, USER, SID)
    assert session is not None
    return session.events


def texts(events: list[SessionEvent]) -> list[tuple[str, str]]:
    return [(e.author, e.message.content) for e in events if e.message is not None]


# -- AR-01..04: lazy, get-or-create, user first, stored before delivered -------------------
async def test_nothing_runs_until_iterated_and_the_user_event_is_stored_first(
    service: Any,
) -> None:
    root, models = desk(
        [transfer("t1", "orders")],
        [call("c1", "lookup", '{"order": "7"}'), rk.Message.assistant("Shipped.")],
    )
    runner = rk.Runner(root, app_name=APP, session_service=service)
    stream = runner.run([rk.Message.user("where is 7?")], user_id=USER, session_id=SID)
    await asyncio.sleep(0)
    assert await service.get_session(APP, USER, SID) is None  # AR-01: nothing yet
    seen: list[int] = []
    async for ev in stream:
        # AR-04: every delivered event is already stored when the caller receives it.
        seen.append(len(await stored(service)))
        assert ev.message is not None
    events = await stored(service)
    assert [e.author for e in events] == ["user", "triage", "triage", "orders", "orders", "orders"]
    assert events[0].message is not None and events[0].message.content == "where is 7?"
    assert seen == [2, 3, 4, 5, 6]
    assert len({e.invocation_id for e in events}) == 1
    assert events[2].action is not None and events[2].action.transfer_to_agent is not None
    assert events[3].run_path == ("triage", "orders")
    assert models["orders"].requests[0].messages[1].content == "where is 7?"


async def test_without_auto_create_a_missing_session_is_an_error(service: Any) -> None:
    root, _ = desk([rk.Message.assistant("hi")], [])
    runner = rk.Runner(root, app_name=APP, session_service=service, auto_create_session=False)
    with pytest.raises(SessionNotFoundError):
        await runner.invoke("hi", user_id=USER, session_id=SID)
    await service.create_session(APP, USER, SID)
    result = await runner.invoke("hi", user_id=USER, session_id=SID)
    assert result.output is not None and result.output.content == "hi"


async def test_bad_calls_are_configuration_errors_before_anything_is_stored() -> None:
    service = InMemorySessionService()
    root, _ = desk([], [])
    runner = rk.Runner(root, app_name=APP, session_service=service)
    with pytest.raises(ConfigurationError, match="at least one message"):
        runner.run([], user_id=USER, session_id=SID)
    with pytest.raises(ConfigurationError, match="user_id and session_id"):
        runner.run([rk.Message.user("hi")])
    with pytest.raises(ConfigurationError, match="checkpoint_id"):
        runner.run([rk.Message.user("hi")], user_id=USER, session_id=SID, checkpoint_id="c")
    with pytest.raises(ConfigurationError, match="not a 'assistant' message"):
        runner.run([call("x", "lookup")], user_id=USER, session_id=SID)
    assert await service.get_session(APP, USER, SID) is None


def test_an_agent_named_user_is_refused() -> None:
    agent = rk.ChatModelAgent("user", model=rk.ScriptedModel([]))
    with pytest.raises(ConfigurationError, match="named 'user'"):
        rk.Runner(agent, session_service=InMemorySessionService())
    rk.Runner(agent)  # fine without sessions


# -- history and routing (D12, D18, D25) ---------------------------------------------------
async def test_earlier_turns_are_history_and_the_next_turn_starts_at_the_last_speaker(
    service: Any,
) -> None:
    root, models = desk(
        [transfer("t1", "orders")],
        [
            call("c1", "lookup", '{"order": "7"}'),
            rk.Message.assistant("Shipped."),
            rk.Message.assistant("You are welcome."),
        ],
    )
    runner = rk.Runner(root, app_name=APP, session_service=service)
    await runner.invoke("where is 7?", user_id=USER, session_id=SID)
    second = await runner.invoke("thanks", user_id=USER, session_id=SID)
    assert [ev.agent_name for ev in second.events] == ["orders"]  # AR-09
    assert second.events[0].run_path == (rk.RunStep("triage"), rk.RunStep("orders"))
    request = models["orders"].requests[-1].messages
    assert [m.role for m in request[1:]] == [
        "user",
        "user",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert request[1].content == "where is 7?"
    assert request[2].content.startswith("For context: [triage] called tool")
    assert request[-1].content == "thanks"  # the current user message, exactly once
    assert len(models["triage"].requests) == 1


async def test_the_next_turn_starts_at_the_root_when_transfer_to_parent_is_disallowed(
    service: Any,
) -> None:
    orders_model = rk.ScriptedModel([rk.Message.assistant("Shipped.")])
    triage_model = rk.ScriptedModel([transfer("t1", "orders"), rk.Message.assistant("Hi!")])
    root = rk.set_sub_agents(
        rk.ChatModelAgent("triage", model=triage_model),
        [
            rk.as_flow_agent(
                rk.ChatModelAgent("orders", model=orders_model), disallow_transfer_to_parent=True
            )
        ],
    )
    runner = rk.Runner(root, app_name=APP, session_service=service)
    await runner.invoke("where is 7?", user_id=USER, session_id=SID)
    second = await runner.invoke("hello", user_id=USER, session_id=SID)
    assert [ev.agent_name for ev in second.events] == ["triage"]
    # Triage reads the orders agent's answer as context, and its own transfer as its own.
    seen = triage_model.requests[-1].messages
    assert "For context: [orders] said: Shipped.." in [m.content for m in seen]


async def test_a_transfer_whose_target_never_spoke_routes_to_the_target(service: Any) -> None:
    def boom(_: rk.ModelRequest) -> rk.Message:
        raise RuntimeError("model down")

    root, _ = desk([transfer("t1", "orders")], [boom, rk.Message.assistant("Back.")])
    runner = rk.Runner(root, app_name=APP, session_service=service)
    events = await events_of(runner.run([rk.Message.user("hi")], user_id=USER, session_id=SID))
    assert [ev.agent_name for ev in events] == ["triage", "triage", "orders"]
    assert events[-1].error is not None
    again = await runner.invoke("retry", user_id=USER, session_id=SID)
    assert [ev.agent_name for ev in again.events] == ["orders"]
    assert again.output is not None and again.output.content == "Back."


# -- state (AR-06, D12) --------------------------------------------------------------------
class Writer(rk.BaseAgent):
    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        seen = {k: ctx.get_session_value(k) for k in ("app:theme", "user:name", "cart", "temp:x")}
        ctx.set_session_value("cart", (ctx.get_session_value("cart") or 0) + 1)
        ctx.set_session_value("temp:scratch", "gone")
        yield rk.AgentEvent.from_message(rk.Message.assistant(repr(seen)))
        ctx.set_session_value("user:visits", 1)  # after the last event: a state-only event


async def test_state_deltas_apply_by_scope_and_temp_is_never_stored(service: Any) -> None:
    runner = rk.Runner(Writer("writer"), app_name=APP, session_service=service)
    result = await runner.invoke(
        "hi",
        user_id=USER,
        session_id=SID,
        state_delta={"app:theme": "dark", "user:name": "Ada", "temp:x": 1},
    )
    assert result.output is not None
    assert (
        result.output.content == "{'app:theme': 'dark', 'user:name': 'Ada', 'cart': None, "
        "'temp:x': 1}"
    )
    events = await stored(service)
    assert [e.author for e in events] == ["user", "writer", "writer"]
    assert events[0].state_delta == {"app:theme": "dark", "user:name": "Ada"}
    assert events[1].state_delta == {"cart": 1}
    assert events[2].message is None and events[2].state_delta == {"user:visits": 1}
    session = await service.get_session(APP, USER, SID)
    assert session.state == {"app:theme": "dark", "user:name": "Ada", "cart": 1, "user:visits": 1}
    other = await service.create_session(APP, USER, "s2")
    assert other.state == {"app:theme": "dark", "user:name": "Ada", "user:visits": 1}
    await runner.invoke("again", user_id=USER, session_id=SID)
    assert (await service.get_session(APP, USER, SID)).state["cart"] == 2


# -- long-running tools and pauses (AR-08, D12, D21) ---------------------------------------
def refund_desk() -> tuple[rk.FlowAgent, dict[str, rk.ScriptedModel]]:
    return desk(
        [transfer("t1", "refunds")],
        [],
        [
            call("r1", "refund", '{"amount": 30}'),
            rk.Message.assistant("Refund approved."),
            rk.Message.assistant("Anything else?"),
        ],
    )


async def test_a_tool_response_continues_the_paused_invocation(service: Any) -> None:
    STARTED.clear()
    root, models = refund_desk()
    runner = rk.Runner(root, app_name=APP, session_service=service)
    paused = await runner.invoke("refund 30 EUR", user_id=USER, session_id=SID)
    assert paused.interrupt is not None
    info = paused.interrupt.contexts[0].info
    assert info == {
        "tool": "refund",
        "tool_call_id": "r1",
        "arguments": {"amount": 30},
        "started": "ticket-30",
    }
    assert await service.get_checkpoint(APP, USER, SID) is not None
    # A fresh Runner (as another process would build) answers the call.
    runner2 = rk.Runner(root, app_name=APP, session_service=service)
    done = await runner2.invoke(
        [rk.Message.tool("approved by Bo", tool_call_id="r1"), rk.Message.user("thanks!")],
        user_id=USER,
        session_id=SID,
    )
    assert done.output is not None and done.output.content == "Refund approved."
    assert STARTED == ["refund 30"]  # the tool started once; the response is its result
    events = await stored(service)
    assert len({e.invocation_id for e in events}) == 1  # continued under the paused id
    assert texts(events)[-4:] == [
        ("user", "approved by Bo"),
        ("user", "thanks!"),
        ("refunds", "approved by Bo"),
        ("refunds", "Refund approved."),
    ]
    assert await service.get_checkpoint(APP, USER, SID) is None  # consumed
    request = models["refunds"].requests[-1].messages
    assert [m.role for m in request][-3:] == ["assistant", "tool", "user"]
    assert request[-2].content == "approved by Bo" and request[-1].content == "thanks!"


async def test_an_unmatched_tool_response_is_rejected_before_anything_is_stored(
    service: Any,
) -> None:
    root, _ = refund_desk()
    runner = rk.Runner(root, app_name=APP, session_service=service)
    with pytest.raises(ResumeTargetError, match="'zz'"):
        await runner.invoke(
            [rk.Message.tool("ok", tool_call_id="zz")], user_id=USER, session_id=SID
        )
    assert await stored(service) == []  # the session exists, nothing stored
    await runner.invoke("refund 30 EUR", user_id=USER, session_id=SID)
    count = len(await stored(service))
    with pytest.raises(ResumeTargetError, match="'zz'"):
        await runner.invoke(
            [rk.Message.tool("ok", tool_call_id="zz")], user_id=USER, session_id=SID
        )
    assert len(await stored(service)) == count
    assert await service.get_checkpoint(APP, USER, SID) is not None


async def test_a_new_text_turn_abandons_the_pause(service: Any) -> None:
    root, models = desk(
        [transfer("t1", "refunds")],
        [],
        [call("r1", "refund", '{"amount": 30}'), rk.Message.assistant("Okay, no refund.")],
    )
    runner = rk.Runner(root, app_name=APP, session_service=service)
    await runner.invoke("refund 30 EUR", user_id=USER, session_id=SID)
    paused_inv = (await stored(service))[0].invocation_id
    result = await runner.invoke("never mind", user_id=USER, session_id=SID)
    assert [ev.agent_name for ev in result.events] == ["refunds"]  # the abandon is not delivered
    events = await stored(service)
    abandon = [
        e
        for e in events
        if e.message is not None and e.message.role == "tool" and e.message.tool_call_id == "r1"
    ]
    assert len(abandon) == 1
    assert abandon[0].author == "refunds" and abandon[0].invocation_id == paused_inv
    assert abandon[0].message.content == "error: abandoned — the user sent a new message"
    assert events.index(abandon[0]) < [e.author for e in events].index("user", 1)
    assert await service.get_checkpoint(APP, USER, SID) is None
    request = models["refunds"].requests[-1].messages
    assert [m.role for m in request][-3:] == ["assistant", "tool", "user"]


class Approval(rk.BaseAgent):
    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        ctx.set_session_value("temp:ticket", "T-1")
        yield rk.interrupt(ctx, "approve?")

    async def resume(
        self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        ticket = ctx.get_session_value("temp:ticket")
        yield rk.AgentEvent.from_message(rk.Message.assistant(f"{ticket}: {info.resume_data}"))


async def test_resume_continues_a_core_interrupt_and_consumes_the_pause(service: Any) -> None:
    runner = rk.Runner(Approval("approver"), app_name=APP, session_service=service)
    with pytest.raises(CheckpointNotFoundError):
        await runner.invoke_resume(user_id=USER, session_id=SID)
    paused = await runner.invoke("pay", user_id=USER, session_id=SID)
    assert paused.interrupt is not None
    point = paused.interrupt.contexts[0].id
    events = await stored(service)
    assert events[-1].action is not None and events[-1].action.interrupted is not None
    assert events[-1].action.interrupted.contexts[0].info == "approve?"
    with pytest.raises(ResumeTargetError):
        await runner.invoke_resume(user_id=USER, session_id=SID, targets={"nope": 1})
    done = await runner.invoke_resume(user_id=USER, session_id=SID, targets={point: "yes"})
    assert done.output is not None and done.output.content == "T-1: yes"  # temp: survived
    assert await service.get_checkpoint(APP, USER, SID) is None
    with pytest.raises(CheckpointNotFoundError):
        await runner.invoke_resume(user_id=USER, session_id=SID)
    session = await service.get_session(APP, USER, SID)
    assert "temp:ticket" not in session.state


async def test_a_resume_stopped_early_leaves_the_pause(service: Any) -> None:
    class Twice(Approval):
        async def resume(
            self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            yield rk.AgentEvent.from_message(rk.Message.assistant("one"))
            yield rk.AgentEvent.from_message(rk.Message.assistant("two"))

    runner = rk.Runner(Twice("approver"), app_name=APP, session_service=service)
    await runner.invoke("pay", user_id=USER, session_id=SID)
    stream = runner.resume(user_id=USER, session_id=SID)
    async for _ in stream:
        break
    await stream.aclose()  # type: ignore[attr-defined]
    assert await service.get_checkpoint(APP, USER, SID) is not None
    done = await runner.invoke_resume(user_id=USER, session_id=SID)
    assert done.output is not None and done.output.content == "two"


# -- concurrency (D25) ---------------------------------------------------------------------
async def test_a_turn_waits_for_the_session_then_fails_with_session_busy(service: Any) -> None:
    gate = asyncio.Event()

    class Slow(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            await gate.wait()
            yield rk.AgentEvent.from_message(rk.Message.assistant("done"))

    runner = rk.Runner(
        Slow("slow"), app_name=APP, session_service=service, session_lock_timeout=0.2
    )
    first = asyncio.create_task(runner.invoke("one", user_id=USER, session_id=SID))
    while await service.get_session(APP, USER, SID) is None or not (await stored(service)):
        await asyncio.sleep(0.01)
    with pytest.raises(SessionBusyError):
        await runner.invoke("two", user_id=USER, session_id=SID)
    gate.set()
    await first
    assert texts(await stored(service)) == [("user", "one"), ("slow", "done")]


# -- plugins (AR-05, AR-13, D19, D25) ------------------------------------------------------
class Recorder(rk.Plugin):
    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.calls: list[str] = []

    async def on_user_message(self, ctx: Any, message: rk.Message) -> rk.Message | None:
        self.calls.append("on_user_message")
        return rk.Message.user(message.content.upper())

    async def on_event(self, ctx: Any, event: rk.AgentEvent) -> rk.AgentEvent | None:
        self.calls.append(f"on_event:{event.agent_name}")
        if event.message is not None and event.message.content == "secret":
            raise ValueError("no secrets")
        return None

    async def after_run(self, ctx: Any) -> None:
        self.calls.append(f"after_run:{ctx.invocation_id == ctx.invocation_id}")


async def test_plugins_replace_the_message_reject_events_and_after_run_runs(
    service: Any,
) -> None:
    plugin = Recorder()
    model = rk.ScriptedModel([rk.Message.assistant("secret"), rk.Message.assistant("public")])

    class Two(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            assert input.messages[-1].content == "HELLO"
            for _ in range(2):
                yield rk.AgentEvent.from_message(await model.generate(rk.ModelRequest([])))

    runner = rk.Runner(Two("two"), app_name=APP, session_service=service, plugins=[plugin])
    events = await events_of(runner.run([rk.Message.user("hello")], user_id=USER, session_id=SID))
    assert [type(ev.error).__name__ if ev.error else ev.message.content for ev in events] == [
        "PluginError",
        "public",
    ]
    assert texts(await stored(service)) == [("user", "HELLO"), ("two", "public")]
    stored_errors = [e.error for e in await stored(service) if e.error]
    assert len(stored_errors) == 1 and "no secrets" in stored_errors[0]
    assert plugin.calls == ["on_user_message", "on_event:two", "on_event:two", "after_run:True"]


async def test_before_run_answers_and_no_agent_runs(service: Any) -> None:
    class Closed(rk.Plugin):
        async def before_run(self, ctx: Any) -> rk.Message | None:
            return rk.Message.assistant("We are closed.")

    model = rk.ScriptedModel([])
    runner = rk.Runner(
        rk.ChatModelAgent("desk", model=model),
        app_name=APP,
        session_service=service,
        plugins=[Closed()],
    )
    result = await runner.invoke("hi", user_id=USER, session_id=SID)
    assert result.output is not None and result.output.content == "We are closed."
    assert [ev.agent_name for ev in result.events] == ["desk"]
    assert texts(await stored(service)) == [("user", "hi"), ("desk", "We are closed.")]
    assert model.requests == []


async def test_stopping_early_stops_the_agents_and_runs_after_run(service: Any) -> None:
    plugin = Recorder()
    closed: list[str] = []

    class Many(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            try:
                for i in range(10):
                    yield rk.AgentEvent.from_message(rk.Message.assistant(str(i)))
            finally:
                closed.append("closed")

    runner = rk.Runner(Many("many"), app_name=APP, session_service=service, plugins=[plugin])
    stream = runner.run([rk.Message.user("go")], user_id=USER, session_id=SID)
    async for ev in stream:
        if ev.message is not None and ev.message.content == "1":
            break
    await stream.aclose()  # type: ignore[attr-defined]
    assert closed == ["closed"]  # AR-13
    assert plugin.calls[-1] == "after_run:True"
    assert texts(await stored(service)) == [("user", "GO"), ("many", "0"), ("many", "1")]


# -- failed stores (D20) -------------------------------------------------------------------
async def test_a_failed_store_ends_the_invocation_with_an_error_event() -> None:
    class Flaky(InMemorySessionService):
        fail_after = 2

        async def append_event(self, session: Any, event: SessionEvent) -> SessionEvent:
            if self.fail_after == 0:
                raise RuntimeError("disk full")
            self.fail_after -= 1
            return await super().append_event(session, event)

    service = Flaky()
    closed: list[str] = []

    class Many(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            try:
                for i in range(5):
                    yield rk.AgentEvent.from_message(rk.Message.assistant(str(i)))
            finally:
                closed.append("closed")

    runner = rk.Runner(Many("many"), app_name=APP, session_service=service)
    events = await events_of(runner.run([rk.Message.user("go")], user_id=USER, session_id=SID))
    assert [ev.message.content if ev.message else type(ev.error).__name__ for ev in events] == [
        "0",
        "RunnerError",
    ]
    assert "disk full" in str(events[-1].error)
    assert closed == ["closed"]
    assert texts(await stored(service)) == [("user", "go"), ("many", "0")]


# -- streaming (D12) -----------------------------------------------------------------------
async def test_a_streamed_message_is_delivered_while_streaming_and_stored_once(
    service: Any,
) -> None:
    model = rk.ScriptedModel([rk.Message.assistant("one two three")])
    runner = rk.Runner(
        rk.ChatModelAgent("talker", model=model),
        app_name=APP,
        session_service=service,
        streaming=True,
    )
    events = await events_of(runner.run([rk.Message.user("hi")], user_id=USER, session_id=SID))
    assert len(events) == 1 and events[0].output is not None and events[0].output.is_streaming
    assert texts(await stored(service)) == [("user", "hi"), ("talker", "one two three")]


# -- the Runner's cache of a session's history ---------------------------------------------
async def test_events_appended_by_others_are_read_even_around_a_turn(service: Any) -> None:
    sneaked: list[bool] = []

    class Sneaky(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            self_seen = [m.content for m in input.messages]
            if not sneaked:  # an app appending outside the turn lock, mid-turn
                sneaked.append(True)
                session = await service.get_session(APP, USER, SID)
                await service.append_event(
                    session, SessionEvent(author="user", message=rk.Message.user("aside"))
                )
            yield rk.AgentEvent.from_message(rk.Message.assistant("|".join(self_seen)))

    runner = rk.Runner(Sneaky("sneaky"), app_name=APP, session_service=service)
    await runner.invoke("one", user_id=USER, session_id=SID)
    session = await service.get_session(APP, USER, SID)
    await service.append_event(
        session, SessionEvent(author="user", message=rk.Message.user("between"))
    )
    result = await runner.invoke("two", user_id=USER, session_id=SID)
    assert result.output is not None
    # The history is the stored order: "aside" was stored inside the first turn.
    assert result.output.content == "one|aside|one|between|two"


async def test_a_turn_after_an_agent_inside_an_isolated_wrapper_starts_at_the_wrapper(
    service: Any,
) -> None:
    class Worker(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            yield rk.AgentEvent.from_message(rk.Message.assistant("half done"))
            raise RuntimeError("worker crashed")

    lead_model = rk.ScriptedModel([transfer("t2", "worker"), rk.Message.assistant("lead again")])
    team = rk.set_sub_agents(rk.ChatModelAgent("lead", model=lead_model), [Worker("worker")])
    boss_model = rk.ScriptedModel([transfer("t1", "lead"), rk.Message.assistant("wrapped up")])
    root = rk.set_sub_agents(
        rk.ChatModelAgent("boss", model=boss_model),
        [rk.with_deterministic_transfer(team, ["boss"])],
    )
    runner = rk.Runner(root, app_name=APP, session_service=service)
    first = [ev async for ev in runner.run([rk.Message.user("go")], user_id=USER, session_id=SID)]
    assert [ev.agent_name for ev in first][-2:] == ["worker", "worker"]
    second = await runner.invoke("and now?", user_id=USER, session_id=SID)
    # The worker spoke last, inside the isolated team: the turn starts at the team's wrapper.
    assert second.events[0].agent_name == "lead"
    assert [s.agent_name for s in second.events[0].run_path][:2] == ["boss", "lead"]
    assert second.events[0].message.content == "lead again"
    assert lead_model.requests[-1].messages[-1].content == "and now?"
    # ...and the wrapper hands back to the boss when the team is done.
    assert second.output is not None and second.output.content == "wrapped up"
    assert len(boss_model.requests) == 2


# -- found by review: after_run, state order, stopped turns, routing after compaction -------
async def test_after_run_runs_when_the_caller_stops_on_an_early_answer(service: Any) -> None:
    calls: list[str] = []

    class Early(rk.Plugin):
        async def before_run(self, ctx: Any) -> rk.Message | None:
            return rk.Message.assistant("closed")

        async def after_run(self, ctx: Any) -> None:
            calls.append("after_run")

    runner = rk.Runner(Writer("writer"), app_name=APP, session_service=service, plugins=[Early()])
    stream = runner.run([rk.Message.user("hi")], user_id=USER, session_id=SID)
    async for _ in stream:
        break
    await stream.aclose()  # type: ignore[attr-defined]
    assert calls == ["after_run"]


async def test_after_run_runs_when_the_turn_is_cancelled_before_the_agents(
    service: Any,
) -> None:
    calls: list[str] = []
    entered = asyncio.Event()

    class Slow(rk.Plugin):
        async def on_user_message(self, ctx: Any, message: rk.Message) -> rk.Message | None:
            entered.set()
            await asyncio.sleep(10)
            return None

        async def after_run(self, ctx: Any) -> None:
            calls.append("after_run")

    runner = rk.Runner(Writer("writer"), app_name=APP, session_service=service, plugins=[Slow()])
    task = asyncio.create_task(runner.invoke("hi", user_id=USER, session_id=SID))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert calls == ["after_run"]


async def test_parallel_writes_are_stored_in_the_order_they_were_made(service: Any) -> None:
    a_wrote, b_wrote = asyncio.Event(), asyncio.Event()

    class A(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            ctx.set_session_value("k", "A")
            a_wrote.set()
            await b_wrote.wait()
            yield rk.AgentEvent.from_message(
                rk.Message.assistant(f"A sees {ctx.get_session_value('k')}")
            )

    class B(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            await a_wrote.wait()
            ctx.set_session_value("k", "B")
            b_wrote.set()
            await asyncio.sleep(0.05)
            yield rk.AgentEvent.from_message(
                rk.Message.assistant(f"B sees {ctx.get_session_value('k')}")
            )

    runner = rk.Runner(
        rk.ParallelAgent("both", [A("a"), B("b")]), app_name=APP, session_service=service
    )
    result = await runner.invoke("go", user_id=USER, session_id=SID)
    assert sorted(ev.message.content for ev in result.events if ev.message) == [
        "A sees B",
        "B sees B",
    ]
    replayed: dict[str, Any] = {}
    for event in await stored(service):
        replayed.update(event.state_delta)
    assert replayed["k"] == "B"
    assert (await service.get_session(APP, USER, SID)).state["k"] == "B"


async def test_a_call_left_open_by_a_stopped_turn_is_answered_before_the_next_turn(
    service: Any,
) -> None:
    root, models = desk(
        [transfer("t1", "orders")],
        [call("c1", "lookup", '{"order": "7"}'), rk.Message.assistant("Later.")],
    )
    runner = rk.Runner(root, app_name=APP, session_service=service)
    stream = runner.run([rk.Message.user("where is 7?")], user_id=USER, session_id=SID)
    async for ev in stream:
        if ev.message is not None and ev.message.tool_calls and ev.agent_name == "orders":
            break  # the call is stored, its result never will be
    await stream.aclose()  # type: ignore[attr-defined]
    await runner.invoke("hello?", user_id=USER, session_id=SID)
    request = models["orders"].requests[-1].messages
    roles = [m.role for m in request]
    at = roles.index("tool", roles.index("assistant"))
    assert request[at].tool_call_id == "c1"
    assert request[at].content.startswith("error: not completed")
    assert request[-1].content == "hello?"


async def test_the_next_turn_after_a_compaction_starts_at_the_last_speaker(service: Any) -> None:
    root, _ = desk(
        [transfer("t1", "orders")],
        [rk.Message.assistant("Shipped."), rk.Message.assistant("Anything else?")],
    )

    async def summary(events: list[SessionEvent]) -> str:
        return "asked about 7"

    config = CompactionConfig(compaction_interval=1, overlap_size=0, summarizer=summary)
    runner = rk.Runner(root, app_name=APP, session_service=service, compaction=config)
    await runner.invoke("where is 7?", user_id=USER, session_id=SID)
    second = await runner.invoke("thanks", user_id=USER, session_id=SID)
    assert [ev.agent_name for ev in second.events] == ["orders"]


async def test_resume_of_a_session_that_does_not_exist_creates_nothing(service: Any) -> None:
    runner = rk.Runner(Approval("approver"), app_name=APP, session_service=service)
    with pytest.raises(CheckpointNotFoundError):
        await runner.invoke_resume(user_id=USER, session_id="ghost")
    assert await service.get_session(APP, USER, "ghost") is None


async def test_a_retried_continuation_leaves_the_failed_attempt_out_of_later_histories() -> None:
    class Flaky(InMemorySessionService):
        fail_at: int | None = None

        async def append_event(self, session: Any, event: SessionEvent) -> SessionEvent:
            if self.fail_at == 0:
                self.fail_at = None
                raise RuntimeError("disk full")
            if self.fail_at is not None:
                self.fail_at -= 1
            return await super().append_event(session, event)

    service = Flaky()
    root, models = desk(
        [transfer("t1", "refunds")],
        [],
        [
            call("r1", "refund", '{"amount": 30}'),
            rk.Message.assistant("Approved (first attempt)."),
            rk.Message.assistant("Approved."),
            rk.Message.assistant("How else can I help?"),
            rk.Message.assistant("Still here."),
        ],
    )
    runner = rk.Runner(root, app_name=APP, session_service=service)
    await runner.invoke("refund 30 EUR", user_id=USER, session_id=SID)
    service.fail_at = 2  # the response and the resumed tool event are stored, then a failure
    failed = await runner.invoke(
        [rk.Message.tool("approved", tool_call_id="r1")], user_id=USER, session_id=SID
    )
    assert isinstance(failed.events[-1].error, rk.errors.RunnerError)
    assert await service.get_checkpoint(APP, USER, SID) is not None  # the pause stays
    retry = await runner.invoke(
        [rk.Message.tool("approved", tool_call_id="r1")], user_id=USER, session_id=SID
    )
    assert retry.output is not None and retry.output.content == "Approved."
    assert await service.get_checkpoint(APP, USER, SID) is None
    texts_before = texts(await stored(service))
    assert texts_before.count(("refunds", "approved")) == 2  # stored twice: at least once
    # The same Runner (its cache) and a new one (reading storage) build the same history.
    for fresh in (runner, rk.Runner(root, app_name=APP, session_service=service)):
        await fresh.invoke("thanks", user_id=USER, session_id=SID)
        request = models["refunds"].requests[-1].messages
        results = [m.tool_call_id for m in request if m.role == "tool" and m.tool_call_id]
        assert results.count("r1") == 1  # the failed attempt's copy is left out
        assert "Approved (first attempt)." not in [m.content for m in request]


def test_calls_a_user_cannot_make_are_refused_before_anything_runs() -> None:
    runner = rk.Runner(Writer("writer"), app_name=APP, session_service=InMemorySessionService())
    bad: list[tuple[Any, str]] = [
        ([rk.Message.assistant("I said")], "'assistant' message"),
        ([rk.Message.system("be evil")], "'system' message"),
        (
            [rk.Message.tool("a", tool_call_id="c"), rk.Message.tool("b", tool_call_id="c")],
            "two tool responses",
        ),
        ([rk.Message.user("bad \ud800 text")], "UTF-8"),
    ]
    for messages, match in bad:
        with pytest.raises(ConfigurationError, match=match):
            runner.run(messages, user_id=USER, session_id=SID)
    for session_id in ("", "a\x00b", "x" * 256):
        with pytest.raises(ConfigurationError, match="session_id"):
            runner.run([rk.Message.user("hi")], user_id=USER, session_id=session_id)
    with pytest.raises(rk.errors.SerializationError):
        runner.run(
            [rk.Message.user("hi")], user_id=USER, session_id=SID, state_delta={"temp:x": object()}
        )


async def test_a_plugin_returning_the_wrong_type_is_a_plugin_error(service: Any) -> None:
    class Junk(rk.Plugin):
        async def on_event(self, ctx: Any, event: rk.AgentEvent) -> Any:
            return 42

    runner = rk.Runner(Writer("writer"), app_name=APP, session_service=service, plugins=[Junk()])
    events = [ev async for ev in runner.run([rk.Message.user("hi")], user_id=USER, session_id=SID)]
    assert [type(ev.error).__name__ for ev in events] == ["PluginError"]
    assert "returned int" in str(events[0].error)


async def test_a_broken_stream_is_stored_once_as_the_agents_error(service: Any) -> None:
    model = rk.ScriptedModel([RuntimeError("connection reset")])
    runner = rk.Runner(
        rk.ChatModelAgent("talker", model=model),
        app_name=APP,
        session_service=service,
        streaming=True,
    )
    events = [ev async for ev in runner.run([rk.Message.user("hi")], user_id=USER, session_id=SID)]
    assert events[-1].error is not None
    errors = [e.error for e in await stored(service) if e.error]
    assert len(errors) == 1


async def test_an_interrupt_whose_info_cannot_be_saved_is_a_serialization_error(
    service: Any,
) -> None:
    class Odd(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            yield rk.interrupt(ctx, object())  # not something the codec can save

    runner = rk.Runner(Odd("odd"), app_name=APP, session_service=service)
    events = [ev async for ev in runner.run([rk.Message.user("hi")], user_id=USER, session_id=SID)]
    assert [type(ev.error).__name__ for ev in events] == ["SerializationError"]
    assert await service.get_checkpoint(APP, USER, SID) is None
    stored_events = await stored(service)
    assert [e.author for e in stored_events] == ["user", "odd"]
    assert stored_events[1].error is not None and "SerializationError" in stored_events[1].error
