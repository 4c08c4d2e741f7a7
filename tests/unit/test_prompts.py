"""Unit tests: prompt texts (eino-reference §7.4–7.5) and instruction placeholders (D16)."""

from __future__ import annotations

from typing import Any

import pytest

from relaykit.agents import _prompts as prompts

fill = prompts.fill_instruction

EXPECTED_TRANSFER_TWO = (
    "Available other agents: \n"
    "- Agent name: billing\n"
    "  Agent description: handles invoices\n"
    "- Agent name: root\n"
    "  Agent description: the front desk\n"
    "\n"
    "Decision rule:\n"
    "- If you're best suited for the question according to your description: ANSWER\n"
    "- If another agent is better according its description: CALL 'transfer_to_agent' "
    "function with their agent name\n"
    "\n"
    "When transferring: OUTPUT ONLY THE FUNCTION CALL"
)


# -- transfer instruction and built-in tool specs ---------------------------------------------
def test_transfer_instruction_exact_text() -> None:
    """§7.4: exact English template; the first line ends with a trailing space."""
    text = prompts.transfer_instruction(
        [("billing", "handles invoices"), ("root", "the front desk")]
    )
    assert text == EXPECTED_TRANSFER_TWO
    assert text.splitlines()[0] == "Available other agents: "


def test_transfer_instruction_keeps_target_order_and_braces_verbatim() -> None:
    """Targets are listed in the given order; names/descriptions are not formatted (D16 applies
    only to the agent's own instruction)."""
    text = prompts.transfer_instruction([("z", "{not_a_key}"), ("a", "")])
    assert text.startswith(
        "Available other agents: \n- Agent name: z\n"
        "  Agent description: {not_a_key}\n- Agent name: a\n"
        "  Agent description: \n\nDecision rule:\n"
    )


def test_transfer_tool_spec_lists_the_targets_as_an_enum() -> None:
    """§7.4 and D22: name, description and one required string parameter ``agent_name`` whose
    ``enum`` is the given targets, in order."""
    spec = prompts.transfer_tool_spec(["billing", "root"])
    assert spec.name == "transfer_to_agent"
    assert spec.description == "Transfer the question to another agent."
    assert spec.parameters["type"] == "object"
    assert spec.parameters["required"] == ["agent_name"]
    assert spec.parameters["properties"] == {
        "agent_name": {
            "type": "string",
            "description": "the name of the agent to transfer to",
            "enum": ["billing", "root"],
        }
    }


def test_exit_tool_spec() -> None:
    """§7.5: name ``exit``, description and one required string parameter ``final_result``."""
    spec = prompts.EXIT_TOOL
    assert spec.name == "exit"
    assert spec.description == "Exit the agent process and return the final result."
    assert spec.parameters["required"] == ["final_result"]
    assert spec.parameters["properties"] == {
        "final_result": {"type": "string", "description": "the final result to return"}
    }


# -- fill_instruction (D16) --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "values", "expected"),
    [
        ("no placeholders at all", {}, "no placeholders at all"),
        ("Hello {name}!", {"name": "Ada"}, "Hello Ada!"),
        (
            "n={n}, flag={flag}, none={none}",
            {"n": 3, "flag": True, "none": None},
            "n=3, flag=True, none=None",
        ),
        ("{a}{b}", {"a": "x", "b": "y"}, "xy"),
        ("{a} and {a}", {"a": "x"}, "x and x"),
        (
            "Hi {user:name} of {app:brand}, tmp {temp:scratch}",
            {"user:name": "Ada", "app:brand": "Acme", "temp:scratch": 1},
            "Hi Ada of Acme, tmp 1",
        ),
        ("opt=[{missing?}]", {}, "opt=[]"),
        ("opt=[{present?}]", {"present": "yes"}, "opt=[yes]"),
        ("scoped opt=[{user:nick?}]", {}, "scoped opt=[]"),
        ("literal {{key}}", {"key": "v"}, "literal {key}"),
        ("literal {{key?}} and {{user:key}}", {}, "literal {key?} and {user:key}"),
        ("{{key}} and {key}", {"key": "v"}, "{key} and v"),
        ("doubled {{ and }} stay", {}, "doubled {{ and }} stay"),
        ("{{ not a placeholder }}", {}, "{{ not a placeholder }}"),
        # Leftmost first: ``{{key}}`` is the escape, the outer braces stay as they are.
        ("wrapped {{{key}}}", {"key": "v"}, "wrapped {{key}}"),
        ('JSON {"a": 1, "b": [1, 2]}', {}, 'JSON {"a": 1, "b": [1, 2]}'),
        ('JSON {"a": 1} with {k}', {"k": "v"}, 'JSON {"a": 1} with v'),
        ('nested JSON {"a": {"b": 1}}', {}, 'nested JSON {"a": {"b": 1}}'),
        (
            '{"a": {"b": {"c": [1, {"d": 2}]}}} ends in }}}}',
            {},
            '{"a": {"b": {"c": [1, {"d": 2}]}}} ends in }}}}',
        ),
        ('{"user": {"name": "{name}"}}', {"name": "Ana"}, '{"user": {"name": "Ana"}}'),
        ('doubled JSON {{"a": 1}}', {}, 'doubled JSON {{"a": 1}}'),
        ("stray { brace and } brace", {}, "stray { brace and } brace"),
        ("a lone {", {}, "a lone {"),
        ("a lone }", {}, "a lone }"),
        ("} before {", {}, "} before {"),
        ("not an identifier {1abc} {a-b} { key }", {}, "not an identifier {1abc} {a-b} { key }"),
        ("unknown scope {foo:bar}", {}, "unknown scope {foo:bar}"),
        ("{_under_score9}", {"_under_score9": "ok"}, "ok"),
    ],
)
def test_fill_instruction(template: str, values: dict[str, Any], expected: str) -> None:
    """D16: ``{key}``, scoped keys, ``{key?}``, ``{{key}}`` as the literal ``{key}``; every
    other brace left exactly as it is (JSON examples, nested objects included)."""
    assert fill(template, values, "agent") == expected


def test_fill_instruction_value_is_str_of_value() -> None:
    """D16: replaced by ``str()`` of the value (not repr, not JSON)."""

    class Thing:
        def __str__(self) -> str:
            return "a thing"

    assert fill("{x} {y}", {"x": Thing(), "y": ["a", 1]}, "agent") == "a thing ['a', 1]"


def test_fill_instruction_value_text_is_not_reformatted() -> None:
    """A substituted value containing braces or placeholders is inserted verbatim."""
    assert fill("{a}", {"a": "{b} {{c}}", "b": "no"}, "agent") == "{b} {{c}}"


def test_fill_instruction_missing_key_names_key_and_agent() -> None:
    """D16: a missing non-optional key is an error naming the key and the agent."""
    with pytest.raises(prompts.MissingPlaceholderError) as err:
        fill("Hello {user:name}, about {topic?}", {}, "greeter")
    text = str(err.value.args[0])
    assert "user:name" in text
    assert "greeter" in text


def test_fill_instruction_missing_key_is_reported_even_after_optional_ones() -> None:
    with pytest.raises(prompts.MissingPlaceholderError) as err:
        fill("{a?}{b}", {"a": 1}, "x")
    assert "'b'" in err.value.args[0]
