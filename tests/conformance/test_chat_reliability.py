"""Conformance: the ChatModelAgent's tool loop under hostile conditions (D9, D15, D23, D24).

Models that send empty or repeated tool-call ids, arguments nested thousands of levels deep,
tools that block, return values that are not JSON, and tools that end with ``CancelledError``,
``GeneratorExit`` or another ``BaseException``. Every model is a ``ScriptedModel``: ``.requests``
shows exactly what the agent sent back. No test asserts a time.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime
import decimal
import json
import threading
import uuid
from typing import Any

import pydantic
import pytest

import relaykit as rk
from relaykit.agents.chat import MAX_ARGUMENT_DEPTH
from relaykit.codec import decode, encode
from relaykit.errors import (
    ConfigurationError,
    MaxIterationsError,
    RelayKitError,
    SerializationError,
)
from relaykit.messages import concat_messages
from relaykit.tools import register_builtin_tool
from tests.conformance.llm_helpers import (
    BaseApprovals,
    agent,
    call,
    calls,
    collect,
    errors,
    interrupt_of,
    run,
    say,
    summarize,
)


@rk.tool
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


def tool_pairs(request: rk.ModelRequest) -> list[tuple[str, str, str]]:
    """``(call id, call arguments, result)`` for each call of the last assistant message of
    ``request``, its result found by id among the tool messages (exactly one per call)."""
    [assistant] = [m for m in request.messages if m.role == "assistant" and m.tool_calls][-1:]
    results = [m for m in request.messages if m.role == "tool"]
    pairs = []
    for c in assistant.tool_calls:
        [result] = [m for m in results if m.tool_call_id == c.id]
        pairs.append((c.id, c.arguments, result.content))
    return pairs


def texts_call(ids: list[str]) -> rk.Message:
    """One ``echo`` call per id, each with its own text (``t0``, ``t1``...)."""
    return calls(*(call("echo", {"text": f"t{n}"}, i) for n, i in enumerate(ids)))


class HistoryReader(rk.BaseAgent):
    """A custom agent that records the messages of the run history as they are resolved (what
    the run history holds for the next agents and the session store)."""

    def __init__(self) -> None:
        super().__init__("reader", "reads the run history")
        self.messages: list[rk.Message] = []

    async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
        for recorded in ctx.history.visible():
            message = await recorded.resolve()
            if message is not None:
                self.messages.append(message)
        if False:  # pragma: no cover - makes this an async generator
            yield


def no_other_tasks() -> bool:
    """True when the test's own task is the only one left (nothing the run started survives)."""
    return asyncio.all_tasks() == {asyncio.current_task()}


# -- D24: empty and repeated tool-call ids -------------------------------------------------------
async def test_empty_and_repeated_call_ids_are_made_unique_and_each_call_gets_its_result() -> None:
    """D24: ids ``["", "", "x", "x"]`` become ``call_0, call_1, x, x_3``; the yielded assistant
    message, the tool events, the history and the next model request all use them, and each
    call is paired with its own result."""
    a, am = agent("A", [texts_call(["", "", "x", "x"]), say("done")], tools=[echo])
    reader = HistoryReader()
    events = await run(rk.SequentialAgent("S", [a, reader]), "go")
    assert errors(events) == []

    expected_ids = ["call_0", "call_1", "x", "x_3"]
    assistant = events[0].output.message  # type: ignore[union-attr]
    assert assistant is not None
    assert [c.id for c in assistant.tool_calls] == expected_ids
    tool_results = {
        ev.output.message.tool_call_id: ev.output.message.content  # type: ignore
        for ev in events[1:5]
    }
    assert tool_results == {
        "call_0": "echo: t0",
        "call_1": "echo: t1",
        "x": "echo: t2",
        "x_3": "echo: t3",
    }
    assert len(am.requests) == 2
    assert tool_pairs(am.requests[1]) == [
        ("call_0", '{"text": "t0"}', "echo: t0"),
        ("call_1", '{"text": "t1"}', "echo: t1"),
        ("x", '{"text": "t2"}', "echo: t2"),
        ("x_3", '{"text": "t3"}', "echo: t3"),
    ]
    # The tool messages follow the call order (D24 does not reorder anything).
    assert [m.tool_call_id for m in am.requests[1].messages[-4:]] == expected_ids
    recorded_calls = [m for m in reader.messages if m.tool_calls]
    assert [c.id for c in recorded_calls[0].tool_calls] == expected_ids
    assert sorted(str(m.tool_call_id) for m in reader.messages if m.role == "tool") == sorted(
        expected_ids
    )


async def test_streamed_reply_keeps_provider_chunks_but_records_unique_call_ids() -> None:
    """D24 streaming: the caller's chunks are the provider's (ids ``"", "", "x", "x"``); the
    collected message — what the run history and the agent keep — has unique ids, and the next
    request pairs each call with its own result."""
    a, am = agent("A", [texts_call(["", "", "x", "x"]), say("done")], tools=[echo])
    reader = HistoryReader()
    events = await run(rk.SequentialAgent("S", [a, reader]), "go", streaming=True)
    assert errors(events) == []

    stream = events[0].output.stream  # type: ignore[union-attr]
    assert stream is not None
    provider_ids = [c.id async for chunk in stream for c in chunk.tool_calls if c.name]
    assert provider_ids == ["", "", "x", "x"]
    expected_ids = ["call_0", "call_1", "x", "x_3"]
    collected = await stream.collect()
    assert [c.id for c in collected.tool_calls] == expected_ids
    assert await events[0].output.get_message() is collected  # type: ignore[union-attr]
    # What a checkpoint or a session stores: the stream's chunks, concatenated.
    assert concat_messages(stream.chunks) == collected
    stored = decode(encode(stream))
    assert [c.id for c in (await stored.collect()).tool_calls] == expected_ids
    assert tool_pairs(am.requests[1]) == [
        ("call_0", '{"text": "t0"}', "echo: t0"),
        ("call_1", '{"text": "t1"}', "echo: t1"),
        ("x", '{"text": "t2"}', "echo: t2"),
        ("x_3", '{"text": "t3"}', "echo: t3"),
    ]
    recorded_calls = [m for m in reader.messages if m.tool_calls]
    assert [c.id for c in recorded_calls[0].tool_calls] == expected_ids
    assert sorted(str(m.tool_call_id) for m in reader.messages if m.role == "tool") == sorted(
        expected_ids
    )


async def test_caller_collecting_the_stream_first_sees_the_unique_ids_too() -> None:
    """D24: whoever collects the streamed reply first (here the caller, before the agent
    resumes) gets the message with unique ids."""
    a, _ = agent("A", [texts_call(["d", "d"]), say("done")], tools=[echo])
    seen: list[list[str]] = []
    async for ev in rk.Runner(a, streaming=True).run([rk.Message.user("go")]):
        if ev.output is not None and ev.output.stream is not None and not seen:
            seen.append([c.id for c in (await ev.output.stream.collect()).tool_calls])
    assert seen == [["d", "d_1"]]


async def test_a_new_id_never_takes_an_id_the_model_gave_another_call() -> None:
    """D24: ``x, x, x_1`` — the repeated ``x`` cannot become ``x_1`` (the third call's own id),
    so it gets another unique id; the third call keeps its id."""
    a, am = agent("A", [texts_call(["x", "x", "x_1"]), say("done")], tools=[echo])
    events = await run(a, "go")
    assert errors(events) == []
    pairs = tool_pairs(am.requests[1])
    ids = [p[0] for p in pairs]
    assert ids[0] == "x" and ids[2] == "x_1" and ids[1].startswith("x_1_")
    assert len(set(ids)) == 3
    assert [p[2] for p in pairs] == ["echo: t0", "echo: t1", "echo: t2"]


async def test_unique_ids_leave_the_model_reply_untouched() -> None:
    """Nothing to fix, nothing copied: the yielded message is the model's own object."""
    reply = texts_call(["a", "b"])
    a, _ = agent("A", [reply, say("done")], tools=[echo])
    events = await run(a, "go")
    assert events[0].output.message is reply  # type: ignore[union-attr]


async def test_rewritten_ids_do_not_modify_the_model_reply() -> None:
    reply = texts_call(["", "x", "x"])
    a, _ = agent("A", [reply, say("done")], tools=[echo])
    events = await run(a, "go")
    assert [c.id for c in reply.tool_calls] == ["", "x", "x"]
    assert [c.id for c in events[0].output.message.tool_calls] == [  # type: ignore[union-attr]
        "call_0",
        "x",
        "x_2",
    ]


@rk.tool
def finish(answer: str) -> str:
    """Give the final answer."""
    return f"FINAL: {answer}"


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
async def test_return_directly_call_with_a_repeated_id_returns_its_own_result(
    streaming: bool,
) -> None:
    """D24 with return-directly: the return-directly call shares its id with an ordinary call;
    its own result (not the other call's) is the last event and the agent's output."""
    a, am = agent(
        "A",
        [calls(call("echo", {"text": "e"}, "same"), call("finish", {"answer": "42"}, "same"))],
        tools=[echo, finish],
        return_directly=["finish"],
        output_key="out",
    )
    events = await run(a, "go", streaming=streaming)
    summary = await summarize(events)
    assert [s[3] for s in summary] == ["call:echo,finish", "echo: e", "FINAL: 42"]
    last = events[-1].output.message  # type: ignore[union-attr]
    assert last is not None and (last.tool_call_id, last.tool_name) == ("same_1", "finish")
    assert len(am.requests) == 1


async def test_exit_call_with_an_empty_id_still_exits() -> None:
    a, _ = agent("A", [calls(call("exit", {"final_result": "bye"}, ""))], exit_tool=True)
    events = await run(a, "go")
    assert await summarize(events) == [
        ("A", ["A"], "assistant", "call:exit", None),
        ("A", ["A"], "tool", "bye", "exit"),
    ]
    msg = events[1].output.message  # type: ignore[union-attr]
    assert msg is not None and msg.tool_call_id == "call_0"


async def test_max_iterations_still_bounds_a_loop_with_repeated_ids() -> None:
    script = [texts_call(["r", "r"]) for _ in range(4)]
    a, am = agent("A", script, tools=[echo], max_iterations=3)
    events = await run(a, "go")
    assert len(am.requests) == 3
    assert isinstance(events[-1].error, MaxIterationsError)


class Approvals(BaseApprovals[str]):
    def record(self, ctx: rk.ToolContext, item: str) -> str:
        return ctx.tool_call_id


async def test_interrupted_calls_with_a_repeated_id_resume_separately() -> None:
    """D24 + D8: two interrupting calls sharing an id get distinct addresses; resuming one
    leaves the other pending; both results reach the model paired with their calls."""
    store = rk.InMemoryCheckpointStore()
    approvals = Approvals()
    a, am = agent(
        "A",
        [
            calls(call("approve", {"item": "a"}, "dup"), call("approve", {"item": "b"}, "dup")),
            say("both approved"),
        ],
        tools=[approvals.tool],
    )
    first = await collect(rk.Runner(a, checkpoint_store=store).query("go", checkpoint_id="cp"))
    contexts = interrupt_of(first).contexts
    assert [c.address[-1].sub_id for c in contexts] == ["dup", "dup_1"]
    by_item = {c.info["approve"]: c for c in contexts}
    second = await collect(
        rk.Runner(a, checkpoint_store=store).resume("cp", targets={by_item["a"].id: "ok-a"})
    )
    [pending] = interrupt_of(second).contexts
    assert pending.id == by_item["b"].id
    third = await collect(
        rk.Runner(a, checkpoint_store=store).resume("cp", targets={pending.id: "ok-b"})
    )
    assert (await summarize(third))[-1][3] == "both approved"
    assert tool_pairs(am.requests[1]) == [
        ("dup", '{"item": "a"}', "a: ok-a"),
        ("dup_1", '{"item": "b"}', "b: ok-b"),
    ]


# -- sync tools run in worker threads -------------------------------------------------------------
async def test_sync_tools_of_one_response_run_concurrently() -> None:
    """A sync tool runs in a worker thread: two sync calls that each wait for the other at a
    barrier both finish (run one after the other on the loop, they would break the barrier)."""
    barrier = threading.Barrier(2, timeout=5)

    @rk.tool
    def meet(side: str) -> str:
        barrier.wait()
        return f"{side} passed"

    a, am = agent(
        "A",
        [
            calls(call("meet", {"side": "left"}, "L"), call("meet", {"side": "right"}, "R")),
            say("both passed"),
        ],
        tools=[meet],
    )
    events = await run(a, "go")
    assert errors(events) == []
    assert tool_pairs(am.requests[1]) == [
        ("L", '{"side": "left"}', "left passed"),
        ("R", '{"side": "right"}', "right passed"),
    ]
    assert (await summarize(events))[-1][3] == "both passed"


async def test_a_blocking_sync_tool_does_not_block_the_event_loop() -> None:
    """While a sync tool blocks, the event loop keeps running: an async tool of the same batch
    releases it (inline, the sync tool would wait forever for a loop that never runs)."""
    released = threading.Event()

    @rk.tool
    def blocks() -> str:
        if not released.wait(timeout=5):
            return "timed out: the loop was blocked"
        return "released"

    @rk.tool
    async def release() -> str:
        await asyncio.sleep(0)
        released.set()
        return "done releasing"

    a, am = agent(
        "A",
        [calls(call("blocks", None, "b"), call("release", None, "r")), say("ok")],
        tools=[blocks, release],
    )
    events = await run(a, "go")
    assert errors(events) == []
    assert [p[2] for p in tool_pairs(am.requests[1])] == ["released", "done releasing"]


REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("REQUEST_ID", default="unset")


async def test_context_variables_set_before_the_run_are_visible_in_a_sync_tool() -> None:
    seen: list[tuple[str, bool]] = []

    @rk.tool
    def whoami() -> str:
        seen.append((REQUEST_ID.get(), threading.current_thread() is threading.main_thread()))
        return REQUEST_ID.get()

    token = REQUEST_ID.set("req-42")
    try:
        a, am = agent("A", [calls(call("whoami", None, "w1")), say("done")], tools=[whoami])
        events = await run(a, "go")
    finally:
        REQUEST_ID.reset(token)
    assert errors(events) == []
    assert seen == [("req-42", False)]  # the value, in a worker thread
    assert am.requests[1].messages[-1].content == "req-42"


# -- reserved tool names --------------------------------------------------------------------------
@pytest.mark.parametrize("reserved", ["transfer_to_agent", "exit", "exit_loop"])
def test_a_user_tool_with_a_reserved_name_is_a_configuration_error(reserved: str) -> None:
    """D24: a user tool named like a built-in would be silently replaced; building the agent
    fails with an error naming the agent and the tool."""

    @rk.tool(name=reserved)
    def impostor(final_result: str = "") -> str:
        return "mine"

    with pytest.raises(ConfigurationError) as err:
        rk.ChatModelAgent("A", "d", model=rk.ScriptedModel([]), tools=[echo, impostor])
    assert "'A'" in str(err.value) and f"'{reserved}'" in str(err.value)


def test_a_registered_builtin_tool_may_carry_a_reserved_name() -> None:
    """The hook for relaykit's own built-ins (``exit_loop``): registered by identity, so a
    look-alike with the same name is still refused."""

    class ExitLoop:
        spec = rk.ToolSpec("exit_loop", "Leave the loop.", {"type": "object", "properties": {}})

        async def call(self, ctx: rk.ToolContext, arguments: dict[str, Any]) -> Any:
            return "left"

    builtin = register_builtin_tool(ExitLoop())
    a = rk.ChatModelAgent("A", "d", model=rk.ScriptedModel([]), tools=[builtin])
    assert a.tools == (builtin,)
    with pytest.raises(ConfigurationError, match="exit_loop"):
        rk.ChatModelAgent("A", "d", model=rk.ScriptedModel([]), tools=[ExitLoop()])


# -- tool results that cannot be JSON -------------------------------------------------------------
@dataclasses.dataclass
class Point:
    x: int
    y: int


class Reading(pydantic.BaseModel):
    at: datetime.datetime
    value: decimal.Decimal


async def test_tool_results_are_converted_to_json_with_pydantic() -> None:
    """Dataclasses, models, datetimes, UUIDs, decimals, bytes (base64) and sets become JSON."""
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")

    @rk.tool
    def rich() -> Any:
        return {
            "point": Point(1, 2),
            "reading": Reading(at=datetime.datetime(2024, 5, 1, 12), value=decimal.Decimal("1.50")),
            "id": ident,
            "raw": b"hi",
            "tags": {"only"},
            "pair": (1, "a"),
            "name": "Zoë",
        }

    a, am = agent("A", [calls(call("rich")), say("done")], tools=[rich])
    events = await run(a, "go")
    assert errors(events) == []
    content = am.requests[1].messages[-1].content
    assert "Zoë" in content  # not \u-escaped
    assert json.loads(content) == {
        "point": {"x": 1, "y": 2},
        "reading": {"at": "2024-05-01T12:00:00", "value": "1.50"},
        "id": "12345678-1234-5678-1234-567812345678",
        "raw": "aGk=",
        "tags": ["only"],
        "pair": [1, "a"],
        "name": "Zoë",
    }


class Opaque:
    """Something pydantic cannot convert."""


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ({"score": float("nan")}, "float NaN"),
        ([1.0, float("inf")], "float infinity"),
        (Point(1, float("-inf")), "float -infinity"),  # type: ignore[arg-type]
        ({"thing": Opaque()}, "of type Opaque"),
        (Opaque(), "of type Opaque"),
    ],
    ids=["nan", "inf", "-inf-in-dataclass", "nested-object", "object"],
)
async def test_a_result_that_cannot_be_json_is_an_error_event_naming_tool_and_type(
    value: Any, what: str
) -> None:
    """A value that cannot be converted, or a non-finite float anywhere in it, fails the tool:
    an error event (D15/FA-13) naming the tool and the offending type; the model never receives
    invalid JSON (it is not called again)."""

    @rk.tool
    def odd() -> Any:
        return value

    a, am = agent("A", [calls(call("odd")), say("never")], tools=[odd])
    events = await run(a, "go")
    summary = await summarize(events)
    assert [s[2] for s in summary] == ["assistant", "error"]
    error = events[-1].error
    assert isinstance(error, SerializationError)
    assert str(error).startswith(
        "tool 'odd' returned a value that cannot be sent to the model as JSON: "
    )
    assert str(error).endswith(what)
    assert len(am.requests) == 1


async def test_a_circular_result_is_an_error_event() -> None:
    loop: list[Any] = []
    loop.append(loop)

    @rk.tool
    def circular() -> Any:
        return loop

    a, _ = agent("A", [calls(call("circular")), say("never")], tools=[circular])
    events = await run(a, "go")
    assert isinstance(events[-1].error, SerializationError)
    assert "tool 'circular'" in str(events[-1].error)


# -- D15/D23: deeply nested arguments go back to the model ----------------------------------------
def nested(levels: int) -> str:
    """JSON arguments nesting objects ``levels`` deep (the arguments object is level 1)."""
    return '{"a":' * levels + "1" + "}" * levels


class RecordingTool:
    """A custom ``Tool`` that records every call it receives."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    @property
    def spec(self) -> rk.ToolSpec:
        return rk.ToolSpec("custom", "A custom tool.", {"type": "object"})

    async def call(self, ctx: rk.ToolContext, arguments: dict[str, Any]) -> Any:
        self.received.append(arguments)
        return "custom ran"


def helper_agent_tool() -> rk.AgentTool:
    inner, _ = agent("helper", [say("helped")])
    return rk.AgentTool(inner)


@pytest.mark.parametrize("tool_name", ["echo", "custom", "helper", "exit"])
@pytest.mark.parametrize("levels", [MAX_ARGUMENT_DEPTH + 1, 5000])
async def test_deeply_nested_arguments_go_back_to_the_model_as_an_error(
    tool_name: str, levels: int
) -> None:
    """D15/D23: arguments nested deeper than the limit (up to thousands of levels: past the
    interpreter's recursion limit) are answered with ``error: ...`` and the model is called
    again — for function, custom, agent and built-in tools alike; the tool is not called."""
    custom = RecordingTool()
    a, am = agent(
        "A",
        [calls(rk.ToolCall("d1", tool_name, nested(levels))), say("sorry")],
        tools=[echo, custom, helper_agent_tool()],
        exit_tool=True,
    )
    events = await run(a, "go")
    assert errors(events) == []
    assert [s[2] for s in await summarize(events)] == ["assistant", "tool", "assistant"]
    sent = am.requests[1].messages[-1]
    assert (sent.role, sent.tool_call_id) == ("tool", "d1")
    assert sent.content == (
        f"error: arguments of tool '{tool_name}' are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
    )
    assert custom.received == []


async def test_arguments_nested_exactly_to_the_limit_reach_the_tool() -> None:
    custom = RecordingTool()
    a, am = agent(
        "A",
        [calls(rk.ToolCall("d1", "custom", nested(MAX_ARGUMENT_DEPTH))), say("ok")],
        tools=[custom],
    )
    events = await run(a, "go")
    assert errors(events) == []
    assert am.requests[1].messages[-1].content == "custom ran"
    [received] = custom.received
    assert json.dumps(received, separators=(",", ":")) == nested(MAX_ARGUMENT_DEPTH)


async def test_many_flat_brackets_are_not_mistaken_for_nesting() -> None:
    """Brackets inside strings and sibling arrays are not depth."""
    text = "[" * 200 + "{" * 200
    args = {"text": text, "rows": [[1], [2]] * 100}
    custom = RecordingTool()
    a, _ = agent(
        "A", [calls(rk.ToolCall("f1", "custom", json.dumps(args))), say("ok")], tools=[custom]
    )
    events = await run(a, "go")
    assert errors(events) == []
    assert custom.received == [args]


# -- D9/D24: tools that end with a BaseException ---------------------------------------------------
async def cancelled_elsewhere() -> None:
    """Await a future that another task cancels (the tool ends with CancelledError although
    nobody cancelled the run)."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.cancel)
    await future


class Custom(BaseException):
    """A BaseException that is neither an Exception nor a cancellation."""


async def raise_generator_exit() -> None:
    raise GeneratorExit


async def raise_custom() -> None:
    raise Custom("odd ending")


ENDINGS = {
    "CancelledError": cancelled_elsewhere,
    "GeneratorExit": raise_generator_exit,
    "Custom": raise_custom,
}


class Sibling:
    """The tool ``patient`` (``self.tool``), a call that is still running when another call of
    its batch fails: it logs ``started``, sets ``self.started``, then ``cancelled`` when it is
    cancelled."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.started = asyncio.Event()

        @rk.tool
        async def patient() -> str:
            self.log.append("started")
            self.started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.log.append("cancelled")
                raise
            return "never"

        self.tool = patient


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_a_tool_ending_with_a_base_exception_is_an_error_event_naming_it(ending: str) -> None:
    """D24/D9: the error event names the tool; nothing hangs or escapes the run; the model is
    not called again."""

    @rk.tool
    async def fragile() -> str:
        await ENDINGS[ending]()
        return "never"

    a, am = agent("A", [calls(call("fragile")), say("never")], tools=[fragile])
    events = await asyncio.wait_for(run(a, "go"), timeout=10)
    summary = await summarize(events)
    assert [s[2] for s in summary] == ["assistant", "error"]
    error = events[-1].error
    assert isinstance(error, RelayKitError)
    assert str(error).startswith(f"tool 'fragile' ended with {ending}")
    assert type(error.__cause__).__name__ == ending
    assert len(am.requests) == 1
    assert no_other_tasks()


@pytest.mark.parametrize("ending", list(ENDINGS))
async def test_a_base_exception_in_a_batch_cancels_and_awaits_the_siblings(ending: str) -> None:
    """With several calls: the failing tool is named, the sibling still running is cancelled
    and awaited, and no task is left behind."""
    sibling = Sibling()

    @rk.tool
    async def fragile() -> str:
        await sibling.started.wait()
        await ENDINGS[ending]()
        return "never"

    a, am = agent(
        "A",
        [calls(call("patient", None, "p"), call("fragile", None, "f")), say("never")],
        tools=[fragile, sibling.tool],
    )
    events = await asyncio.wait_for(run(a, "go"), timeout=10)
    assert [s[2] for s in await summarize(events)] == ["assistant", "error"]
    assert str(events[-1].error).startswith(f"tool 'fragile' ended with {ending}")
    assert sibling.log == ["started", "cancelled"]
    assert len(am.requests) == 1
    assert no_other_tasks()


@pytest.mark.parametrize("ending", [GeneratorExit, asyncio.CancelledError, Custom])
@pytest.mark.parametrize("n_calls", [1, 2])
async def test_a_sync_tool_ending_with_a_base_exception_is_an_error_event(
    ending: type[BaseException], n_calls: int
) -> None:
    """The same for a sync tool, whose ending crosses from its worker thread."""

    @rk.tool
    def ends(n: int) -> str:
        if n == 0:
            raise ending
        return "fine"

    a, am = agent(
        "A",
        [calls(*(call("ends", {"n": n}, f"e{n}") for n in range(n_calls))), say("never")],
        tools=[ends],
    )
    events = await asyncio.wait_for(run(a, "go"), timeout=10)
    assert str(events[-1].error) == f"tool 'ends' ended with {ending.__name__}"
    assert len(am.requests) == 1
    assert no_other_tasks()


async def test_a_tool_that_cancels_its_own_task_in_a_batch_is_an_error_event() -> None:
    @rk.tool
    async def self_cancelling() -> str:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)
        return "never"

    a, am = agent(
        "A",
        [calls(call("echo", {"text": "x"}, "e"), call("self_cancelling", None, "s")), say("never")],
        tools=[echo, self_cancelling],
    )
    events = await asyncio.wait_for(run(a, "go"), timeout=10)
    assert events[-1].error is not None
    assert "tool 'self_cancelling'" in str(events[-1].error)
    assert len(am.requests) == 1
    assert no_other_tasks()


async def test_an_exception_in_a_batch_keeps_its_type_and_notes_the_tool() -> None:
    """An ordinary exception stays the event's error (D9/FA-13), with a note naming the tool
    and call; the siblings are cancelled and awaited."""
    sibling = Sibling()

    @rk.tool
    async def broken() -> str:
        await sibling.started.wait()
        raise ValueError("bad state")

    a, _ = agent(
        "A",
        [calls(call("patient", None, "p"), call("broken", None, "b")), say("never")],
        tools=[broken, sibling.tool],
    )
    events = await run(a, "go")
    error = events[-1].error
    assert isinstance(error, ValueError) and str(error) == "bad state"
    assert error.__notes__ == ["raised by tool 'broken' (tool call 'b')"]
    assert sibling.log == ["started", "cancelled"]
    assert no_other_tasks()


@pytest.mark.parametrize("n_calls", [1, 2])
async def test_cancelling_the_run_from_outside_propagates_and_cancels_the_tools(
    n_calls: int,
) -> None:
    """A cancellation from outside is not an error event: it propagates; every tool task of
    the batch is cancelled and awaited."""
    started = 0
    all_started = asyncio.Event()
    cancelled: list[str] = []

    @rk.tool
    async def wait_forever(n: int) -> str:
        nonlocal started
        started += 1
        if started == n_calls:
            all_started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(f"tool {n}")
            raise
        return "never"

    a, _ = agent(
        "A",
        [calls(*(call("wait_forever", {"n": n}, f"w{n}") for n in range(n_calls)))],
        tools=[wait_forever],
    )
    task = asyncio.ensure_future(run(a, "go"))
    await asyncio.wait_for(all_started.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == [f"tool {n}" for n in range(n_calls)]
    assert no_other_tasks()


@pytest.mark.parametrize(
    "shape",
    [
        "nothing pending",
        "unknown pending",
        "unknown result",
        "call without outcome",
        "repeated ids",
        "bad return",
    ],
)
def test_resume_with_an_inconsistent_state_is_refused(shape: str) -> None:
    """A stored state whose calls, results and pending calls do not match (a corrupt or
    hand-edited checkpoint) is a ConfigurationError before anything runs, not a KeyError
    half-way through the batch."""
    from relaykit.agents.chat import ChatModelAgentState, PendingToolCall, ToolCallResult

    a, b = rk.ToolCall("a", "t", "{}"), rk.ToolCall("b", "t", "{}")
    done = ToolCallResult(rk.Message.tool("ok", tool_call_id="a", tool_name="t"))
    states = {
        "nothing pending": ChatModelAgentState([], [a], {"a": done}, {}),
        "unknown pending": ChatModelAgentState([], [a], {"a": done}, {"x": PendingToolCall()}),
        "unknown result": ChatModelAgentState([], [a], {"x": done}, {"a": PendingToolCall()}),
        "call without outcome": ChatModelAgentState([], [a, b], {}, {"a": PendingToolCall()}),
        "repeated ids": ChatModelAgentState([], [a, a], {}, {"a": PendingToolCall()}),
        "bad return": ChatModelAgentState(
            [], [a], {}, {"a": PendingToolCall()}, return_directly_call="zz"
        ),
    }
    agent = rk.ChatModelAgent("A", "a", "i", rk.ScriptedModel([]))
    info = rk.ResumeInfo(False, None, True, states[shape], True, None)
    with pytest.raises(rk.errors.ConfigurationError, match="inconsistent interrupt state"):
        agent.resume(rk.RunContext(), info)


def test_tools_assigned_after_construction_are_checked_too() -> None:
    """The reserved-name and duplicate checks also apply when ``tools`` is assigned later,
    and the tools are a tuple (an ``append`` cannot slip past the checks)."""

    @rk.tool(name="exit")
    def fake_exit() -> str:
        """Looks like the built-in."""
        return "x"

    agent = rk.ChatModelAgent("A", "a", "i", rk.ScriptedModel([]), exit_tool=True)
    assert agent.tools == ()
    with pytest.raises(rk.errors.ConfigurationError, match="reserved"):
        agent.tools = [fake_exit]
    with pytest.raises(AttributeError):
        agent.tools.append(fake_exit)  # type: ignore[attr-defined]
    assert agent.tools == ()
