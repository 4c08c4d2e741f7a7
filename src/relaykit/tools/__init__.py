"""Tools: the protocol, function tools and (with the ``mcp`` extra) MCP tools."""

from relaykit.tools.base import Tool, ToolContext
from relaykit.tools.function import FunctionTool, ToolInterrupt, tool

__all__ = ["FunctionTool", "Tool", "ToolContext", "ToolInterrupt", "tool"]
