"""Exact prompt texts and built-in tool specs (Eino's wording) and instruction placeholders
(docs/llm-agents-and-tools.md#d16)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from relaykit.events import TRANSFER_TOOL_NAME
from relaykit.models.base import ToolSpec

__all__ = ["EXIT_TOOL", "fill_instruction", "transfer_instruction", "transfer_tool_spec"]


def transfer_tool_spec(agent_names: Sequence[str]) -> ToolSpec:
    """The ``transfer_to_agent`` spec whose ``agent_name`` may only be one of
    ``agent_names`` (a JSON-schema ``enum``, D22): a model that honours the schema cannot name
    an agent that does not exist.

    >>> transfer_tool_spec(["billing", "root"]).parameters["properties"]["agent_name"]["enum"]
    ['billing', 'root']
    """
    return ToolSpec(
        TRANSFER_TOOL_NAME,
        "Transfer the question to another agent.",
        {
            "type": "object",
            "properties": {
                "agent_name": {
                    "type": "string",
                    "description": "the name of the agent to transfer to",
                    "enum": list(agent_names),
                }
            },
            "required": ["agent_name"],
        },
    )


EXIT_TOOL = ToolSpec(
    "exit",
    "Exit the agent process and return the final result.",
    {
        "type": "object",
        "properties": {
            "final_result": {"type": "string", "description": "the final result to return"}
        },
        "required": ["final_result"],
    },
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
    """The instruction listing each transfer target's name and description.

    >>> print(transfer_instruction([("billing", "answers invoices")]).splitlines()[1])
    - Agent name: billing
    """
    listing = "".join(
        f"\n- Agent name: {name}\n  Agent description: {description}"
        for name, description in targets
    )
    return _TRANSFER_TEMPLATE.format(agents=listing)


_KEY = r"(?:app:|user:|temp:)?[A-Za-z_][A-Za-z0-9_]*"
# Leftmost match wins: ``{{key}}`` is an escape, never ``{`` + placeholder + ``}``.
_PLACEHOLDER = re.compile(rf"\{{\{{({_KEY}\??)\}}\}}|\{{({_KEY})(\?)?\}}")


class MissingPlaceholderError(KeyError):
    """An instruction placeholder without a value."""


def fill_instruction(template: str, values: Mapping[str, object], agent_name: str) -> str:
    """D16: ``{key}`` → ``str(value)``; ``{key?}`` → ``""`` when missing; ``{{key}}`` → the
    literal ``{key}``. Every other brace stays exactly as written, so a JSON example (nested
    objects ending in ``}}`` included) reaches the model unchanged.

    >>> fill_instruction('Hi {name}. Reply as {"a": {"b": 1}}; {{name}} is literal.',
    ...                  {"name": "Ana"}, "greeter")
    'Hi Ana. Reply as {"a": {"b": 1}}; {name} is literal.'
    """
    if "{" not in template:
        return template

    def repl(m: re.Match[str]) -> str:
        escaped = m.group(1)
        if escaped is not None:
            return f"{{{escaped}}}"
        key = m.group(2)
        if key in values:
            return str(values[key])
        if m.group(3):
            return ""
        raise MissingPlaceholderError(
            f"instruction of agent {agent_name!r} uses {{{key}}} but the session has no value "
            f"{key!r}; set it, or write {{{key}?}} to make it optional"
        )

    return _PLACEHOLDER.sub(repl, template)
