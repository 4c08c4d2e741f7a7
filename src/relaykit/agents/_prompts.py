"""Exact prompt texts and built-in tool specs (eino-reference §7.4–7.5) and placeholders (D16)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from relaykit.models.base import ToolSpec

__all__ = ["EXIT_TOOL", "TRANSFER_TOOL", "fill_instruction", "transfer_instruction"]

TRANSFER_TOOL = ToolSpec(
    "transfer_to_agent",
    "Transfer the question to another agent.",
    {"type": "object",
     "properties": {"agent_name": {"type": "string",
                                   "description": "the name of the agent to transfer to"}},
     "required": ["agent_name"]},
)

EXIT_TOOL = ToolSpec(
    "exit",
    "Exit the agent process and return the final result.",
    {"type": "object",
     "properties": {"final_result": {"type": "string",
                                     "description": "the final result to return"}},
     "required": ["final_result"]},
)

_TRANSFER_TEMPLATE = (
    "Available other agents: {agents}\n"
    "\n"
    "Decision rule:\n"
    "- If you're best suited for the question according to your description: ANSWER\n"
    "- If another agent is better according its description: CALL 'transfer_to_agent' "
    "function with their agent name\n"
    "\n"
    "When transferring: OUTPUT ONLY THE FUNCTION CALL"
)


def transfer_instruction(targets: Sequence[tuple[str, str]]) -> str:
    """The instruction listing each transfer target's name and description."""
    listing = "".join(f"\n- Agent name: {name}\n  Agent description: {description}"
                      for name, description in targets)
    return _TRANSFER_TEMPLATE.format(agents=listing)


_PLACEHOLDER = re.compile(
    r"\{\{|\}\}|\{((?:app:|user:|temp:)?[A-Za-z_][A-Za-z0-9_]*)(\?)?\}")


class MissingPlaceholderError(KeyError):
    """An instruction placeholder without a value."""


def fill_instruction(template: str, values: Mapping[str, Any], agent_name: str) -> str:
    """D16: ``{key}`` → str(value); ``{key?}`` → "" when missing; ``{{``/``}}`` → braces."""
    if "{" not in template and "}" not in template:
        return template

    def repl(m: re.Match[str]) -> str:
        text = m.group(0)
        if text == "{{":
            return "{"
        if text == "}}":
            return "}"
        key = m.group(1)
        if key in values:
            return str(values[key])
        if m.group(2):
            return ""
        raise MissingPlaceholderError(
            f"instruction of agent {agent_name!r} uses {{{key}}} but the session has no value "
            f"{key!r}; set it, or write {{{key}?}} to make it optional")

    return _PLACEHOLDER.sub(repl, template)
