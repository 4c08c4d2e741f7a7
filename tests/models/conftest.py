"""A scripted loopback HTTP server that the real provider SDKs talk to, and what every provider
test shares.

The server (Starlette run by uvicorn on 127.0.0.1, random port, background thread) records every
request and answers from a per-test queue: JSON bodies, server-sent event streams and error
statuses, so each test speaks the provider's wire protocol over real HTTP. A stream can be held
open after its events, and the server counts the streams whose client hung up before their end.
Tests import nothing from here: they use the fixtures ``server`` (``enqueue_json``,
``enqueue_sse``, ``requests``, ``bodies``, ``saw_disconnect``), ``build_model``,
``retry_delays``, ``no_cyclic_gc``, ``first_chunk_then_close``, ``http_date``,
``weather_tool`` and ``closed_port_url``.
"""

from __future__ import annotations

import asyncio
import email.utils
import gc
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from relaykit.messages import Message, MessageStream
from relaykit.models import _retry
from relaykit.models.base import ToolSpec

HOLD_OPEN_SECONDS = 30.0
"""How long a held-open stream waits for its client to hang up before it ends by itself."""


@dataclass
class Reply:
    """One scripted answer: ``json`` body, or ``sse`` events ``(event name or None, data)``.

    With ``hold_open`` the event stream stays open after its events, as a model still thinking
    would, so that only the client hanging up ends it early.
    """

    status: int = 200
    json: Any = None
    sse: list[tuple[str | None, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hold_open: bool = False


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
        self.disconnects = 0  # event streams that ended because the client hung up
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.replies.clear()
            self.disconnects = 0

    def enqueue(self, *replies: Reply) -> None:
        with self.lock:
            self.replies.extend(replies)

    def enqueue_json(
        self, body: Any, status: int = 200, *, times: int = 1, headers: dict[str, str] | None = None
    ) -> None:
        """Answer the next ``times`` requests with this JSON body and status."""
        self.enqueue(*[Reply(status, body, None, dict(headers or {}))] * times)

    def enqueue_sse(
        self, events: list[tuple[str | None, Any]], status: int = 200, *, hold_open: bool = False
    ) -> None:
        """Answer the next request with these server-sent events ``(event or None, data)``;
        with ``hold_open``, keep the stream open after them until the client hangs up."""
        self.enqueue(Reply(status, None, list(events), hold_open=hold_open))

    async def saw_disconnect(self, timeout: float = 5.0) -> bool:
        """Whether a client hung up on an unfinished event stream, waiting up to ``timeout``.

        The server notices in its own thread, a moment after the client closes the connection.
        """
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if self.disconnects:
                    return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)

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
            self.requests.append(
                Recorded(
                    request.method,
                    request.url.path,
                    request.url.query,
                    {k.lower(): v for k, v in request.headers.items()},
                    body,
                )
            )
            reply = self.replies.popleft() if self.replies else None
        if reply is None:
            return JSONResponse({"error": {"message": "no scripted reply left"}}, status_code=599)
        if reply.sse is not None:
            return StreamingResponse(
                self._sse(reply),
                status_code=reply.status,
                media_type="text/event-stream",
                headers=reply.headers,
            )
        return JSONResponse(reply.json, status_code=reply.status, headers=reply.headers)

    async def _sse(self, reply: Reply) -> AsyncIterator[bytes]:
        ended = False
        try:
            for event, data in reply.sse or []:
                text = data if isinstance(data, str) else json.dumps(data)
                head = f"event: {event}\n" if event else ""
                yield f"{head}data: {text}\n\n".encode()
            if reply.hold_open:
                await asyncio.sleep(HOLD_OPEN_SECONDS)
            ended = True
        finally:
            # Starlette cancels this generator when the ASGI server reports ``http.disconnect``:
            # the only way a stream stops before its end is the client closing the connection.
            if not ended:
                with self.lock:
                    self.disconnects += 1


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
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    )
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
async def build_model() -> AsyncIterator[Callable[..., Any]]:
    """``build_model(ModelClass, model_name, **kwargs)``: a provider model, closed after the test.

    A test file binds its class, model name, key and base URL once (``functools.partial``).
    """
    built: list[Any] = []

    def build(cls: Callable[..., Any], model: str, /, **kwargs: Any) -> Any:
        instance = cls(model, **kwargs)
        built.append(instance)
        return instance

    yield build
    for instance in built:
        await instance.aclose()


@pytest.fixture(autouse=True)
def retry_delays(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits the retry layer asked for, in order. Nothing really sleeps, in any test here."""
    delays: list[float] = []

    async def record(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(0)  # still a point where the task can be cancelled, as a wait is

    monkeypatch.setattr(_retry, "_sleep", record)
    return delays


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    """Cyclic garbage collection off for the test: what gets closed is closed on purpose.

    A leaked connection would otherwise close whenever the collector happens to free it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@pytest.fixture
def first_chunk_then_close() -> Callable[[MessageStream], Awaitable[Message]]:
    """``await first_chunk_then_close(stream)``: the first chunk, read by a consumer that then
    stops early and closes the stream."""

    async def read(stream: MessageStream) -> Message:
        try:
            async for chunk in stream:
                return chunk
            raise AssertionError("the stream ended without a chunk")
        finally:
            await stream.aclose()

    return read


@pytest.fixture
def http_date() -> Callable[[float], str]:
    """``http_date(seconds)``: the HTTP date (RFC 9110, whole seconds) that far from now."""
    return lambda seconds: email.utils.formatdate(time.time() + seconds, usegmt=True)


@pytest.fixture
def weather_tool() -> ToolSpec:
    """A tool with one required string argument, as every provider test offers it."""
    return ToolSpec(
        "get_weather",
        "Current weather for a city",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
