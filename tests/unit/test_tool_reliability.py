"""Unit tests: ``@rk.tool`` functions under hostile conditions — sync functions run in worker
threads (with the caller's context variables), endings that are not exceptions, and the
registry of built-in tools allowed to carry reserved names (D24)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

import relaykit as rk
from relaykit.tools import RESERVED_TOOL_NAMES, is_builtin_tool, register_builtin_tool


def tool_ctx(name: str = "t", call_id: str = "call_1") -> rk.ToolContext:
    return rk.ToolContext(rk.RunContext.new(), name, call_id)


TENANT: contextvars.ContextVar[str] = contextvars.ContextVar("TENANT", default="none")


async def test_a_sync_function_runs_in_a_worker_thread_and_an_async_one_on_the_loop() -> None:
    threads: dict[str, threading.Thread] = {}

    @rk.tool
    def sync_probe() -> str:
        threads["sync"] = threading.current_thread()
        return "sync"

    @rk.tool
    async def async_probe() -> str:
        threads["async"] = threading.current_thread()
        return "async"

    assert await sync_probe.call(tool_ctx(), {}) == "sync"
    assert await async_probe.call(tool_ctx(), {}) == "async"
    assert threads["async"] is threading.current_thread()
    assert threads["sync"] is not threading.current_thread()


async def test_two_sync_calls_run_at_the_same_time() -> None:
    """Each call waits at a barrier for the other: they only both finish if they overlap."""
    barrier = threading.Barrier(2, timeout=5)

    @rk.tool
    def meet(name: str) -> str:
        barrier.wait()
        return f"{name} met"

    results = await asyncio.gather(
        meet.call(tool_ctx(), {"name": "a"}), meet.call(tool_ctx(), {"name": "b"})
    )
    assert results == ["a met", "b met"]


async def test_a_blocking_sync_function_leaves_the_event_loop_free() -> None:
    """The loop sets the event the function blocks on: inline, this would never finish."""
    unblocked = threading.Event()

    @rk.tool
    def blocked() -> bool:
        return unblocked.wait(timeout=5)

    call = asyncio.ensure_future(blocked.call(tool_ctx(), {}))
    await asyncio.sleep(0)
    unblocked.set()
    assert await call is True


async def test_context_variables_are_copied_into_the_worker_thread() -> None:
    """The caller's values are visible; a value the function sets stays in its copy."""

    @rk.tool
    def tenant() -> str:
        seen = TENANT.get()
        TENANT.set("changed in the tool")
        return seen

    token = TENANT.set("acme")
    try:
        assert await tenant.call(tool_ctx(), {}) == "acme"
        assert TENANT.get() == "acme"
    finally:
        TENANT.reset(token)


async def test_tool_context_is_passed_to_a_sync_function_in_its_thread() -> None:
    @rk.tool
    def act(ctx: rk.ToolContext, label: str) -> str:
        ctx.set_action(rk.AgentAction(custom={"label": label}))
        return ctx.tool_call_id

    ctx = tool_ctx("act", "call_7")
    assert await act.call(ctx, {"label": "x"}) == "call_7"
    assert ctx.action == rk.AgentAction(custom={"label": "x"})


async def test_generator_exit_from_a_sync_function_is_raised_by_call() -> None:
    """A ``GeneratorExit`` raised in the worker thread comes out of ``call`` as an ordinary
    raise (the agent turns it into an error event naming the tool)."""

    @rk.tool
    def closes() -> str:
        raise GeneratorExit("closed by the tool")

    with pytest.raises(GeneratorExit, match="closed by the tool"):
        await closes.call(tool_ctx(), {})


async def test_other_endings_of_a_sync_function_propagate_unchanged() -> None:
    class Odd(BaseException):
        pass

    @rk.tool
    def odd() -> str:
        raise Odd("odd")

    @rk.tool
    def fails() -> str:
        raise KeyError("missing")

    with pytest.raises(Odd):
        await odd.call(tool_ctx(), {})
    with pytest.raises(KeyError):
        await fails.call(tool_ctx(), {})


async def test_arguments_are_validated_before_a_thread_is_used() -> None:
    """A bad argument is a ToolError raised on the loop; the function never runs."""
    ran: list[int] = []

    @rk.tool
    def count(n: int) -> int:
        ran.append(n)
        return n

    with pytest.raises(rk.ToolError, match="count"):
        await count.call(tool_ctx(), {"n": "many"})
    assert ran == []


# -- reserved names and the built-in registry ---------------------------------------------------
def test_reserved_names_are_the_built_in_tools() -> None:
    assert frozenset({"transfer_to_agent", "exit", "exit_loop"}) == RESERVED_TOOL_NAMES


def test_builtin_tools_are_registered_by_identity() -> None:
    class Builtin:
        spec = rk.ToolSpec("exit_loop", "", {"type": "object"})

        async def call(self, ctx: rk.ToolContext, arguments: dict[str, Any]) -> Any:
            return None

        def __eq__(self, other: object) -> bool:  # a look-alike compares equal
            return isinstance(other, Builtin)

        __hash__ = object.__hash__

    registered = Builtin()
    assert register_builtin_tool(registered) is registered
    assert is_builtin_tool(registered)
    assert not is_builtin_tool(Builtin())


async def test_stop_iteration_from_a_sync_function_is_an_error_not_a_hang() -> None:
    """asyncio cannot put a StopIteration into a future: carried out of the thread, it is
    raised as the RuntimeError a coroutine would make of it (the run never hangs)."""

    @rk.tool
    def bad(n: int) -> str:
        """Raises StopIteration."""
        raise StopIteration

    with pytest.raises(RuntimeError, match="raised StopIteration"):
        await asyncio.wait_for(bad.call(tool_ctx(), {"n": 1}), 10)
