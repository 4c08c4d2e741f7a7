"""A small MCP server for the relaykit MCP tool tests.

Run as a script it serves over stdio (``python mcp_server.py``); the HTTP test imports
:func:`build_server` and serves its streamable-HTTP app in a thread.
"""

from __future__ import annotations

import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent


def build_server() -> MCPServer:
    """The test server: ``add``, ``echo``, ``fail``, ``stats``, ``lines``, ``crash``, ``hidden``."""
    server: MCPServer = MCPServer("relaykit-test")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Always fails (an isError result).")
    def fail(reason: str) -> str:
        raise ToolError(f"failed because {reason}")

    @server.tool(description="Structured result only, no text.")
    def stats(values: list[float]) -> CallToolResult:
        return CallToolResult(
            content=[], structured_content={"count": len(values), "total": sum(values)}
        )

    @server.tool(description="Two text blocks.")
    def lines() -> CallToolResult:
        return CallToolResult(content=[TextContent(text="first"), TextContent(text="second")])

    @server.tool(description="Kills the server process (a transport failure for the client).")
    def crash() -> str:
        os._exit(3)

    @server.tool(description="A tool the tests filter out.")
    def hidden() -> str:
        return "hidden"

    return server


if __name__ == "__main__":
    # Lets a test check that the client stopped this process (and that ``env`` reached it).
    if pid_file := os.environ.get("RELAYKIT_TEST_PID_FILE"):
        Path(pid_file).write_text(str(os.getpid()))
    build_server().run("stdio")
