"""``@tool``: typed Python functions as tools, with a JSON schema from their signature."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from relaykit.errors import ToolError
from relaykit.models.base import ToolSpec
from relaykit.tools.base import ToolContext

__all__ = ["FunctionTool", "ToolInterrupt", "tool"]


class ToolInterrupt(Exception):
    """Raised by a tool to pause the run: ``info`` reaches the caller, ``state`` is saved.

    On resume a targeted tool is called again with the same arguments and reads
    ``ctx.was_interrupted`` / ``ctx.interrupt_state`` / ``ctx.resume_data``.
    """

    def __init__(self, info: Any, state: Any = None, *, sub_interrupts: tuple[Any, ...] = ()):
        super().__init__(f"tool interrupt: {info!r}")
        self.info = info
        self.state = state
        self.sub_interrupts = sub_interrupts


_ARG_LINE = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The description (text before ``Args:``) and per-argument descriptions."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    desc: list[str] = []
    params: dict[str, str] = {}
    section = "desc"
    last: str | None = None
    last_indent = 0
    for line in lines:
        head = line.strip().lower()
        if head in ("args:", "arguments:", "parameters:"):
            section = "args"
            continue
        if head in ("returns:", "raises:", "example:", "examples:"):
            section = "other"
            continue
        if section == "desc":
            desc.append(line)
        elif section == "args" and line.strip():
            indent = len(line) - len(line.lstrip())
            if last is not None and indent > last_indent:  # a continuation line
                params[last] = f"{params[last]} {line.strip()}"
                continue
            m = _ARG_LINE.match(line)
            if m:
                last, last_indent = m.group(1), indent
                params[last] = m.group(2).strip()
    return "\n".join(desc).strip(), params


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


class FunctionTool:
    """A tool made from a function by ``@tool``; arguments are validated by pydantic.

    An ``async`` function is awaited on the event loop. A plain (sync) function runs in a worker
    thread (``asyncio.to_thread``, which copies the context variables), so that a blocking call
    stalls neither the other tool calls of the batch nor any other run. A sync tool that is
    cancelled (its run was) cannot be stopped: its thread runs to the end, its result is dropped.

    >>> add = FunctionTool(lambda a, b: a + b, name="add")
    >>> add.spec.parameters["required"]
    ['a', 'b']
    """

    def __init__(self, fn: Callable[..., Any], *, name: str | None = None,
                 description: str | None = None, long_running: bool = False) -> None:
        self.fn = fn
        self.long_running = long_running
        self.is_async = inspect.iscoroutinefunction(fn)
        doc_desc, arg_docs = _parse_docstring(fn.__doc__ or "")
        hints = get_type_hints(fn)
        sig = inspect.signature(fn)
        self._context_param: str | None = None
        fields: dict[str, Any] = {}
        for i, (pname, param) in enumerate(sig.parameters.items()):
            annotation = hints.get(pname, Any)
            if i == 0 and annotation is ToolContext:
                self._context_param = pname
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {fn.__name__!r}: *args/**kwargs are not supported")
            from pydantic import Field

            default = ... if param.default is param.empty else param.default
            fields[pname] = (annotation, Field(default, description=arg_docs.get(pname)))
        self.name = name or fn.__name__
        self._model: type[BaseModel] = create_model(
            f"{self.name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        self._spec = ToolSpec(self.name, description if description is not None else doc_desc,
                              _clean_schema(self._model.model_json_schema()))

    @property
    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return self._spec

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"

    async def call(self, ctx: ToolContext, arguments: dict[str, Any]) -> Any:
        """Validate ``arguments`` and call the function (a bad argument is a ToolError).

        Validation happens on the event loop; a sync function then runs in a worker thread.
        """
        try:
            parsed = self._model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors())
            raise ToolError(f"invalid arguments for tool '{self.name}': {problems}") from None
        kwargs = {k: getattr(parsed, k) for k in type(parsed).model_fields}
        if self._context_param is not None:
            kwargs[self._context_param] = ctx
        if self.is_async:
            return await self.fn(**kwargs)
        result = await asyncio.to_thread(_run_sync, self.fn, kwargs)
        if type(result) is _Ended:
            raise result.exc
        return result

    # Calling the decorated object still calls the function.
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


class _Ended:
    """A sync function's ``GeneratorExit``, carried out of its worker thread as a value."""

    __slots__ = ("exc",)

    def __init__(self, exc: GeneratorExit) -> None:
        self.exc = exc


def _run_sync(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call ``fn`` in the worker thread.

    asyncio hands a future's exception to the awaiting task by *throwing* it into the task's
    coroutine, and a ``GeneratorExit`` thrown into a coroutine closes every coroutine it awaits
    instead of travelling through them: the agent could not tell the tool ended. So it comes
    back as a value and is raised again, as an ordinary raise, by ``FunctionTool.call``.
    """
    try:
        return fn(**kwargs)
    except GeneratorExit as exc:
        return _Ended(exc)


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(*, name: str | None = None, description: str | None = None,
         long_running: bool = False) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(fn: Callable[..., Any] | None = None, /, *, name: str | None = None,
         description: str | None = None,
         long_running: bool = False) -> FunctionTool | Callable[[Callable[..., Any]],
                                                                FunctionTool]:
    """Turn a typed function (sync or async) into a tool; a sync function runs in a worker
    thread when the tool is called (see :class:`FunctionTool`).

    >>> @tool
    ... def get_weather(city: str) -> str:
    ...     '''The weather in a city.'''
    ...     return f"It is sunny in {city}."
    >>> get_weather.spec.parameters["required"]
    ['city']
    """
    def make(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, long_running=long_running)

    return make(fn) if fn is not None else make
