"""A scripted loopback HTTP server that the real provider SDKs talk to.

The server (Starlette run by uvicorn on 127.0.0.1, random port, background thread) records every
request and answers from a per-test queue: JSON bodies, server-sent event streams and error
statuses, so each test speaks the provider's wire protocol over real HTTP. Tests import nothing
from here: they use the ``server`` fixture (``enqueue_json``, ``enqueue_sse``, ``requests``,
``bodies``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Reply:
    """One scripted answer: ``json`` body, or ``sse`` events ``(event name or None, data)``."""

    status: int = 200
    json: Any = None
    sse: list[tuple[str | None, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any


class MockServer:
    """The per-test view of the shared server: enqueue replies, inspect requests."""

    def __init__(self) -> None:
        self.base_url = ""
        self.requests: list[Recorded] = []
        self.replies: deque[Reply] = deque()
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.replies.clear()

    def enqueue(self, *replies: Reply) -> None:
        with self.lock:
            self.replies.extend(replies)

    def enqueue_json(self, body: Any, status: int = 200, *, times: int = 1,
                     headers: dict[str, str] | None = None) -> None:
        """Answer the next ``times`` requests with this JSON body and status."""
        self.enqueue(*[Reply(status, body, None, dict(headers or {}))] * times)

    def enqueue_sse(self, events: list[tuple[str | None, Any]], status: int = 200) -> None:
        """Answer the next request with these server-sent events ``(event or None, data)``."""
        self.enqueue(Reply(status, None, list(events)))

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    async def handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        with self.lock:
            self.requests.append(Recorded(request.method, request.url.path, request.url.query,
                                          {k.lower(): v for k, v in request.headers.items()},
                                          body))
            reply = self.replies.popleft() if self.replies else None
        if reply is None:
            return JSONResponse({"error": {"message": "no scripted reply left"}}, status_code=599)
        if reply.sse is not None:
            return StreamingResponse(_sse(reply.sse), status_code=reply.status,
                                     media_type="text/event-stream", headers=reply.headers)
        return JSONResponse(reply.json, status_code=reply.status, headers=reply.headers)


async def _sse(events: list[tuple[str | None, Any]]) -> AsyncIterator[bytes]:
    for event, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {event}\n" if event else ""
        yield f"{head}data: {text}\n\n".encode()


_SHARED = MockServer()


@pytest.fixture(scope="session")
def _running_server() -> Iterator[MockServer]:
    async def endpoint(request: Request) -> Response:
        return await _SHARED.handle(request)

    app = Starlette(routes=[Route("/{path:path}", endpoint, methods=["GET", "POST"])])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the mock provider server did not start")
        time.sleep(0.01)
    _SHARED.base_url = f"http://127.0.0.1:{port}"
    try:
        yield _SHARED
    finally:
        server.should_exit = True
        thread.join(timeout=5)
        sock.close()


@pytest.fixture
def server(_running_server: MockServer) -> Iterator[MockServer]:
    """The mock server, with an empty reply queue and request log."""
    _running_server.reset()
    yield _running_server
    _running_server.reset()


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
