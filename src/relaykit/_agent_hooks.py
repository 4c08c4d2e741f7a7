"""The plugins' agent hooks as flow agents run them (``before_agent``, ``after_agent``).

A flow agent runs them around its agent when ``RunOptions.invocation`` is set (D12, D25):

* ``before_agent`` returning a message: that message is the agent's whole answer (the agent
  does not run, and ``after_agent`` does not run either);
* ``after_agent`` runs once the agent completed -- not after an interrupt or an error -- and its
  message is delivered as the agent's event after the agent's own events, before a transfer's
  target runs; it never counts as the agent's last event;
* a hook that raises (``PluginError``) is the agent failing: the agent's error event.

>>> import asyncio
>>> from relaykit.plugins import InvocationContext, Plugin, PluginManager
>>> from relaykit._invocation import Invocation
>>> class Closed(Plugin):
...     async def before_agent(self, ctx, agent_name):
...         return Message.assistant(f"{agent_name} is closed today")
>>> inv = Invocation(InvocationContext("shop", "ada", "s1", "inv-1"), PluginManager([Closed()]))
>>> asyncio.run(before_agent(inv, "billing")).content
'billing is closed today'
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from relaykit._aio import ended_with, must_propagate
from relaykit.errors import PluginError
from relaykit.events import AgentEvent, RunPath
from relaykit.messages import Message

if TYPE_CHECKING:
    from relaykit._invocation import Invocation

__all__ = [
    "HeldExit",
    "after_agent_event",
    "answer",
    "before_agent",
    "checked_message",
    "ended_in_failure",
]


class HeldExit:
    """An agent's own exit event, held while its ``after_agent`` hook may still add a message
    (delivered before the exit, which stays the agent's last event). Stands in for the
    ``TrailingTransfers`` in ``FlowAgent._drive``: ``holding`` keeps the loop off its fast
    path, so the next own event, if any, delivers the exit first.

    >>> HeldExit(AgentEvent.exit()).holding
    True
    """

    __slots__ = ("event",)

    holding = True
    events: tuple[AgentEvent, ...] = ()

    def __init__(self, event: AgentEvent) -> None:
        self.event = event


def checked_message(hook: str, agent_name: str, value: object) -> Message | None:
    """``value`` when it is a ``Message`` or None, else the ``PluginError`` saying so.

    >>> checked_message("after_model", "helper", None) is None
    True
    >>> try:
    ...     checked_message("after_model", "helper", "hi")
    ... except PluginError as exc:
    ...     print(exc.hook, str(exc).split(":")[0])
    after_model a plugin's after_model returned a str for agent 'helper'

    Args:
        hook: the hook that returned ``value``.
        agent_name: the agent it was called for.
        value: what the hook returned.
    """
    if value is None or isinstance(value, Message):
        return value
    raise PluginError(
        f"a plugin's {hook} returned a {type(value).__name__} for agent '{agent_name}': "
        "it must return a relaykit.Message or None",
        hook=hook,
    )


async def before_agent(inv: Invocation, agent_name: str) -> Message | None:
    """The message a ``before_agent`` hook answers for ``agent_name`` with, or None.

    Args:
        inv: the invocation (its plugins and context).
        agent_name: the agent about to run.

    Raises:
        PluginError: a hook raised, or returned something other than a message.
    """
    plugins = inv.plugins
    if not plugins.has("before_agent"):
        return None
    return checked_message(
        "before_agent", agent_name, await plugins.before_agent(inv.context, agent_name)
    )


async def answer(message: Message) -> AsyncIterator[AgentEvent]:
    """A ``before_agent`` hook's message as the agent's only event (its flow agent stamps it).

    >>> import asyncio
    >>> async def first():
    ...     return [ev.message.content async for ev in answer(Message.assistant("closed"))]
    >>> asyncio.run(first())
    ['closed']
    """
    yield AgentEvent.from_message(message)


async def after_agent_event(
    inv: Invocation, agent_name: str, run_path: RunPath
) -> AgentEvent | None:
    """The event ``after_agent`` adds for ``agent_name``, stamped with ``run_path``: the hook's
    message, or the agent's error event when a hook raised; None when no hook returns one.

    Args:
        inv: the invocation (its plugins and context).
        agent_name: the agent that completed.
        run_path: the agent's run path (its flow agent's).
    """
    try:
        message = checked_message(
            "after_agent", agent_name, await inv.plugins.after_agent(inv.context, agent_name)
        )
    except BaseException as exc:
        if must_propagate(exc):
            raise
        return AgentEvent(agent_name, run_path, error=ended_with(exc, f"agent '{agent_name}'"))
    if message is None:
        return None
    return AgentEvent(agent_name, run_path, AgentEvent.from_message(message).output)


async def ended_in_failure(last: AgentEvent | None) -> bool:
    """True when a stream ended in an interrupt or an error (an error event, or a message
    stream that failed): ``after_agent`` does not run then. An exit is not a failure.

    >>> import asyncio
    >>> asyncio.run(ended_in_failure(AgentEvent.exit())), asyncio.run(ended_in_failure(None))
    (False, False)

    Args:
        last: the stream's last event (None: it yielded nothing).
    """
    if last is None:
        return False
    if last.error is not None:
        return True
    a = last.action
    if a is not None and a.interrupted is not None:
        return True
    out = last.output
    if out is not None and out.stream is not None:
        try:
            await out.stream.collect()
        except Exception:
            return True
    return False
