"""Tools: the protocol, function tools, the built-ins ``exit_loop`` and ``load_memory`` and
(with the ``mcp`` extra) MCP tools."""

from relaykit.tools.base import (
    RESERVED_TOOL_NAMES,
    Tool,
    ToolContext,
    is_builtin_tool,
    register_builtin_tool,
)
from relaykit.tools.builtin import exit_loop, load_memory
from relaykit.tools.function import FunctionTool, ToolInterrupt, tool

__all__ = [
    "RESERVED_TOOL_NAMES",
    "FunctionTool",
    "Tool",
    "ToolContext",
    "ToolInterrupt",
    "exit_loop",
    "is_builtin_tool",
    "load_memory",
    "register_builtin_tool",
    "tool",
]
