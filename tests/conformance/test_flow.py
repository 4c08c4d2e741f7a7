"""Conformance: flow agents (FA-01 … FA-17), with semantics.md D2, D4, D5, D6 applied."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

import relaykit as rk

try:  # the tests directory may be a package
    from . import helpers as h
except ImportError:  # pragma: no cover - rootdir-style import (no __init__.py)
    import helpers as h  # type: ignore[no-redef]

EagerRaisingAgent = h.EagerRaisingAgent
RaisingAgent = h.RaisingAgent
ResumableScriptedAgent = h.ResumableScriptedAgent
ScriptedAgent = h.ScriptedAgent
collect = h.collect
interrupt_step = h.interrupt_step
llm_transfer = h.llm_transfer
names = h.names
run_summary = h.run_summary
stream_of = h.stream_of
summarize = h.summarize
transfer = h.transfer
user = h.user
with_action = h.with_action

ConfigurationError = rk.errors.ConfigurationError


def say(text: str) -> rk.AgentEvent:
    return rk.AgentEvent.from_message(rk.Message.assistant(text))


def first_run(ctx: rk.RunContext) -> bool:
    return len(ctx.run_path) == 1


def not_found(dest: str, src: str) -> str:
    return f"transfer failed: agent '{dest}' not found when transferring from '{src}'"


# -- FA-01, FA-02: building trees --------------------------------------------------------------
def test_fa01_set_sub_agents_twice_fails() -> None:
    """FA-01: set_sub_agents on an agent that already has sub-agents fails."""
    root = rk.set_sub_agents(ScriptedAgent("R"), [ScriptedAgent("A")])
    assert isinstance(root, rk.ResumableAgent)
    with pytest.raises(ConfigurationError, match="sub-agents have already been set"):
        rk.set_sub_agents(root, [ScriptedAgent("B")])
    assert [sub.name for sub in root.sub_agents] == ["A"]


def test_fa02_sub_agent_with_a_parent_cannot_be_added_again() -> None:
    """FA-02: adding a sub-agent that already has a parent fails (and changes nothing)."""
    a = rk.as_flow_agent(ScriptedAgent("A"))
    r1 = rk.set_sub_agents(ScriptedAgent("R1"), [a])
    r2 = rk.as_flow_agent(ScriptedAgent("R2"))
    with pytest.raises(
        ConfigurationError, match="agent 'A' has already been set as a sub-agent of 'R1'"
    ):
        rk.set_sub_agents(r2, [ScriptedAgent("B"), a])
    assert a.parent is r1
    assert r2.sub_agents == []


# -- FA-03 … FA-06: transfers ------------------------------------------------------------------
async def test_fa03_transfer_to_child_runs_it_on_root_input_plus_history() -> None:
    """FA-03: the last own action is a transfer to a child: the child runs next, on the root
    input plus the rewritten history."""
    r = ScriptedAgent("R", ["r1", transfer("A")])
    a = ScriptedAgent("A", ["a1"])
    runner = rk.Runner(rk.set_sub_agents(r, [a]), streaming=True)
    root_message = user("hi")
    events = await run_summary(runner, root_message)
    assert events == [
        ("R", ["R"], "r1", None),
        ("R", ["R"], None, "transfer:A"),
        ("A", ["R", "A"], "a1", None),
    ]
    assert len(a.inputs) == 1
    received = a.inputs[0]
    assert received.enable_streaming is True
    assert received.messages[0] == root_message
    assert [(m.role, m.content) for m in received.messages] == [
        ("user", "hi"),
        ("user", "For context: [R] said: r1."),
    ]
    assert r.input_texts == [["hi"]]


def _input_probe(probe: Any) -> Any:
    """A tree R → C where C records ``probe(ctx, input)`` for the input it receives.

    Regression guard: the history input used to be a private ``AgentInput`` subclass that was
    not equal to an AgentInput, broke ``dataclasses.replace`` and could not be checkpointed."""
    results: list[Any] = []

    class Probe(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
            results.append(probe(ctx, input))
            yield say("ok")

    return rk.set_sub_agents(ScriptedAgent("R", ["r1", transfer("C")]), [Probe("C")]), results


async def test_fa03_child_input_equals_an_agent_input() -> None:
    """FA-03: the child's input is an AgentInput equal to root input + rewritten history."""
    root, results = _input_probe(lambda ctx, inp: inp)
    await run_summary(rk.Runner(root), "hi")
    assert results[0] == rk.AgentInput([user("hi"), user("For context: [R] said: r1.")], False)


async def test_fa03_child_input_supports_dataclasses_replace() -> None:
    """FA-03: a custom agent can derive a new input from the one it received."""
    root, results = _input_probe(
        lambda ctx, inp: dataclasses.replace(inp, messages=[*inp.messages, user("extra")])
    )
    events = await run_summary(rk.Runner(root), "hi")
    assert events[-1] == ("C", ["R", "C"], "ok", None)
    assert [m.content for m in results[0].messages] == ["hi", "For context: [R] said: r1.", "extra"]


async def test_fa03_child_input_can_be_saved_as_interrupt_state() -> None:
    """FA-03 / RN-06: the input an agent received can be saved in a checkpoint."""
    store = rk.InMemoryCheckpointStore()

    class Saver(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
            yield rk.stateful_interrupt(ctx, "keep my input", input)

    tree = rk.set_sub_agents(ScriptedAgent("R", ["r1", transfer("S")]), [Saver("S")])
    events = await run_summary(rk.Runner(tree, checkpoint_store=store), "hi", checkpoint_id="c")
    assert [kind for *_, kind in events] == [None, "transfer:S", "interrupt"], events
    assert await store.get("c") is not None


async def test_fa04_transfer_to_parent_nests_the_run_path() -> None:
    """FA-04: a child can transfer back to its parent; the parent runs again at [R, A, R]
    and reads its own earlier message unchanged."""
    r = ScriptedAgent(
        "R",
        [
            lambda ctx: say("r1" if first_run(ctx) else "r-again"),
            lambda ctx: transfer("A") if first_run(ctx) else None,
        ],
    )
    a = ScriptedAgent("A", ["a1", transfer("R")])
    events = await run_summary(rk.Runner(rk.set_sub_agents(r, [a])), "hi")
    assert events == [
        ("R", ["R"], "r1", None),
        ("R", ["R"], None, "transfer:A"),
        ("A", ["R", "A"], "a1", None),
        ("A", ["R", "A"], None, "transfer:R"),
        ("R", ["R", "A", "R"], "r-again", None),
    ]
    second = r.inputs[1].messages
    assert [(m.role, m.content) for m in second] == [
        ("user", "hi"),
        ("assistant", "r1"),
        ("user", "For context: [A] said: a1."),
    ]


async def test_fa04_disallow_transfer_to_parent_hides_and_refuses_the_parent() -> None:
    """FA-04 / D4: with disallow_transfer_to_parent the parent is not offered as a target and
    a transfer to it is the FA-06 'not found' error."""
    r = ScriptedAgent("R", [lambda ctx: transfer("A") if first_run(ctx) else say("r-again")])
    a = rk.as_flow_agent(
        ScriptedAgent("A", ["a1", transfer("R")]), disallow_transfer_to_parent=True
    )
    b = ScriptedAgent("B")
    root = rk.set_sub_agents(r, [a, b])
    assert [t.name for t in a.transfer_targets()] == []
    assert [t.name for t in root.sub_agents[1].transfer_targets()] == ["R"]
    events = await run_summary(rk.Runner(root), "hi")
    assert events == [
        ("R", ["R"], None, "transfer:A"),
        ("A", ["R", "A"], "a1", None),
        ("A", ["R", "A"], None, "transfer:R"),
        ("A", ["R", "A"], not_found("R", "A"), "error"),
    ]
    assert len(r.inputs) == 1


async def test_fa05_siblings_and_grandchildren_cannot_be_found() -> None:
    """FA-05: only children and the parent can be found: a sibling or a grandchild is not."""
    a = ScriptedAgent("A", ["a1", transfer("B")])
    b = ScriptedAgent("B", ["b1"])
    events = await run_summary(
        rk.Runner(rk.set_sub_agents(ScriptedAgent("R", [transfer("A")]), [a, b])), "hi"
    )
    assert events[-1] == ("A", ["R", "A"], not_found("B", "A"), "error")
    assert b.started == 0

    g = ScriptedAgent("G", ["g1"])
    middle = rk.set_sub_agents(ScriptedAgent("M"), [g])
    root = rk.set_sub_agents(ScriptedAgent("R", [transfer("G")]), [middle])
    events = await run_summary(rk.Runner(root), "hi")
    assert events == [
        ("R", ["R"], None, "transfer:G"),
        ("R", ["R"], not_found("G", "R"), "error"),
    ]
    assert g.started == 0


async def test_fa06_missing_agent_yields_error_event_and_stops() -> None:
    """FA-06: a transfer to a missing agent yields the 'not found' error event and stops:
    later transfer targets do not run."""
    a = ScriptedAgent("A", ["a1"])
    root = rk.set_sub_agents(ScriptedAgent("R", ["r1", transfer("Nope"), transfer("A")]), [a])
    raw = await collect(rk.Runner(root).query("hi"))
    assert await summarize(raw) == [
        ("R", ["R"], "r1", None),
        ("R", ["R"], None, "transfer:Nope"),
        ("R", ["R"], not_found("Nope", "R"), "error"),
    ]
    assert isinstance(raw[-1].error, rk.errors.RelayKitError)
    assert a.started == 0


# -- FA-07 … FA-09: history --------------------------------------------------------------------
def test_fa07_transfer_messages_shape() -> None:
    """FA-07 / D2: transfer_messages gives an assistant call with JSON arguments and the
    matching tool message."""
    call, result = rk.transfer_messages("B")
    assert call.role == "assistant" and call.content == ""
    assert len(call.tool_calls) == 1
    tc = call.tool_calls[0]
    assert tc.name == "transfer_to_agent"
    assert json.loads(tc.arguments) == {"agent_name": "B"}
    assert tc.arguments == '{"agent_name": "B"}'
    assert result.role == "tool"
    assert result.content == "successfully transferred to agent [B]"
    assert result.tool_call_id == tc.id and tc.id
    assert result.tool_name == "transfer_to_agent"
    assert rk.transfer_messages("B")[0].tool_calls[0].id != tc.id


async def test_fa07_default_history_rewrite_texts() -> None:
    """FA-07: another agent's text, tool calls and tool results become user messages with the
    exact 'For context:' texts; the user input is unchanged."""
    call, result = rk.transfer_messages("B")
    blob = rk.Blob("image/png", b"\x89PNG", "pic.png")
    picture = rk.Message.assistant("see picture")
    picture.attachments.append(blob)
    a = ScriptedAgent(
        "A",
        [
            "hello",
            rk.Message.assistant("", [rk.ToolCall("t1", "search", '{"q": "x"}')]),
            rk.Message.tool("found", tool_call_id="t1", tool_name="search"),
            rk.Message.assistant("both", [rk.ToolCall("t2", "lookup", '{"id": 2}')]),
            rk.Message.tool("", tool_call_id="t2", tool_name="lookup"),
            rk.Message.user("echo"),
            picture,
            call,
            with_action(result, rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction("B"))),
        ],
    )
    b = ScriptedAgent("B", ["b1"])
    root = rk.set_sub_agents(ScriptedAgent("R", [transfer("A")]), [rk.set_sub_agents(a, [b])])
    await run_summary(rk.Runner(root), "hi")
    messages = b.inputs[0].messages
    assert all(m.role == "user" for m in messages)
    assert [m.content for m in messages] == [
        "hi",
        "For context: [A] said: hello.",
        'For context: [A] called tool: `search` with arguments: {"q": "x"}.',
        "For context: [A] `search` tool returned result: found.",
        'For context: [A] said: both. [A] called tool: `lookup` with arguments: {"id": 2}.',
        "For context:",
        "For context:",
        "For context: [A] said: see picture.",
        'For context: [A] called tool: `transfer_to_agent` with arguments: {"agent_name": "B"}.',
        "For context: [A] `transfer_to_agent` tool returned result: "
        "successfully transferred to agent [B].",
    ]
    assert messages[7].attachments == [blob]
    assert all(not m.tool_calls and m.tool_call_id is None for m in messages)


async def test_fa07_own_messages_are_not_rewritten() -> None:
    """FA-07: an agent's own earlier messages (assistant text, tool call, tool result) reach it
    unchanged when it runs again; other agents' messages are rewritten."""
    tool_call = rk.Message.assistant("", [rk.ToolCall("t1", "search", "{}")])
    tool_result = rk.Message.tool("found", tool_call_id="t1", tool_name="search")
    r = ScriptedAgent(
        "R",
        [
            lambda ctx: say("r1") if first_run(ctx) else None,
            lambda ctx: rk.AgentEvent.from_message(tool_call) if first_run(ctx) else None,
            lambda ctx: rk.AgentEvent.from_message(tool_result) if first_run(ctx) else None,
            lambda ctx: transfer("A") if first_run(ctx) else say("r-again"),
        ],
    )
    a = ScriptedAgent("A", ["a1", transfer("R")])
    await run_summary(rk.Runner(rk.set_sub_agents(r, [a])), "hi")
    assert r.inputs[1].messages == [
        user("hi"),
        rk.Message.assistant("r1"),
        tool_call,
        tool_result,
        user("For context: [A] said: a1."),
    ]
    assert [m.content for m in a.inputs[0].messages] == [
        "hi",
        "For context: [R] said: r1.",
        "For context: [R] called tool: `search` with arguments: {}.",
        "For context: [R] `search` tool returned result: found.",
    ]


async def test_fa08_custom_history_rewriter_receives_entries() -> None:
    """FA-08: a custom history rewriter replaces the default: it receives HistoryEntry items
    (user input first, raw messages with their agent names) and its result is the input."""
    seen: list[list[rk.HistoryEntry]] = []

    async def rewriter(ctx: rk.RunContext, entries: list[rk.HistoryEntry]) -> list[rk.Message]:
        assert isinstance(ctx, rk.RunContext)
        seen.append(list(entries))
        return [rk.Message.system("custom"), *(e.message for e in entries if e.is_user_input)]

    call, result = rk.transfer_messages("B")
    a = ScriptedAgent(
        "A",
        [
            "a1",
            call,
            with_action(result, rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction("B"))),
        ],
    )
    b = ScriptedAgent("B", ["b1"])
    b_flow = rk.as_flow_agent(b, history_rewriter=rewriter)
    root = rk.set_sub_agents(
        ScriptedAgent("R", ["r1", transfer("A")]), [rk.set_sub_agents(a, [b_flow])]
    )
    await run_summary(rk.Runner(root), "hi")
    assert [(m.role, m.content) for m in b.inputs[0].messages] == [
        ("system", "custom"),
        ("user", "hi"),
    ]
    assert len(seen) == 1
    assert seen[0] == [
        rk.HistoryEntry(True, "", user("hi")),
        rk.HistoryEntry(False, "R", rk.Message.assistant("r1")),
        rk.HistoryEntry(False, "A", rk.Message.assistant("a1")),
        rk.HistoryEntry(False, "A", call),
        rk.HistoryEntry(False, "A", result),
    ]
    # The default rewriter still applies to the agents without a custom one.
    assert a.input_texts == [["hi", "For context: [R] said: r1."]]


async def test_fa08_custom_rewriter_with_skip_and_failures() -> None:
    """FA-08 / D5 / D9: a custom rewriter also runs for the root and never receives skipped
    transfer messages; a rewriter that raises gives an error event of its agent, which does
    not run."""
    seen: list[list[tuple[bool, str, str]]] = []

    async def keep(ctx: rk.RunContext, entries: list[rk.HistoryEntry]) -> list[rk.Message]:
        seen.append([(e.is_user_input, e.agent_name, e.message.content) for e in entries])
        return [e.message for e in entries]

    call, result = rk.transfer_messages("B")
    a = rk.as_flow_agent(
        ScriptedAgent(
            "A",
            [
                "a1",
                call,
                with_action(
                    result, rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction("B"))
                ),
            ],
        ),
        history_rewriter=keep,
    )
    b = ScriptedAgent("B", ["b1"])
    await run_summary(
        rk.Runner(rk.set_sub_agents(a, [rk.as_flow_agent(b, history_rewriter=keep)])),
        "hi",
        skip_transfer_messages=True,
    )
    assert seen == [[(True, "", "hi")], [(True, "", "hi"), (False, "A", "a1")]]
    assert b.input_texts == [["hi", "a1"]]

    async def broken(ctx: rk.RunContext, entries: list[rk.HistoryEntry]) -> list[rk.Message]:
        raise RuntimeError("rewriter broke")

    c = ScriptedAgent("C", ["c1"])
    root = rk.set_sub_agents(
        ScriptedAgent("A", ["a1", transfer("C")]), [rk.as_flow_agent(c, history_rewriter=broken)]
    )
    events = await run_summary(rk.Runner(root), "hi")
    assert events[-1] == ("C", ["A", "C"], "rewriter broke", "error")
    assert c.started == 0


async def test_fa09_skip_transfer_messages_removes_exactly_the_pair() -> None:
    """FA-09 / D5: with skip_transfer_messages the transfer's tool message and its call never
    reach the next agent; the rest of the call message and everything else stays."""
    call, result = rk.transfer_messages("A")
    r = ScriptedAgent(
        "R",
        [
            "r1",
            call,
            with_action(result, rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction("A"))),
        ],
    )
    mixed = rk.Message.assistant(
        "ok",
        [
            rk.ToolCall("t1", "search", "{}"),
            rk.ToolCall("c2", "transfer_to_agent", '{"agent_name": "B"}'),
        ],
    )
    a = ScriptedAgent(
        "A",
        [
            mixed,
            rk.Message.tool("found", tool_call_id="t1", tool_name="search"),
            *llm_transfer("B", text="", call_id="c2")[1:],
        ],
    )
    b = ScriptedAgent("B", ["b1"])
    root = rk.set_sub_agents(r, [rk.set_sub_agents(a, [b])])

    await run_summary(rk.Runner(root), "hi", skip_transfer_messages=True)
    assert a.input_texts[0] == ["hi", "For context: [R] said: r1."]
    assert b.input_texts[0] == [
        "hi",
        "For context: [R] said: r1.",
        "For context: [A] said: ok. [A] called tool: `search` with arguments: {}.",
        "For context: [A] `search` tool returned result: found.",
    ]

    await run_summary(rk.Runner(root), "hi")
    assert len(b.input_texts[1]) == 7  # without the option every transfer message is there
    assert b.input_texts[1][4] == (
        "For context: [A] said: ok. [A] called tool: `search` with "
        "arguments: {}. [A] called tool: `transfer_to_agent` with "
        'arguments: {"agent_name": "B"}.'
    )


async def test_fa09_skip_never_removes_user_input_or_text() -> None:
    """FA-09 / D5: a transfer tool message without a preceding call removes nothing else (Eino
    would pop the user input); an LLM transfer call with text keeps the text."""
    orphan = with_action(
        rk.Message.tool(
            "successfully transferred to agent [A]",
            tool_call_id="orphan",
            tool_name="transfer_to_agent",
        ),
        rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction("A")),
    )
    a = ScriptedAgent("A", llm_transfer("B", text="I'll transfer", call_id="c1"))
    b = ScriptedAgent("B")
    root = rk.set_sub_agents(ScriptedAgent("R", [orphan]), [rk.set_sub_agents(a, [b])])
    await run_summary(rk.Runner(root), "hi", skip_transfer_messages=True)
    assert a.input_texts == [["hi"]]
    assert b.input_texts == [["hi", "For context: [A] said: I'll transfer."]]


# -- FA-10 … FA-13: run paths, recording, actions, errors --------------------------------------
async def test_fa10_run_paths_are_set_once() -> None:
    """FA-10: root events carry [root], child events [root, child]; an event that already has
    a run path keeps it (and its agent name); a yielded event object is never mutated (D6)."""
    foreign = rk.AgentEvent(
        "ext",
        (rk.RunStep("x"), rk.RunStep("ext")),
        rk.AgentOutput(rk.Message.assistant("from elsewhere")),
    )
    shared = say("twice")
    a = ScriptedAgent("A", [shared, foreign, shared])
    b = ScriptedAgent("B", ["b1"])
    root = rk.set_sub_agents(ScriptedAgent("R", ["r1", transfer("A")]), [rk.set_sub_agents(a, [b])])
    a.steps.append(transfer("B"))
    raw = await collect(rk.Runner(root).query("hi"))
    assert await summarize(raw) == [
        ("R", ["R"], "r1", None),
        ("R", ["R"], None, "transfer:A"),
        ("A", ["R", "A"], "twice", None),
        ("ext", ["x", "ext"], "from elsewhere", None),
        ("A", ["R", "A"], "twice", None),
        ("A", ["R", "A"], None, "transfer:B"),
        ("B", ["R", "A", "B"], "b1", None),
    ]
    assert raw[3] is foreign
    assert shared.agent_name == "" and shared.run_path == ()
    assert raw[2] is not shared and raw[4] is not shared
    assert a.run_paths == [["R", "A"]]
    # The foreign event is not A's own: it is not recorded (FA-11).
    assert b.input_texts == [
        [
            "hi",
            "For context: [R] said: r1.",
            "For context: [A] said: twice.",
            "For context: [A] said: twice.",
        ]
    ]


async def test_fa10_no_step_repeats_for_a_wrapped_flow_agent() -> None:
    """FA-10 / D6: a flow agent wrapped by a deterministic transfer under S carries [S, F]
    (not [S, F, F]); its child [S, F, G]; a transfer back to the parent nests [S, F, S]."""
    f = ScriptedAgent("F", ["f1", transfer("G")])
    g = ScriptedAgent("G", ["g1"])
    wrapped = rk.with_deterministic_transfer(rk.set_sub_agents(f, [g]), ["S"])
    s = ScriptedAgent("S", [lambda ctx: transfer("F") if first_run(ctx) else say("s-again")])
    events = await run_summary(rk.Runner(rk.set_sub_agents(s, [wrapped])), "hi")
    assert events == [
        ("S", ["S"], None, "transfer:F"),
        ("F", ["S", "F"], "f1", None),
        ("F", ["S", "F"], None, "transfer:G"),
        ("G", ["S", "F", "G"], "g1", None),
        ("F", ["S", "F"], "call:transfer_to_agent", None),
        ("F", ["S", "F"], "successfully transferred to agent [S]", "transfer:S"),
        ("S", ["S", "F", "S"], "s-again", None),
    ]
    assert f.run_paths == [["S", "F"]] and g.run_paths == [["S", "F", "G"]]


async def test_fa11_wrapped_flow_events_are_recorded_exactly_once() -> None:
    """FA-11: each event is recorded once: the wrapped flow agent's events reach the parent's
    history once (dual recording by the wrapper), the wrapper's transfer pair once."""
    f = ScriptedAgent("F", ["f1", transfer("G")])
    g = ScriptedAgent("G", ["g1"])
    wrapped = rk.with_deterministic_transfer(rk.set_sub_agents(f, [g]), ["S"])
    s = ScriptedAgent(
        "S",
        [
            lambda ctx: say("s1") if first_run(ctx) else None,
            lambda ctx: transfer("F") if first_run(ctx) else None,
        ],
    )
    await run_summary(rk.Runner(rk.set_sub_agents(s, [wrapped])), "hi")
    # G runs in F's isolated history: the root input and F's own events only.
    assert g.input_texts == [["hi", "For context: [F] said: f1."]]
    assert s.input_texts[1] == [
        "hi",
        "s1",
        "For context: [F] said: f1.",
        "For context: [G] said: g1.",
        'For context: [F] called tool: `transfer_to_agent` with arguments: {"agent_name": "S"}.',
        "For context: [F] `transfer_to_agent` tool returned result: "
        "successfully transferred to agent [S].",
    ]


async def test_fa11_interrupt_events_are_never_recorded() -> None:
    """FA-11: an interrupt event (even one carrying a message) is not recorded in the run
    history, so no later agent sees it."""

    def waiting(ctx: rk.RunContext) -> rk.AgentEvent:
        ev = rk.interrupt(ctx, "approve?")
        ev.output = rk.AgentOutput(rk.Message.assistant("waiting for approval"))
        return ev

    def build() -> tuple[ResumableScriptedAgent, ScriptedAgent, rk.FlowAgent]:
        a = ResumableScriptedAgent("A", ["a1", waiting], ["a2", transfer("B")])
        b = ScriptedAgent("B", ["b1"])
        return (
            a,
            b,
            rk.set_sub_agents(ScriptedAgent("R", [transfer("A")]), [rk.set_sub_agents(a, [b])]),
        )

    store = rk.InMemoryCheckpointStore()
    _, _, root = build()
    first = await run_summary(rk.Runner(root, checkpoint_store=store), "hi", checkpoint_id="c")
    assert first[-1] == ("A", ["R", "A"], "waiting for approval", "interrupt")
    _, b, root = build()
    resumed = await summarize(await collect(rk.Runner(root, checkpoint_store=store).resume("c")))
    assert resumed[-1] == ("B", ["R", "A", "B"], "b1", None)
    assert b.input_texts == [["hi", "For context: [A] said: a1.", "For context: [A] said: a2."]]


async def test_fa12_only_the_last_own_action_decides() -> None:
    """FA-12: a transfer followed by another own event is cancelled; a nested (foreign) event's
    transfer is ignored, and foreign events after an own transfer do not cancel it."""
    foreign_transfer = rk.AgentEvent(
        "X",
        (rk.RunStep("X"),),
        action=rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction("B")),
    )
    foreign_text = rk.AgentEvent("X", (rk.RunStep("X"),), rk.AgentOutput(rk.Message.assistant("x")))

    async def run_with(steps: list[Any]) -> tuple[list[Any], ScriptedAgent]:
        b = ScriptedAgent("B", ["b1"])
        root = rk.set_sub_agents(ScriptedAgent("A", steps), [b])
        return await run_summary(rk.Runner(root), "hi"), b

    events, b = await run_with([transfer("B"), "after"])
    assert events[-1] == ("A", ["A"], "after", None) and b.started == 0

    events, b = await run_with(["a1", foreign_transfer])
    assert events[-1] == ("X", ["X"], None, "transfer:B") and b.started == 0

    events, b = await run_with([transfer("B"), foreign_text])
    assert events == [
        ("A", ["A"], None, "transfer:B"),
        ("X", ["X"], "x", None),
        ("B", ["A", "B"], "b1", None),
    ]


async def test_fa12_exit_and_interrupt_stop() -> None:
    """FA-12: an exit or an interrupt as the last own event stops: no transfer runs, and an
    exit inside a transfer chain stops the rest of the chain (D3)."""

    async def run_with(steps: list[Any], a_steps: list[Any] = ()) -> tuple[list[Any], ...]:
        a = ScriptedAgent("A", list(a_steps))
        b = ScriptedAgent("B", ["b1"])
        root = rk.set_sub_agents(ScriptedAgent("R", steps), [a, b])
        return await run_summary(rk.Runner(root), "hi"), a, b

    events, a, b = await run_with([transfer("A"), rk.AgentEvent.exit()])
    assert events == [("R", ["R"], None, "transfer:A"), ("R", ["R"], None, "exit")]
    assert a.started == 0

    events, a, b = await run_with([transfer("A"), interrupt_step("stop")])
    assert [e[3] for e in events] == ["transfer:A", "interrupt"]
    assert a.started == 0

    events, a, b = await run_with([transfer("A"), transfer("B")], ["a1", rk.AgentEvent.exit()])
    assert events == [
        ("R", ["R"], None, "transfer:A"),
        ("A", ["R", "A"], "a1", None),
        ("A", ["R", "A"], None, "exit"),
    ]
    assert b.started == 0


async def test_fa13_exceptions_become_error_events() -> None:
    """FA-13: an exception raised inside an agent (in its generator or eagerly in run) becomes
    an error event of that agent; the stream ends cleanly and nothing runs after it."""
    boom = ValueError("boom")
    a = RaisingAgent("A", boom, before=["a1"])
    root = rk.set_sub_agents(ScriptedAgent("R", ["r1", transfer("A")]), [a])
    raw = await collect(rk.Runner(root).query("hi"))
    assert await summarize(raw) == [
        ("R", ["R"], "r1", None),
        ("R", ["R"], None, "transfer:A"),
        ("A", ["R", "A"], "a1", None),
        ("A", ["R", "A"], "boom", "error"),
    ]
    assert raw[-1].error is boom

    eager = EagerRaisingAgent("E", RuntimeError("eager"))
    root = rk.set_sub_agents(ScriptedAgent("R", [transfer("E")]), [eager])
    assert (await run_summary(rk.Runner(root), "hi"))[-1] == ("E", ["R", "E"], "eager", "error")

    events = await run_summary(rk.Runner(RaisingAgent("Solo", KeyError("k"))), "hi")
    assert events == [("Solo", ["Solo"], "'k'", "error")]


async def test_fa13_error_stops_a_transfer_chain() -> None:
    """FA-13: an error in a transfer target ends it: the rest of a chain does not run (D3)."""
    a = RaisingAgent("A", ValueError("bad"))
    b = ScriptedAgent("B", ["b1"])
    root = rk.set_sub_agents(ScriptedAgent("R", [transfer("A"), transfer("B")]), [a, b])
    events = await run_summary(rk.Runner(root), "hi")
    assert events == [("R", ["R"], None, "transfer:A"), ("A", ["R", "A"], "bad", "error")]
    assert b.started == 0


# -- FA-14: resume -----------------------------------------------------------------------------
def _three_levels(
    resumable: bool = True, with_leaf: bool = True
) -> tuple[ScriptedAgent, ScriptedAgent, Any, rk.FlowAgent]:
    r = ScriptedAgent("R", ["r1", transfer("M")])
    m = ScriptedAgent("M", ["m1", transfer("L")])
    steps: list[Any] = ["l1", interrupt_step("ask")]
    leaf: Any = (
        ResumableScriptedAgent("L", steps, ["l2"]) if resumable else ScriptedAgent("L", steps)
    )
    other = ScriptedAgent("Other")
    tree = rk.set_sub_agents(r, [rk.set_sub_agents(m, [leaf if with_leaf else other])])
    return r, m, leaf, tree


async def test_fa14_resume_is_passed_down_to_the_interrupted_agent() -> None:
    """FA-14: agents on the path pass the resume down; the interrupted agent resumes itself
    (path [R, M, L]); the agents above it do not run again."""
    store = rk.InMemoryCheckpointStore()
    _, _, _, tree = _three_levels()
    first = await run_summary(rk.Runner(tree, checkpoint_store=store), "hi", checkpoint_id="c")
    assert first[-1] == ("L", ["R", "M", "L"], None, "interrupt")
    r, m, leaf, tree = _three_levels()
    resumed = await summarize(await collect(rk.Runner(tree, checkpoint_store=store).resume("c")))
    assert resumed == [("L", ["R", "M", "L"], "l2", None)]
    assert r.started == 0 and m.started == 0
    assert leaf.run_paths == [["R", "M", "L"]]
    info = leaf.resume_infos[0]
    assert info.was_interrupted and info.is_resume_target
    assert info.interrupt_info is not None and info.interrupt_info.data == "ask"


async def test_fa14_non_resumable_interrupt_point_is_an_error() -> None:
    """FA-14: an interrupted agent that is not a ResumableAgent gives an error event."""
    store = rk.InMemoryCheckpointStore()
    _, _, _, tree = _three_levels(resumable=False)
    await run_summary(rk.Runner(tree, checkpoint_store=store), "hi", checkpoint_id="c")
    _, _, leaf, tree = _three_levels(resumable=False)
    resumed = await summarize(await collect(rk.Runner(tree, checkpoint_store=store).resume("c")))
    assert len(resumed) == 1
    agent, path, text, kind = resumed[0]
    assert (agent, path, kind) == ("L", ["R", "M", "L"], "error")
    assert text == (
        "failed to resume agent: agent 'L' is an interrupt point but is not a ResumableAgent"
    )
    assert leaf.started == 0


async def test_fa14_unknown_agent_on_the_path_is_an_error() -> None:
    """FA-14: an agent named on the interrupt path that the tree no longer has is an error."""
    store = rk.InMemoryCheckpointStore()
    _, _, _, tree = _three_levels()
    await run_summary(rk.Runner(tree, checkpoint_store=store), "hi", checkpoint_id="c")
    _, _, _, tree = _three_levels(with_leaf=False)
    resumed = await summarize(await collect(rk.Runner(tree, checkpoint_store=store).resume("c")))
    assert resumed == [
        ("M", ["R", "M"], "failed to resume agent: sub-agent 'L' not found in agent 'M'", "error")
    ]


async def test_fa14_exception_in_resume_is_an_error_event() -> None:
    """FA-14 / FA-13: an exception raised while resuming becomes an error event."""
    store = rk.InMemoryCheckpointStore()
    a = ResumableScriptedAgent("A", [interrupt_step("ask")], [ValueError("cannot resume")])
    await run_summary(rk.Runner(a, checkpoint_store=store), "hi", checkpoint_id="c")
    resumed = await summarize(await collect(rk.Runner(a, checkpoint_store=store).resume("c")))
    assert resumed == [("A", ["A"], "cannot resume", "error")]


# -- FA-15 … FA-17 -----------------------------------------------------------------------------
async def test_fa15_same_agents_in_two_trees_do_not_share_state() -> None:
    """FA-15: the same plain agent objects used in two trees get separate wrappers: parents,
    children and transfer lookups of one tree do not leak into the other."""
    a = ScriptedAgent("A", ["a1", transfer("B")])
    b = ScriptedAgent("B", ["b1"])
    c = ScriptedAgent("C", ["c1"])
    tree1 = rk.set_sub_agents(a, [b])
    tree2 = rk.set_sub_agents(a, [c])
    tree3 = rk.set_sub_agents(ScriptedAgent("X", ["x1", transfer("B")]), [b])
    assert tree1 is not tree2
    assert [s.name for s in tree1.sub_agents] == ["B"]
    assert [s.name for s in tree2.sub_agents] == ["C"]
    assert tree1.sub_agents[0] is not tree3.sub_agents[0]
    assert tree1.sub_agents[0].parent is tree1 and tree3.sub_agents[0].parent is tree3

    assert (await run_summary(rk.Runner(tree1), "hi"))[-1] == ("B", ["A", "B"], "b1", None)
    assert (await run_summary(rk.Runner(tree2), "hi"))[-1] == (
        "A",
        ["A"],
        not_found("B", "A"),
        "error",
    )
    assert (await run_summary(rk.Runner(tree3), "hi"))[-1] == ("B", ["X", "B"], "b1", None)
    assert b.input_texts == [
        ["hi", "For context: [A] said: a1."],
        ["hi", "For context: [X] said: x1."],
    ]


async def test_fa15_concurrent_runs_of_one_tree_do_not_share_history() -> None:
    """FA-15: two runs of the same tree at the same time each see only their own root input
    and history."""

    class Echo(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
            yield say("|".join(m.content for m in input.messages))

    class Chatty(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
            for i in range(3):
                await asyncio.sleep(0)
                yield say(f"{input.messages[0].content}-{i}")
            yield transfer("E")

    runner = rk.Runner(rk.set_sub_agents(Chatty("P"), [Echo("E")]))
    one, two = await asyncio.gather(run_summary(runner, "one"), run_summary(runner, "two"))
    for text, events in (("one", one), ("two", two)):
        assert events[-1] == (
            "E",
            ["P", "E"],
            "|".join([text, *(f"For context: [P] said: {text}-{i}." for i in range(3))]),
            None,
        )


@pytest.mark.parametrize("read_early", [True, False], ids=["caller-first", "history-first"])
async def test_fa16_streamed_message_is_recorded_and_delivered_in_full(read_early: bool) -> None:
    """FA-16: a streamed message reaches the caller chunk by chunk in full and the next agent's
    history complete, whichever reads it first."""
    a = ScriptedAgent(
        "A",
        [lambda ctx: rk.AgentEvent.from_message(stream_of("Hel", "lo ", "world")), transfer("B")],
    )
    b = ScriptedAgent("B", ["b1"])
    runner = rk.Runner(rk.set_sub_agents(a, [b]), streaming=True)
    events: list[rk.AgentEvent] = []
    chunks: list[str] = []
    async for ev in runner.query("hi"):
        events.append(ev)
        if read_early and ev.output is not None and ev.output.is_streaming:
            assert ev.output.stream is not None
            chunks = [c.content async for c in ev.output.stream]
    streamed = [ev for ev in events if ev.output is not None and ev.output.is_streaming]
    assert len(streamed) == 1
    assert streamed[0].agent_name == "A"
    if not read_early:
        assert streamed[0].output is not None and streamed[0].output.stream is not None
        chunks = [c.content async for c in streamed[0].output.stream]
    assert chunks == ["Hel", "lo ", "world"]
    assert b.inputs[0].enable_streaming is True
    assert b.input_texts == [["hi", "For context: [A] said: Hello world."]]
    assert (await summarize(events))[-1] == ("B", ["A", "B"], "b1", None)


@pytest.mark.parametrize("custom_rewriter", [False, True], ids=["default", "custom-rewriter"])
async def test_fa17_will_retry_stream_is_left_out_of_history(custom_rewriter: bool) -> None:
    """FA-17: a message whose stream ends with WillRetryError is left out of the next agent's
    history (default and custom rewriters); the caller still sees its chunks and the error."""
    entries: list[rk.HistoryEntry] = []

    async def rewriter(ctx: rk.RunContext, got: list[rk.HistoryEntry]) -> list[rk.Message]:
        entries.extend(got)
        return [e.message for e in got]

    a = ScriptedAgent(
        "A",
        [
            lambda ctx: rk.AgentEvent.from_message(
                stream_of("par", "tial", error=rk.errors.WillRetryError("retrying"))
            ),
            lambda ctx: rk.AgentEvent.from_message(stream_of("fi", "nal")),
            lambda ctx: rk.AgentEvent.from_message(
                stream_of("again", error=rk.errors.WillRetryError("retrying", 2))
            ),
            transfer("B"),
        ],
    )
    b = ScriptedAgent("B", ["b1"])
    b_agent = rk.as_flow_agent(b, history_rewriter=rewriter) if custom_rewriter else b
    events = await collect(rk.Runner(rk.set_sub_agents(a, [b_agent])).query("hi"))
    assert [names(ev.run_path) for ev in events] == [["A"], ["A"], ["A"], ["A"], ["A", "B"]]
    first = events[0].output
    assert first is not None and first.stream is not None
    got: list[str] = []
    with pytest.raises(rk.errors.WillRetryError, match="retrying"):
        async for chunk in first.stream:
            got.append(chunk.content)
    assert got == ["par", "tial"]
    assert all(ev.error is None for ev in events)
    if custom_rewriter:
        assert [(e.agent_name, e.message.content) for e in entries] == [("", "hi"), ("A", "final")]
        assert b.input_texts == [["hi", "final"]]
    else:
        assert b.input_texts == [["hi", "For context: [A] said: final."]]


async def test_fa17_will_retry_stream_stays_out_after_a_checkpoint() -> None:
    """FA-17 / D10: a stream that ended with WillRetryError is saved with its error and stays
    out of the history after a resume in a new Runner; the caller saw no error event."""

    def build() -> tuple[ScriptedAgent, rk.FlowAgent]:
        a = ScriptedAgent(
            "A",
            [
                lambda ctx: rk.AgentEvent.from_message(
                    stream_of("par", "tial", error=rk.errors.WillRetryError("retrying"))
                ),
                "final",
                transfer("B"),
            ],
        )
        b = ResumableScriptedAgent("B", ["b1", interrupt_step("ok?")], ["b2", transfer("C")])
        c = ScriptedAgent("C", ["c1"])
        return c, rk.set_sub_agents(a, [rk.set_sub_agents(b, [c])])

    store = rk.InMemoryCheckpointStore()
    _, tree = build()
    first = await run_summary(rk.Runner(tree, checkpoint_store=store), "hi", checkpoint_id="w")
    assert first == [
        ("A", ["A"], "partial !WillRetryError", None),
        ("A", ["A"], "final", None),
        ("A", ["A"], None, "transfer:B"),
        ("B", ["A", "B"], "b1", None),
        ("B", ["A", "B"], None, "interrupt"),
    ]
    c, tree = build()
    resumed = await summarize(await collect(rk.Runner(tree, checkpoint_store=store).resume("w")))
    assert resumed[-1] == ("C", ["A", "B", "C"], "c1", None)
    assert c.input_texts == [
        [
            "hi",
            "For context: [A] said: final.",
            "For context: [B] said: b1.",
            "For context: [B] said: b2.",
        ]
    ]
