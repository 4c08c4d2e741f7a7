"""The HTTP API under load: concurrent sessions over uvicorn, against the Runner called directly.

For each backend (a SQLite file; PostgreSQL when reachable): the app (bench/turns.py's
workload: agent A transfers to B, B calls ``get_weather`` and answers, models scripted as
functions of the request, ``streaming=True``) served by ``create_app`` under uvicorn in a
process of its own; 200 sessions run 5 turns each at the same time over HTTP (httpx
``AsyncClient``), once reading server-sent events, once whole JSON responses; then one session
runs turns one after the other (unloaded latency). The same workload then runs in this process
against the Runner itself, on a fresh database of the same backend. Every turn is checked
(status, its ``done``, no error event) and every session read back (its 30 stored events):
anything else counts as an error.

``python -m bench.http [--pg URL]``; PostgreSQL is ``--pg``, else
``RELAYKIT_TEST_POSTGRES_URL``, else ``postgresql+asyncpg://postgres@127.0.0.1:5432/test`` (a
fresh database is created next to it and dropped afterwards). ``python -m bench.http --serve
URL PORT`` is the server process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import httpx

import relaykit as rk
from bench.sessions import PG_DEFAULT, asyncpg_dsn, build_note, machine_note, pg_reachable
from bench.turns import get_weather
from relaykit import Message, ModelRequest, ToolCall
from relaykit.sessions.database import DatabaseSessionService

SESSIONS = 200
TURNS = 5
SEQUENTIAL_TURNS = 50  # one session, one turn after the other
WARMUP_SESSIONS = 10
EVENTS_PER_TURN = 6  # the question, A's call and its result, B's call and its result, B's answer
QUESTION = "weather in Paris?"
ANSWER = "It is sunny in Paris."
APP = "bench"


# -- the app ---------------------------------------------------------------------------------
def _endless(reply: Callable[[ModelRequest, int], Message]) -> rk.ScriptedModel:
    """A scripted model answering every call with ``reply(request, n)``: concurrent sessions
    share it, so the reply depends on the request, never on the order of the calls."""
    counter = itertools.count()

    def script() -> Iterator[Callable[[ModelRequest], Message]]:
        while True:
            yield lambda request: reply(request, next(counter))

    return rk.ScriptedModel(script(), record_requests=False)


def _route(request: ModelRequest, n: int) -> Message:
    return Message.assistant(
        "", [ToolCall(f"a{n}", "transfer_to_agent", '{"agent_name": "agent_b"}')]
    )


def _answer(request: ModelRequest, n: int) -> Message:
    if request.messages[-1].role == "tool":
        return Message.assistant(ANSWER)
    return Message.assistant("", [ToolCall(f"b{n}", "get_weather", '{"city": "Paris"}')])


def build_runner(service: rk.SessionService) -> rk.Runner:
    """A transfers to B; B calls ``get_weather`` and answers (B cannot transfer back, so every
    turn starts at A and transfers)."""
    a = rk.ChatModelAgent("agent_a", "routes questions", "Route.", model=_endless(_route))
    b = rk.ChatModelAgent(
        "agent_b", "knows the weather", "Answer.", model=_endless(_answer), tools=[get_weather]
    )
    root = rk.set_sub_agents(a, [rk.as_flow_agent(b, disallow_transfer_to_parent=True)])
    return rk.Runner(root, app_name=APP, session_service=service, streaming=True)


def serve(url: str, port: int) -> None:
    """The server process: the app on ``127.0.0.1:port`` until SIGTERM."""
    import uvicorn

    from relaykit.server import create_app

    app = create_app(build_runner(DatabaseSessionService(url)), shutdown_grace=10)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=10,
        # Longer than any pause of a client between two requests: uvicorn's 5 s default closes
        # the setup client's idle connections while the load runs, and its next request
        # races the close (httpx.ReadError).
        timeout_keep_alive=75,
    )


# -- measuring -------------------------------------------------------------------------------
@dataclass
class Run:
    """One measured run: per-turn latencies, errors, wall and CPU time."""

    label: str
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0
    cpu: float = 0.0  # of the process running the turns (the server's for HTTP runs)
    client_cpu: float | None = None  # of the client (this process), HTTP runs only

    def turns(self) -> int:
        return len(self.latencies)

    def cells(self) -> str:
        ms = sorted(x * 1e3 for x in self.latencies)
        p50 = statistics.median(ms) if ms else float("nan")
        p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))] if ms else float("nan")
        n = max(self.turns(), 1)
        client = f"{self.client_cpu / n * 1e3:.2f}" if self.client_cpu is not None else "–"
        mean = statistics.mean(ms) if ms else float("nan")
        return (
            f"| {self.label} | {self.turns():,} | {len(self.errors)} | {p50:.1f} | {p99:.1f} | "
            f"{mean:.1f} | {self.turns() / self.wall:,.0f} | {self.cpu / n * 1e3:.2f} | {client} |"
        )


def _proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) of process ``pid`` so far."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _timed(run: Run, turn: Callable[[], Awaitable[None]]) -> None:
    start = time.perf_counter()
    try:
        await turn()
    except Exception as exc:
        run.errors.append(f"{type(exc).__name__}: {exc}"[:300])
        return
    run.latencies.append(time.perf_counter() - start)


# -- over HTTP -------------------------------------------------------------------------------
async def _sse_turn(http: httpx.AsyncClient, session_id: str) -> None:
    """One streamed turn; raises unless it ends with ``done`` and the answer, error-free."""
    name, done = "", None
    async with http.stream(
        "POST", f"/sessions/{session_id}/turns", json={"text": QUESTION}
    ) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if name == "agent_event" and data["error"]:
                    raise RuntimeError(f"error event: {data['error'][:200]}")
                if name == "done":
                    done = data
    if done is None or done["output"] != ANSWER:
        raise RuntimeError(f"the turn ended without its answer: {done}")


async def _json_turn(http: httpx.AsyncClient, session_id: str) -> None:
    response = await http.post(
        f"/sessions/{session_id}/turns", json={"text": QUESTION, "stream": False}
    )
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
    body = response.json()
    failed = [e["error"] for e in body["events"] if e["error"]]
    if failed or body["output"] != ANSWER:
        raise RuntimeError(f"the turn failed: {failed[:1] or body['output']}")


async def _check_stored(http: httpx.AsyncClient, run: Run, ids: list[str], turns: int) -> None:
    """Every session holds what its turns stored."""

    async def one(session_id: str) -> None:
        events = (await http.get(f"/sessions/{session_id}/events")).json()
        if len(events) != EVENTS_PER_TURN * turns:
            run.errors.append(f"{session_id}: {len(events)} events stored")

    await asyncio.gather(*(one(i) for i in ids))


async def http_load(http: httpx.AsyncClient, pid: int, label: str, prefix: str, sse: bool) -> Run:
    """SESSIONS sessions doing TURNS turns each at the same time, each session a client of
    its own (one connection, as separate users have; one shared client with a pool of 200
    connections would cost more CPU than the server)."""
    run = Run(label)
    ids = [f"{prefix}-{i}" for i in range(SESSIONS)]
    created = await asyncio.gather(*(http.post("/sessions", json={"session_id": i}) for i in ids))
    run.errors += [f"create: HTTP {r.status_code}" for r in created if r.status_code != 201]
    one_turn = _sse_turn if sse else _json_turn

    async def session(session_id: str, user: httpx.AsyncClient) -> None:
        for _ in range(TURNS):
            await _timed(run, lambda: one_turn(user, session_id))

    async with contextlib.AsyncExitStack() as stack:
        users = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=http.base_url, timeout=120))
            for _ in ids
        ]
        cpu, client, start = _proc_cpu(pid), time.process_time(), time.perf_counter()
        await asyncio.gather(*(session(i, user) for i, user in zip(ids, users, strict=True)))
        run.wall = time.perf_counter() - start
        run.cpu, run.client_cpu = _proc_cpu(pid) - cpu, time.process_time() - client
    await _check_stored(http, run, ids, TURNS)
    return run


async def http_sequential(http: httpx.AsyncClient, pid: int, label: str, prefix: str) -> Run:
    """One session, SEQUENTIAL_TURNS turns one after the other (streamed), from a client of
    its own."""
    run = Run(label)
    await http.post("/sessions", json={"session_id": prefix})
    async with httpx.AsyncClient(base_url=http.base_url, timeout=120) as user:
        cpu, client, start = _proc_cpu(pid), time.process_time(), time.perf_counter()
        for _ in range(SEQUENTIAL_TURNS):
            await _timed(run, lambda: _sse_turn(user, prefix))
        run.wall = time.perf_counter() - start
        run.cpu, run.client_cpu = _proc_cpu(pid) - cpu, time.process_time() - client
    await _check_stored(http, run, [prefix], SEQUENTIAL_TURNS)
    return run


@contextlib.asynccontextmanager
async def server(url: str, log: pathlib.Path) -> AsyncIterator[tuple[httpx.AsyncClient, int]]:
    """The app served by uvicorn in a process of its own; a client of it and the pid."""
    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = pathlib.Path(__file__).resolve().parent.parent
    with log.open("w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.http", "--serve", url, str(port)], cwd=root, stderr=err
        )
    limits = httpx.Limits(max_connections=SESSIONS + 10, max_keepalive_connections=SESSIONS + 10)
    try:
        async with httpx.AsyncClient(  # setup and checks
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=120
        ) as http:
            for _ in range(300):
                if process.poll() is not None:
                    raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
                try:
                    if (await http.get("/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
            else:
                raise RuntimeError("the server did not start within 30 s")
            yield http, process.pid
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def http_runs(url: str, tmp: pathlib.Path, backend: str) -> tuple[list[Run], str]:
    """The HTTP rows of a backend; the server's log (empty when it said nothing)."""
    log = tmp / f"server-{backend}.log"
    async with server(url, log) as (http, pid):
        await http_load(http, pid, "warm-up", "warm", sse=True)  # not reported
        rows = [
            await http_load(http, pid, "HTTP, server-sent events", "sse", sse=True),
            await http_load(http, pid, "HTTP, whole JSON responses", "json", sse=False),
        ]
        sequential = await http_sequential(http, pid, "HTTP, server-sent events", "seq")
    return [*rows, sequential], log.read_text().strip()


# -- the Runner itself -----------------------------------------------------------------------
async def _direct_turn(runner: rk.Runner, session_id: str) -> None:
    failed, answer = None, None
    async for ev in runner.run([Message.user(QUESTION)], user_id="dev", session_id=session_id):
        if ev.error is not None:
            failed = ev.error
        if ev.output is not None:
            message = (
                await ev.output.stream.collect()
                if ev.output.stream is not None
                else ev.output.message
            )
            answer = message.content if message is not None else None
    if failed is not None or answer != ANSWER:
        raise RuntimeError(f"the turn failed: {failed or answer}")


async def direct_runs(url: str) -> list[Run]:
    """The same workload against the Runner in this process, on a fresh database."""
    service = DatabaseSessionService(url)
    runner = build_runner(service)
    rows: list[Run] = []
    try:
        for label, n_sessions, turns, prefix in (
            ("warm-up", WARMUP_SESSIONS, 1, "warm"),
            ("Runner called directly", SESSIONS, TURNS, "direct"),
            ("Runner called directly", 1, SEQUENTIAL_TURNS, "seq"),
        ):
            run = Run(label)
            ids = [f"{prefix}-{i}" for i in range(n_sessions)]
            for session_id in ids:
                await service.create_session(APP, "dev", session_id)

            async def session(session_id: str, turns: int = turns, run: Run = run) -> None:
                for _ in range(turns):
                    await _timed(run, lambda: _direct_turn(runner, session_id))

            cpu, start = time.process_time(), time.perf_counter()
            await asyncio.gather(*(session(i) for i in ids))
            run.wall, run.cpu = time.perf_counter() - start, time.process_time() - cpu
            for session_id in ids:
                stored = await service.get_session(APP, "dev", session_id)
                count = len(stored.events) if stored is not None else 0
                if count != EVENTS_PER_TURN * turns:
                    run.errors.append(f"{session_id}: {count} events stored")
            if label != "warm-up":
                rows.append(run)
    finally:
        await service.aclose()
    return rows


# -- backends --------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def fresh_postgres(url: str) -> AsyncIterator[Callable[[], Awaitable[str]]]:
    """A maker of fresh databases next to the one ``url`` names, dropped afterwards."""
    import asyncpg
    import sqlalchemy as sa

    admin = await asyncpg.connect(asyncpg_dsn(url))
    made: list[str] = []

    async def make() -> str:
        name = f"rk_bench_http_{uuid.uuid4().hex[:10]}"
        await admin.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        return sa.make_url(url).set(database=name).render_as_string(hide_password=False)

    try:
        yield make
    finally:
        for name in made:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@dataclass
class Backend:
    name: str
    http: list[Run]
    direct: list[Run]
    log: str


async def measure(pg_url: str) -> tuple[list[Backend], str | None, str | None]:
    """Every backend's rows; why PostgreSQL was skipped (or None); its version."""
    backends: list[Backend] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        http, log = await http_runs(f"sqlite+aiosqlite:///{tmp / 'http.db'}", tmp, "sqlite")
        direct = await direct_runs(f"sqlite+aiosqlite:///{tmp / 'direct.db'}")
        backends.append(Backend("SQLite file", http, direct, log))
        pg_skip = await pg_reachable(pg_url)
        version = None
        if pg_skip is None:
            import asyncpg

            conn = await asyncpg.connect(asyncpg_dsn(pg_url))
            version = str(await conn.fetchval("SHOW server_version"))
            await conn.close()
            async with fresh_postgres(pg_url) as fresh:
                http, log = await http_runs(await fresh(), tmp, "postgres")
                direct = await direct_runs(await fresh())
            backends.append(Backend("PostgreSQL (asyncpg)", http, direct, log))
    return backends, pg_skip, version


# -- the report ------------------------------------------------------------------------------
HEADER = (
    "| run | turns | errors | p50 ms | p99 ms | mean ms | turns/s | CPU ms/turn (server or "
    "Runner process) | client CPU ms/turn |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def _overhead(backend: Backend) -> list[str]:
    sse, json_run, sequential = backend.http
    direct, direct_seq = backend.direct

    def per_turn(run: Run) -> float:
        return run.wall / max(run.turns(), 1) * 1e3

    def cpu(run: Run) -> float:
        return run.cpu / max(run.turns(), 1) * 1e3

    alone = statistics.median(sequential.latencies) * 1e3
    alone_direct = statistics.median(direct_seq.latencies) * 1e3

    return [
        f"- {backend.name}, under load: the server spends {cpu(sse):.2f} ms of CPU per streamed "
        f"turn and {cpu(json_run):.2f} ms per JSON turn, against {cpu(direct):.2f} ms for the "
        f"Runner alone: **{cpu(sse) - cpu(direct):.2f} ms** (SSE) and "
        f"**{cpu(json_run) - cpu(direct):.2f} ms** (JSON) of HTTP, FastAPI and the server's "
        f"session reads per turn ({cpu(sse) / cpu(direct):.1f}× and "
        f"{cpu(json_run) / cpu(direct):.1f}×). Wall time per turn at saturation "
        f"(1/throughput): {per_turn(sse):.2f} / {per_turn(json_run):.2f} ms against "
        f"{per_turn(direct):.2f} ms.",
        f"- {backend.name}, one session alone: p50 {alone:.2f} ms per streamed turn over HTTP "
        f"against {alone_direct:.2f} ms with the Runner: **{alone - alone_direct:.2f} ms** of "
        "latency added per turn.",
    ]


async def main(pg_url: str) -> None:
    load = os.getloadavg()[0]
    backends, pg_skip, version = await measure(pg_url)
    errors = sum(len(r.errors) for b in backends for r in (*b.http, *b.direct))
    out = [
        "# The HTTP API under load: concurrent sessions over uvicorn against the Runner",
        "",
        machine_note(version, (load, os.getloadavg()[0])),
        "",
        build_note(),
        "",
        "The app: bench/turns.py's workload — agent A transfers to B, B calls `get_weather` and "
        "answers (3 scripted model calls, 1 transfer, 1 tool call, 6 stored events per turn), "
        "`Runner(..., streaming=True)` (so a streamed turn sends `chunk` events too), served by "
        "`create_app` under uvicorn (one process, h11, no access log, 75 s keep-alive). The "
        "clients are httpx `AsyncClient`s in the benchmark process, one per session (one "
        "connection each). Under load: "
        f"{SESSIONS} sessions run {TURNS} turns each at the same time (a session's turns one "
        f"after the other), after {SESSIONS} warm-up turns; latency is per turn, from sending "
        "the request to the `done` event (or the whole JSON body). Alone: one session runs "
        f"{SEQUENTIAL_TURNS} streamed turns one after the other. The Runner rows run the same "
        "workload in this process (`async for event in runner.run(...)`, the streamed messages "
        "read whole) on a fresh database of the same backend, with the server stopped. Errors: "
        "a turn whose status is not 200, that has an error event or does not end with `done` "
        "and the answer, and a session that does not hold its 6 events per turn afterwards "
        "(every session is read back). CPU: the server process's (or, for the Runner rows, "
        "this process's) user + system time, every thread, over the run.",
        "",
    ]
    for backend in backends:
        out += [
            f"## {backend.name}",
            "",
            HEADER,
            *(run.cells() for run in backend.http[:2]),
            *(run.cells() for run in backend.direct[:1]),
            "",
            f"One session alone, {SEQUENTIAL_TURNS} turns:",
            "",
            HEADER,
            backend.http[2].cells(),
            backend.direct[1].cells(),
            "",
            *_overhead(backend),
            "",
        ]
        failed = [e for r in (*backend.http, *backend.direct) for e in r.errors]
        if failed:
            out += ["Errors (first 10):", "", *(f"- `{e}`" for e in failed[:10]), ""]
        if backend.log:
            out += ["The server's log (last lines):", "", "```text", backend.log[-1500:], "```", ""]
    if pg_skip:
        out += ["## PostgreSQL (asyncpg)", "", f"Skipped: {pg_skip}.", ""]
    out.append(f"Errors in all: {errors} (target: 0).")
    print("\n".join(out))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pg", help="PostgreSQL URL (postgresql+asyncpg://...)")
    parser.add_argument("--serve", nargs=2, metavar=("URL", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
    else:
        asyncio.run(main(args.pg or os.environ.get("RELAYKIT_TEST_POSTGRES_URL", PG_DEFAULT)))
