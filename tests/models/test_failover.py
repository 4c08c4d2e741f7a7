"""FailoverModel: models tried once each, in order; attempts in the answer's metadata."""

from __future__ import annotations

import asyncio
import functools
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import relaykit as rk
from relaykit.errors import AgentRunError, ConfigurationError, ModelError
from relaykit.messages import Message, MessageStream, ToolCall
from relaykit.models import FailoverModel, default_should_fail_over
from relaykit.models.base import ModelRequest
from relaykit.models.openai import OpenAIModel
from relaykit.models.scripted import ScriptedModel

if TYPE_CHECKING:
    from conftest import MockServer

ROOT = Path(__file__).resolve().parents[2]


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest([Message.user(text)])


def down(status: int = 503) -> ModelError:
    return ModelError(f"HTTP {status}", provider="test", status=status)


class BrokenStream:
    """A ChatModel whose stream yields ``chunks`` then raises ``error`` (it never generates)."""

    def __init__(self, name: str, chunks: list[Message], error: Exception) -> None:
        self.name = name
        self.chunks = chunks
        self.error = error
        self.calls = 0
        self.closed = False

    async def generate(self, request: ModelRequest) -> Message:
        raise AssertionError("only stream is used")

    def stream(self, request: ModelRequest) -> MessageStream:
        self.calls += 1
        return MessageStream(self._chunks())

    async def _chunks(self) -> AsyncIterator[Message]:
        try:
            for chunk in self.chunks:
                yield chunk
            raise self.error
        finally:
            self.closed = True


# -- construction --------------------------------------------------------------------------------
def test_name_lists_the_models_in_order_and_can_be_given() -> None:
    a, b = ScriptedModel([], name="a"), ScriptedModel([], name="b")
    assert FailoverModel([a, b]).name == "failover(a, b)"
    assert FailoverModel([a, b], name="chat").name == "chat"
    assert rk.FailoverModel is FailoverModel
    assert isinstance(FailoverModel([a]), rk.ChatModel)


@pytest.mark.parametrize(
    ("models", "kwargs", "message"),
    [
        ([], {}, "FailoverModel needs at least one model to try"),
        (
            [ScriptedModel([]), "openai:gpt-4o"],
            {},
            "FailoverModel: model 1 ('openai:gpt-4o') is not a ChatModel",
        ),
        ([object()], {}, "FailoverModel: model 0 (<object object"),
        (ScriptedModel([]), {}, "FailoverModel takes a list of models"),
        (
            [ScriptedModel([])],
            {"should_fail_over": True},
            "FailoverModel: should_fail_over must be a function",
        ),
    ],
)
def test_bad_arguments_are_configuration_errors(
    models: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match="^" + re.escape(message)):
        FailoverModel(models, **kwargs)


def test_a_string_item_gets_a_from_string_hint() -> None:
    with pytest.raises(ConfigurationError, match=r"from_string\('openai:gpt-4o'\)"):
        FailoverModel(["openai:gpt-4o"])  # type: ignore[list-item]


# -- the default predicate -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "fails_over"),
    [
        (down(429), True),
        (down(408), True),
        (down(500), True),
        (down(503), True),
        (down(529), True),
        (down(400), False),
        (down(401), False),
        (down(404), False),
        (ModelError("ran out of responses", provider="scripted"), False),
        (TimeoutError("read timed out"), True),
        (ConnectionResetError("reset by peer"), True),
        (ConfigurationError("no API key"), False),
        (ValueError("bug"), False),
    ],
)
def test_default_predicate(error: Exception, fails_over: bool) -> None:
    assert default_should_fail_over(error) is fails_over


def test_default_predicate_follows_the_cause_of_a_connection_model_error() -> None:
    try:
        try:
            raise ConnectionRefusedError("refused")
        except ConnectionRefusedError as exc:
            raise ModelError("openai: connection error", provider="openai") from exc
    except ModelError as wrapped:
        assert default_should_fail_over(wrapped)


# -- generate ------------------------------------------------------------------------------------
async def test_generate_fails_over_in_order_and_records_the_attempts() -> None:
    a = ScriptedModel([down(429)], name="a")
    b = ScriptedModel([TimeoutError("read timed out")], name="b")
    c = ScriptedModel([Message.assistant("from c")], name="c")
    d = ScriptedModel([Message.assistant("from d")], name="d")
    reply = await FailoverModel([a, b, c, d]).generate(request("q"))
    assert reply.content == "from c"
    assert reply.metadata["attempts"] == [
        {"model": "a", "error": "ModelError: HTTP 429"},
        {"model": "b", "error": "TimeoutError: read timed out"},
        {"model": "c", "error": None},
    ]
    # Each model got the same request once; the one after the answer was not called.
    assert [[m.content for m in x.requests[0].messages] for x in (a, b, c)] == [["q"]] * 3
    assert len(a.requests) == len(b.requests) == len(c.requests) == 1
    assert d.requests == []


async def test_generate_keeps_the_answer_metadata_and_does_not_change_the_models_message() -> None:
    answer = Message.assistant("ok")
    answer.metadata = {"usage": {"input_tokens": 3, "output_tokens": 1}}
    reply = await FailoverModel([ScriptedModel([answer], name="only")]).generate(request())
    assert reply.metadata == {
        "usage": {"input_tokens": 3, "output_tokens": 1},
        "attempts": [{"model": "only", "error": None}],
    }
    assert answer.metadata == {"usage": {"input_tokens": 3, "output_tokens": 1}}


async def test_a_non_matching_error_stops_at_once() -> None:
    bad_request = down(400)
    a = ScriptedModel([down(503)], name="a")
    b = ScriptedModel([bad_request], name="b")
    c = ScriptedModel([Message.assistant("never")], name="c")
    with pytest.raises(ModelError) as info:
        await FailoverModel([a, b, c]).generate(request())
    assert info.value is bad_request  # the model's own error, as without failover
    assert info.value.__notes__ == [
        "failover(a, b, c): a -> ModelError: HTTP 503; b -> ModelError: HTTP 400; not failed over"
    ]
    assert c.requests == []


async def test_the_first_models_non_matching_error_is_raised_unchanged() -> None:
    bug = ValueError("bug in a tool schema")
    b = ScriptedModel([Message.assistant("never")], name="b")
    with pytest.raises(ValueError) as info:
        await FailoverModel([ScriptedModel([bug]), b]).generate(request())
    assert info.value is bug and not hasattr(bug, "__notes__")
    assert b.requests == []


async def test_a_custom_predicate_decides() -> None:
    a = ScriptedModel([down(400)], name="a")
    b = ScriptedModel([Message.assistant("b answered")], name="b")
    seen: list[Exception] = []

    def always(exc: Exception) -> bool:
        seen.append(exc)
        return True

    reply = await FailoverModel([a, b], should_fail_over=always).generate(request())
    assert reply.content == "b answered"
    assert [str(e) for e in seen] == ["HTTP 400"]

    c = ScriptedModel([down(503)], name="c")
    d = ScriptedModel([Message.assistant("never")], name="d")
    with pytest.raises(ModelError, match="HTTP 503"):
        await FailoverModel([c, d], should_fail_over=lambda exc: False).generate(request())
    assert d.requests == []


async def test_all_failing_names_every_attempt_with_the_last_error_as_cause() -> None:
    last = ConnectionResetError("reset by peer")
    models = [
        ScriptedModel([down(429)], name="a"),
        ScriptedModel([down(502)], name="b"),
        ScriptedModel([last], name="c"),
    ]
    with pytest.raises(ModelError) as info:
        await FailoverModel(models).generate(request())
    assert str(info.value) == (
        "failover(a, b, c): all 3 models failed: a -> ModelError: HTTP 429; "
        "b -> ModelError: HTTP 502; c -> ConnectionResetError: reset by peer"
    )
    assert info.value.__cause__ is last
    assert info.value.provider == "failover" and info.value.status is None


async def test_nested_failover_hands_on_when_the_inner_one_is_exhausted() -> None:
    inner = FailoverModel(
        [ScriptedModel([down(503)], name="a"), ScriptedModel([down(500)], name="b")]
    )
    c = ScriptedModel([Message.assistant("from c")], name="c")
    reply = await FailoverModel([inner, c]).generate(request())
    assert reply.content == "from c"
    assert reply.metadata["attempts"] == [
        {
            "model": "failover(a, b)",
            "error": "ModelError: failover(a, b): all 2 models failed: "
            "a -> ModelError: HTTP 503; b -> ModelError: HTTP 500",
        },
        {"model": "c", "error": None},
    ]


async def test_cancellation_is_not_failed_over() -> None:
    started = asyncio.Event()

    class Hangs:
        name = "hangs"

        async def generate(self, request: ModelRequest) -> Message:
            started.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        def stream(self, request: ModelRequest) -> MessageStream:
            raise AssertionError("unused")

    b = ScriptedModel([Message.assistant("never")], name="b")
    task = asyncio.create_task(FailoverModel([Hangs(), b]).generate(request()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert b.requests == []


# -- stream --------------------------------------------------------------------------------------
async def test_stream_fails_over_before_the_first_chunk() -> None:
    a = BrokenStream("a", [], down(503))
    answer = Message.assistant("Paris is the capital")
    answer.metadata = {"usage": {"input_tokens": 5, "output_tokens": 4}}
    b = ScriptedModel([answer], name="b")
    stream = FailoverModel([a, b]).stream(request())
    chunks = [c async for c in stream]
    assert [c.content for c in chunks] == ["Paris ", "is ", "the ", "capital"]
    attempts = [{"model": "a", "error": "ModelError: HTTP 503"}, {"model": "b", "error": None}]
    assert chunks[0].metadata == {"attempts": attempts}
    collected = await stream.collect()
    assert collected.content == "Paris is the capital"
    assert collected.metadata == {
        "attempts": attempts,
        "usage": {"input_tokens": 5, "output_tokens": 4},
    }
    assert a.calls == 1 and a.closed


async def test_stream_does_not_fail_over_after_the_first_chunk() -> None:
    a = BrokenStream("a", [Message.assistant("Par")], down(503))
    b = ScriptedModel([Message.assistant("never")], name="b")
    stream = FailoverModel([a, b]).stream(request())
    seen: list[str] = []
    with pytest.raises(ModelError, match="HTTP 503") as info:
        async for chunk in stream:
            seen.append(chunk.content)
    assert seen == ["Par"]  # the caller saw output: it is not repeated by another model
    assert info.value.status == 503
    assert b.requests == []
    assert stream.error is info.value


async def test_stream_with_a_non_matching_error_before_the_first_chunk_stops() -> None:
    a = BrokenStream("a", [], down(401))
    b = ScriptedModel([Message.assistant("never")], name="b")
    with pytest.raises(ModelError, match="HTTP 401"):
        await FailoverModel([a, b]).stream(request()).collect()
    assert b.requests == []


async def test_stream_all_failing_raises_one_model_error() -> None:
    last = TimeoutError("timed out")
    models = [BrokenStream("a", [], down(429)), BrokenStream("b", [], last)]
    with pytest.raises(ModelError) as info:
        await FailoverModel(models).stream(request()).collect()
    assert str(info.value) == (
        "failover(a, b): all 2 models failed: a -> ModelError: HTTP 429; "
        "b -> TimeoutError: timed out"
    )
    assert info.value.__cause__ is last


async def test_stream_fails_over_when_stream_itself_raises() -> None:
    class NoStream:
        name = "nostream"

        async def generate(self, request: ModelRequest) -> Message:
            raise AssertionError("unused")

        def stream(self, request: ModelRequest) -> MessageStream:
            raise ConnectionRefusedError("refused")

    b = ScriptedModel([Message.assistant("ok")], name="b")
    reply = await FailoverModel([NoStream(), b]).stream(request()).collect()
    assert reply.content == "ok"
    assert reply.metadata["attempts"][0] == {
        "model": "nostream",
        "error": "ConnectionRefusedError: refused",
    }


async def test_stopping_a_stream_early_closes_the_models_stream() -> None:
    a = BrokenStream("a", [Message.assistant("one "), Message.assistant("two")], down(503))
    stream = FailoverModel([a]).stream(request())
    async for _ in stream:
        break
    await stream.aclose()
    assert a.closed


# -- real provider errors ------------------------------------------------------------------------
@pytest.fixture
def openai_model(server: MockServer, build_model: Callable[..., Any]) -> Callable[..., OpenAIModel]:
    return functools.partial(
        build_model,
        OpenAIModel,
        "gpt-4o-mini",
        api_key="sk-test",
        base_url=server.base_url + "/v1",
        max_retries=0,
    )


def _error_body(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "x", "code": None, "param": None}}


async def test_an_openai_rate_limit_fails_over(
    server: MockServer, openai_model: Callable[..., OpenAIModel]
) -> None:
    server.enqueue_json(_error_body("slow down"), status=429)
    backup = ScriptedModel([Message.assistant("backup answer")], name="backup")
    reply = await FailoverModel([openai_model(), backup]).generate(request())
    assert reply.content == "backup answer"
    assert reply.metadata["attempts"] == [
        {"model": "openai:gpt-4o-mini", "error": reply.metadata["attempts"][0]["error"]},
        {"model": "backup", "error": None},
    ]
    assert reply.metadata["attempts"][0]["error"].startswith(
        "ModelError: openai: HTTP 429 from model 'gpt-4o-mini'"
    )


async def test_an_openai_bad_request_does_not_fail_over(
    server: MockServer, openai_model: Callable[..., OpenAIModel]
) -> None:
    server.enqueue_json(_error_body("unknown parameter"), status=400)
    backup = ScriptedModel([Message.assistant("never")], name="backup")
    with pytest.raises(ModelError) as info:
        await FailoverModel([openai_model(), backup]).generate(request())
    assert info.value.status == 400
    assert backup.requests == []


async def test_an_unreachable_openai_server_fails_over_when_streaming(
    closed_port_url: str, openai_model: Callable[..., OpenAIModel]
) -> None:
    backup = ScriptedModel([Message.assistant("backup answer")], name="backup")
    model = FailoverModel([openai_model(base_url=closed_port_url + "/v1"), backup])
    reply = await model.stream(request()).collect()
    assert reply.content == "backup answer"
    assert reply.metadata["attempts"][0]["error"].startswith(
        "ModelError: openai: connection error calling model 'gpt-4o-mini'"
    )


# -- inside an agent -----------------------------------------------------------------------------
def _weather_agent(model: rk.ChatModel) -> rk.ChatModelAgent:
    @rk.tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    return rk.ChatModelAgent("weather", "Weather.", "Answer briefly.", model, tools=[get_weather])


def _scripts() -> tuple[ScriptedModel, ScriptedModel]:
    primary = ScriptedModel(
        [
            Message.assistant("", [ToolCall("c1", "get_weather", '{"city": "Paris"}')]),
            down(503),
        ],
        name="primary",
    )
    backup = ScriptedModel(
        [lambda req: Message.assistant(f"It is {req.messages[-1].content}.")], name="backup"
    )
    return primary, backup


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_chat_model_agent_run_through_the_runner_fails_over(streaming: bool) -> None:
    primary, backup = _scripts()
    agent = _weather_agent(FailoverModel([primary, backup]))
    result = await rk.Runner(agent, streaming=streaming).invoke("Weather in Paris?")
    replies: list[Message] = []
    for ev in result.events:
        if ev.output is not None and ev.output.role == "assistant":
            out = ev.output
            if out.stream is not None:
                assert streaming
                replies.append(await out.stream.collect())
            else:
                assert out.message is not None
                replies.append(out.message)
    assert [r.content for r in replies] == ["", "It is sunny in Paris."]
    # The first call was answered by the primary; the second failed over to the backup.
    assert replies[0].metadata["attempts"] == [{"model": "primary", "error": None}]
    assert replies[1].metadata["attempts"] == [
        {"model": "primary", "error": "ModelError: HTTP 503"},
        {"model": "backup", "error": None},
    ]
    # The backup model saw the whole conversation, the tool result included.
    assert [m.role for m in backup.requests[0].messages] == ["system", "user", "assistant", "tool"]


async def test_an_agent_whose_models_all_fail_reports_every_attempt() -> None:
    models = [ScriptedModel([down(503)], name="a"), ScriptedModel([down(429)], name="b")]
    agent = rk.ChatModelAgent("helper", "", "", FailoverModel(models))
    with pytest.raises(AgentRunError) as info:
        await rk.Runner(agent).invoke("hi")
    cause = info.value.__cause__
    assert isinstance(cause, ModelError)
    assert str(cause) == (
        "failover(a, b): all 2 models failed: a -> ModelError: HTTP 503; b -> ModelError: HTTP 429"
    )


# -- the example ---------------------------------------------------------------------------------
def test_the_failover_example_runs_offline() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "examples.failover"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    ).stdout
    assert out.splitlines() == [
        "Paris is the capital of France.",
        "primary: ModelError: openai: HTTP 503 from model 'gpt-4o': overloaded",
        "backup: answered",
    ]
