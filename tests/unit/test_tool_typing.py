"""Unit tests: ``@rk.tool`` keeps the decorated function's signature for type checkers.

A small program using ``@rk.tool`` is checked with ``mypy --strict`` and relaykit's own mypy
settings: right calls type-check as calls of the function, wrong ones are errors, and
``reveal_type`` shows the parameters and return type, free of ``Any``. mypy keeps its cache in
the repository's ``.mypy_cache`` (as ``make typecheck`` does): only a cold cache makes this
test slow.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="mypy is a dev dependency")

ROOT = Path(__file__).resolve().parents[2]
MODULE = "relaykit_tool_typing_program"  # its own entry in the shared mypy cache

PROGRAM = textwrap.dedent('''
    import relaykit as rk


    @rk.tool
    def get_weather(city: str, days: int = 1) -> str:
        """The weather in a city."""
        return f"sunny in {city} for {days} days"


    @rk.tool(name="lookup", description="Look a thing up.")
    def find(query: str, limit: int = 3) -> list[str]:
        return [query] * limit


    @rk.tool()
    async def fetch(ctx: rk.ToolContext, url: str) -> bytes:
        return url.encode()


    reveal_type(get_weather.__call__)
    reveal_type(find.__call__)
    reveal_type(get_weather)
    forecast: str = get_weather("Paris")
    week: str = get_weather("Paris", days=7)
    hits: list[str] = find("cats", limit=2)
    name: str = get_weather.name
    tools: list[rk.Tool] = [get_weather, find, fetch, rk.exit_loop]
    get_weather(3)  # WRONG: an int for city
    get_weather("Paris", days="seven")  # WRONG: a str for days
    too_many: str = find("cats")  # WRONG: returns a list
''')


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    """mypy's (notes, errors) for PROGRAM, each as ``<line>: <message>``."""
    program = tmp_path_factory.mktemp("typing") / f"{MODULE}.py"
    program.write_text(PROGRAM, encoding="utf-8")
    stdout, stderr, _ = mypy_api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--strict",
            "--no-error-summary",
            "--show-error-codes",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(program),
        ]
    )
    assert not stderr, stderr
    notes: list[str] = []
    errors: list[str] = []
    for line in stdout.splitlines():
        # Any folder: mypy may replay a cached result, with the path of an earlier run.
        m = re.match(rf"(?:.*[/\\])?{MODULE}\.py:(\d+): (note|error): (.*)", line)
        assert m, f"unexpected mypy output: {line}"
        (notes if m.group(2) == "note" else errors).append(f"{m.group(1)}: {m.group(3)}")
    return notes, errors


def test_right_calls_type_check_and_wrong_ones_do_not(
    mypy_output: tuple[list[str], list[str]],
) -> None:
    """Only the three lines marked WRONG are errors: the tool object is called like the
    function, with its parameter and return types, and is a ``Tool``."""
    _, errors = mypy_output
    wrong = [n for n, text in enumerate(PROGRAM.splitlines(), start=1) if "# WRONG" in text]
    assert sorted({int(e.split(":", 1)[0]) for e in errors}) == wrong, errors
    assert any('"int"; expected "str"' in e for e in errors)
    assert any('"str"; expected "int"' in e for e in errors)


def test_reveal_type_shows_the_functions_signature_without_any(
    mypy_output: tuple[list[str], list[str]],
) -> None:
    notes, _ = mypy_output
    # Older mypy versions spell builtins with their module.
    revealed = [
        n.split(": ", 1)[1].replace("builtins.", "") for n in notes if "Revealed type is" in n
    ]
    assert revealed == [
        'Revealed type is "def (city: str, days: int =) -> str"',
        'Revealed type is "def (query: str, limit: int =) -> list[str]"',
        'Revealed type is "relaykit.tools.function.FunctionTool[[city: str, days: int =], str]"',
    ]
    assert not any("Any" in r for r in revealed)
