"""GeminiLiveModel against a loopback server speaking the Gemini Live (BidiGenerateContent)
WebSocket protocol, through the real google-genai SDK."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import pytest

from relaykit.errors import ConfigurationError, ModelError
from relaykit.messages import Blob, Message, ToolCall
from relaykit.models import (
    GeminiLiveModel,
    LiveConfig,
    LiveConnection,
    LiveResponse,
    live_from_string,
)
from relaykit.models.gemini_live import GeminiLiveConnection
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

MODEL = "gemini-live-test"
# The API version in the path is the SDK's choice: google-genai 3 says v1, 2.x said v1beta.
SETUP_PATHS = {
    f"/ws/google.ai.generativelanguage.{version}.GenerativeService.BidiGenerateContent"
    for version in ("v1", "v1beta")
}
MakeModel = Callable[..., GeminiLiveModel]


@pytest.fixture
async def make_model(gemini_server: LiveServer) -> AsyncIterator[MakeModel]:
    async with model_factory(
        GeminiLiveModel, MODEL, api_key="gm-test", base_url=gemini_server.http_url
    ) as make:
        yield make


async def setup(peer: Peer) -> Any:
    """Play the server's side of the setup: read ``setup``, answer ``setupComplete``."""
    frame = await peer.recv()
    await peer.send({"setupComplete": {}})
    return frame


async def quiet(peer: Peer) -> None:
    """A session that only sets up and waits for the client to close."""
    await setup(peer)
    await peer.wait_closed()


def text(*chunks: str) -> dict[str, Any]:
    return {
        "serverContent": {"modelTurn": {"role": "model", "parts": [{"text": c} for c in chunks]}}
    }


TURN_COMPLETE = {"serverContent": {"turnComplete": True}}


async def test_connect_sends_setup_with_instruction_tools_and_history(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    gemini_server.run(quiet)
    history = [
        Message.system("You are the desk."),
        Message.user("Weather in Paris?"),
        Message.assistant("", [ToolCall("fc-0", "get_weather", '{"city": "Paris"}')]),
        Message.tool("18C", tool_call_id="fc-0"),
        Message.assistant("18C in Paris."),
        Message.user("And Rome?"),
    ]
    conn = await make_model(temperature=0.2).connect(LiveConfig(history, tools=[WEATHER]))
    assert isinstance(conn, LiveConnection)
    await conn.close()
    await gemini_server.finished()

    peer = gemini_server.peer
    assert peer.path in SETUP_PATHS
    assert peer.headers["x-goog-api-key"] == "gm-test"
    assert peer.frames == [
        {
            "setup": {
                "model": f"models/{MODEL}",
                "generationConfig": {"responseModalities": ["TEXT"], "temperature": 0.2},
                "systemInstruction": {"parts": [{"text": "You are the desk."}], "role": "user"},
                "tools": [
                    {
                        "functionDeclarations": [
                            {
                                "description": "The weather in a city.",
                                "name": "get_weather",
                                "parameters_json_schema": WEATHER.parameters,
                            }
                        ]
                    }
                ],
                "inputAudioTranscription": {},
            }
        },
        {
            "client_content": {
                "turns": [
                    {"parts": [{"text": "Weather in Paris?"}], "role": "user"},
                    {
                        "parts": [
                            {
                                "functionCall": {
                                    "id": "fc-0",
                                    "args": {"city": "Paris"},
                                    "name": "get_weather",
                                }
                            }
                        ],
                        "role": "model",
                    },
                    {
                        "parts": [
                            {
                                "functionResponse": {
                                    "id": "fc-0",
                                    "name": "get_weather",
                                    "response": {"output": "18C"},
                                }
                            }
                        ],
                        "role": "user",
                    },
                    {"parts": [{"text": "18C in Paris."}], "role": "model"},
                    {"parts": [{"text": "And Rome?"}], "role": "user"},
                ],
                # The history ends with the user's turn: the model answers it at once.
                "turnComplete": True,
            }
        },
    ]


async def test_history_ending_with_the_model_waits_for_input_and_audio_asks_for_transcripts(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    gemini_server.run(quiet)
    config = LiveConfig(
        [Message.user("hi"), Message.assistant("hello")], modalities=("text", "audio")
    )
    conn = await make_model().connect(config)
    await conn.close()
    await gemini_server.finished()

    setup_frame, history_frame = gemini_server.peer.frames
    assert setup_frame == {
        "setup": {
            "model": f"models/{MODEL}",
            "generationConfig": {"responseModalities": ["AUDIO"]},
            "inputAudioTranscription": {},
            "outputAudioTranscription": {},
        }
    }
    assert history_frame["client_content"]["turnComplete"] is False


async def test_no_history_sends_only_the_setup(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    gemini_server.run(quiet)
    conn = await make_model().connect(LiveConfig([Message.system("Be brief.")]))
    await conn.close()
    await gemini_server.finished()
    assert len(gemini_server.peer.frames) == 1


async def test_text_in_and_partial_chunks_then_one_complete_response(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        await peer.send(text("Hel"))
        await peer.send(text("lo ", "there"))
        await peer.send(TURN_COMPLETE)
        await peer.wait_closed()

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("hi"))
    got = await take(conn, 5)
    await conn.close()
    await gemini_server.finished()

    assert gemini_server.peer.frames[-1] == {
        "client_content": {
            "turns": [{"parts": [{"text": "hi"}], "role": "user"}],
            "turnComplete": True,
        }
    }
    assert got == [
        partial("Hel"),
        partial("lo "),
        partial("there"),
        complete("Hello there"),
        LiveResponse(turn_complete=True),
    ]


async def test_tool_call_round_trip(gemini_server: LiveServer, make_model: MakeModel) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        await peer.send(text("Let me check."))
        await peer.send(
            {
                "toolCall": {
                    "functionCalls": [
                        {"id": "fc-7", "name": "get_weather", "args": {"city": "Rome"}}
                    ]
                }
            }
        )
        await peer.recv()  # the tool response
        await peer.send(text("21C in Rome."))
        await peer.send(TURN_COMPLETE)
        await peer.wait_closed()

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([], tools=[WEATHER]))
    await conn.send(Message.user("Weather in Rome?"))
    first = await take(conn, 3)
    await conn.send(Message.tool("21C", tool_call_id="fc-7"))
    rest = await take(conn, 3)
    await conn.close()
    await gemini_server.finished()

    call = ToolCall("fc-7", "get_weather", '{"city": "Rome"}')
    assert first == [
        partial("Let me check."),
        complete("Let me check."),  # the text before a call is complete when the call comes
        LiveResponse(Message.assistant("", [call])),
    ]
    assert gemini_server.peer.frames[-1] == {
        "tool_response": {
            "functionResponses": [
                {"id": "fc-7", "name": "get_weather", "response": {"output": "21C"}}
            ]
        }
    }
    assert rest == [
        partial("21C in Rome."),
        complete("21C in Rome."),
        LiveResponse(turn_complete=True),
    ]


async def test_a_tool_response_for_an_unknown_call_without_a_name_is_refused(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    gemini_server.run(quiet)
    conn = await make_model().connect(LiveConfig([]))
    with pytest.raises(ConfigurationError, match="tool_call_id of a call received"):
        await conn.send(Message.tool("21C", tool_call_id="never-called"))
    with pytest.raises(ConfigurationError, match="not a 'assistant' message"):
        await conn.send(Message.assistant("hi"))
    await conn.close()
    await gemini_server.finished()
    assert len(gemini_server.peer.frames) == 1  # nothing but the setup went out


async def test_interrupted_turn(gemini_server: LiveServer, make_model: MakeModel) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        await peer.send(text("Once upon"))
        await peer.send({"serverContent": {"interrupted": True}})
        await peer.send(TURN_COMPLETE)
        await peer.wait_closed()

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("Tell me a story"))
    got = await take(conn, 4)
    await conn.close()
    await gemini_server.finished()

    assert got == [
        partial("Once upon"),
        complete("Once upon"),
        LiveResponse(interrupted=True),
        LiveResponse(turn_complete=True),
    ]


async def test_input_and_output_transcriptions_are_aggregated(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    def content(**fields: Any) -> dict[str, Any]:
        return {"serverContent": fields}

    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.send(content(inputTranscription={"text": "What's the"}))
        await peer.send(content(inputTranscription={"text": " time?", "finished": True}))
        await peer.send(content(outputTranscription={"text": "It's "}))
        await peer.send(content(outputTranscription={"text": "noon."}))
        # No "finished" for the output: the end of the turn completes it.
        await peer.send(TURN_COMPLETE)
        await peer.wait_closed()

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([], modalities=("audio",)))
    got = await take(conn, 7)
    await conn.close()
    await gemini_server.finished()

    assert got == [
        LiveResponse(Message.user("What's the"), partial=True, transcription="input"),
        LiveResponse(Message.user(" time?"), partial=True, transcription="input"),
        LiveResponse(Message.user("What's the time?"), transcription="input"),
        LiveResponse(Message.assistant("It's "), partial=True, transcription="output"),
        LiveResponse(Message.assistant("noon."), partial=True, transcription="output"),
        LiveResponse(Message.assistant("It's noon."), transcription="output"),
        LiveResponse(turn_complete=True),
    ]


async def test_audio_out_is_a_blob_and_audio_in_is_realtime_input(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    pcm_out = bytes(range(16))
    pcm_in = b"\x01\x02\x03\x04"

    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        part = {
            "inlineData": {
                "mimeType": "audio/pcm;rate=24000",
                "data": base64.b64encode(pcm_out).decode(),
            }
        }
        await peer.send({"serverContent": {"modelTurn": {"role": "model", "parts": [part]}}})
        await peer.send(TURN_COMPLETE)
        await peer.wait_closed()

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([], modalities=("audio",)))
    await conn.send_realtime(Blob("audio/pcm;rate=16000", pcm_in))
    got = await take(conn, 2)
    await conn.close()
    await gemini_server.finished()

    assert gemini_server.peer.frames[-1] == {
        "realtime_input": {
            "audio": {
                "data": base64.b64encode(pcm_in).decode(),
                "mime_type": "audio/pcm;rate=16000",
            }
        }
    }
    assert got == [
        LiveResponse(audio=Blob("audio/pcm;rate=24000", pcm_out)),
        LiveResponse(turn_complete=True),
    ]


async def test_send_realtime_refuses_a_blob_that_is_not_audio_or_image(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    gemini_server.run(quiet)
    conn = await make_model().connect(LiveConfig([]))
    with pytest.raises(
        ConfigurationError, match=r"'application/pdf' \(audio/\* and image/\* only\)"
    ):
        await conn.send_realtime(Blob("application/pdf", b"%PDF"))
    await conn.close()
    await gemini_server.finished()


async def test_server_closing_mid_turn_raises_a_model_error_without_user_content(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        await peer.send(text("Your order 4417 is"))
        await peer.close(1000)

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("Where is my order 4417?"))
    got: list[LiveResponse] = []
    with pytest.raises(
        ModelError, match="closed the connection in the middle of a model turn"
    ) as err:
        async for response in conn.receive():
            got.append(response)
    await conn.close()
    await gemini_server.finished()

    assert got == [partial("Your order 4417 is")]  # no complete response for a cut-off turn
    assert err.value.provider == "gemini"
    assert "4417" not in str(err.value)
    assert MODEL in str(err.value)


async def test_server_failing_between_turns_raises_its_close_code_and_reason(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.close(1011, "Internal error encountered.")

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    with pytest.raises(
        ModelError, match=r"failed \(close code 1011: Internal error encountered\.\)"
    ):
        await take(conn, 1)
    await conn.close()


async def test_a_dropped_socket_raises_a_model_error(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        await peer.send(text("Hel"))
        peer.abort()

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("hi"))
    with pytest.raises(ModelError, match="close code 1006"):
        await take(conn, 5)
    await conn.close()


async def test_a_message_of_a_kind_the_sdk_does_not_know_is_skipped(
    gemini_server: LiveServer, make_model: MakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        await peer.send({"someNewerMessage": {"detail": 1}})  # a newer protocol's message
        await peer.send(text("Hi."))
        await peer.send(TURN_COMPLETE)
        await peer.wait_closed()

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("hi"))
    with caplog.at_level("WARNING", logger="relaykit.models.gemini_live"):
        got = await take(conn, 3)
    assert got == [partial("Hi."), complete("Hi."), LiveResponse(turn_complete=True)]
    assert any("does not know" in r.getMessage() for r in caplog.records)
    await conn.close()
    await gemini_server.finished()


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (
            {"error": {"code": 400, "message": "Invalid tool.", "status": "INVALID_ARGUMENT"}},
            r"server sent an error \(400 INVALID_ARGUMENT: Invalid tool\.\)",
        ),
        (
            {"error": {"code": 429, "message": "Quota.", "status": "RESOURCE_EXHAUSTED"}},
            r"server sent an error \(429 RESOURCE_EXHAUSTED: Quota\.\)",
        ),
        ({"code": 500, "message": "Internal."}, r"server sent an error \(500: Internal\.\)"),
    ],
)
async def test_an_error_the_server_sends_as_a_message_raises_a_model_error(
    gemini_server: LiveServer, make_model: MakeModel, payload: Any, expected: str
) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        await peer.send(payload)
        await peer.wait_closed()

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("hi"))
    with pytest.raises(ModelError, match=expected) as err:
        await take(conn, 1)
    assert err.value.status == (payload.get("error") or payload)["code"]
    await conn.close()
    await gemini_server.finished()


@pytest.mark.parametrize(
    "frame",
    [
        "not json {",
        '{"serverContent": 5}',
        '{"toolCall": {"functionCalls": [{"name": 3, "args": "order 4417"}]}}',
        "[1, 2]",
    ],
)
async def test_a_malformed_message_raises_a_model_error_without_its_content(
    gemini_server: LiveServer, make_model: MakeModel, frame: str
) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        await peer.ws.send(frame)
        await peer.wait_closed()

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("hi"))
    with pytest.raises(ModelError, match="gemini live model 'gemini-live-test'") as err:
        await take(conn, 1)
    assert "4417" not in str(err.value) and "not json" not in str(err.value)
    await conn.close()
    await gemini_server.finished()


async def test_server_closing_normally_between_turns_ends_receive(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        await peer.send(text("Bye."))
        await peer.send(TURN_COMPLETE)
        await peer.send({"goAway": {"timeLeft": "0s"}})
        await peer.close(1000)

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("hi"))
    got = [r async for r in conn.receive()]
    await conn.close()
    await gemini_server.finished()
    assert got == [partial("Bye."), complete("Bye."), LiveResponse(turn_complete=True)]


async def test_close_is_idempotent_ends_a_pending_receive_and_refuses_sends(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    conn = await check_close(gemini_server, lambda: make_model().connect(LiveConfig([])), setup)
    assert isinstance(conn, GeminiLiveConnection)


async def test_a_refused_setup_raises_from_connect(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await peer.recv()
        await peer.close(1008, "API key not valid. Please pass a valid API key.")

    gemini_server.run(script)
    with pytest.raises(
        ModelError, match=r"cannot open a session \(close code 1008: API key not valid"
    ):
        await make_model().connect(LiveConfig([Message.system("secret instruction")]))
    await gemini_server.finished()


async def test_an_unreachable_server_raises_from_connect(
    make_model: MakeModel, closed_port_url: str
) -> None:
    model = make_model(base_url=closed_port_url)
    with pytest.raises(ModelError, match="cannot open a session") as err:
        await model.connect(LiveConfig([]))
    assert err.value.provider == "gemini"


async def test_a_setup_that_never_completes_times_out(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await peer.recv()
        await peer.wait_closed()

    gemini_server.run(script)
    with pytest.raises(ModelError, match=r"not set up within 0\.2 s"):
        await make_model(connect_timeout=0.2).connect(LiveConfig([]))
    await gemini_server.finished()


def test_unknown_options_and_modalities_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown live option.*'voice_name'"):
        GeminiLiveModel(MODEL, api_key="k", voice_name="Puck")
    model = GeminiLiveModel(MODEL, api_key="k")
    with pytest.raises(ConfigurationError, match="unknown live modalities"):
        model.connect_config(LiveConfig([], modalities=("video",)))
    with pytest.raises(ConfigurationError, match=r"invalid value for live option.*temperature"):
        model.connect_config(LiveConfig([], options={"temperature": "warm"}))


def test_no_api_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="no API key for live model"):
        GeminiLiveModel(MODEL)


async def test_live_from_string_builds_a_gemini_live_model(gemini_server: LiveServer) -> None:
    gemini_server.run(quiet)
    model = live_from_string(f"gemini:{MODEL}", api_key="gm-test", base_url=gemini_server.http_url)
    assert isinstance(model, GeminiLiveModel)
    conn = await model.connect(LiveConfig([]))
    await conn.close()
    await model.aclose()
    await gemini_server.finished()
    assert gemini_server.peer.frames[0]["setup"]["model"] == f"models/{MODEL}"


async def test_a_normal_close_while_a_call_waits_for_its_result_ends_receive(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.recv()
        call = {"id": "fc-1", "name": "approve_refund", "args": {}}
        await peer.send({"toolCall": {"functionCalls": [call]}})
        await peer.close(1000)

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    await conn.send(Message.user("Refund my order"))
    got = [r async for r in conn.receive()]
    await conn.close()
    await gemini_server.finished()
    assert got == [LiveResponse(Message.assistant("", [ToolCall("fc-1", "approve_refund", "{}")]))]


async def test_sending_after_the_server_closed_raises_a_model_error(
    gemini_server: LiveServer, make_model: MakeModel
) -> None:
    async def script(peer: Peer) -> None:
        await setup(peer)
        await peer.close(1011, "Internal error encountered.")

    gemini_server.run(script)
    conn = await make_model().connect(LiveConfig([]))
    with pytest.raises(ModelError):
        await take(conn, 1)
    with pytest.raises(ModelError, match=r"cannot send a user message \(connection closed") as err:
        await conn.send(Message.user("my card is 4111"))
    assert "4111" not in str(err.value)
    with pytest.raises(ModelError, match="cannot send realtime input"):
        await conn.send_realtime(Blob("audio/pcm", b"\x00\x00"))
    await conn.close()
    await gemini_server.finished()
