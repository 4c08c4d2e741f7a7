"""The ChatModel protocol and the request/tool-spec types every model adapter speaks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from relaykit.messages import Message, MessageStream

__all__ = ["ChatModel", "ModelRequest", "ToolSpec", "usage_metadata"]


@dataclass(slots=True)
class ToolSpec:
    """A tool as a model sees it: name, description and a JSON schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


@dataclass(slots=True)
class ModelRequest:
    """What an agent sends to a model: the messages (system first, if any) and the tools.

    A request is valid for the duration of the call: the agent keeps appending to
    ``messages`` afterwards, so a model copies whatever it keeps (ScriptedModel does).
    """

    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class ChatModel(Protocol):
    """A chat model. ``generate`` returns one message; ``stream`` returns its chunks.

    Responses carry token usage as ``Message.metadata["usage"] = {"input_tokens": int,
    "output_tokens": int}`` when known. Cancelling the awaiting task cancels the call.
    """

    async def generate(self, request: ModelRequest) -> Message: ...

    def stream(self, request: ModelRequest) -> MessageStream: ...


def usage_metadata(input_tokens: int | None, output_tokens: int | None) -> dict[str, Any]:
    """The normalised ``metadata`` entry for token usage ({} when unknown)."""
    if input_tokens is None and output_tokens is None:
        return {}
    return {"usage": {"input_tokens": int(input_tokens or 0),
                      "output_tokens": int(output_tokens or 0)}}
