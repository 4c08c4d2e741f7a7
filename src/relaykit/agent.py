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
    """An agent: a name, a description and ``run``, an async generator of events."""

    name: str
    description: str

    def run(self, ctx: RunContext, input: AgentInput, **options: Any) -> AsyncIterator[AgentEvent]:
        """Run the agent; normally an ``async def`` generator."""
        ...


@runtime_checkable
class ResumableAgent(Agent, Protocol):
    """An agent that can continue from an interrupt."""

    def resume(self, ctx: RunContext, info: ResumeInfo,
               **options: Any) -> AsyncIterator[AgentEvent]:
        """Continue after an interrupt; ``info`` says what this agent saved and received."""
        ...


class BaseAgent:
    """A convenient base for custom agents: stores ``name`` and ``description``.

    >>> class Hello(BaseAgent):
    ...     async def run(self, ctx, input, **options):
    ...         yield AgentEvent.from_message(Message.assistant("hello"))
    >>> Hello("greeter").name
    'greeter'
    """

    def __init__(self, name: str, description: str = "") -> None:
        if not name:
            raise ValueError("an agent needs a non-empty name")
        self.name = name
        self.description = description

    def run(self, ctx: RunContext, input: AgentInput, **options: Any) -> AsyncIterator[AgentEvent]:
        """Override with an ``async def`` generator."""
        raise NotImplementedError(f"{type(self).__name__}.run is not implemented")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
