"""AnthropicModel against a loopback server speaking the Messages API wire protocol."""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest

from relaykit.errors import ConfigurationError, ModelError
from relaykit.messages import Blob, Message, MessageStream, ToolCall
from relaykit.models.anthropic import AnthropicModel
from relaykit.models.base import ModelRequest, ToolSpec

if TYPE_CHECKING:
    from conftest import MockServer

MakeModel = Callable[..., AnthropicModel]
MODEL = "claude-test-1"


@pytest.fixture
def make_model(server: MockServer, build_model: Callable[..., Any]) -> MakeModel:
    return functools.partial(
        build_model, AnthropicModel, MODEL, api_key="sk-ant-test", base_url=server.base_url
    )


def api_key_sent(headers: dict[str, str]) -> str:
    """The key as sent: ``x-api-key`` (most SDK versions) or ``Authorization: Bearer``."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    return headers.get("authorization", "").removeprefix("Bearer ")


def response(
    content: list[dict[str, Any]],
    *,
    input_tokens: int = 10,
    output_tokens: int = 4,
    stop: str = "end_turn",
    **usage: int,
) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens, **usage},
    }


def error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def events(*items: dict[str, Any]) -> list[tuple[str | None, Any]]:
    return [(item["type"], item) for item in items]


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, d: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": d}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 1},
    },
}


async def test_generate_maps_system_tools_and_tool_results(
    server: MockServer, make_model: MakeModel, weather_tool: ToolSpec
) -> None:
    server.enqueue_json(
        response(
            [{"type": "text", "text": "Paris 21°C, Rome 25°C."}],
            input_tokens=50,
            output_tokens=9,
            cache_read_input_tokens=100,
        )
    )
    jpeg = b"\xff\xd8\xff\xe0fake"
    history = [
        Message.system("Be brief."),
        Message.system("Use Celsius."),
        Message.user("Weather in Paris and Rome?", attachments=[Blob("image/jpeg", jpeg)]),
        Message.assistant(
            "Checking.",
            [
                ToolCall("toolu_1", "get_weather", '{"city": "Paris"}'),
                ToolCall("toolu_2", "get_weather", '{"city": "Rome"}'),
            ],
        ),
        Message.tool("21", tool_call_id="toolu_1", tool_name="get_weather"),
        Message.tool("25", tool_call_id="toolu_2", tool_name="get_weather"),
    ]
    reply = await make_model(temperature=0.0).generate(ModelRequest(history, [weather_tool]))

    assert reply.content == "Paris 21°C, Rome 25°C."
    assert reply.tool_calls == []
    assert reply.metadata["usage"] == {"input_tokens": 150, "output_tokens": 9}

    [req] = server.requests
    assert req.path == "/v1/messages"
    assert api_key_sent(req.headers) == "sk-ant-test"
    assert "anthropic-version" in req.headers
    body = req.body
    assert body["model"] == MODEL
    assert body["max_tokens"] == 1024
    assert body["temperature"] == 0.0
    assert body["system"] == "Be brief.\n\nUse Celsius."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": "image/jpeg",
                        "data": base64.b64encode(jpeg).decode(),
                    },
                },
                {"type": "text", "text": "Weather in Paris and Rome?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "get_weather",
                    "input": {"city": "Rome"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "21"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "25"},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": weather_tool.parameters,
        }
    ]


async def test_generate_returns_tool_use_as_tool_calls(
    server: MockServer, make_model: MakeModel, weather_tool: ToolSpec
) -> None:
    server.enqueue_json(
        response(
            [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_9",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
            stop="tool_use",
        )
    )
    reply = await make_model(max_tokens=50).generate(
        ModelRequest([Message.user("Oslo?")], [weather_tool])
    )
    assert reply.content == "Let me look."
    [call] = reply.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == (
        "toolu_9",
        "get_weather",
        {"city": "Oslo"},
    )
    assert reply.metadata["usage"] == {"input_tokens": 10, "output_tokens": 4}
    assert server.bodies[0]["max_tokens"] == 50


async def test_stream_text_and_input_json_fragments(
    server: MockServer, make_model: MakeModel, weather_tool: ToolSpec
) -> None:
    server.enqueue_sse(
        events(
            MESSAGE_START,
            block_start(0, {"type": "text", "text": ""}),
            {"type": "ping"},
            delta(0, {"type": "text_delta", "text": "Looking "}),
            delta(0, {"type": "text_delta", "text": "up."}),
            block_stop(0),
            block_start(
                1, {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}}
            ),
            delta(1, {"type": "input_json_delta", "partial_json": ""}),
            delta(1, {"type": "input_json_delta", "partial_json": '{"city": '}),
            delta(1, {"type": "input_json_delta", "partial_json": '"Paris"}'}),
            block_stop(1),
            block_start(2, {"type": "tool_use", "id": "toolu_b", "name": "now", "input": {}}),
            block_stop(2),
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 17},
            },
            {"type": "message_stop"},
        )
    )
    stream = make_model().stream(ModelRequest([Message.user("Paris?")], [weather_tool]))
    message = await stream.collect()

    assert message.content == "Looking up."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in message.tool_calls] == [
        ("toolu_a", "get_weather", {"city": "Paris"}),
        ("toolu_b", "now", {}),
    ]
    assert message.metadata["usage"] == {"input_tokens": 25, "output_tokens": 17}
    assert server.bodies[0]["stream"] is True


async def test_retries_429_then_succeeds(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(error("rate_limit_error", "slow down"), 429)
    server.enqueue_json(response([{"type": "text", "text": "ok"}]))
    reply = await make_model().generate(ModelRequest([Message.user("hi")]))
    assert reply.content == "ok"
    assert len(server.requests) == 2


async def test_overloaded_529_is_retried(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(error("overloaded_error", "Overloaded"), 529)
    server.enqueue_json(response([{"type": "text", "text": "ok"}]))
    assert (await make_model().generate(ModelRequest([Message.user("hi")]))).content == "ok"
    assert len(server.requests) == 2


async def test_overloaded_529_waits_until_its_retry_after_date(
    server: MockServer,
    make_model: MakeModel,
    retry_delays: list[float],
    http_date: Callable[[float], str],
) -> None:
    server.enqueue_json(
        error("overloaded_error", "Overloaded"), 529, headers={"retry-after": http_date(20)}
    )
    server.enqueue_json(response([{"type": "text", "text": "ok"}]))
    assert (await make_model().generate(ModelRequest([Message.user("hi")]))).content == "ok"
    [delay] = retry_delays
    assert 18 <= delay <= 20  # the date has whole seconds, and a moment passes on the way


async def test_stream_rate_limit_above_max_backoff_fails_at_once(
    server: MockServer, make_model: MakeModel, retry_delays: list[float]
) -> None:
    server.enqueue_json(
        error("rate_limit_error", "Number of request tokens has exceeded"),
        429,
        headers={"retry-after": "45"},
    )
    with pytest.raises(ModelError, match=r"asked to wait 45 s .* max_backoff=30 s") as info:
        await make_model(max_backoff=30).stream(ModelRequest([Message.user("hi")])).collect()
    assert info.value.status == 429
    assert len(server.requests) == 1
    assert retry_delays == []


async def test_500_exhausts_retries(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(error("api_error", "Internal server error"), 500, times=4)
    with pytest.raises(ModelError) as info:
        await make_model().generate(ModelRequest([Message.user("hi")]))
    assert len(server.requests) == 4  # 1 + max_retries=3
    assert info.value.status == 500 and info.value.provider == "anthropic"
    assert str(info.value).startswith(f"anthropic: HTTP 500 from model '{MODEL}'")
    assert "Internal server error" in str(info.value)


async def test_401_is_not_retried(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(error("authentication_error", "invalid x-api-key"), 401)
    with pytest.raises(ModelError) as info:
        await make_model().generate(ModelRequest([Message.user("hi")]))
    assert len(server.requests) == 1
    assert info.value.status == 401
    assert str(info.value) == f"anthropic: HTTP 401 from model '{MODEL}': invalid x-api-key"


async def test_stream_retries_before_first_chunk(server: MockServer, make_model: MakeModel) -> None:
    server.enqueue_json(error("rate_limit_error", "slow down"), 429)
    server.enqueue_sse(
        events(
            MESSAGE_START,
            block_start(0, {"type": "text", "text": ""}),
            delta(0, {"type": "text_delta", "text": "hello"}),
            block_stop(0),
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 2},
            },
            {"type": "message_stop"},
        )
    )
    message = await make_model().stream(ModelRequest([Message.user("hi")])).collect()
    assert message.content == "hello"
    assert message.metadata["usage"] == {"input_tokens": 25, "output_tokens": 2}
    assert len(server.requests) == 2


async def test_stream_error_event_after_text_is_not_retried(
    server: MockServer, make_model: MakeModel
) -> None:
    server.enqueue_sse(
        events(
            MESSAGE_START,
            block_start(0, {"type": "text", "text": ""}),
            delta(0, {"type": "text_delta", "text": "partial"}),
            error("overloaded_error", "Overloaded"),
        )
    )
    stream = make_model().stream(ModelRequest([Message.user("hi")]))
    with pytest.raises(ModelError, match="overloaded_error: Overloaded") as info:
        await stream.collect()
    assert info.value.provider == "anthropic"
    assert [c.content for c in stream.chunks] == ["partial"]
    assert len(server.requests) == 1


def test_missing_key_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_CONFIG_DIR",
        "ANTHROPIC_IDENTITY_TOKEN",
        "ANTHROPIC_IDENTITY_TOKEN_FILE",
        "XDG_CONFIG_HOME",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no credentials profile on disk
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(MODEL)


async def test_key_from_environment(server: MockServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    server.enqueue_json(response([{"type": "text", "text": "ok"}]))
    model = AnthropicModel(MODEL, base_url=server.base_url)
    try:
        await model.generate(ModelRequest([Message.user("hi")]))
    finally:
        await model.aclose()
    assert api_key_sent(server.requests[0].headers) == "sk-ant-env"


@pytest.mark.usefixtures("no_cyclic_gc")
async def test_abandoned_stream_closes_its_connection(
    server: MockServer,
    make_model: MakeModel,
    first_chunk_then_close: Callable[[MessageStream], Awaitable[Message]],
) -> None:
    # No message_stop and the stream held open: only the client hanging up can end it.
    server.enqueue_sse(
        events(
            MESSAGE_START,
            block_start(0, {"type": "text", "text": "one "}),
            delta(0, {"type": "text_delta", "text": "two"}),
        ),
        hold_open=True,
    )
    first = await first_chunk_then_close(make_model().stream(ModelRequest([Message.user("hi")])))
    assert first.content == "one "
    assert await server.saw_disconnect()
