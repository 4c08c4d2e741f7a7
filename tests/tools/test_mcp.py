"""MCP tools over stdio and streamable HTTP, against the small server in ``mcp_server.py``."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("mcp")

from relaykit.errors import ConfigurationError, ToolError
from relaykit.tools.base import Tool, ToolContext
from relaykit.tools.mcp import MCPTool, MCPToolset

SERVER = Path(__file__).with_name("mcp_server.py")
SERVED = {"add", "echo", "fail", "stats", "lines"}


def _ctx(tool: MCPTool) -> ToolContext:
    return ToolContext(
        run_context=None,
        tool_name=tool.spec.name,  # type: ignore[arg-type]
        tool_call_id=f"call-{tool.spec.name}",
    )


async def _call(tools: dict[str, MCPTool], name: str, **arguments: Any) -> Any:
    return await tools[name].call(_ctx(tools[name]), arguments)


async def _check_tools(toolset: MCPToolset, prefix: str) -> None:
    """The checks both transports share: specs, results, error results."""
    listed = await toolset.list_tools()
    assert all(isinstance(tool, Tool) for tool in listed)
    tools = {tool.spec.name: tool for tool in listed}
    assert set(tools) == {prefix + name for name in SERVED}
    assert tools[prefix + "add"].mcp_name == "add"

    add = tools[prefix + "add"].spec
    assert add.description == "Add two integers."
    assert add.parameters["type"] == "object"
    assert set(add.parameters["properties"]) == {"a", "b"}
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert set(add.parameters["required"]) == {"a", "b"}
    echo = tools[prefix + "echo"].spec
    assert echo.parameters["properties"]["text"]["type"] == "string"
    assert echo.parameters["required"] == ["text"]

    assert await _call(tools, prefix + "add", a=2, b=40) == "42"
    assert await _call(tools, prefix + "echo", text="hi there") == "hi there"
    assert await _call(tools, prefix + "lines") == "first\nsecond"
    assert await _call(tools, prefix + "stats", values=[1, 2, 3.5]) == {"count": 3, "total": 6.5}
    with pytest.raises(ToolError, match="failed because disk full"):
        await _call(tools, prefix + "fail", reason="disk full")


async def test_stdio_toolset(tmp_path: Path) -> None:
    pid_file = tmp_path / "server.pid"
    toolset = MCPToolset.stdio(
        sys.executable,
        [str(SERVER)],
        env={"RELAYKIT_TEST_PID_FILE": str(pid_file)},
        tool_filter=[*SERVED, "no_such_tool"],
        name_prefix="t_",
    )
    assert not toolset.is_open
    async with toolset:
        assert toolset.is_open
        await _check_tools(toolset, "t_")
        tools = await toolset.list_tools()
    assert not toolset.is_open
    with pytest.raises(ConfigurationError, match="not open"):
        await tools[0].call(_ctx(tools[0]), {})

    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # the server process was stopped and reaped
        os.kill(pid, 0)


async def test_stdio_transport_failure_propagates() -> None:
    async with MCPToolset.stdio(
        sys.executable, [str(SERVER)], tool_filter={"crash", "echo"}
    ) as toolset:
        tools = {tool.spec.name: tool for tool in await toolset.list_tools()}
        with pytest.raises(Exception) as info:
            await _call(tools, "crash")
        assert not isinstance(info.value, ToolError)


def _load_server_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("relaykit_test_mcp_server", SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def http_server() -> Iterator[tuple[str, list[dict[bytes, bytes]]]]:
    """The test server's streamable-HTTP app, served by uvicorn in a thread on a free port.

    Yields the endpoint URL and the headers of every HTTP request the server received.
    """
    import uvicorn

    mcp_app = _load_server_module().build_server().streamable_http_app(host="127.0.0.1")
    received: list[dict[bytes, bytes]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            received.append(dict(scope["headers"]))
        await mcp_app(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, loop="asyncio", log_level="warning", timeout_graceful_shutdown=2)
    )
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="mcp-test-http-server", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/mcp", received
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
    assert not thread.is_alive(), "HTTP server thread still running"


async def test_http_toolset(http_server: tuple[str, list[dict[bytes, bytes]]]) -> None:
    url, received = http_server
    toolset = MCPToolset.http(
        url, headers={"Authorization": "Bearer s3cret"}, tool_filter=SERVED, name_prefix="web_"
    )
    async with toolset:
        await _check_tools(toolset, "web_")
    assert not toolset.is_open
    assert received
    assert all(headers.get(b"authorization") == b"Bearer s3cret" for headers in received)


async def test_http_connection_refused_raises() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on this port now
    with pytest.raises(Exception) as info:
        async with MCPToolset.http(f"http://127.0.0.1:{port}/mcp", timeout=5):
            pass
    assert not isinstance(info.value, ToolError | BaseExceptionGroup)
    assert "connect" in type(info.value).__name__.lower()


async def test_lifecycle() -> None:
    toolset = MCPToolset.stdio(sys.executable, [str(SERVER)])
    with pytest.raises(ConfigurationError, match="not open"):
        await toolset.list_tools()
    await toolset.aclose()  # closing a closed toolset is a no-op
    async with toolset:
        with pytest.raises(ConfigurationError, match="already open"):
            await toolset.connect()
    # reopening works, and an error in the body comes out as itself, not as an ExceptionGroup
    with pytest.raises(ValueError, match="boom"):
        async with toolset:
            assert len(await toolset.list_tools()) == 7
            raise ValueError("boom")
    assert not toolset.is_open
    with pytest.raises(ConfigurationError, match="sequence of strings"):
        MCPToolset.stdio(sys.executable, str(SERVER))  # a str is a Sequence[str] to mypy


def test_missing_mcp_raises_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # makes `import mcp` fail
    with pytest.raises(ConfigurationError, match=r"pip install 'relaykit\[mcp\]'"):
        MCPToolset.stdio(sys.executable, [str(SERVER)])
    with pytest.raises(ConfigurationError, match=r"relaykit\[mcp\]"):
        MCPToolset.http("http://127.0.0.1:1/mcp")


def test_importing_relaykit_does_not_import_mcp() -> None:
    code = (
        "import sys, relaykit, relaykit.tools.base, relaykit.tools.mcp; "
        "assert 'mcp' not in sys.modules, 'mcp imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_tool_names_are_made_safe_for_every_provider() -> None:
    from relaykit.tools.mcp import model_safe_name

    assert model_safe_name("fs.read file") == "fs_read_file"
    assert model_safe_name("github:search-issues") == "github_search-issues"
    assert model_safe_name("x" * 80) == "x" * 64
