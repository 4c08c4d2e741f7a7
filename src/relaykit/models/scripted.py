"""ScriptedModel: a deterministic ChatModel for tests and offline demos."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator

from relaykit.errors import ModelError
from relaykit.messages import Message, MessageStream, ToolCall
from relaykit.models.base import ModelRequest

__all__ = ["ScriptedModel", "ScriptedResponse"]

ScriptedResponse = Message | BaseException | Callable[[ModelRequest], Message]
"""One item of a script: a reply, an exception to raise, or a function making the reply."""


class ScriptedModel:
    """A real ``ChatModel`` that answers from a script.

    ``responses`` is consumed one item per call: a ``Message`` is returned, an exception is
    raised, a callable ``(request) -> Message`` is called. ``requests`` records every request.

    >>> import asyncio
    >>> m = ScriptedModel([Message.assistant("hi")])
    >>> asyncio.run(m.generate(ModelRequest([Message.user("hello")]))).content
    'hi'
    >>> m.requests[0].messages[0].content
    'hello'

    Args:
        responses: the script, consumed one item per call (an iterator may be endless); a
            call after its end raises ``ModelError``.
        name: the model's name, in error messages.
        record_requests: keep a copy of every request in ``requests``.
    """

    def __init__(
        self,
        responses: Iterable[ScriptedResponse],
        *,
        name: str = "scripted",
        record_requests: bool = True,
    ) -> None:
        self._responses: Iterator[ScriptedResponse] = iter(responses)
        #: The model's name.
        self.name = name
        #: A copy of every request received, in order (when ``record_requests``).
        self.requests: list[ModelRequest] = []
        self._record = record_requests

    def _next(self, request: ModelRequest) -> Message:
        if self._record:
            # Snapshot: the caller may keep appending to its message list.
            self.requests.append(
                ModelRequest(list(request.messages), list(request.tools), dict(request.options))
            )
        try:
            item = next(self._responses)
        except StopIteration:
            raise ModelError(
                f"ScriptedModel {self.name!r} ran out of responses after "
                f"{len(self.requests)} call(s); add more responses to its script",
                provider="scripted",
            ) from None
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, Message):
            return item
        return item(request)

    async def generate(self, request: ModelRequest) -> Message:
        """Return the next scripted message."""
        return self._next(request)

    def stream(self, request: ModelRequest) -> MessageStream:
        """Yield the next scripted message in chunks: text by words, tool calls as fragments."""
        return MessageStream(self._chunks(request))

    async def _chunks(self, request: ModelRequest) -> AsyncIterator[Message]:
        msg = self._next(request)
        for chunk in split_into_chunks(msg):
            yield chunk


def split_into_chunks(msg: Message) -> list[Message]:
    """Split a message the way a provider streams it (used by ScriptedModel.stream).

    >>> [c.content for c in split_into_chunks(Message.assistant("Hello there"))]
    ['Hello ', 'there']
    """
    chunks: list[Message] = []
    words = msg.content.split(" ") if msg.content else []
    for i, word in enumerate(words):
        text = word if i == len(words) - 1 else word + " "
        chunks.append(Message(msg.role, text, name=msg.name))
    for idx, call in enumerate(msg.tool_calls):
        args = call.arguments
        half = len(args) // 2
        first = ToolCall(call.id, call.name, args[:half], idx)
        chunks.append(Message(msg.role, tool_calls=[first]))
        chunks.append(Message(msg.role, tool_calls=[ToolCall("", "", args[half:], idx)]))
    if not chunks:
        chunks.append(Message(msg.role, "", name=msg.name))
    if msg.metadata:
        chunks[-1].metadata = dict(msg.metadata)
    return chunks
