"""Tools: the protocol, function tools and (with the ``mcp`` extra) MCP tools."""

from relaykit.tools.base import (
    RESERVED_TOOL_NAMES,
    Tool,
    ToolContext,
    is_builtin_tool,
    register_builtin_tool,
)
from relaykit.tools.function import FunctionTool, ToolInterrupt, tool

__all__ = [
    "RESERVED_TOOL_NAMES",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolInterrupt",
    "is_builtin_tool",
    "register_builtin_tool",
    "tool",
]
