"""Conformance: deterministic transfer (DT-01 … DT-15; seeds 000 and 003; semantics D1–D3, D6,
D8; eino-reference §4 and §11.6).

``with_deterministic_transfer(agent, [X, ...])`` runs ``agent`` and, when it finished normally,
appends for each target an assistant message calling ``transfer_to_agent`` and a tool message
carrying ``TransferToAgentAction(X)``. Around a flow agent it isolates the run history, turns an
inner interrupt into a composite interrupt that saves the isolated events, and records the inner
events into the parent history exactly once.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest

import relaykit as rk

try:  # the tests directory may become a package
    from . import dt_helpers as h
except ImportError:  # pragma: no cover - rootdir-style import (no __init__.py)
    import dt_helpers as h  # type: ignore[no-redef]

ResumableScriptedAgent = h.ResumableScriptedAgent
ScriptedAgent = h.ScriptedAgent
collect = h.collect
describe_all = h.describe_all
names = h.names
said = h.said
say = h.say
texts = h.texts
transfer_pair = h.transfer_pair

WRAPPER_INTERRUPT_INFO = "deterministic transfer wrapper interrupted"


def paths(events: list[rk.AgentEvent]) -> list[tuple[str, ...]]:
    return [names(ev.run_path) for ev in events]


def user(text: str) -> tuple[str, str]:
    return ("user", text)


def own_transfer(dest: str) -> list[tuple[str, str]]:
    """An agent's own transfer pair as it reads it back (unchanged messages)."""
    return [("assistant", ""), ("tool", f"successfully transferred to agent [{dest}]")]


def interrupt_events(events: list[rk.AgentEvent]) -> list[rk.AgentEvent]:
    return [ev for ev in events if ev.action is not None and ev.action.interrupted is not None]


def root_cause(ev: rk.AgentEvent) -> rk.InterruptContext:
    assert ev.action is not None and ev.action.interrupted is not None
    contexts = ev.action.interrupted.contexts
    assert len(contexts) == 1
    return contexts[0]


def addr(*agents: str) -> tuple[rk.AddressSegment, ...]:
    return tuple(rk.AddressSegment("agent", a) for a in agents)


def stateful_then(text: str, info: Any, state: Any = None):
    """Script: say ``text`` then interrupt (with ``state``)."""

    async def script(
        agent: ScriptedAgent, ctx: rk.RunContext, input: rk.AgentInput
    ) -> AsyncIterator[rk.AgentEvent]:
        yield say(text)
        yield rk.stateful_interrupt(ctx, info, state)

    return script


def transfers_to(text: str, *dests: str):
    """Script: say ``text`` then transfer (LLM-style pairs) to each of ``dests``."""

    async def script(
        agent: ScriptedAgent, ctx: rk.RunContext, input: rk.AgentInput
    ) -> AsyncIterator[rk.AgentEvent]:
        yield say(text)
        for dest in dests:
            for ev in transfer_pair(dest):
                yield ev

    return script


def resume_says(*items: str):
    async def on_resume(
        agent: ResumableScriptedAgent, ctx: rk.RunContext, info: rk.ResumeInfo
    ) -> AsyncIterator[rk.AgentEvent]:
        for item in items:
            yield say(item)

    return on_resume


def first_visit_then(text: str | None, dest: str, final: str):
    """Script: on the first visit (only the user input) say ``text`` (if any) and transfer to
    ``dest``; on a later visit (control came back) say ``final``."""

    async def script(agent, ctx, input):
        if len(input.messages) == 1:
            if text is not None:
                yield say(text)
            for ev in transfer_pair(dest):
                yield ev
        else:
            yield say(final)

    return script


class Outer(ResumableScriptedAgent):
    """Eino's test shape: a custom agent whose run/resume call the wrapper directly."""

    def __init__(self, name: str, wrapper: rk.Agent) -> None:
        super().__init__(name)
        self.wrapped = wrapper

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.inputs.append(list(input.messages))
        self.run_paths.append(names(ctx.run_path))
        async with aclosing(self.wrapped.run(ctx, input)) as events:
            async for ev in events:
                yield ev

    async def resume(
        self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.resume_infos.append(info)
        async with aclosing(self.wrapped.resume(ctx, info)) as events:  # type: ignore[attr-defined]
            async for ev in events:
                yield ev


# --------------------------------------------------------------------------------------------
# DT-01 — plain agent: events forwarded unchanged and in order, then one pair per target
# --------------------------------------------------------------------------------------------


async def test_dt01_plain_agent_events_forwarded_then_pair_per_target_in_order() -> None:
    """DT-01: the wrapped agent's events come first, unchanged and in order; then, for each
    target in order, an assistant ``transfer_to_agent`` call and a tool event with the action."""
    originals = [say("a1"), say("a2")]

    async def script(agent, ctx, input):
        for ev in originals:
            yield ev

    wrapper = rk.with_deterministic_transfer(ScriptedAgent("A", script), ["B", "C"])
    events = await collect(wrapper.run(rk.RunContext.new(), rk.AgentInput([rk.Message.user("hi")])))

    assert len(events) == 6
    assert events[:2] == originals
    assert [ev.output.message.content for ev in events[:2]] == ["a1", "a2"]
    h.assert_transfer_pair(events[2], events[3], "B")
    h.assert_transfer_pair(events[4], events[5], "C")
    call_ids = {ev.output.message.tool_calls[0].id for ev in (events[2], events[4])}
    assert len(call_ids) == 2, "each transfer pair has its own tool-call id"


async def test_dt01_wrapper_under_runner_transfers_to_target_with_exact_pair() -> None:
    """DT-01: through the Runner the pair is stamped as the wrapped agent's own events and the
    target runs next; run paths ``[A]`` then ``[A, B]``."""
    a = ScriptedAgent("A", texts("a1", "a2"))
    b = ScriptedAgent("B", texts("b1"))
    root = rk.set_sub_agents(rk.with_deterministic_transfer(a, ["B"]), [b])

    events = await collect(rk.Runner(root).query("hello"))

    assert describe_all(events) == [
        "A say a1",
        "A say a2",
        "A call -> B",
        "A transfer -> B",
        "B say b1",
    ]
    assert paths(events) == [("A",), ("A",), ("A",), ("A",), ("A", "B")]
    h.assert_transfer_pair(events[2], events[3], "B")
    assert a.inputs == [[rk.Message.user("hello")]]
    assert h.contents(b.inputs[0]) == [
        user("hello"),
        said("A", "a1"),
        said("A", "a2"),
        *h.rewritten_transfer("A", "B"),
    ]


# --------------------------------------------------------------------------------------------
# DT-02 — exit as last event: no transfer
# --------------------------------------------------------------------------------------------


async def test_dt02_exit_last_event_appends_no_transfer() -> None:
    """DT-02: a plain agent ending with an exit gets no transfer events (direct call)."""

    async def script(agent, ctx, input):
        yield say("bye")
        yield rk.AgentEvent.exit()

    wrapper = rk.with_deterministic_transfer(ResumableScriptedAgent("A", script), ["next_agent"])
    events = await collect(wrapper.run(rk.RunContext.new(), rk.AgentInput()))

    assert describe_all(events) == [" say bye", " exit"]


async def test_dt02_exit_under_runner_target_does_not_run() -> None:
    """DT-02: under a Runner the exit ends the run; the target never runs."""

    async def script(agent, ctx, input):
        yield say("bye")
        yield rk.AgentEvent.exit()

    b = ScriptedAgent("B")
    root = rk.set_sub_agents(rk.with_deterministic_transfer(ScriptedAgent("A", script), ["B"]), [b])
    events = await collect(rk.Runner(root).query("hi"))

    assert describe_all(events) == ["A say bye", "A exit"]
    assert b.inputs == []


async def test_dt02_exit_inside_wrapped_flow_agent_skips_transfer_to_parent() -> None:
    """DT-02: an exit as the last event of a wrapped flow agent (from its child) suppresses the
    transfer back to the parent (eino TestDeterministicTransferExitSkipsTransfer)."""

    async def leaf_script(agent, ctx, input):
        yield say("leaf out")
        yield rk.AgentEvent.exit()

    sup = ScriptedAgent("sup", transfers_to("route", "team"))
    team = rk.set_sub_agents(
        ScriptedAgent("team", transfers_to("plan", "leaf")), [ScriptedAgent("leaf", leaf_script)]
    )
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])

    events = await collect(rk.Runner(root).query("hi"))

    assert describe_all(events) == [
        "sup say route",
        "sup call -> team",
        "sup transfer -> team",
        "team say plan",
        "team call -> leaf",
        "team transfer -> leaf",
        "leaf say leaf out",
        "leaf exit",
    ]
    assert len(sup.inputs) == 1


# --------------------------------------------------------------------------------------------
# DT-03 — interrupt as last event: no transfer; after resume the transfer follows
# --------------------------------------------------------------------------------------------


def _dt03_tree() -> tuple[rk.Agent, ResumableScriptedAgent, ScriptedAgent]:
    a = ResumableScriptedAgent(
        "A",
        stateful_then("working", {"q": "approve?"}, {"step": 1}),
        resume_says("approved, finishing"),
    )
    b = ScriptedAgent("B", texts("b done"))
    return rk.set_sub_agents(rk.with_deterministic_transfer(a, ["B"]), [b]), a, b


async def test_dt03_interrupt_skips_transfer_and_resume_appends_it() -> None:
    """DT-03: the interrupt ends the run without transfer events; resuming in a new Runner over
    the same store finishes the agent and then the transfer pair and the target follow."""
    store = rk.InMemoryCheckpointStore()
    root, _, b = _dt03_tree()

    first = await collect(rk.Runner(root, checkpoint_store=store).query("hi", checkpoint_id="c1"))

    assert describe_all(first) == ["A say working", "A interrupt"]
    assert b.inputs == []
    assert await store.get("c1") is not None
    cause = root_cause(first[-1])
    assert cause.info == {"q": "approve?"} and cause.is_root_cause
    assert cause.address == addr("A")

    root2, a2, b2 = _dt03_tree()
    second = await collect(rk.Runner(root2, checkpoint_store=store).resume("c1"))

    assert describe_all(second) == [
        "A say approved, finishing",
        "A call -> B",
        "A transfer -> B",
        "B say b done",
    ]
    h.assert_transfer_pair(second[1], second[2], "B")
    assert paths(second) == [("A",)] * 3 + [("A", "B")]
    assert a2.inputs == [] and len(a2.resume_infos) == 1
    info = a2.resume_infos[0]
    assert info.was_interrupted and info.is_resume_target
    assert info.interrupt_state == {"step": 1}
    assert h.contents(b2.inputs[0]) == [
        user("hi"),
        said("A", "working"),
        said("A", "approved, finishing"),
        *h.rewritten_transfer("A", "B"),
    ]


async def test_dt03_public_only_interrupt_skips_transfer() -> None:
    """DT-03: an event whose action only carries ``interrupted`` (no framework signal) also
    suppresses the transfer (eino TestDeterministicTransferNonFlowAgent_InterruptSkipsTransfer)."""

    async def script(agent, ctx, input):
        yield rk.AgentEvent(action=rk.AgentAction(interrupted=rk.InterruptInfo("wait")))

    wrapper = rk.with_deterministic_transfer(ResumableScriptedAgent("A", script), ["next_agent"])
    events = await collect(wrapper.run(rk.RunContext.new(), rk.AgentInput()))

    assert len(events) == 1
    assert events[0].action.interrupted.data == "wait"


# --------------------------------------------------------------------------------------------
# DT-04 — error as last event suppresses the transfer (D1)
# --------------------------------------------------------------------------------------------


async def test_dt04_error_event_last_suppresses_transfer() -> None:
    """DT-04 / D1: an error event as the last event: no transfer events, the error surfaces and
    the target does not run (Eino would still transfer; we follow the seed)."""

    async def script(agent, ctx, input):
        yield say("trying")
        yield rk.AgentEvent(error=RuntimeError("tool exploded"))

    b = ScriptedAgent("B")
    root = rk.set_sub_agents(rk.with_deterministic_transfer(ScriptedAgent("A", script), ["B"]), [b])
    events = await collect(rk.Runner(root).query("hi"))

    assert describe_all(events) == ["A say trying", "A error"]
    assert "tool exploded" in h.error_text(events[-1])
    assert b.inputs == []


async def test_dt04_stream_ending_in_error_counts_as_error() -> None:
    """DT-04 / D1: a streamed message whose stream ends in an error counts as an error."""

    async def chunks():
        yield rk.Message.assistant("partial ")
        raise RuntimeError("stream broke")

    async def script(agent, ctx, input):
        yield rk.AgentEvent.from_message(rk.MessageStream(chunks()))

    b = ScriptedAgent("B")
    root = rk.set_sub_agents(rk.with_deterministic_transfer(ScriptedAgent("A", script), ["B"]), [b])
    events = await collect(rk.Runner(root, streaming=True).query("hi"))

    assert [h.transfer_dest(ev) for ev in events] == [None] * len(events)
    assert not any(
        ev.output is not None and ev.output.message is not None and ev.output.message.tool_calls
        for ev in events
    )
    assert b.inputs == []
    stream = events[0].output.stream
    assert stream is not None
    with pytest.raises(RuntimeError, match="stream broke"):
        await stream.collect()


async def test_dt04_error_inside_wrapped_flow_agent_suppresses_transfer() -> None:
    """DT-04 / D1: an error as the last event of a wrapped flow agent (its child failed):
    no transfer back to the supervisor."""

    async def leaf_script(agent, ctx, input):
        yield say("leaf trying")
        raise RuntimeError("leaf failed")

    sup = ScriptedAgent("sup", transfers_to("route", "team"))
    team = rk.set_sub_agents(
        ScriptedAgent("team", transfers_to("plan", "leaf")), [ScriptedAgent("leaf", leaf_script)]
    )
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])

    events = await collect(rk.Runner(root).query("hi"))

    assert describe_all(events)[-2:] == ["leaf say leaf trying", "leaf error"]
    assert "leaf failed" in h.error_text(events[-1])
    assert len(sup.inputs) == 1


async def test_dt04_stream_error_inside_wrapped_flow_agent_suppresses_transfer() -> None:
    """DT-04 / D1: the same for a wrapped flow agent whose last message's stream fails: no
    transfer back to the supervisor."""

    async def chunks():
        yield rk.Message.assistant("partial ")
        raise RuntimeError("stream broke")

    async def team_script(agent, ctx, input):
        yield rk.AgentEvent.from_message(rk.MessageStream(chunks()))

    sup = ScriptedAgent("sup", transfers_to("route", "team"))
    team = rk.as_flow_agent(ScriptedAgent("team", team_script))
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])

    events = await collect(rk.Runner(root, streaming=True).query("hi"))

    assert describe_all(events) == [
        "sup say route",
        "sup call -> team",
        "sup transfer -> team",
        "team stream",
    ]
    assert len(sup.inputs) == 1


async def test_dt04_agent_that_yields_nothing_finished_normally() -> None:
    """DT-04 / D1: an agent that yields nothing finished normally: the transfer follows."""

    async def script(agent, ctx, input):
        return
        yield  # pragma: no cover

    wrapper = rk.with_deterministic_transfer(ScriptedAgent("A", script), ["B"])
    events = await collect(wrapper.run(rk.RunContext.new(), rk.AgentInput()))

    assert len(events) == 2
    h.assert_transfer_pair(events[0], events[1], "B")


# --------------------------------------------------------------------------------------------
# DT-05 — an exception inside the wrapped agent becomes an error event
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("after_first_event", [False, True])
async def test_dt05_exception_in_wrapped_agent_becomes_error_event(after_first_event: bool) -> None:
    """DT-05: an exception raised inside the wrapped agent becomes an error event naming the
    agent; no transfer follows and the stream ends cleanly."""

    async def script(agent, ctx, input):
        if after_first_event:
            yield say("partial")
        raise ValueError("kaboom")
        yield  # pragma: no cover

    b = ScriptedAgent("B")
    root = rk.set_sub_agents(rk.with_deterministic_transfer(ScriptedAgent("A", script), ["B"]), [b])
    events = await collect(rk.Runner(root).query("hi"))

    expected = (["A say partial"] if after_first_event else []) + ["A error"]
    assert describe_all(events) == expected
    err = events[-1]
    assert err.agent_name == "A" and names(err.run_path) == ("A",)
    assert isinstance(err.error, ValueError) and "kaboom" in str(err.error)
    assert b.inputs == []


async def test_dt05_exception_direct_call_is_error_event_not_raised() -> None:
    """DT-05: called directly, the wrapper turns the exception into an error event too."""

    async def script(agent, ctx, input):
        raise KeyError("missing")
        yield  # pragma: no cover

    wrapper = rk.with_deterministic_transfer(ResumableScriptedAgent("A", script), ["B"])
    events = await collect(wrapper.run(rk.RunContext.new(), rk.AgentInput()))

    assert len(events) == 1
    assert isinstance(events[0].error, KeyError)


async def test_dt05_exception_inside_wrapped_flow_agent_becomes_error_event() -> None:
    """DT-05: an exception inside a wrapped flow agent's own agent is an error event stamped
    with that agent; no transfer follows."""

    async def script(agent, ctx, input):
        raise RuntimeError("team crashed")
        yield  # pragma: no cover

    sup = ScriptedAgent("sup", transfers_to("route", "team"))
    team = rk.as_flow_agent(ScriptedAgent("team", script))
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])

    events = await collect(rk.Runner(root).query("hi"))

    assert describe_all(events) == [
        "sup say route",
        "sup call -> team",
        "sup transfer -> team",
        "team error",
    ]
    assert names(events[-1].run_path) == ("sup", "team")
    assert "team crashed" in h.error_text(events[-1])
    assert len(sup.inputs) == 1


# --------------------------------------------------------------------------------------------
# DT-06 — empty target list
# --------------------------------------------------------------------------------------------


async def test_dt06_empty_target_list_appends_nothing() -> None:
    """DT-06: with no targets the wrapper forwards the agent's events and appends nothing."""
    a = ScriptedAgent("A", texts("only"))
    events = await collect(rk.Runner(rk.with_deterministic_transfer(a, [])).query("hi"))

    assert describe_all(events) == ["A say only"]


async def test_dt06_empty_target_list_around_flow_agent_appends_nothing() -> None:
    """DT-06: the same around a flow agent (eino TestDeterministicTransferRunPathPreserved)."""
    inner = rk.set_sub_agents(
        ScriptedAgent("inner", transfers_to("i1", "child")), [ScriptedAgent("child", texts("c1"))]
    )
    outer = Outer("outer", rk.with_deterministic_transfer(inner, []))

    events = await collect(rk.Runner(outer).query("hi"))

    assert describe_all(events) == [
        "inner say i1",
        "inner call -> child",
        "inner transfer -> child",
        "child say c1",
    ]


# --------------------------------------------------------------------------------------------
# DT-07 / DT-08 — resumability follows the wrapped agent
# --------------------------------------------------------------------------------------------


async def test_dt07_non_resumable_agent_gives_non_resumable_wrapper() -> None:
    """DT-07: wrapping a non-resumable agent gives a non-resumable wrapper; name and description
    are the inner agent's; transfer events are still appended."""
    inner = ScriptedAgent("plain", texts("p1"), description="does plain things")
    wrapper = rk.with_deterministic_transfer(inner, ["next_agent"])

    assert not isinstance(inner, rk.ResumableAgent)
    assert isinstance(wrapper, rk.Agent)
    assert not isinstance(wrapper, rk.ResumableAgent)
    assert not hasattr(wrapper, "resume")
    assert wrapper.name == "plain"
    assert wrapper.description == "does plain things"

    events = await collect(wrapper.run(rk.RunContext.new(), rk.AgentInput()))
    assert describe_all(events) == [" say p1", " call -> next_agent", " transfer -> next_agent"]
    h.assert_transfer_pair(events[1], events[2], "next_agent")


async def test_dt07_interrupt_in_non_resumable_wrapper_cannot_be_resumed() -> None:
    """DT-07 / FA-14: the wrapper does not pretend to resume: resuming an interrupt raised by a
    non-resumable wrapped agent is the FA-14 error, not a crash."""
    store = rk.InMemoryCheckpointStore()

    def build() -> rk.Agent:
        return rk.with_deterministic_transfer(
            ScriptedAgent("A", stateful_then("x", "why", None)), ["B"]
        )

    first = await collect(rk.Runner(build(), checkpoint_store=store).query("hi", checkpoint_id="c"))
    assert describe_all(first) == ["A say x", "A interrupt"]

    second = await collect(rk.Runner(build(), checkpoint_store=store).resume("c"))
    assert describe_all(second) == ["A error"]
    assert "is an interrupt point but is not a ResumableAgent" in h.error_text(second[0])


async def test_dt08_resumable_agent_gives_resumable_wrapper_whose_resume_transfers() -> None:
    """DT-08: wrapping a resumable agent gives a resumable wrapper; its resume calls the inner
    resume with the same info and then appends the transfers
    (eino TestDeterministicTransferNonFlowAgent_Resume)."""
    inner = ResumableScriptedAgent(
        "res", texts("r1"), resume_says("after resume"), description="resumes"
    )
    wrapper = rk.with_deterministic_transfer(inner, ["next_agent"])

    assert isinstance(wrapper, rk.ResumableAgent)
    assert wrapper.name == "res" and wrapper.description == "resumes"

    info = rk.ResumeInfo(
        was_interrupted=True, interrupt_state={"k": 1}, is_resume_target=True, resume_data="yes"
    )
    events = await collect(wrapper.resume(rk.RunContext.new(), info))

    assert describe_all(events) == [
        " say after resume",
        " call -> next_agent",
        " transfer -> next_agent",
    ]
    h.assert_transfer_pair(events[1], events[2], "next_agent")
    assert len(inner.resume_infos) == 1
    got = inner.resume_infos[0]
    assert (got.was_interrupted, got.interrupt_state, got.is_resume_target, got.resume_data) == (
        True,
        {"k": 1},
        True,
        "yes",
    )


def test_dt08_wrapper_around_flow_agent_is_resumable() -> None:
    """DT-08: a flow agent is resumable, so its wrapper is too."""
    flow = rk.as_flow_agent(ScriptedAgent("f"))
    wrapper = rk.with_deterministic_transfer(flow, ["x"])
    assert isinstance(wrapper, rk.ResumableAgent)
    assert wrapper.name == "f"


# --------------------------------------------------------------------------------------------
# DT-09 — isolated run history around a flow agent; dual recording exactly once
# --------------------------------------------------------------------------------------------


async def test_dt09_wrapped_flow_agent_sees_root_input_and_own_history_only() -> None:
    """DT-09: the wrapped flow agent's agents see the root input plus their own (isolated)
    history, never the parent's events; its events are copied to the parent's history exactly
    once, so the parent reads each of them once when control returns."""
    sup = ScriptedAgent("sup", first_visit_then("sup routes", "team", "sup final"))
    team_agent = ScriptedAgent("team", transfers_to("team plan", "leaf"))
    leaf = ScriptedAgent("leaf", texts("leaf result"))
    team = rk.set_sub_agents(team_agent, [leaf])
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])

    events = await collect(rk.Runner(root).query("hello"))

    assert describe_all(events) == [
        "sup say sup routes",
        "sup call -> team",
        "sup transfer -> team",
        "team say team plan",
        "team call -> leaf",
        "team transfer -> leaf",
        "leaf say leaf result",
        "team call -> sup",
        "team transfer -> sup",
        "sup say sup final",
    ]
    # Isolation: the inner agents never see the supervisor's messages.
    assert h.contents(team_agent.inputs[0]) == [user("hello")]
    assert h.contents(leaf.inputs[0]) == [
        user("hello"),
        said("team", "team plan"),
        *h.rewritten_transfer("team", "leaf"),
    ]
    # Dual recording, exactly once: the supervisor reads every inner event once.
    assert h.contents(sup.inputs[1]) == [
        user("hello"),
        ("assistant", "sup routes"),
        *own_transfer("team"),
        said("team", "team plan"),
        *h.rewritten_transfer("team", "leaf"),
        said("leaf", "leaf result"),
        *h.rewritten_transfer("team", "sup"),
    ]


async def test_dt09_wrapped_flow_agent_keeps_its_own_event_list_across_its_children() -> None:
    """DT-09: inside the isolated history the inner tree works as usual: a later child sees the
    earlier inner events (but not the outer ones)."""
    sup = ScriptedAgent("sup", transfers_to("outer secret", "team"))
    first = ScriptedAgent("first", transfers_to("first says", "second"))
    second = ScriptedAgent("second", texts("second says"))
    team = rk.set_sub_agents(
        ScriptedAgent("team", transfers_to("team says", "first")),
        [rk.set_sub_agents(first, [second])],
    )
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, [])])

    await collect(rk.Runner(root).query("hello"))

    seen = h.contents(second.inputs[0])
    assert seen == [
        user("hello"),
        said("team", "team says"),
        *h.rewritten_transfer("team", "first"),
        said("first", "first says"),
        *h.rewritten_transfer("first", "second"),
    ]
    assert not any("outer secret" in content for _, content in seen)


# --------------------------------------------------------------------------------------------
# DT-10 — interrupt inside a wrapped flow agent: composite interrupt, checkpoint, resume
# --------------------------------------------------------------------------------------------


def _dt10_eino_tree() -> tuple[Outer, ResumableScriptedAgent, ScriptedAgent]:
    """eino TestDeterministicTransferFlowAgentInterruptResume: ``outer`` runs the wrapper around
    the flow agent ``inner`` (which, here, has a child ``after`` to observe its history)."""

    async def before_then_interrupt(agent, ctx, input):
        assert input.enable_streaming  # the Runner streams: the saved stream is materialised
        yield rk.AgentEvent.from_message(
            rk.MessageStream.from_list(
                [rk.Message.assistant("before "), rk.Message.assistant("interrupt")]
            )
        )
        yield rk.interrupt(ctx, "interrupt_data")

    inner = ResumableScriptedAgent(
        "inner", before_then_interrupt, transfers_to("after resume", "after")
    )
    after = ScriptedAgent("after", texts("after done"))
    wrapper = rk.with_deterministic_transfer(rk.set_sub_agents(inner, [after]), ["next_agent"])
    return Outer("outer", wrapper), inner, after


async def test_dt10_interrupt_in_wrapped_flow_becomes_composite_and_resumes() -> None:
    """DT-10: the inner interrupt becomes a composite interrupt of the wrapper saving the
    isolated events; the checkpoint is saved; a new Runner resumes: the inner agent resumes, the
    restored events are visible inside, and on completion the transfer to ``next_agent``
    follows, which is missing: the FA-06 error."""
    store = rk.InMemoryCheckpointStore()
    outer, inner, _ = _dt10_eino_tree()

    first = await collect(
        rk.Runner(outer, checkpoint_store=store, streaming=True).query("test", checkpoint_id="cp1")
    )

    assert describe_all(first) == ["inner stream", "outer interrupt"]
    assert paths(first) == [("outer", "inner"), ("outer",)]
    assert len(interrupt_events(first)) == 1
    assert await store.get("cp1") is not None
    cause = root_cause(first[-1])
    assert cause.info == "interrupt_data" and cause.is_root_cause
    assert cause.address == addr("outer", "inner")
    assert cause.parent is not None
    assert cause.parent.info == WRAPPER_INTERRUPT_INFO
    assert cause.parent.address == addr("outer")
    assert not cause.parent.is_root_cause
    assert len(inner.inputs) == 1 and inner.resume_infos == []

    outer2, inner2, after2 = _dt10_eino_tree()
    second = await collect(
        rk.Runner(outer2, checkpoint_store=store, streaming=True).resume(
            "cp1", targets={cause.id: None}
        )
    )

    assert describe_all(second) == [
        "inner say after resume",
        "inner call -> after",
        "inner transfer -> after",
        "after say after done",
        "outer call -> next_agent",
        "outer transfer -> next_agent",
        "outer error",
    ]
    assert (
        paths(second) == [("outer", "inner")] * 3 + [("outer", "inner", "after")] + [("outer",)] * 3
    )
    h.assert_transfer_pair(second[4], second[5], "next_agent")
    assert h.error_text(second[-1]) == (
        "transfer failed: agent 'next_agent' not found when transferring from 'outer'"
    )
    # The wrapper (composite) and the inner agent were both resumed.
    assert len(outer2.resume_infos) == 1
    assert outer2.resume_infos[0].was_interrupted and outer2.resume_infos[0].is_resume_target
    assert inner2.inputs == [] and len(inner2.resume_infos) == 1
    assert inner2.resume_infos[0].was_interrupted and inner2.resume_infos[0].is_resume_target
    # The restored isolated events are what the inner tree sees.
    assert h.contents(after2.inputs[0]) == [
        user("test"),
        said("inner", "before interrupt"),
        said("inner", "after resume"),
        *h.rewritten_transfer("inner", "after"),
    ]


def _supervised_leaf_tree(leaf_resume=None):
    """sup → team (a flow agent wrapped to return to sup) → leaf, which interrupts."""

    sup = ScriptedAgent("sup", first_visit_then("sup routes", "team", "sup final"))
    team_agent = ScriptedAgent("team", transfers_to("team plan", "leaf"))
    leaf = ResumableScriptedAgent(
        "leaf",
        stateful_then("leaf working", {"ask": "ok?"}, {"n": 1}),
        leaf_resume or resume_says("leaf done"),
    )
    team = rk.set_sub_agents(team_agent, [leaf])
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])
    return root, sup, team_agent, leaf


async def test_dt10_supervised_wrapped_flow_interrupt_resume_returns_to_supervisor() -> None:
    """DT-10 (supervisor shape): the composite interrupt sits at the wrapper's address, the
    root cause at ``[sup, team, team, leaf]`` (D6); after resume in a new Runner the leaf
    finishes, the wrapper transfers back to sup, and sup reads each inner event exactly once."""
    store = rk.InMemoryCheckpointStore()
    root, *_ = _supervised_leaf_tree()

    first = await collect(
        rk.Runner(root, checkpoint_store=store).query("hello", checkpoint_id="s1")
    )

    assert describe_all(first) == [
        "sup say sup routes",
        "sup call -> team",
        "sup transfer -> team",
        "team say team plan",
        "team call -> leaf",
        "team transfer -> leaf",
        "leaf say leaf working",
        "team interrupt",
    ]
    assert paths(first)[3:] == [("sup", "team")] * 3 + [("sup", "team", "leaf"), ("sup", "team")]
    cause = root_cause(first[-1])
    assert cause.address == addr("sup", "team", "team", "leaf")
    assert cause.info == {"ask": "ok?"}
    assert cause.parent is not None and cause.parent.info == WRAPPER_INTERRUPT_INFO
    assert cause.parent.address == addr("sup", "team")

    root2, sup2, team_agent2, leaf2 = _supervised_leaf_tree()
    second = await collect(
        rk.Runner(root2, checkpoint_store=store).resume("s1", targets={cause.id: "approved"})
    )

    assert describe_all(second) == [
        "leaf say leaf done",
        "team call -> sup",
        "team transfer -> sup",
        "sup say sup final",
    ]
    assert paths(second) == [
        ("sup", "team", "leaf"),
        ("sup", "team"),
        ("sup", "team"),
        ("sup", "team", "sup"),
    ]
    assert leaf2.inputs == [] and len(leaf2.resume_infos) == 1
    leaf_info = leaf2.resume_infos[0]
    assert (
        leaf_info.was_interrupted,
        leaf_info.is_resume_target,
        leaf_info.interrupt_state,
        leaf_info.resume_data,
    ) == (True, True, {"n": 1}, "approved")
    assert team_agent2.inputs == []
    assert h.contents(sup2.inputs[0]) == [
        user("hello"),
        ("assistant", "sup routes"),
        *own_transfer("team"),
        said("team", "team plan"),
        *h.rewritten_transfer("team", "leaf"),
        said("leaf", "leaf working"),
        said("leaf", "leaf done"),
        *h.rewritten_transfer("team", "sup"),
    ]


async def test_dt10_reinterrupt_keeps_isolated_events_and_interrupt_id() -> None:
    """DT-10 / D11: a resumed inner agent that interrupts again is wrapped again; the second
    checkpoint keeps the isolated events of both rounds and the root cause keeps its id."""
    calls = {"n": 0}

    async def leaf_resume(agent, ctx, info):
        calls["n"] += 1
        if calls["n"] == 1:
            yield say("leaf still waiting")
            yield rk.stateful_interrupt(ctx, {"ask": "again?"}, {"n": 2})
        else:
            assert info.interrupt_state == {"n": 2}
            yield say("leaf done")

    store = rk.InMemoryCheckpointStore()
    root, *_ = _supervised_leaf_tree(leaf_resume)
    first = await collect(rk.Runner(root, checkpoint_store=store).query("hello", checkpoint_id="r"))
    first_id = root_cause(first[-1]).id

    root2, *_ = _supervised_leaf_tree(leaf_resume)
    second = await collect(rk.Runner(root2, checkpoint_store=store).resume("r"))
    assert describe_all(second) == ["leaf say leaf still waiting", "team interrupt"]
    assert root_cause(second[-1]).id == first_id
    assert root_cause(second[-1]).info == {"ask": "again?"}

    root3, sup3, *_ = _supervised_leaf_tree(leaf_resume)
    third = await collect(rk.Runner(root3, checkpoint_store=store).resume("r"))
    assert describe_all(third) == [
        "leaf say leaf done",
        "team call -> sup",
        "team transfer -> sup",
        "sup say sup final",
    ]
    assert h.contents(sup3.inputs[0]) == [
        user("hello"),
        ("assistant", "sup routes"),
        *own_transfer("team"),
        said("team", "team plan"),
        *h.rewritten_transfer("team", "leaf"),
        said("leaf", "leaf working"),
        said("leaf", "leaf still waiting"),
        said("leaf", "leaf done"),
        *h.rewritten_transfer("team", "sup"),
    ]


def _chain_in_wrapped_flow_tree(b_script=None):
    """sup → team (wrapped back to sup) whose own agent transfers to b then c (a D3 chain);
    b interrupts."""

    sup = ScriptedAgent("sup", first_visit_then(None, "team", "sup final"))
    b = ResumableScriptedAgent(
        "b", b_script or stateful_then("b waiting", "b?"), resume_says("b done")
    )
    c = ScriptedAgent("c", texts("c done"))
    team = rk.set_sub_agents(ScriptedAgent("team", transfers_to("plan", "b", "c")), [b, c])
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])
    return root, sup, b, c


async def test_dt10_chain_inside_wrapped_flow_runs_without_interrupt() -> None:
    """DT-10 / D3 baseline: a chain inside a wrapped flow agent runs b then c, then returns."""
    root, *_ = _chain_in_wrapped_flow_tree(texts("b plain"))  # no interrupt on this run
    events = await collect(rk.Runner(root).query("hi"))

    assert describe_all(events) == [
        "sup call -> team",
        "sup transfer -> team",
        "team say plan",
        "team call -> b",
        "team transfer -> b",
        "b say b plain",
        "team call -> c",
        "team transfer -> c",
        "c say c done",
        "team call -> sup",
        "team transfer -> sup",
        "sup say sup final",
    ]


async def test_dt10_pending_chain_inside_wrapped_flow_survives_interrupt() -> None:
    """DT-10 / D3: an interrupt in b, the first target of a chain owned by the wrapped flow
    agent, keeps the remainder pending through the composite interrupt: after resume b
    finishes, c runs, then the wrapper transfers back to sup."""
    store = rk.InMemoryCheckpointStore()
    root, *_ = _chain_in_wrapped_flow_tree()
    first = await collect(rk.Runner(root, checkpoint_store=store).query("hi", checkpoint_id="k"))
    assert describe_all(first)[-2:] == ["b say b waiting", "team interrupt"]

    root2, _, _, c2 = _chain_in_wrapped_flow_tree()
    second = await collect(rk.Runner(root2, checkpoint_store=store).resume("k"))

    assert describe_all(second) == [
        "b say b done",
        "team call -> c",
        "team transfer -> c",
        "c say c done",
        "team call -> sup",
        "team transfer -> sup",
        "sup say sup final",
    ]
    assert len(c2.inputs) == 1


# --------------------------------------------------------------------------------------------
# DT-11 — run paths through the wrapper
# --------------------------------------------------------------------------------------------


async def test_dt11_run_paths_through_wrapper_are_outer_inner() -> None:
    """DT-11: every event of the inner flow agent seen by ``outer`` carries ``[outer, inner]``
    (eino TestDeterministicTransferRunPathPreserved); the inner agent's own run path too."""
    inner = ScriptedAgent("inner", texts("one", "two", "three"))
    outer = Outer("outer", rk.with_deterministic_transfer(rk.as_flow_agent(inner), []))

    events = await collect(rk.Runner(outer).query("hi"))

    assert describe_all(events) == ["inner say one", "inner say two", "inner say three"]
    assert paths(events) == [("outer", "inner")] * 3
    assert [ev.agent_name for ev in events] == ["inner"] * 3
    assert inner.run_paths == [("outer", "inner")]


async def test_dt11_registered_wrapper_around_flow_does_not_repeat_step() -> None:
    """DT-11 / D6: a wrapper around flow agent F registered under S gives ``[S, F]``, not
    ``[S, F, F]``, for F's events and for the transfer pair; F's child gets ``[S, F, child]``;
    the transfer back to S nests: ``[S, F, S]``."""

    s = ScriptedAgent("S", first_visit_then(None, "F", "s end"))
    f = ScriptedAgent("F", transfers_to("f1", "child"))
    child = ScriptedAgent("child", texts("c1"))
    root = rk.set_sub_agents(
        s, [rk.with_deterministic_transfer(rk.set_sub_agents(f, [child]), ["S"])]
    )

    events = await collect(rk.Runner(root).query("hi"))

    assert [(d, p) for d, p in zip(describe_all(events), paths(events), strict=True)] == [
        ("S call -> F", ("S",)),
        ("S transfer -> F", ("S",)),
        ("F say f1", ("S", "F")),
        ("F call -> child", ("S", "F")),
        ("F transfer -> child", ("S", "F")),
        ("child say c1", ("S", "F", "child")),
        ("F call -> S", ("S", "F")),
        ("F transfer -> S", ("S", "F")),
        ("S say s end", ("S", "F", "S")),
    ]
    assert f.run_paths == [("S", "F")]
    assert child.run_paths == [("S", "F", "child")]
    assert s.run_paths == [("S",), ("S", "F", "S")]


async def test_dt11_supervisor_like_control_returns_to_supervisor() -> None:
    """DT-11 / D6 (supervisor pattern): sup transfers to a worker wrapped to return to sup; the
    worker's events carry ``[sup, worker]`` and control returns to sup with ``[sup, worker,
    sup]``, which reads the worker's answer and the transfer back."""

    sup = ScriptedAgent("sup", first_visit_then("delegating", "worker", "final answer"))
    worker = ScriptedAgent("worker", texts("worked"))
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(worker, ["sup"])])

    events = await collect(rk.Runner(root).query("task"))

    assert describe_all(events) == [
        "sup say delegating",
        "sup call -> worker",
        "sup transfer -> worker",
        "worker say worked",
        "worker call -> sup",
        "worker transfer -> sup",
        "sup say final answer",
    ]
    assert paths(events) == [("sup",)] * 3 + [("sup", "worker")] * 3 + [("sup", "worker", "sup")]
    h.assert_transfer_pair(events[4], events[5], "sup")
    assert sup.run_paths == [("sup",), ("sup", "worker", "sup")]
    assert h.contents(worker.inputs[0]) == [
        user("task"),
        said("sup", "delegating"),
        *h.rewritten_transfer("sup", "worker"),
    ]
    assert h.contents(sup.inputs[1]) == [
        user("task"),
        ("assistant", "delegating"),
        *own_transfer("worker"),
        said("worker", "worked"),
        *h.rewritten_transfer("worker", "sup"),
    ]


# --------------------------------------------------------------------------------------------
# DT-12 — streaming: transfer events after the stream has ended
# --------------------------------------------------------------------------------------------


def _streaming_script(log: list[str], words: tuple[str, ...]):
    async def script(agent, ctx, input):
        assert input.enable_streaming

        async def chunks():
            try:
                for word in words:
                    log.append(f"chunk {word}")
                    yield rk.Message.assistant(word)
            finally:
                log.append("stream end")

        yield rk.AgentEvent.from_message(rk.MessageStream(chunks()))

    return script


async def test_dt12_transfer_events_come_after_the_stream_has_ended() -> None:
    """DT-12: with streaming output the stream is delivered at once (not delayed), and the
    transfer events reach the caller only after the stream has ended; the caller still reads
    every chunk, and the target reads the whole message."""
    log: list[str] = []
    a = ScriptedAgent("A", _streaming_script(log, ("Hel", "lo ", "world")))
    b = ScriptedAgent("B", texts("b1"))
    root = rk.set_sub_agents(rk.with_deterministic_transfer(a, ["B"]), [b])

    events: list[rk.AgentEvent] = []
    async for ev in rk.Runner(root, streaming=True).query("hi"):
        log.append(f"event {h.describe(ev)}")
        events.append(ev)

    assert log == [
        "event A stream",
        "chunk Hel",
        "chunk lo ",
        "chunk world",
        "stream end",
        "event A call -> B",
        "event A transfer -> B",
        "event B say b1",
    ]
    h.assert_transfer_pair(events[1], events[2], "B")
    stream = events[0].output.stream
    assert [c.content async for c in stream] == ["Hel", "lo ", "world"]
    assert (await events[0].output.get_message()).content == "Hello world"
    assert h.contents(b.inputs[0]) == [
        user("hi"),
        said("A", "Hello world"),
        *h.rewritten_transfer("A", "B"),
    ]


async def test_dt12_streaming_inside_wrapped_flow_transfer_after_stream_end() -> None:
    """DT-12: the same for a wrapped flow agent: the transfer back follows the stream's end."""
    log: list[str] = []

    sup = ScriptedAgent("sup", first_visit_then(None, "team", "sup end"))
    team = rk.as_flow_agent(ScriptedAgent("team", _streaming_script(log, ("a", "b"))))
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])

    async for ev in rk.Runner(root, streaming=True).query("hi"):
        log.append(f"event {h.describe(ev)}")

    assert log == [
        "event sup call -> team",
        "event sup transfer -> team",
        "event team stream",
        "chunk a",
        "chunk b",
        "stream end",
        "event team call -> sup",
        "event team transfer -> sup",
        "event sup say sup end",
    ]


# --------------------------------------------------------------------------------------------
# DT-13 — resume with state of the wrong type: an error event, not a crash
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [None, "not a state", {"events": []}])
async def test_dt13_resume_flow_wrapper_with_wrong_state_yields_error_event(state: Any) -> None:
    """DT-13: resuming a wrapper around a flow agent with an interrupt state that is not the
    wrapper's saved state yields an error event (eino
    TestDeterministicTransferFlowAgent_ResumeWithInvalidState); nothing raises, no transfer,
    the inner agent is not resumed."""
    inner = ResumableScriptedAgent("inner")
    wrapper = rk.with_deterministic_transfer(rk.as_flow_agent(inner), ["next_agent"])
    info = rk.ResumeInfo(was_interrupted=True, interrupt_state=state, is_resume_target=True)

    events = await collect(wrapper.resume(rk.RunContext.new(), info))

    assert len(events) == 1
    assert "invalid interrupt state" in h.error_text(events[0])
    assert inner.resume_infos == []


async def test_dt13_wrong_state_through_runner_is_error_event() -> None:
    """DT-13: through a Runner (an outer agent hands the wrapper a wrong state): the error is
    an event stamped with the outer agent and the run ends cleanly without a transfer."""
    store = rk.InMemoryCheckpointStore()

    class Mangling(Outer):
        async def resume(self, ctx, info, **options):
            self.resume_infos.append(info)
            bad = dataclasses.replace(info, interrupt_state=["wrong", "type"])
            async with aclosing(self.wrapped.resume(ctx, bad)) as events:
                async for ev in events:
                    yield ev

    def build() -> Mangling:
        inner = ResumableScriptedAgent("inner", stateful_then("before", "data"))
        return Mangling(
            "outer", rk.with_deterministic_transfer(rk.as_flow_agent(inner), ["next_agent"])
        )

    await collect(rk.Runner(build(), checkpoint_store=store).query("hi", checkpoint_id="m"))
    events = await collect(rk.Runner(build(), checkpoint_store=store).resume("m"))

    assert describe_all(events) == ["outer error"]
    assert names(events[0].run_path) == ("outer",)
    assert "invalid interrupt state" in h.error_text(events[0])


async def test_dt13_checkpoint_with_wrong_wrapper_state_resumes_to_error_event() -> None:
    """DT-13: a checkpoint whose saved wrapper state was replaced by a value of another type
    (another version wrote it) resumes to an error event, not a crash; the leaf is not resumed
    and the supervisor does not run again."""
    store = rk.InMemoryCheckpointStore()
    root, *_ = _supervised_leaf_tree()
    await collect(rk.Runner(root, checkpoint_store=store).query("hello", checkpoint_id="t"))

    doc = json.loads(await store.get("t"))
    replaced = 0

    def swap(node: Any) -> Any:
        nonlocal replaced
        if isinstance(node, dict):
            if "DeterministicTransferState" in str(node.get("__type__", "")):
                replaced += 1
                return "a plain string, not the wrapper's state"
            return {k: swap(v) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v) for v in node]
        return node

    doc = swap(doc)
    assert replaced == 1
    await store.set("t", json.dumps(doc).encode())

    root2, sup2, _, leaf2 = _supervised_leaf_tree()
    events = await collect(rk.Runner(root2, checkpoint_store=store).resume("t"))

    assert describe_all(events) == ["team error"]
    assert names(events[0].run_path) == ("sup", "team")
    assert "invalid interrupt state" in h.error_text(events[0])
    assert leaf2.resume_infos == [] and sup2.inputs == []


# --------------------------------------------------------------------------------------------
# DT-14 — chains (D3)
# --------------------------------------------------------------------------------------------


async def _a1_streamed(agent, ctx, input):
    yield rk.AgentEvent.from_message(
        rk.MessageStream.from_list([rk.Message.assistant("a"), rk.Message.assistant("1")])
    )


def _chain_tree(
    b_script=None, b_resume=None, c_targets: tuple[str, ...] = ("B", "C"), streamed: bool = False
):
    a = ScriptedAgent("A", _a1_streamed if streamed else texts("a1"))
    b = ResumableScriptedAgent("B", b_script or texts("b1"), b_resume)
    c = ScriptedAgent("C", texts("c1"))
    root = rk.set_sub_agents(rk.with_deterministic_transfer(a, list(c_targets)), [b, c])
    return root, a, b, c


@pytest.mark.parametrize("streamed", [False, True])
async def test_dt14_chain_runs_targets_in_order_each_pair_right_before_its_target(
    streamed: bool,
) -> None:
    """DT-14 / D3: A→[B, C] runs A, B, C in this order of events: A's events, transfer→B,
    B's events, transfer→C, C's events; B never sees "transferred to agent [C]" (also when
    A's message is streamed)."""
    root, _, b, c = _chain_tree(streamed=streamed)
    events = await collect(rk.Runner(root, streaming=streamed).query("go"))

    assert describe_all(events) == [
        "A stream" if streamed else "A say a1",
        "A call -> B",
        "A transfer -> B",
        "B say b1",
        "A call -> C",
        "A transfer -> C",
        "C say c1",
    ]
    assert paths(events) == [("A",)] * 3 + [("A", "B")] + [("A",)] * 2 + [("A", "C")]
    h.assert_transfer_pair(events[1], events[2], "B")
    h.assert_transfer_pair(events[4], events[5], "C")
    assert h.contents(b.inputs[0]) == [user("go"), said("A", "a1"), *h.rewritten_transfer("A", "B")]
    assert not any("[C]" in m.content or '"C"' in m.content for m in b.inputs[0])
    assert h.contents(c.inputs[0]) == [
        user("go"),
        said("A", "a1"),
        *h.rewritten_transfer("A", "B"),
        said("B", "b1"),
        *h.rewritten_transfer("A", "C"),
    ]


async def test_dt14_interrupt_in_b_resumes_b_then_c_runs() -> None:
    """DT-14 / D3: an interrupt inside B keeps C pending (saved in the checkpoint); resuming in
    a new Runner resumes B (with its data) and then delivers transfer→C and runs C."""
    store = rk.InMemoryCheckpointStore()
    root, _, _, c = _chain_tree(stateful_then("b waiting", "approve?", {"b": 1}))

    first = await collect(rk.Runner(root, checkpoint_store=store).query("go", checkpoint_id="ch"))

    assert describe_all(first) == [
        "A say a1",
        "A call -> B",
        "A transfer -> B",
        "B say b waiting",
        "B interrupt",
    ]
    assert c.inputs == []
    cause = root_cause(first[-1])
    assert cause.address == addr("A", "B")

    async def b_resume(agent, ctx, info):
        yield say(f"b got {info.resume_data}")

    root2, _, b2, c2 = _chain_tree(b_resume=b_resume)
    second = await collect(
        rk.Runner(root2, checkpoint_store=store).resume("ch", targets={cause.id: "yes"})
    )

    assert describe_all(second) == ["B say b got yes", "A call -> C", "A transfer -> C", "C say c1"]
    assert paths(second) == [("A", "B"), ("A",), ("A",), ("A", "C")]
    h.assert_transfer_pair(second[1], second[2], "C")
    assert b2.resume_infos[0].interrupt_state == {"b": 1}
    assert h.contents(c2.inputs[0]) == [
        user("go"),
        said("A", "a1"),
        *h.rewritten_transfer("A", "B"),
        said("B", "b waiting"),
        said("B", "b got yes"),
        *h.rewritten_transfer("A", "C"),
    ]


async def test_dt14_exit_in_b_stops_the_chain() -> None:
    """DT-14 / D3: an exit in B stops the chain: C does not run and transfer→C is never
    delivered."""

    async def b_exit(agent, ctx, input):
        yield say("b quits")
        yield rk.AgentEvent.exit()

    root, _, _, c = _chain_tree(b_exit)
    events = await collect(rk.Runner(root).query("go"))

    assert describe_all(events) == [
        "A say a1",
        "A call -> B",
        "A transfer -> B",
        "B say b quits",
        "B exit",
    ]
    assert c.inputs == []


async def test_dt14_error_in_b_stops_the_chain() -> None:
    """DT-14 / D3: an error in B stops the chain as well."""

    async def b_fail(agent, ctx, input):
        raise RuntimeError("b broke")
        yield  # pragma: no cover

    root, _, _, c = _chain_tree(b_fail)
    events = await collect(rk.Runner(root).query("go"))

    assert describe_all(events) == ["A say a1", "A call -> B", "A transfer -> B", "B error"]
    assert c.inputs == []


async def _broken_stream(agent, ctx, input):
    async def chunks():
        yield rk.Message.assistant("partial ")
        raise RuntimeError("stream broke")

    yield rk.AgentEvent.from_message(rk.MessageStream(chunks()))


async def test_dt14_stream_error_in_b_stops_the_chain() -> None:
    """DT-14 / D1 / D3: a streamed message of B whose stream ends in an error counts as an
    error: the chain stops after B, transfer→C is never delivered and C does not run."""
    root, _, _, c = _chain_tree(_broken_stream)
    events = await collect(rk.Runner(root, streaming=True).query("go"))

    assert describe_all(events) == ["A say a1", "A call -> B", "A transfer -> B", "B stream"]
    assert c.inputs == []


async def test_dt14_missing_target_in_chain_is_fa06_error_and_stops() -> None:
    """DT-14 / FA-06: a chain target that cannot be found yields the FA-06 error and the
    rest of the chain does not run."""
    root, _, _, c = _chain_tree(c_targets=("B", "Nobody", "C"))
    events = await collect(rk.Runner(root).query("go"))

    assert describe_all(events) == [
        "A say a1",
        "A call -> B",
        "A transfer -> B",
        "B say b1",
        "A call -> Nobody",
        "A transfer -> Nobody",
        "A error",
    ]
    assert h.error_text(events[-1]) == (
        "transfer failed: agent 'Nobody' not found when transferring from 'A'"
    )
    assert c.inputs == []


async def test_dt14_target_that_transfers_runs_its_own_transfer_first() -> None:
    """DT-14 / D3: a target that itself transfers runs its own transfer before the chain
    continues: A→[B, C] with B→D gives A, B, D, C."""
    a = ScriptedAgent("A", texts("a1"))
    b = ScriptedAgent("B", transfers_to("b1", "D"))
    d = ScriptedAgent("D", texts("d1"))
    c = ScriptedAgent("C", texts("c1"))
    root = rk.set_sub_agents(
        rk.with_deterministic_transfer(a, ["B", "C"]), [rk.set_sub_agents(b, [d]), c]
    )

    events = await collect(rk.Runner(root).query("go"))

    assert describe_all(events) == [
        "A say a1",
        "A call -> B",
        "A transfer -> B",
        "B say b1",
        "B call -> D",
        "B transfer -> D",
        "D say d1",
        "A call -> C",
        "A transfer -> C",
        "C say c1",
    ]
    assert paths(events)[6] == ("A", "B", "D")
    assert paths(events)[9] == ("A", "C")


async def test_dt14_own_transfer_then_deterministic_transfer_chain() -> None:
    """DT-14 / D3: an agent's own trailing transfer and the wrapper's pair form one chain:
    A transfers to X itself and is wrapped with [B]: X runs, then B."""
    a = ScriptedAgent("A", transfers_to("a1", "X"))
    x = ScriptedAgent("X", texts("x1"))
    b = ScriptedAgent("B", texts("b1"))
    root = rk.set_sub_agents(rk.with_deterministic_transfer(a, ["B"]), [x, b])

    events = await collect(rk.Runner(root).query("go"))

    assert describe_all(events) == [
        "A say a1",
        "A call -> X",
        "A transfer -> X",
        "X say x1",
        "A call -> B",
        "A transfer -> B",
        "B say b1",
    ]
    assert not any("[B]" in m.content for m in x.inputs[0])


async def test_dt14_nested_wrappers_run_x_then_i_then_f() -> None:
    """DT-14 / D3: ``with_deterministic_transfer(with_deterministic_transfer(x, [i]), [f])``
    runs x, i, f."""
    x = ScriptedAgent("x", texts("x1"))
    i = ScriptedAgent("i", texts("i1"))
    f = ScriptedAgent("f", texts("f1"))
    nested = rk.with_deterministic_transfer(rk.with_deterministic_transfer(x, ["i"]), ["f"])
    assert nested.name == "x"
    root = rk.set_sub_agents(nested, [i, f])

    events = await collect(rk.Runner(root).query("go"))

    assert describe_all(events) == [
        "x say x1",
        "x call -> i",
        "x transfer -> i",
        "i say i1",
        "x call -> f",
        "x transfer -> f",
        "f say f1",
    ]
    assert not any("[f]" in m.content for m in i.inputs[0])
    assert h.contents(f.inputs[0])[-2:] == h.rewritten_transfer("x", "f")


async def test_dt14_wrapped_flow_agent_interrupt_inside_a_chain_resumes_then_continues() -> None:
    """DT-14 / D3 / DT-10: A→[W(F), C] where the wrapped flow agent F interrupts: resume
    continues F, F's wrapper transfers back to A... and the chain continues with C."""

    def build():
        a = ScriptedAgent("A", texts("a1"))
        f = ResumableScriptedAgent("F", stateful_then("f waiting", "f?"), resume_says("f done"))
        c = ScriptedAgent("C", texts("c1"))
        wf = rk.with_deterministic_transfer(rk.as_flow_agent(f), [])
        return rk.set_sub_agents(rk.with_deterministic_transfer(a, ["F", "C"]), [wf, c]), c

    store = rk.InMemoryCheckpointStore()
    root, c = build()
    first = await collect(rk.Runner(root, checkpoint_store=store).query("go", checkpoint_id="w"))
    assert describe_all(first) == [
        "A say a1",
        "A call -> F",
        "A transfer -> F",
        "F say f waiting",
        "F interrupt",
    ]
    assert c.inputs == []

    root2, c2 = build()
    second = await collect(rk.Runner(root2, checkpoint_store=store).resume("w"))
    assert describe_all(second) == ["F say f done", "A call -> C", "A transfer -> C", "C say c1"]
    assert h.contents(c2.inputs[0])[-3:] == [said("F", "f done"), *h.rewritten_transfer("A", "C")]


def test_dt14_cycle_of_deterministic_transfers_rejected_when_runner_built() -> None:
    """DT-14 / D3 / D13: a cycle made only of deterministic transfers is a ConfigurationError
    when the Runner is built."""
    a = ScriptedAgent("A")
    b = ScriptedAgent("B")
    root = rk.set_sub_agents(
        rk.with_deterministic_transfer(a, ["B"]), [rk.with_deterministic_transfer(b, ["A"])]
    )
    with pytest.raises(rk.errors.ConfigurationError, match="cycle"):
        rk.Runner(root)


# --------------------------------------------------------------------------------------------
# DT-15 — session values shared both ways
# --------------------------------------------------------------------------------------------


async def test_dt15_session_values_shared_both_ways_with_wrapped_flow_agent() -> None:
    """DT-15: values written by the parent (and given to the Runner) are visible inside the
    wrapped flow agent's isolated run, and values it writes are visible to the parent."""
    seen: dict[str, Any] = {}

    async def sup_script(agent, ctx, input):
        if len(input.messages) == 1:  # first visit: only the user input
            ctx.set_session_value("from_parent", "p")
            for ev in transfer_pair("team"):
                yield ev
        else:
            seen["sup"] = dict(ctx.session_values)
            yield say(f"sup sees {ctx.get_session_value('from_child')}")

    async def leaf_script(agent, ctx, input):
        seen["leaf"] = dict(ctx.session_values)
        ctx.set_session_values({"from_child": "c", "counter": ctx.get_session_value("counter") + 1})
        yield say("leaf wrote")

    sup = ScriptedAgent("sup", sup_script)
    team = rk.set_sub_agents(
        ScriptedAgent("team", transfers_to("t", "leaf")), [ScriptedAgent("leaf", leaf_script)]
    )
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])

    events = await collect(rk.Runner(root).query("hi", session_values={"counter": 1}))

    assert seen["leaf"] == {"counter": 1, "from_parent": "p"}
    assert seen["sup"] == {"counter": 2, "from_parent": "p", "from_child": "c"}
    assert describe_all(events)[-1] == "sup say sup sees c"


async def test_dt15_session_values_shared_with_plain_wrapped_agent() -> None:
    """DT-15: the same for a wrapper around a plain agent."""

    async def a_script(agent, ctx, input):
        yield say(f"a sees {ctx.get_session_value('seed')}")
        ctx.set_session_value("by_a", 42)

    async def b_script(agent, ctx, input):
        yield say(f"b sees {ctx.get_session_value('by_a')}")

    root = rk.set_sub_agents(
        rk.with_deterministic_transfer(ScriptedAgent("A", a_script), ["B"]),
        [ScriptedAgent("B", b_script)],
    )
    events = await collect(rk.Runner(root).query("hi", session_values={"seed": "s"}))

    assert describe_all(events) == [
        "A say a sees s",
        "A call -> B",
        "A transfer -> B",
        "B say b sees 42",
    ]


async def test_dt15_values_written_inside_wrapped_flow_survive_interrupt_and_resume() -> None:
    """DT-15 / DT-10: a value written inside the isolated run before an interrupt is saved
    with the checkpoint and visible to the parent after the resume in a new Runner."""

    def build():
        async def sup_script(agent, ctx, input):
            if len(input.messages) == 1:  # first visit: only the user input
                for ev in transfer_pair("team"):
                    yield ev
            else:
                yield say(f"sup sees {ctx.get_session_value('note')}")

        async def leaf_script(agent, ctx, input):
            ctx.set_session_value("note", "written before pause")
            yield rk.interrupt(ctx, "pause")

        sup = ScriptedAgent("sup", sup_script)
        leaf = ResumableScriptedAgent("leaf", leaf_script, resume_says("leaf back"))
        team = rk.set_sub_agents(ScriptedAgent("team", transfers_to("t", "leaf")), [leaf])
        return rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])

    store = rk.InMemoryCheckpointStore()
    await collect(rk.Runner(build(), checkpoint_store=store).query("hi", checkpoint_id="v"))
    events = await collect(rk.Runner(build(), checkpoint_store=store).resume("v"))

    assert describe_all(events)[-1] == "sup say sup sees written before pause"


# --------------------------------------------------------------------------------------------
# Further cases: nested supervisors, skipped transfer messages, nested isolation, early stop
# --------------------------------------------------------------------------------------------


async def test_dt02_exit_deep_in_nested_supervisors_suppresses_every_transfer() -> None:
    """DT-02: an exit that ends up last in the stream suppresses the transfer at every
    enclosing wrapper, so it propagates through nested supervisors (eino §4.3,
    TestNestedSupervisorExit)."""

    async def worker_script(agent, ctx, input):
        yield say("worker quits")
        yield rk.AgentEvent.exit()

    outer = ScriptedAgent("outer", first_visit_then("o", "inner", "outer again"))
    inner = ScriptedAgent("inner", first_visit_then("i", "worker", "inner again"))
    inner_tree = rk.set_sub_agents(
        inner, [rk.with_deterministic_transfer(ScriptedAgent("worker", worker_script), ["inner"])]
    )
    root = rk.set_sub_agents(outer, [rk.with_deterministic_transfer(inner_tree, ["outer"])])

    events = await collect(rk.Runner(root).query("go"))

    assert describe_all(events) == [
        "outer say o",
        "outer call -> inner",
        "outer transfer -> inner",
        "inner say i",
        "inner call -> worker",
        "inner transfer -> worker",
        "worker say worker quits",
        "worker exit",
    ]
    assert paths(events)[-1] == ("outer", "inner", "worker")
    assert len(outer.inputs) == 1 and len(inner.inputs) == 1


async def test_dt01_skip_transfer_messages_drops_wrapper_pairs_from_histories() -> None:
    """DT-01 / D5 / FA-09: the wrapper's pair is a real transfer pair: with
    ``skip_transfer_messages`` it is left out of the next agent's history, like the LLM-style
    pair of the supervisor."""
    sup = ScriptedAgent("sup", first_visit_then("delegating", "worker", "final"))
    worker = ScriptedAgent("worker", texts("worked"))
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(worker, ["sup"])])

    events = await collect(rk.Runner(root).query("task", skip_transfer_messages=True))

    assert describe_all(events)[-1] == "sup say final"
    assert h.contents(worker.inputs[0]) == [user("task"), said("sup", "delegating")]
    assert h.contents(sup.inputs[1]) == [
        user("task"),
        ("assistant", "delegating"),
        said("worker", "worked"),
    ]


def _nested_isolation_tree():
    """sup → W(team) → W(sub) → leaf: two isolating wrappers, the leaf interrupts."""
    sup = ScriptedAgent("sup", first_visit_then("s0", "team", "sup fin"))
    leaf = ResumableScriptedAgent(
        "leaf", stateful_then("l wait", "q?", {"z": 1}), resume_says("l done")
    )
    sub = rk.set_sub_agents(ScriptedAgent("sub", transfers_to("s1", "leaf")), [leaf])
    team_agent = ScriptedAgent("team", first_visit_then("t1", "sub", "team fin"))
    team = rk.set_sub_agents(team_agent, [rk.with_deterministic_transfer(sub, ["team"])])
    root = rk.set_sub_agents(sup, [rk.with_deterministic_transfer(team, ["sup"])])
    return root, sup, team_agent, leaf


async def test_dt10_nested_isolating_wrappers_interrupt_and_resume() -> None:
    """DT-10 / DT-09: two nested isolating wrappers each add a composite around the leaf's
    interrupt; resuming in a new Runner restores both isolated histories (each inner agent
    sees its own earlier events) and every event reaches the supervisor exactly once."""
    store = rk.InMemoryCheckpointStore()
    root, *_ = _nested_isolation_tree()
    first = await collect(rk.Runner(root, checkpoint_store=store).query("hi", checkpoint_id="n"))

    assert describe_all(first)[-2:] == ["leaf say l wait", "team interrupt"]
    cause = root_cause(first[-1])
    chain = []
    ctx: rk.InterruptContext | None = cause
    while ctx is not None:
        chain.append((ctx.address, ctx.info))
        ctx = ctx.parent
    assert chain == [
        (addr("sup", "team", "team", "sub", "sub", "leaf"), "q?"),
        (addr("sup", "team", "team", "sub"), WRAPPER_INTERRUPT_INFO),
        (addr("sup", "team"), WRAPPER_INTERRUPT_INFO),
    ]

    root2, sup2, team2, _ = _nested_isolation_tree()
    second = await collect(rk.Runner(root2, checkpoint_store=store).resume("n"))

    assert list(zip(describe_all(second), paths(second), strict=True)) == [
        ("leaf say l done", ("sup", "team", "sub", "leaf")),
        ("sub call -> team", ("sup", "team", "sub")),
        ("sub transfer -> team", ("sup", "team", "sub")),
        ("team say team fin", ("sup", "team", "sub", "team")),
        ("team call -> sup", ("sup", "team")),
        ("team transfer -> sup", ("sup", "team")),
        ("sup say sup fin", ("sup", "team", "sup")),
    ]
    inner_events = [
        said("sub", "s1"),
        *h.rewritten_transfer("sub", "leaf"),
        said("leaf", "l wait"),
        said("leaf", "l done"),
        *h.rewritten_transfer("sub", "team"),
    ]
    assert h.contents(team2.inputs[0]) == [
        user("hi"),
        ("assistant", "t1"),
        *own_transfer("sub"),
        *inner_events,
    ]
    assert h.contents(sup2.inputs[0]) == [
        user("hi"),
        ("assistant", "s0"),
        *own_transfer("team"),
        said("team", "t1"),
        *h.rewritten_transfer("team", "sub"),
        *inner_events,
        said("team", "team fin"),
        *h.rewritten_transfer("team", "sup"),
    ]


@pytest.mark.parametrize("around_flow", [False, True])
async def test_dt_stopping_early_closes_the_wrapped_agent(around_flow: bool) -> None:
    """DT-01 / DT-09 / RN-05: when the caller stops iterating early, the wrapped agent's
    stream is closed at once (not by garbage collection) and no transfer is appended."""
    log: list[str] = []

    async def script(agent, ctx, input):
        try:
            yield say("one")
            yield say("two")
        finally:
            log.append("closed")

    agent = ScriptedAgent("A", script)
    inner: rk.Agent = rk.as_flow_agent(agent) if around_flow else agent
    b = ScriptedAgent("B")
    root = (
        rk.set_sub_agents(rk.with_deterministic_transfer(inner, ["B"]), [b])
        if not around_flow
        else rk.with_deterministic_transfer(inner, ["B"])
    )

    events = rk.Runner(root).query("hi")
    received = []
    async for ev in events:
        received.append(h.describe(ev))
        break
    assert log == []
    await events.aclose()  # type: ignore[attr-defined]

    assert received == ["A say one"]
    assert log == ["closed"]
    assert b.inputs == []
