"""A Runner runs a tree flat (``FlowAgent.run_flat``): it iterates an agent's own stream
itself, stamps and records the plain messages inline, and a deterministic-transfer wrapper's
transfers (its epilogue) are delivered by the flow agent once the wrapped stream ended. These
tests check that a flat run delivers what ``FlowAgent.run`` (which forwards every event
through the flow agent's and the wrapper's generators) delivers, and records the same history.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import pytest

import relaykit as rk
from relaykit.context import RecordedEvent

Script = Callable[[rk.RunContext], AsyncIterator[rk.AgentEvent]]


class Scripted(rk.BaseAgent):
    """Runs ``script``; keeps the run history it saw when it started (as plain tuples)."""

    def __init__(self, name: str, script: Script) -> None:
        super().__init__(name, name)
        self.script = script
        self.seen: list[list[tuple[Any, ...]]] = []

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.seen.append([_record(rec) for rec in ctx.history.events])
        async with aclosing(self.script(ctx)) as events:  # type: ignore[type-var]
            async for ev in events:
                yield ev


def _record(rec: RecordedEvent) -> tuple[Any, ...]:
    # Reading every slot: a record built without one of them fails here.
    ev = rec.event
    message = rec.message.content if rec.message is not None else None
    return (ev.agent_name, _names(ev.run_path), message, rec.rewritten, rec.skip, type(rec.seq))


def _names(path: rk.RunPath) -> tuple[str, ...]:
    return tuple(step.agent_name for step in path)


def _say(text: str) -> rk.AgentEvent:
    return rk.AgentEvent.from_message(rk.Message.assistant(text))


def _describe(ev: rk.AgentEvent) -> tuple[Any, ...]:
    """Every field of a delivered event (each slot read: a copy missing one fails here)."""
    msg = ev.output.message if ev.output is not None else None
    action = ev.action
    return (
        ev.agent_name,
        _names(ev.run_path),
        (msg.role, msg.content, [c.name for c in msg.tool_calls]) if msg is not None else None,
        (
            action.exit,
            action.transfer_to_agent.dest_agent_name
            if action.transfer_to_agent is not None
            else None,
        )
        if action is not None
        else None,
        (type(ev.error).__name__, str(ev.error)) if ev.error is not None else None,
        ev.state_delta,
        ev.internal,
        ev.stored_id,
    )


async def _says(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
    yield _say("one")
    yield _say("two")


async def _raises_after_a_message(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
    yield _say("partial")
    raise ValueError("kaboom")


async def _raises_generator_exit(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
    yield _say("partial")
    raise GeneratorExit("raised by the agent")


async def _raises_a_cancelled_error_of_its_own(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
    yield _say("partial")
    other = asyncio.get_running_loop().create_future()
    other.cancel()
    await other  # another task's cancellation: not the run's


async def _exits(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
    yield _say("bye")
    yield rk.AgentEvent.exit()


async def _calls_a_tool(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
    call = rk.ToolCall("c1", "lookup", "{}")
    yield rk.AgentEvent.from_message(rk.Message.assistant("", [call]))
    yield rk.AgentEvent.from_message(
        rk.Message.tool("found", tool_call_id="c1", tool_name="lookup"), role="tool"
    )
    yield _say("done")


async def _transfers_itself(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
    yield _say("over to B")
    yield rk.AgentEvent.transfer("B")


async def _says_nothing(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
    return
    yield  # pragma: no cover


async def _sets_state(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
    ev = _say("noted")
    ev.state_delta = {"k": 1}
    yield ev


SCRIPTS = [
    _says,
    _raises_after_a_message,
    _raises_generator_exit,
    _raises_a_cancelled_error_of_its_own,
    _exits,
    _calls_a_tool,
    _transfers_itself,
    _says_nothing,
    _sets_state,
]


def _tree(script: Script) -> tuple[rk.FlowAgent, Scripted]:
    """R -> A (wrapped: a deterministic transfer to B) -> B, which says what it saw."""
    b = Scripted("B", _says)
    a = rk.with_deterministic_transfer(Scripted("A", script), ["B"])
    mid = rk.set_sub_agents(a, [b])

    async def route(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
        yield rk.AgentEvent.transfer("A")

    return rk.set_sub_agents(Scripted("R", route), [mid]), b


async def _flat(script: Script) -> tuple[list[tuple[Any, ...]], list[list[tuple[Any, ...]]]]:
    root, b = _tree(script)
    events = [_describe(ev) async for ev in rk.Runner(root).query("go")]
    return events, b.seen


async def _forwarded(script: Script) -> tuple[list[tuple[Any, ...]], list[list[tuple[Any, ...]]]]:
    root, b = _tree(script)
    stream = root.run(rk.RunContext.new(), rk.AgentInput([rk.Message.user("go")]))
    async with aclosing(stream) as events:  # type: ignore[type-var]
        return [_describe(ev) async for ev in events], b.seen


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.__name__.strip("_"))
async def test_a_flat_run_delivers_and_records_what_forwarding_does(script: Script) -> None:
    flat_events, flat_seen = await _flat(script)
    events, seen = await _forwarded(script)
    assert flat_events == events
    assert flat_seen == seen


async def test_the_wrapper_transfers_after_its_agent_in_a_flat_run() -> None:
    events, seen = await _flat(_says)
    assert [(name, path, msg[1] if msg else None) for name, path, msg, *_ in events] == [
        ("R", ("R",), None),
        ("A", ("R", "A"), "one"),
        ("A", ("R", "A"), "two"),
        ("A", ("R", "A"), ""),
        ("A", ("R", "A"), "successfully transferred to agent [B]"),
        ("B", ("R", "A", "B"), "one"),
        ("B", ("R", "A", "B"), "two"),
    ]
    assert events[4][3] == (False, "B")  # the transfer action, after the call message
    # B read the history the flat run recorded: every event before it, stamped.
    assert [(name, path, text) for name, path, text, *_ in seen[0]] == [
        (name, path, msg[1] if msg else None) for name, path, msg, *_ in events[:5]
    ]


async def test_an_error_of_the_wrapped_agent_ends_it_without_transfers_in_a_flat_run() -> None:
    events, seen = await _flat(_raises_after_a_message)
    assert [(ev[0], ev[2], ev[4]) for ev in events[1:]] == [
        ("A", ("assistant", "partial", []), None),
        ("A", None, ("ValueError", "kaboom")),
    ]
    assert seen == []  # B never ran


async def test_a_generator_exit_the_wrapped_agent_raises_is_its_error_event() -> None:
    events, _ = await _flat(_raises_generator_exit)
    assert events[-1][0] == "A"
    assert events[-1][4] is not None and "GeneratorExit" in events[-1][4][1]


async def test_stopping_a_flat_run_early_closes_the_wrapped_agents_stream() -> None:
    closed: list[str] = []

    async def endless(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
        try:
            while True:
                yield _say("more")
        finally:
            closed.append("A")

    root, _ = _tree(endless)
    handle = rk.Runner(root).query("go")
    seen = 0
    async for ev in handle:
        if ev.agent_name == "A":
            seen += 1
            if seen == 3:
                break
    await handle.aclose()
    assert closed == ["A"]


async def test_a_cancellation_from_outside_propagates_through_a_flat_run() -> None:
    started = asyncio.Event()

    async def waits(ctx: rk.RunContext) -> AsyncIterator[rk.AgentEvent]:
        yield _say("waiting")
        started.set()
        await asyncio.Event().wait()

    root, b = _tree(waits)

    async def consume() -> list[rk.AgentEvent]:
        return [ev async for ev in rk.Runner(root).query("go")]

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert b.seen == []


# -- found by a differential review of flat runs against FlowAgent.run ----------------------
class _TransfersThenPassesANestedError(rk.BaseAgent):
    """Transfers to ``b``, then yields a nested agent's error, which does not end the chain."""

    async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
        yield rk.AgentEvent.transfer("b")
        yield rk.AgentEvent("inner", (rk.RunStep("inner"),), error=ValueError("inner failed"))


class _Silent(rk.BaseAgent):
    async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
        return
        yield


class _Say(rk.BaseAgent):
    async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
        yield _say(f"{self.name} here")


def _transfers(events: list[rk.AgentEvent]) -> list[tuple[str, str | None, str | None]]:
    out = []
    for e in events:
        action = e.action
        dest = (
            action.transfer_to_agent.dest_agent_name
            if action and action.transfer_to_agent
            else None
        )
        out.append((e.agent_name, dest, e.message.content if e.message else None))
    return out


async def test_an_agent_that_yields_nothing_is_not_judged_by_the_previous_agents_last_event() -> (
    None
):
    def tree() -> rk.FlowAgent:
        silent = rk.with_deterministic_transfer(_Silent("b", "b"), ["c"])
        b = rk.set_sub_agents(silent, [_Say("c", "c")])
        return rk.set_sub_agents(_TransfersThenPassesANestedError("a", "a"), [b])

    flat = [e async for e in rk.Runner(tree()).query("go")]
    forwarded = [
        e async for e in tree().run(rk.RunContext.new(), rk.AgentInput([rk.Message.user("go")]))
    ]
    assert _transfers(flat) == _transfers(forwarded)
    assert _transfers(flat)[-1] == ("c", None, "c here")  # b's deterministic transfer ran


async def test_an_agent_yielding_a_non_event_fails_as_itself_in_a_flat_run() -> None:
    class Wrong(rk.BaseAgent):
        async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[Any]:
            yield rk.Message.assistant("not an AgentEvent")

    class ToB(rk.BaseAgent):
        async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
            yield rk.AgentEvent.transfer("b")

    root = rk.set_sub_agents(ToB("a", "a"), [Wrong("b", "b")])
    errors = [e async for e in rk.Runner(root).query("go") if e.error is not None]
    assert [(e.agent_name, _names(e.run_path)) for e in errors] == [("b", ("a", "b"))]
    assert isinstance(errors[0].error, AttributeError)


async def test_a_run_replaced_on_a_flow_agent_instance_is_called_for_a_transfer() -> None:
    calls: list[str] = []
    target = rk.as_flow_agent(_Say("t", "t"))
    original = target.run

    def traced(ctx: rk.RunContext, input: Any = None, **options: Any) -> Any:
        calls.append("t.run")
        return original(ctx, input, **options)

    target.run = traced  # type: ignore[method-assign]

    class ToT(rk.BaseAgent):
        async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
            yield rk.AgentEvent.transfer("t")

    await rk.Runner(rk.set_sub_agents(ToT("a", "a"), [target])).invoke("go")
    assert calls == ["t.run"]


async def test_a_target_whose_stream_ends_in_its_own_cancellation_stops_the_chain() -> None:
    """A stream ending in a CancelledError of its own (a cancelled future it awaited, not the
    run's cancellation) ended abnormally: the chain stops there and nothing escapes (D9)."""

    class Chain(rk.BaseAgent):
        async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
            yield rk.AgentEvent.transfer("b")
            yield rk.AgentEvent.transfer("c")

    class Cut(rk.BaseAgent):
        async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
            async def chunks() -> AsyncIterator[rk.Message]:
                yield rk.Message.assistant("x")
                cancelled = asyncio.get_running_loop().create_future()
                cancelled.cancel()
                await cancelled

            yield rk.AgentEvent.from_message(rk.MessageStream(chunks()))

    root = rk.set_sub_agents(Chain("a", "a"), [Cut("b", "b"), _Say("c", "c")])
    names = [e.agent_name async for e in rk.Runner(root).query("go")]
    assert names == ["a", "b"]  # c is not reached, and no CancelledError reached us


async def test_closing_a_run_whose_agent_fails_in_its_finally_raises_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class FailsOnCleanup(rk.BaseAgent):
        async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
            try:
                yield _say("one")
                yield _say("two")
            finally:
                raise ValueError("cleanup failed")

    handle = rk.Runner(FailsOnCleanup("a", "a")).query("go")
    first = await anext(handle)
    assert first.message is not None and first.message.content == "one"
    with caplog.at_level("WARNING", logger="relaykit"):
        await handle.aclose()  # the agent's failure is logged, not raised at the caller
    assert any(
        "ValueError while the run was being closed" in r.getMessage() for r in caplog.records
    )
