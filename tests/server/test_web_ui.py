"""The web dev UI (docs/web-ui.md): its files served by ``create_app(..., ui=True)``, and an
end-to-end run in headless Chromium against the support desk on uvicorn.

The browser tests drive Debian's ``chromium`` through Playwright for Python (never a
downloaded browser): ``RELAYKIT_TEST_CHROMIUM`` names the binary, else ``chromium`` on the
PATH; without one they are skipped. ``.ci/run`` installs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from examples import support_desk

import relaykit as rk
from relaykit import Message, ToolCall
from relaykit.server import create_app
from relaykit.server._ui import CONTENT_SECURITY_POLICY, ui_files
from tests.server.support import app_client, desk

UI_FOLDER = Path(__file__).parents[2] / "src" / "relaykit" / "server" / "ui"
#: Where the browser test also leaves its screenshot, for a person to look at (gitignored).
STABLE_OUTPUT = Path(__file__).parents[2] / "test-output"

CHROMIUM = os.environ.get("RELAYKIT_TEST_CHROMIUM") or shutil.which("chromium")
NO_CHROMIUM = (
    "no Chromium binary: install Debian's chromium (apt-get install chromium; .ci/run does) "
    "or set RELAYKIT_TEST_CHROMIUM to one"
)
#: How long a browser step may wait for the page (milliseconds).
WAIT_MS = 20_000
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# -- the files, in process -----------------------------------------------------------------
async def test_the_ui_is_served_at_ui_with_its_content_types() -> None:
    async with app_client(create_app(desk(), ui=True)) as http:
        root = await http.get("/")
        assert root.status_code == 307 and root.headers["location"] == "ui/"
        bare = await http.get("/ui")
        assert bare.status_code in (307, 308) and bare.headers["location"].endswith("/ui/")
        index = await http.get("/ui/")
        assert index.status_code == 200
        assert index.headers["content-type"] == "text/html; charset=utf-8"
        assert '<script type="module" src="app.js">' in index.text
        assert index.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert index.headers["x-content-type-options"] == "nosniff"
        assert (await http.get("/ui/index.html")).content == index.content
        expected = {
            "app.js": "text/javascript; charset=utf-8",
            "style.css": "text/css; charset=utf-8",
            "icon.svg": "image/svg+xml",
        }
        for name, content_type in expected.items():
            got = await http.get(f"/ui/{name}")
            assert got.status_code == 200, name
            assert got.headers["content-type"] == content_type
            assert got.content == (UI_FOLDER / name).read_bytes()
        # An unchanged file is not sent again.
        again = await http.get("/ui/app.js", headers={"If-None-Match": index.headers["etag"]})
        assert again.status_code == 200
        etag = (await http.get("/ui/app.js")).headers["etag"]
        cached = await http.get("/ui/app.js", headers={"If-None-Match": etag})
        assert cached.status_code == 304 and cached.content == b""
        missing = await http.get("/ui/nope.js")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
        outside = await http.get("/ui/../pyproject.toml")
        assert outside.status_code == 404
        # The API is where it was, and the UI is not part of its OpenAPI document.
        assert (await http.get("/health")).json() == {"status": "ok"}
        paths = set((await http.get("/openapi.json")).json()["paths"])
        assert not any(p == "/" or p.startswith("/ui") for p in paths)


async def test_every_module_the_page_imports_is_served() -> None:
    served = ui_files()
    assert {"index.html", "app.js", "style.css"} <= set(served)
    for name, file in served.items():
        if not name.endswith(".js"):
            continue
        for target in re.findall(r'^import .* from "\./([\w.]+)";$', file.content.decode(), re.M):
            assert target in served, f"{name} imports {target}, which is not served"


def test_the_ui_sources_never_parse_data_as_html() -> None:
    """Text goes into the page as text nodes: no innerHTML and friends anywhere."""
    for path in UI_FOLDER.glob("*.js"):
        source = path.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in source, f"{path.name} uses {sink}"


async def test_the_ui_is_off_unless_asked_for() -> None:
    async with app_client(create_app(desk())) as http:
        assert (await http.get("/ui/")).status_code == 404
        assert (await http.get("/ui/app.js")).status_code == 404
        assert (await http.get("/")).status_code == 404
        assert (await http.get("/health")).status_code == 200


async def test_the_ui_needs_no_key_but_the_api_still_does() -> None:
    app = create_app(desk(), api_keys={"key-a": "alice"}, ui=True)
    async with app_client(app) as http:
        assert (await http.get("/ui/")).status_code == 200
        assert (await http.get("/ui/api.js")).status_code == 200
        assert (await http.get("/sessions")).status_code == 401
        ok = await http.get("/sessions", headers={"Authorization": "Bearer key-a"})
        assert ok.status_code == 200


# -- the browser test ----------------------------------------------------------------------
@dataclass
class LiveServer:
    """The support desk on uvicorn in a thread of its own, sessions in a SQLite file."""

    url: str
    database: str
    errors: list[BaseException] = field(default_factory=list)


@pytest.fixture
def live_desk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    yield from _serve(tmp_path, getattr(request, "param", None))


def _serve(
    tmp_path: Path,
    api_keys: Mapping[str, str] | None,
    make_runner: Callable[..., Any] = support_desk.make_runner,
) -> Iterator[LiveServer]:
    import uvicorn

    from relaykit.sessions.database import DatabaseSessionService

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    live = LiveServer(f"http://127.0.0.1:{port}", f"sqlite+aiosqlite:///{tmp_path / 'desk.db'}")
    servers: list[uvicorn.Server] = []

    async def main() -> None:
        async with DatabaseSessionService(live.database) as service:
            runner = make_runner(session_service=service)
            app = create_app(runner, api_keys=api_keys, ui=True)
            server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
            servers.append(server)
            try:
                await server.serve(sockets=[sock])
            finally:
                await runner.aclose()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            live.errors.append(exc)

    thread = threading.Thread(target=run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not (servers and servers[0].started):
        if live.errors or not thread.is_alive():
            raise RuntimeError(f"the server did not start: {live.errors!r}")
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not start within 30 s")
        time.sleep(0.05)
    try:
        yield live
    finally:
        servers[0].should_exit = True
        thread.join(30)
        sock.close()
    assert not live.errors, live.errors


@contextlib.asynccontextmanager
async def _page(**options: Any) -> AsyncIterator[Any]:
    """A new page of a headless Chromium (``options`` go to ``new_page``), closed after."""
    from playwright.async_api import async_playwright, expect

    # Generous waits: a loaded CI machine may be slow, and a wait ends as soon as it holds.
    expect.set_options(timeout=WAIT_MS)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=WAIT_MS * 2
        )
        try:
            yield await browser.new_page(**options)
        finally:
            await browser.close()


async def _new_session(page: Any, url: str) -> str:
    """Open the UI at ``url``, start a new session from it and return its id."""
    from playwright.async_api import expect

    await page.goto(url + "/ui/")
    await expect(page.locator("#status")).to_have_text("connected")
    await page.click("#new-session")
    await expect(page.locator("#session-title")).to_contain_text("user dev")
    opened = page.locator("#session-list .session.open")
    await expect(opened).to_have_count(1)
    return await opened.get_attribute("data-id") or ""


def _watch(page: Any) -> list[str]:
    """The page's uncaught errors and console errors, collected."""
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on(
        "console",
        lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None,
    )
    return problems


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
async def test_chat_transfer_approval_and_resumed_answer_in_chromium(
    live_desk: LiveServer, tmp_path: Path
) -> None:
    from playwright.async_api import expect

    async with _page(viewport={"width": 1440, "height": 900}) as page:
        problems = _watch(page)
        await page.goto(live_desk.url + "/")
        await expect(page).to_have_url(re.compile(r"/ui/"))
        graph = page.locator("#agent-graph [data-agent]")
        await expect(graph).to_have_count(3)
        await expect(page.locator("#app-name")).to_have_text("triage")
        await expect(page.locator("#session-list .empty")).to_have_text("No sessions yet.")

        # A new session, and a first message with a state delta.
        await page.click("#new-session")
        await expect(page.locator("#session-list .session.open")).to_have_count(1)
        session_id = await page.locator("#session-list .session.open").get_attribute("data-id")
        assert session_id
        await page.click(".delta summary")
        await page.fill("#state-delta", '{"user:name": "Ada"}')
        await page.fill("#message", "Where is my order 1234?")
        await page.press("#message", "Enter")

        # The answer streamed in as chunks, then became the stored message.
        answer = page.locator(
            ".msg.agent", has_text="Order 1234 has shipped with DHL; it arrives Thursday."
        )
        await expect(answer).to_be_visible()
        await expect(answer.locator("header")).to_have_text("orders")
        assert int(await answer.get_attribute("data-chunks") or 0) > 1
        await expect(page.locator("#send")).to_be_enabled()

        # The timeline: triage transferred to orders, whose events sit inside triage's node.
        transfer = page.locator("#timeline .ev.kind-transfer")
        await expect(transfer).to_have_text(re.compile(r"transfer\s*→ orders"))
        nested = page.locator('#timeline details.node[data-path="triage"] ')
        await expect(
            nested.locator('details.node[data-path="triage/orders"] .ev.kind-say')
        ).to_contain_text("Order 1234 has shipped")
        await expect(page.locator("#chat-log .line.transfer")).to_have_text("triage → orders")

        # Clicking an event shows it, its state delta, and the session's state.
        await page.locator("#timeline .ev.kind-user").first.click()
        inspector = page.locator("#inspector")
        await expect(inspector.locator(".inspect-event")).to_contain_text("Where is my order 1234?")
        await expect(inspector.locator(".inspect-event table.state")).to_contain_text("user:name")
        await expect(inspector.locator(".inspect-state")).to_contain_text("Ada")
        await expect(page.locator('#agent-graph [data-agent="orders"]')).to_have_class(
            re.compile(r"\bactive\b")
        )

        # A refund: orders hands back to triage, triage to refunds, which asks a manager.
        await page.fill("#message", "It arrived broken, I want a refund")
        await page.click("#send")
        card = page.locator("#pause .pause-card")
        await expect(card).to_contain_text("request_refund")
        await expect(card).to_contain_text("amount: 59.9")
        await expect(page.locator("#chat-log .line.pause")).to_contain_text(
            "refunds paused: request_refund"
        )
        await expect(page.locator("#timeline .turn")).to_have_count(2)
        second = page.locator("#timeline .turn").nth(1)
        await expect(second.locator(".ev.kind-transfer")).to_have_count(2)
        await expect(
            second.locator('details.node[data-path="triage/orders/triage/refunds"] .ev')
        ).to_have_count(4)

        # Opened again (a reload): the server's pause of the session brings the form back.
        await page.reload()
        card = page.locator("#pause .pause-card")
        await expect(card).to_contain_text("request_refund")
        await expect(card).to_contain_text("amount: 59.9")

        # The manager approves: the tool response goes out and the answer streams back.
        await card.locator('input[name="reviewer"]').fill("Maria")
        await card.locator("button.approve").click()
        resumed = page.locator(
            ".msg.agent",
            has_text="Good news: Maria approved your refund of €59.90 for order 1234.",
        )
        await expect(resumed).to_be_visible()
        await expect(resumed.locator("header")).to_have_text("refunds")
        await expect(page.locator("#pause")).to_be_hidden()
        await expect(page.locator('#agent-graph [data-agent="refunds"]')).to_have_class(
            re.compile(r"\bactive\b")
        )
        await expect(page.locator("#chat-log .line.answer")).to_contain_text(
            '{"approved":true,"by":"Maria"}'
        )
        # Selecting the answer lights its run path in the agent graph.
        await page.locator("#chat-log .msg.agent").last.click()
        await expect(page.locator('#agent-graph [data-agent="orders"]')).to_have_class(
            re.compile(r"\bon-path\b")
        )
        await expect(inspector.locator(".inspect-event")).to_contain_text(
            "triage › orders › triage › refunds"
        )

        shot = await page.screenshot(full_page=True)
        (tmp_path / "web-ui.png").write_bytes(shot)
        STABLE_OUTPUT.mkdir(exist_ok=True)
        (STABLE_OUTPUT / "web-ui.png").write_bytes(shot)

        # What the page showed is what the session stored.
        async with httpx.AsyncClient(base_url=live_desk.url) as http:
            stored = (await http.get(f"/sessions/{session_id}")).json()
        assert stored["state"] == {"user:name": "Ada"}
        assert stored["events"][-1]["message"]["content"].startswith("Good news: Maria")
        assert stored["events"][-3]["message"]["role"] == "tool"  # the manager's answer

        # Reloaded, the page rebuilds the same conversation from the stored events.
        await page.reload()
        await expect(page.locator("#session-list .session.open")).to_have_attribute(
            "data-id", session_id
        )
        await expect(page.locator("#timeline .ev")).to_have_count(len(stored["events"]))
        await expect(resumed).to_be_visible()
        await expect(page.locator("#pause")).to_be_hidden()

        # Deleting asks once more, then the session is gone.
        delete = page.locator("#session-list .session.open button.delete")
        await delete.click()
        await expect(delete).to_have_text("Delete?")
        await delete.click()
        await expect(page.locator("#session-list .empty")).to_have_text("No sessions yet.")
        await expect(page.locator("#session-title")).to_have_text("no session open")
        assert problems == []


def test_relaykit_web_serves_the_ui_and_relaykit_api_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uvicorn
    from typer.testing import CliRunner

    from relaykit.cli._app import app as cli

    served: list[Any] = []

    async def serve(self: uvicorn.Server, sockets: Any = None) -> None:
        served.append(self.config.app)  # instead of listening
        # Ctrl-C must not wait forever for open event streams before the app's own grace.
        assert self.config.timeout_graceful_shutdown == 30

    monkeypatch.setattr(uvicorn.Server, "serve", serve)
    desk_app = str(Path(support_desk.__file__))
    db = f"sqlite+aiosqlite:///{tmp_path / 'desk.db'}"
    web = CliRunner().invoke(cli, ["web", desk_app, "--db", db, "--port", "8123"])
    assert web.exit_code == 0, web.output
    assert "relaykit web UI: http://127.0.0.1:8123/ui/" in web.stdout
    api = CliRunner().invoke(cli, ["api", desk_app, "--db", db, "--port", "8123"])
    assert api.exit_code == 0, api.output
    assert "web UI" not in api.stdout
    ui_routes = [
        {getattr(route, "path", "") for route in app.routes} & {"/", "/ui/{path:path}"}
        for app in served
    ]
    assert ui_routes == [{"/", "/ui/{path:path}"}, set()]


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
@pytest.mark.parametrize("live_desk", [{"key-of-ada": "ada"}], indirect=True)
async def test_the_page_asks_for_the_api_key_and_then_acts_as_its_user(
    live_desk: LiveServer,
) -> None:
    from playwright.async_api import expect

    async with _page() as page:
        problems = _watch(page)
        await page.goto(live_desk.url + "/ui/")
        await expect(page.locator("#status")).to_have_text("This server needs an API key.")
        await expect(page.locator("#key-form")).to_have_class(re.compile("attention"))
        await page.fill("#api-key", "wrong")
        await page.click("#key-form button")
        await expect(page.locator("#status")).to_have_text("This API key is not accepted.")
        await page.fill("#api-key", "key-of-ada")
        await page.click("#key-form button")
        await expect(page.locator("#status")).to_have_text("connected")
        await page.click("#new-session")
        await expect(page.locator("#session-title")).to_contain_text("user ada")
        await page.fill("#message", "Where is my order 1234?")
        await page.press("#message", "Enter")
        await expect(page.locator(".msg.agent")).to_contain_text("Order 1234 has shipped")
        # The browser only reports the failed calls made without the right key.
        assert all("401" in p for p in problems), problems


SSE_AND_PAUSES_SCRIPT = """
async () => {
  const { readEvents } = await import("./api.js");
  const { pendingPause, currentSpeaker } = await import("./events.js");
  const { buildTurns } = await import("./timeline.js");
  const { agentGraph, topDown } = await import("./graph.js");
  // An event stream cut at awkward places, with CRLF line ends and a keepalive comment.
  const text = ': keepalive\\r\\n\\r\\nevent: chunk\\r\\n'
    + 'data: {"event_id": "e", "delta": "a\\\\nb"}'
    + '\\r\\n\\r\\nevent: done\\ndata: {"output": "x",\\ndata:  "interrupt": null}\\n\\n';
  const bytes = new TextEncoder().encode(text);
  const cuts = [1, 5, 13, 14, 15, 40, 41, 60, bytes.length];
  const body = new ReadableStream({
    start(controller) {
      let from = 0;
      for (const cut of cuts) {
        controller.enqueue(bytes.slice(from, cut));
        from = cut;
      }
      controller.close();
    },
  });
  const events = [];
  for await (const item of readEvents(body)) events.push(item);
  const ev = (author, run_path, extra = {}) => ({
    id: Math.random().toString(16), invocation_id: extra.inv || "i1", author, run_path,
    timestamp: 0, message: null, action: null, error: null, state_delta: {}, ...extra,
  });
  const pause = { interrupted: { contexts: [{ id: "p", info: "{}", address: [] }] } };
  const transfer = { transfer_to_agent: "b" };
  const waiting = [ev("user", []), ev("a", ["a"], { action: pause })];
  const answered = [...waiting, ev("user", []), ev("a", ["a"])];
  const turns = buildTurns([
    ev("user", []), ev("a", ["a"]), ev("a", ["a"], { action: transfer }), ev("b", ["a", "b"]),
    ev("user", [], { inv: "i2" }), ev("b", ["a", "b"], { inv: "i2" }),
    ev("user", [], { inv: "i2" }), ev("b", ["a", "b"], { inv: "i2" }),
  ]);
  const kinds = new Map([["p", "ParallelAgent"], ["l", "LoopAgent"]]);
  const rounds = buildTurns([
    ev("x", ["p", "x"]), ev("y", ["p", "y"]), ev("x", ["p", "x"]), ev("x", []),
    ev("w", ["l", "w"]), ev("c", ["l", "c"]), ev("w", ["l", "w"]), ev("w", []),
  ], kinds);
  const shape = (node) =>
    node.items.map((i) => (i.event ? i.event.author : [i.node.name, shape(i.node)]));
  return {
    events,
    waiting: pendingPause(waiting) && pendingPause(waiting).author,
    stillWaiting: pendingPause([...waiting, ev("user", [])]) !== null,
    answered: pendingPause(answered),
    speaker: currentSpeaker([ev("a", ["a"], { action: transfer })]),
    turns: turns.map((t) => [t.id, shape(t.root)]),
    rounds: shape(rounds[0].root),
    graph: (() => {
      const leaf = (name) => ({ name, kind: "K", description: "", children: [] });
      const tree = { name: "r", kind: "K", description: "", children: [leaf("a"), leaf("b")] };
      const [a, b, r] = topDown(tree).nodes;
      return {
        centred: Math.abs((a.x + b.x) / 2 - r.x) < 0.01 && a.y === b.y && a.y > r.y,
        wide: agentGraph(tree).getAttribute("class"),
        narrow: agentGraph(tree, { maxWidth: 60 }).getAttribute("class"),
        agents: [...agentGraph(tree, { active: "b" }).querySelectorAll(".active")].map(
          (g) => g.dataset.agent,
        ),
      };
    })(),
  };
}
"""


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
async def test_the_pages_sse_reader_pause_finder_timeline_tree_and_graph_layout(
    live_desk: LiveServer,
) -> None:
    """The page's own functions, run in Chromium on made-up input."""
    async with _page() as page:
        await page.goto(live_desk.url + "/ui/")
        got = await page.evaluate(SSE_AND_PAUSES_SCRIPT)
    assert got["events"] == [
        {"event": "chunk", "data": {"event_id": "e", "delta": "a\nb"}},
        {"event": "done", "data": {"output": "x", "interrupt": None}},
    ]
    assert got["waiting"] == "a" and got["stillWaiting"] is True
    assert got["answered"] is None
    assert got["speaker"] == "b"
    # A run path that comes back after the user's event opens a new branch, in order.
    assert got["turns"] == [
        ["i1", ["user", ["a", ["a", "a", ["b", ["b"]]]]]],
        ["i2", ["user", ["a", [["b", ["b"]]]], "user", ["a", [["b", ["b"]]]]]],
    ]
    # The agent graph: top-down when it fits, else indented.
    assert got["graph"] == {
        "centred": True,
        "wide": "agent-graph top-down",
        "narrow": "agent-graph indented",
        "agents": ["b"],
    }
    # Parallel branches share their nodes; a loop's rounds follow each other; an agent's
    # event without a run path (its output_key's state) goes to the agent's latest node.
    assert got["rounds"] == [
        ["p", [["x", ["x", "x", "x"]], ["y", ["y"]]]],
        ["l", [["w", ["w"]], ["c", ["c"]], ["w", ["w", "w"]]]],
    ]


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
async def test_a_delete_the_server_refuses_is_reported_and_the_session_stays_open(
    live_desk: LiveServer,
) -> None:
    from playwright.async_api import expect

    async def refuse_deletes(route: Any) -> None:
        if route.request.method == "DELETE":
            body = '{"error": {"type": "unavailable", "message": "the store is busy"}}'
            await route.fulfill(status=503, content_type="application/json", body=body)
        else:
            await route.continue_()

    async with _page() as page:
        await _new_session(page, live_desk.url)
        title = page.locator("#session-title")
        opened = await title.text_content()
        await page.route("**/sessions/*", refuse_deletes)
        delete = page.locator(".session.open .delete")
        await delete.click()
        await delete.click()  # the second click confirms
        await expect(page.locator(".toast.error")).to_contain_text("the store is busy")
        # The session was not deleted: it stays open and listed.
        await expect(title).to_have_text(opened or "")
        await expect(page.locator(".session.open")).to_have_count(1)


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
async def test_a_stream_cut_mid_event_says_the_turn_goes_on_without_a_parse_error(
    live_desk: LiveServer,
) -> None:
    from playwright.async_api import expect

    said = (
        '{"id": "u1", "invocation_id": "i1", "author": "user", "agent_name": "", '
        '"run_path": [], "timestamp": 0, "message": {"role": "user", "content": "hello", '
        '"tool_calls": [], "tool_call_id": null, "tool_name": null}, "action": null, '
        '"error": null, "state_delta": {}}'
    )
    # The connection drops in the middle of the second event (a proxy's timeout, say).
    cut = f'event: agent_event\ndata: {said}\n\nevent: agent_event\ndata: {{"id": "a1", "auth'

    async def cut_turns(route: Any) -> None:
        await route.fulfill(status=200, content_type="text/event-stream", body=cut)

    async with _page() as page:
        problems = _watch(page)
        await _new_session(page, live_desk.url)
        await page.route("**/sessions/*/turns", cut_turns)
        await page.fill("#message", "hello")
        await page.press("#message", "Enter")
        await expect(page.locator(".msg.user")).to_contain_text("hello")
        await expect(page.locator("#chat-log .line.error")).to_contain_text(
            "The connection closed before the turn ended"
        )
        await expect(page.locator("#send")).to_be_enabled()
        # No JSON parse error reached the person (the cut event is dropped, as SSE says).
        assert await page.locator(".toast").count() == 0
        assert problems == []


EMPTY_ANSWER_SCRIPT = """
async () => {
  const { pauseForm } = await import("./pause.js");
  const sent = [];
  const point = { id: "p1", info: '{"question": "Ship it?"}', address: ["a"] };
  const form = pauseForm({ author: "a", contexts: [point] }, (answer) => sent.push(answer));
  document.body.append(form);
  const input = form.querySelector("input[name=answer]");
  const enter = () => input.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter" }));
  enter(); // nothing typed
  input.value = "   ";
  form.querySelector("button.approve").click(); // blanks only
  const afterEmpty = sent.length;
  const stillOpen = !input.disabled;
  input.value = "yes";
  enter();
  return { afterEmpty, stillOpen, sent };
}
"""


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
async def test_the_pause_form_sends_no_empty_answer(live_desk: LiveServer) -> None:
    async with _page() as page:
        await page.goto(live_desk.url + "/ui/")
        got = await page.evaluate(EMPTY_ANSWER_SCRIPT)
    # An Enter or a click with nothing typed resumes nothing; the typed answer goes out.
    assert got["afterEmpty"] == 0 and got["stillOpen"] is True
    assert got["sent"] == [{"kind": "resume", "body": {"targets": {"p1": "yes"}}}]


def _slow_orders(session_service: Any) -> rk.Runner:
    """An agent whose first lookup hangs until a cancel cuts it (later ones answer at once)."""
    calls: list[str] = []

    @rk.tool
    async def lookup(order: str) -> str:
        """Look an order up.

        Args:
            order: the order's number
        """
        calls.append(order)
        if len(calls) == 1:
            await asyncio.Event().wait()  # only a cut ends it
        return f"order {order} left on Monday"

    model = rk.ScriptedModel(
        [
            Message.assistant("", [ToolCall("c1", "lookup", '{"order": "7"}')]),
            Message.assistant("Order 7 left on Monday."),
        ]
    )
    agent = rk.ChatModelAgent("orders", "answers", "Answer.", model=model, tools=[lookup])
    return rk.Runner(agent, app_name="shop", session_service=session_service)


@pytest.fixture
def slow_orders(tmp_path: Path) -> Iterator[LiveServer]:
    yield from _serve(tmp_path, None, _slow_orders)


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
async def test_stop_pauses_the_running_turn_and_continue_finishes_it(
    slow_orders: LiveServer,
) -> None:
    from playwright.async_api import expect

    async with _page() as page:
        problems = _watch(page)
        session_id = await _new_session(page, slow_orders.url)
        await expect(page.locator("#stop")).to_be_hidden()
        await page.fill("#message", "Where is order 7?")
        await page.press("#message", "Enter")
        # The tool call is shown (and stored); the tool hangs: Stop replaces Send.
        await expect(page.locator("#chat-log")).to_contain_text("orders calls lookup")
        await expect(page.locator("#send")).to_be_hidden()
        await page.click("#stop")
        pause = page.locator("#pause")
        await expect(pause.locator(".pause-title")).to_contain_text("Stopped")
        await expect(pause.locator(".pause-card.stopped")).to_contain_text(
            "stopped by a cancel at the call of lookup"
        )
        await expect(page.locator("#send")).to_be_enabled()
        await expect(page.locator("#stop")).to_be_hidden()
        # The session keeps the pause: a reload offers it again.
        await page.reload()
        await expect(pause.locator(".pause-card.stopped")).to_be_visible()
        await pause.locator("button.continue").click()
        await expect(page.locator(".msg.agent", has_text="Order 7 left on Monday.")).to_be_visible()
        await expect(pause).to_be_hidden()
        assert problems == []

    async with httpx.AsyncClient(base_url=slow_orders.url) as http:
        stored = (await http.get(f"/sessions/{session_id}")).json()
    assert stored["pause"] is None
    results = [
        e["message"]["content"]
        for e in stored["events"]
        if e["message"] is not None and e["message"]["role"] == "tool"
    ]
    assert results == ["order 7 left on Monday"]  # the cut call ran again, once


@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
async def test_stop_stops_the_running_turn_while_another_session_is_open(
    slow_orders: LiveServer,
) -> None:
    from playwright.async_api import expect

    async with _page() as page:
        problems = _watch(page)
        other = await _new_session(page, slow_orders.url)
        await page.click("#new-session")
        title = page.locator("#session-title")
        await expect(title).not_to_contain_text(other)
        busy = await page.locator("#session-list .session.open").get_attribute("data-id")
        assert busy and busy != other
        await page.fill("#message", "Where is order 7?")
        await page.press("#message", "Enter")
        await expect(page.locator("#chat-log")).to_contain_text("orders calls lookup")
        # Open the other session while the turn runs, and stop from there.
        await page.locator(f'#session-list .session[data-id="{other}"] .open-session').click()
        await expect(title).to_contain_text(other)
        await page.click("#stop")
        await expect(page.locator("#stop")).to_be_hidden()
        await expect(page.locator("#send")).to_be_enabled()
        # The running session holds the stopped turn; the open one has nothing paused.
        await page.locator(f'#session-list .session[data-id="{busy}"] .open-session').click()
        await expect(page.locator("#pause .pause-card.stopped")).to_be_visible()
        assert problems == []

    async with httpx.AsyncClient(base_url=slow_orders.url) as http:
        stopped = (await http.get(f"/sessions/{busy}")).json()["pause"]
        untouched = (await http.get(f"/sessions/{other}")).json()["pause"]
    assert stopped is not None and stopped["cancelled"]["mode"] == "immediate"
    assert untouched is None
