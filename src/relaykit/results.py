"""What ``Runner.invoke`` returns: ``RunResult``, collected from a run's event stream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from relaykit._aio import closing
from relaykit.errors import AgentRunError, RunnerError
from relaykit.events import AgentEvent
from relaykit.messages import Message
from relaykit.resume import InterruptInfo

__all__ = ["RunResult", "collect", "summarize"]


@dataclass(slots=True)
class RunResult:
    """What ``Runner.invoke`` returns: the run's answer and everything it delivered.

    >>> import asyncio
    >>> import relaykit as rk
    >>> agent = rk.ChatModelAgent("greeter", model=rk.ScriptedModel([rk.Message.assistant("Hi")]))
    >>> result = asyncio.run(rk.Runner(agent).invoke("hello"))
    >>> result.output.content, len(result.events), result.interrupt
    ('Hi', 1, None)
    """

    #: The message of the last delivered event that has one (streams are collected).
    output: Message | None
    #: Every event the run delivered, in order.
    events: list[AgentEvent]
    #: Set when the run ended interrupted: answer it with ``invoke_resume``.
    interrupt: InterruptInfo | None = None
    #: Where the interrupted run was saved (``None`` when not interrupted or not saved).
    checkpoint_id: str | None = None
    #: The session the run belongs to (session mode).
    session_id: str | None = None


async def collect(events: AsyncIterator[AgentEvent]) -> RunResult:
    """Iterate ``events`` to the end (closing them) and summarise them (``summarize``)."""
    collected: list[AgentEvent] = []
    async with closing(events):
        async for ev in events:
            collected.append(ev)
    return await summarize(collected)


async def summarize(
    collected: list[AgentEvent], ended_with: InterruptInfo | None = None
) -> RunResult:
    """The result of a run that delivered ``collected``: its output, its interrupt (else
    ``ended_with``, the interrupt the run ended with when its event was delivered elsewhere);
    ``AgentRunError`` when the last agent event is an error and the run did not pause."""
    output: Message | None = None
    interrupt: InterruptInfo | None = None
    last_agent: AgentEvent | None = None
    for ev in collected:
        if ev.output is not None:
            try:
                message = await ev.output.get_message()
            except Exception:
                message = None  # a stream that failed: its error is the run's
            if message is not None:
                output = message
        if ev.action is not None and ev.action.interrupted is not None:
            interrupt = ev.action.interrupted
        if not isinstance(ev.error, RunnerError):
            last_agent = ev
    if interrupt is None:
        interrupt = ended_with
    if last_agent is not None and last_agent.error is not None and interrupt is None:
        err = last_agent.error
        path = tuple(step.agent_name for step in last_agent.run_path)
        raise AgentRunError(
            f"agent {last_agent.agent_name or '?'!r} failed: {type(err).__name__}: {err}",
            agent_name=last_agent.agent_name,
            run_path=path,
        ) from err
    return RunResult(
        output, collected, interrupt, interrupt.checkpoint_id if interrupt is not None else None
    )
