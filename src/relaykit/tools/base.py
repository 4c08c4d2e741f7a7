"""The Tool protocol and the context a tool call receives."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from relaykit.errors import ConfigurationError
from relaykit.models.base import ToolSpec

if TYPE_CHECKING:
    from relaykit._invocation import Invocation
    from relaykit.context import RunContext
    from relaykit.events import AgentAction, AgentEvent
    from relaykit.memory import MemoryEntry
    from relaykit.messages import Blob, Message

__all__ = [
    "RESERVED_TOOL_NAMES",
    "SessionState",
    "Tool",
    "ToolContext",
    "ToolEvents",
    "is_builtin_tool",
    "register_builtin_tool",
]

RESERVED_TOOL_NAMES = frozenset({"transfer_to_agent", "exit", "exit_loop"})
"""Names of relaykit's built-in tools. A user tool may not take one (D24): the agent would
otherwise replace it by the built-in without a word. Only tools registered with
:func:`register_builtin_tool` may carry these names."""

# The built-in tool objects a user may list in ``tools`` although their names are reserved
# (``exit_loop`` for a loop agent's children, for one). Keyed by ``id`` and compared by
# identity: a look-alike with the same name and spec is still a user tool.
_BUILTIN_TOOLS: dict[int, object] = {}

_T = TypeVar("_T")


class SessionState(MutableMapping[str, Any]):
    """The session values of a run as a mutable mapping (``ToolContext.state``): reads see every
    value, writes go through ``RunContext.set_session_value`` (so in session mode they become
    the agent's ``state_delta``). Values cannot be deleted: set them to None.

    >>> from relaykit.context import RunContext
    >>> run = RunContext.new({"city": "Paris"})
    >>> state = SessionState(run)
    >>> state["units"] = "metric"; state.setdefault("city", "Lyon")
    'Paris'
    >>> dict(run.session_values), len(state), "units" in state
    ({'city': 'Paris', 'units': 'metric'}, 2, True)

    Args:
        run_context: the context whose session values the mapping shows.
    """

    __slots__ = ("_run",)

    def __init__(self, run_context: RunContext) -> None:
        self._run = run_context

    def __getitem__(self, key: str) -> Any:
        return self._run.history.values[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._run.set_session_value(key, value)

    def __delitem__(self, key: str) -> None:
        raise TypeError(
            f"session value {key!r} cannot be deleted (a deletion is not a state delta a "
            "session can store): set it to None instead"
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self._run.history.values)

    def __len__(self) -> int:
        return len(self._run.history.values)

    def __repr__(self) -> str:
        return f"SessionState({self._run.history.values!r})"


class ToolEvents:
    """Events tools forward while they run, for the calling agent to yield as they arrive
    (``ToolContext.events``): an ``AgentTool(agent, emit_internal_events=True)`` puts its inner
    agent's events here (D28). Unbounded, like the caller's event stream; one reader.

    >>> import asyncio
    >>> from relaykit.events import AgentEvent
    >>> async def main():
    ...     events = ToolEvents()
    ...     waiter = events.wait()
    ...     events.emit(AgentEvent.exit())
    ...     await waiter
    ...     return [ev.action.exit for ev in events.drain()], events.drain()
    >>> asyncio.run(main())
    ([True], [])
    """

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[AgentEvent] = []
        self._waiter: asyncio.Future[None] | None = None

    @classmethod
    def if_wanted(cls, tools: Iterable[object]) -> ToolEvents | None:
        """A new channel when one of ``tools`` forwards events (its ``emit_internal_events``
        is true), else None: calls of other tools pay nothing for it.

        >>> ToolEvents.if_wanted([object()]) is None
        True
        """
        for tool in tools:
            if getattr(tool, "emit_internal_events", False):
                return cls()
        return None

    def emit(self, event: AgentEvent) -> None:
        """Queue ``event`` for the calling agent (never blocks) and wake its reader."""
        self._items.append(event)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def drain(self) -> list[AgentEvent]:
        """The queued events, oldest first; the queue is empty afterwards."""
        items, self._items = self._items, []
        return items

    def wait(self) -> asyncio.Future[None]:
        """A future done once an event is queued (already done when one is)."""
        waiter = self._waiter
        if waiter is None or waiter.done():
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            if self._items:
                waiter.set_result(None)
        return waiter


class ToolContext:
    """What a tool call can see and do.

    ``set_action`` attaches an action (transfer, exit, custom) to this call's tool event. On a
    resume, ``was_interrupted`` / ``interrupt_state`` / ``is_resume_target`` / ``resume_data``
    tell a tool that interrupted earlier what happened since. A function tool receives it when
    its first parameter is annotated ``ToolContext``.

    ``state`` reads and writes the run's session values. In session mode (a Runner with a
    session service) ``session`` is the turn's session, and the artifact and memory methods
    reach the Runner's services for the session's app and user: ``save_artifact``,
    ``load_artifact``, ``search_memory`` (each raises ``ConfigurationError`` saying what to
    configure when the service is missing).

    >>> import relaykit as rk
    >>> @rk.tool
    ... def whoami(ctx: rk.ToolContext) -> str:
    ...     return f"{ctx.tool_name} ({ctx.tool_call_id})"
    >>> whoami(ToolContext(rk.RunContext.new(), "whoami", "call_1"))
    'whoami (call_1)'

    Args:
        run_context: the calling agent's context (``run_context.address`` ends with this
            call's segment).
        tool_name: the name the model called the tool by.
        tool_call_id: the id of the tool call.
        was_interrupted: on a resume: this call interrupted before.
        interrupt_state: on a resume: the ``state`` the call's ``ToolInterrupt`` saved
            (application-defined, hence ``Any``).
        is_resume_target: on a resume: the caller answered this call's interrupt.
        resume_data: on a resume: the caller's answer (application-defined, hence ``Any``).
    """

    __slots__ = (
        "action",
        "chat_history",
        "events",
        "interrupt_state",
        "is_resume_target",
        "resume_data",
        "run_context",
        "tool_call_id",
        "tool_name",
        "was_interrupted",
    )

    def __init__(
        self,
        run_context: RunContext,
        tool_name: str,
        tool_call_id: str,
        *,
        was_interrupted: bool = False,
        interrupt_state: Any = None,
        is_resume_target: bool = False,
        resume_data: Any = None,
    ) -> None:
        #: The calling agent's context: session values (``get_session_value``...), run path.
        self.run_context = run_context
        #: The name the model called the tool by.
        self.tool_name = tool_name
        #: The id of this tool call.
        self.tool_call_id = tool_call_id
        #: On a resume: this call interrupted before.
        self.was_interrupted = was_interrupted
        #: On a resume: what the call's ``ToolInterrupt`` saved.
        self.interrupt_state = interrupt_state
        #: On a resume: the caller answered this call's interrupt.
        self.is_resume_target = is_resume_target
        #: On a resume: the caller's answer.
        self.resume_data = resume_data
        #: The action ``set_action`` attached, if any.
        self.action: AgentAction | None = None
        #: The calling agent's conversation before this call (AgentTool's full-history input).
        self.chat_history: list[Message] = []
        #: Where the tool may forward events for the calling agent to yield while the call
        #: runs (None when the caller does not read them): see ``ToolEvents``.
        self.events: ToolEvents | None = None

    def set_action(self, action: AgentAction) -> None:
        """Attach ``action`` to this call's tool-result event (like Eino's SendToolGenAction).

        >>> import relaykit as rk
        >>> ctx = ToolContext(rk.RunContext.new(), "escalate", "call_1")
        >>> ctx.set_action(rk.AgentAction(exit=True)); ctx.action.exit
        True
        """
        self.action = action

    # -- session mode ----------------------------------------------------------------------
    @property
    def session(self) -> Any:
        """The session of the turn (the session service's ``Session``), or None outside
        session mode. ``Any``: the service's own type; read it, do not change it.

        >>> import relaykit as rk
        >>> ToolContext(rk.RunContext.new(), "lookup", "call_1").session is None
        True
        """
        inv = self.run_context.options.invocation
        return inv.session if inv is not None else None

    @property
    def state(self) -> SessionState:
        """The session values, readable and writable like a dict; a write is
        ``run_context.set_session_value`` (in session mode, a state delta of the agent).

        >>> import relaykit as rk
        >>> ctx = ToolContext(rk.RunContext.new({"n": 1}), "count", "call_1")
        >>> ctx.state["n"] += 1; ctx.run_context.get_session_value("n")
        2
        """
        return SessionState(self.run_context)

    async def save_artifact(self, name: str, blob: Blob) -> int:
        """Store ``blob`` as the next version of the artifact ``name`` of this session (a
        ``user:`` name: of the user, in all their sessions); returns the version (0, 1...).

        >>> import asyncio, relaykit as rk
        >>> ctx = ToolContext(rk.RunContext.new(), "report", "call_1")
        >>> try:
        ...     asyncio.run(ctx.save_artifact("report.txt", rk.Blob("text/plain", b"hi")))
        ... except ConfigurationError as exc:
        ...     print(str(exc).split(": ")[0])
        ToolContext.save_artifact needs an artifact service and session mode

        Args:
            name: the artifact's name (``validate_artifact_name`` says which are valid).
            blob: the content.

        Raises:
            ConfigurationError: no artifact service, or not in session mode.
            ArtifactNameError: ``name`` cannot name an artifact.
        """
        inv, user_id, session_id = self._scope("save_artifact", "artifact_service")
        assert inv.artifact_service is not None
        return await inv.artifact_service.save(
            inv.context.app_name, user_id, session_id, name, blob
        )

    async def load_artifact(self, name: str, version: int | None = None) -> Blob | None:
        """Version ``version`` of the artifact ``name`` (the latest when None), or None when
        there is no such artifact or version.

        Args:
            name: the artifact's name.
            version: the version to load; the latest by default.

        Raises:
            ConfigurationError: no artifact service, or not in session mode.
        """
        inv, user_id, session_id = self._scope("load_artifact", "artifact_service")
        assert inv.artifact_service is not None
        return await inv.artifact_service.load(
            inv.context.app_name, user_id, session_id, name, version
        )

    async def search_memory(self, query: str) -> list[MemoryEntry]:
        """The entries of the user's memory (their past sessions of this app) matching
        ``query``, best first.

        Args:
            query: what to look for (keywords, for ``InMemoryMemoryService``).

        Raises:
            ConfigurationError: no memory service, or not in session mode.
        """
        inv = self.run_context.options.invocation
        if inv is None or inv.memory_service is None:
            raise ConfigurationError(_missing("search_memory", "memory_service", inv))
        user_id = inv.context.user_id
        if user_id is None:
            raise ConfigurationError(_outside_session("search_memory", "a user"))
        return await inv.memory_service.search(inv.context.app_name, user_id, query)

    def _scope(self, method: str, service: str) -> tuple[Invocation, str, str]:
        """The invocation, user id and session id for an artifact method, or the
        ``ConfigurationError`` saying what is missing."""
        inv = self.run_context.options.invocation
        if inv is None or getattr(inv, service) is None:
            raise ConfigurationError(_missing(method, service, inv))
        user_id, session_id = inv.context.user_id, inv.context.session_id
        if user_id is None or session_id is None:
            raise ConfigurationError(_outside_session(method, "a session"))
        return inv, user_id, session_id


def _missing(method: str, service: str, inv: Invocation | None) -> str:
    what = "an artifact service" if service == "artifact_service" else "a memory service"
    if inv is None:  # not run by a Runner with services (or plugins)
        return (
            f"ToolContext.{method} needs {what} and session mode: "
            f"Runner(agent, session_service=..., {service}=...), run with user_id and "
            "session_id"
        )
    return f"ToolContext.{method} needs {what}: pass Runner(..., {service}=...)"


def _outside_session(method: str, what: str) -> str:
    return (
        f"ToolContext.{method} works in session mode only (it belongs to {what}): give the "
        "Runner a session service and run with user_id and session_id"
    )


@runtime_checkable
class Tool(Protocol):
    """A tool: a name, a spec the model sees and an async ``call``.

    ``name`` is ``spec.name``: the name the model calls the tool by. Agents read ``spec.name``
    when they run, so a custom tool written before ``name`` existed still runs; type checkers
    and ``isinstance(obj, Tool)`` want the ``name`` too.

    ``call`` receives the parsed JSON arguments (an object nested at most 64 levels deep). Its
    return value becomes the tool message content: a ``str`` as is, anything else as JSON
    (through pydantic's ``to_jsonable_python``: dataclasses, models, datetimes, UUIDs, decimals,
    sets, bytes as base64). A value that cannot be JSON (an unknown type, a float NaN or
    infinity) fails the tool: the agent ends with an error event. Raise ``relaykit.ToolError``
    to send ``error: <message>`` back to the model instead.

    The names in :data:`RESERVED_TOOL_NAMES` belong to the built-in tools.

    >>> import relaykit as rk
    >>> class Clock:
    ...     name = "clock"
    ...     spec = rk.ToolSpec("clock", "The current time.")
    ...     async def call(self, ctx: rk.ToolContext, arguments: dict[str, object]) -> object:
    ...         return "12:00"
    >>> isinstance(Clock(), Tool)
    True
    """

    @property
    def name(self) -> str:
        """The name the model calls the tool by (``spec.name``)."""
        ...

    @property
    def spec(self) -> ToolSpec:
        """The tool as the model sees it: name, description, JSON schema of the arguments."""
        ...

    async def call(self, ctx: ToolContext, arguments: dict[str, object]) -> object:
        """Run the tool.

        Args:
            ctx: what the call can see and do.
            arguments: the model's arguments, parsed from JSON (an object).

        Returns:
            The result: a ``str`` as is, anything else JSON-encoded (see the class docstring).
        """
        ...


def register_builtin_tool(tool: _T) -> _T:
    """Mark ``tool`` (this very object) as a relaykit built-in: agents accept it in ``tools``
    although its name is in :data:`RESERVED_TOOL_NAMES`. For relaykit's own built-ins only.

    >>> from relaykit.tools.builtin import ExitLoopTool, exit_loop
    >>> is_builtin_tool(exit_loop), is_builtin_tool(ExitLoopTool())
    (True, False)
    """
    _BUILTIN_TOOLS[id(tool)] = tool
    return tool


def is_builtin_tool(tool: object) -> bool:
    """True for a tool object registered with :func:`register_builtin_tool`.

    >>> is_builtin_tool(object())
    False
    """
    return _BUILTIN_TOOLS.get(id(tool)) is tool
