"""Plugins: application-wide hooks around a Runner's runs, agents, model calls and tool calls.

A ``Plugin`` overrides the async hooks it needs; the others are no-ops that the
``PluginManager`` never calls (it lists, once, the plugins overriding each hook). Hooks run in
the order the plugins were given:

* the hooks that may return a value (every hook but ``after_run``) stop at the first plugin
  returning something other than None: that value is the result and the later plugins' hook
  is not called. Each plugin receives the original arguments (as in ADK), except ``on_event``,
  which chains: each plugin receives the event as replaced by the previous ones.
* ``after_run`` runs every plugin's hook, even when one raises, then raises the first failure.
* a hook that raises stops that hook and raises ``PluginError`` naming the plugin and the hook,
  with the original exception as ``__cause__``. A cancellation from outside,
  ``KeyboardInterrupt`` and ``SystemExit`` propagate unchanged.

>>> import asyncio
>>> from relaykit.messages import Message
>>> class Greeter(Plugin):
...     async def before_run(self, ctx):
...         return Message.assistant(f"hello {ctx.user_id}")
>>> manager = PluginManager([Greeter()])
>>> ctx = InvocationContext("shop", "ada", "s1", "inv-1")
>>> asyncio.run(manager.before_run(ctx)).content, manager.has("before_run"), manager.has("on_event")
('hello ada', True, False)
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from relaykit._aio import must_propagate
from relaykit.errors import ConfigurationError, PluginError
from relaykit.events import AgentEvent
from relaykit.messages import Message
from relaykit.models.base import ModelRequest

__all__ = ["HOOK_NAMES", "InvocationContext", "Plugin", "PluginManager"]

#: The names of the hooks a ``Plugin`` may override, in the order of a run (``close`` is not a
#: hook: ``PluginManager.aclose`` calls it once, when the plugins are no longer needed).
HOOK_NAMES: tuple[str, ...] = (
    "on_user_message",
    "before_run",
    "on_event",
    "after_run",
    "before_agent",
    "after_agent",
    "before_model",
    "after_model",
    "before_tool",
    "after_tool",
)

_Hook = Callable[..., Awaitable[Any]]


@dataclass(slots=True)
class InvocationContext:
    """What a hook knows about the invocation (one ``Runner`` run) it is called for.

    >>> ctx = InvocationContext("shop", "ada", "s1", "inv-1")
    >>> ctx.app_name, ctx.session is None
    ('shop', True)
    """

    #: The Runner's application name (``Runner(app_name=...)``).
    app_name: str
    #: The user the run is for, or None outside session mode.
    user_id: str | None
    #: The session the run belongs to, or None outside session mode.
    session_id: str | None
    #: The id of this invocation, unique per run (a resumed run keeps the paused run's id).
    invocation_id: str
    #: The session object the run reads and writes, or None outside session mode. ``Any``: the
    #: session service's own type; hooks should treat it as read-only.
    session: Any = None


class Plugin:
    """Base class of the plugins: override the async hooks you need, leave the others alone.

    Every hook receives the ``InvocationContext`` first. A hook returning None changes
    nothing; what a returning hook may return is said on each hook.

    >>> class Audit(Plugin):
    ...     async def before_tool(self, ctx, agent_name, tool_name, arguments):
    ...         print(f"{agent_name} calls {tool_name}")
    >>> Audit().name, Plugin(name="noop").name
    ('Audit', 'noop')

    Args:
        name: the plugin's name, unique among the plugins of a Runner; by default the class
            name.
    """

    def __init__(self, name: str | None = None) -> None:
        #: The plugin's name, unique among the plugins of a Runner (errors name it).
        self.name: str = name if name is not None else type(self).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    async def on_user_message(self, ctx: InvocationContext, message: Message) -> Message | None:
        """Called with the user's message before the run starts; a returned message replaces
        it.

        >>> import asyncio
        >>> asyncio.run(Plugin().on_user_message(None, Message.user("hi"))) is None
        True

        Args:
            ctx: the invocation.
            message: the user's message, as given to the Runner.
        """
        return None

    async def before_run(self, ctx: InvocationContext) -> Message | None:
        """Called before the root agent runs; a returned message ends the run at once, as the
        root agent's answer.

        >>> import asyncio
        >>> asyncio.run(Plugin().before_run(None)) is None
        True

        Args:
            ctx: the invocation.
        """
        return None

    async def on_event(self, ctx: InvocationContext, event: AgentEvent) -> AgentEvent | None:
        """Called with every event of the run before it is recorded and delivered; a returned
        event replaces it, raising rejects it (a ``PluginError`` event takes its place).

        >>> import asyncio
        >>> asyncio.run(Plugin().on_event(None, AgentEvent.exit())) is None
        True

        Args:
            ctx: the invocation.
            event: the event, as replaced by the plugins before this one.
        """
        return None

    async def after_run(self, ctx: InvocationContext) -> None:
        """Called once the run has ended (also when it failed); every plugin's hook runs.

        >>> import asyncio
        >>> asyncio.run(Plugin().after_run(None)) is None
        True

        Args:
            ctx: the invocation.
        """
        return None

    async def before_agent(self, ctx: InvocationContext, agent_name: str) -> Message | None:
        """Called before an agent runs; a returned message is the agent's answer and the agent
        does not run.

        >>> import asyncio
        >>> asyncio.run(Plugin().before_agent(None, "helper")) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent about to run.
        """
        return None

    async def after_agent(self, ctx: InvocationContext, agent_name: str) -> Message | None:
        """Called after an agent ran; a returned message is added as the agent's last answer.

        >>> import asyncio
        >>> asyncio.run(Plugin().after_agent(None, "helper")) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent that ran.
        """
        return None

    async def before_model(
        self, ctx: InvocationContext, agent_name: str, request: ModelRequest
    ) -> Message | None:
        """Called before an agent calls its model; a returned message is the model's reply and
        the model is not called. The hook may also modify ``request`` in place.

        >>> import asyncio
        >>> asyncio.run(Plugin().before_model(None, "helper", ModelRequest([]))) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent calling its model.
            request: the request about to be sent.
        """
        return None

    async def after_model(
        self, ctx: InvocationContext, agent_name: str, response: Message
    ) -> Message | None:
        """Called with the model's complete reply; a returned message replaces it.

        >>> import asyncio
        >>> asyncio.run(Plugin().after_model(None, "helper", Message.assistant("hi"))) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent that called its model.
            response: the model's reply.
        """
        return None

    async def before_tool(
        self, ctx: InvocationContext, agent_name: str, tool_name: str, arguments: dict[str, Any]
    ) -> object | None:
        """Called before a tool runs; a returned value is the tool's result and the tool does
        not run. The hook may also modify ``arguments`` in place.

        >>> import asyncio
        >>> asyncio.run(Plugin().before_tool(None, "helper", "add", {"a": 1})) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent calling the tool.
            tool_name: the tool about to run.
            arguments: the arguments the model gave (``Any``: decoded JSON values).
        """
        return None

    async def after_tool(
        self,
        ctx: InvocationContext,
        agent_name: str,
        tool_name: str,
        arguments: dict[str, Any],
        result: object,
    ) -> object | None:
        """Called with a tool's result; a returned value replaces it.

        >>> import asyncio
        >>> asyncio.run(Plugin().after_tool(None, "helper", "add", {"a": 1}, 1)) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent that called the tool.
            tool_name: the tool that ran.
            arguments: the arguments it ran with (``Any``: decoded JSON values).
            result: what the tool returned.
        """
        return None

    async def close(self) -> None:
        """Release what the plugin holds; called once by ``PluginManager.aclose``.

        >>> import asyncio
        >>> asyncio.run(Plugin().close()) is None
        True
        """
        return None


def _overrides(plugin: Plugin, hook: str) -> bool:
    """True when ``plugin`` replaces the base class's ``hook`` (in its class or instance)."""
    return hook in vars(plugin) or getattr(type(plugin), hook, None) is not getattr(Plugin, hook)


def _failed(plugin: Plugin, hook: str, exc: BaseException) -> PluginError:
    text = str(exc)
    err = PluginError(
        f"plugin {plugin.name!r} failed in {hook}: {type(exc).__name__}"
        + (f": {text}" if text else ""),
        plugin_name=plugin.name,
        hook=hook,
    )
    err.__cause__ = exc
    return err


def _wrong_type(plugin: Plugin, hook: str, value: object, expected: type) -> PluginError:
    return PluginError(
        f"plugin {plugin.name!r}: {hook} returned {type(value).__name__}; it must return a "
        f"{expected.__name__} or None",
        plugin_name=plugin.name,
        hook=hook,
    )


class PluginManager:
    """Runs the hooks of a Runner's plugins, in the order given (see the module docstring).

    Which plugins override which hook is worked out once, here: a hook no plugin overrides
    costs one empty loop, and ``has`` lets the Runner skip the work around it.

    >>> import asyncio
    >>> class Upper(Plugin):
    ...     async def on_event(self, ctx, event):
    ...         return AgentEvent.from_message(Message.assistant(event.message.content.upper()))
    >>> manager = PluginManager([Upper()])
    >>> ctx = InvocationContext("shop", None, None, "inv-1")
    >>> event = AgentEvent.from_message(Message.assistant("hi"))
    >>> asyncio.run(manager.on_event(ctx, event)).message.content
    'HI'

    Args:
        plugins: the plugins; their names must be unique.

    Raises:
        ConfigurationError: an item is not a ``Plugin``, two plugins share a name, or a hook a
            plugin overrides is not an ``async def``.
    """

    __slots__ = ("_hooks", "_plugins")

    def __init__(self, plugins: Sequence[Plugin]) -> None:
        seen: set[str] = set()
        for plugin in plugins:
            if not isinstance(plugin, Plugin):
                raise ConfigurationError(
                    f"plugins must be relaykit.plugins.Plugin instances, got "
                    f"{type(plugin).__name__}: subclass Plugin and override its hooks"
                )
            name = getattr(plugin, "name", None)
            if not isinstance(name, str) or not name:
                raise ConfigurationError(
                    f"a {type(plugin).__name__} plugin has no name: call Plugin.__init__ "
                    "(name defaults to the class name)"
                )
            if name in seen:
                raise ConfigurationError(
                    f"two plugins are named {name!r}: plugin names must be unique "
                    "(pass name=... to tell them apart)"
                )
            seen.add(name)
        self._plugins: tuple[Plugin, ...] = tuple(plugins)
        self._hooks: dict[str, tuple[tuple[Plugin, _Hook], ...]] = {}
        for hook in (*HOOK_NAMES, "close"):
            entries: list[tuple[Plugin, _Hook]] = []
            for plugin in self._plugins:
                if not _overrides(plugin, hook):
                    continue
                method = getattr(plugin, hook)
                if not inspect.iscoroutinefunction(method):
                    raise ConfigurationError(
                        f"plugin {plugin.name!r}: {hook} must be an async def "
                        f"(got {type(method).__name__})"
                    )
                entries.append((plugin, method))
            self._hooks[hook] = tuple(entries)

    @property
    def plugins(self) -> tuple[Plugin, ...]:
        """The plugins, in the order their hooks run.

        >>> [p.name for p in PluginManager([Plugin("a"), Plugin("b")]).plugins]
        ['a', 'b']
        """
        return self._plugins

    def has(self, hook: str) -> bool:
        """True when at least one plugin overrides ``hook``.

        >>> PluginManager([Plugin()]).has("after_model")
        False

        Args:
            hook: a hook name (one of ``HOOK_NAMES``, or ``close``).

        Raises:
            ValueError: ``hook`` is not a hook name.
        """
        try:
            return bool(self._hooks[hook])
        except KeyError:
            raise ValueError(
                f"unknown plugin hook {hook!r}; hooks are {', '.join(HOOK_NAMES)}"
            ) from None

    def __bool__(self) -> bool:
        return bool(self._plugins)

    def __len__(self) -> int:
        return len(self._plugins)

    def __repr__(self) -> str:
        return f"PluginManager({[p.name for p in self._plugins]!r})"

    async def _first(self, hook: str, *args: Any, returns: type | None = None) -> Any:
        """Run ``hook`` in order until one returns non-None; return that value (or None).

        With ``returns``, a value of another type is that plugin's ``PluginError``.
        """
        for plugin, method in self._hooks[hook]:
            try:
                result = await method(*args)
            except BaseException as exc:
                if must_propagate(exc):
                    raise
                raise _failed(plugin, hook, exc) from exc
            if result is not None:
                if returns is not None and not isinstance(result, returns):
                    raise _wrong_type(plugin, hook, result, returns)
                return result
        return None

    async def on_user_message(self, ctx: InvocationContext, message: Message) -> Message | None:
        """The first message a plugin returns for the user's ``message``, or None (keep it).

        Every plugin receives the original message (as in ADK).

        >>> import asyncio
        >>> asyncio.run(PluginManager([]).on_user_message(None, Message.user("hi"))) is None
        True

        Args:
            ctx: the invocation.
            message: the user's message.
        """
        result: Message | None = await self._first("on_user_message", ctx, message, returns=Message)
        return result

    async def before_run(self, ctx: InvocationContext) -> Message | None:
        """The first message a plugin returns before the run (the run's answer), or None.

        >>> import asyncio
        >>> asyncio.run(PluginManager([]).before_run(None)) is None
        True

        Args:
            ctx: the invocation.
        """
        result: Message | None = await self._first("before_run", ctx, returns=Message)
        return result

    async def on_event(self, ctx: InvocationContext, event: AgentEvent) -> AgentEvent:
        """``event`` as replaced by the plugins in turn (each receives the previous one's
        result); the event itself when none replaces it.

        >>> import asyncio
        >>> event = AgentEvent.exit()
        >>> asyncio.run(PluginManager([]).on_event(None, event)) is event
        True

        Args:
            ctx: the invocation.
            event: the event the run produced.

        Raises:
            PluginError: a plugin rejected the event (its hook raised).
        """
        for plugin, method in self._hooks["on_event"]:
            try:
                replaced = await method(ctx, event)
            except BaseException as exc:
                if must_propagate(exc):
                    raise
                raise _failed(plugin, "on_event", exc) from exc
            if replaced is not None:
                if not isinstance(replaced, AgentEvent):
                    raise _wrong_type(plugin, "on_event", replaced, AgentEvent)
                event = replaced
        return event

    async def after_run(self, ctx: InvocationContext) -> None:
        """Run every plugin's ``after_run``, even when one raises; then raise the first
        failure. A cancellation from outside propagates at once (the later hooks do not run).

        >>> import asyncio
        >>> asyncio.run(PluginManager([]).after_run(None)) is None
        True

        Args:
            ctx: the invocation.

        Raises:
            PluginError: the first hook that raised, naming its plugin.
        """
        first: PluginError | None = None
        for plugin, method in self._hooks["after_run"]:
            try:
                await method(ctx)
            except BaseException as exc:
                if must_propagate(exc):
                    raise
                if first is None:
                    first = _failed(plugin, "after_run", exc)
        if first is not None:
            raise first

    async def before_agent(self, ctx: InvocationContext, agent_name: str) -> Message | None:
        """The first message a plugin returns before ``agent_name`` runs, or None.

        >>> import asyncio
        >>> asyncio.run(PluginManager([]).before_agent(None, "helper")) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent about to run.
        """
        result: Message | None = await self._first("before_agent", ctx, agent_name)
        return result

    async def after_agent(self, ctx: InvocationContext, agent_name: str) -> Message | None:
        """The first message a plugin returns after ``agent_name`` ran, or None.

        >>> import asyncio
        >>> asyncio.run(PluginManager([]).after_agent(None, "helper")) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent that ran.
        """
        result: Message | None = await self._first("after_agent", ctx, agent_name)
        return result

    async def before_model(
        self, ctx: InvocationContext, agent_name: str, request: ModelRequest
    ) -> Message | None:
        """The first message a plugin returns instead of calling the model, or None.

        >>> import asyncio
        >>> asyncio.run(PluginManager([]).before_model(None, "helper", ModelRequest([]))) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent calling its model.
            request: the request about to be sent.
        """
        result: Message | None = await self._first("before_model", ctx, agent_name, request)
        return result

    async def after_model(
        self, ctx: InvocationContext, agent_name: str, response: Message
    ) -> Message | None:
        """The first message a plugin returns to replace the model's ``response``, or None.

        >>> import asyncio
        >>> reply = Message.assistant("hi")
        >>> asyncio.run(PluginManager([]).after_model(None, "helper", reply)) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent that called its model.
            response: the model's reply.
        """
        result: Message | None = await self._first("after_model", ctx, agent_name, response)
        return result

    async def before_tool(
        self, ctx: InvocationContext, agent_name: str, tool_name: str, arguments: dict[str, Any]
    ) -> object | None:
        """The first value a plugin returns instead of running the tool, or None.

        >>> import asyncio
        >>> asyncio.run(PluginManager([]).before_tool(None, "helper", "add", {})) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent calling the tool.
            tool_name: the tool about to run.
            arguments: the arguments the model gave (``Any``: decoded JSON values).
        """
        result: object | None = await self._first(
            "before_tool", ctx, agent_name, tool_name, arguments
        )
        return result

    async def after_tool(
        self,
        ctx: InvocationContext,
        agent_name: str,
        tool_name: str,
        arguments: dict[str, Any],
        result: object,
    ) -> object | None:
        """The first value a plugin returns to replace the tool's ``result``, or None.

        >>> import asyncio
        >>> asyncio.run(PluginManager([]).after_tool(None, "helper", "add", {}, 3)) is None
        True

        Args:
            ctx: the invocation.
            agent_name: the agent that called the tool.
            tool_name: the tool that ran.
            arguments: the arguments it ran with (``Any``: decoded JSON values).
            result: what the tool returned.
        """
        replaced: object | None = await self._first(
            "after_tool", ctx, agent_name, tool_name, arguments, result
        )
        return replaced

    async def aclose(self) -> None:
        """Call every plugin's ``close``, even when one raises; then raise the first failure.

        A cancellation from outside (or ``KeyboardInterrupt``) does not stop the closing: the
        remaining plugins are closed, then it propagates unchanged.

        >>> import asyncio
        >>> asyncio.run(PluginManager([Plugin()]).aclose()) is None
        True

        Raises:
            PluginError: the first ``close`` that raised, naming its plugin.
        """
        first: PluginError | None = None
        propagate: BaseException | None = None
        for plugin, method in self._hooks["close"]:
            try:
                await method()
            except BaseException as exc:
                if must_propagate(exc):
                    if propagate is None:
                        propagate = exc
                elif first is None:
                    first = _failed(plugin, "close", exc)
        if propagate is not None:
            raise propagate
        if first is not None:
            raise first
