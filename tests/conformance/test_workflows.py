"""Conformance: TR-04 (Supervisor) and TR-05 (sequential, parallel and loop workflows), with LLM
agents (seed 004; semantics D1, D7, D8, D11, D17; eino-reference §9, §10.1 and §11.5)."""

from __future__ import annotations

import asyncio
from typing import Any

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
    names,
    run,
    say,
    summarize,
    transfer_call,
    user_texts,
)


# -- helpers (shared ones in llm_helpers.py) ------------------------------------------------------
class Approvals(BaseApprovals[tuple[str, bool, Any]]):
    """The interrupting tool ``approve(item)``, recording ``(item, was interrupted, data)``."""

    def record(self, ctx: rk.ToolContext, item: str) -> tuple[str, bool, Any]:
        return (item, ctx.was_interrupted, ctx.resume_data)


class Probe(rk.BaseAgent):
    """A custom agent: optionally waits for ``gate``, records its input texts and run path, then
    says ``<name> ran``."""

    def __init__(self, name: str, gate: asyncio.Event | None = None) -> None:
        super().__init__(name, f"{name} desc")
        self.gate = gate
        self.inputs: list[list[str]] = []
        self.paths: list[list[str]] = []

    async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
        if self.gate is not None:
            await asyncio.wait_for(self.gate.wait(), timeout=5)
        self.inputs.append([m.content for m in input.messages])
        self.paths.append(names(ctx.run_path))
        yield rk.AgentEvent.from_message(say(f"{self.name} ran"))


# -- TR-04: Supervisor --------------------------------------------------------------------------
async def test_tr04_supervisor_workers_always_return_to_the_supervisor() -> None:
    """TR-04: sup transfers to w1; w1 answers; the wrapper transfers back; sup answers. Run paths
    [sup], [sup, w1], [sup, w1, sup]. Workers are not offered a transfer tool (they never learn
    their parent); sup lists both workers."""
    sup, sm = agent(
        "sup",
        [calls(transfer_call("w1", "s1")), say("final from sup")],
        instruction="You supervise.",
        description="the boss",
    )
    w1, w1m = agent(
        "w1", [say("w1 result")], instruction="You are worker one.", description="worker one"
    )
    w2, w2m = agent("w2", [], description="worker two")
    root = rk.Supervisor(sup, [w1, w2])
    assert isinstance(root, rk.ResumableAgent)
    events = await run(root, "task")

    assert await summarize(events) == [
        ("sup", ["sup"], "assistant", "call:transfer_to_agent", None),
        ("sup", ["sup"], "tool", "successfully transferred to agent [w1]", "transfer:w1"),
        ("w1", ["sup", "w1"], "assistant", "w1 result", None),
        ("w1", ["sup", "w1"], "assistant", "call:transfer_to_agent", None),
        ("w1", ["sup", "w1"], "tool", "successfully transferred to agent [sup]", "transfer:sup"),
        ("sup", ["sup", "w1", "sup"], "assistant", "final from sup", None),
    ]
    # The worker: no transfer tool, its own instruction only.
    [wreq] = w1m.requests
    assert wreq.tools == []
    assert wreq.messages[0] == rk.Message.system("You are worker one.")
    assert w2m.requests == []
    # The supervisor: both workers listed, twice called, the second time with w1's answer.
    assert len(sm.requests) == 2
    for req in sm.requests:
        assert [t.name for t in req.tools] == ["transfer_to_agent"]
        system = req.messages[0].content
        assert system.startswith(
            "You supervise.\n\nAvailable other agents: \n"
            "- Agent name: w1\n  Agent description: worker one\n"
            "- Agent name: w2\n  Agent description: worker two\n\n"
        )
    assert user_texts(sm.requests[1])[-3:] == [
        "For context: [w1] said: w1 result.",
        'For context: [w1] called tool: `transfer_to_agent` with arguments: {"agent_name": "sup"}.',
        "For context: [w1] `transfer_to_agent` tool returned result: "
        "successfully transferred to agent [sup].",
    ]


async def test_tr04_supervisor_delegates_twice() -> None:
    """Sup → w1 → sup → w2 → sup: each worker returns control."""
    sup, sm = agent(
        "sup", [calls(transfer_call("w1", "s1")), calls(transfer_call("w2", "s2")), say("all done")]
    )
    w1, _ = agent("w1", [say("one")])
    w2, w2m = agent("w2", [say("two")])
    events = await run(rk.Supervisor(sup, [w1, w2]), "task")
    paths = [
        (s[0], tuple(s[1]))
        for s in await summarize(events)
        if s[2] == "assistant" and s[3] is not None and not s[3].startswith("call:")
    ]
    assert paths == [
        ("w1", ("sup", "w1")),
        ("w2", ("sup", "w1", "sup", "w2")),
        ("sup", ("sup", "w1", "sup", "w2", "sup")),
    ]
    # w2 sees what w1 said (shared history).
    assert "For context: [w1] said: one." in user_texts(w2m.requests[0])
    assert len(sm.requests) == 3


async def test_tr04_interrupt_inside_a_worker_resumes_and_returns_to_the_supervisor() -> None:
    """TR-04: a worker's tool interrupts; a resume in a new Runner finishes the worker, then the
    wrapper transfers back and the supervisor answers."""
    store = rk.InMemoryCheckpointStore()

    def build(
        sup_script: list[Any], w_script: list[Any], approvals: Approvals
    ) -> tuple[rk.Agent, rk.ScriptedModel, rk.ScriptedModel]:
        sup, sm = agent("sup", sup_script)
        w1, wm = agent("w1", w_script, tools=[approvals.tool])
        w2, _ = agent("w2", [])
        return rk.Supervisor(sup, [w1, w2]), sm, wm

    approvals = Approvals()
    root, sm, wm = build(
        [calls(transfer_call("w1"))], [calls(call("approve", {"item": "x"}, "w1c"))], approvals
    )
    first = await collect(rk.Runner(root, checkpoint_store=store).query("task", checkpoint_id="cp"))
    [ctx] = interrupt_of(first).contexts
    assert (len(sm.requests), len(wm.requests)) == (1, 1)
    assert ctx.address[-1] == rk.AddressSegment("tool", "approve", "w1c")
    assert rk.AddressSegment("agent", "w1") in ctx.address
    assert [s[2:] for s in await summarize(first)][-2:] == [
        ("assistant", "call:approve", None),
        (None, None, "interrupt"),
    ]

    approvals2 = Approvals()
    root2, sm2, wm2 = build([say("sup wraps up")], [say("w1 finished")], approvals2)
    second = await collect(
        rk.Runner(root2, checkpoint_store=store).resume("cp", targets={ctx.id: "approved"})
    )
    assert await summarize(second) == [
        ("w1", ["sup", "w1"], "tool", "x: approved", None),
        ("w1", ["sup", "w1"], "assistant", "w1 finished", None),
        ("w1", ["sup", "w1"], "assistant", "call:transfer_to_agent", None),
        ("w1", ["sup", "w1"], "tool", "successfully transferred to agent [sup]", "transfer:sup"),
        ("sup", ["sup", "w1", "sup"], "assistant", "sup wraps up", None),
    ]
    assert approvals2.calls == [("x", True, "approved")]
    assert (len(sm2.requests), len(wm2.requests)) == (1, 1)
    assert wm2.requests[0].tools == [approvals2.tool.spec]


async def test_tr04_worker_error_does_not_return_to_the_supervisor() -> None:
    """D1: after a worker's error no transfer back is appended; the error surfaces."""
    sup, sm = agent("sup", [calls(transfer_call("w1"))])
    w1, _ = agent("w1", [RuntimeError("worker crashed")])
    events = await run(rk.Supervisor(sup, [w1]), "task")
    summary = await summarize(events)
    assert summary[-1] == ("w1", ["sup", "w1"], "error", "RuntimeError: worker crashed", None)
    assert not any(s[4] == "transfer:sup" for s in summary)
    assert len(sm.requests) == 1


async def test_tr04_worker_exit_does_not_return_to_the_supervisor() -> None:
    sup, sm = agent("sup", [calls(transfer_call("w1"))])
    w1, _ = agent("w1", [calls(call("exit", {"final_result": "done for good"}))], exit_tool=True)
    events = await run(rk.Supervisor(sup, [w1]), "task")
    summary = await summarize(events)
    assert summary[-1] == ("w1", ["sup", "w1"], "tool", "done for good", "exit")
    assert len(sm.requests) == 1


# -- TR-05: sequential --------------------------------------------------------------------------
async def test_tr05_sequential_runs_in_order_with_d7_run_paths() -> None:
    """TR-05 / D7: A's events carry [S, A], B's [S, B]; B's input contains A's answer as
    context; sub-agents do not offer the workflow as a transfer target."""
    a, am = agent("A", [say("a says")])
    b, bm = agent("B", [say("b says")])
    seq = rk.SequentialAgent("S", [a, b], description="a pipeline")
    assert seq.name == "S" and seq.description == "a pipeline"
    events = await run(seq, "hi")
    assert await summarize(events) == [
        ("A", ["S", "A"], "assistant", "a says", None),
        ("B", ["S", "B"], "assistant", "b says", None),
    ]
    assert contents(bm.requests[0]) == [
        ("system", "You are B."),
        ("user", "hi"),
        ("user", "For context: [A] said: a says."),
    ]
    assert am.requests[0].tools == [] and bm.requests[0].tools == []


async def test_tr05_sequential_error_stops_the_sequence() -> None:
    """D17: an error event from a sub-agent stops the workflow after it is delivered; events
    already delivered stay delivered."""
    a, _ = agent("A", [calls(call("nope", None, "n1"), text="trying"), RuntimeError("A broke")])
    b, bm = agent("B", [say("never")])
    events = await run(rk.SequentialAgent("S", [a, b]), "hi")
    assert await summarize(events) == [
        ("A", ["S", "A"], "assistant", "trying call:nope", None),
        ("A", ["S", "A"], "tool", "error: unknown tool 'nope'; available tools: none", None),
        ("A", ["S", "A"], "error", "RuntimeError: A broke", None),
    ]
    assert bm.requests == []


async def test_tr05_sequential_interrupt_in_a_child_resumes_at_its_index() -> None:
    """TR-05: S[A, B, C] with B interrupting: resume (new Runner, new objects) resumes B — A is
    not run again — then C runs and sees everything."""
    store = rk.InMemoryCheckpointStore()

    def build(
        a_script: list[Any], b_script: list[Any], c_script: list[Any]
    ) -> tuple[rk.Agent, list[rk.ScriptedModel], Approvals]:
        approvals = Approvals()
        a, am = agent("A", a_script)
        b, bm = agent("B", b_script, tools=[approvals.tool])
        c, cm = agent("C", c_script)
        return rk.SequentialAgent("S", [a, b, c]), [am, bm, cm], approvals

    seq, models, _ = build([say("a says")], [calls(call("approve", {"item": "b"}, "bc"))], [])
    first = await collect(rk.Runner(seq, checkpoint_store=store).query("hi", checkpoint_id="cp"))
    assert [s[3] for s in await summarize(first)] == ["a says", "call:approve", None]
    [ctx] = interrupt_of(first).contexts
    assert chain(ctx) == [
        ("agent:S", "agent:B", "tool:approve:bc"),
        ("agent:S", "agent:B"),
        ("agent:S",),
    ]
    assert [len(m.requests) for m in models] == [1, 1, 0]

    seq2, models2, approvals2 = build([], [say("b done")], [say("c says")])
    second = await collect(
        rk.Runner(seq2, checkpoint_store=store).resume("cp", targets={ctx.id: "ok"})
    )
    assert await summarize(second) == [
        ("B", ["S", "B"], "tool", "b: ok", None),
        ("B", ["S", "B"], "assistant", "b done", None),
        ("C", ["S", "C"], "assistant", "c says", None),
    ]
    assert [len(m.requests) for m in models2] == [0, 1, 1]
    assert approvals2.calls == [("b", True, "ok")]
    assert user_texts(models2[2].requests[0]) == [
        "hi",
        "For context: [A] said: a says.",
        'For context: [B] called tool: `approve` with arguments: {"item": "b"}.',
        "For context: [B] `approve` tool returned result: b: ok.",
        "For context: [B] said: b done.",
    ]


async def test_tr05_sequential_interrupt_event_names_the_interrupted_child() -> None:
    """§9.2 step 4: the sequential workflow's composite interrupt event carries the AgentName
    and RunPath of the child's interrupt event (run path per D7)."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    a, _ = agent("A", [say("a says")])
    b, _ = agent("B", [calls(call("approve", {"item": "b"}, "bc"))], tools=[approvals.tool])
    first = await collect(
        rk.Runner(rk.SequentialAgent("S", [a, b]), checkpoint_store=store).query(
            "hi", checkpoint_id="cp"
        )
    )
    interrupt_of(first)
    assert (first[-1].agent_name, names(first[-1].run_path)) == ("B", ["S", "B"])


# -- TR-05: parallel ----------------------------------------------------------------------------
async def test_tr05_parallel_runs_every_branch() -> None:
    """TR-05 / §11.5 TestParallelAgent: one event per branch, correct names and run paths."""
    p1, p1m = agent("P1", [say("p1 says")])
    p2, p2m = agent("P2", [say("p2 says")])
    events = await run(rk.ParallelAgent("P", [p1, p2]), "hi")
    assert sorted(await summarize(events)) == [
        ("P1", ["P", "P1"], "assistant", "p1 says", None),
        ("P2", ["P", "P2"], "assistant", "p2 says", None),
    ]
    assert contents(p1m.requests[0]) == [("system", "You are P1."), ("user", "hi")]
    assert contents(p2m.requests[0]) == [("system", "You are P2."), ("user", "hi")]


async def test_tr05_parallel_branches_see_only_their_own_lane_successor_sees_all() -> None:
    """TR-05: a branch does not see the other branch's events even when they were recorded before
    it started; inside a sequence, the agent after the ParallelAgent sees both branches (and
    the predecessor)."""
    gate = asyncio.Event()

    @rk.tool
    def open_gate() -> str:
        gate.set()  # P1's call message is already recorded in its lane
        return "gate open"

    pre, _ = agent("Pre", [say("pre says")])
    p1, _ = agent("P1", [calls(call("open_gate")), say("p1 final")], tools=[open_gate])
    late = Probe("Late", gate)
    p2, p2m = agent("P2", [say("p2 says")])
    branch2 = rk.SequentialAgent("B2", [late, p2])
    after, am = agent("After", [say("after says")])
    root = rk.SequentialAgent("S", [pre, rk.ParallelAgent("P", [p1, branch2]), after])
    events = await run(root, "hi")
    assert errors(events) == []

    assert late.inputs == [["hi", "For context: [Pre] said: pre says."]]
    assert late.paths == [["S", "P", "B2", "Late"]]
    assert user_texts(p2m.requests[0]) == [
        "hi",
        "For context: [Pre] said: pre says.",
        "For context: [Late] said: Late ran.",
    ]
    seen = user_texts(am.requests[0])
    assert seen[:2] == ["hi", "For context: [Pre] said: pre says."]
    for line in [
        "For context: [P1] called tool: `open_gate` with arguments: {}.",
        "For context: [P1] `open_gate` tool returned result: gate open.",
        "For context: [P1] said: p1 final.",
        "For context: [Late] said: Late ran.",
        "For context: [P2] said: p2 says.",
    ]:
        assert line in seen
    assert len(seen) == 7
    assert (await summarize(events))[-1] == (
        "After",
        ["S", "After"],
        "assistant",
        "after says",
        None,
    )


async def test_tr05_parallel_interrupt_resumes_only_the_interrupted_branch() -> None:
    """TR-05: one branch interrupts → one composite interrupt after the other branches finished;
    resume runs only the interrupted branch; the successor then sees every branch."""
    store = rk.InMemoryCheckpointStore()

    def build(
        p1_script: list[Any], p2_script: list[Any], c_script: list[Any]
    ) -> tuple[rk.Agent, list[rk.ScriptedModel], Approvals]:
        approvals = Approvals()
        p1, p1m = agent("P1", p1_script)
        p2, p2m = agent("P2", p2_script, tools=[approvals.tool])
        c, cm = agent("C", c_script)
        root = rk.SequentialAgent("S", [rk.ParallelAgent("P", [p1, p2]), c])
        return root, [p1m, p2m, cm], approvals

    root, models, _ = build(
        [say("p1 says")], [calls(call("approve", {"item": "z"}, "pc"), text="p2 asks")], []
    )
    first = await collect(rk.Runner(root, checkpoint_store=store).query("hi", checkpoint_id="cp"))
    summary = await summarize(first)
    assert sorted(s[3] for s in summary[:2]) == ["p1 says", "p2 asks call:approve"]
    assert summary[-1][4] == "interrupt"
    [ctx] = interrupt_of(first).contexts
    assert chain(ctx) == [
        ("agent:S", "agent:P", "agent:P2", "tool:approve:pc"),
        ("agent:S", "agent:P", "agent:P2"),
        ("agent:S", "agent:P"),
        ("agent:S",),
    ]
    assert [len(m.requests) for m in models] == [1, 1, 0]

    root2, models2, approvals2 = build([], [say("p2 done")], [say("c says")])
    second = await collect(
        rk.Runner(root2, checkpoint_store=store).resume("cp", targets={ctx.id: "ok"})
    )
    assert await summarize(second) == [
        ("P2", ["S", "P", "P2"], "tool", "z: ok", None),
        ("P2", ["S", "P", "P2"], "assistant", "p2 done", None),
        ("C", ["S", "C"], "assistant", "c says", None),
    ]
    assert [len(m.requests) for m in models2] == [0, 1, 1]  # P1 did not run again
    assert approvals2.calls == [("z", True, "ok")]
    seen = user_texts(models2[2].requests[0])
    assert "For context: [P1] said: p1 says." in seen
    assert "For context: [P2] said: p2 done." in seen
    # The resumed branch saw only its own lane (not P1).
    assert not any("[P1]" in t for t in user_texts(models2[1].requests[0]))


async def test_tr05_parallel_two_interrupts_are_one_composite() -> None:
    """§11.5: two interrupting branches give one interrupt with two root causes; resuming both
    (resume all) finishes both branches."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    p1, p1m = agent(
        "P1", [calls(call("approve", {"item": "one"}, "a")), say("p1 done")], tools=[approvals.tool]
    )
    p2, p2m = agent(
        "P2", [calls(call("approve", {"item": "two"}, "b")), say("p2 done")], tools=[approvals.tool]
    )
    root = rk.ParallelAgent("P", [p1, p2])
    first = await collect(rk.Runner(root, checkpoint_store=store).query("hi", checkpoint_id="cp"))
    contexts = interrupt_of(first).contexts
    assert sorted(c.info["approve"] for c in contexts) == ["one", "two"]
    assert {
        c.parent.parent.address
        for c in contexts  # type: ignore[union-attr]
    } == {(rk.AddressSegment("agent", "P"),)}
    assert first[-1].run_path == (rk.RunStep("P"),)
    second = await collect(rk.Runner(root, checkpoint_store=store).resume("cp"))
    assert sorted(s[3] for s in await summarize(second) if s[2] == "assistant") == [
        "p1 done",
        "p2 done",
    ]
    assert (len(p1m.requests), len(p2m.requests)) == (2, 2)


# -- TR-05: loop --------------------------------------------------------------------------------
async def test_tr05_loop_runs_max_iterations_times() -> None:
    """TR-05 / §11.5 TestLoopAgent: max_iterations=3 → 3 runs, run paths [L, A] each time (D7);
    each iteration sees the earlier ones."""
    a, am = agent("A", [say("1"), say("2"), say("3"), say("never")])
    events = await run(rk.LoopAgent("L", [a], max_iterations=3), "go")
    assert await summarize(events) == [
        ("A", ["L", "A"], "assistant", t, None) for t in ["1", "2", "3"]
    ]
    assert len(am.requests) == 3
    assert contents(am.requests[2]) == [
        ("system", "You are A."),
        ("user", "go"),
        ("assistant", "1"),
        ("assistant", "2"),
    ]


async def test_tr05_loop_runs_sub_agents_in_order_each_iteration() -> None:
    a, _ = agent("A", [say("a1"), say("a2")])
    b, _ = agent("B", [say("b1"), say("b2")])
    events = await run(rk.LoopAgent("L", [a, b], max_iterations=2), "go")
    assert [(s[0], tuple(s[1]), s[3]) for s in await summarize(events)] == [
        ("A", ("L", "A"), "a1"),
        ("B", ("L", "B"), "b1"),
        ("A", ("L", "A"), "a2"),
        ("B", ("L", "B"), "b2"),
    ]


def stop_tool() -> rk.Tool:
    @rk.tool
    def stop(ctx: rk.ToolContext) -> str:
        """End the loop."""
        ctx.set_action(rk.AgentAction(break_loop=rk.BreakLoopAction()))
        return "stopping"

    return stop


async def test_tr05_break_loop_stops_after_the_current_sub_agent() -> None:
    """TR-05 / §9.3: a BreakLoopAction ends the loop after the sub-agent that sent it finished
    (its later events are still delivered); the remaining sub-agents do not run."""
    a, am = agent("A", [calls(call("stop")), say("after stop")], tools=[stop_tool()])
    b, bm = agent("B", [say("never")])
    events = await run(rk.LoopAgent("L", [a, b], max_iterations=3), "go")
    assert await summarize(events) == [
        ("A", ["L", "A"], "assistant", "call:stop", None),
        ("A", ["L", "A"], "tool", "stopping", "break_loop"),
        ("A", ["L", "A"], "assistant", "after stop", None),
    ]
    brk = events[1].action.break_loop  # type: ignore[union-attr]
    assert brk is not None and brk.done and brk.current_iterations == 0
    assert len(am.requests) == 2 and bm.requests == []


async def test_tr05_break_loop_in_a_later_iteration_unbounded_loop() -> None:
    """max_iterations=0 is unbounded; the break ends it (iteration index recorded)."""
    a, am = agent("A", [say("1"), say("2"), calls(call("stop")), say("3")], tools=[stop_tool()])
    events = await run(rk.LoopAgent("L", [a]), "go")
    summary = await summarize(events)
    assert [s[3] for s in summary] == ["1", "2", "call:stop", "stopping", "3"]
    brk = events[3].action.break_loop  # type: ignore[union-attr]
    assert brk is not None and brk.done and brk.current_iterations == 2
    assert len(am.requests) == 4


async def test_tr05_loop_error_stops_the_loop() -> None:
    """D17 / §11.5 TestLoopAgentWithError: two good iterations, then the error; 3 calls."""
    a, am = agent("A", [say("1"), say("2"), RuntimeError("error on iteration 3"), say("x")])
    events = await run(rk.LoopAgent("L", [a], max_iterations=10), "go")
    assert [s[3] for s in await summarize(events)] == [
        "1",
        "2",
        "RuntimeError: error on iteration 3",
    ]
    assert len(am.requests) == 3


async def test_tr05_loop_interrupt_resumes_at_the_right_iteration_and_index() -> None:
    """TR-05: L[A, B] (3 iterations); B interrupts in iteration 2: resume (new objects) finishes
    B of iteration 2 without re-running A, then runs iteration 3. Addresses follow D7."""
    store = rk.InMemoryCheckpointStore()

    def build(
        a_script: list[Any], b_script: list[Any]
    ) -> tuple[rk.Agent, rk.ScriptedModel, rk.ScriptedModel, Approvals]:
        approvals = Approvals()
        a, am = agent("A", a_script)
        b, bm = agent("B", b_script, tools=[approvals.tool])
        return rk.LoopAgent("L", [a, b], max_iterations=3), am, bm, approvals

    loop, am, bm, _ = build(
        [say("a1"), say("a2")], [say("b1"), calls(call("approve", {"item": "it2"}, "bc"))]
    )
    first = await collect(rk.Runner(loop, checkpoint_store=store).query("go", checkpoint_id="cp"))
    assert [s[3] for s in await summarize(first)] == ["a1", "b1", "a2", "call:approve", None]
    [ctx] = interrupt_of(first).contexts
    assert chain(ctx) == [
        ("agent:L", "agent:B", "tool:approve:bc"),
        ("agent:L", "agent:B"),
        ("agent:L",),
    ]
    assert (len(am.requests), len(bm.requests)) == (2, 2)

    loop2, am2, bm2, approvals2 = build([say("a3")], [say("b2"), say("b3")])
    second = await collect(
        rk.Runner(loop2, checkpoint_store=store).resume("cp", targets={ctx.id: "yes"})
    )
    assert [(s[0], tuple(s[1]), s[3]) for s in await summarize(second)] == [
        ("B", ("L", "B"), "it2: yes"),
        ("B", ("L", "B"), "b2"),
        ("A", ("L", "A"), "a3"),
        ("B", ("L", "B"), "b3"),
    ]
    assert (len(am2.requests), len(bm2.requests)) == (1, 2)
    assert approvals2.calls == [("it2", True, "yes")]


async def test_tr05_loop_agent_interrupting_every_iteration_keeps_its_id() -> None:
    """D11: the next loop iteration of the same agent interrupting at the same address keeps
    the interrupt id."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    a, am = agent(
        "A",
        [
            calls(call("approve", {"item": "i1"}, "c")),
            say("one"),
            calls(call("approve", {"item": "i2"}, "c")),
            say("two"),
        ],
        tools=[approvals.tool],
    )
    loop = rk.LoopAgent("L", [a], max_iterations=2)
    first = await collect(rk.Runner(loop, checkpoint_store=store).query("go", checkpoint_id="cp"))
    [ctx1] = interrupt_of(first).contexts
    second = await collect(
        rk.Runner(loop, checkpoint_store=store).resume("cp", targets={ctx1.id: "y1"})
    )
    assert [s[3] for s in await summarize(second)][:3] == ["i1: y1", "one", "call:approve"]
    [ctx2] = interrupt_of(second).contexts
    assert ctx2.info == {"approve": "i2"}
    assert ctx2.id == ctx1.id
    third = await collect(
        rk.Runner(loop, checkpoint_store=store).resume("cp", targets={ctx2.id: "y2"})
    )
    assert [s[3] for s in await summarize(third)] == ["i2: y2", "two"]
    assert len(am.requests) == 4
