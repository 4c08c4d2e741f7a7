"""Runner.run_live over the real adapters and their loopback servers: a conversation with a tool
call, then a server that drops the turn, end to end (connect, storage, tools, the error event)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import relaykit as rk
from relaykit import Message
from relaykit.errors import ModelError
from relaykit.models import GeminiLiveModel, OpenAIRealtimeModel
from tests.live.support import live, read_all, rows, runner, shown, stored

if TYPE_CHECKING:
    from conftest import LiveServer, Peer


@rk.tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order} shipped"


def agent(model: Any) -> rk.ChatModelAgent:
    return rk.ChatModelAgent(
        "desk", instruction="You are the order desk.", live_model=model, tools=[lookup]
    )


async def test_a_gemini_live_session_runs_a_tool_and_ends_with_an_error_event(
    gemini_server: LiveServer,
) -> None:
    seen: dict[str, Any] = {}

    def text(chunk: str) -> dict[str, Any]:
        return {"serverContent": {"modelTurn": {"role": "model", "parts": [{"text": chunk}]}}}

    async def script(peer: Peer) -> None:
        seen["setup"] = await peer.recv()
        await peer.send({"setupComplete": {}})
        await peer.recv()  # the user's text
        call = {"id": "fc-1", "name": "lookup", "args": {"order": "7"}}
        await peer.send({"toolCall": {"functionCalls": [call]}})
        seen["tool_response"] = await peer.recv()
        await peer.send(text("Order 7 "))
        await peer.send(text("shipped."))
        await peer.send({"serverContent": {"turnComplete": True}})
        await peer.send(text("Anything"))
        await peer.close(1011, "Internal error encountered.")

    gemini_server.run(script)
    model = GeminiLiveModel("gemini-live-test", api_key="k", base_url=gemini_server.http_url)
    service = rk.InMemorySessionService()
    async with live(runner(agent(model), service)) as session:
        await session.send(Message.user("Where is order 7?"))
        events = await read_all(session)
    await model.aclose()
    await gemini_server.finished()

    setup = seen["setup"]["setup"]
    assert setup["systemInstruction"]["parts"][0]["text"].startswith("You are the order desk.")
    assert [d["name"] for d in setup["tools"][0]["functionDeclarations"]] == ["lookup"]
    assert seen["tool_response"] == {
        "tool_response": {
            "functionResponses": [
                {"id": "fc-1", "name": "lookup", "response": {"output": "order 7 shipped"}}
            ]
        }
    }
    assert shown(events) == [
        ("call", "lookup"),
        ("tool", "order 7 shipped"),
        ("partial", "Order 7 "),
        ("partial", "shipped."),
        ("assistant", "Order 7 shipped."),
        ("bare",),
        ("partial", "Anything"),
        ("error", "ModelError"),
    ]
    assert "close code 1011: Internal error encountered." in str(events[-1].error)
    assert rows(await stored(service)) == [
        ("user", "user", "Where is order 7?"),
        ("desk", "assistant", ""),
        ("desk", "tool", "order 7 shipped"),
        ("desk", "assistant", "Order 7 shipped."),
    ]
    last = (await stored(service))[-1]
    assert last.error is not None and "close code 1011" in last.error  # stored, last


async def test_an_openai_realtime_session_runs_a_tool_and_ends_with_an_error_event(
    openai_server: LiveServer,
) -> None:
    seen: list[Any] = []

    def event(type_: str, **fields: Any) -> dict[str, Any]:
        return {"type": type_, "event_id": f"event_{type_}", **fields}

    where = {"response_id": "r", "item_id": "i", "output_index": 0, "content_index": 0}

    async def script(peer: Peer) -> None:
        await peer.send(event("session.created", session={"type": "realtime"}))
        seen.append(await peer.recv())
        await peer.send(event("session.updated", session={"type": "realtime"}))
        seen.extend([await peer.recv(), await peer.recv()])  # the user's item, response.create
        await peer.send(event("response.created", response={"id": "r1"}))
        await peer.send(
            event(
                "response.function_call_arguments.done",
                response_id="r1",
                item_id="fc",
                output_index=0,
                call_id="call_1",
                name="lookup",
                arguments='{"order": "7"}',
            )
        )
        await peer.send(event("response.done", response={"id": "r1", "status": "completed"}))
        seen.extend([await peer.recv(), await peer.recv()])  # the output, response.create
        await peer.send(event("response.created", response={"id": "r2"}))
        await peer.send(event("response.output_text.delta", **where, delta="Order 7 "))
        await peer.send(event("response.output_text.delta", **where, delta="shipped."))
        await peer.send(event("response.output_text.done", **where, text="Order 7 shipped."))
        await peer.send(event("response.done", response={"id": "r2", "status": "completed"}))
        await peer.send(event("response.created", response={"id": "r3"}))
        await peer.send(event("response.output_text.delta", **where, delta="Anything"))
        peer.abort()

    openai_server.run(script)
    model = OpenAIRealtimeModel(
        "gpt-realtime-test", api_key="k", base_url=f"{openai_server.http_url}/v1"
    )
    service = rk.InMemorySessionService()
    async with live(runner(agent(model), service)) as session:
        await session.send(Message.user("Where is order 7?"))
        events = await read_all(session)
    await model.aclose()
    await openai_server.finished()

    session_update, user_item, create, output, create_again = seen
    assert session_update["session"]["instructions"].startswith("You are the order desk.")
    assert [t["name"] for t in session_update["session"]["tools"]] == ["lookup"]
    assert user_item["item"]["content"] == [{"type": "input_text", "text": "Where is order 7?"}]
    assert create == create_again == {"type": "response.create"}
    assert output == {
        "type": "conversation.item.create",
        "item": {"type": "function_call_output", "call_id": "call_1", "output": "order 7 shipped"},
    }
    assert shown(events) == [
        ("call", "lookup"),
        ("tool", "order 7 shipped"),
        ("bare",),
        ("partial", "Order 7 "),
        ("partial", "shipped."),
        ("assistant", "Order 7 shipped."),
        ("bare",),
        ("partial", "Anything"),
        ("error", "ModelError"),
    ]
    error = events[-1].error
    assert isinstance(error, ModelError)
    assert "no close frame" in str(error)
    assert rows(await stored(service)) == [
        ("user", "user", "Where is order 7?"),
        ("desk", "assistant", ""),
        ("desk", "tool", "order 7 shipped"),
        ("desk", "assistant", "Order 7 shipped."),
    ]
    last = (await stored(service))[-1]
    assert last.error is not None and "no close frame" in last.error  # stored, last
