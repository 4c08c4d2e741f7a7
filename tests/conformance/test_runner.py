"""Conformance: the Runner, interrupt and resume (RN-01 … RN-07), AR-01 and AR-10.

Semantics applied: D8 (resume all / targeted), D10 (JSON + registered types), D11 (stable
interrupt ids), D13 (tree validation).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

import relaykit as rk

try:  # the tests directory may be a package
    from . import helpers as h
except ImportError:  # pragma: no cover - rootdir-style import (no __init__.py)
    import helpers as h  # type: ignore[no-redef]

FanoutAgent = h.FanoutAgent
ResumableScriptedAgent = h.ResumableScriptedAgent
ScriptedAgent = h.ScriptedAgent
collect = h.collect
interrupt_contexts = h.interrupt_contexts
interrupt_step = h.interrupt_step
leaf = h.leaf
run_summary = h.run_summary
summarize = h.summarize
transfer = h.transfer
user = h.user

errors = rk.errors


@rk.register_type("tests.Inner")
@dataclass
class Inner:
    tags: list[str] = field(default_factory=list)
    blob: bytes = b""


@rk.register_type("tests.State")
@dataclass
class State:
    step: int
    note: str = ""
    pair: tuple[str, int] = ("", 0)
    inner: Inner | None = None


@dataclass
class Unregistered:
    value: int


def agent_seg(name: str) -> rk.AddressSegment:
    return rk.AddressSegment("agent", name)


# -- RN-01 -------------------------------------------------------------------------------------
def _approval_tree(
    state: Any = None,
) -> tuple[ScriptedAgent, ResumableScriptedAgent, ScriptedAgent, rk.FlowAgent]:
    r = ScriptedAgent("R", ["r1", transfer("A")])
    a = ResumableScriptedAgent(
        "A", ["a1", interrupt_step("approve?", state)], ["a2", transfer("B")]
    )
    b = ScriptedAgent("B", ["b1"])
    return r, a, b, rk.set_sub_agents(r, [rk.set_sub_agents(a, [b])])


async def test_rn01_interrupt_saves_checkpoint_and_new_runner_resumes() -> None:
    """RN-01: a run with a checkpoint id that ends in an interrupt saves a checkpoint (before the
    caller gets the interrupt event); resume(id) on a NEW Runner with fresh agent objects over
    the same store continues from it, with the history of the first run."""
    store = rk.InMemoryCheckpointStore()
    *_, tree = _approval_tree(State(1, "x"))
    seen_saved: list[bool] = []
    events: list[rk.AgentEvent] = []
    async for ev in rk.Runner(tree, checkpoint_store=store).query("hi", checkpoint_id="cp1"):
        if ev.action is not None and ev.action.interrupted is not None:
            seen_saved.append(await store.get("cp1") is not None)
        events.append(ev)
    assert await summarize(events) == [
        ("R", ["R"], "r1", None),
        ("R", ["R"], None, "transfer:A"),
        ("A", ["R", "A"], "a1", None),
        ("A", ["R", "A"], None, "interrupt"),
    ]
    assert seen_saved == [True]
    (ctx,) = interrupt_contexts(events)
    assert ctx.address == (agent_seg("R"), agent_seg("A"))

    r, a, b, tree = _approval_tree()
    runner = rk.Runner(tree, checkpoint_store=store)
    resumed = await summarize(await collect(runner.resume("cp1")))
    assert resumed == [
        ("A", ["R", "A"], "a2", None),
        ("A", ["R", "A"], None, "transfer:B"),
        ("B", ["R", "A", "B"], "b1", None),
    ]
    assert r.started == 0 and a.started == 1 and not a.inputs
    info = a.resume_infos[0]
    assert info.was_interrupted and info.is_resume_target and info.resume_data is None
    assert info.interrupt_state == State(1, "x")
    assert info.interrupt_info is not None and info.interrupt_info.data == "approve?"
    assert [c.id for c in info.interrupt_info.contexts] == [ctx.id]
    assert b.input_texts == [
        [
            "hi",
            "For context: [R] said: r1.",
            "For context: [A] said: a1.",
            "For context: [A] said: a2.",
        ]
    ]


async def test_rn01_checkpoints_only_with_a_store_and_an_interrupt() -> None:
    """RN-01 / D12 / D21: an interrupted run without checkpoint_id is saved under a generated
    id named on the interrupt event; no checkpoint for a run that does not interrupt;
    a checkpoint_id without a store is a ConfigurationError raised by run() itself."""
    store = rk.InMemoryCheckpointStore()
    *_, tree = _approval_tree()
    events = [ev async for ev in rk.Runner(tree, checkpoint_store=store).query("hi")]
    assert len(store) == 1
    interrupted = events[-1].action.interrupted
    assert interrupted is not None and interrupted.checkpoint_id is not None
    assert await store.get(interrupted.checkpoint_id) is not None
    await run_summary(
        rk.Runner(ScriptedAgent("A", ["done"]), checkpoint_store=store), "hi", checkpoint_id="cp"
    )
    assert await store.get("cp") is None
    runner = rk.Runner(ScriptedAgent("A", ["done"]))
    with pytest.raises(errors.ConfigurationError, match="checkpoint store"):
        runner.run([user("hi")], checkpoint_id="cp")
    with pytest.raises(errors.ConfigurationError, match="checkpoint store"):
        runner.resume("cp")


# -- RN-02, RN-04, RN-07: two interrupt points -------------------------------------------------
def _fanout() -> tuple[FanoutAgent, ResumableScriptedAgent, ResumableScriptedAgent, ScriptedAgent]:
    l1 = leaf("L1", "need L1", State(1))
    l2 = leaf("L2", "need L2", State(2))
    ok = ScriptedAgent("OK", ["ok1"])
    return FanoutAgent("F", [l1, ok, l2]), l1, l2, ok


async def _interrupted_fanout(
    store: rk.InMemoryCheckpointStore, cp: str = "cp"
) -> list[rk.AgentEvent]:
    fan, *_ = _fanout()
    return await collect(rk.Runner(fan, checkpoint_store=store).query("hi", checkpoint_id=cp))


async def test_rn02_targeted_resume_marks_only_targets() -> None:
    """RN-02: resume(id, targets={interrupt_id: data}): only the targeted point gets
    is_resume_target and its data; the other keeps its state, is not a target; the composite
    above them is a target."""
    store = rk.InMemoryCheckpointStore()
    contexts = interrupt_contexts(await _interrupted_fanout(store))
    ids = {c.info: c.id for c in contexts}
    fan, l1, l2, ok = _fanout()
    await collect(
        rk.Runner(fan, checkpoint_store=store).resume(
            "cp", targets={ids["need L1"]: {"approved": True}}
        )
    )
    (i1,), (i2,) = l1.resume_infos, l2.resume_infos
    assert (i1.was_interrupted, i1.is_resume_target, i1.resume_data, i1.interrupt_state) == (
        True,
        True,
        {"approved": True},
        State(1),
    )
    assert (i2.was_interrupted, i2.is_resume_target, i2.resume_data, i2.interrupt_state) == (
        True,
        False,
        None,
        State(2),
    )
    (fi,) = fan.resume_infos
    assert fi.was_interrupted and fi.is_resume_target and fi.resume_data is None
    assert fi.interrupt_state == ["L1", "L2"]
    assert ok.started == 0


async def test_rn02_target_with_none_data_is_still_a_target() -> None:
    """RN-02 / D8: a target whose data is None still counts as a target."""
    store = rk.InMemoryCheckpointStore()
    ids = {c.info: c.id for c in interrupt_contexts(await _interrupted_fanout(store))}
    fan, l1, l2, _ = _fanout()
    events = await summarize(
        await collect(
            rk.Runner(fan, checkpoint_store=store).resume("cp", targets={ids["need L2"]: None})
        )
    )
    assert l2.resume_infos[0].is_resume_target and not l1.resume_infos[0].is_resume_target
    assert ("L2", ["F", "L2"], "L2 done None", None) in events


async def test_rn03_unknown_checkpoint_id() -> None:
    """RN-03: resuming an unknown checkpoint id fails with CheckpointNotFoundError naming it,
    when iterated, before any agent runs."""
    a = ResumableScriptedAgent("A", ["a1"], ["a2"])
    it = rk.Runner(a, checkpoint_store=rk.InMemoryCheckpointStore()).resume("no-such-cp")
    with pytest.raises(errors.CheckpointNotFoundError, match="no-such-cp") as caught:
        await collect(it)
    assert caught.value.checkpoint_id == "no-such-cp"
    assert isinstance(caught.value, errors.RelayKitError)
    assert a.started == 0 and a.resume_infos == []


async def test_rn04_interrupt_contexts_ids_addresses_and_parents() -> None:
    """RN-04: interrupt contexts carry ids, addresses, user info and the root-cause flag; each
    root cause links to its composite ancestor through ``parent``."""
    store = rk.InMemoryCheckpointStore()
    events = await _interrupted_fanout(store)
    assert await summarize(events) == [
        ("OK", ["F", "OK"], "ok1", None),
        ("F", ["F"], None, "interrupt"),
    ]
    interrupted = events[-1].action.interrupted  # type: ignore[union-attr]
    assert interrupted is not None and interrupted.data == "F interrupted"
    c1, c2 = interrupted.contexts
    assert (c1.info, c1.address, c1.is_root_cause) == (
        "need L1",
        (agent_seg("F"), agent_seg("L1")),
        True,
    )
    assert (c2.info, c2.address, c2.is_root_cause) == (
        "need L2",
        (agent_seg("F"), agent_seg("L2")),
        True,
    )
    assert c1.id and c2.id and c1.id != c2.id
    for c in (c1, c2):
        assert c.parent is not None
        assert (c.parent.info, c.parent.address, c.parent.is_root_cause, c.parent.parent) == (
            "F interrupted",
            (agent_seg("F"),),
            False,
            None,
        )
        assert c.parent.id not in (c1.id, c2.id)
    assert c1.parent.id == c2.parent.id  # type: ignore[union-attr]
    expected = rk.InterruptContext(
        "x",
        (agent_seg("F"), agent_seg("L1")),
        "need L1",
        True,
        rk.InterruptContext("y", (agent_seg("F"),), "F interrupted", False),
    )
    assert c1.equals_without_id(expected)


async def test_rn04_tool_segment_and_single_interrupt_context() -> None:
    """RN-04: a tool segment carries the tool name and the tool-call id; a plain interrupt has
    one root-cause context without parent, whose info is the interrupt info."""

    def tool_interrupt(ctx: rk.RunContext) -> rk.AgentEvent:
        seg = rk.AddressSegment("tool", "search", "call_7")
        return rk.interrupt(ctx.derive(address=(*ctx.address, seg)), {"q": "x"})

    events = await collect(rk.Runner(ScriptedAgent("A", [tool_interrupt])).query("hi"))
    (ctx,) = interrupt_contexts(events)
    assert ctx.address == (agent_seg("A"), rk.AddressSegment("tool", "search", "call_7"))
    assert str(ctx.address[-1]) == "tool:search:call_7"
    assert (ctx.info, ctx.is_root_cause, ctx.parent) == ({"q": "x"}, True, None)

    events = await collect(rk.Runner(ScriptedAgent("A", [interrupt_step("hello")])).query("hi"))
    (ctx,) = interrupt_contexts(events)
    assert (ctx.address, ctx.info, ctx.is_root_cause, ctx.parent) == (
        (agent_seg("A"),),
        "hello",
        True,
        None,
    )
    assert events[-1].action.interrupted.data == "hello"  # type: ignore[union-attr]


async def test_rn04_nested_composites_link_every_ancestor() -> None:
    """RN-04 / D8: a root cause under two composites links to both through ``parent``; on a
    targeted resume both composites are resume targets and pass the resume down."""

    def build() -> tuple[FanoutAgent, FanoutAgent, ResumableScriptedAgent, ResumableScriptedAgent]:
        l1, l2 = leaf("L1", "need L1", State(1)), leaf("L2", "need L2")
        inner = FanoutAgent("F2", [l1])
        return FanoutAgent("F1", [inner, l2]), inner, l1, l2

    store = rk.InMemoryCheckpointStore()
    outer, *_ = build()
    events = await collect(rk.Runner(outer, checkpoint_store=store).query("hi", checkpoint_id="n"))
    deep, shallow = interrupt_contexts(events)
    chain = []
    node: rk.InterruptContext | None = deep
    while node is not None:
        chain.append((node.address, node.info, node.is_root_cause))
        node = node.parent
    assert chain == [
        ((agent_seg("F1"), agent_seg("F2"), agent_seg("L1")), "need L1", True),
        ((agent_seg("F1"), agent_seg("F2")), "F2 interrupted", False),
        ((agent_seg("F1"),), "F1 interrupted", False),
    ]
    assert shallow.address == (agent_seg("F1"), agent_seg("L2"))
    assert shallow.parent is not None and deep.parent is not None
    assert shallow.parent.id == deep.parent.parent.id  # type: ignore[union-attr]

    outer, inner, l1, l2 = build()
    resumed = await collect(
        rk.Runner(outer, checkpoint_store=store).resume("n", targets={deep.id: "go"})
    )
    assert (await summarize(resumed))[0] == ("L1", ["F1", "F2", "L1"], "L1 done go", None)
    assert outer.resume_infos[0].is_resume_target and inner.resume_infos[0].is_resume_target
    assert l1.resume_infos[0].interrupt_state == State(1)
    assert not l2.resume_infos[0].is_resume_target
    (pending,) = interrupt_contexts(resumed)
    assert pending.id == shallow.id


# -- RN-05 -------------------------------------------------------------------------------------
async def _break_at(runner: rk.Runner, text: str) -> list[str]:
    seen: list[str] = []
    async with contextlib.aclosing(runner.query("hi")) as it:
        async for ev in it:
            msg = ev.message
            seen.append(msg.content if msg is not None else "")
            if msg is not None and msg.content == text:
                break
    return seen


async def test_rn05_breaking_early_closes_every_agent_generator() -> None:
    """RN-05: stopping the iteration early closes every agent's generator (their finally ran)
    before aclosing returns; agents that never started are not started."""
    c1 = ScriptedAgent("C1", ["c1", "c2"])
    c2 = ScriptedAgent("C2", ["c3"])
    fan = FanoutAgent("P", [c1, c2])
    r = ScriptedAgent("R", ["r1", transfer("P")])
    seen = await _break_at(rk.Runner(rk.set_sub_agents(r, [fan])), "c1")
    assert seen == ["r1", "", "c1"]
    assert (c1.started, c1.closed, c1.completed) == (1, 1, 0)
    assert fan.closed == 1
    assert (r.closed, r.completed) == (1, 1)
    assert c2.started == 0


async def test_rn05_breaking_inside_a_wrapped_flow_agent() -> None:
    """RN-05: breaking while a deterministic wrapper's inner flow agent is suspended closes
    the inner agent and the root."""
    g = ScriptedAgent("G", ["g1", "g2"])
    f = ScriptedAgent("F", ["f1", transfer("G")])
    wrapped = rk.with_deterministic_transfer(rk.set_sub_agents(f, [g]), ["S"])
    s = ScriptedAgent("S", ["s1", transfer("F"), "never"])
    s.steps.pop()  # keep S's last own action a transfer
    seen = await _break_at(rk.Runner(rk.set_sub_agents(s, [wrapped])), "g1")
    assert seen[-1] == "g1"
    assert (g.closed, g.completed) == (1, 0)
    assert (f.closed, f.completed) == (1, 1)

    solo = ScriptedAgent("A", ["a1", "a2", "a3"])
    assert await _break_at(rk.Runner(solo), "a1") == ["a1"]
    assert (solo.closed, solo.completed) == (1, 0)


async def test_rn05_breaking_early_with_a_checkpoint_id_and_on_resume() -> None:
    """RN-05: the same holds on the checkpointing path (run with checkpoint_id) and when
    breaking out of a resume."""
    store = rk.InMemoryCheckpointStore()
    c = ScriptedAgent("C", ["c1", "c2"])
    tree = rk.set_sub_agents(ScriptedAgent("R", ["r1", transfer("C")]), [c])
    async with contextlib.aclosing(
        rk.Runner(tree, checkpoint_store=store).query("hi", checkpoint_id="x")
    ) as it:
        async for ev in it:
            if ev.agent_name == "C":
                break
    assert (c.closed, c.completed) == (1, 0)
    assert await store.get("x") is None

    a = ResumableScriptedAgent("A", [interrupt_step("q")], ["a1", "a2"])
    await collect(rk.Runner(a, checkpoint_store=store).query("hi", checkpoint_id="y"))
    fresh = ResumableScriptedAgent("A", [], ["a1", "a2"])
    async with contextlib.aclosing(rk.Runner(fresh, checkpoint_store=store).resume("y")) as it:
        async for _ in it:
            break
    assert (fresh.closed, fresh.completed) == (1, 0)


# -- RN-06 -------------------------------------------------------------------------------------
async def test_rn06_registered_state_round_trips() -> None:
    """RN-06: interrupt state and session values of registered types (nested, with tuples and
    bytes) round-trip through a checkpoint into a new Runner."""
    state = State(3, "note", ("k", 7), Inner(["a", "b"], b"\x00\xff"))
    store = rk.InMemoryCheckpointStore()
    a = ResumableScriptedAgent("A", [interrupt_step("info", state)], ["done"])
    await collect(
        rk.Runner(a, checkpoint_store=store).run(
            [user("hi")], checkpoint_id="cp", session_values={"k": State(9)}
        )
    )
    raw = await store.get("cp")
    assert raw is not None and b'"tests.State"' in raw

    seen_values: list[Any] = []
    fresh = ResumableScriptedAgent(
        "A", [], [lambda ctx: seen_values.append(ctx.get_session_value("k"))]
    )
    assert await run_resume(rk.Runner(fresh, checkpoint_store=store), "cp") == []
    got = fresh.resume_infos[0].interrupt_state
    assert got == state and type(got) is State and type(got.inner) is Inner
    assert isinstance(got.pair, tuple) and isinstance(got.inner.blob, bytes)
    assert seen_values == [State(9)]


async def run_resume(runner: rk.Runner, cp: str, **options: Any) -> list[Any]:
    return await summarize(await collect(runner.resume(cp, **options)))


async def test_rn06_unregistered_state_fails_to_save_clearly() -> None:
    """RN-06: an unregistered state type fails to save: the run yields an error event naming
    the type and register_type, before the interrupt event; nothing is stored."""
    store = rk.InMemoryCheckpointStore()
    a = ResumableScriptedAgent("A", [interrupt_step("info", Unregistered(1))], ["done"])
    events = await collect(rk.Runner(a, checkpoint_store=store).query("hi", checkpoint_id="cp"))
    kinds = [k for *_, k in await summarize(events)]
    assert kinds == ["error", "interrupt"]
    text = str(events[0].error)
    assert "Unregistered" in text and "register_type" in text and "'cp'" in text
    assert await store.get("cp") is None
    with pytest.raises(errors.CheckpointNotFoundError):
        await collect(rk.Runner(a, checkpoint_store=store).resume("cp"))


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (
            lambda b: b.replace(b'"tests.State"', b'"tests.Missing"'),
            "unknown type name 'tests.Missing'",
        ),
        (lambda b: b.replace(b'"version":1', b'"version":99'), "format version 99"),
        (lambda b: b"{not json" + b, "not JSON"),
        (
            lambda b: b.replace(b'"format":"relaykit/checkpoint"', b'"format":"other"'),
            "not a relaykit",
        ),
    ],
    ids=["unknown-type", "newer-version", "invalid-json", "wrong-format"],
)
async def test_rn06_tampered_checkpoint_fails_to_load(tamper: Any, problem: str) -> None:
    """RN-06: unknown type names, a newer format version and corrupt bytes fail to load with a
    SerializationError naming the problem, before any agent runs."""
    store = rk.InMemoryCheckpointStore()
    a = ResumableScriptedAgent("A", [interrupt_step("info", State(1))], ["done"])
    await collect(rk.Runner(a, checkpoint_store=store).query("hi", checkpoint_id="cp"))
    raw = await store.get("cp")
    assert raw is not None
    changed = tamper(raw)
    assert changed != raw
    await store.set("cp", changed)
    fresh = ResumableScriptedAgent("A", [], ["done"])
    with pytest.raises(errors.SerializationError, match=problem):
        await collect(rk.Runner(fresh, checkpoint_store=store).resume("cp"))
    assert fresh.resume_infos == [] and fresh.started == 0


async def test_rn06_signed_checkpoints_detect_tampering() -> None:
    """RN-06 / D10: with checkpoint_signing_key a changed payload, another key or a missing
    signature fails to load with a SerializationError; the untouched checkpoint loads."""
    store = rk.InMemoryCheckpointStore()
    a = ResumableScriptedAgent("A", ["a1", interrupt_step("info", State(1, "n"))], ["done"])
    await collect(
        rk.Runner(a, checkpoint_store=store, checkpoint_signing_key=b"k").query(
            "hi", checkpoint_id="cp"
        )
    )
    raw = await store.get("cp")
    assert raw is not None and b'"signature"' in raw

    def fresh_runner(key: bytes | None) -> rk.Runner:
        return rk.Runner(
            ResumableScriptedAgent("A", [], ["done"]),
            checkpoint_store=store,
            checkpoint_signing_key=key,
        )

    await store.set("cp", raw.replace(b'"note":"n"', b'"note":"m"'))
    with pytest.raises(errors.SerializationError, match="signature"):
        await collect(fresh_runner(b"k").resume("cp"))
    await store.set("cp", raw)
    with pytest.raises(errors.SerializationError, match="signature"):
        await collect(fresh_runner(b"other").resume("cp"))
    doc = json.loads(raw)
    del doc["signature"]
    await store.set("cp", json.dumps(doc).encode())
    with pytest.raises(errors.SerializationError, match="signature"):
        await collect(fresh_runner(b"k").resume("cp"))
    await store.set("cp", raw)
    assert await run_resume(fresh_runner(b"k"), "cp") == [("A", ["A"], "done", None)]


# -- RN-07 -------------------------------------------------------------------------------------
async def test_rn07_unknown_target_is_a_resume_target_error() -> None:
    """RN-07 / D8: an unknown target id raises ResumeTargetError naming it, before any agent
    runs."""
    store = rk.InMemoryCheckpointStore()
    await _interrupted_fanout(store)
    fan, l1, l2, _ = _fanout()
    with pytest.raises(errors.ResumeTargetError, match="bogus-id") as caught:
        await collect(rk.Runner(fan, checkpoint_store=store).resume("cp", targets={"bogus-id": 1}))
    assert caught.value.target_id == "bogus-id"
    assert fan.resume_infos == [] and l1.resume_infos == [] and l2.resume_infos == []


async def test_rn07_resume_all_resumes_every_point() -> None:
    """RN-07 / D8: resume without targets (or with an empty mapping) makes every interrupted
    point a resume target with no data."""
    for targets in (None, {}):
        store = rk.InMemoryCheckpointStore()
        await _interrupted_fanout(store)
        fan, l1, l2, _ = _fanout()
        events = await run_resume(rk.Runner(fan, checkpoint_store=store), "cp", targets=targets)
        assert events == [
            ("L1", ["F", "L1"], "L1 done None", None),
            ("L2", ["F", "L2"], "L2 done None", None),
        ]
        for info in (l1.resume_infos[0], l2.resume_infos[0]):
            assert info.is_resume_target and info.resume_data is None and info.was_interrupted


async def test_rn07_targeted_resume_keeps_the_other_point_pending_with_same_id() -> None:
    """RN-07 / D8 / D11: a targeted resume leaves the other point pending: it interrupts again
    with the SAME id (and the composite keeps its id); the checkpoint is overwritten under the
    same id and the pending point can be answered later with its first id."""
    store = rk.InMemoryCheckpointStore()
    first = interrupt_contexts(await _interrupted_fanout(store))
    ids = {c.info: c.id for c in first}
    parent_id = first[0].parent.id  # type: ignore[union-attr]

    fan, l1, l2, ok = _fanout()
    events = await collect(
        rk.Runner(fan, checkpoint_store=store).resume("cp", targets={ids["need L1"]: "yes"})
    )
    assert await summarize(events) == [
        ("L1", ["F", "L1"], "L1 done yes", None),
        ("F", ["F"], None, "interrupt"),
    ]
    (again,) = interrupt_contexts(events)
    assert (again.id, again.info, again.address) == (
        ids["need L2"],
        "need L2",
        (agent_seg("F"), agent_seg("L2")),
    )
    assert again.parent is not None and again.parent.id == parent_id
    assert l2.resume_infos[0].interrupt_state == State(2)

    # The stale id of the answered point is gone from the new checkpoint.
    with pytest.raises(errors.ResumeTargetError):
        await collect(
            rk.Runner(_fanout()[0], checkpoint_store=store).resume(
                "cp", targets={ids["need L1"]: "again"}
            )
        )

    fan, l1, l2, ok = _fanout()
    events = await collect(
        rk.Runner(fan, checkpoint_store=store).resume("cp", targets={ids["need L2"]: "ok"})
    )
    assert await summarize(events) == [("L2", ["F", "L2"], "L2 done ok", None)]
    assert l1.resume_infos == [] and ok.started == 0
    assert l2.resume_infos[0].interrupt_state == State(2)


async def test_rn07_ids_are_stable_by_address() -> None:
    """RN-07 / D11: a point that asks again at the same address keeps its id (even on a resume
    of everything); an interrupt at a new address gets a new id."""
    store = rk.InMemoryCheckpointStore()

    def build() -> rk.FlowAgent:
        a = ResumableScriptedAgent(
            "A",
            [interrupt_step("q1")],
            lambda ctx, info: (
                [interrupt_step("q2")]
                if info.interrupt_info and info.interrupt_info.data == "q1"
                else ["a done", transfer("B")]
            ),
        )
        b = ResumableScriptedAgent("B", [interrupt_step("qb")], ["b done"])
        return rk.set_sub_agents(a, [b])

    first = interrupt_contexts(
        await collect(rk.Runner(build(), checkpoint_store=store).query("hi", checkpoint_id="s"))
    )
    second = interrupt_contexts(
        await collect(rk.Runner(build(), checkpoint_store=store).resume("s"))
    )
    assert [(c.info, c.id) for c in second] == [("q2", first[0].id)]
    third = await collect(rk.Runner(build(), checkpoint_store=store).resume("s"))
    (b_ctx,) = interrupt_contexts(third)
    assert b_ctx.info == "qb" and b_ctx.address == (agent_seg("A"), agent_seg("B"))
    assert b_ctx.id != first[0].id
    done = await run_resume(
        rk.Runner(build(), checkpoint_store=store), "s", targets={b_ctx.id: None}
    )
    assert done == [("B", ["A", "B"], "b done", None)]


async def test_rn01_session_values_are_saved_and_can_be_overridden_on_resume() -> None:
    """RN-01: values written before the interrupt are in the checkpoint; resume(...,
    session_values=...) overrides them."""
    store = rk.InMemoryCheckpointStore()

    def writer(ctx: rk.RunContext) -> None:
        ctx.set_session_value("written", "before")

    a = ResumableScriptedAgent("A", [writer, interrupt_step("q")])
    await collect(
        rk.Runner(a, checkpoint_store=store).run(
            [user("hi")], checkpoint_id="v", session_values={"given": 1, "other": 2}
        )
    )
    seen: list[dict[str, Any]] = []
    fresh = ResumableScriptedAgent("A", [], [lambda ctx: seen.append(dict(ctx.session_values))])
    await collect(rk.Runner(fresh, checkpoint_store=store).resume("v", session_values={"other": 3}))
    assert seen == [{"given": 1, "other": 3, "written": "before"}]


# -- AR-01, AR-10 ------------------------------------------------------------------------------
async def test_ar01_nothing_runs_until_iteration() -> None:
    """AR-01: run(), query() and resume() return without running anything; the agent starts on
    the first iteration, with the messages given and enable_streaming from the Runner."""
    a = ScriptedAgent("A", ["a1", "a2"])
    runner = rk.Runner(a, streaming=True, checkpoint_store=rk.InMemoryCheckpointStore())
    it = runner.run([user("one"), user("two")])
    runner.query("q")
    resume_it = runner.resume("missing")
    assert a.started == 0 and a.inputs == []
    first = await anext(it)
    assert a.started == 1
    assert first.message is not None and first.message.content == "a1"
    assert a.input_texts == [["one", "two"]] and a.inputs[0].enable_streaming is True
    assert [ev.message.content for ev in [ev async for ev in it]] == ["a2"]  # type: ignore[union-attr]
    with pytest.raises(errors.CheckpointNotFoundError):
        await anext(resume_it)


def test_ar10_tree_validation_when_the_runner_is_built() -> None:
    """AR-10 / D13: duplicate names, an agent object with two parents, a child named like the
    root, a tree that contains itself and a cycle made only of deterministic transfers are
    rejected with ConfigurationError when the Runner is built."""
    Cfg = errors.ConfigurationError

    dup = rk.set_sub_agents(
        ScriptedAgent("R"),
        [ScriptedAgent("A"), rk.set_sub_agents(ScriptedAgent("B"), [ScriptedAgent("A")])],
    )
    with pytest.raises(Cfg, match="duplicate agent name 'A'"):
        rk.Runner(dup)

    shared = ScriptedAgent("S")
    b = rk.set_sub_agents(ScriptedAgent("B"), [shared])
    two_parents = rk.set_sub_agents(ScriptedAgent("R"), [shared, b])
    with pytest.raises(Cfg, match="'S' appears twice"):
        rk.Runner(two_parents)

    with pytest.raises(Cfg, match="same name as the root"):
        rk.Runner(rk.set_sub_agents(ScriptedAgent("R"), [ScriptedAgent("R")]))

    top = rk.set_sub_agents(ScriptedAgent("T"), [ScriptedAgent("U")])
    rk.set_sub_agents(top.sub_agents[0], [top])
    with pytest.raises(Cfg, match="contains itself"):
        rk.Runner(top)

    cyc = rk.set_sub_agents(
        ScriptedAgent("R"),
        [
            rk.with_deterministic_transfer(ScriptedAgent("X"), ["Y"]),
            rk.with_deterministic_transfer(ScriptedAgent("Y"), ["Z"]),
            rk.with_deterministic_transfer(ScriptedAgent("Z"), ["X"]),
        ],
    )
    with pytest.raises(Cfg, match="deterministic transfers form a cycle"):
        rk.Runner(cyc)
    with pytest.raises(Cfg, match="cycle: X -> X"):
        rk.Runner(rk.with_deterministic_transfer(ScriptedAgent("X"), ["X"]))

    # The same names in two separate trees, and an acyclic chain, are fine.
    rk.Runner(rk.set_sub_agents(ScriptedAgent("R"), [ScriptedAgent("A")]))
    rk.Runner(
        rk.set_sub_agents(
            ScriptedAgent("R"),
            [rk.with_deterministic_transfer(ScriptedAgent("X"), ["Y", "R"]), ScriptedAgent("Y")],
        )
    )
