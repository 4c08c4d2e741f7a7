"""Agent protocols, the agent input and a base class for custom agents."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from relaykit.codec import register_type
from relaykit.messages import Message

if TYPE_CHECKING:
    from relaykit.context import RunContext
    from relaykit.events import AgentEvent
    from relaykit.interrupts import ResumeInfo

__all__ = ["Agent", "AgentInput", "BaseAgent", "ResumableAgent"]


@register_type("relaykit.AgentInput")
@dataclass
class AgentInput:
    """The messages an agent is asked to respond to, and whether to stream.

    The framework builds a fresh ``messages`` list for every agent run: the receiving agent
    owns it and may modify it. A flow agent builds that list when ``messages`` is first read,
    so an agent that decides from session values alone never pays for its history.
    """

    messages: list[Message] = field(default_factory=list)
    enable_streaming: bool = False

    @classmethod
    def deferred(cls, build: Callable[[], list[Message]],
                 enable_streaming: bool = False) -> AgentInput:
        """An input whose messages ``build()`` makes on first access."""
        new = cls.__new__(cls)
        new.__dict__["_build"] = build
        new.enable_streaming = enable_streaming
        return new


def _get_messages(self: AgentInput) -> list[Message]:
    d = self.__dict__
    messages: list[Message] | None = d.get("_messages")
    if messages is None:
        build = d.pop("_build", None)
        messages = d["_messages"] = build() if build is not None else []
    return messages


def _set_messages(self: AgentInput, value: list[Message]) -> None:
    self.__dict__["_messages"] = value
    self.__dict__.pop("_build", None)


# ``messages`` is a dataclass field (init, repr, eq, replace, the codec) read through a property.
setattr(AgentInput, "messages", property(_get_messages, _set_messages))  # noqa: B010


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
