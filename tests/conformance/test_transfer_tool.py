"""Conformance: the built-in tools of an LLM agent that steer the tree -- ``transfer_to_agent``
with its targets as an ``enum`` (TR-01, TR-02, D22) and ``exit_loop`` ending a loop (TR-05).

Every model is a ``ScriptedModel``: ``.requests`` shows the tool specs and messages the agent
sent, so "the model was called again" is a request count.
"""

from __future__ import annotations

from typing import Any

import pytest

import relaykit as rk
from relaykit.errors import MaxIterationsError
from tests.conformance.helpers import ScriptedAgent, transfer
from tests.conformance.llm_helpers import (
    agent,
    call,
    calls,
    errors,
    run,
    say,
    summarize,
    tool_message,
    transfer_call,
)


def agent_name_schema(request: rk.ModelRequest) -> dict[str, Any]:
    """The ``agent_name`` parameter of the ``transfer_to_agent`` spec offered in ``request``."""
    [spec] = [t for t in request.tools if t.name == "transfer_to_agent"]
    schema: dict[str, Any] = spec.parameters["properties"]["agent_name"]
    return schema


# -- D22: the targets are an enum ---------------------------------------------------------------
async def test_d22_the_spec_lists_the_children_then_the_parent_as_an_enum() -> None:
    """TR-01 / D22: the model receives ``agent_name`` as a string ``enum`` of exactly this
    agent's targets: its children in order, then its parent."""
    r, rm = agent("R", [calls(transfer_call("M"))])
    m, mm = agent("M", [say("M answers")])
    leaf1, _ = agent("L1", [])
    leaf2, _ = agent("L2", [])
    root = rk.set_sub_agents(r, [rk.set_sub_agents(m, [leaf1, leaf2])])
    events = await run(root, "q")

    assert errors(events) == []
    assert agent_name_schema(rm.requests[0]) == {
        "type": "string",
        "description": "the name of the agent to transfer to",
        "enum": ["M"],
    }
    assert agent_name_schema(mm.requests[0])["enum"] == ["L1", "L2", "R"]


async def test_d22_disallow_transfer_to_parent_removes_the_parent_from_the_enum() -> None:
    """D22 / D4: with ``disallow_transfer_to_parent`` the parent is not in the enum, and a call
    naming it is answered like any other unknown name."""
    r, _ = agent("R", [calls(transfer_call("M"))])
    m, mm = agent("M", [calls(transfer_call("R", "t2")), say("M answers")])
    leaf, lm = agent("L", [])
    middle = rk.set_sub_agents(rk.as_flow_agent(m, disallow_transfer_to_parent=True), [leaf])
    events = await run(rk.set_sub_agents(r, [middle]), "q")

    assert errors(events) == []
    assert agent_name_schema(mm.requests[0])["enum"] == ["L"]
    assert tool_message(mm.requests[1], "t2").content == (
        "error: cannot transfer to 'R'; valid agents: L"
    )
    assert (await summarize(events))[-1] == ("M", ["R", "M"], "assistant", "M answers", None)
    assert lm.requests == []


async def test_d22_a_wrong_name_goes_back_to_the_model_which_can_then_transfer() -> None:
    """D22: a call naming an unknown agent is answered with the exact error text, sets no
    transfer action, does not return directly; the model is called again and its correct
    transfer runs the target."""
    a, am = agent(
        "A", [calls(transfer_call("billing_agent", "t1")), calls(transfer_call("billing", "t2"))]
    )
    billing, bm = agent("billing", [say("billing here")])
    support, _ = agent("support", [])
    events = await run(rk.set_sub_agents(a, [billing, support]), "my invoice")

    assert errors(events) == []
    assert await summarize(events) == [
        ("A", ["A"], "assistant", "call:transfer_to_agent", None),
        (
            "A",
            ["A"],
            "tool",
            "error: cannot transfer to 'billing_agent'; valid agents: billing, support",
            None,
        ),
        ("A", ["A"], "assistant", "call:transfer_to_agent", None),
        ("A", ["A"], "tool", "successfully transferred to agent [billing]", "transfer:billing"),
        ("billing", ["A", "billing"], "assistant", "billing here", None),
    ]
    assert events[1].action is None
    assert len(am.requests) == 2 and len(bm.requests) == 1
    answer = tool_message(am.requests[1], "t1")
    assert (answer.tool_name, answer.content) == (
        "transfer_to_agent",
        "error: cannot transfer to 'billing_agent'; valid agents: billing, support",
    )


async def test_d22_a_wrong_name_in_a_streamed_run_goes_back_to_the_model_too() -> None:
    """D22 with ``streaming=True``: the same answer, the same second model call."""
    a, am = agent("A", [calls(transfer_call("ghost")), say("answering myself")])
    b, bm = agent("B", [])
    events = await run(rk.set_sub_agents(a, [b]), "hi", streaming=True)

    assert errors(events) == []
    assert [s[3] for s in await summarize(events)] == [
        "call:transfer_to_agent",
        "error: cannot transfer to 'ghost'; valid agents: B",
        "answering myself",
    ]
    assert len(am.requests) == 2 and bm.requests == []


async def test_d22_wrong_names_count_toward_max_iterations() -> None:
    """D22 / D15: every model call answered with a wrong name counts: with max_iterations=2,
    two wrong transfers end the agent with the MaxIterationsError event."""
    a, am = agent(
        "A",
        [calls(transfer_call("x", "t1")), calls(transfer_call("y", "t2")), say("never")],
        max_iterations=2,
    )
    b, bm = agent("B", [])
    events = await run(rk.set_sub_agents(a, [b]), "hi")

    summary = await summarize(events)
    assert [s[3] for s in summary[:4]] == [
        "call:transfer_to_agent",
        "error: cannot transfer to 'x'; valid agents: B",
        "call:transfer_to_agent",
        "error: cannot transfer to 'y'; valid agents: B",
    ]
    [error] = errors(events)
    assert isinstance(error, MaxIterationsError)
    assert str(error) == ("agent 'A' exceeded max_iterations=2 model calls without a final answer")
    assert len(am.requests) == 2 and bm.requests == []


async def test_d22_unusable_arguments_keep_their_own_answer() -> None:
    """D15: a call without a string ``agent_name`` is answered as before, not with the list."""
    a, am = agent("A", [calls(call("transfer_to_agent", {"agent_name": 3}, "t1")), say("ok")])
    b, _ = agent("B", [])
    await run(rk.set_sub_agents(a, [b]), "hi")
    assert tool_message(am.requests[1], "t1").content == (
        "error: transfer_to_agent needs a string argument 'agent_name'"
    )


async def test_d22_the_spec_is_built_once_per_set_of_targets() -> None:
    """The hot path: every model call of every run of one agent with the same targets gets the
    very same spec object; other targets get their own."""
    a, am = agent("A", [calls(call("nothing", None, "n1")), say("1"), say("2")])
    b, _ = agent("B", [])
    root = rk.set_sub_agents(a, [b])
    await run(root, "first")
    await run(root, "second")
    first, again, second_run = (r.tools[0] for r in am.requests)
    assert first is again is second_run

    lone, lm = agent("lone", [say("x"), say("y")])
    await run(lone, "q")
    c, _ = agent("C", [])
    await run(rk.set_sub_agents(lone, [c]), "q")
    assert lm.requests[0].tools == []
    assert agent_name_schema(lm.requests[1])["enum"] == ["C"]


async def test_d22_a_custom_agents_transfer_to_an_unknown_agent_stays_an_error_event() -> None:
    """D22 / FA-06: only the LLM's tool call goes back to a model; a custom agent's transfer
    action naming an unknown agent is still the 'not found' error event."""
    root = rk.set_sub_agents(ScriptedAgent("R", [transfer("ghost")]), [ScriptedAgent("A")])
    events = await run(root, "hi")
    [error] = errors(events)
    assert str(error) == "transfer failed: agent 'ghost' not found when transferring from 'R'"


# -- exit_loop ----------------------------------------------------------------------------------
def writer_and_critic(
    critic_script: list[Any], **critic_options: Any
) -> tuple[rk.ChatModelAgent, rk.ScriptedModel, rk.ChatModelAgent, rk.ScriptedModel]:
    writer, wm = agent("writer", [say(f"draft {i}") for i in range(1, 6)])
    critic, cm = agent("critic", critic_script, tools=[rk.exit_loop], **critic_options)
    return writer, wm, critic, cm


async def test_exit_loop_ends_the_loop_after_the_iteration_it_was_called_in() -> None:
    """TR-05: a critic calling ``rk.exit_loop`` in iteration 2 ends a loop of 5 iterations:
    its tool event carries ``BreakLoopAction(from_agent="critic")`` and the text
    ``exiting the loop``, the critic's model is not called again, the writer does not run a
    third time. Run paths are [loop, critic]."""
    writer, wm, critic, cm = writer_and_critic(
        [say("needs work"), calls(call("exit_loop", {}, "x1")), say("never")]
    )
    events = await run(rk.LoopAgent("loop", [writer, critic], max_iterations=5), "write")

    assert errors(events) == []
    assert await summarize(events) == [
        ("writer", ["loop", "writer"], "assistant", "draft 1", None),
        ("critic", ["loop", "critic"], "assistant", "needs work", None),
        ("writer", ["loop", "writer"], "assistant", "draft 2", None),
        ("critic", ["loop", "critic"], "assistant", "call:exit_loop", None),
        ("critic", ["loop", "critic"], "tool", "exiting the loop", "break_loop"),
    ]
    brk = events[-1].action.break_loop  # type: ignore[union-attr]
    assert brk == rk.BreakLoopAction(from_agent="critic", done=True, current_iterations=1)
    assert (len(wm.requests), len(cm.requests)) == (2, 2)
    assert [t.name for t in cm.requests[0].tools] == ["exit_loop"]


async def test_exit_loop_lets_the_loops_parent_go_on() -> None:
    """TR-05: the break ends the loop only; in a SequentialAgent the next agent runs."""
    writer, _, critic, _ = writer_and_critic([calls(call("exit_loop", None, "x1"))])
    publisher, pm = agent("publisher", [say("published")])
    loop = rk.LoopAgent("loop", [writer, critic], max_iterations=5)
    events = await run(rk.SequentialAgent("pipeline", [loop, publisher]), "write")

    assert errors(events) == []
    assert [(s[0], s[1], s[3]) for s in await summarize(events)] == [
        ("writer", ["pipeline", "loop", "writer"], "draft 1"),
        ("critic", ["pipeline", "loop", "critic"], "call:exit_loop"),
        ("critic", ["pipeline", "loop", "critic"], "exiting the loop"),
        ("publisher", ["pipeline", "publisher"], "published"),
    ]
    assert len(pm.requests) == 1


async def test_exit_loop_in_an_inner_loop_ends_only_that_loop() -> None:
    """TR-05: the outer loop goes on with its next iteration (unlike ADK's global escalate)."""
    writer, _, critic, _ = writer_and_critic([calls(call("exit_loop", None, "x1"))] * 2)
    inner = rk.LoopAgent("inner", [writer, critic], max_iterations=5)
    events = await run(rk.LoopAgent("outer", [inner], max_iterations=2), "write")
    assert errors(events) == []
    assert [(s[1], s[3]) for s in await summarize(events)] == [
        (["outer", "inner", "writer"], "draft 1"),
        (["outer", "inner", "critic"], "call:exit_loop"),
        (["outer", "inner", "critic"], "exiting the loop"),
        (["outer", "inner", "writer"], "draft 2"),
        (["outer", "inner", "critic"], "call:exit_loop"),
        (["outer", "inner", "critic"], "exiting the loop"),
    ]


async def test_exit_loop_text_is_not_the_agents_output() -> None:
    """``exiting the loop`` is a notice: the critic's ``output_key`` keeps its last answer
    (read here by the next agent's instruction, D16)."""
    writer, _, critic, _ = writer_and_critic(
        [say("needs work"), calls(call("exit_loop", None, "x1"))], output_key="critique"
    )
    publisher, pm = agent("publisher", [say("published")], instruction="Last critique: {critique}")
    loop = rk.LoopAgent("loop", [writer, critic], max_iterations=5)
    events = await run(rk.SequentialAgent("pipeline", [loop, publisher]), "write")
    assert errors(events) == []
    assert pm.requests[0].messages[0] == rk.Message.system("Last critique: needs work")


async def test_exit_inside_a_loop_still_ends_the_whole_workflow() -> None:
    """D17 / TR-05: ``exit`` (not ``exit_loop``) ends the loop and its parent too."""
    writer, _, critic, _ = writer_and_critic(
        [calls(call("exit", {"final_result": "done"}, "e1"))], exit_tool=True
    )
    publisher, pm = agent("publisher", [say("never")])
    loop = rk.LoopAgent("loop", [writer, critic], max_iterations=5)
    events = await run(rk.SequentialAgent("pipeline", [loop, publisher]), "write")

    assert [(s[0], s[3], s[4]) for s in await summarize(events)] == [
        ("writer", "draft 1", None),
        ("critic", "call:exit", None),
        ("critic", "done", "exit"),
    ]
    assert pm.requests == []


def test_exit_loop_is_the_registered_builtin_and_a_lookalike_is_refused() -> None:
    """Reserved names (D24): ``tools=[rk.exit_loop]`` is accepted, a user tool named
    ``exit_loop`` is not."""
    assert rk.exit_loop.name == rk.exit_loop.spec.name == "exit_loop"
    assert rk.exit_loop.spec.parameters == {"type": "object", "properties": {}}
    assert isinstance(rk.exit_loop, rk.Tool)
    rk.ChatModelAgent("critic", model=rk.ScriptedModel([]), tools=[rk.exit_loop])

    @rk.tool(name="exit_loop")
    def my_exit_loop() -> str:
        return "mine"

    with pytest.raises(rk.errors.ConfigurationError, match="exit_loop"):
        rk.ChatModelAgent("critic", model=rk.ScriptedModel([]), tools=[my_exit_loop])


@pytest.mark.parametrize("order", [["billing", "ghost"], ["ghost", "billing"]])
async def test_d22_one_bad_name_among_several_transfers_performs_none(order: list[str]) -> None:
    """D3 + D22: the transfer calls of one response form a chain; when one names an unknown
    agent, none is performed (the valid one is answered with an error too) and the model is
    called again -- whichever comes last."""
    first = calls(*(transfer_call(name, f"t{i}") for i, name in enumerate(order)))
    a, am = agent("A", [first, calls(transfer_call("billing", "t9"))])
    billing, bm = agent("billing", [say("billing here")])
    events = await run(rk.set_sub_agents(a, [billing]), "my invoice")

    assert errors(events) == []
    assert len(am.requests) == 2
    answers = {m.tool_call_id: m.content for m in am.requests[1].messages if m.role == "tool"}
    ghost = f"t{order.index('ghost')}"
    valid = f"t{order.index('billing')}"
    assert answers[ghost] == "error: cannot transfer to 'ghost'; valid agents: billing"
    assert answers[valid].startswith("error: not transferred: another transfer_to_agent call")
    assert len(bm.requests) == 1  # billing ran once, after the second, valid response
    assert (await summarize(events))[-1] == (
        "billing",
        ["A", "billing"],
        "assistant",
        "billing here",
        None,
    )


async def test_d3_transfers_sharing_a_reply_with_a_pausing_tool_all_run_after_resume() -> None:
    """D3 + D21: a reply calling a tool that pauses and transferring to B then C: the
    transfer results are held across the pause and delivered with the batch (the results of
    one message go together), so after the resume B runs, then C (none is lost)."""

    @rk.tool
    def ask(ctx: rk.ToolContext, q: str) -> str:
        """Asks a human."""
        if not ctx.is_resume_target:
            raise rk.ToolInterrupt({"q": q})
        return "ok"

    def tree() -> tuple[rk.Agent, rk.ScriptedModel, rk.ScriptedModel]:
        reply = rk.Message.assistant(
            "",
            [
                rk.ToolCall("a1", "ask", '{"q": "root"}'),
                transfer_call("B", "t1"),
                transfer_call("C", "t2"),
            ],
        )
        root = rk.ChatModelAgent("R", "root", "i", rk.ScriptedModel([reply]), tools=[ask])
        b, bm = agent("B", [say("B here")])
        c, cm = agent("C", [say("C here")])
        return rk.set_sub_agents(root, [b, c]), bm, cm

    store = rk.InMemoryCheckpointStore()
    first_tree, first_b, _ = tree()
    first = await rk.Runner(first_tree, checkpoint_store=store).invoke("go")
    assert first.interrupt is not None and first.checkpoint_id is not None
    assert first_b.requests == []
    resumed_tree, b_model, c_model = tree()
    second = await rk.Runner(resumed_tree, checkpoint_store=store).invoke_resume(
        first.checkpoint_id, targets={first.interrupt.contexts[0].id: True}
    )
    assert len(b_model.requests) == 1 and len(c_model.requests) == 1
    texts = [
        (ev.agent_name, ev.output.message.content)
        for ev in second.events
        if ev.output is not None and ev.output.message is not None
    ]
    assert texts == [
        ("R", "ok"),
        ("R", "successfully transferred to agent [B]"),
        ("R", "successfully transferred to agent [C]"),
        ("B", "B here"),
        ("C", "C here"),
    ]
