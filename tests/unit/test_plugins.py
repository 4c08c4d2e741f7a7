"""The PluginManager: hook order, first-non-None-wins, event chaining, errors, closing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relaykit.errors import ConfigurationError, PluginError, RelayKitError
from relaykit.events import AgentEvent
from relaykit.messages import Message
from relaykit.models.base import ModelRequest
from relaykit.plugins import HOOK_NAMES, InvocationContext, Plugin, PluginManager

CTX = InvocationContext("app", "user", "session", "inv-1")


class Recorder(Plugin):
    """Records every hook call in a shared log and returns ``returns[hook]`` (None if absent)."""

    def __init__(
        self,
        name: str,
        log: list[tuple[str, str, tuple[Any, ...]]],
        returns: dict[str, Any] | None = None,
        raises: dict[str, BaseException] | None = None,
    ) -> None:
        super().__init__(name)
        self.log = log
        self.returns = returns or {}
        self.raises = raises or {}

    async def _hook(self, hook: str, *args: Any) -> Any:
        self.log.append((self.name, hook, args))
        if hook in self.raises:
            raise self.raises[hook]
        return self.returns.get(hook)

    async def on_user_message(self, ctx: InvocationContext, message: Message) -> Message | None:
        result: Message | None = await self._hook("on_user_message", message)
        return result

    async def before_run(self, ctx: InvocationContext) -> Message | None:
        result: Message | None = await self._hook("before_run")
        return result

    async def on_event(self, ctx: InvocationContext, event: AgentEvent) -> AgentEvent | None:
        result: AgentEvent | None = await self._hook("on_event", event)
        return result

    async def after_run(self, ctx: InvocationContext) -> None:
        await self._hook("after_run")

    async def before_agent(self, ctx: InvocationContext, agent_name: str) -> Message | None:
        result: Message | None = await self._hook("before_agent", agent_name)
        return result

    async def after_agent(self, ctx: InvocationContext, agent_name: str) -> Message | None:
        result: Message | None = await self._hook("after_agent", agent_name)
        return result

    async def before_model(
        self, ctx: InvocationContext, agent_name: str, request: ModelRequest
    ) -> Message | None:
        result: Message | None = await self._hook("before_model", agent_name, request)
        return result

    async def after_model(
        self, ctx: InvocationContext, agent_name: str, response: Message
    ) -> Message | None:
        result: Message | None = await self._hook("after_model", agent_name, response)
        return result

    async def before_tool(
        self, ctx: InvocationContext, agent_name: str, tool_name: str, arguments: dict[str, Any]
    ) -> object | None:
        result: object | None = await self._hook("before_tool", agent_name, tool_name, arguments)
        return result

    async def after_tool(
        self,
        ctx: InvocationContext,
        agent_name: str,
        tool_name: str,
        arguments: dict[str, Any],
        result: object,
    ) -> object | None:
        replaced: object | None = await self._hook(
            "after_tool", agent_name, tool_name, arguments, result
        )
        return replaced

    async def close(self) -> None:
        await self._hook("close")


async def call(manager: PluginManager, hook: str) -> Any:
    """Call ``hook`` on ``manager`` with typical arguments."""
    if hook == "on_user_message":
        return await manager.on_user_message(CTX, Message.user("hi"))
    if hook == "before_run":
        return await manager.before_run(CTX)
    if hook == "on_event":
        return await manager.on_event(CTX, AgentEvent.from_message(Message.assistant("x")))
    if hook == "after_run":
        return await manager.after_run(CTX)
    if hook == "before_agent":
        return await manager.before_agent(CTX, "helper")
    if hook == "after_agent":
        return await manager.after_agent(CTX, "helper")
    if hook == "before_model":
        return await manager.before_model(CTX, "helper", ModelRequest([Message.user("hi")]))
    if hook == "after_model":
        return await manager.after_model(CTX, "helper", Message.assistant("reply"))
    if hook == "before_tool":
        return await manager.before_tool(CTX, "helper", "add", {"a": 1})
    if hook == "after_tool":
        return await manager.after_tool(CTX, "helper", "add", {"a": 1}, 2)
    assert hook == "close"
    return await manager.aclose()


RETURNING_HOOKS = [h for h in HOOK_NAMES if h not in ("after_run", "on_event")]


# -- order and first-non-None-wins --------------------------------------------------------


@pytest.mark.parametrize("hook", [*HOOK_NAMES, "close"])
async def test_hooks_run_in_the_order_given(hook: str) -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    manager = PluginManager([Recorder(n, log) for n in ("a", "b", "c")])
    await call(manager, hook)
    assert [(name, h) for name, h, _ in log] == [("a", hook), ("b", hook), ("c", hook)]


@pytest.mark.parametrize("hook", RETURNING_HOOKS)
async def test_first_non_none_wins_and_later_plugins_are_not_called(hook: str) -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    first, second = Message.assistant("first"), Message.assistant("second")
    manager = PluginManager(
        [
            Recorder("none", log),
            Recorder("first", log, returns={hook: first}),
            Recorder("second", log, returns={hook: second}),
        ]
    )
    assert await call(manager, hook) is first
    assert [name for name, _, _ in log] == ["none", "first"]


@pytest.mark.parametrize("hook", RETURNING_HOOKS)
async def test_returning_hooks_give_none_when_no_plugin_returns(hook: str) -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    manager = PluginManager([Recorder("a", log), Recorder("b", log)])
    assert await call(manager, hook) is None
    assert len(log) == 2


async def test_tool_hooks_may_return_any_value_even_falsy() -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    manager = PluginManager(
        [Recorder("zero", log, returns={"before_tool": 0}), Recorder("later", log)]
    )
    assert await manager.before_tool(CTX, "helper", "add", {}) == 0
    assert [name for name, _, _ in log] == ["zero"]


async def test_on_user_message_passes_the_original_message_to_each_plugin() -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []

    class Observer(Plugin):
        async def on_user_message(self, ctx: InvocationContext, message: Message) -> Message | None:
            log.append((self.name, "on_user_message", (message,)))
            return None

    original = Message.user("hi")
    manager = PluginManager([Observer("one"), Observer("two")])
    assert await manager.on_user_message(CTX, original) is None
    assert [args[0] for _, _, args in log] == [original, original]


async def test_hooks_receive_the_context_and_arguments() -> None:
    seen: list[object] = []

    class Spy(Plugin):
        async def before_tool(
            self,
            ctx: InvocationContext,
            agent_name: str,
            tool_name: str,
            arguments: dict[str, Any],
        ) -> object | None:
            seen.extend([ctx, agent_name, tool_name, arguments])
            arguments["a"] = 2  # a hook may modify the arguments in place
            return None

    arguments = {"a": 1}
    await PluginManager([Spy()]).before_tool(CTX, "helper", "add", arguments)
    assert seen == [CTX, "helper", "add", {"a": 2}]
    assert arguments == {"a": 2}


# -- on_event -------------------------------------------------------------------------------


class Suffix(Plugin):
    def __init__(self, suffix: str) -> None:
        super().__init__(f"suffix{suffix}")
        self.suffix = suffix

    async def on_event(self, ctx: InvocationContext, event: AgentEvent) -> AgentEvent | None:
        assert event.message is not None
        return AgentEvent.from_message(Message.assistant(event.message.content + self.suffix))


async def test_on_event_chains_each_plugin_gets_the_previous_replacement() -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    manager = PluginManager([Suffix("1"), Recorder("keep", log), Suffix("2")])
    result = await manager.on_event(CTX, AgentEvent.from_message(Message.assistant("x")))
    assert result.message is not None and result.message.content == "x12"
    (event,) = log[0][2]
    assert event.message.content == "x1"


async def test_on_event_without_replacement_returns_the_same_event() -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    event = AgentEvent.from_message(Message.assistant("x"))
    assert await PluginManager([Recorder("a", log)]).on_event(CTX, event) is event
    assert await PluginManager([]).on_event(CTX, event) is event


async def test_on_event_raising_rejects_the_event() -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    manager = PluginManager(
        [
            Suffix("1"),
            Recorder("guard", log, raises={"on_event": ValueError("forbidden content")}),
            Recorder("later", log),
        ]
    )
    with pytest.raises(PluginError) as info:
        await manager.on_event(CTX, AgentEvent.from_message(Message.assistant("x")))
    assert info.value.plugin_name == "guard"
    assert info.value.hook == "on_event"
    assert isinstance(info.value.__cause__, ValueError)
    assert [name for name, _, _ in log] == ["guard"]


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("hook", [h for h in HOOK_NAMES if h != "after_run"])
async def test_a_raising_hook_stops_the_hook_and_names_plugin_and_hook(hook: str) -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    boom = RuntimeError("disk full")
    manager = PluginManager(
        [Recorder("ok", log), Recorder("broken", log, raises={hook: boom}), Recorder("late", log)]
    )
    with pytest.raises(PluginError) as info:
        await call(manager, hook)
    err = info.value
    assert isinstance(err, RelayKitError)
    assert (err.plugin_name, err.hook) == ("broken", hook)
    assert err.__cause__ is boom
    assert "'broken'" in str(err) and hook in str(err) and "disk full" in str(err)
    assert [name for name, _, _ in log] == ["ok", "broken"]


async def test_after_run_runs_every_plugin_and_raises_the_first_failure() -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    first, second = ValueError("first"), KeyError("second")
    manager = PluginManager(
        [
            Recorder("a", log, raises={"after_run": first}),
            Recorder("b", log),
            Recorder("c", log, raises={"after_run": second}),
            Recorder("d", log),
        ]
    )
    with pytest.raises(PluginError) as info:
        await manager.after_run(CTX)
    assert [name for name, _, _ in log] == ["a", "b", "c", "d"]
    assert (info.value.plugin_name, info.value.hook) == ("a", "after_run")
    assert info.value.__cause__ is first


async def test_a_base_exception_that_is_not_an_outside_cancellation_is_wrapped() -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    # A CancelledError while the current task is not being cancelled: the hook's own ending.
    manager = PluginManager([Recorder("p", log, raises={"before_run": asyncio.CancelledError()})])
    with pytest.raises(PluginError) as info:
        await manager.before_run(CTX)
    assert isinstance(info.value.__cause__, asyncio.CancelledError)


@pytest.mark.parametrize("hook", [*HOOK_NAMES, "close"])
async def test_outside_cancellation_propagates_unchanged(hook: str) -> None:
    started = asyncio.Event()
    later: list[str] = []

    class Blocking(Plugin):
        pass

    async def block(*args: Any) -> None:
        started.set()
        await asyncio.Event().wait()

    class Later(Plugin):
        pass

    async def record(*args: Any) -> None:
        later.append(hook)

    blocking, late = Blocking(), Later()
    setattr(blocking, hook, block)
    setattr(late, hook, record)
    manager = PluginManager([blocking, late])
    task = asyncio.ensure_future(call(manager, hook))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Closing goes on after a cancellation (the remaining plugins are released); the hooks stop.
    assert later == (["close"] if hook == "close" else [])


async def test_keyboard_interrupt_propagates_unchanged() -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    manager = PluginManager(
        [Recorder("p", log, raises={"after_run": KeyboardInterrupt()}), Recorder("q", log)]
    )
    with pytest.raises(KeyboardInterrupt):
        await manager.after_run(CTX)
    assert [name for name, _, _ in log] == ["p"]


# -- construction ---------------------------------------------------------------------------


def test_default_name_is_the_class_name() -> None:
    class Audit(Plugin):
        pass

    assert Audit().name == "Audit"
    assert Audit(name="audit-2").name == "audit-2"
    assert Plugin().name == "Plugin"


def test_duplicate_names_are_refused_naming_the_duplicate() -> None:
    class Audit(Plugin):
        pass

    with pytest.raises(ConfigurationError, match="'Audit'"):
        PluginManager([Audit(), Plugin("x"), Audit()])
    PluginManager([Audit(), Audit(name="audit-2")])


def test_a_non_plugin_is_refused() -> None:
    class Lookalike:
        name = "lookalike"

        async def before_run(self, ctx: InvocationContext) -> None:
            return None

    with pytest.raises(ConfigurationError, match="Lookalike"):
        PluginManager([Lookalike()])  # type: ignore[list-item]


def test_a_plugin_without_a_name_is_refused() -> None:
    class Forgetful(Plugin):
        def __init__(self) -> None:  # does not call Plugin.__init__
            pass

    with pytest.raises(ConfigurationError, match="no name"):
        PluginManager([Forgetful()])


def test_a_hook_that_is_not_async_is_refused() -> None:
    class Sync(Plugin):
        def before_run(self, ctx: InvocationContext) -> None:  # type: ignore[override]
            return None

    with pytest.raises(ConfigurationError, match=r"'Sync'.*before_run.*async"):
        PluginManager([Sync()])


def test_a_hook_replaced_by_a_non_callable_is_refused() -> None:
    class Broken(Plugin):
        on_event = None  # type: ignore[assignment]

    with pytest.raises(ConfigurationError, match="on_event"):
        PluginManager([Broken()])


# -- has() ----------------------------------------------------------------------------------


def test_has_tells_which_hooks_some_plugin_overrides() -> None:
    class EventsOnly(Plugin):
        async def on_event(self, ctx: InvocationContext, event: AgentEvent) -> AgentEvent | None:
            return None

    class Inherits(EventsOnly):
        pass

    manager = PluginManager([EventsOnly(), Inherits(name="child")])
    assert manager.has("on_event")
    assert [h for h in HOOK_NAMES if manager.has(h)] == ["on_event"]
    assert not manager.has("close")
    assert not PluginManager([]).has("on_event")
    with pytest.raises(ValueError, match="unknown plugin hook 'on_evnt'"):
        manager.has("on_evnt")


async def test_plugins_that_do_not_override_a_hook_are_not_called() -> None:
    called: list[str] = []

    class EventsOnly(Plugin):
        async def on_event(self, ctx: InvocationContext, event: AgentEvent) -> AgentEvent | None:
            called.append(self.name)
            return None

        def __getattribute__(self, name: str) -> Any:
            if name in HOOK_NAMES and name != "on_event":
                raise AssertionError(f"{name} looked up")
            return super().__getattribute__(name)

    manager = PluginManager([EventsOnly()])
    for hook in HOOK_NAMES:
        await call(manager, hook)
    assert called == ["EventsOnly"]


def test_manager_exposes_the_plugins_in_order() -> None:
    plugins = [Plugin("a"), Plugin("b")]
    manager = PluginManager(plugins)
    assert manager.plugins == tuple(plugins)
    assert len(manager) == 2 and manager and not PluginManager([])
    assert "'a'" in repr(manager)


# -- aclose ---------------------------------------------------------------------------------


async def test_aclose_closes_every_plugin_and_raises_the_first_failure() -> None:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    first = OSError("socket")
    manager = PluginManager(
        [
            Recorder("a", log),
            Recorder("b", log, raises={"close": first}),
            Plugin("no-close"),
            Recorder("c", log, raises={"close": ValueError("later")}),
            Recorder("d", log),
        ]
    )
    with pytest.raises(PluginError) as info:
        await manager.aclose()
    assert [name for name, _, _ in log] == ["a", "b", "c", "d"]
    assert (info.value.plugin_name, info.value.hook) == ("b", "close")
    assert info.value.__cause__ is first


async def test_aclose_with_no_close_overrides_does_nothing() -> None:
    await PluginManager([Plugin("a"), Plugin("b")]).aclose()


def test_invocation_context_fields() -> None:
    session = object()
    ctx = InvocationContext("app", None, None, "inv-2", session=session)
    assert (ctx.app_name, ctx.user_id, ctx.session_id, ctx.invocation_id) == (
        "app",
        None,
        None,
        "inv-2",
    )
    assert ctx.session is session
    assert InvocationContext("app", "u", "s", "i").session is None
