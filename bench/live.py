"""Live sessions: what ``Runner.run_live`` adds per chunk of a realtime model's output.

One connection streams N responses; the caller reads them all. Raw: the same connection read
directly (``async for response in connection.receive()``). relaykit: the same connection under
``runner.run_live(...)``, read from ``live.events()`` (each response becomes an event, passes
the storage order, is stored when complete, is buffered for the reader). Two connections:

- ``ScriptedLiveModel``: costs next to nothing per response, so its row is relaykit's own cost;
- a local WebSocket server (the ``websockets`` package, in a thread of its own) sending JSON
  frames, decoded into ``LiveResponse`` by a small connection class: what an adapter does. The
  client's CPU time (``time.thread_time``) is measured, so the server thread does not count.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import relaykit as rk
from relaykit import Blob, Message
from relaykit.models.live import LiveConfig, LiveResponse, ScriptedLiveModel

CHUNKS = 20_000
STORED = 2_000
RUNS = 5
OPENS = 200


# -- a WebSocket connection, as an adapter would read it -------------------------------------
class WsConnection:
    """A ``LiveConnection`` over a websocket: JSON frames ``{"text", "partial"}``."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, message: Message) -> None:
        await self.ws.send(json.dumps({"text": message.content}))

    async def send_realtime(self, blob: Blob) -> None:
        await self.ws.send(blob.data)

    async def receive(self) -> AsyncIterator[LiveResponse]:
        async for frame in self.ws:
            data = json.loads(frame)
            yield LiveResponse(Message.assistant(data["text"]), partial=data["partial"])

    async def close(self) -> None:
        await self.ws.close()


class WsModel:
    """A ``LiveModel`` connecting to the bench's server; the server streams on ``go``."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def connect(self, config: LiveConfig) -> WsConnection:
        from websockets.asyncio.client import connect

        ws = await connect(self.url)
        await ws.send("go")
        return WsConnection(ws)


class Server:
    """A local WebSocket server in a thread of its own: ``CHUNKS`` partial frames per
    connection, then a normal close."""

    def __init__(self) -> None:
        self.url = ""
        self._ready = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        from websockets.asyncio.server import serve

        frame = json.dumps({"text": "token ", "partial": True})

        async def handler(ws: Any) -> None:
            await ws.recv()
            for _ in range(CHUNKS):
                await ws.send(frame)

        self._loop = asyncio.get_running_loop()
        self._stop = self._loop.create_future()
        async with serve(handler, "127.0.0.1", 0) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            self.url = f"ws://127.0.0.1:{port}"
            self._ready.set()
            await self._stop

    def __enter__(self) -> Server:
        self._thread.start()
        self._ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set_result, None)
        self._thread.join()


# -- the measurements --------------------------------------------------------------------
def chunks() -> list[LiveResponse]:
    return [LiveResponse(Message.assistant("token "), partial=True) for _ in range(CHUNKS)]


async def raw_read(model: Any) -> int:
    connection = await model.connect(LiveConfig([]))
    count = 0
    async for _ in connection.receive():
        count += 1
    await connection.close()
    return count


async def relaykit_read(model: Any, service: Any | None = None, session: str = "s") -> int:
    runner = rk.Runner(
        rk.ChatModelAgent("desk", live_model=model),
        session_service=service or rk.InMemorySessionService(),
    )
    count = 0
    async with runner.run_live(user_id="u", session_id=session) as live:
        async for _ in live.events():
            count += 1
    return count


def timed(make: Callable[[], Coroutine[Any, Any, int]], expected: int) -> tuple[float, float]:
    """(wall µs, client CPU µs) per item of one run."""

    async def measured() -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.thread_time()
        count = await make()
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        assert count == expected, (count, expected)
        return wall / count * 1e6, cpu / count * 1e6

    return asyncio.run(measured())


def median_of(make: Callable[[], Coroutine[Any, Any, int]], expected: int) -> tuple[float, float]:
    runs = [timed(make, expected) for _ in range(RUNS)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def stored_rate(kind: str) -> float:
    """Events/s of complete messages, each stored, on one connection."""
    steps = [Message.assistant(f"sentence {i}.") for i in range(STORED)]

    async def run() -> float:
        with tempfile.TemporaryDirectory() as folder:
            if kind == "memory":
                service: Any = rk.InMemorySessionService()
            else:
                from relaykit.sessions.database import DatabaseSessionService

                service = DatabaseSessionService(f"sqlite+aiosqlite:///{folder}/live.db")
            async with service:
                start = time.perf_counter()
                count = await relaykit_read(ScriptedLiveModel([steps]), service)
                elapsed = time.perf_counter() - start
                session = await service.get_session("relaykit", "u", "s")
                assert count == STORED and session is not None and len(session.events) == STORED
                return count / elapsed

    return statistics.median(asyncio.run(run()) for _ in range(3))


def open_close_ms() -> float:
    async def run() -> float:
        service = rk.InMemorySessionService()
        model = ScriptedLiveModel([[ScriptedLiveModel.WAIT]] * OPENS)
        runner = rk.Runner(rk.ChatModelAgent("desk", live_model=model), session_service=service)
        start = time.perf_counter()
        for i in range(OPENS):
            live = await runner.run_live(user_id="u", session_id=f"s{i}")
            await live.close()
        return (time.perf_counter() - start) / OPENS * 1e3

    return statistics.median(asyncio.run(run()) for _ in range(3))


def describe_machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
    except (OSError, StopIteration):
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    load = os.getloadavg()[0]
    return (
        f"Machine: {cpu}, {os.cpu_count()} cores; Python {sys.version.split()[0]}; relaykit at "
        f"{commit}; load average {load:.2f} when the report started. Other work may share "
        "the machine: compare orders of magnitude, not small differences."
    )


def run() -> str:
    header = describe_machine()
    steps = chunks()  # built once, before any clock starts
    s_raw = median_of(lambda: raw_read(ScriptedLiveModel([steps])), CHUNKS)
    s_rk = median_of(lambda: relaykit_read(ScriptedLiveModel([steps])), CHUNKS)
    with Server() as server:
        w_raw = median_of(lambda: raw_read(WsModel(server.url)), CHUNKS)
        w_rk = median_of(lambda: relaykit_read(WsModel(server.url)), CHUNKS)
    memory_rate = stored_rate("memory")
    sqlite_rate = stored_rate("sqlite")
    opening = open_close_ms()
    ws_ratio = w_rk[1] / w_raw[1]
    lines = [
        "# Live sessions: overhead per chunk, events/s on one connection",
        "",
        header,
        "",
        f"One connection streams {CHUNKS:,} partial text chunks; the caller reads them all "
        f"(median of {RUNS} runs). Raw: `async for response in connection.receive()` on the "
        "same kind of connection. relaykit: `runner.run_live(...)` (in-memory session "
        "service, no plugins) read through `live.events()`: each response becomes an event, "
        "passes the storage order and the reader's buffer (partial chunks are never stored). "
        "CPU is the client thread's time (`time.thread_time`), so the WebSocket server's "
        "thread does not count.",
        "",
        "| connection | raw µs/chunk (wall / CPU) | relaykit µs/chunk (wall / CPU) | "
        "overhead µs/chunk (CPU) | relaykit/raw (CPU) | relaykit events/s (wall) |",
        "|---|---:|---:|---:|---:|---:|",
        f"| ScriptedLiveModel | {s_raw[0]:.2f} / {s_raw[1]:.2f} | {s_rk[0]:.2f} / "
        f"{s_rk[1]:.2f} | {s_rk[1] - s_raw[1]:.2f} | {s_rk[1] / s_raw[1]:.1f}× | "
        f"{1e6 / s_rk[0]:,.0f} |",
        f"| local WebSocket, JSON frames | {w_raw[0]:.2f} / {w_raw[1]:.2f} | {w_rk[0]:.2f} / "
        f"{w_rk[1]:.2f} | {w_rk[1] - w_raw[1]:.2f} | {ws_ratio:.2f}× "
        f"({'within' if ws_ratio <= 2 else 'over'} 2×) | {1e6 / w_rk[0]:,.0f} |",
        "",
        "The ScriptedLiveModel row compares relaykit with a connection that does no work per "
        "chunk (a list walked by a generator), so its ratio is relaykit's whole cost over "
        "almost nothing; the target (≤ 2× the raw connection) is read on the WebSocket row, "
        "where the raw side does what a provider adapter does (a frame read and a JSON decode "
        "per chunk).",
        "",
        f"Complete messages, each stored before it is delivered ({STORED:,} on one "
        "connection, median of 3): in-memory session service "
        f"{memory_rate:,.0f} events/s; SQLite (`DatabaseSessionService`, one transaction per "
        f"event) {sqlite_rate:,.0f} events/s.",
        "",
        f"Opening and closing a live session (lock, session created, connect, after_run, "
        f"lock released; in memory): {opening:.2f} ms (median of 3 × {OPENS}).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
