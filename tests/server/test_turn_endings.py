"""How turns end over HTTP: broken streams, busy deletes, tools that exit, shutdown, errors.

docs/http-server.md: the `discard` event, DELETE of a busy session, errors as `ErrorOut`,
shutdown with a grace period.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

import relaykit as rk
from relaykit import Message, ToolCall
from relaykit.errors import ConfigurationError
from relaykit.messages import MessageStream
from relaykit.models.base import ModelRequest
from relaykit.server import create_app
from tests.server.support import Gate, app_client, parse_sse, turn

ROOT = Path(__file__).resolve().parents[2]


class FlakyStreams:
    """A streaming model: each call streams its chunks, then raises its error (if any)."""

    def __init__(self, attempts: Sequence[tuple[Sequence[str], BaseException | None]]) -> None:
        self._attempts = iter(attempts)

    async def generate(self, request: ModelRequest) -> Message:
        raise AssertionError("this model only streams")

    def stream(self, request: ModelRequest) -> MessageStream:
        texts, error = next(self._attempts)

        async def produce() -> AsyncIterator[Message]:
            for text in texts:
                yield Message.assistant(text)
            if error is not None:
                raise error

        return MessageStream(produce())


def _no_wait(attempt: int) -> float:
    return 0.0


def _streaming_runner(model: FlakyStreams, retries: int) -> rk.Runner:
    agent = rk.ChatModelAgent(
        "writer", model=model, retry=rk.ModelRetry(max_retries=retries, backoff=_no_wait)
    )
    return rk.Runner(agent, session_service=rk.InMemorySessionService(), streaming=True)


# -- discard -----------------------------------------------------------------------------------
async def test_a_reply_retried_mid_stream_discards_its_chunks() -> None:
    model = FlakyStreams(
        [(["Draft ", "one"], ConnectionError("reset")), (["Final ", "answer."], None)]
    )
    async with app_client(create_app(_streaming_runner(model, retries=2))) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        events = await turn(http, "s1", {"text": "write"})
        kinds = [name for name, _ in events]
        assert kinds == [
            *("agent_event", "chunk", "chunk", "discard"),  # the first attempt
            *("chunk", "chunk", "agent_event", "done"),  # the retried reply, stored
        ]
        first_id = events[1][1]["event_id"]
        assert events[1][1] == {"event_id": first_id, "agent_name": "writer", "delta": "Draft "}
        assert events[3][1] == {"event_id": first_id, "reason": "retry"}
        second_id = events[4][1]["event_id"]
        assert second_id != first_id
        # What a client shows: every chunk but the discarded ones, then the stored message.
        dropped = {data["event_id"] for name, data in events if name == "discard"}
        shown = "".join(
            data["delta"]
            for name, data in events
            if name == "chunk" and data["event_id"] not in dropped
        )
        assert shown == "Final answer."
        assert events[6][1]["message"]["content"] == "Final answer."
        assert events[-1][1]["output"] == "Final answer."
        stored = (await http.get("/sessions/s1/events")).json()
        assert [e["message"]["content"] for e in stored] == ["write", "Final answer."]


async def test_a_stream_that_breaks_for_good_discards_its_chunks_then_reports_the_error() -> None:
    model = FlakyStreams([(["Half a "], ValueError("bad chunk"))])
    async with app_client(create_app(_streaming_runner(model, retries=0))) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        events = await turn(http, "s1", {"text": "write"})
        assert [name for name, _ in events] == [
            "agent_event",
            "chunk",
            "discard",
            "agent_event",
            "done",
        ]
        assert events[2][1] == {"event_id": events[1][1]["event_id"], "reason": "error"}
        error = events[3][1]
        assert error["author"] == "writer" and "bad chunk" in error["error"]
        stored = (await http.get("/sessions/s1/events")).json()
        assert [e["id"] for e in stored] == [events[0][1]["id"], error["id"]]


# -- delete while a turn runs ------------------------------------------------------------------
async def _gated_turn(app: Any, http: httpx.AsyncClient) -> asyncio.Task[httpx.Response]:
    await http.post("/sessions", json={"session_id": "s1"})
    running = asyncio.create_task(http.post("/sessions/s1/turns", json={"text": "hello"}))
    while not app.state.turns:
        await asyncio.sleep(0.01)
    return running


async def test_deleting_a_session_while_its_turn_runs_is_409_and_the_turn_ends_normally() -> None:
    gate = Gate("gate")
    runner = rk.Runner(gate, session_service=rk.InMemorySessionService())
    app = create_app(runner)
    async with app_client(app) as http:
        running = await _gated_turn(app, http)
        busy = await http.delete("/sessions/s1")
        assert busy.status_code == 409
        assert busy.json()["error"]["type"] == "SessionBusyError"
        gate.release.set()
        events = parse_sse((await running).text)
        assert [name for name, _ in events][-1] == "done"
        assert events[-1][1]["output"] == "second"
        assert [
            e["message"]["content"] for e in (await http.get("/sessions/s1/events")).json()
        ] == [
            "hello",
            "first",
            "second",
        ]
        assert (await http.delete("/sessions/s1")).status_code == 204
        assert (await http.get("/sessions/s1")).status_code == 404


async def test_delete_with_a_timeout_waits_for_the_running_turn() -> None:
    gate = Gate("gate")
    runner = rk.Runner(gate, session_service=rk.InMemorySessionService())
    app = create_app(runner, delete_timeout=30)
    async with app_client(app) as http:
        running = await _gated_turn(app, http)
        deleting = asyncio.create_task(http.delete("/sessions/s1"))
        await asyncio.sleep(0.05)
        assert not deleting.done()  # waiting for the turn's lock
        gate.release.set()
        events = parse_sse((await running).text)
        assert events[-1][1]["output"] == "second"  # the turn was not broken by the delete
        assert (await deleting).status_code == 204
        assert (await http.get("/sessions/s1")).status_code == 404


@pytest.mark.parametrize(
    "options",
    [{"shutdown_grace": -1}, {"delete_timeout": float("nan")}, {"shutdown_grace": "5"}],
)
async def test_timeouts_must_be_seconds(options: dict[str, Any]) -> None:
    agent = rk.ChatModelAgent("a", model=rk.ScriptedModel([]))
    with pytest.raises(ConfigurationError, match="seconds"):
        create_app(rk.Runner(agent, session_service=rk.InMemorySessionService()), **options)


# -- tools that exit -----------------------------------------------------------------------------
@rk.tool
def leave(code: int) -> str:
    """Exit the process (a CLI library's sys.exit, say).

    Args:
        code: the exit code
    """
    raise SystemExit(code)


@rk.tool
async def interrupt_me() -> str:
    """Raise KeyboardInterrupt."""
    raise KeyboardInterrupt


def _one_tool_runner(name: str, arguments: str) -> rk.Runner:
    model = rk.ScriptedModel(
        [Message.assistant("", [ToolCall("c1", name, arguments)]), Message.assistant("done")] * 2
    )
    agent = rk.ChatModelAgent("worker", model=model, tools=[leave, interrupt_me])
    return rk.Runner(agent, session_service=rk.InMemorySessionService())


@pytest.mark.parametrize(
    ("tool", "arguments", "error"),
    [("leave", '{"code": 3}', "SystemExit: 3"), ("interrupt_me", "{}", "KeyboardInterrupt")],
)
async def test_a_tool_that_exits_ends_its_turn_with_an_error_and_the_server_goes_on(
    tool: str, arguments: str, error: str
) -> None:
    app = create_app(_one_tool_runner(tool, arguments))
    async with app_client(app) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        events = await turn(http, "s1", {"text": "go"})
        assert [name for name, _ in events] == ["agent_event", "agent_event", "agent_event", "done"]
        failure = events[2][1]
        assert failure["author"] == "worker" and failure["error"].startswith(error)
        assert events[-1][1]["interrupt"] is None
        assert not app.state.turns  # the turn's task ended; nothing escaped it
        # The server goes on: the same session takes the next turn.
        assert (await http.get("/health")).status_code == 200
        again = await turn(http, "s1", {"text": "again"})
        assert again[-1][0] == "done"
        stored = (await http.get("/sessions/s1/events")).json()
        assert [e["message"]["content"] for e in stored if e["author"] == "user"] == [
            "go",
            "again",
        ]


_PARALLEL_EXIT = textwrap.dedent(
    """
    import asyncio, httpx, relaykit as rk
    from relaykit import Message, ToolCall
    from relaykit.server import create_app

    @rk.tool
    def leave() -> str:
        '''Exit.'''
        raise SystemExit(3)

    async def main():
        calls = [ToolCall("c1", "leave", "{}"), ToolCall("c2", "leave", "{}")]
        model = rk.ScriptedModel([Message.assistant("", calls), Message.assistant("ok")])
        agent = rk.ChatModelAgent("a", model=model, tools=[leave])
        app = create_app(rk.Runner(agent, session_service=rk.InMemorySessionService()))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            await http.post("/sessions", json={"session_id": "s1"})
            await http.post("/sessions/s1/turns", json={"text": "hi"})
            print("status", (await http.get("/health")).status_code)

    asyncio.run(main())
    """
)


def test_concurrent_tools_that_exit_do_not_stop_the_server() -> None:
    # In a process of its own: a SystemExit escaping to the event loop would end the process.
    done = subprocess.run(
        [sys.executable, "-c", _PARALLEL_EXIT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert "status 200" in done.stdout, done.stderr[-2000:]


# -- shutdown ----------------------------------------------------------------------------------
async def test_shutdown_waits_for_a_running_turn_within_the_grace_period() -> None:
    gate = Gate("gate")
    runner = rk.Runner(gate, session_service=rk.InMemorySessionService())
    app = create_app(runner, shutdown_grace=60)
    async with app_client(app) as http:
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        running = await _gated_turn(app, http)
        stopping = asyncio.create_task(lifespan.__aexit__(None, None, None))
        await asyncio.sleep(0.05)
        assert not stopping.done()  # waiting for the turn
        gate.release.set()
        await stopping
        events = parse_sse((await running).text)
        assert events[-1] == ("done", {"output": "second", "interrupt": None, "session_id": "s1"})


async def test_shutdown_cancels_turns_past_the_grace_period_and_leaves_their_session_usable() -> (
    None
):
    gate = Gate("gate")
    service = rk.InMemorySessionService()
    app = create_app(rk.Runner(gate, session_service=service), shutdown_grace=0.05)
    async with app_client(app) as http:
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        running = await _gated_turn(app, http)
        await lifespan.__aexit__(None, None, None)  # the gate never opens
        assert not app.state.turns
        events = parse_sse((await running).text)
        assert [name for name, _ in events] == ["agent_event", "agent_event", "agent_event", "done"]
        assert events[2][1]["error"] == (
            "CancelledError: the server shut down before the turn ended"
        )
        assert events[-1][1]["output"] == "first"
    # What the turn stored stays, and the session takes the next turn (its lock was released).
    gate.release.set()
    runner = rk.Runner(gate, session_service=service, session_lock_timeout=0)
    async with app_client(create_app(runner)) as http:
        stored = (await http.get("/sessions/s1/events")).json()
        assert [e["message"]["content"] for e in stored] == ["hello", "first"]
        events = await turn(http, "s1", {"text": "again"})
        assert events[-1][1]["output"] == "second"


# -- errors ------------------------------------------------------------------------------------
class BrokenService(rk.InMemorySessionService):
    """Lists sessions with a bug whose message holds something private."""

    async def list_sessions(self, app_name: str, user_id: str) -> list[rk.Session]:
        raise RuntimeError("secret stored content")


async def test_every_error_is_an_error_out() -> None:
    agent = rk.ChatModelAgent("a", model=rk.ScriptedModel([]))
    app = create_app(rk.Runner(agent, session_service=BrokenService()))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        cases = [
            (await http.get("/nowhere"), 404, "not_found"),
            (await http.put("/sessions"), 405, "method_not_allowed"),
            (
                await http.post(
                    "/sessions", content=b"[", headers={"content-type": "application/json"}
                ),
                400,
                "validation_error",
            ),
            (await http.post("/sessions", json={"session_id": ""}), 422, "validation_error"),
            (
                await http.post("/sessions", content=b"{}", headers={"content-type": "text/plain"}),
                415,
                "unsupported_media_type",
            ),
            (await http.get("/sessions"), 500, "internal_error"),
        ]
        for response, status, kind in cases:
            assert response.status_code == status, response.text
            assert response.headers["content-type"] == "application/json"
            body = response.json()
            assert set(body) == {"error"} and set(body["error"]) == {"type", "message"}
            assert body["error"]["type"] == kind and body["error"]["message"]
        assert "secret" not in cases[-1][0].text
        schema = (await http.get("/openapi.json")).json()
        kinds = schema["components"]["schemas"]["ErrorDetail"]["properties"]["type"]["enum"]
        assert {"validation_error", "not_found", "SessionBusyError", "internal_error"} <= set(kinds)
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                if path != "/health":
                    assert {"401", "404", "422", "500"} <= set(operation["responses"]), (
                        path,
                        method,
                    )


async def test_the_openapi_document_declares_the_api_key() -> None:
    agent = rk.ChatModelAgent("a", model=rk.ScriptedModel([]))
    runner = rk.Runner(agent, session_service=rk.InMemorySessionService())
    async with app_client(create_app(runner, api_keys={"k": "ana"})) as http:
        schema = (await http.get("/openapi.json")).json()
        assert schema["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
        assert schema["paths"]["/sessions"]["get"]["security"] == [{"apiKey": []}]
        assert "security" not in schema["paths"]["/health"]["get"]
    async with app_client(create_app(runner)) as http:  # dev mode: no key to declare
        assert "securitySchemes" not in (await http.get("/openapi.json")).json()["components"]


# -- a real socket -------------------------------------------------------------------------------
async def test_a_client_that_drops_its_connection_under_uvicorn_does_not_lose_the_turn() -> None:
    import uvicorn

    gate = Gate("gate")
    runner = rk.Runner(gate, session_service=rk.InMemorySessionService())
    app = create_app(runner)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            await http.post("/sessions", json={"session_id": "s1"})
            async with http.stream("POST", "/sessions/s1/turns", json={"text": "hello"}) as stream:
                lines = stream.aiter_lines()
                assert await anext(lines) == "event: agent_event"
            # The connection is closed; the turn waits at the gate.
            (task,) = app.state.turns
            assert not task.done()
            gate.release.set()
            await asyncio.wait_for(task, 10)
            stored = (await http.get("/sessions/s1/events")).json()
            assert [e["message"]["content"] for e in stored] == ["hello", "first", "second"]
    finally:
        server.should_exit = True
        await serving


async def test_a_turn_that_waited_while_its_session_was_deleted_is_404_and_creates_nothing() -> (
    None
):
    service = rk.InMemorySessionService()
    model = rk.ScriptedModel([Message.assistant("hi")])
    runner = rk.Runner(rk.ChatModelAgent("helper", model=model), session_service=service)
    app = create_app(runner)
    async with app_client(app) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        # Another process's turn holds the session: this one waits for the lock...
        async with service.lock("relaykit", "dev", "s1", timeout=5):
            waiting = asyncio.create_task(http.post("/sessions/s1/turns", json={"text": "hi"}))
            while not app.state.turns:
                await asyncio.sleep(0)
            for _ in range(20):
                await asyncio.sleep(0)
            # ...while the session is deleted (by that holder, which may).
            await service.delete_session("relaykit", "dev", "s1")
        answer = await asyncio.wait_for(waiting, 5)
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["type"] == "SessionNotFoundError"
        assert (await http.get("/sessions")).json() == []
        assert model.requests == []
