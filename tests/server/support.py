"""Apps and an SSE reader for the HTTP API tests (ScriptedModel agents, no network)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

import relaykit as rk
from relaykit import Message, ToolCall
from relaykit.server import create_app


def transfer(to: str) -> Message:
    """A model reply calling ``transfer_to_agent``."""
    return Message.assistant("", [ToolCall("t1", "transfer_to_agent", f'{{"agent_name": "{to}"}}')])


@rk.tool(long_running=True)
def ask_manager(question: str) -> str:
    """Ask a manager; the answer comes back later as this call's result.

    Args:
        question: what to ask
    """
    return "asked"


def answer_tool(request: rk.ModelRequest) -> Message:
    """Reply with the content of the last tool result."""
    return Message.assistant(f"manager said: {request.messages[-1].content}")


class Approval(rk.BaseAgent):
    """Pauses with a question; on resume says what it was told."""

    async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
        yield rk.interrupt(ctx, {"question": "approve?"})

    async def resume(self, ctx: Any, info: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
        yield rk.AgentEvent.from_message(Message.assistant(f"resumed with {info.resume_data}"))


class Gate(rk.BaseAgent):
    """Says "first", waits for ``release``, then says "second" (a slow turn)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.release = asyncio.Event()

    async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
        yield rk.AgentEvent.from_message(Message.assistant("first"))
        await self.release.wait()
        yield rk.AgentEvent.from_message(Message.assistant("second"))


def desk(*, streaming: bool = False, service: Any = None) -> rk.Runner:
    """triage transfers to orders, which answers; then orders asks a manager (a pause)."""
    triage = rk.ChatModelAgent(
        "triage", "routes questions", "Route.", model=rk.ScriptedModel([transfer("orders")])
    )
    orders = rk.ChatModelAgent(
        "orders",
        "answers order questions",
        "Answer.",
        model=rk.ScriptedModel(
            [
                Message.assistant("Order 7 left on Monday."),
                Message.assistant("", [ToolCall("c9", "ask_manager", '{"question": "refund?"}')]),
                answer_tool,
            ]
        ),
        tools=[ask_manager],
    )
    root = rk.set_sub_agents(triage, [orders])
    return rk.Runner(
        root,
        app_name="shop",
        session_service=service if service is not None else rk.InMemorySessionService(),
        streaming=streaming,
    )


def client(runner: rk.Runner, api_keys: Mapping[str, str] | None = None) -> httpx.AsyncClient:
    """An HTTP client of ``create_app(runner)`` (in process)."""
    return app_client(create_app(runner, api_keys=api_keys))


def app_client(app: Any) -> httpx.AsyncClient:
    """An HTTP client of an ASGI app (in process)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def parse_sse(text: str) -> list[tuple[str, Any]]:
    """(event name, decoded data) of every event of an SSE body; comments are skipped."""
    out: list[tuple[str, Any]] = []
    for block in text.split("\n\n"):
        name, data = "message", []
        for line in block.splitlines():
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if data:
            out.append((name, json.loads("\n".join(data))))
    return out


async def turn(
    http: httpx.AsyncClient, session_id: str, body: dict[str, Any], **headers: str
) -> list[tuple[str, Any]]:
    """POST a streamed turn; its SSE events (the response must be a 200 event stream)."""
    response = await http.post(f"/sessions/{session_id}/turns", json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)
