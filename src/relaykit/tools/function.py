"""``@tool``: typed Python functions as tools, with a JSON schema from their signature."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from relaykit.errors import ToolError
from relaykit.models.base import ToolSpec
from relaykit.tools.base import ToolContext

if TYPE_CHECKING:
    from relaykit.events import AgentEvent
    from relaykit.resume import InterruptContext, InterruptInfo

__all__ = ["FunctionTool", "ToolInterrupt", "tool"]

P = ParamSpec("P")
R = TypeVar("R")


class ToolInterrupt(Exception):
    """Raised by a tool to pause the run: ``info`` reaches the caller, ``state`` is saved.

    On resume a targeted tool is called again with the same arguments and reads
    ``ctx.was_interrupted`` / ``ctx.interrupt_state`` / ``ctx.resume_data``.

    >>> import relaykit as rk
    >>> @rk.tool
    ... def refund(ctx: rk.ToolContext, amount: float) -> str:
    ...     if not ctx.is_resume_target:
    ...         raise ToolInterrupt({"question": f"refund {amount} EUR?"}, state=amount)
    ...     return "refunded" if ctx.resume_data else "refused"
    >>> try:
    ...     refund(ToolContext(rk.RunContext.new(), "refund", "call_1"), 10.0)
    ... except ToolInterrupt as paused:
    ...     print(paused.info, paused.state)
    {'question': 'refund 10.0 EUR?'} 10.0

    Args:
        info: what to tell the caller (``InterruptContext.info``); application-defined,
            hence ``Any``, saved by the codec.
        state: what to save for the resume (read back as ``ctx.interrupt_state``);
            application-defined, hence ``Any``.
        sub_interrupts: for a tool that runs agents itself: their interrupts (events, infos
            or points), which become the root causes below this tool's point.
    """

    def __init__(
        self,
        info: Any,
        state: Any = None,
        *,
        sub_interrupts: tuple[AgentEvent | InterruptInfo | InterruptContext, ...] = (),
    ) -> None:
        super().__init__(f"tool interrupt: {info!r}")
        #: What the tool told the caller.
        self.info = info
        #: What the tool saved for its resume.
        self.state = state
        #: Interrupts of agents the tool ran, below this tool's point.
        self.sub_interrupts = sub_interrupts


# A line that could open a section in a style griffe reads: a Google heading (``Args:``), a
# NumPy underline (``----------``) or a Sphinx field (``:param x:``). A docstring without one is
# plain text, and griffe (about 60 ms to import) is not needed for it.
_SECTION_HINT = re.compile(r"^[ \t]*(?:[A-Za-z][A-Za-z ]*:|-{3,}|:[A-Za-z])", re.MULTILINE)


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The tool description -- the docstring's text, without its sections -- and the
    description of each parameter, from a Google, NumPy or Sphinx docstring.

    The style is detected by griffe's heuristics (its auto parser). Returns, Raises, Examples
    and other sections are left out; a parameter's description lines are joined into one.

    >>> _parse_docstring("Add numbers.\\n\\n:param a: the first\\n:returns: the sum")
    ('Add numbers.', {'a': 'the first'})
    """
    if not doc:
        return "", {}
    text = inspect.cleandoc(doc)
    if not _SECTION_HINT.search(text):
        return text, {}
    # Imported here: ``import relaykit`` stays fast, and a plain docstring never pays for it.
    import griffe

    # No warnings: a docstring that disagrees with the signature is the author's business.
    sections = griffe.parse_auto(
        griffe.Docstring(text, lineno=1),
        per_style_options={
            "google": {"warnings": False},
            "numpy": {"warnings": False},
            "sphinx": {"warnings": False},
        },
    )
    description: list[str] = []
    params: dict[str, str] = {}
    for section in sections:
        if isinstance(section, griffe.DocstringSectionText):
            description.append(section.value.strip())
        elif isinstance(section, griffe.DocstringSectionParameters):  # also "Other Parameters"
            for param in section.value:
                params.setdefault(param.name, " ".join(param.description.split()))
    return "\n\n".join(d for d in description if d), params


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


class FunctionTool(Generic[P, R]):
    """A tool made from a function by ``@tool``; arguments are validated by pydantic.

    It is generic in the function's parameters and return type: calling the tool object calls
    the function, and type checkers see the function's own signature.

    An ``async`` function is awaited on the event loop. A plain (sync) function runs in a worker
    thread (``asyncio.to_thread``, which copies the context variables), so that a blocking call
    stalls neither the other tool calls of the batch nor any other run. A thread cannot be
    stopped, so an immediate cancel of the run (``RunHandle.cancel``, D26) does not cut a sync
    call that has started: the run pauses once it returned, and keeps its result (the resume
    does not run it again). A cancellation of the run's task (D9) does not wait: the thread
    runs to its end and its result is dropped.

    >>> add = FunctionTool(lambda a, b: a + b, name="add")
    >>> add.spec.parameters["required"]
    ['a', 'b']

    Args:
        fn: the function; its parameters (after an optional first ``ToolContext`` one) are
            the tool's arguments, validated by pydantic against their annotations. No
            ``*args`` or ``**kwargs``.
        name: the tool's name; the function's name by default.
        description: the tool's description; the docstring's text by default (parameter
            descriptions come from its Google, NumPy or Sphinx sections).
        long_running: the call starts work that finishes later: its result is given back to
            the caller as an interrupt, and the resume's data becomes the tool's result.
    """

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        long_running: bool = False,
    ) -> None:
        #: The decorated function.
        self.fn = fn
        #: Whether the call only starts the work (see ``long_running`` above).
        self.long_running = long_running
        #: Whether ``fn`` is a coroutine function (else it runs in a worker thread).
        self.is_async = inspect.iscoroutinefunction(fn)
        doc_desc, arg_docs = _parse_docstring(fn.__doc__)
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
            default = ... if param.default is param.empty else param.default
            fields[pname] = (annotation, Field(default, description=arg_docs.get(pname)))
        name = name or fn.__name__
        self._model: type[BaseModel] = create_model(
            f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )
        self._spec = ToolSpec(
            name,
            description if description is not None else doc_desc,
            _clean_schema(self._model.model_json_schema()),
        )

    @property
    def name(self) -> str:
        """The name the model calls the tool by (``spec.name``)."""
        return self._spec.name

    @property
    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return self._spec

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"

    async def call(self, ctx: ToolContext, arguments: dict[str, object]) -> object:
        """Validate ``arguments`` and call the function (a bad argument is a ToolError).

        Validation happens on the event loop; a sync function then runs in a worker thread.

        Args:
            ctx: the call's context, passed to the function's ``ToolContext`` parameter.
            arguments: the model's arguments.

        Returns:
            What the function returned (awaited for an async function).

        >>> import asyncio
        >>> import relaykit as rk
        >>> add = FunctionTool(lambda a, b: a + b, name="add")
        >>> ctx = ToolContext(rk.RunContext.new(), "add", "call_1")
        >>> asyncio.run(add.call(ctx, {"a": 1, "b": 2}))
        3
        """
        try:
            parsed = self._model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ToolError(f"invalid arguments for tool '{self.name}': {problems}") from None
        kwargs = {k: getattr(parsed, k) for k in type(parsed).model_fields}
        if self._context_param is not None:
            kwargs[self._context_param] = ctx
        fn: Callable[..., Any] = self.fn  # called by keyword, from validated arguments
        if self.is_async:
            return await fn(**kwargs)
        result = await asyncio.to_thread(_run_sync, fn, kwargs)
        if type(result) is _Ended:
            raise result.exc
        return result

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function itself (no validation, no thread): ``@tool`` keeps it usable."""
        return self.fn(*args, **kwargs)


class _Ended:
    """A sync function's ``GeneratorExit`` or ``StopIteration``, carried out of its worker
    thread as a value."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _run_sync(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call ``fn`` in the worker thread.

    asyncio hands a future's exception to the awaiting task by *throwing* it into the task's
    coroutine, and a ``GeneratorExit`` thrown into a coroutine closes every coroutine it awaits
    instead of travelling through them: the agent could not tell the tool ended. And a
    ``StopIteration`` cannot be set on a future at all (the future would stay pending for
    ever). So both come back as a value and ``FunctionTool.call`` raises them again as an
    ordinary raise (``StopIteration`` as the ``RuntimeError`` a coroutine would make of it).
    """
    try:
        return fn(**kwargs)
    except GeneratorExit as exc:
        return _Ended(exc)
    except StopIteration as exc:
        err = RuntimeError(f"tool function {getattr(fn, '__name__', '?')!r} raised StopIteration")
        err.__cause__ = exc
        return _Ended(err)


@overload
def tool(fn: Callable[P, R], /) -> FunctionTool[P, R]: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, long_running: bool = False
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    long_running: bool = False,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Turn a typed function (sync or async) into a tool; a sync function runs in a worker
    thread when the tool is called (see :class:`FunctionTool`).

    Use it bare (``@tool``) or with options (``@tool(name=...)``).

    Args:
        fn: the function (when used bare).
        name: the tool's name; the function's name by default.
        description: the tool's description; the docstring's text by default.
        long_running: the call only starts the work (see :class:`FunctionTool`).

    >>> @tool
    ... def get_weather(city: str) -> str:
    ...     '''The weather in a city.'''
    ...     return f"It is sunny in {city}."
    >>> get_weather.spec.parameters["required"]
    ['city']
    """

    def make(f: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(f, name=name, description=description, long_running=long_running)

    return make(fn) if fn is not None else make
