"""OpenAIRealtimeModel against a loopback server speaking the OpenAI Realtime WebSocket
protocol, through the real openai SDK."""

from __future__ import annotations

import base64
import itertools
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import pytest

from relaykit.errors import ConfigurationError, ModelError
from relaykit.messages import Blob, Message, ToolCall
from relaykit.models import (
    LiveConfig,
    LiveResponse,
    OpenAIRealtimeModel,
    live_from_string,
)
from tests.live.adapters.support import (
    WEATHER,
    check_close,
    complete,
    model_factory,
    partial,
    take,
)

if TYPE_CHECKING:
    from conftest import LiveServer, Peer

MODEL = "gpt-realtime-test"
TRANSCRIBE = {"audio": {"input": {"transcription": {"model": "gpt-4o-mini-transcribe"}}}}
RESPONSE_CREATE = {"type": "response.create"}
MakeModel = Callable[..., OpenAIRealtimeModel]

_ids = itertools.count()


@pytest.fixture
async def make_model(openai_server: LiveServer) -> AsyncIterator[MakeModel]:
    async with model_factory(
        OpenAIRealtimeModel, MODEL, api_key="oa-test", base_url=f"{openai_server.http_url}/v1"
    ) as make:
        yield make


# -- the server's events ------------------------------------------------------------------------


def event(type_: str, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "event_id": f"event_{next(_ids)}", **fields}


def created(rid: str) -> dict[str, Any]:
    return event(
        "response.created",
        response={"id": rid, "object": "realtime.response", "status": "in_progress", "output": []},
    )


def done(rid: str, status: str = "completed", **details: Any) -> dict[str, Any]:
    response: dict[str, Any] = {"id": rid, "object": "realtime.response", "status": status}
    if details:
        response["status_details"] = {"type": status, **details}
    return event("response.done", response=response)


def part(rid: str) -> dict[str, Any]:
    return {"response_id": rid, "item_id": f"item_{rid}", "output_index": 0, "content_index": 0}


def text_delta(rid: str, delta: str) -> dict[str, Any]:
    return event("response.output_text.delta", **part(rid), delta=delta)


def text_done(rid: str, text: str) -> dict[str, Any]:
    return event("response.output_text.done", **part(rid), text=text)


def transcript_delta(rid: str, delta: str) -> dict[str, Any]:
    return event("response.output_audio_transcript.delta", **part(rid), delta=delta)


def transcript_done(rid: str, transcript: str) -> dict[str, Any]:
    return event("response.output_audio_transcript.done", **part(rid), transcript=transcript)


def function_call(rid: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return event(
        "response.function_call_arguments.done",
        response_id=rid,
        item_id=f"item_{call_id}",
        output_index=1,
        call_id=call_id,
        name=name,
        arguments=arguments,
    )


async def fails_with(
    server: LiveServer,
    make_model: MakeModel,
    script: Any,
    config: LiveConfig,
    match: str,
    *,
    send: Message | None = None,
) -> ModelError:
    """Serve ``script``; connect with ``config`` (sending ``send``); the ``ModelError``
    ``receive()`` raises, matching ``match``, once the connection closed."""
    server.run(script)
    conn = await make_model().connect(config)
    if send is not None:
        await conn.send(send)
    with pytest.raises(ModelError, match=match) as err:
        await take(conn, 1)
    await conn.close()
    await server.finished()
    return err.value


async def answer(peer: Peer, rid: str, text: str) -> None:
    """Play one whole text response: ``response.created``, its text, ``response.done``."""
    await peer.send(created(rid))
    await peer.send(text_done(rid, text))
    await peer.send(done(rid))


async def handshake(peer: Peer) -> Any:
    """Play the server's side of the setup: ``session.created``, read ``session.update``,
    answer ``session.updated``."""
    await peer.send(event("session.created", session={"type": "realtime", "model": MODEL}))
    frame = await peer.recv()
    await peer.send(event("session.updated", session={"type": "realtime", "model": MODEL}))
    return frame


def user_item(text: str) -> dict[str, Any]:
    return {
        "type": "conversation.item.create",
        "item": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        },
    }


def output_item(call_id: str, output: str) -> dict[str, Any]:
    return {
        "type": "conversation.item.create",
        "item": {"type": "function_call_output", "call_id": call_id, "output": output},
    }


# -- the client's side --------------------------------------------------------------------------


def spoken(content: str, *, partial: bool = False) -> LiveResponse:
    return LiveResponse(Message.assistant(content), partial=partial, transcription="output")


TURN_COMPLETE = LiveResponse(turn_complete=True)


async def quiet(peer: Peer) -> None:
    """A session that only sets up and waits for the client to close."""
    await handshake(peer)
    await peer.wait_closed()


# -- tests --------------------------------------------------------------------------------------


async def test_connect_sends_session_update_then_history_items_and_asks_for_a_response(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    openai_server.run(quiet)
    history = [
        Message.system("You are the desk."),
        Message.user("Weather in Paris?"),
        Message.assistant("", [ToolCall("call_0", "get_weather", '{"city": "Paris"}')]),
        Message.tool("18C", tool_call_id="call_0"),
        Message.assistant("18C in Paris."),
        Message.user("And Rome?"),
    ]
    model = make_model(max_output_tokens=200)
    options = {"audio": {"output": {"voice": "marin"}}}
    conn = await model.connect(LiveConfig(history, tools=[WEATHER], options=options))
    await conn.close()
    await openai_server.finished()

    peer = openai_server.peer
    assert peer.path == f"/v1/realtime?model={MODEL}"
    assert peer.headers["authorization"] == "Bearer oa-test"
    assert peer.frames == [
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "output_modalities": ["text"],
                "instructions": "You are the desk.",
                "tools": [
                    {
                        "type": "function",
                        "name": "get_weather",
                        "description": "The weather in a city.",
                        "parameters": WEATHER.parameters,
                    }
                ],
                "audio": {
                    "input": {"transcription": {"model": "gpt-4o-mini-transcribe"}},
                    "output": {"voice": "marin"},
                },
                "max_output_tokens": 200,
            },
        },
        user_item("Weather in Paris?"),
        {
            "type": "conversation.item.create",
            "item": {
                "type": "function_call",
                "call_id": "call_0",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            },
        },
        output_item("call_0", "18C"),
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "18C in Paris."}],
            },
        },
        user_item("And Rome?"),
        # The history ends with the user's turn: the model answers it at once.
        RESPONSE_CREATE,
    ]


async def test_history_ending_with_the_model_asks_for_nothing_and_audio_is_one_modality(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    openai_server.run(quiet)
    config = LiveConfig(
        [Message.user("hi"), Message.assistant("hello")], modalities=("text", "audio")
    )
    conn = await make_model().connect(config)
    await conn.close()
    await openai_server.finished()

    session_update, *items = openai_server.peer.frames
    assert session_update == {
        "type": "session.update",
        "session": {"type": "realtime", "output_modalities": ["audio"], **TRANSCRIBE},
    }
    assert [i["item"]["role"] for i in items] == ["user", "assistant"]  # no response.create


async def test_text_in_and_partial_chunks_then_one_complete_response(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()  # the item
        await peer.recv()  # response.create
        await peer.send(created("resp_1"))
        await peer.send(text_delta("resp_1", "Hel"))
        await peer.send(text_delta("resp_1", "lo there"))
        await peer.send(text_done("resp_1", "Hello there"))
        await peer.send(done("resp_1"))
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("hi"))
    got = await take(conn, 4)
    await conn.close()
    await openai_server.finished()

    assert openai_server.peer.frames[1:] == [user_item("hi"), RESPONSE_CREATE]
    assert got == [partial("Hel"), partial("lo there"), complete("Hello there"), TURN_COMPLETE]


async def test_tool_call_round_trip(openai_server: LiveServer, make_model: MakeModel) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()
        await peer.recv()
        await peer.send(created("resp_1"))
        await peer.send(text_delta("resp_1", "Let me check."))
        await peer.send(text_done("resp_1", "Let me check."))
        await peer.send(function_call("resp_1", "call_7", "get_weather", '{"city":"Rome"}'))
        await peer.send(done("resp_1"))
        await peer.recv()  # the output
        await peer.recv()  # response.create
        await peer.send(created("resp_2"))
        await peer.send(text_delta("resp_2", "21C in Rome."))
        await peer.send(text_done("resp_2", "21C in Rome."))
        await peer.send(done("resp_2"))
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([], tools=[WEATHER]))
    await conn.send(Message.user("Weather in Rome?"))
    first = await take(conn, 4)
    await conn.send(Message.tool("21C", tool_call_id="call_7"))
    rest = await take(conn, 3)
    await conn.close()
    await openai_server.finished()

    call = ToolCall("call_7", "get_weather", '{"city":"Rome"}')
    assert first == [
        partial("Let me check."),
        complete("Let me check."),
        LiveResponse(Message.assistant("", [call])),
        TURN_COMPLETE,
    ]
    assert openai_server.peer.frames[-4:] == [
        user_item("Weather in Rome?"),
        RESPONSE_CREATE,
        output_item("call_7", "21C"),
        RESPONSE_CREATE,
    ]
    assert rest == [partial("21C in Rome."), complete("21C in Rome."), TURN_COMPLETE]


async def test_parallel_calls_get_one_response_after_the_last_output_and_the_running_response(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()
        await peer.recv()
        await peer.send(created("resp_1"))
        await peer.send(function_call("resp_1", "call_a", "get_weather", '{"city":"Rome"}'))
        await peer.send(function_call("resp_1", "call_b", "get_weather", '{"city":"Oslo"}'))
        await peer.recv()  # output a
        await peer.recv()  # output b: the response still runs, so no response.create yet...
        marker = await peer.recv()  # ...before the client's marker
        assert marker["type"] == "input_audio_buffer.append"
        await peer.send(done("resp_1"))
        await peer.recv()  # response.create, now
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([], tools=[WEATHER]))
    await conn.send(Message.user("Rome and Oslo?"))
    calls = await take(conn, 2)
    assert [r.message.tool_calls[0].id for r in calls if r.message] == ["call_a", "call_b"]
    await conn.send(Message.tool("21C", tool_call_id="call_a"))
    await conn.send(Message.tool("3C", tool_call_id="call_b"))
    await conn.send_realtime(Blob("audio/pcm", b"\x00\x00"))  # a marker: frames keep their order
    assert await take(conn, 1) == [TURN_COMPLETE]
    await conn.close()
    await openai_server.finished()

    assert openai_server.peer.frames[-4:] == [
        output_item("call_a", "21C"),
        output_item("call_b", "3C"),
        {"type": "input_audio_buffer.append", "audio": "AAA="},
        RESPONSE_CREATE,
    ]


async def test_parallel_calls_answered_after_the_response_get_one_response_after_the_last(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()
        await peer.recv()
        await peer.send(created("resp_1"))
        await peer.send(function_call("resp_1", "call_a", "get_weather", '{"city":"Rome"}'))
        await peer.send(function_call("resp_1", "call_b", "get_weather", '{"city":"Oslo"}'))
        await peer.send(done("resp_1"))
        await peer.recv()  # output a
        marker = await peer.recv()  # call b is still open: no response.create before the marker
        assert marker["type"] == "input_audio_buffer.append"
        await peer.recv()  # output b
        await peer.recv()  # response.create
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([], tools=[WEATHER]))
    await conn.send(Message.user("Rome and Oslo?"))
    assert len(await take(conn, 3)) == 3  # two calls and the end of the turn
    await conn.send(Message.tool("21C", tool_call_id="call_a"))
    await conn.send_realtime(Blob("audio/pcm", b"\x00\x00"))  # a marker: frames keep their order
    await conn.send(Message.tool("3C", tool_call_id="call_b"))
    await conn.close()
    await openai_server.finished()

    assert openai_server.peer.frames[-4:] == [
        output_item("call_a", "21C"),
        {"type": "input_audio_buffer.append", "audio": "AAA="},
        output_item("call_b", "3C"),
        RESPONSE_CREATE,
    ]


async def test_text_sent_while_the_model_answers_waits_for_the_running_response(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()
        await peer.recv()
        await peer.send(created("resp_1"))
        await peer.send(text_delta("resp_1", "One"))
        await peer.recv()  # the second question's item...
        marker = await peer.recv()  # ...and no response.create before the marker
        assert marker["type"] == "input_audio_buffer.append"
        await peer.send(text_done("resp_1", "One"))
        await peer.send(done("resp_1"))
        await peer.recv()  # response.create
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("first"))
    assert await take(conn, 1) == [partial("One")]
    await conn.send(Message.user("second"))
    await conn.send_realtime(Blob("audio/pcm", b"\x00\x00"))  # a marker: frames keep their order
    assert await take(conn, 2) == [complete("One"), TURN_COMPLETE]
    await conn.close()
    await openai_server.finished()

    assert openai_server.peer.frames[1:] == [
        user_item("first"),
        RESPONSE_CREATE,
        user_item("second"),
        {"type": "input_audio_buffer.append", "audio": "AAA="},
        RESPONSE_CREATE,
    ]


async def test_barge_in_is_an_interrupted_response_then_the_cancelled_turn_ends(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()
        await peer.recv()
        await peer.send(created("resp_1"))
        await peer.send(transcript_delta("resp_1", "Once upon"))
        await peer.send(
            event("input_audio_buffer.speech_started", audio_start_ms=900, item_id="item_u2")
        )
        await peer.send(transcript_done("resp_1", "Once upon"))
        await peer.send(done("resp_1", "cancelled", reason="turn_detected"))
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([], modalities=("audio",)))
    await conn.send(Message.user("Tell me a story"))
    got = await take(conn, 4)
    await conn.close()
    await openai_server.finished()

    assert got == [
        spoken("Once upon", partial=True),
        LiveResponse(interrupted=True),
        spoken("Once upon"),
        TURN_COMPLETE,
    ]


async def test_a_cancelled_response_without_speech_is_an_interrupted_turn(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()
        await peer.recv()
        await peer.send(created("resp_1"))
        await peer.send(done("resp_1", "cancelled", reason="client_cancelled"))
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("hi"))
    assert await take(conn, 1) == [LiveResponse(turn_complete=True, interrupted=True)]
    await conn.close()
    await openai_server.finished()


async def test_input_and_output_transcriptions_are_aggregated(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    def heard(**fields: Any) -> dict[str, Any]:
        kind = "completed" if "transcript" in fields else "delta"
        return event(
            f"conversation.item.input_audio_transcription.{kind}",
            item_id="item_u1",
            content_index=0,
            **fields,
        )

    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.send(heard(delta="What's the"))
        await peer.send(heard(delta=" time?"))
        usage = {"type": "duration", "seconds": 1.2}
        await peer.send(heard(transcript="What's the time?", usage=usage))
        await peer.send(created("resp_1"))
        await peer.send(transcript_delta("resp_1", "It's "))
        await peer.send(transcript_delta("resp_1", "noon."))
        await peer.send(transcript_done("resp_1", "It's noon."))
        await peer.send(done("resp_1"))
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([], modalities=("audio",)))
    got = await take(conn, 7)
    await conn.close()
    await openai_server.finished()

    assert got == [
        LiveResponse(Message.user("What's the"), partial=True, transcription="input"),
        LiveResponse(Message.user(" time?"), partial=True, transcription="input"),
        LiveResponse(Message.user("What's the time?"), transcription="input"),
        spoken("It's ", partial=True),
        spoken("noon.", partial=True),
        spoken("It's noon."),
        TURN_COMPLETE,
    ]


async def test_a_failed_input_transcription_ends_with_an_empty_complete_one(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.send(
            event(
                "conversation.item.input_audio_transcription.delta",
                item_id="item_u1",
                content_index=0,
                delta="Wha",
            )
        )
        await peer.send(
            event(
                "conversation.item.input_audio_transcription.failed",
                item_id="item_u1",
                content_index=0,
                error={"type": "transcription_error", "message": "audio unclear"},
            )
        )
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([], modalities=("audio",)))
    got = await take(conn, 2)
    await conn.close()
    await openai_server.finished()
    assert got == [
        LiveResponse(Message.user("Wha"), partial=True, transcription="input"),
        LiveResponse(Message.user(""), transcription="input"),
    ]


async def test_audio_out_is_a_blob_in_the_session_format_and_audio_in_is_appended(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    pcm_out = bytes(range(16))
    pcm_in = b"\x01\x02\x03\x04"

    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()  # the appended audio
        await peer.send(created("resp_1"))
        audio = base64.b64encode(pcm_out).decode()
        await peer.send(event("response.output_audio.delta", **part("resp_1"), delta=audio))
        await peer.send(done("resp_1"))
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([], modalities=("audio",)))
    await conn.send_realtime(Blob("audio/pcm;rate=24000", pcm_in))
    got = await take(conn, 2)
    await conn.close()
    await openai_server.finished()

    assert openai_server.peer.frames[-1] == {
        "type": "input_audio_buffer.append",
        "audio": base64.b64encode(pcm_in).decode(),
    }
    assert got == [LiveResponse(audio=Blob("audio/pcm;rate=24000", pcm_out)), TURN_COMPLETE]


async def test_audio_out_in_g711_is_labelled_so(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.send(created("resp_1"))
        await peer.send(event("response.output_audio.delta", **part("resp_1"), delta="AAE="))
        await peer.wait_closed()

    openai_server.run(script)
    options = {"audio": {"output": {"format": {"type": "audio/pcmu"}}}}
    conn = await make_model().connect(LiveConfig([], modalities=("audio",), options=options))
    assert await take(conn, 1) == [LiveResponse(audio=Blob("audio/pcmu", b"\x00\x01"))]
    await conn.close()
    await openai_server.finished()


async def test_a_user_message_with_an_image_is_one_item(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    openai_server.run(quiet)
    conn = await make_model().connect(LiveConfig([]))
    png = Blob("image/png", b"\x89PNG")
    await conn.send(Message.user("What is this?", attachments=[png]))
    with pytest.raises(ConfigurationError, match=r"'application/pdf' \(images and audio only\)"):
        await conn.send(Message.user("Read this", attachments=[Blob("application/pdf", b"%")]))
    with pytest.raises(ConfigurationError, match=r"'image/png' \(audio/\* only\)"):
        await conn.send_realtime(png)
    with pytest.raises(ConfigurationError, match="not a 'system' message"):
        await conn.send(Message.system("be nice"))
    await conn.close()
    await openai_server.finished()

    assert openai_server.peer.frames[1:] == [
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw=="},
                ],
            },
        },
        RESPONSE_CREATE,
    ]


async def test_server_closing_mid_turn_raises_a_model_error_without_user_content(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()
        await peer.recv()
        await peer.send(created("resp_1"))
        await peer.send(text_delta("resp_1", "Your order 4417 is"))
        await peer.close(1000)

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("Where is my order 4417?"))
    got: list[LiveResponse] = []
    with pytest.raises(
        ModelError, match="closed the connection in the middle of a model turn"
    ) as err:
        async for response in conn.receive():
            got.append(response)
    await conn.close()
    await openai_server.finished()

    assert got == [partial("Your order 4417 is")]
    assert err.value.provider == "openai"
    assert "4417" not in str(err.value)


async def test_a_dropped_socket_raises_a_model_error(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.send(created("resp_1"))
        peer.abort()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    with pytest.raises(ModelError, match=r"the connection failed \(no close frame\)"):
        await take(conn, 5)
    await conn.close()


async def test_an_error_event_raises_a_model_error(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        error = {"type": "server_error", "code": "internal", "message": "The server had an error."}
        await peer.send(event("error", error=error))
        await peer.wait_closed()

    await fails_with(
        openai_server,
        make_model,
        script,
        LiveConfig([]),
        r"server sent an error \(server_error/internal: The server had an error\.\)",
    )


async def test_an_error_refusing_a_user_message_raises_a_model_error_naming_it(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        item = await peer.recv()
        assert item["type"] == "conversation.item.create"
        assert await peer.recv() == RESPONSE_CREATE
        item_id = peer.event_ids[-2]  # the item's event, as the server names it
        error = {
            "type": "invalid_request_error",
            "code": "invalid_value",
            "message": "Item content is too long.",
            "event_id": item_id,
        }
        await peer.send(event("error", error=error))
        await peer.wait_closed()

    err = await fails_with(
        openai_server,
        make_model,
        script,
        LiveConfig([]),
        r"server refused a user message \(invalid_request_error/invalid_value: Item",
        send=Message.user("Where is order 4417?"),
    )
    assert "4417" not in str(err)


async def test_an_expired_session_raises_a_model_error(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        expired = {
            "type": "invalid_request_error",
            "code": "session_expired",
            "message": "Your session hit the maximum duration of 60 minutes.",
            "event_id": None,
        }
        await peer.send(event("error", error=expired))
        await peer.close(1000)

    await fails_with(
        openai_server, make_model, script, LiveConfig([]), r"invalid_request_error/session_expired"
    )


async def test_an_error_naming_no_event_while_a_response_is_awaited_raises(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()  # the user's item
        assert await peer.recv() == RESPONSE_CREATE
        lost = {"type": "invalid_request_error", "message": "Something went wrong."}
        await peer.send(event("error", error=lost))
        await peer.wait_closed()

    await fails_with(
        openai_server,
        make_model,
        script,
        LiveConfig([]),
        r"server sent an error \(invalid_request_error",
        send=Message.user("Where is it?"),
    )


async def test_a_refused_item_of_a_long_history_is_still_known(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    history = [Message.user(f"message {i}") for i in range(300)]
    history.append(Message.assistant("ok"))

    async def script(peer: Peer) -> None:
        await handshake(peer)
        for _ in history:
            await peer.recv()
        first = peer.event_ids[1]  # an early history item's: the oldest ids are kept too
        refused = {
            "type": "invalid_request_error",
            "code": "invalid_value",
            "message": "Invalid item.",
            "event_id": first,
        }
        await peer.send(event("error", error=refused))
        await peer.wait_closed()

    await fails_with(
        openai_server, make_model, script, LiveConfig(history), r"server refused the history"
    )


async def test_an_error_the_session_survives_is_logged_once_and_reading_goes_on(
    openai_server: LiveServer, make_model: MakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        empty = {
            "type": "invalid_request_error",
            "code": "input_audio_buffer_commit_empty",
            "message": "Buffer too small.",
            "event_id": "evt_client_1",
        }
        for _ in range(5):
            await peer.send(event("error", error=empty))
        await answer(peer, "resp_1", "Still here.")
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    with caplog.at_level("WARNING", logger="relaykit.models.openai_realtime"):
        assert await take(conn, 2) == [complete("Still here."), TURN_COMPLETE]
    warnings = [r for r in caplog.records if "commit_empty" in r.getMessage()]
    assert len(warnings) == 1
    await conn.close()
    await openai_server.finished()


async def test_a_failed_response_raises_a_model_error(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.send(created("resp_1"))
        failure = {"type": "rate_limit_exceeded", "message": "Too many tokens."}
        await peer.send(done("resp_1", "failed", error=failure))
        await peer.wait_closed()

    await fails_with(
        openai_server,
        make_model,
        script,
        LiveConfig([]),
        r"response failed \(rate_limit_exceeded: Too many",
    )


async def test_server_closing_normally_between_turns_ends_receive(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await answer(peer, "resp_1", "Bye.")
        await peer.close(1000)

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    assert [r async for r in conn.receive()] == [complete("Bye."), TURN_COMPLETE]
    await conn.close()
    await openai_server.finished()


async def test_close_is_idempotent_ends_a_pending_receive_and_refuses_sends(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    await check_close(openai_server, lambda: make_model().connect(LiveConfig([])), handshake)


async def test_a_refused_session_raises_from_connect(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await peer.send(event("session.created", session={"type": "realtime"}))
        await peer.recv()
        error = {
            "type": "invalid_request_error",
            "code": "invalid_value",
            "message": "Invalid schema for function 'get_weather'.",
            "param": "session.tools[0].parameters",
        }
        await peer.send(event("error", error=error))
        await peer.wait_closed()

    openai_server.run(script)
    with pytest.raises(ModelError, match=r"session was refused .*Invalid schema"):
        await make_model().connect(LiveConfig([Message.system("secret")], tools=[WEATHER]))
    await openai_server.finished()  # the failed connect closed its socket


async def test_a_refused_handshake_raises_from_connect_with_its_status(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    openai_server.refuse_status = 401
    with pytest.raises(ModelError, match=r"cannot open a session .*HTTP 401") as err:
        await make_model().connect(LiveConfig([]))
    assert err.value.status == 401


async def test_an_unreachable_server_raises_from_connect(closed_port_url: str) -> None:
    model = OpenAIRealtimeModel(MODEL, api_key="k", base_url=closed_port_url)
    with pytest.raises(ModelError, match="cannot open a session") as err:
        await model.connect(LiveConfig([]))
    await model.aclose()
    assert err.value.provider == "openai"


async def test_a_session_never_confirmed_times_out(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await peer.recv()
        await peer.wait_closed()

    openai_server.run(script)
    with pytest.raises(ModelError, match=r"not configured within 0\.2 s"):
        await make_model(connect_timeout=0.2).connect(LiveConfig([]))
    await openai_server.finished()


def test_bad_modalities_and_a_missing_key_are_configuration_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = OpenAIRealtimeModel(MODEL, api_key="k")
    with pytest.raises(ConfigurationError, match="unknown realtime modalities"):
        model.session_config(LiveConfig([], modalities=("video",)))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="no API key for realtime model"):
        OpenAIRealtimeModel(MODEL)


def test_options_switch_the_input_transcription_off() -> None:
    model = OpenAIRealtimeModel(MODEL, api_key="k", audio={"input": {"transcription": None}})
    assert model.session_config(LiveConfig([])) == {
        "type": "realtime",
        "output_modalities": ["text"],
        "audio": {"input": {"transcription": None}},
    }


async def test_live_from_string_builds_an_openai_realtime_model(
    openai_server: LiveServer,
) -> None:
    openai_server.run(quiet)
    model = live_from_string(
        f"openai:{MODEL}", api_key="oa-test", base_url=f"{openai_server.http_url}/v1"
    )
    assert isinstance(model, OpenAIRealtimeModel)
    conn = await model.connect(LiveConfig([]))
    await conn.close()
    await model.aclose()
    await openai_server.finished()
    assert openai_server.peer.path == f"/v1/realtime?model={MODEL}"


async def test_a_pending_long_running_call_holds_back_neither_user_text_nor_later_calls(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()
        await peer.recv()
        await peer.send(created("resp_1"))
        await peer.send(function_call("resp_1", "call_approve", "approve_refund", "{}"))
        await peer.send(done("resp_1"))
        await peer.recv()  # the user's text, while call_approve waits for a person...
        await peer.recv()  # ...gets its response.create
        await peer.send(created("resp_2"))
        await peer.send(function_call("resp_2", "call_w", "get_weather", '{"city":"Rome"}'))
        await peer.send(done("resp_2"))
        await peer.recv()  # the output of call_w...
        await peer.recv()  # ...gets its response.create too
        await answer(peer, "resp_3", "21C in Rome.")
        await peer.close(1000)  # a normal close: the pending call is no turn in progress

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([], tools=[WEATHER]))
    await conn.send(Message.user("Refund my order"))
    assert len(await take(conn, 2)) == 2  # the call and the end of the turn
    await conn.send(Message.user("Meanwhile, weather in Rome?"))
    assert len(await take(conn, 2)) == 2
    await conn.send(Message.tool("21C", tool_call_id="call_w"))
    assert [r async for r in conn.receive()] == [complete("21C in Rome."), TURN_COMPLETE]
    await conn.close()
    await openai_server.finished()

    assert openai_server.peer.frames[3:] == [
        user_item("Meanwhile, weather in Rome?"),
        RESPONSE_CREATE,
        output_item("call_w", "21C"),
        RESPONSE_CREATE,
    ]


async def test_sending_after_the_server_closed_raises_a_model_error(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.close(1011, "Internal server error")

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    with pytest.raises(ModelError):
        await take(conn, 1)
    with pytest.raises(ModelError, match=r"cannot send a user message \(connection closed") as err:
        await conn.send(Message.user("my card is 4111"))
    assert "4111" not in str(err.value)
    with pytest.raises(ModelError, match="cannot send realtime audio"):
        await conn.send_realtime(Blob("audio/pcm", b"\x00\x00"))
    await conn.close()
    await openai_server.finished()


@pytest.mark.parametrize(
    ("frame", "what"),
    [
        (
            event("response.output_text.delta", **part("resp_1"), delta=4417),
            "a 'response.output_text.delta' event",
        ),
        (
            event("response.output_audio.delta", **part("resp_1"), delta="4417 not base64!"),
            "a 'response.output_audio.delta' event",
        ),
        (
            event(
                "response.function_call_arguments.done",
                response_id="resp_1",
                item_id="item_c1",
                output_index=0,
                call_id=["c1"],
                name="get_weather",
                arguments="{}",
            ),
            "a 'response.function_call_arguments.done' event",
        ),
        (event("response.done", response="4417"), "a 'response.done' event"),
    ],
)
async def test_an_event_that_cannot_be_read_raises_a_model_error_without_its_content(
    openai_server: LiveServer, make_model: MakeModel, frame: dict[str, Any], what: str
) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.send(created("resp_1"))
        await peer.send(frame)
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    with pytest.raises(ModelError, match=f"the server sent {what} relaykit could not read") as err:
        await take(conn, 1)
    assert "4417" not in str(err.value) and err.value.provider == "openai"
    await conn.close()
    await openai_server.finished()


async def test_unknown_events_are_skipped(openai_server: LiveServer, make_model: MakeModel) -> None:
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.send(created("resp_1"))
        await peer.send(event("response.something_new", detail={"x": 1}))
        await peer.send(text_done("resp_1", "Still here."))
        await peer.send(done("resp_1"))
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    assert await take(conn, 2) == [complete("Still here."), TURN_COMPLETE]
    await conn.close()
    await openai_server.finished()


async def test_a_response_request_refused_for_a_running_response_is_made_again_after_it(
    openai_server: LiveServer, make_model: MakeModel
) -> None:
    # The server's voice detection started a response just before the client asked for one:
    # the server refuses the request with an error event, which is not fatal; the text gets
    # its response once the running one is done.
    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.recv()  # the user's item
        await peer.recv()  # response.create
        busy = {
            "type": "invalid_request_error",
            "code": "conversation_already_has_active_response",
            "message": "Conversation already has an active response in progress: resp_vad.",
        }
        await peer.send(event("error", error=busy))
        await answer(peer, "resp_vad", "Yes?")
        assert await peer.recv() == RESPONSE_CREATE  # asked again
        await answer(peer, "resp_2", "It ships today.")
        await peer.wait_closed()

    openai_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("When does it ship?"))
    assert await take(conn, 4) == [
        complete("Yes?"),
        TURN_COMPLETE,
        complete("It ships today."),
        TURN_COMPLETE,
    ]
    await conn.close()
    await openai_server.finished()
