"""Agent tools forwarding their inner events (``AgentTool(agent, emit_internal_events=True)``;
eino-reference §8.4, D28).

The inner agent's events reach the caller while the tool runs, their run path prefixed with the
calling agent's and marked ``internal``; they are never recorded in the caller's history (nor
any other agent's), never stored in a session, never acted on; interrupts and errors stay the
tool's own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import relaykit as rk
from relaykit import Message, ToolCall
from relaykit.sessions import InMemorySessionService


# -- helpers ------------------------------------------------------------------------------------
def ask(tool: str, request: str, call_id: str) -> Message:
    """An assistant message calling the agent tool ``tool`` with ``request``."""
    return Message.assistant("", [ToolCall(call_id, tool, json.dumps({"request": request}))])


def llm(name: str, script: list[Any], tools: list[Any] | None = None) -> rk.ChatModelAgent:
    return rk.ChatModelAgent(
        name, f"the {name} agent", model=rk.ScriptedModel(script), tools=tools or []
    )


def model_of(agent: rk.ChatModelAgent) -> rk.ScriptedModel:
    model = agent.model
    assert isinstance(model, rk.ScriptedModel)
    return model


def row(ev: rk.AgentEvent) -> tuple[str, bool, str, str]:
    """(run path, internal, role, text or the names of the called tools)."""
    path = "/".join(step.agent_name for step in ev.run_path)
    if ev.error is not None:
        return path, ev.internal, "error", str(ev.error)
    msg = ev.message
    if msg is None:
        kind = "interrupt" if ev.action is not None and ev.action.interrupted else "action"
        return path, ev.internal, kind, ""
    text = msg.content or ",".join(f"call:{c.name}" for c in msg.tool_calls)
    return path, ev.internal, msg.role, text


async def collect(events: AsyncIterator[rk.AgentEvent]) -> list[rk.AgentEvent]:
    return [ev async for ev in events]


def texts(messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.role, m.content or ",".join(c.name for c in m.tool_calls)) for m in messages]


# -- delivery -----------------------------------------------------------------------------------
async def test_inner_events_reach_the_caller_in_order_with_the_callers_run_path() -> None:
    """Root R transfers to X; X calls T as a tool, T calls U as a tool: T's events come as
    [R, X, T], U's as [R, X, T, U], each before the result of the call that made them."""
    inner_most = llm("U", [Message.assistant("U's fact")])
    inner = llm(
        "T",
        [ask("U", "dig", "t1"), Message.assistant("T's summary")],
        tools=[rk.AgentTool(inner_most, emit_internal_events=True)],
    )
    caller = llm(
        "X",
        [ask("T", "research", "x1"), Message.assistant("X's answer")],
        tools=[rk.AgentTool(inner, emit_internal_events=True)],
    )
    root = rk.set_sub_agents(
        llm(
            "R",
            [Message.assistant("", [ToolCall("r1", "transfer_to_agent", '{"agent_name": "X"}')])],
        ),
        [caller],
    )

    events = await collect(rk.Runner(root).query("go"))

    assert [row(ev) for ev in events] == [
        ("R", False, "assistant", "call:transfer_to_agent"),
        ("R", False, "tool", "successfully transferred to agent [X]"),
        ("R/X", False, "assistant", "call:T"),
        ("R/X/T", True, "assistant", "call:U"),
        ("R/X/T/U", True, "assistant", "U's fact"),
        ("R/X/T", True, "tool", "U's fact"),
        ("R/X/T", True, "assistant", "T's summary"),
        ("R/X", False, "tool", "T's summary"),
        ("R/X", False, "assistant", "X's answer"),
    ]
    internal = [ev for ev in events if ev.internal]
    assert [ev.agent_name for ev in internal] == ["T", "U", "T", "T"]
    assert all(ev.action is None and ev.error is None for ev in internal)


async def test_events_are_delivered_while_the_tool_runs() -> None:
    """The caller receives an inner event before the tool call that made it has finished: a
    tool inside T waits until the test has seen T's first event."""
    seen = asyncio.Event()

    @rk.tool
    async def wait_for_caller() -> str:
        """Wait until the caller saw the inner agent's first event."""
        await asyncio.wait_for(seen.wait(), 5)
        return "released"

    inner = llm(
        "T",
        [
            Message.assistant("", [ToolCall("t1", "wait_for_caller", "{}")]),
            Message.assistant("T done"),
        ],
        tools=[wait_for_caller],
    )
    caller = llm(
        "X",
        [ask("T", "go", "x1"), Message.assistant("X done")],
        tools=[rk.AgentTool(inner, emit_internal_events=True)],
    )
    rows = []
    async for ev in rk.Runner(caller).query("go"):
        rows.append(row(ev))
        if ev.internal:
            seen.set()
    assert rows == [
        ("X", False, "assistant", "call:T"),
        ("X/T", True, "assistant", "call:wait_for_caller"),
        ("X/T", True, "tool", "released"),
        ("X/T", True, "assistant", "T done"),
        ("X", False, "tool", "T done"),
        ("X", False, "assistant", "X done"),
    ]


async def test_concurrent_calls_forward_each_inner_run_before_its_result() -> None:
    """Two agent tools in one batch, one forwarding and one not: the forwarding tool's events
    come before its own result; the other tool forwards nothing."""
    loud = llm("loud", [Message.assistant("loud result")])
    quiet = llm("quiet", [Message.assistant("quiet result")])
    caller = llm(
        "X",
        [
            Message.assistant(
                "",
                [
                    ToolCall("c1", "loud", '{"request": "a"}'),
                    ToolCall("c2", "quiet", '{"request": "b"}'),
                ],
            ),
            Message.assistant("both done"),
        ],
        tools=[rk.AgentTool(loud, emit_internal_events=True), rk.AgentTool(quiet)],
    )
    rows = [row(ev) for ev in await collect(rk.Runner(caller).query("go"))]
    assert ("X/loud", True, "assistant", "loud result") in rows
    assert not any(path.endswith("quiet") for path, *_ in rows)
    assert rows.index(("X/loud", True, "assistant", "loud result")) < rows.index(
        ("X", False, "tool", "loud result")
    )
    assert rows[-1] == ("X", False, "assistant", "both done")


async def test_without_the_option_nothing_is_forwarded() -> None:
    inner = llm("T", [Message.assistant("T's fact")])
    caller = llm(
        "X", [ask("T", "go", "x1"), Message.assistant("done")], tools=[rk.AgentTool(inner)]
    )
    events = await collect(rk.Runner(caller).query("go"))
    assert [row(ev) for ev in events] == [
        ("X", False, "assistant", "call:T"),
        ("X", False, "tool", "T's fact"),
        ("X", False, "assistant", "done"),
    ]
    assert repr(rk.AgentTool(inner, emit_internal_events=True)) == (
        "AgentTool(ChatModelAgent(name='T'), emit_internal_events=True)"
    )


async def test_on_event_plugins_see_the_internal_events() -> None:
    seen: list[tuple[str, bool]] = []

    class Watch(rk.Plugin):
        async def on_event(self, ctx: Any, event: rk.AgentEvent) -> rk.AgentEvent | None:
            seen.append((event.agent_name, event.internal))
            return event

    inner = llm("T", [Message.assistant("T's fact")])
    caller = llm(
        "X",
        [ask("T", "go", "x1"), Message.assistant("done")],
        tools=[rk.AgentTool(inner, emit_internal_events=True)],
    )
    await rk.Runner(caller, plugins=[Watch()]).invoke("go")
    assert seen == [("X", False), ("T", True), ("X", False), ("X", False)]


# -- never history ------------------------------------------------------------------------------
async def test_internal_events_never_reach_the_callers_history() -> None:
    """X's next model request holds the tool's result, not T's messages; R, which runs after X
    in a sequence, does not see them either."""
    inner = llm("T", [ask("lookup", "x", "t1"), Message.assistant("T's summary")])

    @rk.tool
    def lookup(request: str) -> str:
        """Look something up."""
        return "T's private lookup"

    inner.tools = [lookup]
    caller = llm(
        "X",
        [ask("T", "research", "x1"), Message.assistant("X's answer")],
        tools=[rk.AgentTool(inner, emit_internal_events=True)],
    )
    after = llm("after", [Message.assistant("after's answer")])
    flow = rk.SequentialAgent("seq", [caller, after])

    events = await collect(rk.Runner(flow).query("go"))

    assert sum(ev.internal for ev in events) == 3
    assert texts(model_of(caller).requests[1].messages) == [
        ("user", "go"),
        ("assistant", "T"),
        ("tool", "T's summary"),
    ]
    later = [m.content for m in model_of(after).requests[0].messages]
    assert not any("private lookup" in text or "call:lookup" in text for text in later)
    assert not any("lookup" in text for text in later)


async def test_an_inner_break_loop_does_not_end_the_outer_loop() -> None:
    """The forwarded copy of an inner ``exit_loop`` is marked done: the loop around the caller
    keeps going (actions of internal events are never acted on)."""
    inner = rk.ChatModelAgent(
        "T",
        "ends loops",
        model=rk.ScriptedModel([Message.assistant("", [ToolCall("t1", "exit_loop", "{}")])] * 3),
        tools=[rk.exit_loop],
    )
    caller = llm(
        "X",
        [
            ask("T", "stop?", f"x{i}") if i % 2 == 0 else Message.assistant("round")
            for i in range(6)
        ],
        tools=[rk.AgentTool(inner, emit_internal_events=True)],
    )
    loop = rk.LoopAgent("loop", [caller], max_iterations=3)
    events = await collect(rk.Runner(loop).query("go"))
    forwarded = [ev for ev in events if ev.internal and ev.action is not None]
    assert len(forwarded) == 3
    assert all(ev.action.break_loop.done for ev in forwarded if ev.action.break_loop)
    assert [row(ev)[3] for ev in events if not ev.internal and row(ev)[2] == "assistant"] == [
        "call:T",
        "round",
    ] * 3


# -- interrupts ---------------------------------------------------------------------------------
def interrupting_tree(answers: list[str]) -> rk.ChatModelAgent:
    @rk.tool
    def approve(ctx: rk.ToolContext, item: str) -> str:
        """Ask a human to approve ``item``."""
        if not ctx.was_interrupted:
            raise rk.ToolInterrupt({"approve": item}, state={"item": item})
        answers.append(str(ctx.resume_data))
        return f"{item}: {ctx.resume_data}"

    inner = llm(
        "T",
        [
            Message.assistant("", [ToolCall("t1", "approve", '{"item": "refund"}')]),
            Message.assistant("T: refund approved"),
        ],
        tools=[approve],
    )
    return llm(
        "X",
        [ask("T", "refund", "x1"), Message.assistant("X: done")],
        tools=[rk.AgentTool(inner, emit_internal_events=True)],
    )


async def test_an_inner_interrupt_surfaces_through_the_tool_and_resumes_through_it() -> None:
    store = rk.InMemoryCheckpointStore()
    answers: list[str] = []
    caller = interrupting_tree(answers)
    runner = rk.Runner(caller, checkpoint_store=store)

    first = await collect(runner.query("go", checkpoint_id="cp"))

    assert [row(ev) for ev in first] == [
        ("X", False, "assistant", "call:T"),
        ("X/T", True, "assistant", "call:approve"),
        ("X", False, "interrupt", ""),
    ]
    action = first[-1].action
    assert action is not None and action.interrupted is not None
    [point] = action.interrupted.contexts
    assert point.info == {"approve": "refund"}
    assert point.address[:3] == (
        rk.AddressSegment("agent", "X"),
        rk.AddressSegment("tool", "T", "x1"),
        rk.AddressSegment("agent", "T"),
    )

    second = await collect(runner.resume("cp", targets={point.id: "yes"}))

    assert answers == ["yes"]
    assert [row(ev) for ev in second] == [
        ("X/T", True, "tool", "refund: yes"),
        ("X/T", True, "assistant", "T: refund approved"),
        ("X", False, "tool", "T: refund approved"),
        ("X", False, "assistant", "X: done"),
    ]
    assert texts(model_of(caller).requests[1].messages) == [
        ("user", "go"),
        ("assistant", "T"),
        ("tool", "T: refund approved"),
    ]


# -- session mode -------------------------------------------------------------------------------
async def test_session_mode_delivers_internal_events_but_never_stores_them() -> None:
    sessions = InMemorySessionService()
    answers: list[str] = []
    caller = interrupting_tree(answers)
    runner = rk.Runner(caller, app_name="app", session_service=sessions)

    first = await collect(runner.query("go", user_id="u", session_id="s"))
    assert [row(ev) for ev in first] == [
        ("X", False, "assistant", "call:T"),
        ("X/T", True, "assistant", "call:approve"),
        ("X", False, "interrupt", ""),
    ]
    action = first[-1].action
    assert action is not None and action.interrupted is not None
    [point] = action.interrupted.contexts
    second = await collect(runner.resume(user_id="u", session_id="s", targets={point.id: "yes"}))
    assert [row(ev) for ev in second if ev.internal] == [
        ("X/T", True, "tool", "refund: yes"),
        ("X/T", True, "assistant", "T: refund approved"),
    ]

    session = await sessions.get_session("app", "u", "s")
    assert session is not None
    stored = [
        (ev.author, ev.message.role, ev.message.content) for ev in session.events if ev.message
    ]
    assert stored == [
        ("user", "user", "go"),
        ("X", "assistant", ""),
        ("X", "tool", "T: refund approved"),
        ("X", "assistant", "X: done"),
    ]
    assert all(ev.run_path in ((), ("X",)) for ev in session.events)
    assert answers == ["yes"]
