"""OpenAIModel against a loopback server speaking the Chat Completions wire protocol."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import pytest

from relaykit.errors import ConfigurationError, ModelError
from relaykit.messages import Blob, Message, ToolCall
from relaykit.models.base import ModelRequest, ToolSpec
from relaykit.models.openai import OpenAIModel

if TYPE_CHECKING:
    from conftest import MockServer

MakeModel = Callable[..., OpenAIModel]

WEATHER = ToolSpec("get_weather", "Current weather for a city",
                   {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]})


@pytest.fixture
async def make_model(server: MockServer) -> AsyncIterator[MakeModel]:
    models: list[OpenAIModel] = []

    def make(**kwargs: Any) -> OpenAIModel:
        kwargs.setdefault("api_key", "sk-test")
        kwargs.setdefault("base_url", server.base_url + "/v1")
        kwargs.setdefault("backoff_base", 0.001)
        model = OpenAIModel("gpt-4o-mini", **kwargs)
        models.append(model)
        return model

    yield make
    for model in models:
        await model.aclose()


def completion(message: dict[str, Any], *, prompt: int = 11, completion_tokens: int = 5,
               finish: str = "stop") -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", **message},
                         "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                      "total_tokens": prompt + completion_tokens}}


def chunk(delta: dict[str, Any] | None = None, *, usage: dict[str, int] | None = None,
          finish: str | None = None) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                            "created": 1700000000, "model": "gpt-4o-mini", "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return body


def sse(*chunks: dict[str, Any]) -> list[tuple[str | None, Any]]:
    return [(None, c) for c in chunks] + [(None, "[DONE]")]


def error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": None,
                      "param": None}}


async def test_generate_maps_messages_tools_and_options(server: MockServer,
                                                        make_model: MakeModel) -> None:
    server.enqueue_json(completion({"content": "Sunny, 21°C."}, prompt=42, completion_tokens=6))
    model = make_model(temperature=0.2)
    png = b"\x89PNG\r\n\x1a\nfake"
    history = [
        Message.system("You are terse."),
        Message.user("Weather in Paris? See map.", attachments=[Blob("image/png", png)]),
        Message.assistant("", [ToolCall("call_1", "get_weather", '{"city": "Paris"}')]),
        Message.tool('{"temp": 21}', tool_call_id="call_1", tool_name="get_weather"),
    ]
    reply = await model.generate(ModelRequest(history, [WEATHER], {"top_k": 5}))

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
        {"role": "user", "content": [
            {"type": "text", "text": "Weather in Paris? See map."},
            {"type": "image_url", "image_url": {"url": data_url}},
        ]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    ]
    assert body["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": WEATHER.parameters}}]


async def test_generate_returns_tool_calls(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(completion({"content": None, "tool_calls": [
        {"id": "call_a", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_b", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
    ]}, finish="tool_calls"))
    reply = await make_model().generate(ModelRequest([Message.user("Paris and Rome?")],
                                                     [WEATHER]))
    assert reply.content == ""
    assert [(c.id, c.name) for c in reply.tool_calls] == [("call_a", "get_weather"),
                                                          ("call_b", "get_weather")]
    assert [json.loads(c.arguments) for c in reply.tool_calls] == [{"city": "Paris"},
                                                                   {"city": "Rome"}]
    assert reply.metadata["usage"] == {"input_tokens": 11, "output_tokens": 5}


async def test_stream_text_and_tool_call_fragments(server: MockServer,
                                                   make_model: MakeModel) -> None:
    server.enqueue_sse(sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Let me "}),
        chunk({"content": "check."}),
        chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                               "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                               "function": {"name": "get_weather", "arguments": '{"ci'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": 'ty": "Rome"}'}}]}),
        chunk({}, finish="tool_calls"),
        chunk(usage={"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}),
    ))
    stream = make_model().stream(ModelRequest([Message.user("Paris and Rome?")], [WEATHER]))
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
    assert str(info.value) == ("openai: HTTP 401 from model 'gpt-4o-mini': "
                               "Incorrect API key provided")


async def test_stream_retries_before_first_chunk(server: MockServer,
                                                 make_model: MakeModel) -> None:
    server.enqueue_json(error("overloaded"), 503)
    server.enqueue_sse(sse(chunk({"content": "hel"}), chunk({"content": "lo"}),
                           chunk(usage={"prompt_tokens": 3, "completion_tokens": 2,
                                        "total_tokens": 5})))
    message = await make_model().stream(ModelRequest([Message.user("hi")])).collect()
    assert message.content == "hello"
    assert message.metadata["usage"] == {"input_tokens": 3, "output_tokens": 2}
    assert len(server.requests) == 2


async def test_stream_error_after_first_chunk_is_not_retried(server: MockServer,
                                                             make_model: MakeModel) -> None:
    server.enqueue_sse([(None, chunk({"content": "partial"})),
                        (None, {"error": {"message": "stream broke"}})])
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


async def test_connection_error_is_retried_then_reported(closed_port_url: str,
                                                         make_model: MakeModel) -> None:
    model = make_model(base_url=closed_port_url + "/v1", max_retries=1)
    with pytest.raises(ModelError) as info:
        await model.generate(ModelRequest([Message.user("hi")]))
    assert info.value.status is None
    assert str(info.value).startswith("openai: connection error calling model 'gpt-4o-mini' "
                                      "(gave up after 2 attempts)")


async def test_key_and_base_url_from_environment(server: MockServer,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
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


async def test_unsupported_attachment_is_reported(server: MockServer,
                                                  make_model: MakeModel) -> None:
    msg = Message.user("see", attachments=[Blob("application/zip", b"PK")])
    model = make_model()
    with pytest.raises(ModelError, match="application/zip"):
        await model.generate(ModelRequest([msg]))
    stream = model.stream(ModelRequest([msg]))  # the error comes out of the stream
    with pytest.raises(ModelError, match="application/zip"):
        await stream.collect()
    assert server.requests == []


async def test_retry_after_header_is_honoured(server: MockServer,
                                              make_model: MakeModel) -> None:
    server.enqueue_json(error("slow down"), 429, headers={"retry-after-ms": "150"})
    server.enqueue_json(completion({"content": "ok"}))
    started = time.monotonic()
    assert (await make_model().generate(ModelRequest([Message.user("hi")]))).content == "ok"
    assert time.monotonic() - started >= 0.14
    assert len(server.requests) == 2


async def test_abandoned_stream_closes_cleanly(server: MockServer,
                                               make_model: MakeModel) -> None:
    server.enqueue_sse(sse(chunk({"content": "one "}), chunk({"content": "two"})))
    stream = make_model().stream(ModelRequest([Message.user("hi")]))
    async for first in stream:
        assert first.content == "one "
        break
    await stream.aclose()
    assert stream.done
