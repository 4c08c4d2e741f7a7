"""Conformance: D24 (no hangs), with TR-05 (workflows), RN-05 (early stop), DT-05
(deterministic transfer) and TR-03 (agent as a tool).

A parallel branch, a workflow's sub-agent, a transferring agent or an agent tool that ends with
``CancelledError``, ``GeneratorExit`` or another ``BaseException`` never hangs the run and never
hands a bare ``BaseException`` on: it becomes an error event naming the agent or branch.
Cancellation from outside propagates, and every task a workflow started has ended by then.

``asyncio.wait_for(..., TIMEOUT)`` is only a hang guard: a regression fails instead of hanging.
Where a leaf agent raises, the error may be turned into an event by the leaf's own flow agent
(``agent 'b' ended with ...``) or, for a ``Bare`` sub-agent that forwards its agent's stream
untouched, by the workflow or wrapper itself; the tests with ``Bare`` pin the latter path.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import relaykit as rk
from relaykit._aio import closing  # any async iterator (the Runner's are typed so)
from relaykit.errors import RelayKitError
from tests.conformance.helpers import RaisingAgent, names
from tests.conformance.llm_helpers import agent, call, calls, say

TIMEOUT = 10  # seconds; a hang guard only, no test depends on timing


class Meltdown(BaseException):
    """A custom ``BaseException`` subclass, neither an ``Exception`` nor a cancellation."""


class Chatty(rk.BaseAgent):
    """Yields ``count`` messages (``<name> 1`` ...), yielding to the loop before each; with
    ``count=None`` forever. Records whether it started, finished, and was closed."""

    def __init__(self, name: str, count: int | None = 2) -> None:
        super().__init__(name, f"{name} desc")
        self.count = count
        self.started = asyncio.Event()
        self.completed = False
        self.closed = False

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.started.set()
        try:
            n = 0
            while self.count is None or n < self.count:
                await asyncio.sleep(0)
                n += 1
                yield rk.AgentEvent.from_message(rk.Message.assistant(f"{self.name} {n}"))
            self.completed = True
        finally:
            self.closed = True


class Blocked(rk.BaseAgent):
    """Says ``<name> waiting``, then waits for an event that never comes; records whether its
    generator was closed (its ``finally`` ran)."""

    def __init__(self, name: str) -> None:
        super().__init__(name, f"{name} desc")
        self.waiting = asyncio.Event()
        self.closed = False

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        try:
            yield rk.AgentEvent.from_message(rk.Message.assistant(f"{self.name} waiting"))
            self.waiting.set()
            await asyncio.Event().wait()
        finally:
            self.closed = True


class AwaitsCancelledFuture(rk.BaseAgent):
    """Says ``<name> waiting``, then awaits a future that another task cancels: the
    ``CancelledError`` it gets is not a cancellation of the run."""

    def __init__(self, name: str) -> None:
        super().__init__(name, f"{name} desc")

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        yield rk.AgentEvent.from_message(rk.Message.assistant(f"{self.name} waiting"))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def cancel_it() -> None:
            future.cancel()

        canceller = asyncio.create_task(cancel_it())
        try:
            await future
        finally:
            await canceller


class RaisesOnceBlocked(rk.BaseAgent):
    """Waits until ``other`` is blocked, says ``<name> 1``, then raises ``error``."""

    def __init__(self, name: str, error: BaseException, other: Blocked) -> None:
        super().__init__(name, f"{name} desc")
        self.error = error
        self.other = other

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        await self.other.waiting.wait()
        yield rk.AgentEvent.from_message(rk.Message.assistant(f"{self.name} 1"))
        raise self.error


class Bare(rk.FlowAgent):
    """A flow agent that only stamps its agent's events (no history, no transfers, no error
    events): whatever the agent raises reaches the workflow or wrapper above it."""

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput | None = None, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        path = (*ctx.run_path, rk.RunStep(self.name))
        async with closing(self.agent.run(ctx, rk.AgentInput(), **options)) as evs:
            async for ev in evs:
                yield ev.stamped(self.name, path)


def raiser(name: str, error: BaseException, before: tuple[str, ...] = ()) -> RaisingAgent:
    agent = RaisingAgent(name, error, list(before))
    agent.description = f"{name} desc"
    return agent


ENDINGS: list[tuple[Callable[[], BaseException], str]] = [
    (asyncio.CancelledError, "CancelledError"),
    (GeneratorExit, "GeneratorExit"),
    (lambda: Meltdown("core too hot"), "Meltdown: core too hot"),
]
ENDING_IDS = ["CancelledError", "GeneratorExit", "Meltdown"]


async def events_of(root: rk.Agent, text: str = "go") -> list[rk.AgentEvent]:
    """Every event of a Runner over ``root`` (under the hang guard)."""

    async def collect() -> list[rk.AgentEvent]:
        return [ev async for ev in rk.Runner(root).query(text)]

    return await asyncio.wait_for(collect(), TIMEOUT)


def texts(events: list[rk.AgentEvent]) -> list[tuple[str, str]]:
    """``(agent, text)`` per event; an error's text is ``!<error text>``."""
    out = []
    for ev in events:
        if ev.error is not None:
            out.append((ev.agent_name, f"!{ev.error}"))
        else:
            assert ev.output is not None and ev.output.message is not None
            out.append((ev.agent_name, ev.output.message.content))
    return out


def the_error(events: list[rk.AgentEvent]) -> rk.AgentEvent:
    """The single error event among ``events``; its error is never a bare BaseException."""
    found = [ev for ev in events if ev.error is not None]
    assert len(found) == 1, texts(events)
    assert isinstance(found[0].error, RelayKitError)
    return found[0]


def only_this_task_left() -> bool:
    return asyncio.all_tasks() == {asyncio.current_task()}


async def cancel_while_blocked(root: rk.Agent, *blocked: Blocked) -> list[rk.AgentEvent]:
    """Consume a Runner over ``root`` in a task, cancel that task once every agent of
    ``blocked`` waits, and check that the task ended cancelled; the events it had seen."""
    seen: list[rk.AgentEvent] = []

    async def consume() -> None:
        async for ev in rk.Runner(root).query("go"):
            seen.append(ev)

    consumer = asyncio.create_task(consume())
    await asyncio.wait_for(asyncio.gather(*(b.waiting.wait() for b in blocked)), TIMEOUT)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(consumer, TIMEOUT)
    assert consumer.cancelled()
    return seen


# -- parallel: a branch ends with a BaseException --------------------------------------------------
@pytest.mark.parametrize(("make", "shown"), ENDINGS, ids=ENDING_IDS)
async def test_parallel_branch_ending_with_a_base_exception_is_an_error_event_naming_it(
    make: Callable[[], BaseException], shown: str
) -> None:
    """D24 / TR-05: branch b says one thing, then raises; the run ends with an error event
    naming b, the sibling's events are delivered (or cancelled), nothing is left running."""
    a, b = Chatty("a"), raiser("b", make(), ("b 1",))
    events = await events_of(rk.ParallelAgent("fan", [a, b]))

    error = the_error(events)
    assert error.agent_name == "b"
    assert str(error.error).endswith(f"'b' ended with {shown}")
    said = texts(events)
    assert said.index(("b", "b 1")) < said.index(("b", f"!{error.error}"))
    a_said = [text for who, text in said if who == "a"]
    assert a_said == ["a 1", "a 2"][: len(a_said)]  # delivered, in order, or cancelled
    assert a.closed
    assert only_this_task_left()


async def test_parallel_branch_awaiting_a_future_another_task_cancelled_is_an_error_event() -> None:
    """D24: a CancelledError the branch got from a future someone else cancelled is that
    branch's ending (an error event), not a cancellation of the run."""
    a, b = Chatty("a"), AwaitsCancelledFuture("b")
    events = await events_of(rk.ParallelAgent("fan", [a, b]))

    error = the_error(events)
    assert error.agent_name == "b"
    assert str(error.error).endswith("'b' ended with CancelledError")
    assert error.error is not None
    assert isinstance(error.error.__cause__, asyncio.CancelledError)
    assert ("b", "b waiting") in texts(events)
    assert only_this_task_left()


@pytest.mark.parametrize(("make", "shown"), ENDINGS, ids=ENDING_IDS)
async def test_parallel_branch_that_raises_itself_cancels_and_awaits_its_siblings(
    make: Callable[[], BaseException], shown: str
) -> None:
    """D24: a branch that itself ends with a BaseException stops the parallel workflow: the
    blocked sibling is cancelled (its generator closed) and awaited, then one error event
    ``parallel branch 'b' ended with ...`` ends the run; no interrupt, nothing after it."""
    a = Blocked("a")
    b = RaisesOnceBlocked("b", make(), a)  # the sibling is surely blocked when b fails
    events = await events_of(rk.ParallelAgent("fan", [a, Bare(b)]))

    assert texts(events) == [
        ("a", "a waiting"),
        ("b", "b 1"),
        ("b", f"!parallel branch 'b' ended with {shown}"),
    ]
    assert names(events[-1].run_path) == ["fan"]
    assert a.closed
    assert only_this_task_left()


async def test_parallel_branch_with_an_ordinary_error_lets_its_siblings_finish() -> None:
    """D17 for parallel (kept): an ordinary exception ends only its branch; the sibling
    runs to its end and its events are all delivered."""
    a, b = Chatty("a", 3), raiser("b", RuntimeError("b broke"), ("b 1",))
    events = await events_of(rk.ParallelAgent("fan", [a, b]))

    said = texts(events)
    assert [t for who, t in said if who == "a"] == ["a 1", "a 2", "a 3"]
    assert [t for who, t in said if who == "b"] == ["b 1", "!b broke"]
    assert a.completed


# -- parallel: cancellation from outside, early stop ---------------------------------------------
async def test_parallel_cancelled_from_outside_propagates_and_leaves_no_task() -> None:
    """D24: cancelling the task that consumes a running parallel workflow raises
    CancelledError in that task (no error event); every branch was cancelled and awaited."""
    a, b = Blocked("a"), Blocked("b")
    seen = await cancel_while_blocked(rk.ParallelAgent("fan", [a, b]), a, b)

    assert a.closed and b.closed
    assert all(ev.error is None for ev in seen)
    assert only_this_task_left()


@pytest.mark.parametrize("blocked", [False, True], ids=["producing", "blocked"])
async def test_parallel_early_break_closes_every_branch_generator(blocked: bool) -> None:
    """RN-05 / D24: breaking out of the events while branches still produce (or while one is
    blocked) closes every branch's generator and leaves no task, before aclose() returns."""
    a = Chatty("a", None)
    b: Chatty | Blocked = Blocked("b") if blocked else Chatty("b", None)

    async def consume() -> list[str]:
        seen: list[str] = []
        events = rk.Runner(rk.ParallelAgent("fan", [a, b])).query("go")
        async with closing(events):
            async for ev in events:
                seen.append(ev.agent_name)
                if seen.count("a") == 3:
                    break
        return seen

    seen = await asyncio.wait_for(consume(), TIMEOUT)
    assert seen.count("a") == 3
    assert a.closed and b.closed
    assert only_this_task_left()


# -- sequential and loop ------------------------------------------------------------------------
@pytest.mark.parametrize("bare", [False, True], ids=["flow", "bare"])
@pytest.mark.parametrize(("make", "shown"), ENDINGS, ids=ENDING_IDS)
async def test_sequential_sub_agent_ending_with_a_base_exception_stops_with_an_error_event(
    make: Callable[[], BaseException], shown: str, bare: bool
) -> None:
    """D24 / D17: S[a, b, c] with b raising after one message: a's and b's message, then
    ``agent 'b' ended with ...``; c never runs."""
    a, b, c = Chatty("a", 1), raiser("b", make(), ("b 1",)), Chatty("c", 1)
    events = await events_of(rk.SequentialAgent("S", [a, Bare(b) if bare else b, c]))

    assert texts(events) == [("a", "a 1"), ("b", "b 1"), ("b", f"!agent 'b' ended with {shown}")]
    assert not c.started.is_set()
    assert only_this_task_left()


async def test_sequential_sub_agent_awaiting_a_cancelled_future_is_an_error_event() -> None:
    """D24: the CancelledError of a future another task cancelled ends b, not the run."""
    after = Chatty("after", 1)
    events = await events_of(rk.SequentialAgent("S", [AwaitsCancelledFuture("b"), after]))

    assert texts(events) == [("b", "b waiting"), ("b", "!agent 'b' ended with CancelledError")]
    assert not after.started.is_set()


@pytest.mark.parametrize("bare", [False, True], ids=["flow", "bare"])
@pytest.mark.parametrize(("make", "shown"), ENDINGS, ids=ENDING_IDS)
async def test_loop_sub_agent_ending_with_a_base_exception_stops_the_loop(
    make: Callable[[], BaseException], shown: str, bare: bool
) -> None:
    """D24 / D17: L[a, b] (3 iterations) with b raising in its second run: two rounds of a,
    one of b, then the error; the loop stops there."""
    runs: list[int] = []

    class SecondTimeRaises(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            runs.append(1)
            yield rk.AgentEvent.from_message(rk.Message.assistant(f"b {len(runs)}"))
            if len(runs) == 2:
                raise make()

    a = Chatty("a", 1)
    b = SecondTimeRaises("b", "b desc")
    loop = rk.LoopAgent("L", [a, Bare(b) if bare else b], max_iterations=3)
    events = await events_of(loop)

    assert texts(events) == [
        ("a", "a 1"),
        ("b", "b 1"),
        ("a", "a 1"),
        ("b", "b 2"),
        ("b", f"!agent 'b' ended with {shown}"),
    ]
    assert len(runs) == 2


async def test_sequential_cancelled_from_outside_propagates() -> None:
    """D24: cancellation from outside is not an error event: it reaches the consumer."""
    blocked = Blocked("b")
    seen = await cancel_while_blocked(rk.SequentialAgent("S", [Bare(blocked)]), blocked)
    assert texts(seen) == [("b", "b waiting")]
    assert blocked.closed
    assert only_this_task_left()


@pytest.mark.parametrize("workflow", ["sequential", "loop"])
async def test_early_break_out_of_a_workflow_closes_it_without_an_error(workflow: str) -> None:
    """RN-05: the GeneratorExit that closing the workflow throws in at its yield propagates
    (it is not mistaken for the sub-agent's ending): no error, the sub-agent is closed."""
    endless = Chatty("e", None)
    sub = Bare(endless)
    root: rk.Agent = (
        rk.SequentialAgent("S", [sub])
        if workflow == "sequential"
        else rk.LoopAgent("L", [sub], max_iterations=2)
    )

    async def consume() -> list[rk.AgentEvent]:
        seen: list[rk.AgentEvent] = []
        events = rk.Runner(root).query("go")
        async with closing(events):
            async for ev in events:
                seen.append(ev)
                if len(seen) == 2:
                    break
        return seen

    seen = await asyncio.wait_for(consume(), TIMEOUT)
    assert texts(seen) == [("e", "e 1"), ("e", "e 2")]
    assert endless.closed and not endless.completed


# -- deterministic transfer -----------------------------------------------------------------------
@pytest.mark.parametrize(("make", "shown"), ENDINGS, ids=ENDING_IDS)
async def test_transfer_wrapper_turns_a_base_exception_into_an_error_event(
    make: Callable[[], BaseException], shown: str
) -> None:
    """D24 / DT-05: a supervised worker ending with a BaseException is an error event naming
    it; no transfer back to the supervisor follows, and the run ends."""
    sup, _ = agent("sup", [calls(call("transfer_to_agent", {"agent_name": "w"})), say("never")])
    events = await events_of(rk.Supervisor(sup, [raiser("w", make(), ("w 1",))]))

    error = the_error(events)
    assert events[-1] is error
    assert (error.agent_name, str(error.error)) == ("w", f"agent 'w' ended with {shown}")
    assert names(error.run_path) == ["sup", "w"]
    assert ("w", "w 1") in texts(events[:-1])


@pytest.mark.parametrize(("make", "shown"), ENDINGS, ids=ENDING_IDS)
async def test_transfer_wrapper_around_a_flow_agent_turns_a_base_exception_into_an_error(
    make: Callable[[], BaseException], shown: str
) -> None:
    """D24 / DT-09: the wrapper's isolated run of a flow agent that raises a BaseException
    ends with an error event, and nothing is transferred."""
    team = Bare(raiser("team", make(), ("team 1",)))
    after = Chatty("after", 1)
    root = rk.SequentialAgent("S", [rk.with_deterministic_transfer(team, ["after"]), after])
    events = await events_of(root)

    assert texts(events) == [("team", "team 1"), ("team", f"!agent 'team' ended with {shown}")]
    assert not after.started.is_set()


@pytest.mark.parametrize("inner", ["agent", "flow agent"])
@pytest.mark.parametrize(("make", "shown"), ENDINGS, ids=ENDING_IDS)
async def test_transfer_wrapper_itself_yields_the_error_event_and_no_transfer(
    make: Callable[[], BaseException], shown: str, inner: str
) -> None:
    """D24 / DT-05: the wrapper's own stream (no flow agent above it to catch anything):
    the inner agent's message, then its error event; no transfer pair, nothing raised."""
    worker: rk.Agent = raiser("w", make(), ("w 1",))
    if inner == "flow agent":  # the isolated run (DT-09)
        worker = Bare(worker)
    wrapper = rk.with_deterministic_transfer(worker, ["sup"])

    async def collect() -> list[rk.AgentEvent]:
        return [ev async for ev in wrapper.run(rk.RunContext.new(), rk.AgentInput())]

    events = await asyncio.wait_for(collect(), TIMEOUT)
    assert [
        (
            ev.output.message.content if ev.output and ev.output.message else None,
            str(ev.error) if ev.error else None,
        )
        for ev in events
    ] == [("w 1", None), (None, f"agent 'w' ended with {shown}")]
    assert isinstance(events[-1].error, RelayKitError)


@pytest.mark.parametrize("inner", ["agent", "flow agent"])
async def test_transfer_wrapper_closed_early_closes_the_inner_agent_without_an_error(
    inner: str,
) -> None:
    """RN-05: closing the wrapper's stream at its yield propagates the GeneratorExit (not
    taken for the inner agent's ending): the inner agent is closed, aclose() succeeds."""
    endless = Chatty("w", None)
    worker: rk.Agent = Bare(endless) if inner == "flow agent" else endless
    events = rk.with_deterministic_transfer(worker, ["sup"]).run(
        rk.RunContext.new(), rk.AgentInput()
    )
    async with closing(events):
        first = await asyncio.wait_for(anext(events), TIMEOUT)
    assert first.error is None
    assert endless.closed and not endless.completed


async def test_transfer_wrapper_cancelled_from_outside_propagates() -> None:
    """D24: outside cancellation passes through the wrapper: no error event, no transfer."""
    sup, _ = agent("sup", [calls(call("transfer_to_agent", {"agent_name": "w"}))])
    worker = Blocked("w")
    seen = await cancel_while_blocked(rk.Supervisor(sup, [worker]), worker)
    assert all(ev.error is None for ev in seen)
    assert worker.closed
    assert only_this_task_left()


# -- agent tool ------------------------------------------------------------------------------------
async def test_agent_tool_whose_agent_raises_cancelled_error_is_an_error_event_of_the_caller() -> (
    None
):
    """D24 / TR-03: the inner agent of a tool raises CancelledError; the calling ChatModelAgent
    ends with an error event (a RelayKitError naming the inner agent), the run ends and the
    CancelledError never reaches the caller bare."""
    inner = raiser("inner", asyncio.CancelledError())
    lead, model = agent(
        "lead", [calls(call("inner", {"request": "x"})), say("never")], tools=[rk.AgentTool(inner)]
    )
    events = await events_of(lead)

    error = the_error(events)
    assert events[-1] is error
    assert error.agent_name == "lead"
    assert str(error.error).endswith("'inner' ended with CancelledError")
    assert len(model.requests) == 1


async def test_agent_tool_never_reraises_a_bare_base_exception_carried_by_an_error_event() -> None:
    """D24: an inner error *event* carrying a bare CancelledError is raised into the caller
    as ``agent tool 'inner' ended with CancelledError``, with the original as its cause."""
    cancelled = asyncio.CancelledError()

    class YieldsCancelled(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            yield rk.AgentEvent(error=cancelled)

    inner = YieldsCancelled("inner", "inner desc")
    lead, _ = agent(
        "lead", [calls(call("inner", {"request": "x"})), say("never")], tools=[rk.AgentTool(inner)]
    )
    events = await events_of(lead)

    error = the_error(events)
    assert (error.agent_name, str(error.error)) == (
        "lead",
        "agent tool 'inner' ended with CancelledError",
    )
    assert error.error is not None and error.error.__cause__ is cancelled


@pytest.mark.parametrize("ending", ["cancelled", "generator_exit", "tool_cancelled"])
async def test_real_branch_ending_with_a_base_exception_cancels_its_siblings(ending: str) -> None:
    """D24 with ordinary agents (no test-only flow wrapper): a leaf agent -- or a tool of an
    LLM agent -- in one branch ending with CancelledError / GeneratorExit stops the parallel
    workflow: the sibling is cancelled and awaited, and the run ends with one error event
    naming the branch."""
    sibling_closed = asyncio.Event()

    class Waits(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            try:
                yield rk.AgentEvent.from_message(rk.Message.assistant("a start"))
                await asyncio.Event().wait()  # never set: only a cancellation ends it
                yield rk.AgentEvent.from_message(rk.Message.assistant("a never"))
            finally:
                sibling_closed.set()

    class Ends(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            yield rk.AgentEvent.from_message(rk.Message.assistant("b start"))
            await asyncio.sleep(0)
            if ending == "cancelled":
                fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                asyncio.get_running_loop().call_soon(fut.cancel)
                await fut
            raise GeneratorExit

    @rk.tool
    async def wait_for_cancelled() -> str:
        """Awaits a future someone else cancels."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.cancel)
        await fut
        return "never"

    if ending == "tool_cancelled":
        b: rk.Agent = rk.ChatModelAgent(
            "b",
            "b",
            "use the tool",
            rk.ScriptedModel(
                [rk.Message.assistant("", [rk.ToolCall("c1", "wait_for_cancelled", "{}")])]
            ),
            tools=[wait_for_cancelled],
        )
    else:
        b = Ends("b", "b")
    fan = rk.ParallelAgent("fan", [Waits("a", "a"), b])
    events = await asyncio.wait_for(_collect_events(rk.Runner(fan).query("go")), 10)
    texts = [
        ev.output.message.content
        for ev in events
        if ev.output is not None and ev.output.message is not None
    ]
    assert "a never" not in texts
    assert sibling_closed.is_set()
    last = events[-1]
    assert isinstance(last.error, rk.errors.AbortedError)
    assert str(last.error).startswith("parallel branch 'b' ended with ")
    assert [e for e in events if e.error is not None] == [last]


async def _collect_events(events: AsyncIterator[rk.AgentEvent]) -> list[rk.AgentEvent]:
    return [ev async for ev in events]
