"""Conformance: TR-03 — an agent used as a tool (``rk.AgentTool``; seed 004; semantics D8, D11,
D15; eino-reference §8 and §11.7).

The inner agent runs with its own run history (its input is the request, or the caller's
rewritten history with ``full_chat_history_as_input``), shares the session values, keeps its
exit / transfer / break-loop to itself, and its interrupts surface through the tool and resume
through it. The tool's result is the text of the inner agent's last message.
"""

from __future__ import annotations

from typing import Any

import pytest

import relaykit as rk
from tests.conformance.llm_helpers import (
    BaseApprovals,
    agent,
    call,
    calls,
    chain,
    collect,
    contents,
    errors,
    interrupt_of,
    run,
    say,
    summarize,
    tool_message,
)

DEFAULT_PARAMETERS = {
    "type": "object",
    "properties": {"request": {"type": "string", "description": "request to be processed"}},
    "required": ["request"],
}


# -- helpers (shared ones in llm_helpers.py) ------------------------------------------------------
class Approvals(BaseApprovals[dict[str, Any]]):
    """The interrupting tool ``approve(item)``, recording what each call learned."""

    def record(self, ctx: rk.ToolContext, item: str) -> dict[str, Any]:
        return {
            "item": item,
            "was_interrupted": ctx.was_interrupted,
            "state": ctx.interrupt_state,
            "is_target": ctx.is_resume_target,
            "data": ctx.resume_data,
        }


# -- spec ---------------------------------------------------------------------------------------
def test_tr03_agent_tool_spec_defaults_to_a_request_parameter() -> None:
    """§8.1: named and described like its agent; parameters ``{"request": string}``."""
    inner, _ = agent("researcher", [], description="finds facts")
    tool = rk.AgentTool(inner)
    assert isinstance(tool, rk.Tool)
    assert tool.spec == rk.ToolSpec("researcher", "finds facts", DEFAULT_PARAMETERS)


def test_tr03_agent_tool_with_custom_input_schema() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    inner, _ = agent("weather", [])
    assert rk.AgentTool(inner, input_schema=schema).spec.parameters == schema


def test_tr03_agent_tool_requires_a_description() -> None:
    """§8.1: an agent tool needs a non-empty description (the model sees it)."""
    inner, _ = agent("nameless_desc", [], description="")
    with pytest.raises(rk.errors.ConfigurationError, match="description"):
        rk.AgentTool(inner)


# -- input, history and result -----------------------------------------------------------------
async def test_tr03_inner_agent_gets_only_the_request_and_result_is_its_last_text() -> None:
    """TR-03: the inner agent's only user message is the request (it does not see the outer
    conversation); the tool result is the text of its last message; only the outer agent's
    events reach the caller."""
    inner, im = agent(
        "inner",
        [calls(call("echo_tool", {"x": 1}, "i1")), say("inner answer")],
        tools=[echo_tool],
        instruction="You are the inner one.",
    )
    outer, om = agent(
        "outer",
        [
            calls(call("inner", {"request": "do the thing"}, "o1"), text="delegating"),
            say("outer final"),
        ],
        tools=[rk.AgentTool(inner)],
        instruction="You are outer.",
    )
    events = await run(outer, "earlier context", "the user question")

    assert await summarize(events) == [
        ("outer", ["outer"], "assistant", "delegating call:inner", None),
        ("outer", ["outer"], "tool", "inner answer", None),
        ("outer", ["outer"], "assistant", "outer final", None),
    ]
    assert contents(im.requests[0]) == [
        ("system", "You are the inner one."),
        ("user", "do the thing"),
    ]
    assert len(im.requests) == 2
    result = tool_message(om.requests[1], "o1")
    assert (result.content, result.tool_name) == ("inner answer", "inner")
    assert om.requests[0].tools[0] == rk.ToolSpec("inner", "inner desc", DEFAULT_PARAMETERS)


@rk.tool
def echo_tool(x: int) -> str:
    return f"x={x}"


async def test_tr03_each_call_has_its_own_history() -> None:
    """Two calls of the same agent tool: the second run does not see the first one's
    messages (own run history per call)."""
    inner, im = agent("inner", [say("first answer"), say("second answer")])
    outer, om = agent(
        "outer",
        [
            calls(call("inner", {"request": "one"}, "o1")),
            calls(call("inner", {"request": "two"}, "o2")),
            say("done"),
        ],
        tools=[rk.AgentTool(inner)],
    )
    events = await run(outer, "go")
    assert errors(events) == []
    assert [contents(r) for r in im.requests] == [
        [("system", "You are inner."), ("user", "one")],
        [("system", "You are inner."), ("user", "two")],
    ]
    assert tool_message(om.requests[2], "o2").content == "second answer"


async def test_tr03_inner_return_directly_result_is_the_tool_text() -> None:
    """The result is the inner agent's last message text, also when that is a tool message."""

    @rk.tool
    def final(answer: str) -> str:
        return f"FINAL {answer}"

    inner, _ = agent(
        "inner", [calls(call("final", {"answer": "7"}))], tools=[final], return_directly=["final"]
    )
    outer, om = agent(
        "outer",
        [calls(call("inner", {"request": "r"}, "o1")), say("ok")],
        tools=[rk.AgentTool(inner)],
    )
    await run(outer, "go")
    assert tool_message(om.requests[1], "o1").content == "FINAL 7"


async def test_tr03_custom_input_schema_passes_raw_arguments_as_the_message() -> None:
    """§8.3: with a custom schema the arguments JSON becomes the only user message."""
    schema = {
        "type": "object",
        "properties": {"custom_arg": {"type": "string"}},
        "required": ["custom_arg"],
    }
    inner, im = agent("inner", [say("handled")])
    outer, _ = agent(
        "outer",
        [calls(call("inner", {"custom_arg": "hello world"})), say("ok")],
        tools=[rk.AgentTool(inner, input_schema=schema)],
    )
    await run(outer, "go")
    [request] = im.requests
    assert request.messages[1:] == [rk.Message.user('{"custom_arg": "hello world"}')]


async def test_tr03_bad_request_argument_goes_back_to_the_model() -> None:
    """D15: AgentTool arguments are validated; a missing ``request`` is ``error: ...``."""
    inner, im = agent("inner", [])
    outer, om = agent(
        "outer",
        [calls(call("inner", {"query": "x"}, "o1")), say("retrying")],
        tools=[rk.AgentTool(inner)],
    )
    events = await run(outer, "go")
    assert errors(events) == []
    assert im.requests == []
    sent = tool_message(om.requests[1], "o1")
    assert sent.content.startswith("error: ") and "request" in sent.content


async def test_tr03_full_chat_history_as_input() -> None:
    """§8.3: the input is the caller's history (system dropped, the caller's assistant and tool
    messages rewritten as context, user messages kept) plus the transfer pair for the inner
    agent, rewritten; the ``request`` argument is ignored."""

    @rk.tool
    def t1(q: str) -> str:
        return "r1"

    inner, im = agent("inner", [say("inner says")])
    outer, om = agent(
        "outer",
        [
            calls(call("t1", {"q": "z"}, "a1"), text="step"),
            calls(call("inner", {"request": "ignored"}, "a2"), text="now"),
            say("outer done"),
        ],
        tools=[t1, rk.AgentTool(inner, full_chat_history_as_input=True)],
        instruction="Outer instruction",
    )
    events = await run(outer, "first user message")
    assert errors(events) == []
    [request] = im.requests
    assert contents(request) == [
        ("system", "You are inner."),
        ("user", "first user message"),
        (
            "user",
            "For context: [outer] said: step. [outer] called tool: `t1` with arguments: "
            '{"q": "z"}.',
        ),
        ("user", "For context: [outer] `t1` tool returned result: r1."),
        (
            "user",
            "For context: [outer] called tool: `transfer_to_agent` with arguments: "
            '{"agent_name": "inner"}.',
        ),
        (
            "user",
            "For context: [outer] `transfer_to_agent` tool returned result: "
            "successfully transferred to agent [inner].",
        ),
    ]
    assert all(m.role != "system" or m.content == "You are inner." for m in request.messages)
    assert tool_message(om.requests[2], "a2").content == "inner says"


async def test_tr03_full_chat_history_on_the_first_call() -> None:
    """An (almost) empty caller history gives the user input plus the two transfer messages."""
    inner, im = agent("inner", [say("ok")])
    outer, _ = agent(
        "outer",
        [calls(call("inner", {"request": "r"})), say("fine")],
        tools=[rk.AgentTool(inner, full_chat_history_as_input=True)],
        instruction="",
    )
    await run(outer, "hello")
    assert [c for r, c in contents(im.requests[0])[1:]] == [
        "hello",
        "For context: [outer] called tool: `transfer_to_agent` with arguments: "
        '{"agent_name": "inner"}.',
        "For context: [outer] `transfer_to_agent` tool returned result: "
        "successfully transferred to agent [inner].",
    ]


# -- session values -----------------------------------------------------------------------------
async def test_tr03_session_values_are_shared_both_ways() -> None:
    """§8.2: the inner run shares the session values: it reads the outer values (instruction
    placeholder) and what it writes (tool, output_key) is visible to the outer agent."""
    seen: list[Any] = []

    @rk.tool
    def write(ctx: rk.ToolContext, value: str) -> str:
        ctx.run_context.set_session_value("from_inner", value)
        return "written"

    @rk.tool
    def read(ctx: rk.ToolContext) -> str:
        seen.append(
            (
                ctx.run_context.get_session_value("from_inner"),
                ctx.run_context.get_session_value("inner_out"),
            )
        )
        return "read"

    inner, im = agent(
        "inner",
        [calls(call("write", {"value": "v1"})), say("inner text")],
        tools=[write],
        instruction="Topic: {topic}",
        output_key="inner_out",
    )
    outer, _ = agent(
        "outer",
        [
            calls(call("inner", {"request": "go"}, "o1")),
            calls(call("read", None, "o2")),
            say("done"),
        ],
        tools=[rk.AgentTool(inner), read],
    )
    events = await run(outer, "start", session_values={"topic": "tides"})
    assert errors(events) == []
    assert im.requests[0].messages[0].content == "Topic: tides"
    assert seen == [("v1", "inner text")]


# -- action scoping -----------------------------------------------------------------------------
async def test_tr03_inner_exit_does_not_end_the_outer_agent() -> None:
    """TR-03 / §8.6: the inner exit stays inside: the result is ``final_result`` and the outer
    agent continues its loop."""
    inner, _ = agent(
        "inner", [calls(call("exit", {"final_result": "inner is done"}))], exit_tool=True
    )
    outer, om = agent(
        "outer",
        [calls(call("inner", {"request": "r"}, "o1")), say("continuing")],
        tools=[rk.AgentTool(inner)],
    )
    events = await run(outer, "go")
    assert await summarize(events) == [
        ("outer", ["outer"], "assistant", "call:inner", None),
        ("outer", ["outer"], "tool", "inner is done", None),
        ("outer", ["outer"], "assistant", "continuing", None),
    ]
    assert len(om.requests) == 2


async def test_tr03_inner_transfer_stays_inside_the_tool() -> None:
    """TR-03: a transfer inside the inner tree runs there (the result is the target's answer);
    no transfer reaches the outer agent, and the inner root never learns the outer tree."""
    inner_root, irm = agent(
        "inner", [calls(call("transfer_to_agent", {"agent_name": "helper"}, "t1"))]
    )
    helper, hm = agent("helper", [say("helper answered")])
    inner_tree = rk.set_sub_agents(inner_root, [helper])
    outer, om = agent(
        "outer",
        [calls(call("inner", {"request": "r"}, "o1")), say("thanks")],
        tools=[rk.AgentTool(inner_tree)],
    )
    sibling, _ = agent("sibling", [])
    events = await run(rk.set_sub_agents(outer, [sibling]), "go")

    assert await summarize(events) == [
        ("outer", ["outer"], "assistant", "call:inner", None),
        ("outer", ["outer"], "tool", "helper answered", None),
        ("outer", ["outer"], "assistant", "thanks", None),
    ]
    # The inner root lists only its own child; the helper lists only the inner root.
    assert "- Agent name: helper" in irm.requests[0].messages[0].content
    assert "outer" not in irm.requests[0].messages[0].content
    assert "sibling" not in irm.requests[0].messages[0].content
    assert "- Agent name: inner" in hm.requests[0].messages[0].content
    assert hm.requests[0].messages[1] == rk.Message.user("r")
    assert len(om.requests) == 2


async def test_tr03_inner_break_loop_does_not_break_the_outer_loop() -> None:
    """TR-03: a break-loop inside the agent tool does not reach an enclosing LoopAgent."""

    @rk.tool
    def stop(ctx: rk.ToolContext) -> str:
        ctx.set_action(rk.AgentAction(break_loop=rk.BreakLoopAction()))
        return "stop requested"

    inner, _ = agent(
        "inner",
        [calls(call("stop")), say("inner 1"), calls(call("stop")), say("inner 2")],
        tools=[stop],
    )
    outer, om = agent(
        "outer",
        [
            calls(call("inner", {"request": "a"}, "o1")),
            say("round 1"),
            calls(call("inner", {"request": "b"}, "o2")),
            say("round 2"),
        ],
        tools=[rk.AgentTool(inner)],
    )
    events = await run(rk.LoopAgent("L", [outer], max_iterations=2), "go")
    assert errors(events) == []
    assert [s[3] for s in await summarize(events)] == [
        "call:inner",
        "inner 1",
        "round 1",
        "call:inner",
        "inner 2",
        "round 2",
    ]
    assert all(ev.action is None for ev in events)
    assert len(om.requests) == 4


async def test_tr03_inner_error_is_an_error_event_of_the_outer_agent() -> None:
    """D9 / §8.4: an error inside the inner run fails the tool call: an error event of the
    calling agent."""
    inner, _ = agent("inner", [RuntimeError("inner model down")])
    outer, om = agent(
        "outer", [calls(call("inner", {"request": "r"})), say("never")], tools=[rk.AgentTool(inner)]
    )
    events = await run(outer, "go")
    summary = await summarize(events)
    assert summary[-1][:3] == ("outer", ["outer"], "error")
    assert "inner model down" in str(summary[-1][3])
    assert len(om.requests) == 1


async def test_tr03_streaming_outer_run_gives_the_full_inner_text() -> None:
    """§8.2: the inner run streams like the caller; the result is the concatenated text."""
    inner, _ = agent("inner", [say("several words of inner text")])
    outer, om = agent(
        "outer",
        [calls(call("inner", {"request": "r"}, "o1")), say("ok")],
        tools=[rk.AgentTool(inner)],
    )
    events = await run(outer, "go", streaming=True)
    assert errors(events) == []
    assert tool_message(om.requests[1], "o1").content == "several words of inner text"


# -- interrupts through the tool ----------------------------------------------------------------
def build_interrupting(
    approvals: Approvals, inner_script: list[Any], outer_script: list[Any]
) -> tuple[rk.ChatModelAgent, rk.ScriptedModel, rk.ScriptedModel]:
    inner, im = agent("inner", inner_script, tools=[approvals.tool])
    outer, om = agent("outer", outer_script, tools=[rk.AgentTool(inner)])
    return outer, om, im


async def test_tr03_inner_interrupt_surfaces_through_the_tool_and_resumes() -> None:
    """TR-03: the inner interrupt becomes the outer run's interrupt; its address holds the tool
    segment, then the inner agent's segment; a resume (new Runner, new objects, targeted) goes
    through the tool into the inner agent, whose result the outer agent then receives."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    outer, om, im = build_interrupting(
        approvals,
        [calls(call("approve", {"item": "x"}, "i1"))],
        [calls(call("inner", {"request": "please approve x"}, "o1"), text="asking inner")],
    )
    first = await collect(rk.Runner(outer, checkpoint_store=store).query("go", checkpoint_id="cp"))
    assert [s[2:] for s in await summarize(first)] == [
        ("assistant", "asking inner call:inner", None),
        (None, None, "interrupt"),
    ]
    [ctx] = interrupt_of(first).contexts
    assert ctx.address == (
        rk.AddressSegment("agent", "outer"),
        rk.AddressSegment("tool", "inner", "o1"),
        rk.AddressSegment("agent", "inner"),
        rk.AddressSegment("tool", "approve", "i1"),
    )
    assert ctx.info == {"approve": "x"} and ctx.is_root_cause
    assert chain(ctx) == [
        ("agent:outer", "tool:inner:o1", "agent:inner", "tool:approve:i1"),
        ("agent:outer", "tool:inner:o1", "agent:inner"),
        ("agent:outer", "tool:inner:o1"),
        ("agent:outer",),
    ]
    assert (len(om.requests), len(im.requests)) == (1, 1)

    approvals2 = Approvals()
    outer2, om2, im2 = build_interrupting(
        approvals2, [say("inner approved")], [say("outer finished")]
    )
    second = await collect(
        rk.Runner(outer2, checkpoint_store=store).resume("cp", targets={ctx.id: "granted"})
    )
    assert await summarize(second) == [
        ("outer", ["outer"], "tool", "inner approved", None),
        ("outer", ["outer"], "assistant", "outer finished", None),
    ]
    assert approvals2.calls == [
        {
            "item": "x",
            "was_interrupted": True,
            "state": {"item": "x"},
            "is_target": True,
            "data": "granted",
        }
    ]
    # The inner agent continues its own history; the outer agent gets the result.
    assert contents(im2.requests[0]) == [
        ("system", "You are inner."),
        ("user", "please approve x"),
        ("assistant", ""),
        ("tool", "x: granted"),
    ]
    assert tool_message(om2.requests[0], "o1").content == "inner approved"


async def test_tr03_inner_interrupt_resume_all() -> None:
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    outer, _, _ = build_interrupting(
        approvals,
        [calls(call("approve", {"item": "y"}, "i1")), say("inner ok")],
        [calls(call("inner", {"request": "r"}, "o1")), say("outer ok")],
    )
    first = await collect(rk.Runner(outer, checkpoint_store=store).query("go", checkpoint_id="cp"))
    interrupt_of(first)
    second = await collect(rk.Runner(outer, checkpoint_store=store).resume("cp"))
    assert [s[3] for s in await summarize(second)] == ["inner ok", "outer ok"]
    assert approvals.calls[-1]["is_target"] is True and approvals.calls[-1]["data"] is None


async def test_tr03_two_agent_tools_interrupt_and_are_answered_one_at_a_time() -> None:
    """D8 / D11 through agent tools: both calls interrupt in one batch; a targeted resume of one
    completes it, the other interrupts again under the same id, then completes."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    left, _ = agent(
        "left",
        [calls(call("approve", {"item": "L"}, "l1")), say("left done")],
        tools=[approvals.tool],
    )
    right, _ = agent(
        "right",
        [calls(call("approve", {"item": "R"}, "r1")), say("right done")],
        tools=[approvals.tool],
    )
    outer, om = agent(
        "outer",
        [
            calls(call("left", {"request": "a"}, "o1"), call("right", {"request": "b"}, "o2")),
            say("both done"),
        ],
        tools=[rk.AgentTool(left), rk.AgentTool(right)],
    )

    first = await collect(rk.Runner(outer, checkpoint_store=store).query("go", checkpoint_id="cp"))
    by_item = {c.info["approve"]: c for c in interrupt_of(first).contexts}
    assert sorted(by_item) == ["L", "R"]
    assert by_item["L"].address[1] == rk.AddressSegment("tool", "left", "o1")
    assert by_item["R"].address[1] == rk.AddressSegment("tool", "right", "o2")

    second = await collect(
        rk.Runner(outer, checkpoint_store=store).resume("cp", targets={by_item["L"].id: "yes"})
    )
    assert [s[3] for s in await summarize(second)] == ["left done", None]
    [pending] = interrupt_of(second).contexts
    assert pending.id == by_item["R"].id
    assert pending.address == by_item["R"].address

    third = await collect(
        rk.Runner(outer, checkpoint_store=store).resume("cp", targets={pending.id: "yes too"})
    )
    assert [s[3] for s in await summarize(third)] == ["right done", "both done"]
    final = om.requests[-1]
    assert [(m.tool_call_id, m.content) for m in final.messages if m.role == "tool"] == [
        ("o1", "left done"),
        ("o2", "right done"),
    ]
    assert [
        (c["item"], c["is_target"], c["data"])
        for c in approvals.calls
        if c["was_interrupted"] and c["is_target"]
    ] == [("L", True, "yes"), ("R", True, "yes too")]


async def test_tr03_nested_agent_tools_with_a_workflow_inside_resume() -> None:
    """TR-03 nested: outer → tool(mid) → tool(seq[pre, leaf]); the leaf's tool interrupts. The
    address nests tool and agent segments at every level; a targeted resume reaches the leaf
    through both tools; ``pre`` is not run again."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    leaf, lm = agent(
        "leaf",
        [calls(call("approve", {"item": "deep"}, "l1")), say("leaf done")],
        tools=[approvals.tool],
    )
    pre, pm = agent("pre", [say("pre said")])
    seq = rk.SequentialAgent("seq", [pre, leaf], description="a pipeline")
    mid, mm = agent(
        "mid",
        [calls(call("seq", {"request": "go deep"}, "m1")), say("mid done")],
        tools=[rk.AgentTool(seq)],
    )
    outer, om = agent(
        "outer",
        [calls(call("mid", {"request": "go mid"}, "o1")), say("outer done")],
        tools=[rk.AgentTool(mid)],
    )
    first = await collect(rk.Runner(outer, checkpoint_store=store).query("hi", checkpoint_id="cp"))
    assert [s[2:] for s in await summarize(first)] == [
        ("assistant", "call:mid", None),
        (None, None, "interrupt"),
    ]
    [ctx] = interrupt_of(first).contexts
    assert chain(ctx) == [
        (
            "agent:outer",
            "tool:mid:o1",
            "agent:mid",
            "tool:seq:m1",
            "agent:seq",
            "agent:leaf",
            "tool:approve:l1",
        ),
        ("agent:outer", "tool:mid:o1", "agent:mid", "tool:seq:m1", "agent:seq", "agent:leaf"),
        ("agent:outer", "tool:mid:o1", "agent:mid", "tool:seq:m1", "agent:seq"),
        ("agent:outer", "tool:mid:o1", "agent:mid", "tool:seq:m1"),
        ("agent:outer", "tool:mid:o1", "agent:mid"),
        ("agent:outer", "tool:mid:o1"),
        ("agent:outer",),
    ]
    second = await collect(
        rk.Runner(outer, checkpoint_store=store).resume("cp", targets={ctx.id: "yes"})
    )
    assert [s[3] for s in await summarize(second)] == ["mid done", "outer done"]
    assert contents(lm.requests[1]) == [
        ("system", "You are leaf."),
        ("user", "go deep"),
        ("user", "For context: [pre] said: pre said."),
        ("assistant", ""),
        ("tool", "deep: yes"),
    ]
    assert tool_message(mm.requests[1], "m1").content == "leaf done"
    assert tool_message(om.requests[1], "o1").content == "mid done"
    assert (len(pm.requests), len(lm.requests), len(mm.requests), len(om.requests)) == (1, 2, 2, 2)
