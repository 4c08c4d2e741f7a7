"""Model retries and per-agent run options (docs/retries-and-options.md, D28).

``ModelRetry`` makes a ``ChatModelAgent`` call its model again when a call fails;
``AgentOptions`` carries options of one ``run`` or ``resume`` call meant for one agent of the
tree (``Runner.run(..., agent_options={"name": AgentOptions(...)})``).

>>> retry = ModelRetry(max_retries=2, backoff=lambda attempt: 0.0)
>>> retry.max_retries, retry.should_retry(ConnectionError("reset"))
(2, True)
>>> AgentOptions(model_options={"temperature": 0}).model_options
{'temperature': 0}
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from relaykit.errors import ConfigurationError
from relaykit.messages import Message

if TYPE_CHECKING:
    from relaykit.tools.base import ToolContext

__all__ = [
    "AgentOptions",
    "HistoryModifier",
    "ModelRetry",
    "ResumeOptions",
    "default_backoff",
    "default_should_retry",
    "normalize_agent_options",
    "tool_options",
]

#: A function rewriting an agent's conversation before its next model call.
HistoryModifier = Callable[[list[Message]], list[Message]]


def default_backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (1 for the first): 0.1 s doubled per attempt,
    at most 10 s, plus up to 50 % jitter (so that many clients do not retry in step).

    >>> 0.1 <= default_backoff(1) <= 0.15, 10.0 <= default_backoff(20) <= 15.0
    (True, True)
    """
    base = min(0.1 * 2.0 ** min(attempt - 1, 10), 10.0)
    return base + float(random.uniform(0.0, base / 2))


def default_should_retry(exc: BaseException) -> bool:
    """Retry every ``Exception`` but a ``ConfigurationError`` (a mistake no retry can fix).

    >>> default_should_retry(TimeoutError()), default_should_retry(ConfigurationError("x"))
    (True, False)
    """
    return isinstance(exc, Exception) and not isinstance(exc, ConfigurationError)


@dataclass(frozen=True, slots=True)
class ModelRetry:
    """How a ``ChatModelAgent`` retries a failed model call (``ChatModelAgent(retry=...)``).

    ``max_retries=N`` means at most N+1 calls. Before retry ``attempt`` (counted from 1) the
    agent waits ``backoff(attempt)`` seconds. A failure ``should_retry`` refuses ends the agent
    with that exception; once the retries are spent the agent ends with a ``ModelError``
    ``model call failed after <N+1> attempts: ...`` whose ``__cause__`` is the last failure.
    A streamed reply that fails part-way is delivered ending in ``WillRetryError`` (left out of
    every history, FA-17), then the retried reply streams as a new event. These retries come on
    top of a provider's own retries of HTTP errors before the first chunk.

    >>> ModelRetry(max_retries=-1)
    Traceback (most recent call last):
    ...
    relaykit.errors.ConfigurationError: ModelRetry(max_retries=-1): max_retries must be an int >= 0

    Args:
        max_retries: how many times a failed call is retried (0: never).
        backoff: seconds to wait before retry ``attempt``; ``default_backoff`` by default.
        should_retry: whether a failure is worth another call; ``default_should_retry`` (every
            ``Exception`` but ``ConfigurationError``) by default.
    """

    #: How many times a failed call is retried.
    max_retries: int = 3
    #: Seconds to wait before retry ``attempt`` (from 1).
    backoff: Callable[[int], float] = default_backoff
    #: Whether a failure is worth another call.
    should_retry: Callable[[BaseException], bool] = default_should_retry

    def __post_init__(self) -> None:
        n = self.max_retries
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ConfigurationError(
                f"ModelRetry(max_retries={n!r}): max_retries must be an int >= 0"
            )
        for name in ("backoff", "should_retry"):
            if not callable(getattr(self, name)):
                raise ConfigurationError(
                    f"ModelRetry({name}=...) must be a function, not "
                    f"{type(getattr(self, name)).__name__}"
                )


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """Options of one ``run`` or ``resume`` call for one agent, by name:
    ``Runner.run(..., agent_options={"writer": AgentOptions(...)})``. Only that agent gets
    them; a plain mapping is read as ``AgentOptions(**mapping)``.

    For a ``ChatModelAgent``: ``model_options`` are merged into each of its
    ``ModelRequest.options`` (over nothing: they are the request's options), its tools read
    ``tool_options`` with ``relaykit.tool_options(ctx)``, and ``history_modifier`` rewrites
    its conversation once, before its next model call (on a resume, before the paused tool
    calls continue: a call whose arguments it changed runs with the new ones). Any agent --
    a custom one too -- reads the options meant for it as
    ``ctx.options.agent_options.get(self.name)``.

    >>> opts = AgentOptions(history_modifier=lambda messages: messages[-1:])
    >>> [m.content for m in opts.history_modifier([Message.user("a"), Message.user("b")])]
    ['b']

    Args:
        model_options: provider request options (``temperature``...) for the agent's model
            calls (``Any``: each provider has its own).
        tool_options: values the agent's tools read with ``relaykit.tool_options(ctx)``
            (application-defined, hence ``Any``).
        history_modifier: ``(messages) -> messages``, a plain function applied to the
            agent's conversation (system message included) before its next model call.
    """

    #: Provider request options merged into the agent's ``ModelRequest.options``.
    model_options: Mapping[str, Any] = field(default_factory=dict)
    #: Values the agent's tools read with ``relaykit.tool_options(ctx)``.
    tool_options: Mapping[str, Any] = field(default_factory=dict)
    #: Rewrites the agent's conversation before its next model call.
    history_modifier: HistoryModifier | None = None


#: The options of a ``resume`` call: the same class as for ``run`` (D28).
ResumeOptions = AgentOptions


def normalize_agent_options(given: object, known: Collection[str]) -> dict[str, AgentOptions]:
    """``agent_options`` as the Runner keeps them, checked: a mapping of agent name (one of
    ``known``) to ``AgentOptions`` or a mapping of its fields.

    >>> normalize_agent_options({"a": {"model_options": {"seed": 1}}}, ["a"])["a"].model_options
    {'seed': 1}
    >>> try:
    ...     normalize_agent_options({"b": {}}, ["a"])
    ... except ConfigurationError as exc:
    ...     print(str(exc)[-51:])
    which is not an agent of the tree (its agents: 'a')

    Raises:
        ConfigurationError: not a mapping, an unknown agent, or options that are not
            ``AgentOptions`` fields of the right kind.
    """
    if not isinstance(given, Mapping):
        raise ConfigurationError(
            f"agent_options must be a mapping of agent name to AgentOptions, not "
            f"{type(given).__name__}"
        )
    result: dict[str, AgentOptions] = {}
    for name, value in given.items():
        if name not in known:
            names = ", ".join(repr(n) for n in sorted(known))
            raise ConfigurationError(
                f"agent_options names {name!r}, which is not an agent of the tree "
                f"(its agents: {names})"
            )
        if isinstance(value, AgentOptions):
            options = value
        elif isinstance(value, Mapping):
            try:
                options = AgentOptions(**value)
            except TypeError as exc:
                raise ConfigurationError(
                    f"agent_options[{name!r}]: {exc} (the fields are model_options, "
                    "tool_options and history_modifier)"
                ) from None
        else:
            raise ConfigurationError(
                f"agent_options[{name!r}] must be AgentOptions or a mapping, not "
                f"{type(value).__name__}"
            )
        for what in ("model_options", "tool_options"):
            if not isinstance(getattr(options, what), Mapping):
                raise ConfigurationError(
                    f"agent_options[{name!r}].{what} must be a mapping, not "
                    f"{type(getattr(options, what)).__name__}"
                )
        if options.history_modifier is not None and not callable(options.history_modifier):
            raise ConfigurationError(
                f"agent_options[{name!r}].history_modifier must be a function "
                "(messages) -> messages"
            )
        result[name] = options
    return result


def tool_options(ctx: ToolContext) -> Mapping[str, Any]:
    """The ``tool_options`` the current run designated to the agent calling this tool (empty
    when there are none).

    >>> import asyncio
    >>> import relaykit as rk
    >>> @rk.tool
    ... def units(ctx: rk.ToolContext) -> str:
    ...     '''The unit system to answer in.'''
    ...     return rk.tool_options(ctx).get("units", "metric")
    >>> model = rk.ScriptedModel([
    ...     rk.Message.assistant("", [rk.ToolCall("c1", "units", "{}")]),
    ...     rk.Message.assistant("done")])
    >>> runner = rk.Runner(rk.ChatModelAgent("helper", model=model, tools=[units]))
    >>> result = asyncio.run(runner.invoke(
    ...     "hi", agent_options={"helper": {"tool_options": {"units": "imperial"}}}))
    >>> result.events[1].message.content
    'imperial'
    """
    run_ctx = ctx.run_context
    path = run_ctx.run_path
    designated = run_ctx.options.agent_options
    if not designated or not path:
        return _EMPTY
    options = designated.get(path[-1].agent_name)
    return options.tool_options if options is not None else _EMPTY


_EMPTY: Mapping[str, Any] = MappingProxyType({})
