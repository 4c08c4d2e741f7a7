"""Agent protocols, the agent input and a base class for custom agents."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from relaykit.context import RunContext
from relaykit.events import AgentEvent, AgentInput
from relaykit.resume import ResumeInfo

__all__ = ["Agent", "AgentInput", "BaseAgent", "ResumableAgent"]


@runtime_checkable
class Agent(Protocol):
    """An agent: a name, a description and ``run``, an async generator of events.

    Any object with these three members is an agent (``BaseAgent`` is a convenient base, not a
    requirement). ``**options`` are per-run options, open-ended: an agent takes the ones it
    knows and passes all of them on to the agents it runs.

    >>> import relaykit as rk
    >>> class Echo:
    ...     name, description = "echo", "repeats the last message"
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.AgentEvent.from_message(rk.Message.assistant(input.messages[-1].content))
    >>> isinstance(Echo(), rk.Agent)
    True
    """

    #: Unique in its tree: run paths, transfers and interrupt addresses name agents by it.
    name: str
    #: What the agent does: an LLM agent that may transfer to it reads this.
    description: str

    def run(self, ctx: RunContext, input: AgentInput, **options: Any) -> AsyncIterator[AgentEvent]:
        """Run the agent; normally an ``async def`` generator.

        Args:
            ctx: where the agent runs: its run path, the session values, the run history.
            input: the messages to respond to (a fresh list the agent may modify) and whether
                to stream.
            **options: per-run options, passed on unchanged to the agents this one runs.
        """
        ...


@runtime_checkable
class ResumableAgent(Agent, Protocol):
    """An agent that can continue from an interrupt (see docs/interrupts-and-resume.md).

    >>> import asyncio
    >>> import relaykit as rk
    >>> class Approval(rk.BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield rk.interrupt(ctx, "approve the payment?")
    ...     async def resume(self, ctx, info, **options):
    ...         answer = "approved" if info.resume_data else "refused"
    ...         yield rk.AgentEvent.from_message(rk.Message.assistant(answer))
    >>> runner = rk.Runner(Approval("approver"), checkpoint_store=rk.InMemoryCheckpointStore())
    >>> async def main() -> str:
    ...     paused = await runner.invoke("pay 10 EUR")
    ...     point = paused.interrupt.contexts[0].id
    ...     done = await runner.invoke_resume(paused.checkpoint_id, targets={point: True})
    ...     return done.output.content
    >>> asyncio.run(main())
    'approved'
    """

    def resume(
        self, ctx: RunContext, info: ResumeInfo, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        """Continue after an interrupt.

        Args:
            ctx: as for ``run``; ``ctx.root_input`` is the run's input.
            info: what this agent saved (``interrupt_state``) and received (``resume_data``,
                ``is_resume_target``).
            **options: per-run options, as for ``run``.
        """
        ...


class BaseAgent:
    """A convenient base for custom agents: stores ``name`` and ``description``.

    Subclasses override ``run`` with an ``async def`` generator (and add ``resume`` to be a
    ``ResumableAgent``).

    >>> import asyncio
    >>> import relaykit as rk
    >>> class Hello(BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield AgentEvent.from_message(rk.Message.assistant("hello"))
    >>> result = asyncio.run(rk.Runner(Hello("greeter")).invoke("hi"))
    >>> result.output.content
    'hello'

    Args:
        name: the agent's name, unique in its tree; must not be empty.
        description: what the agent does (an LLM agent that may transfer to it reads it).
    """

    def __init__(self, name: str, description: str = "") -> None:
        if not name:
            raise ValueError("an agent needs a non-empty name")
        #: The agent's name (unique in its tree).
        self.name = name
        #: What the agent does.
        self.description = description

    def run(self, ctx: RunContext, input: AgentInput, **options: Any) -> AsyncIterator[AgentEvent]:
        """Override with an ``async def`` generator (see ``Agent.run``)."""
        raise NotImplementedError(f"{type(self).__name__}.run is not implemented")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
