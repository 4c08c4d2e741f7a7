"""Unit tests: ``@rk.tool`` — schema from the signature and a Google-style docstring (the other
styles: test_tool_docstrings.py), sync and async functions, ``ToolContext`` injection, argument
validation (D15)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest

import relaykit as rk


def tool_ctx(name: str = "t", call_id: str = "call_1") -> rk.ToolContext:
    return rk.ToolContext(rk.RunContext.new(), name, call_id)


# -- schema ------------------------------------------------------------------------------------
@rk.tool
def get_weather(
    city: str, days: int = 1, unit: Literal["c", "f"] = "c", tags: list[str] | None = None
) -> str:
    """Get the weather forecast.

    Uses the national service.

    Args:
        city: The city name.
        days (int): How many days to forecast.
        unit: Temperature unit.
        tags: Optional labels.

    Returns:
        A sentence about the weather.

    Raises:
        ValueError: never.
    """
    return f"sunny in {city} for {days} day(s) [{unit}] {tags}"


def test_name_and_description_from_function() -> None:
    """The tool is named after the function; the description is the docstring text before
    ``Args:`` (sections such as Returns/Raises are left out)."""
    spec = get_weather.spec
    assert isinstance(spec, rk.ToolSpec)
    assert spec.name == get_weather.name == "get_weather"
    assert spec.description == "Get the weather forecast.\n\nUses the national service."


def test_parameters_schema_from_signature_and_args_section() -> None:
    """Types, defaults, required list and per-argument descriptions from ``Args:``."""
    params = get_weather.spec.parameters
    assert params["type"] == "object"
    assert params["required"] == ["city"]
    props = params["properties"]
    assert list(props) == ["city", "days", "unit", "tags"]
    assert props["city"] == {"type": "string", "description": "The city name."}
    assert props["days"]["type"] == "integer"
    assert props["days"]["default"] == 1
    assert props["days"]["description"] == "How many days to forecast."  # "(int)" stripped
    assert props["unit"]["enum"] == ["c", "f"]
    assert props["unit"]["description"] == "Temperature unit."
    assert props["tags"]["description"] == "Optional labels."
    assert props["tags"]["default"] is None
    assert "title" not in params
    assert all("title" not in p for p in props.values())


def test_tool_is_a_tool_and_still_callable_as_a_function() -> None:
    assert isinstance(get_weather, rk.Tool)
    assert get_weather("Paris", 2) == "sunny in Paris for 2 day(s) [c] None"


def test_decorator_with_explicit_name_and_description() -> None:
    @rk.tool(name="lookup", description="Look a thing up.")
    def find(query: str) -> str:
        """Ignored docstring."""
        return query

    assert find.spec.name == find.name == "lookup"
    assert find.spec.description == "Look a thing up."
    assert find.spec.parameters["required"] == ["query"]


def test_decorator_with_empty_parentheses_and_no_docstring() -> None:
    @rk.tool()
    def ping() -> str:
        return "pong"

    assert ping.spec.name == "ping"
    assert ping.spec.description == ""
    assert ping.spec.parameters["properties"] == {}
    assert ping.spec.parameters.get("required", []) == []


def test_all_parameters_optional_have_no_required_entries() -> None:
    @rk.tool
    def count(n: int = 3, label: str = "x") -> str:
        return label * n

    params = count.spec.parameters
    assert params.get("required", []) == []
    assert params["properties"]["n"]["default"] == 3


def test_multiline_arg_description_keeps_continuation_lines() -> None:
    """Google style allows an argument description to continue on indented lines; the next
    argument starts a new description."""

    @rk.tool
    def search(query: str, limit: int = 5) -> str:
        """Search the index.

        Args:
            query: The words to look for,
                separated by spaces.
            limit: At most this
                many hits.

        Returns:
            The hits.
        """
        return query

    props = search.spec.parameters["properties"]
    assert props["query"]["description"] == "The words to look for, separated by spaces."
    assert props["limit"]["description"] == "At most this many hits."


# -- calling -----------------------------------------------------------------------------------
async def test_sync_function_is_called_with_validated_arguments() -> None:
    out = await get_weather.call(tool_ctx(), {"city": "Oslo", "days": 3, "tags": ["a"]})
    assert out == "sunny in Oslo for 3 day(s) [c] ['a']"


async def test_async_function_is_awaited() -> None:
    started = asyncio.Event()

    @rk.tool
    async def slow_add(a: int, b: int) -> int:
        """Add two numbers."""
        started.set()
        await asyncio.sleep(0)
        return a + b

    assert await slow_add.call(tool_ctx(), {"a": 2, "b": 5}) == 7
    assert started.is_set()


async def test_return_value_is_passed_through_unchanged() -> None:
    """``call`` returns the function's value as is (the agent turns it into text/JSON)."""

    @rk.tool
    def info(key: str) -> dict[str, Any]:
        return {"key": key, "n": [1, 2]}

    assert await info.call(tool_ctx(), {"key": "k"}) == {"key": "k", "n": [1, 2]}


async def test_tool_context_injected_as_first_parameter_and_not_in_schema() -> None:
    seen: list[rk.ToolContext] = []

    @rk.tool
    async def whoami(ctx: rk.ToolContext, greeting: str) -> str:
        """Say who is calling.

        Args:
            greeting: How to greet.
        """
        seen.append(ctx)
        ctx.run_context.set_session_value("called", ctx.tool_call_id)
        return f"{greeting} from {ctx.tool_name}/{ctx.tool_call_id}"

    assert list(whoami.spec.parameters["properties"]) == ["greeting"]
    assert whoami.spec.parameters["required"] == ["greeting"]
    ctx = tool_ctx("whoami", "call_9")
    assert await whoami.call(ctx, {"greeting": "hi"}) == "hi from whoami/call_9"
    assert seen == [ctx]
    assert ctx.run_context.get_session_value("called") == "call_9"


async def test_tool_context_injected_into_sync_function() -> None:
    @rk.tool
    def sync_with_ctx(context: rk.ToolContext, n: int) -> str:
        return f"{context.tool_name}:{n}"

    assert "context" not in sync_with_ctx.spec.parameters["properties"]
    assert await sync_with_ctx.call(tool_ctx("sync_with_ctx"), {"n": 4}) == "sync_with_ctx:4"


async def test_defaults_apply_when_arguments_are_omitted() -> None:
    assert (
        await get_weather.call(tool_ctx(), {"city": "Rome"})
        == "sunny in Rome for 1 day(s) [c] None"
    )


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "city"),  # missing required
        ({"city": 5}, "city"),  # wrong type
        ({"city": "x", "days": "many"}, "days"),  # not an integer
        ({"city": "x", "unit": "kelvin"}, "unit"),  # not in the enum
        ({"city": "x", "tags": "notalist"}, "tags"),  # not an array
        ({"city": "x", "extra": 1}, "extra"),  # unknown argument
    ],
)
async def test_validation_error_is_tool_error_naming_the_field(
    arguments: dict[str, Any], field: str
) -> None:
    """D15: arguments that do not match the schema are a ToolError whose message names the
    tool and the field; the function is not called."""
    calls: list[Any] = []

    @rk.tool(name="get_weather")
    def checked(
        city: str, days: int = 1, unit: Literal["c", "f"] = "c", tags: list[str] | None = None
    ) -> str:
        calls.append(city)
        return "ok"

    with pytest.raises(rk.ToolError) as err:
        await checked.call(tool_ctx(), arguments)
    assert isinstance(err.value, rk.errors.RelayKitError)
    text = str(err.value)
    assert "get_weather" in text
    assert field in text
    assert calls == []


async def test_exception_in_body_propagates_unchanged() -> None:
    """An exception raised by the function body is not turned into a ToolError (D15)."""

    @rk.tool
    def broken() -> str:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await broken.call(tool_ctx(), {})


async def test_tool_error_raised_by_body_propagates() -> None:
    @rk.tool
    def refuses(x: int) -> str:
        raise rk.ToolError(f"cannot handle {x}")

    with pytest.raises(rk.ToolError, match="cannot handle 3"):
        await refuses.call(tool_ctx(), {"x": 3})


async def test_tool_interrupt_raised_by_body_propagates() -> None:
    @rk.tool
    def ask(question: str) -> str:
        raise rk.ToolInterrupt({"question": question}, state={"n": 1})

    with pytest.raises(rk.ToolInterrupt) as err:
        await ask.call(tool_ctx(), {"question": "ok?"})
    assert err.value.info == {"question": "ok?"}
    assert err.value.state == {"n": 1}


def test_long_running_flag() -> None:
    @rk.tool(long_running=True)
    def start_job(job: str) -> str:
        return job

    @rk.tool
    def quick(job: str) -> str:
        return job

    assert start_job.long_running is True
    assert quick.long_running is False
