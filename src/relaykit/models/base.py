"""The ChatModel protocol and the request/tool-spec types every model adapter speaks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from relaykit.messages import Message, MessageStream

__all__ = ["ChatModel", "ModelRequest", "ToolSpec", "usage_metadata"]


@dataclass(slots=True)
class ToolSpec:
    """A tool as a model sees it: name, description and a JSON schema of its arguments.

    >>> spec = ToolSpec("get_weather", "The weather in a city.",
    ...                 {"type": "object", "properties": {"city": {"type": "string"}},
    ...                  "required": ["city"]})
    >>> spec.name, spec.parameters["required"]
    ('get_weather', ['city'])
    """

    #: The name the model calls the tool by (providers accept ``^[a-zA-Z0-9_-]{1,64}$``).
    name: str
    #: What the tool does, for the model.
    description: str = ""
    #: The JSON schema of the arguments object (an ``"object"`` schema). Typed as JSON data
    #: of any shape (``object`` values, like OpenAI's ``FunctionParameters``): narrow a value
    #: before using it.
    parameters: dict[str, object] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


@dataclass(slots=True)
class ModelRequest:
    """What an agent sends to a model: the messages (system first, if any) and the tools.

    A request is valid for the duration of the call: the agent keeps appending to
    ``messages`` afterwards, so a model copies whatever it keeps (ScriptedModel does).

    >>> request = ModelRequest([Message.system("Be brief."), Message.user("hi")],
    ...                        options={"temperature": 0.2})
    >>> [m.role for m in request.messages], request.tools
    (['system', 'user'], [])
    """

    #: The conversation, system message first (if any).
    messages: list[Message]
    #: The tools the model may call.
    tools: list[ToolSpec] = field(default_factory=list)
    #: Provider request options (``temperature``, ``max_tokens``...), overriding the model's
    #: defaults. ``Any``: each provider accepts its own options, which adapters pass on as
    #: keyword arguments of the provider's SDK.
    options: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class ChatModel(Protocol):
    """A chat model. ``generate`` returns one message; ``stream`` returns its chunks.

    Responses carry token usage as ``Message.metadata["usage"] = {"input_tokens": int,
    "output_tokens": int}`` when known. Cancelling the awaiting task cancels the call.

    >>> from relaykit.messages import MessageStream
    >>> class Parrot:
    ...     async def generate(self, request: ModelRequest) -> Message:
    ...         return Message.assistant(request.messages[-1].content)
    ...     def stream(self, request: ModelRequest) -> MessageStream:
    ...         return MessageStream.from_list([Message.assistant(request.messages[-1].content)])
    >>> isinstance(Parrot(), ChatModel)
    True
    """

    async def generate(self, request: ModelRequest) -> Message:
        """The model's whole reply to ``request`` (an assistant message)."""
        ...

    def stream(self, request: ModelRequest) -> MessageStream:
        """The model's reply to ``request`` as a stream of chunks. The built-in models start
        the call when the stream is first read; their errors come out of the stream."""
        ...


def usage_metadata(
    input_tokens: int | None, output_tokens: int | None
) -> dict[str, dict[str, int]]:
    """The normalised ``metadata`` entry for token usage ({} when unknown).

    >>> usage_metadata(12, None)
    {'usage': {'input_tokens': 12, 'output_tokens': 0}}
    """
    if input_tokens is None and output_tokens is None:
        return {}
    return {
        "usage": {"input_tokens": int(input_tokens or 0), "output_tokens": int(output_tokens or 0)}
    }
