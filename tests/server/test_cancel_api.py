"""``POST /sessions/{id}/cancel``: a running turn stopped at a safe point, kept as the
session's pause, and continued by ``/resume`` (docs/http-server.md#cancelling-a-turn)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

import relaykit as rk
from relaykit import Message, ToolCall
from relaykit.server import create_app
from tests.server.support import app_client, parse_sse


class Desk:
    """An agent whose first ``lookup`` hangs until cut; later calls answer at once."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.called = asyncio.Event()

        @rk.tool
        async def lookup(order: str) -> str:
            """Look an order up.

            Args:
                order: the order's number
            """
            self.calls.append(order)
            self.called.set()
            if len(self.calls) == 1:
                await asyncio.Event().wait()  # hangs: only a cut ends it
            return f"order {order} left on Monday"

        model = rk.ScriptedModel(
            [
                Message.assistant("", [ToolCall("c1", "lookup", '{"order": "7"}')]),
                Message.assistant("Order 7 left on Monday."),
            ]
        )
        agent = rk.ChatModelAgent("orders", "answers", "Answer.", model=model, tools=[lookup])
        self.runner = rk.Runner(agent, app_name="shop", session_service=rk.InMemorySessionService())
        self.app = create_app(self.runner, api_keys={"k-ana": "ana", "k-bo": "bo"})


ANA = {"Authorization": "Bearer k-ana"}
BO = {"Authorization": "Bearer k-bo"}


async def _started(desk: Desk, http: httpx.AsyncClient, body: dict[str, Any]) -> asyncio.Task[Any]:
    """Start a turn of session s1 and wait until its tool hangs."""
    await http.post("/sessions", json={"session_id": "s1"}, headers=ANA)
    task = asyncio.create_task(http.post("/sessions/s1/turns", json=body, headers=ANA))
    await asyncio.wait_for(desk.called.wait(), 5)
    return task


async def test_a_cancelled_turn_pauses_and_resume_finishes_it_once() -> None:
    desk = Desk()
    async with app_client(desk.app) as http:
        running = await _started(desk, http, {"text": "Where is order 7?"})
        cancelled = await http.post("/sessions/s1/cancel", json={}, headers=ANA)
        assert cancelled.status_code == 200, cancelled.text
        outcome = cancelled.json()
        assert outcome["already_ended"] is False and outcome["timed_out"] is False
        interrupt = outcome["interrupt"]
        assert interrupt["cancelled"] == {"mode": "immediate", "escalated": False}
        assert [p["cancelled"] for p in interrupt["contexts"]] == [True]
        assert "tool:lookup:c1" in interrupt["contexts"][0]["address"]
        # The turn's own stream ends with the same pause.
        events = parse_sse((await running).text)
        # (its output: the model's last text, empty beside the tool call)
        assert events[-1] == ("done", {"output": "", "interrupt": interrupt, "session_id": "s1"})
        # The session keeps it as its pause.
        stored = (await http.get("/sessions/s1", headers=ANA)).json()
        assert stored["pause"] == interrupt
        # Nothing runs now: a second cancel says so.
        again = await http.post("/sessions/s1/cancel", json={}, headers=ANA)
        assert again.status_code == 409
        assert again.json()["error"]["type"] == "not_running"
        # The resume runs the cut call again (once) and finishes the turn.
        resumed = parse_sse((await http.post("/sessions/s1/resume", json={}, headers=ANA)).text)
        assert resumed[-1] == (
            "done",
            {"output": "Order 7 left on Monday.", "interrupt": None, "session_id": "s1"},
        )
        assert desk.calls == ["7", "7"]
        final = (await http.get("/sessions/s1", headers=ANA)).json()
        assert final["pause"] is None
        tool_results = [
            e["message"]["content"]
            for e in final["events"]
            if e["message"] is not None and e["message"]["role"] == "tool"
        ]
        assert tool_results == ["order 7 left on Monday"]


async def test_a_cancel_with_a_timeout_escalates_to_immediate() -> None:
    desk = Desk()
    async with app_client(desk.app) as http:
        running = await _started(desk, http, {"text": "Where is order 7?", "stream": False})
        # The tool never finishes: the safe point (after the tool batch) never comes.
        cancelled = await http.post(
            "/sessions/s1/cancel", json={"mode": "after_tools", "timeout": 0.05}, headers=ANA
        )
        assert cancelled.status_code == 200, cancelled.text
        outcome = cancelled.json()
        assert outcome["timed_out"] is True
        assert outcome["interrupt"]["cancelled"] == {"mode": "after_tools", "escalated": True}
        whole = (await running).json()
        assert whole["interrupt"] == outcome["interrupt"]
        assert whole["output"] == ""


async def test_another_users_turn_cannot_be_cancelled() -> None:
    desk = Desk()
    async with app_client(desk.app) as http:
        running = await _started(desk, http, {"text": "Where is order 7?"})
        other = await http.post("/sessions/s1/cancel", json={}, headers=BO)
        assert other.status_code == 404
        assert other.json()["error"]["type"] == "SessionNotFoundError"
        unknown = await http.post("/sessions/nope/cancel", json={}, headers=ANA)
        assert unknown.status_code == 404
        # Still running for its owner, who cancels it.
        assert not running.done()
        mine = await http.post("/sessions/s1/cancel", json={}, headers=ANA)
        assert mine.status_code == 200
        await running


async def test_bad_cancel_bodies_are_422_and_cancel_nothing() -> None:
    desk = Desk()
    async with app_client(desk.app) as http:
        running = await _started(desk, http, {"text": "Where is order 7?"})
        for body in (
            {"mode": "later"},
            {"timeout": -1},
            {"timeout": "soon"},
            {"timeout": 1e9},
            {"timeout": False, "mode": "after_tools"},
            {"timeout": True},
            {"timeout": "1"},
            {"mode": "immediate", "extra": 1},
        ):
            response = await http.post("/sessions/s1/cancel", json=body, headers=ANA)
            assert response.status_code == 422, body
            assert response.json()["error"]["type"] == "validation_error"
            assert response.json()["error"]["message"]
        bad_json = await http.post(
            "/sessions/s1/cancel",
            content=b"{",
            headers={**ANA, "Content-Type": "application/json"},
        )
        assert bad_json.status_code == 400
        assert not running.done()
        assert (await http.post("/sessions/s1/cancel", json={}, headers=ANA)).status_code == 200
        await running


async def test_a_cancel_after_the_turn_ended_is_409_and_the_session_has_no_pause() -> None:
    desk = Desk()
    desk.calls.append("warm")  # the tool answers at once
    async with app_client(desk.app) as http:
        await http.post("/sessions", json={"session_id": "s1"}, headers=ANA)
        done = await http.post(
            "/sessions/s1/turns", json={"text": "Where is order 7?", "stream": False}, headers=ANA
        )
        assert done.json()["output"] == "Order 7 left on Monday."
        await asyncio.gather(*desk.app.state.turns)  # its task has ended too
        late = await http.post("/sessions/s1/cancel", json={"mode": "after_model"}, headers=ANA)
        assert late.status_code == 409
        assert "no turn of this session is running" in late.json()["error"]["message"]
        assert (await http.get("/sessions/s1", headers=ANA)).json()["pause"] is None


async def test_a_new_turn_abandons_a_cancelled_pause() -> None:
    desk = Desk()
    async with app_client(desk.app) as http:
        running = await _started(desk, http, {"text": "Where is order 7?"})
        await http.post("/sessions/s1/cancel", json={}, headers=ANA)
        await running
        body = {"text": "Never mind, where is order 8?", "stream": False}
        answered = await http.post("/sessions/s1/turns", json=body, headers=ANA)
        assert answered.status_code == 200, answered.text
        assert (await http.get("/sessions/s1", headers=ANA)).json()["pause"] is None
        assert (await http.post("/sessions/s1/resume", json={}, headers=ANA)).status_code == 409


def test_the_openapi_document_describes_cancel() -> None:
    desk = Desk()
    document = desk.app.openapi()
    operation = document["paths"]["/sessions/{session_id}/cancel"]["post"]
    assert "409" in operation["responses"] and "200" in operation["responses"]
    schema = json.dumps(document["components"]["schemas"]["CancelIn"])
    assert "after_model" in schema and "after_tools" in schema


async def test_a_turn_is_cancellable_before_its_first_event() -> None:
    """A model call in progress delivers no event yet: the turn is cancellable all the same."""
    called = asyncio.Event()

    class Thinking(rk.ScriptedModel):
        async def generate(self, request: Any) -> Message:
            called.set()
            await asyncio.Event().wait()  # only a cut ends it
            raise AssertionError("unreachable")

    answers = [Message.assistant("Order 7 left on Monday.")]
    agent = rk.ChatModelAgent("orders", model=Thinking([]))
    runner = rk.Runner(agent, session_service=rk.InMemorySessionService())
    async with app_client(create_app(runner)) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        running = asyncio.create_task(http.post("/sessions/s1/turns", json={"text": "hi"}))
        await asyncio.wait_for(called.wait(), 5)
        cancelled = await http.post("/sessions/s1/cancel", json={})
        assert cancelled.status_code == 200, cancelled.text
        interrupt = cancelled.json()["interrupt"]
        assert interrupt["cancelled"] == {"mode": "immediate", "escalated": False}
        events = parse_sse((await running).text)
        assert events[-1][0] == "done" and events[-1][1]["interrupt"] == interrupt
        # The resume calls the model again (now one that answers).
        agent.model = rk.ScriptedModel(answers)
        resumed = parse_sse((await http.post("/sessions/s1/resume", json={})).text)
        assert resumed[-1][1]["output"] == "Order 7 left on Monday."


async def test_a_cancel_in_progress_does_not_hold_up_the_shutdown() -> None:
    """A cancel waiting for its safe point (a tool that never ends, no timeout) is stopped
    with the turns when the shutdown's grace has passed; its request says so."""
    desk = Desk()
    app = create_app(desk.runner, api_keys={"k-ana": "ana"}, shutdown_grace=0.05)
    async with app.router.lifespan_context(app), app_client(app) as http:
        running = await _started(desk, http, {"text": "Where is order 7?"})
        waiting = asyncio.create_task(
            http.post("/sessions/s1/cancel", json={"mode": "after_tools"}, headers=ANA)
        )
        while not app.state.turns or not any(not t.done() for t in app.state.turns):
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)  # the cancel is waiting for the tool batch to end
        assert not waiting.done()
    # The lifespan ended: the turn and the cancel were stopped within the grace.
    answer = await asyncio.wait_for(waiting, 5)
    assert answer.status_code == 503
    assert answer.json()["error"]["type"] == "unavailable"
    assert "shut down before the turn stopped" in answer.json()["error"]["message"]
    await asyncio.wait_for(running, 5)
