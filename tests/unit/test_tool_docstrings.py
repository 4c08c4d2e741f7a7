"""Unit tests: ``@rk.tool`` reads the tool description and the parameter descriptions from a
Google, NumPy or Sphinx docstring (parsed by griffe, style detected); Returns, Raises and other
sections never reach the description."""

from __future__ import annotations

import subprocess
import sys

import pytest

import relaykit as rk


def described(fn_tool: rk.FunctionTool[..., object]) -> tuple[str, dict[str, str | None]]:
    """The tool's description and each parameter's description (None when it has none)."""
    props = fn_tool.spec.parameters["properties"]
    return fn_tool.spec.description, {name: p.get("description") for name, p in props.items()}


@rk.tool
def google(city: str, days: int = 1, unit: str = "c") -> str:
    """Get the weather forecast.

    Uses the national service.

    Args:
        city: The city name,
            e.g. "Paris".
        days (int): How many days to forecast.
        unit: Temperature unit.

    Returns:
        A sentence about the weather.

    Raises:
        ValueError: When the city is unknown.
    """
    return city


@rk.tool
def numpy(city: str, days: int = 1, unit: str = "c") -> str:
    """Get the weather forecast.

    Uses the national service.

    Parameters
    ----------
    city : str
        The city name,
        e.g. "Paris".
    days : int, optional
        How many days to forecast.
    unit : str
        Temperature unit.

    Returns
    -------
    str
        A sentence about the weather.

    Raises
    ------
    ValueError
        When the city is unknown.
    """
    return city


@rk.tool
def sphinx(city: str, days: int = 1, unit: str = "c") -> str:
    """Get the weather forecast.

    Uses the national service.

    :param city: The city name,
        e.g. "Paris".
    :param int days: How many days to forecast.
    :param unit: Temperature unit.
    :type unit: str
    :returns: A sentence about the weather.
    :rtype: str
    :raises ValueError: When the city is unknown.
    """
    return city


EXPECTED = (
    "Get the weather forecast.\n\nUses the national service.",
    {
        "city": 'The city name, e.g. "Paris".',
        "days": "How many days to forecast.",
        "unit": "Temperature unit.",
    },
)


@pytest.mark.parametrize("fn_tool", [google, numpy, sphinx], ids=["google", "numpy", "sphinx"])
def test_each_style_gives_the_main_text_and_the_parameter_descriptions(
    fn_tool: rk.FunctionTool[..., object],
) -> None:
    """The description is the main text only; each parameter's description comes from its
    entry (continuation lines joined); nothing of Returns or Raises leaks."""
    assert described(fn_tool) == EXPECTED
    assert "sentence" not in fn_tool.spec.description
    assert "ValueError" not in fn_tool.spec.description


def test_no_docstring_gives_an_empty_description() -> None:
    @rk.tool
    def ping(host: str) -> str:
        return host

    assert described(ping) == ("", {"host": None})


def test_a_docstring_with_only_a_description_is_the_description() -> None:
    """Several paragraphs, no sections: all of it, dedented; no parameter descriptions."""

    @rk.tool
    def ping(host: str) -> str:
        """Check that a host answers.

        Sends one ICMP echo request: something like
        ``ping -c 1 <host>``.
        """
        return host

    assert described(ping) == (
        "Check that a host answers.\n\nSends one ICMP echo request: something like\n"
        "``ping -c 1 <host>``.",
        {"host": None},
    )


def test_a_one_line_docstring() -> None:
    @rk.tool
    async def ping(host: str) -> str:
        """Check that a host answers."""
        return host

    assert described(ping) == ("Check that a host answers.", {"host": None})


def test_a_google_docstring_with_only_returns_keeps_the_returns_out() -> None:
    @rk.tool
    def now() -> str:
        """The current time.

        Returns:
            The time as ISO 8601 text.
        """
        return "12:00"

    assert now.spec.description == "The current time."


def test_parameters_the_signature_does_not_have_are_ignored() -> None:
    """A docstring that documents an old parameter is not an error (no warning either), and
    the tool context parameter is documented without reaching the schema."""

    @rk.tool
    def lookup(ctx: rk.ToolContext, key: str) -> str:
        """Look a key up.

        Args:
            ctx: The call's context.
            key: The key.
            old: A parameter that no longer exists.
        """
        return key

    assert described(lookup) == ("Look a key up.", {"key": "The key."})


def test_an_explicit_description_overrides_the_docstring_but_not_the_parameters() -> None:
    @rk.tool(description="Weather, briefly.")
    def weather(city: str) -> str:
        """Long text.

        Args:
            city: The city.
        """
        return city

    assert described(weather) == ("Weather, briefly.", {"city": "The city."})


def test_google_keyword_args_and_examples() -> None:
    """Examples sections stay out; ``Keyword Args`` describe parameters too."""

    @rk.tool
    def search(query: str, limit: int = 5) -> str:
        """Search the index.

        Args:
            query: The words to look for.

        Keyword Args:
            limit: At most this many hits.

        Examples:
            >>> search("cats")
            'hits'
        """
        return query

    assert described(search) == (
        "Search the index.",
        {"query": "The words to look for.", "limit": "At most this many hits."},
    )


def test_importing_relaykit_does_not_import_griffe() -> None:
    """griffe is loaded on the first docstring with sections, not by ``import relaykit`` nor by
    a tool whose docstring is plain text."""
    code = (
        "import sys, relaykit as rk\n"
        "@rk.tool\n"
        "def ping(host: str) -> str:\n"
        "    '''Check that a host answers.'''\n"
        "    return host\n"
        "print('griffe' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
