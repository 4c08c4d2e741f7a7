"""The HTTP API (docs/http-server.md) through httpx's in-process ASGI transport."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import relaykit as rk
from relaykit.errors import ConfigurationError
from relaykit.server import create_app
from tests.server.support import Approval, Gate, app_client, client, desk, parse_sse, turn


def _kinds(events: list[tuple[str, Any]]) -> list[str]:
    return [name for name, _ in events]


async def test_health_agent_tree_and_openapi() -> None:
    async with client(desk()) as http:
        assert (await http.get("/health")).json() == {"status": "ok"}
        tree = (await http.get("/agent")).json()
        assert tree["name"] == "triage" and tree["kind"] == "ChatModelAgent"
        assert tree["description"] == "routes questions"
        assert [c["name"] for c in tree["children"]] == ["orders"]
        assert tree["children"][0]["children"] == []
        schema = (await http.get("/openapi.json")).json()
        assert {"/sessions/{session_id}/turns", "/sessions/{session_id}/resume"} <= set(
            schema["paths"]
        )
        assert {"TurnIn", "EventOut", "RunResultOut", "ErrorOut"} <= set(
            schema["components"]["schemas"]
        )


async def test_create_app_needs_a_session_runner() -> None:
    agent = rk.ChatModelAgent("a", model=rk.ScriptedModel([]))
    with pytest.raises(ConfigurationError, match="session_service"):
        create_app(rk.Runner(agent))
    with pytest.raises(ConfigurationError, match="api_keys"):
        create_app(desk(), api_keys={})


async def test_sessions_crud() -> None:
    async with client(desk()) as http:
        created = await http.post("/sessions", json={"session_id": "s1", "state": {"cart": 2}})
        assert created.status_code == 201
        assert created.json()["id"] == "s1" and created.json()["state"] == {"cart": 2}
        assert created.json()["user_id"] == "dev"
        generated = (await http.post("/sessions", json={})).json()["id"]
        assert len(generated) == 32
        listed = (await http.get("/sessions")).json()
        assert [s["id"] for s in listed] == ["s1", generated]
        again = await http.post("/sessions", json={"session_id": "s1"})
        assert again.status_code == 409
        assert again.json()["error"]["type"] == "SessionExistsError"
        got = (await http.get("/sessions/s1")).json()
        assert got["state"] == {"cart": 2} and got["events"] == []
        assert (await http.delete("/sessions/s1")).status_code == 204
        missing = await http.get("/sessions/s1")
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "SessionNotFoundError"
        assert (await http.delete("/sessions/s1")).status_code == 404


async def test_a_streamed_transfer_turn() -> None:
    await _streamed_transfer_turn(desk())


async def test_a_streamed_transfer_turn_on_a_database(database_url: str) -> None:
    from relaykit.sessions.database import DatabaseSessionService

    async with DatabaseSessionService(database_url) as service:
        await _streamed_transfer_turn(desk(service=service))


async def _streamed_transfer_turn(runner: rk.Runner) -> None:
    async with client(runner) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        events = await turn(http, "s1", {"text": "Where is order 7?", "state_delta": {"k": 1}})
        assert _kinds(events)[-1] == "done"
        agent_events = [data for name, data in events if name == "agent_event"]
        assert [(e["author"], e["run_path"]) for e in agent_events] == [
            ("user", []),
            ("triage", ["triage"]),
            ("triage", ["triage"]),
            ("orders", ["triage", "orders"]),
        ]
        user, call, result, answer = agent_events
        assert user["message"]["content"] == "Where is order 7?"
        assert user["state_delta"] == {"k": 1} and user["agent_name"] == ""
        assert call["message"]["tool_calls"][0]["name"] == "transfer_to_agent"
        assert result["action"]["transfer_to_agent"] == "orders"
        assert answer["message"] == {
            "role": "assistant",
            "content": "Order 7 left on Monday.",
            "tool_calls": [],
            "tool_call_id": None,
            "tool_name": None,
        }
        assert len({e["invocation_id"] for e in agent_events}) == 1
        done = events[-1][1]
        assert done == {"output": "Order 7 left on Monday.", "interrupt": None, "session_id": "s1"}
        # The streamed events are the stored ones: same ids, same order.
        stored = (await http.get("/sessions/s1")).json()
        assert [e["id"] for e in stored["events"]] == [e["id"] for e in agent_events]
        assert stored["state"] == {"k": 1}
        after = (await http.get("/sessions/s1/events", params={"after": user["id"]})).json()
        assert [e["id"] for e in after] == [e["id"] for e in agent_events[1:]]
        unknown = await http.get("/sessions/s1/events", params={"after": "nope"})
        assert unknown.status_code == 404


async def test_chunks_while_a_message_streams() -> None:
    async with client(desk(streaming=True)) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        events = await turn(http, "s1", {"text": "Where is order 7?"})
        chunks = [data for name, data in events if name == "chunk"]
        assert "".join(c["delta"] for c in chunks) == "Order 7 left on Monday."
        assert len({c["event_id"] for c in chunks}) == 1
        # The complete message follows as a stored event, before done.
        agent_events = [data for name, data in events if name == "agent_event"]
        assert agent_events[-1]["message"]["content"] == "Order 7 left on Monday."
        assert _kinds(events)[-1] == "done"
        stored = (await http.get("/sessions/s1/events")).json()
        assert [e["id"] for e in stored] == [e["id"] for e in agent_events]


async def test_a_pause_answered_by_a_tool_response() -> None:
    async with client(desk()) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        await turn(http, "s1", {"text": "Where is order 7?"})
        paused = await turn(http, "s1", {"text": "I want a refund"})
        done = paused[-1]
        assert done[0] == "done"
        interrupt = done[1]["interrupt"]
        assert interrupt is not None and len(interrupt["contexts"]) == 1
        point = interrupt["contexts"][0]
        assert point["address"][0] == "agent:triage"
        assert "tool:ask_manager:c9" in point["address"]
        # The session says what its pause waits for, as the turn's end did.
        assert (await http.get("/sessions/s1")).json()["pause"] == interrupt
        answer = {"messages": [{"role": "tool", "content": "yes", "tool_call_id": "c9"}]}
        events = await turn(http, "s1", answer)
        assert events[-1][1] == {
            "output": "manager said: yes",
            "interrupt": None,
            "session_id": "s1",
        }
        assert (await http.get("/sessions/s1")).json()["pause"] is None
        wrong = await http.post(
            "/sessions/s1/turns",
            json={"messages": [{"role": "tool", "content": "x", "tool_call_id": "c9"}]},
        )
        assert wrong.status_code == 409
        assert wrong.json()["error"]["type"] == "ResumeTargetError"


async def test_a_pause_answered_by_resume_and_stream_false() -> None:
    runner = rk.Runner(Approval("approver"), session_service=rk.InMemorySessionService())
    async with client(runner) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        nothing = await http.post("/sessions/s1/resume", json={})
        assert nothing.status_code == 409
        assert nothing.json()["error"]["type"] == "CheckpointNotFoundError"
        paused = await http.post("/sessions/s1/turns", json={"text": "pay", "stream": False})
        assert paused.status_code == 200
        body = paused.json()
        assert body["output"] is None and body["session_id"] == "s1"
        point = body["interrupt"]["contexts"][0]
        assert json.loads(point["info"]) == {"question": "approve?"}
        assert point["address"] == ["agent:approver"]
        assert [e["author"] for e in body["events"]] == ["user", "approver"]
        assert body["events"][1]["action"]["interrupted"]["contexts"][0]["id"] == point["id"]
        bad = await http.post("/sessions/s1/resume", json={"targets": {"nope": 1}})
        assert bad.status_code == 409
        assert bad.json()["error"]["type"] == "ResumeTargetError"
        resumed = await http.post("/sessions/s1/resume", json={"targets": {point["id"]: "ok"}})
        events = parse_sse(resumed.text)
        assert events[-1] == (
            "done",
            {"output": "resumed with ok", "interrupt": None, "session_id": "s1"},
        )
        again = await http.post("/sessions/s1/resume", json={"stream": False})
        assert again.status_code == 409


async def test_users_never_see_each_others_sessions() -> None:
    keys = {"key-a": "alice", "key-b": "bob"}
    alice = {"Authorization": "Bearer key-a"}
    bob = {"Authorization": "Bearer key-b"}
    async with client(desk(), api_keys=keys) as http:
        made = await http.post("/sessions", json={"session_id": "s1"}, headers=alice)
        assert made.json()["user_id"] == "alice"
        await turn(http, "s1", {"text": "Where is order 7?"}, **alice)
        assert (await http.get("/sessions", headers=bob)).json() == []
        for method, path, body in [
            ("GET", "/sessions/s1", None),
            ("GET", "/sessions/s1/events", None),
            ("POST", "/sessions/s1/turns", {"text": "hi"}),
            ("POST", "/sessions/s1/resume", {}),
            ("DELETE", "/sessions/s1", None),
        ]:
            response = await http.request(method, path, json=body, headers=bob)
            assert response.status_code == 404, (method, path)
            assert response.json()["error"]["type"] == "SessionNotFoundError"
        # bob may have his own s1; alice's is untouched.
        assert (
            await http.post("/sessions", json={"session_id": "s1"}, headers=bob)
        ).status_code == 201
        assert len((await http.get("/sessions/s1", headers=alice)).json()["events"]) == 4
        assert (await http.get("/sessions/s1", headers=bob)).json()["events"] == []


async def test_missing_and_unknown_keys_are_401() -> None:
    async with client(desk(), api_keys={"key-a": "alice"}) as http:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic key-a"}):
            response = await http.get("/sessions", headers=headers)
            assert response.status_code == 401
            assert response.json()["error"]["type"] == "unauthorized"
            assert response.headers["www-authenticate"] == "Bearer"
        assert (await http.get("/health")).status_code == 200


async def test_bad_bodies() -> None:
    async with client(desk()) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        broken = await http.post(
            "/sessions/s1/turns", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert broken.status_code == 400
        assert broken.json()["error"]["type"] == "validation_error"
        for body in (
            {},
            {"text": "a", "messages": [{"role": "user", "content": "b"}]},
            {"messages": [{"role": "assistant", "content": "b"}]},
            {"messages": []},
            {"messages": [{"role": "tool", "content": "b"}]},
            {"messages": [{"role": "user", "content": "b", "tool_call_id": "c1"}]},
            {"text": "a", "colour": "red"},
        ):
            response = await http.post("/sessions/s1/turns", json=body)
            assert response.status_code == 422, body
            assert response.json()["error"]["type"] == "validation_error"
        bad_key = await http.post("/sessions/s1/turns", json={"text": "a", "state_delta": {"": 1}})
        assert bad_key.status_code == 422
        typo = await http.get("/sessions/s1/events", params={"afer": "x"})
        assert typo.status_code == 422
        assert typo.json()["error"] == {
            "type": "validation_error",
            "message": "unknown query parameter(s): 'afer'",
        }
        never = await http.post("/sessions/nope/turns", json={"text": "a"})
        assert never.status_code == 404
        assert (await http.get("/sessions/nope")).status_code == 404
        # Nothing was stored by the refused calls, and no session was created.
        assert (await http.get("/sessions/s1")).json()["events"] == []
        assert [s["id"] for s in (await http.get("/sessions")).json()] == ["s1"]


async def test_a_busy_session_is_409() -> None:
    gate = Gate("gate")
    runner = rk.Runner(gate, session_service=rk.InMemorySessionService(), session_lock_timeout=0)
    app = create_app(runner)
    async with app_client(app) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        first = asyncio.create_task(http.post("/sessions/s1/turns", json={"text": "a"}))
        while not app.state.turns:
            await asyncio.sleep(0.01)
        busy = await http.post("/sessions/s1/turns", json={"text": "b"})
        assert busy.status_code == 409
        assert busy.json()["error"]["type"] == "SessionBusyError"
        gate.release.set()
        events = parse_sse((await first).text)
        assert events[-1][1]["output"] == "second"


async def _disconnecting_request(app: Any, path: str, body: bytes) -> list[bytes]:
    """Send one request straight to the ASGI app and go away after the first body chunk."""
    received: list[bytes] = []
    gone = asyncio.Event()
    sent_request = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_request
        if not sent_request:
            sent_request = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            received.append(message["body"])
            gone.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
        "server": ("test", 80),
        "client": ("test", 1),
    }
    await asyncio.wait_for(app(scope, receive, send), 5)
    return received


async def test_a_client_that_disconnects_does_not_lose_the_turn() -> None:
    gate = Gate("gate")
    runner = rk.Runner(gate, session_service=rk.InMemorySessionService())
    app = create_app(runner)
    async with app_client(app) as http:
        await http.post("/sessions", json={"session_id": "s1"})
    received = await _disconnecting_request(app, "/sessions/s1/turns", b'{"text": "hello"}')
    assert parse_sse(b"".join(received).decode())[0][0] == "agent_event"
    # The response is gone; the turn is still running, waiting at the gate.
    (task,) = app.state.turns
    assert not task.done()
    gate.release.set()
    await asyncio.wait_for(task, 5)
    session = await runner.session_service.get_session("relaykit", "dev", "s1")
    assert session is not None
    contents = [e.message.content for e in session.events if e.message is not None]
    assert contents == ["hello", "first", "second"]
    async with app_client(app) as http:
        events = (await http.get("/sessions/s1/events")).json()
        assert [e["message"]["content"] for e in events] == contents


async def test_clients_cannot_write_app_wide_state() -> None:
    async with client(desk(), {"k-ana": "ana", "k-bo": "bo"}) as http:
        bo = {"Authorization": "Bearer k-bo"}
        made = await http.post("/sessions", json={"state": {"app:role": "admin"}}, headers=bo)
        assert made.status_code == 422 and made.json()["error"]["type"] == "validation_error"
        await http.post("/sessions", json={"session_id": "s1"}, headers=bo)
        turn_response = await http.post(
            "/sessions/s1/turns",
            json={"text": "hi", "state_delta": {"app:role": "admin"}, "stream": False},
            headers=bo,
        )
        assert turn_response.status_code == 422
        ana = {"Authorization": "Bearer k-ana"}
        created = await http.post("/sessions", json={"session_id": "a1"}, headers=ana)
        assert created.json()["state"] == {}
