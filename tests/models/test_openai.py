"""OpenAIModel against a loopback server speaking the Chat Completions wire protocol."""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest

from relaykit.errors import ConfigurationError, ModelError
from relaykit.messages import Blob, Message, MessageStream, ToolCall
from relaykit.models.base import ModelRequest, ToolSpec
from relaykit.models.openai import OpenAIModel

if TYPE_CHECKING:
    from conftest import MockServer

MakeModel = Callable[..., OpenAIModel]


@pytest.fixture
def make_model(server: MockServer, build_model: Callable[..., Any]) -> MakeModel:
    return functools.partial(
        build_model, OpenAIModel, "gpt-4o-mini", api_key="sk-test", base_url=server.base_url + "/v1"
    )


def completion(
    message: dict[str, Any], *, prompt: int = 11, completion_tokens: int = 5, finish: str = "stop"
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "finish_reason": finish,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        },
    }


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    usage: dict[str, int] | None = None,
    finish: str | None = None,
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-4o-mini",
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def sse(*chunks: dict[str, Any]) -> list[tuple[str | None, Any]]:
    return [(None, c) for c in chunks] + [(None, "[DONE]")]


def error(message: str) -> dict[str, Any]:
    return {
        "error": {"message": message, "type": "invalid_request_error", "code": None, "param": None}
    }


async def test_generate_maps_messages_tools_and_options(
    server: MockServer, make_model: MakeModel, weather_tool: ToolSpec
) -> None:
    server.enqueue_json(completion({"content": "Sunny, 21°C."}, prompt=42, completion_tokens=6))
    model = make_model(temperature=0.2)
    png = b"\x89PNG\r\n\x1a\nfake"
    history = [
        Message.system("You are terse."),
        Message.user("Weather in Paris? See map.", attachments=[Blob("image/png", png)]),
        Message.assistant("", [ToolCall("call_1", "get_weather", '{"city": "Paris"}')]),
        Message.tool('{"temp": 21}', tool_call_id="call_1", tool_name="get_weather"),
    ]
    reply = await model.generate(ModelRequest(history, [weather_tool], {"top_k": 5}))

    assert reply.role == "assistant"
    assert reply.content == "Sunny, 21°C."
    assert reply.tool_calls == []
    assert reply.metadata["usage"] == {"input_tokens": 42, "output_tokens": 6}

    [req] = server.requests
    assert req.method == "POST" and req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer sk-test"
    body = req.body
    assert body["model"] == "gpt-4o-mini"
    assert body["temperature"] == 0.2
    assert body["top_k"] == 5  # not an SDK parameter: sent through extra_body
    assert "stream" not in body or body["stream"] is False
    data_url = "data:image/png;base64," + base64.b64encode(png).decode()
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather in Paris? See map."},
                {"type": "image_url", "image_url": {"url": data_url}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": weather_tool.parameters,
            },
        }
    ]


async def test_generate_returns_tool_calls(
    server: MockServer, make_model: MakeModel, weather_tool: ToolSpec
) -> None:
    server.enqueue_json(
        completion(
            {
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                    },
                ],
            },
            finish="tool_calls",
        )
    )
    reply = await make_model().generate(
        ModelRequest([Message.user("Paris and Rome?")], [weather_tool])
    )
    assert reply.content == ""
    assert [(c.id, c.name) for c in reply.tool_calls] == [
        ("call_a", "get_weather"),
        ("call_b", "get_weather"),
    ]
    assert [json.loads(c.arguments) for c in reply.tool_calls] == [
        {"city": "Paris"},
        {"city": "Rome"},
    ]
    assert reply.metadata["usage"] == {"input_tokens": 11, "output_tokens": 5}


async def test_stream_text_and_tool_call_fragments(
    server: MockServer, make_model: MakeModel, weather_tool: ToolSpec
) -> None:
    server.enqueue_sse(
        sse(
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Let me "}),
            chunk({"content": "check."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"ci'},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'ty": "Rome"}'}}]}),
            chunk({}, finish="tool_calls"),
            chunk(usage={"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}),
        )
    )
    stream = make_model().stream(ModelRequest([Message.user("Paris and Rome?")], [weather_tool]))
    message = await stream.collect()

    assert message.content == "Let me check."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in message.tool_calls] == [
        ("call_a", "get_weather", {"city": "Paris"}),
        ("call_b", "get_weather", {"city": "Rome"}),
    ]
    assert message.metadata["usage"] == {"input_tokens": 30, "output_tokens": 12}
    texts = [c.content for c in stream.chunks if c.content]
    assert texts == ["Let me ", "check."]
    [req] = server.requests
    assert req.body["stream"] is True
    assert req.body["stream_options"] == {"include_usage": True}
    assert req.body["tools"][0]["function"]["name"] == "get_weather"


async def test_retries_429_then_succeeds(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(error("Rate limit reached"), 429)
    server.enqueue_json(completion({"content": "ok"}))
    reply = await make_model().generate(ModelRequest([Message.user("hi")]))
    assert reply.content == "ok"
    assert len(server.requests) == 2
    assert server.bodies[0] == server.bodies[1]


async def test_500_exhausts_retries(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(error("The server had an error"), 500, times=3)
    with pytest.raises(ModelError) as info:
        await make_model(max_retries=2).generate(ModelRequest([Message.user("hi")]))
    assert len(server.requests) == 3
    err = info.value
    assert err.provider == "openai" and err.status == 500
    assert str(err).startswith("openai: HTTP 500 from model 'gpt-4o-mini'")
    assert "The server had an error" in str(err)


async def test_401_is_not_retried(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(error("Incorrect API key provided"), 401)
    with pytest.raises(ModelError) as info:
        await make_model().generate(ModelRequest([Message.user("hi")]))
    assert len(server.requests) == 1
    assert info.value.status == 401 and info.value.provider == "openai"
    assert str(info.value) == (
        "openai: HTTP 401 from model 'gpt-4o-mini': Incorrect API key provided"
    )


async def test_stream_retries_before_first_chunk(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(error("overloaded"), 503)
    server.enqueue_sse(
        sse(
            chunk({"content": "hel"}),
            chunk({"content": "lo"}),
            chunk(usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}),
        )
    )
    message = await make_model().stream(ModelRequest([Message.user("hi")])).collect()
    assert message.content == "hello"
    assert message.metadata["usage"] == {"input_tokens": 3, "output_tokens": 2}
    assert len(server.requests) == 2


async def test_stream_error_after_first_chunk_is_not_retried(
    server: MockServer, make_model: MakeModel
) -> None:
    server.enqueue_sse(
        [(None, chunk({"content": "partial"})), (None, {"error": {"message": "stream broke"}})]
    )
    stream = make_model().stream(ModelRequest([Message.user("hi")]))
    with pytest.raises(ModelError) as info:
        await stream.collect()
    assert "stream broke" in str(info.value)
    assert [c.content for c in stream.chunks] == ["partial"]
    assert len(server.requests) == 1


async def test_stream_401_raises_model_error(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(error("bad key"), 401)
    with pytest.raises(ModelError) as info:
        await make_model().stream(ModelRequest([Message.user("hi")])).collect()
    assert info.value.status == 401
    assert len(server.requests) == 1


async def test_connection_error_is_retried_then_reported(
    closed_port_url: str, make_model: MakeModel
) -> None:
    model = make_model(base_url=closed_port_url + "/v1", max_retries=1)
    with pytest.raises(ModelError) as info:
        await model.generate(ModelRequest([Message.user("hi")]))
    assert info.value.status is None
    assert str(info.value).startswith(
        "openai: connection error calling model 'gpt-4o-mini' (gave up after 2 attempts)"
    )


async def test_key_and_base_url_from_environment(
    server: MockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/env/v1")
    server.enqueue_json(completion({"content": "ok"}))
    model = OpenAIModel("gpt-4o-mini")
    try:
        assert (await model.generate(ModelRequest([Message.user("hi")]))).content == "ok"
    finally:
        await model.aclose()
    assert server.requests[0].path == "/env/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == "Bearer sk-env"


def test_missing_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIModel("gpt-4o-mini")


async def test_unsupported_attachment_is_reported(
    server: MockServer, make_model: MakeModel
) -> None:
    msg = Message.user("see", attachments=[Blob("application/zip", b"PK")])
    model = make_model()
    with pytest.raises(ModelError, match="application/zip"):
        await model.generate(ModelRequest([msg]))
    stream = model.stream(ModelRequest([msg]))  # the error comes out of the stream
    with pytest.raises(ModelError, match="application/zip"):
        await stream.collect()
    assert server.requests == []


async def test_retry_after_ms_header_sets_the_wait(
    server: MockServer, make_model: MakeModel, retry_delays: list[float]
) -> None:
    server.enqueue_json(error("slow down"), 429, headers={"retry-after-ms": "1500"})
    server.enqueue_json(completion({"content": "ok"}))
    assert (await make_model().generate(ModelRequest([Message.user("hi")]))).content == "ok"
    assert retry_delays == [1.5]
    assert len(server.requests) == 2


async def test_retry_after_http_date_waits_until_that_date(
    server: MockServer,
    make_model: MakeModel,
    retry_delays: list[float],
    http_date: Callable[[float], str],
) -> None:
    server.enqueue_json(error("slow down"), 429, headers={"retry-after": http_date(30)})
    server.enqueue_json(completion({"content": "ok"}))
    assert (await make_model().generate(ModelRequest([Message.user("hi")]))).content == "ok"
    [delay] = retry_delays
    assert 28 <= delay <= 30  # the date has whole seconds, and a moment passes on the way
    assert len(server.requests) == 2


async def test_retry_after_past_http_date_adds_no_wait(
    server: MockServer,
    make_model: MakeModel,
    retry_delays: list[float],
    http_date: Callable[[float], str],
) -> None:
    server.enqueue_json(
        error("The server had an error"), 503, headers={"retry-after": http_date(-3600)}
    )
    server.enqueue_json(completion({"content": "ok"}))
    model = make_model(backoff_base=0.25)
    assert (await model.generate(ModelRequest([Message.user("hi")]))).content == "ok"
    [delay] = retry_delays
    assert 0.25 <= delay <= 0.25 * 1.1  # the plain first backoff (with its jitter)


async def test_retry_after_above_max_backoff_fails_at_once(
    server: MockServer, make_model: MakeModel, retry_delays: list[float]
) -> None:
    server.enqueue_json(
        error("Rate limit reached for requests"), 429, headers={"retry-after": "90"}
    )
    with pytest.raises(ModelError) as info:
        await make_model(max_backoff=60).generate(ModelRequest([Message.user("hi")]))
    assert len(server.requests) == 1
    assert retry_delays == []
    assert info.value.status == 429
    assert str(info.value) == (
        "openai: HTTP 429 from model 'gpt-4o-mini': Rate limit reached for requests (the server "
        "asked to wait 90 s before retrying, more than max_backoff=60 s: not retried; pass a "
        "larger max_backoff to wait that long)"
    )


async def test_retry_after_within_max_backoff_is_waited_in_full(
    server: MockServer, make_model: MakeModel, retry_delays: list[float]
) -> None:
    server.enqueue_json(error("slow down"), 429, headers={"retry-after": "60"})
    server.enqueue_json(completion({"content": "ok"}))
    reply = await make_model(max_backoff=60).generate(ModelRequest([Message.user("hi")]))
    assert reply.content == "ok"
    assert retry_delays == [60]


async def test_backoff_doubles_up_to_max_backoff(
    server: MockServer, make_model: MakeModel, retry_delays: list[float]
) -> None:
    server.enqueue_json(error("The server had an error"), 500, times=9)
    model = make_model(max_retries=8, backoff_base=0.5, max_backoff=3)
    with pytest.raises(ModelError, match="gave up after 9 attempts"):
        await model.generate(ModelRequest([Message.user("hi")]))
    assert len(retry_delays) == 8
    assert all(delay <= 3 for delay in retry_delays)
    for delay, plain in zip(retry_delays[:3], [0.5, 1.0, 2.0], strict=True):
        assert plain <= delay <= plain * 1.1  # jitter adds at most 10 %
    assert retry_delays[3:] == [3] * 5


@pytest.mark.usefixtures("no_cyclic_gc")
async def test_abandoned_stream_closes_its_connection(
    server: MockServer,
    make_model: MakeModel,
    first_chunk_then_close: Callable[[MessageStream], Awaitable[Message]],
) -> None:
    # No "[DONE]" and the stream held open: only the client hanging up can end it.
    server.enqueue_sse(
        [(None, chunk({"content": "one "})), (None, chunk({"content": "two"}))], hold_open=True
    )
    first = await first_chunk_then_close(make_model().stream(ModelRequest([Message.user("hi")])))
    assert first.content == "one "
    assert await server.saw_disconnect()
