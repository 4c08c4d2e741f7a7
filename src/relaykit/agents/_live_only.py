"""The chat model of a ``ChatModelAgent`` built with only a ``live_model``."""

from __future__ import annotations

from relaykit.errors import ConfigurationError
from relaykit.messages import Message, MessageStream
from relaykit.models.base import ModelRequest

__all__ = ["LiveOnlyModel"]


class LiveOnlyModel:
    """Stands in for the chat model of an agent that only has a ``live_model``: every call
    fails with a ``ConfigurationError`` naming the agent, so a ``run`` reaching it ends with
    that agent's error event.

    >>> import asyncio
    >>> asyncio.run(LiveOnlyModel("desk").generate(ModelRequest([])))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    relaykit.errors.ConfigurationError: agent 'desk' has only a live_model: ...
    """

    def __init__(self, agent_name: str) -> None:
        #: The agent this model stands in for.
        self.agent_name = agent_name
        #: The model's name, in error messages.
        self.name = "live-only"

    def _error(self) -> ConfigurationError:
        return ConfigurationError(
            f"agent {self.agent_name!r} has only a live_model: it runs in Runner.run_live, "
            "not in run, query or invoke (give it a model=... to run it there too)"
        )

    async def generate(self, request: ModelRequest) -> Message:
        """Fail: the agent has no chat model."""
        raise self._error()

    def stream(self, request: ModelRequest) -> MessageStream:
        """Fail: the agent has no chat model."""
        return MessageStream.failed([], self._error())
