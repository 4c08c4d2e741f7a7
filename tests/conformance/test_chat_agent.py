"""Conformance: the LLM agent (ChatModelAgent) — TR-01, TR-02, its tool loop and tool interrupts
(seed 004; semantics D3, D8, D11, D15, D16; eino-reference §7, §11.8, §11.9).

Every model is a ``ScriptedModel``: its script is the whole conversation the test expects, and
``.requests`` shows exactly what the agent sent (messages and tool specs). A script that is too
short fails the run with an error event, so "the model was called once" is asserted both by the
request count and by the absence of that error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest

import relaykit as rk
from relaykit.errors import MaxIterationsError
from tests.conformance.llm_helpers import (
    BaseApprovals,
    agent,
    call,
    calls,
    collect,
    contents,
    errors,
    interrupt_of,
    names,
    run,
    say,
    summarize,
    tool_names,
    transfer_call,
)


# -- helpers (shared ones in llm_helpers.py) ------------------------------------------------------
def transfer_text(*targets: tuple[str, str]) -> str:
    """The exact transfer instruction of eino-reference §7.4."""
    listing = "".join(f"\n- Agent name: {n}\n  Agent description: {d}" for n, d in targets)
    return (
        f"Available other agents: {listing}\n"
        "\n"
        "Decision rule:\n"
        "- If you're best suited for the question according to your description: ANSWER\n"
        "- If another agent is better according its description: CALL 'transfer_to_agent' "
        "function with their agent name\n"
        "\n"
        "When transferring: OUTPUT ONLY THE FUNCTION CALL"
    )


def transfer_parameters(*targets: str) -> dict[str, Any]:
    """The §7.4 parameters of ``transfer_to_agent``, with ``targets`` as the ``enum`` (D22)."""
    return {
        "type": "object",
        "properties": {
            "agent_name": {
                "type": "string",
                "description": "the name of the agent to transfer to",
                "enum": list(targets),
            }
        },
        "required": ["agent_name"],
    }


EXIT_PARAMETERS = {
    "type": "object",
    "properties": {"final_result": {"type": "string", "description": "the final result to return"}},
    "required": ["final_result"],
}


@rk.tool
def echo(text: str) -> str:
    """Echo the text back.

    Args:
        text: What to echo.
    """
    return f"echo: {text}"


# -- TR-01: the transfer tool and instruction ---------------------------------------------------
async def test_tr01_agent_with_children_gets_transfer_tool_and_exact_instruction() -> None:
    """TR-01: a root LLM agent with sub-agents gets ``transfer_to_agent`` (§7.4 spec) and the
    instruction ``<own>\\n\\n<transfer text>`` listing each child in order."""
    a, am = agent(
        "A", [say("I can answer")], instruction="You are the router.", description="routes requests"
    )
    b, _ = agent("B", [], description="billing questions")
    c, _ = agent("C", [], description="technical support")
    events = await run(rk.set_sub_agents(a, [b, c]), "hello")

    assert await summarize(events) == [("A", ["A"], "assistant", "I can answer", None)]
    [request] = am.requests
    [spec] = request.tools
    assert spec.name == "transfer_to_agent"
    assert spec.description == "Transfer the question to another agent."
    assert spec.parameters == transfer_parameters("B", "C")
    assert request.messages[0].role == "system"
    assert request.messages[0].content == "You are the router.\n\n" + transfer_text(
        ("B", "billing questions"), ("C", "technical support")
    )
    assert contents(request)[1:] == [("user", "hello")]


async def test_tr01_child_lists_its_children_then_its_parent() -> None:
    """TR-01: a child with its own sub-agents and a parent lists the children, then the
    parent."""
    a, _ = agent("A", [calls(transfer_call("B"))], description="the root")
    b, bm = agent("B", [say("B answers")], instruction="You are B.", description="middle")
    leaf, _ = agent("L", [], description="a leaf")
    middle = rk.set_sub_agents(b, [leaf])  # D14: use the returned flow agent
    events = await run(rk.set_sub_agents(a, [middle]), "q")

    assert [s[0] for s in await summarize(events)] == ["A", "A", "B"]
    [request] = bm.requests
    assert request.messages[0].content == "You are B.\n\n" + transfer_text(
        ("L", "a leaf"), ("A", "the root")
    )
    assert tool_names(request) == ["transfer_to_agent"]


async def test_tr01_empty_own_instruction_still_gets_the_separator() -> None:
    """§7.3: the ``\\n\\n`` separator is added even if the agent's own instruction is empty."""
    a, am = agent("A", [say("ok")], instruction="")
    b, _ = agent("B", [], description="bee")
    await run(rk.set_sub_agents(a, [b]), "q")
    assert am.requests[0].messages[0] == rk.Message.system("\n\n" + transfer_text(("B", "bee")))


async def test_tr01_disallow_transfer_to_parent_hides_the_parent() -> None:
    """TR-01 / FA-04: with ``as_flow_agent(child, disallow_transfer_to_parent=True)`` the parent
    is not listed; a child without other targets gets no transfer tool and its instruction
    alone."""
    a, _ = agent("A", [calls(transfer_call("B"))])
    b, bm = agent("B", [say("B answers")], instruction="You are B.")
    events = await run(
        rk.set_sub_agents(a, [rk.as_flow_agent(b, disallow_transfer_to_parent=True)]), "q"
    )

    assert (await summarize(events))[-1] == ("B", ["A", "B"], "assistant", "B answers", None)
    [request] = bm.requests
    assert request.tools == []
    assert request.messages[0] == rk.Message.system("You are B.")


async def test_tr01_disallow_parent_keeps_the_children() -> None:
    a, _ = agent("A", [calls(transfer_call("B"))])
    b, bm = agent("B", [say("done")], instruction="You are B.")
    leaf, _ = agent("L", [], description="leafy")
    middle = rk.set_sub_agents(rk.as_flow_agent(b, disallow_transfer_to_parent=True), [leaf])
    await run(rk.set_sub_agents(a, [middle]), "q")
    assert bm.requests[0].messages[0].content == "You are B.\n\n" + transfer_text(("L", "leafy"))


async def test_tr01_standalone_agent_has_no_transfer_tool() -> None:
    """Without sub-agents or a parent there is nothing to transfer to: no tool, instruction as
    is."""
    a, am = agent("A", [say("hi")], instruction="Be brief.", tools=[echo])
    await run(a, "q")
    [request] = am.requests
    assert tool_names(request) == ["echo"]
    assert contents(request) == [("system", "Be brief."), ("user", "q")]


async def test_tr01_no_instruction_and_no_targets_means_no_system_message() -> None:
    a, am = agent("A", [say("hi")], instruction="")
    await run(a, "q")
    assert contents(am.requests[0]) == [("user", "q")]


async def test_tr01_tool_order_own_tools_then_transfer_then_exit() -> None:
    """§7.3: own tools, then ``transfer_to_agent``, then ``exit``; both are return-directly."""
    a, am = agent("A", [say("ok")], tools=[echo], exit_tool=True)
    b, _ = agent("B", [])
    await run(rk.set_sub_agents(a, [b]), "q")
    tools = am.requests[0].tools
    assert [t.name for t in tools] == ["echo", "transfer_to_agent", "exit"]
    assert tools[0] == echo.spec
    assert tools[2].description == "Exit the agent process and return the final result."
    assert tools[2].parameters == EXIT_PARAMETERS


async def test_tr01_transfer_instruction_is_not_formatted_but_own_instruction_is() -> None:
    """D16: placeholders are filled in the agent's own instruction only; braces in a target's
    description are left as they are (and do not fail)."""
    a, am = agent("A", [say("ok")], instruction="Hello {user:name}.")
    b, _ = agent("B", [], description="uses {braces} and {missing}")
    events = await run(rk.set_sub_agents(a, [b]), "q", session_values={"user:name": "Ada"})
    assert errors(events) == []
    assert am.requests[0].messages[0].content == "Hello Ada.\n\n" + transfer_text(
        ("B", "uses {braces} and {missing}")
    )


# -- TR-02: the transfer tool returns directly --------------------------------------------------
async def test_tr02_transfer_returns_directly_and_target_runs() -> None:
    """TR-02: the agent's model is called once; events are the assistant call and the tool event
    ``successfully transferred to agent [B]`` with the transfer action; then B runs."""
    a, am = agent("A", [calls(transfer_call("B", "t1"))])
    b, bm = agent("B", [say("B here")])
    events = await run(rk.set_sub_agents(a, [b]), "hi")

    assert await summarize(events) == [
        ("A", ["A"], "assistant", "call:transfer_to_agent", None),
        ("A", ["A"], "tool", "successfully transferred to agent [B]", "transfer:B"),
        ("B", ["A", "B"], "assistant", "B here", None),
    ]
    assert len(am.requests) == 1
    tool_msg = events[1].output.message  # type: ignore[union-attr]
    assert tool_msg is not None
    assert (tool_msg.tool_call_id, tool_msg.tool_name) == ("t1", "transfer_to_agent")
    assert events[1].output.role == "tool"  # type: ignore[union-attr]
    assert events[1].output.tool_name == "transfer_to_agent"  # type: ignore[union-attr]
    # B reads A's transfer pair rewritten as context (D2: JSON arguments).
    assert contents(bm.requests[0])[1:] == [
        ("user", "hi"),
        (
            "user",
            "For context: [A] called tool: `transfer_to_agent` with arguments: "
            '{"agent_name": "B"}.',
        ),
        (
            "user",
            "For context: [A] `transfer_to_agent` tool returned result: "
            "successfully transferred to agent [B].",
        ),
    ]


async def test_tr02_transfer_back_to_parent() -> None:
    """TR-02 / FA-04: a child LLM agent transfers back to its parent; run paths nest."""
    a, am = agent("A", [calls(transfer_call("B")), say("A again")])
    b, _ = agent("B", [calls(transfer_call("A", "t2"))])
    events = await run(rk.set_sub_agents(a, [b]), "hi")
    assert await summarize(events) == [
        ("A", ["A"], "assistant", "call:transfer_to_agent", None),
        ("A", ["A"], "tool", "successfully transferred to agent [B]", "transfer:B"),
        ("B", ["A", "B"], "assistant", "call:transfer_to_agent", None),
        ("B", ["A", "B"], "tool", "successfully transferred to agent [A]", "transfer:A"),
        ("A", ["A", "B", "A"], "assistant", "A again", None),
    ]
    assert len(am.requests) == 2


async def test_tr02_transfer_event_is_last_even_with_other_tool_calls() -> None:
    """§7.7.1: the return-directly (transfer) event is held until the whole batch finished, so it
    is the agent's last event; the other tool still runs."""
    a, am = agent(
        "A", [calls(transfer_call("B", "t1"), call("echo", {"text": "x"}, "e1"))], tools=[echo]
    )
    b, _ = agent("B", [say("B here")])
    events = await run(rk.set_sub_agents(a, [b]), "hi")
    assert await summarize(events) == [
        ("A", ["A"], "assistant", "call:transfer_to_agent,echo", None),
        ("A", ["A"], "tool", "echo: x", None),
        ("A", ["A"], "tool", "successfully transferred to agent [B]", "transfer:B"),
        ("B", ["A", "B"], "assistant", "B here", None),
    ]
    assert len(am.requests) == 1


async def test_tr02_two_transfer_calls_in_one_message_chain() -> None:
    """TR-02 / D3: two ``transfer_to_agent`` calls in one message chain in call order: the
    results answering the message are delivered together, then B runs, then C."""
    a, am = agent("A", [calls(transfer_call("B", "t1"), transfer_call("C", "t2"))])
    b, bm = agent("B", [say("B here")])
    c, cm = agent("C", [say("C here")])
    events = await run(rk.set_sub_agents(a, [b, c]), "hi")

    assert await summarize(events) == [
        ("A", ["A"], "assistant", "call:transfer_to_agent,transfer_to_agent", None),
        ("A", ["A"], "tool", "successfully transferred to agent [B]", "transfer:B"),
        ("A", ["A"], "tool", "successfully transferred to agent [C]", "transfer:C"),
        ("B", ["A", "B"], "assistant", "B here", None),
        ("C", ["A", "C"], "assistant", "C here", None),
    ]
    assert (len(am.requests), len(bm.requests), len(cm.requests)) == (1, 1, 1)
    # C runs after B and sees B's answer.
    assert contents(cm.requests[0])[-1] == ("user", "For context: [B] said: B here.")


async def test_tr02_transfer_to_unknown_agent_goes_back_to_the_model() -> None:
    """D22: a transfer naming no valid target is answered ``error: cannot transfer to ...``,
    sets no transfer action and does not return directly: the model is called again (tests
    in test_transfer_tool.py go further)."""
    a, am = agent("A", [calls(transfer_call("ghost")), say("I will answer myself")])
    b, bm = agent("B", [])
    events = await run(rk.set_sub_agents(a, [b]), "hi")
    assert errors(events) == []
    assert await summarize(events) == [
        ("A", ["A"], "assistant", "call:transfer_to_agent", None),
        ("A", ["A"], "tool", "error: cannot transfer to 'ghost'; valid agents: B", None),
        ("A", ["A"], "assistant", "I will answer myself", None),
    ]
    assert len(am.requests) == 2 and bm.requests == []


async def test_tr02_transfer_with_bad_arguments_does_not_return_directly() -> None:
    """D15: a return-directly tool called with bad arguments does not return directly: the model
    receives ``error: ...`` and the loop goes on."""
    a, am = agent("A", [calls(call("transfer_to_agent", {"name": "B"}, "t1")), say("sorry")])
    b, bm = agent("B", [])
    events = await run(rk.set_sub_agents(a, [b]), "hi")
    assert errors(events) == []
    assert (await summarize(events))[-1] == ("A", ["A"], "assistant", "sorry", None)
    assert len(am.requests) == 2 and bm.requests == []
    result = am.requests[1].messages[-1]
    assert result.role == "tool" and result.tool_call_id == "t1"
    assert result.content.startswith("error: ")


@rk.tool
def finish(answer: str) -> str:
    """Give the final answer."""
    if not answer:
        raise rk.ToolError("the answer must not be empty")
    return f"FINAL: {answer}"


@pytest.mark.parametrize(
    "bad_call",
    [
        call("transfer_to_agent", {"name": "B"}, "t1"),  # schema mismatch (built-in, transfer)
        call("exit", {"final_result": 5}, "t1"),  # schema mismatch (built-in, exit)
        call("finish", {"answer": ""}, "t1"),  # ToolError from a return-directly tool
        call("finish", "{not json", "t1"),  # invalid JSON for a return-directly tool
    ],
    ids=["transfer", "exit", "tool-error", "invalid-json"],
)
async def test_tr02_failed_return_directly_call_still_has_its_tool_event(
    bad_call: rk.ToolCall,
) -> None:
    """§7.7.1 / D15: every tool call yields one tool event; a failed return-directly call is
    an ordinary tool result (``error: ...``), so its event must appear between the call and the
    next answer — otherwise the run history (what the next agent reads) holds a tool call
    without its result, while the model itself did receive the error message."""
    a, am = agent(
        "A",
        [calls(bad_call), say("sorry")],
        tools=[finish],
        return_directly=["finish"],
        exit_tool=True,
    )
    b, _ = agent("B", [])
    events = await run(rk.set_sub_agents(a, [b]), "hi")
    assert errors(events) == []
    assert am.requests[1].messages[-1].content.startswith("error: ")  # the model got it
    summary = await summarize(events)
    assert [s[2] for s in summary] == ["assistant", "tool", "assistant"]
    assert summary[1][3] == am.requests[1].messages[-1].content


async def test_tr02_chain_interrupt_in_b_resumes_b_then_c() -> None:
    """D3: A → [B, C] by two calls in one message; B's tool interrupts: the pending C is saved;
    resume finishes B, then C runs."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    a, am = agent("A", [calls(transfer_call("B", "t1"), transfer_call("C", "t2"))])
    b, bm = agent(
        "B", [calls(call("approve", {"item": "b"}, "bc")), say("B done")], tools=[approvals.tool]
    )
    c, cm = agent("C", [say("C here")])
    root = rk.set_sub_agents(a, [b, c])
    first = await collect(rk.Runner(root, checkpoint_store=store).query("hi", checkpoint_id="cp"))
    assert [s[4] for s in await summarize(first)] == [
        None,
        "transfer:B",
        "transfer:C",
        None,
        "interrupt",
    ]
    [ctx] = interrupt_of(first).contexts
    assert cm.requests == []
    second = await collect(
        rk.Runner(root, checkpoint_store=store).resume("cp", targets={ctx.id: "ok"})
    )
    assert await summarize(second) == [
        ("B", ["A", "B"], "tool", "b: ok", None),
        ("B", ["A", "B"], "assistant", "B done", None),
        ("C", ["A", "C"], "assistant", "C here", None),
    ]
    assert (len(am.requests), len(bm.requests), len(cm.requests)) == (1, 2, 1)
    assert contents(cm.requests[0])[-1] == ("user", "For context: [B] said: B done.")


async def test_tr02_chain_exit_in_b_stops_the_chain() -> None:
    """D3: if B ends with an exit, C does not run."""
    a, _ = agent("A", [calls(transfer_call("B", "t1"), transfer_call("C", "t2"))])
    b, _ = agent("B", [calls(call("exit", {"final_result": "B stops"}))], exit_tool=True)
    c, cm = agent("C", [say("never")])
    events = await run(rk.set_sub_agents(a, [b, c]), "hi")
    assert (await summarize(events))[-1] == ("B", ["A", "B"], "tool", "B stops", "exit")
    assert cm.requests == []


# -- the tool loop ------------------------------------------------------------------------------
async def test_tool_results_are_fed_back_as_tool_messages_with_matching_ids() -> None:
    """Each call's result goes back to the model as a tool message with the call's id and tool
    name, in call order; the tool specs are sent on every call."""

    @rk.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    model_calls = calls(
        call("echo", {"text": "one"}, "id_1"), call("add", {"a": 2, "b": 3}, "id_2"), text="working"
    )
    a, am = agent("A", [model_calls, say("the end")], tools=[echo, add])
    events = await run(a, "go")

    summary = await summarize(events)
    # Tool events come in completion order: both are sync tools, run in worker threads.
    assert summary[0] == ("A", ["A"], "assistant", "working call:echo,add", None)
    assert sorted(summary[1:3]) == [
        ("A", ["A"], "tool", "5", None),
        ("A", ["A"], "tool", "echo: one", None),
    ]
    assert summary[3] == ("A", ["A"], "assistant", "the end", None)
    assert len(am.requests) == 2
    assert [tool_names(r) for r in am.requests] == [["echo", "add"], ["echo", "add"]]
    assert am.requests[0].tools == [echo.spec, add.spec]
    second = am.requests[1].messages
    assert contents(am.requests[1]) == [
        ("system", "You are A."),
        ("user", "go"),
        ("assistant", "working"),
        ("tool", "echo: one"),
        ("tool", "5"),
    ]
    assert second[2].tool_calls == model_calls.tool_calls
    assert [(m.tool_call_id, m.tool_name) for m in second[3:]] == [
        ("id_1", "echo"),
        ("id_2", "add"),
    ]


async def test_parallel_tool_calls_run_concurrently() -> None:
    """§7.2: the calls of one message run concurrently — each tool only finishes once the other
    has started."""
    started = {"left": asyncio.Event(), "right": asyncio.Event()}

    @rk.tool
    async def meet(side: str) -> str:
        started[side].set()
        other = "right" if side == "left" else "left"
        await asyncio.wait_for(started[other].wait(), timeout=5)
        return f"{side} met {other}"

    a, am = agent(
        "A",
        [
            calls(call("meet", {"side": "left"}, "L"), call("meet", {"side": "right"}, "R")),
            say("both met"),
        ],
        tools=[meet],
    )
    events = await run(a, "go")
    assert errors(events) == []
    summary = await summarize(events)
    assert summary[-1] == ("A", ["A"], "assistant", "both met", None)
    assert sorted(s[3] for s in summary[1:3]) == ["left met right", "right met left"]
    assert [(m.tool_call_id, m.content) for m in am.requests[1].messages[-2:]] == [
        ("L", "left met right"),
        ("R", "right met left"),
    ]


async def test_tool_events_follow_completion_order_messages_follow_call_order() -> None:
    """§7.7.1: a tool event is emitted when its call finishes; the tool messages sent back to
    the model keep the order of the calls."""
    fast_done = asyncio.Event()

    @rk.tool
    async def slow() -> str:
        await asyncio.wait_for(fast_done.wait(), timeout=5)
        return "slow result"

    @rk.tool
    async def fast() -> str:
        fast_done.set()
        return "fast result"

    a, am = agent(
        "A",
        [calls(call("slow", None, "s"), call("fast", None, "f")), say("ok")],
        tools=[slow, fast],
    )
    events = await run(a, "go")
    assert [s[3] for s in await summarize(events)] == [
        "call:slow,fast",
        "fast result",
        "slow result",
        "ok",
    ]
    assert [m.tool_call_id for m in am.requests[1].messages[-2:]] == ["s", "f"]


async def test_tool_return_values_become_text_or_json() -> None:
    """A ``str`` result is the content as is; anything else is JSON."""

    @rk.tool
    def lookup(key: str) -> dict[str, Any]:
        return {"key": key, "values": [1, 2], "ok": True, "name": "Zoë"}

    a, am = agent("A", [calls(call("lookup", {"key": "k"})), say("done")], tools=[lookup])
    await run(a, "go")
    tool_msg = am.requests[1].messages[-1]
    assert json.loads(tool_msg.content) == {"key": "k", "values": [1, 2], "ok": True, "name": "Zoë"}


async def test_tool_without_arguments_accepts_empty_argument_text() -> None:
    @rk.tool
    def now() -> str:
        return "noon"

    a, _ = agent("A", [calls(rk.ToolCall("n1", "now", "")), say("it is noon")], tools=[now])
    events = await run(a, "time?")
    assert [s[3] for s in await summarize(events)] == ["call:now", "noon", "it is noon"]


async def test_max_iterations_exceeded_is_an_error_event() -> None:
    """§7.1 / §11.9: ``max_iterations`` bounds the model calls; exceeding it is an error event
    (``MaxIterationsError``) named after the agent, and the run ends."""
    script = [calls(call("echo", {"text": str(i)}, f"c{i}")) for i in range(5)]
    a, am = agent("A", script, tools=[echo], max_iterations=3)
    events = await run(a, "loop")
    summary = await summarize(events)
    assert len(am.requests) == 3
    assert [s[2] for s in summary] == ["assistant", "tool"] * 3 + ["error"]
    assert summary[-1][0] == "A"
    assert isinstance(events[-1].error, MaxIterationsError)
    assert isinstance(events[-1].error, rk.errors.RelayKitError)


async def test_max_iterations_allows_exactly_that_many_model_calls() -> None:
    """§11.9 TestReact/MaxIterations: 5 tool rounds + a final answer pass with 6 and fail
    with 5."""

    def script() -> list[rk.Message]:
        return [calls(call("echo", {"text": str(i)}, f"c{i}")) for i in range(5)] + [say("bye")]

    ok, okm = agent("A", script(), tools=[echo], max_iterations=6)
    events = await run(ok, "go")
    assert errors(events) == [] and len(okm.requests) == 6
    assert (await summarize(events))[-1][3] == "bye"

    short, shortm = agent("A", script(), tools=[echo], max_iterations=5)
    events = await run(short, "go")
    assert len(shortm.requests) == 5
    assert isinstance(events[-1].error, MaxIterationsError)


async def test_default_max_iterations_is_twenty() -> None:
    script = [calls(call("echo", {"text": "x"}, f"c{i}")) for i in range(25)]
    a, am = agent("A", script, tools=[echo])
    events = await run(a, "go")
    assert len(am.requests) == 20
    assert isinstance(events[-1].error, MaxIterationsError)


async def test_return_directly_tool_ends_the_run_with_its_result() -> None:
    """``return_directly``: the tool's event is the last event, no further model call, and the
    tool's text is the final output (``output_key``)."""

    a, am = agent(
        "A",
        [calls(call("finish", {"answer": "42"}, "f1"))],
        tools=[finish, echo],
        return_directly=["finish"],
        output_key="result",
    )
    reader = ReadValues("reader", ["result"])
    events = await run(rk.SequentialAgent("S", [a, reader]), "go")
    assert await summarize(events) == [
        ("A", ["S", "A"], "assistant", "call:finish", None),
        ("A", ["S", "A"], "tool", "FINAL: 42", None),
    ]
    assert len(am.requests) == 1
    assert reader.seen == [{"result": "FINAL: 42"}]


async def test_parallel_return_directly_event_is_emitted_last() -> None:
    """§11.8 TestParallelReturnDirectlyToolCall: the return-directly call finishes first but its
    event comes after the other calls' events."""
    release = asyncio.Event()

    @rk.tool
    async def quick() -> str:
        release.set()
        return "quick done"

    @rk.tool
    async def later(n: int) -> str:
        await asyncio.wait_for(release.wait(), timeout=5)
        return f"later {n}"

    a, am = agent(
        "A",
        [
            calls(
                call("quick", None, "q"),
                call("later", {"n": 1}, "l1"),
                call("later", {"n": 2}, "l2"),
            )
        ],
        tools=[quick, later],
        return_directly=["quick"],
    )
    events = await run(a, "go")
    texts = [s[3] for s in await summarize(events)]
    assert texts[0] == "call:quick,later,later"
    assert sorted(texts[1:3]) == ["later 1", "later 2"]
    assert texts[3] == "quick done"
    assert len(events) == 4 and len(am.requests) == 1


async def test_exit_tool_ends_with_exit_action_and_final_result() -> None:
    """§7.5 / §11.8 TestExitTool: exactly 2 events; the second is a tool event whose content is
    ``final_result`` and whose action is exit."""
    a, am = agent(
        "A",
        [calls(call("exit", {"final_result": "This is the final result"}, "x"))],
        exit_tool=True,
    )
    events = await run(a, "go")
    assert await summarize(events) == [
        ("A", ["A"], "assistant", "call:exit", None),
        ("A", ["A"], "tool", "This is the final result", "exit"),
    ]
    assert tool_names(am.requests[0]) == ["exit"]
    msg = events[1].output.message  # type: ignore[union-attr]
    assert msg is not None and (msg.tool_call_id, msg.tool_name) == ("x", "exit")


async def test_exit_tool_stops_a_sequential_workflow() -> None:
    """The exit action ends the enclosing flow: the next workflow step does not run."""
    a, _ = agent(
        "A", [calls(call("exit", {"final_result": "stop here"}))], exit_tool=True, output_key="out"
    )
    b, bm = agent("B", [say("never")])
    events = await run(rk.SequentialAgent("S", [a, b]), "go")
    assert [s[4] for s in await summarize(events)] == [None, "exit"]
    assert bm.requests == []


async def test_output_key_saves_the_final_text_in_session_values() -> None:
    """§7.9: ``output_key`` stores the final answer's text; a later agent's instruction reads it
    (D16)."""
    a, _ = agent(
        "A",
        [calls(call("echo", {"text": "x"})), say("the draft")],
        tools=[echo],
        output_key="draft",
    )
    b, bm = agent("B", [say("reviewed")], instruction="Review this: {draft}")
    reader = ReadValues("reader", ["draft"])
    events = await run(rk.SequentialAgent("S", [a, b, reader]), "go")
    assert errors(events) == []
    assert bm.requests[0].messages[0] == rk.Message.system("Review this: the draft")
    assert reader.seen == [{"draft": "the draft"}]


async def test_output_key_in_streaming_mode_stores_the_concatenated_text() -> None:
    a, _ = agent("A", [say("Hello, I am an AI assistant.")], output_key="out")
    reader = ReadValues("reader", ["out"])
    events = await run(rk.SequentialAgent("S", [a, reader]), "go", streaming=True)
    assert errors(events) == []
    assert reader.seen == [{"out": "Hello, I am an AI assistant."}]


class Host(rk.BaseAgent):
    """A custom agent that runs ``inner`` (as a flow agent below it), forwards its events, then
    reports the session value ``key`` as its own message."""

    def __init__(self, inner: rk.Agent, key: str) -> None:
        super().__init__("host", "hosts an agent")
        self.inner = rk.as_flow_agent(inner)
        self.key = key

    async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
        async for ev in self.inner.run(ctx, input):
            yield ev
        yield rk.AgentEvent.from_message(
            say(f"{self.key}={ctx.get_session_value(self.key, '<missing>')}")
        )


async def test_output_key_is_not_written_when_the_run_fails() -> None:
    """§7.9: not written on error (the tool round succeeded, the second model call failed)."""
    a, _ = agent(
        "A",
        [calls(call("echo", {"text": "x"})), RuntimeError("model down")],
        tools=[echo],
        output_key="out",
    )
    events = await run(Host(a, "out"), "go")
    summary = await summarize(events)
    assert [s[2] for s in summary] == ["assistant", "tool", "error", "assistant"]
    assert summary[2][3] == "RuntimeError: model down"
    assert summary[-1][3] == "out=<missing>"


async def test_output_key_written_by_host_probe() -> None:
    """Control for the test above: the same probe sees the value after a successful run."""
    a, _ = agent("A", [say("fine")], output_key="out")
    events = await run(Host(a, "out"), "go")
    assert (await summarize(events))[-1][3] == "out=fine"


class ReadValues(rk.BaseAgent):
    """A custom agent that records some session values when it runs (yields nothing)."""

    def __init__(self, name: str, keys: Sequence[str]) -> None:
        super().__init__(name, "reads values")
        self.keys = list(keys)
        self.seen: list[dict[str, Any]] = []

    async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
        self.seen.append({k: ctx.get_session_value(k, "<missing>") for k in self.keys})
        if False:  # pragma: no cover - makes this an async generator
            yield


# -- instruction placeholders (D16) -------------------------------------------------------------
async def test_instruction_placeholders_are_filled_from_session_values() -> None:
    """D16: ``{key}``, ``{user:name}``, ``{key?}`` missing → "", ``{{``/``}}`` literal braces,
    JSON braces left alone."""
    instruction = (
        "Hi {user:name}, topic {topic}, extra [{extra?}], literal {{topic}}, "
        'JSON {"a": [1, 2]}, count {app:count}'
    )
    a, am = agent("A", [say("ok")], instruction=instruction)
    events = await run(
        a, "go", session_values={"user:name": "Ada", "topic": "tides", "app:count": 3}
    )
    assert errors(events) == []
    assert am.requests[0].messages[0].content == (
        'Hi Ada, topic tides, extra [], literal {topic}, JSON {"a": [1, 2]}, count 3'
    )


async def test_instruction_braces_are_left_alone_without_session_values() -> None:
    """D16 (not Eino's §7.6 "format only once a value exists"): JSON braces never fail."""
    a, am = agent("A", [say("ok")], instruction='Answer as {"answer": "<text>"}')
    events = await run(a, "go")
    assert errors(events) == []
    assert am.requests[0].messages[0].content == 'Answer as {"answer": "<text>"}'


async def test_missing_required_placeholder_is_an_error_event_naming_key_and_agent() -> None:
    """D16: a missing non-optional key is an error event naming the key and the agent; the model
    is not called."""
    a, am = agent("A", [say("never")], instruction="Hello {user:name}, about {topic}")
    events = await run(a, "go", session_values={"user:name": "Ada"})
    assert len(events) == 1
    ev = events[0]
    assert ev.error is not None and ev.agent_name == "A"
    assert "topic" in str(ev.error) and "'A'" in str(ev.error)
    assert am.requests == []


async def test_placeholder_values_written_during_the_run_are_used() -> None:
    """A value set by a tool earlier in the run fills a later agent's instruction."""

    @rk.tool
    def remember(ctx: rk.ToolContext, city: str) -> str:
        ctx.run_context.set_session_value("city", city)
        return "remembered"

    a, _ = agent("A", [calls(call("remember", {"city": "Lima"})), say("ok")], tools=[remember])
    b, bm = agent("B", [say("weather")], instruction="Forecast for {city}.")
    await run(rk.SequentialAgent("S", [a, b]), "go")
    assert bm.requests[0].messages[0].content == "Forecast for Lima."


# -- streaming -----------------------------------------------------------------------------------
async def test_streaming_model_event_is_a_message_stream() -> None:
    """Runner(streaming=True): the model event carries a MessageStream with several chunks;
    ``collect`` gives the full text."""
    a, _ = agent("A", [say("the answer is 42")])
    events = await run(a, "go", streaming=True)
    assert len(events) == 1
    out = events[0].output
    assert out is not None and out.is_streaming and out.stream is not None
    chunks = [c.content async for c in out.stream]
    assert len(chunks) > 1 and "".join(chunks) == "the answer is 42"
    msg = await out.stream.collect()
    assert (msg.role, msg.content) == ("assistant", "the answer is 42")


async def test_streaming_tool_call_fragments_merge_and_the_tool_runs() -> None:
    """Streamed tool-call fragments merge into the full call; the tool receives the parsed
    arguments; the next request holds the merged call."""
    a, am = agent(
        "A",
        [calls(call("echo", {"text": "hello world"}, "e1"), text="let me see"), say("done now")],
        tools=[echo],
    )
    events = await run(a, "go", streaming=True)
    assert errors(events) == []
    assert [ev.output.is_streaming for ev in events] == [True, False, True]  # type: ignore
    first = events[0].output.stream  # type: ignore[union-attr]
    assert first is not None
    fragments = [c for c in first.chunks if c.tool_calls]
    assert len(fragments) > 1  # really streamed in pieces
    merged = await first.collect()
    assert merged.content == "let me see"
    assert merged.tool_calls == [rk.ToolCall("e1", "echo", '{"text": "hello world"}')]
    assert await summarize(events) == [
        ("A", ["A"], "assistant", "let me see call:echo", None),
        ("A", ["A"], "tool", "echo: hello world", None),
        ("A", ["A"], "assistant", "done now", None),
    ]
    sent = am.requests[1].messages[2]
    assert [(c.id, c.name, c.arguments) for c in sent.tool_calls] == [
        ("e1", "echo", '{"text": "hello world"}')
    ]


async def test_streaming_transfer_then_target_streams() -> None:
    a, am = agent("A", [calls(transfer_call("B"), text="handing over")])
    b, _ = agent("B", [say("B streams this")])
    events = await run(rk.set_sub_agents(a, [b]), "go", streaming=True)
    assert await summarize(events) == [
        ("A", ["A"], "assistant", "handing over call:transfer_to_agent", None),
        ("A", ["A"], "tool", "successfully transferred to agent [B]", "transfer:B"),
        ("B", ["A", "B"], "assistant", "B streams this", None),
    ]
    assert events[2].output.is_streaming  # type: ignore[union-attr]
    assert len(am.requests) == 1


# -- D15: bad tool calls go back to the model; failing tools are errors --------------------------
@pytest.mark.parametrize(
    ("bad_call", "mentions"),
    [
        (rk.ToolCall("b1", "echo", '{"text": '), ["echo", "JSON"]),  # invalid JSON
        (rk.ToolCall("b1", "echo", '["text"]'), ["echo"]),  # not an object
        (rk.ToolCall("b1", "echo", '{"txt": "x"}'), ["echo", "text"]),  # schema mismatch
        (rk.ToolCall("b1", "echo", '{"text": 5}'), ["echo", "text"]),  # wrong type
        (rk.ToolCall("b1", "nope", "{}"), ["nope"]),  # unknown tool
    ],
)
async def test_bad_tool_calls_answer_the_model_with_an_error_and_continue(
    bad_call: rk.ToolCall, mentions: list[str]
) -> None:
    """D15: invalid JSON, schema mismatch or an unknown tool → a tool message ``error: ...``
    (same call id) goes back to the model and the loop continues."""
    a, am = agent("A", [calls(bad_call), say("let me fix that")], tools=[echo])
    events = await run(a, "go")
    assert errors(events) == []
    summary = await summarize(events)
    assert [s[2] for s in summary] == ["assistant", "tool", "assistant"]
    assert summary[-1][3] == "let me fix that"
    sent = am.requests[1].messages[-1]
    assert sent.role == "tool" and sent.tool_call_id == "b1" and sent.tool_name == bad_call.name
    assert sent.content.startswith("error: ")
    assert summary[1][3] == sent.content
    for word in mentions:
        assert word in sent.content


async def test_agent_without_tools_answers_a_tool_call_with_an_error() -> None:
    """D15: there is no separate "no tools" path."""
    a, am = agent("A", [calls(call("search", {"q": "x"}, "s1")), say("answer without tools")])
    events = await run(a, "go")
    assert errors(events) == []
    assert am.requests[0].tools == []
    sent = am.requests[1].messages[-1]
    assert sent.role == "tool" and sent.tool_call_id == "s1"
    assert sent.content.startswith("error: ") and "search" in sent.content
    assert (await summarize(events))[-1][3] == "answer without tools"


async def test_tool_error_goes_back_to_the_model_as_error_text() -> None:
    """D15: ``rk.ToolError(msg)`` → tool message ``error: <msg>``; the loop continues."""

    @rk.tool
    def refuse(x: int) -> str:
        raise rk.ToolError(f"cannot handle {x}")

    a, am = agent("A", [calls(call("refuse", {"x": 7})), say("ok then")], tools=[refuse])
    events = await run(a, "go")
    assert await summarize(events) == [
        ("A", ["A"], "assistant", "call:refuse", None),
        ("A", ["A"], "tool", "error: cannot handle 7", None),
        ("A", ["A"], "assistant", "ok then", None),
    ]
    assert am.requests[1].messages[-1].content == "error: cannot handle 7"


async def test_exception_in_tool_body_is_an_error_event_and_stops_the_agent() -> None:
    """D15 / D9: an exception raised by a tool's body is an error event naming the agent; the
    model is not called again and a sibling call still running is cancelled."""
    sibling: list[str] = []
    broken_may_fail = asyncio.Event()

    @rk.tool
    async def broken() -> str:
        await asyncio.wait_for(broken_may_fail.wait(), timeout=5)
        raise RuntimeError("tool exploded")

    @rk.tool
    async def waits() -> str:
        sibling.append("started")
        broken_may_fail.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            sibling.append("cancelled")
            raise
        return "never"

    a, am = agent(
        "A",
        [calls(call("broken", None, "b"), call("waits", None, "w")), say("never")],
        tools=[broken, waits],
    )
    events = await run(a, "go")
    summary = await summarize(events)
    assert summary == [
        ("A", ["A"], "assistant", "call:broken,waits", None),
        ("A", ["A"], "error", "RuntimeError: tool exploded", None),
    ]
    assert len(am.requests) == 1
    assert sibling == ["started", "cancelled"]


async def test_model_error_is_an_error_event() -> None:
    a, am = agent("A", [RuntimeError("model error")])
    events = await run(a, "go")
    assert await summarize(events) == [("A", ["A"], "error", "RuntimeError: model error", None)]
    assert len(am.requests) == 1


async def test_tool_set_action_attaches_to_that_calls_event() -> None:
    """ToolContext.set_action: the action goes on this call's tool event (by call id, even for
    two concurrent calls of the same tool, §11.8)."""

    @rk.tool
    async def tag(ctx: rk.ToolContext, label: str) -> str:
        await asyncio.sleep(0)
        ctx.set_action(rk.AgentAction(custom={"label": label}))
        return f"tagged {label}"

    a, _ = agent(
        "A",
        [calls(call("tag", {"label": "A"}, "t1"), call("tag", {"label": "B"}, "t2")), say("done")],
        tools=[tag],
    )
    events = await run(a, "go")
    tool_events = [ev for ev in events if ev.output is not None and ev.output.role == "tool"]
    by_id = {
        ev.output.message.tool_call_id: ev.action.custom  # type: ignore[union-attr]
        for ev in tool_events
    }
    assert by_id == {"t1": {"label": "A"}, "t2": {"label": "B"}}
    assert [
        ev.output.message.content
        for ev in tool_events  # type: ignore[union-attr]
        if ev.action.custom == {"label": "A"}
    ] == ["tagged A"]  # type: ignore[union-attr]


async def test_tool_context_carries_names_and_run_context() -> None:
    seen: list[tuple[str, str, list[str], Any]] = []

    @rk.tool
    def probe(ctx: rk.ToolContext) -> str:
        seen.append(
            (
                ctx.tool_name,
                ctx.tool_call_id,
                names(ctx.run_context.run_path),
                ctx.run_context.get_session_value("k"),
            )
        )
        return "ok"

    a, _ = agent("A", [calls(call("probe", None, "p1")), say("fine")], tools=[probe])
    await run(rk.SequentialAgent("S", [a]), "go", session_values={"k": "v"})
    assert seen == [("probe", "p1", ["S", "A"], "v")]


# -- tool interrupts and resume ------------------------------------------------------------------
class Approvals(BaseApprovals[dict[str, Any]]):
    """The interrupting tool ``approve(item)``: the first call interrupts with
    ``{"approve": item}`` and state ``{"item": item}``; on resume it records what it learned and,
    if targeted, returns ``<item>: <resume data>``, else interrupts again (the framework
    normally does this for it)."""

    def record(self, ctx: rk.ToolContext, item: str) -> dict[str, Any]:
        return {
            "item": item,
            "call_id": ctx.tool_call_id,
            "was_interrupted": ctx.was_interrupted,
            "state": ctx.interrupt_state,
            "is_target": ctx.is_resume_target,
            "data": ctx.resume_data,
        }

    def items(self) -> list[tuple[str, bool]]:
        return [(c["item"], c["was_interrupted"]) for c in self.calls]


class Counter:
    def __init__(self) -> None:
        self.count = 0

        @rk.tool
        def lookup(key: str) -> str:
            """Look a key up."""
            self.count += 1
            return f"value of {key}"

        self.tool = lookup


def tool_segment(ctx: rk.InterruptContext) -> rk.AddressSegment:
    return ctx.address[-1]


async def test_tool_interrupt_yields_interrupt_with_tool_address() -> None:
    """A tool raising ``ToolInterrupt`` pauses the agent: the run yields one interrupt event whose
    root cause's address ends with ``AddressSegment("tool", name, call_id)`` under the agent's
    composite context."""
    approvals = Approvals()
    a, am = agent(
        "A",
        [calls(call("approve", {"item": "refund"}, "call_9"), text="asking")],
        tools=[approvals.tool],
    )
    store = rk.InMemoryCheckpointStore()
    events = await collect(rk.Runner(a, checkpoint_store=store).query("go", checkpoint_id="cp1"))

    summary = await summarize(events)
    assert summary == [
        ("A", ["A"], "assistant", "asking call:approve", None),
        ("A", ["A"], None, None, "interrupt"),
    ]
    info = interrupt_of(events)
    [ctx] = info.contexts
    assert ctx.address == (
        rk.AddressSegment("agent", "A"),
        rk.AddressSegment("tool", "approve", "call_9"),
    )
    assert tool_segment(ctx) == rk.AddressSegment(kind="tool", id="approve", sub_id="call_9")
    assert ctx.info == {"approve": "refund"}
    assert ctx.is_root_cause
    assert ctx.parent is not None and not ctx.parent.is_root_cause
    assert ctx.parent.address == (rk.AddressSegment("agent", "A"),)
    assert await store.get("cp1") is not None
    assert len(am.requests) == 1


async def test_tool_interrupt_resume_with_new_runner_and_targets() -> None:
    """A resume in a new Runner over the same store, targeting the interrupt id: the tool is
    called again with the same arguments and ``was_interrupted``, ``interrupt_state``,
    ``is_resume_target``, ``resume_data``; the finished call of the same batch is not re-run;
    the model then sees every result in call order."""
    store = rk.InMemoryCheckpointStore()

    def build(script: list[Any]) -> tuple[rk.ChatModelAgent, rk.ScriptedModel, Approvals, Counter]:
        approvals, counter = Approvals(), Counter()
        a, am = agent("A", script, tools=[approvals.tool, counter.tool])
        return a, am, approvals, counter

    batch = calls(call("lookup", {"key": "k"}, "c1"), call("approve", {"item": "x"}, "c2"))
    a1, _, _, counter1 = build([batch])
    first = await collect(rk.Runner(a1, checkpoint_store=store).query("go", checkpoint_id="cp"))
    assert [s[3] for s in await summarize(first)] == ["call:lookup,approve", "value of k", None]
    [ctx] = interrupt_of(first).contexts
    assert counter1.count == 1

    # A fresh tree and model (another process): the model script continues after the batch.
    a2, am2, approvals2, counter2 = build([say("approved and done")])
    second = await collect(
        rk.Runner(a2, checkpoint_store=store).resume("cp", targets={ctx.id: "yes"})
    )
    assert await summarize(second) == [
        ("A", ["A"], "tool", "x: yes", None),
        ("A", ["A"], "assistant", "approved and done", None),
    ]
    assert approvals2.calls == [
        {
            "item": "x",
            "call_id": "c2",
            "was_interrupted": True,
            "state": {"item": "x"},
            "is_target": True,
            "data": "yes",
        }
    ]
    assert counter2.count == 0  # the finished call is not re-run
    [request] = am2.requests
    assert contents(request) == [
        ("system", "You are A."),
        ("user", "go"),
        ("assistant", ""),
        ("tool", "value of k"),
        ("tool", "x: yes"),
    ]
    assert [m.tool_call_id for m in request.messages[3:]] == ["c1", "c2"]


async def test_resume_without_targets_resumes_every_interrupted_tool() -> None:
    """D8: ``resume(id)`` without targets: every interrupted tool is a target with no data."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    batch = calls(call("approve", {"item": "a"}, "c1"), call("approve", {"item": "b"}, "c2"))
    a, _ = agent("A", [batch, say("all done")], tools=[approvals.tool])
    first = await collect(rk.Runner(a, checkpoint_store=store).query("go", checkpoint_id="cp"))
    assert len(interrupt_of(first).contexts) == 2
    second = await collect(rk.Runner(a, checkpoint_store=store).resume("cp"))
    assert sorted(s[3] for s in (await summarize(second))[:2]) == ["a: None", "b: None"]
    assert (await summarize(second))[-1][3] == "all done"
    resumed = [c for c in approvals.calls if c["was_interrupted"]]
    assert sorted((c["item"], c["is_target"], c["data"]) for c in resumed) == [
        ("a", True, None),
        ("b", True, None),
    ]


async def test_two_interrupting_tools_are_answered_one_at_a_time_with_stable_ids() -> None:
    """D8 / D11: a targeted resume of one of two interrupted tools completes it; the other is
    not executed again, stays pending and re-interrupts under the SAME id; resuming that id
    then completes the batch and the model continues."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    batch = calls(call("approve", {"item": "a"}, "c1"), call("approve", {"item": "b"}, "c2"))
    a, am = agent("A", [batch, say("both approved")], tools=[approvals.tool])

    first = await collect(rk.Runner(a, checkpoint_store=store).query("go", checkpoint_id="cp"))
    ctx_a, ctx_b = sorted(interrupt_of(first).contexts, key=lambda c: tool_segment(c).sub_id)
    assert (tool_segment(ctx_a).sub_id, tool_segment(ctx_b).sub_id) == ("c1", "c2")
    assert ctx_a.id != ctx_b.id
    assert ctx_a.parent is not None and ctx_b.parent is not None
    assert ctx_a.parent.id == ctx_b.parent.id
    # The two sync calls ran concurrently (worker threads): either may have been first.
    assert sorted(approvals.items()) == [("a", False), ("b", False)]

    second = await collect(
        rk.Runner(a, checkpoint_store=store).resume("cp", targets={ctx_a.id: "ok-a"})
    )
    assert [s[3] for s in await summarize(second)] == ["a: ok-a", None]
    [pending] = interrupt_of(second).contexts
    assert pending.id == ctx_b.id
    assert pending.address == ctx_b.address and pending.info == {"approve": "b"}
    assert pending.parent is not None and pending.parent.id == ctx_a.parent.id
    # b was not called again (the framework keeps it pending); a ran once more.
    assert approvals.items()[2:] == [("a", True)]
    assert len(am.requests) == 1

    third = await collect(
        rk.Runner(a, checkpoint_store=store).resume("cp", targets={ctx_b.id: "ok-b"})
    )
    assert await summarize(third) == [
        ("A", ["A"], "tool", "b: ok-b", None),
        ("A", ["A"], "assistant", "both approved", None),
    ]
    assert approvals.calls[-1] == {
        "item": "b",
        "call_id": "c2",
        "was_interrupted": True,
        "state": {"item": "b"},
        "is_target": True,
        "data": "ok-b",
    }
    assert len(approvals.calls) == 4
    assert [(m.tool_call_id, m.content) for m in am.requests[1].messages[-2:]] == [
        ("c1", "a: ok-a"),
        ("c2", "b: ok-b"),
    ]


async def test_held_return_directly_event_is_emitted_after_resume() -> None:
    """§7.7.1 TestReturnDirectlyEventSentAfterResume: a return-directly call that finished in an
    interrupted batch is held across the interrupt and is the last event after resume."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()

    def build() -> tuple[rk.ChatModelAgent, rk.ScriptedModel]:
        return agent(
            "A",
            [calls(call("finish", {"answer": "42"}, "f"), call("approve", {"item": "z"}, "a"))],
            tools=[finish, approvals.tool],
            return_directly=["finish"],
        )

    a, _ = build()
    first = await collect(rk.Runner(a, checkpoint_store=store).query("go", checkpoint_id="cp"))
    assert [s[4] for s in await summarize(first)] == [None, "interrupt"]
    a2, am2 = build()
    second = await collect(rk.Runner(a2, checkpoint_store=store).resume("cp"))
    assert [s[3] for s in await summarize(second)] == ["z: None", "FINAL: 42"]
    assert am2.requests == []


async def test_tool_interrupt_resume_in_streaming_mode() -> None:
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    a, _ = agent(
        "A",
        [calls(call("approve", {"item": "s"}, "c1")), say("streamed end")],
        tools=[approvals.tool],
    )
    first = await collect(
        rk.Runner(a, checkpoint_store=store, streaming=True).query("go", checkpoint_id="cp")
    )
    [ctx] = interrupt_of(first).contexts
    second = await collect(
        rk.Runner(a, checkpoint_store=store, streaming=True).resume("cp", targets={ctx.id: "fine"})
    )
    assert [s[3] for s in await summarize(second)] == ["s: fine", "streamed end"]
    assert second[-1].output.is_streaming  # type: ignore[union-attr]


async def test_tool_interrupt_inside_a_tree_resumes_the_child_agent() -> None:
    """An LLM child that interrupts after a transfer resumes where it stopped; the parent is not
    run again."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    a, am = agent("A", [calls(transfer_call("B"))])
    b, bm = agent(
        "B",
        [calls(call("approve", {"item": "q"}, "c1")), say("B finished")],
        tools=[approvals.tool],
    )
    root = rk.set_sub_agents(a, [b])
    first = await collect(rk.Runner(root, checkpoint_store=store).query("go", checkpoint_id="cp"))
    [ctx] = interrupt_of(first).contexts
    assert ctx.address == (
        rk.AddressSegment("agent", "A"),
        rk.AddressSegment("agent", "B"),
        rk.AddressSegment("tool", "approve", "c1"),
    )
    second = await collect(
        rk.Runner(root, checkpoint_store=store).resume("cp", targets={ctx.id: "y"})
    )
    assert await summarize(second) == [
        ("B", ["A", "B"], "tool", "q: y", None),
        ("B", ["A", "B"], "assistant", "B finished", None),
    ]
    assert (len(am.requests), len(bm.requests)) == (1, 2)


async def test_targeted_tool_that_interrupts_again_keeps_its_id() -> None:
    """D11: a targeted tool that is not satisfied and interrupts again keeps its interrupt id;
    it sees its own saved state each time."""
    store = rk.InMemoryCheckpointStore()
    seen: list[tuple[bool, Any, Any]] = []

    @rk.tool
    def ask(ctx: rk.ToolContext) -> str:
        seen.append((ctx.was_interrupted, ctx.interrupt_state, ctx.resume_data))
        if ctx.resume_data != "good":
            raise rk.ToolInterrupt({"round": len(seen)}, state=len(seen))
        return "accepted"

    a, _ = agent("A", [calls(call("ask", None, "c1")), say("end")], tools=[ask])
    first = await collect(rk.Runner(a, checkpoint_store=store).query("hi", checkpoint_id="cp"))
    [c1] = interrupt_of(first).contexts
    second = await collect(
        rk.Runner(a, checkpoint_store=store).resume("cp", targets={c1.id: "bad"})
    )
    [c2] = interrupt_of(second).contexts
    assert c2.id == c1.id and c2.info == {"round": 2}
    third = await collect(
        rk.Runner(a, checkpoint_store=store).resume("cp", targets={c2.id: "good"})
    )
    assert [s[3] for s in await summarize(third)] == ["accepted", "end"]
    assert seen == [(False, None, None), (True, 1, "bad"), (True, 2, "good")]


async def test_max_iterations_count_continues_across_resume() -> None:
    """The remaining iterations are part of the saved state: a resume does not reset them."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    a, am = agent(
        "A",
        [
            calls(call("approve", {"item": "x"}, "c1")),
            calls(call("echo", {"text": "y"}, "c2")),
            say("never"),
        ],
        tools=[approvals.tool, echo],
        max_iterations=2,
    )
    first = await collect(rk.Runner(a, checkpoint_store=store).query("hi", checkpoint_id="cp"))
    [ctx] = interrupt_of(first).contexts
    second = await collect(
        rk.Runner(a, checkpoint_store=store).resume("cp", targets={ctx.id: "ok"})
    )
    assert [s[2] for s in await summarize(second)] == ["tool", "assistant", "tool", "error"]
    assert isinstance(second[-1].error, MaxIterationsError)
    assert len(am.requests) == 2


async def test_long_running_tool_pauses_and_its_resume_data_is_the_result() -> None:
    """API.md long-running tools: the function runs once; its return value is in the interrupt
    info; the resume data becomes the tool result (non-str as JSON); no second call."""
    store = rk.InMemoryCheckpointStore()
    started: list[str] = []

    @rk.tool(long_running=True)
    def start_job(job: str) -> dict[str, int]:
        """Start a long job."""
        started.append(job)
        return {"ticket": 7}

    a, am = agent(
        "A",
        [calls(call("start_job", {"job": "build"}, "c1")), say("job finished")],
        tools=[start_job],
    )
    first = await collect(rk.Runner(a, checkpoint_store=store).query("hi", checkpoint_id="cp"))
    [ctx] = interrupt_of(first).contexts
    assert ctx.info == {
        "tool": "start_job",
        "tool_call_id": "c1",
        "arguments": {"job": "build"},
        "started": {"ticket": 7},
    }
    assert ctx.address[-1] == rk.AddressSegment("tool", "start_job", "c1")
    second = await collect(
        rk.Runner(a, checkpoint_store=store).resume("cp", targets={ctx.id: {"status": "ok"}})
    )
    assert [s[3] for s in await summarize(second)] == ['{"status": "ok"}', "job finished"]
    assert started == ["build"]
    assert json.loads(am.requests[1].messages[-1].content) == {"status": "ok"}


async def test_exit_tool_result_is_saved_under_output_key() -> None:
    a, _ = agent(
        "A", [calls(call("exit", {"final_result": "exit text"}))], exit_tool=True, output_key="out"
    )
    events = await run(Host(a, "out"), "go")
    assert [s[3] for s in await summarize(events)] == ["call:exit", "exit text", "out=exit text"]


async def test_streaming_model_error_ends_the_stream_and_is_an_error_event() -> None:
    """A streamed model call that fails: the stream event is delivered, reading it raises, and
    an error event of the agent follows."""
    a, _ = agent("A", [RuntimeError("stream broke")])
    events = await run(a, "go", streaming=True)
    assert len(events) == 2
    out = events[0].output
    assert out is not None and out.stream is not None
    with pytest.raises(RuntimeError, match="stream broke"):
        await out.stream.collect()
    assert events[1].agent_name == "A" and str(events[1].error) == "stream broke"


async def test_exception_in_a_single_tool_call_is_an_error_event() -> None:
    @rk.tool
    def broken() -> str:
        raise ValueError("bad state")

    a, am = agent("A", [calls(call("broken")), say("never")], tools=[broken])
    events = await run(a, "go")
    assert (await summarize(events))[-1] == ("A", ["A"], "error", "ValueError: bad state", None)
    assert len(am.requests) == 1
