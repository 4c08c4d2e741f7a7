"""Messages, tool calls and message streams.

A ``MessageStream`` is a lazily-buffered, replayable sequence of message chunks: every reader
(the caller, the run history, the session store) iterates it from the start, the source is read
once, and ``collect()`` concatenates and caches the whole message. An ended stream is saved by the
codec through the adapter registered at the end of this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from relaykit.codec import register_adapter, register_type
from relaykit.errors import RelayKitError, SerializationError, StreamCancelledError

if TYPE_CHECKING:
    from relaykit._cancel import CancelSignal

__all__ = ["Blob", "Message", "MessageStream", "Role", "ToolCall", "concat_messages"]

Role = Literal["system", "user", "assistant", "tool"]


@register_type("relaykit.ToolCall")
@dataclass(slots=True)
class ToolCall:
    """One function call requested by a model.

    ``arguments`` is JSON text. ``index`` is only used to merge streamed fragments.

    >>> ToolCall(id="c1", name="get_weather", arguments='{"city": "Paris"}').name
    'get_weather'
    """

    id: str
    name: str
    arguments: str = ""
    index: int | None = None


@register_type("relaykit.Blob")
@dataclass(slots=True)
class Blob:
    """Inline binary content attached to a message (an image, a PDF...)."""

    mime_type: str
    data: bytes
    name: str | None = None


@register_type("relaykit.Message")
@dataclass(slots=True)
class Message:
    """A chat message.

    >>> Message.user("hi").role
    'user'
    """

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    name: str | None = None
    attachments: list[Blob] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def user(cls, text: str, *, attachments: list[Blob] | None = None) -> Message:
        """A user message."""
        return cls("user", text, [], None, None, None, attachments or [], {})

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message."""
        return cls("system", text)

    @classmethod
    def assistant(cls, text: str = "", tool_calls: list[ToolCall] | None = None) -> Message:
        """An assistant message, optionally with tool calls."""
        return cls("assistant", text, tool_calls or [])

    @classmethod
    def tool(
        cls, content: str, *, tool_call_id: str | None = None, tool_name: str | None = None
    ) -> Message:
        """A tool result answering the call ``tool_call_id``."""
        return cls("tool", content, [], tool_call_id, tool_name)


def concat_messages(chunks: Iterable[Message]) -> Message:
    """Concatenate streamed chunks into one message.

    Contents are joined; tool-call fragments are merged by ``index`` when given, else by ``id``
    (a fragment without id continues the previous call); metadata is merged, later keys win.
    """
    items = list(chunks)
    if not items:
        raise ValueError("cannot concatenate an empty list of message chunks")
    if len(items) == 1:
        return items[0]
    first = items[0]
    content: list[str] = []
    calls: list[ToolCall] = []
    by_key: dict[object, ToolCall] = {}
    attachments: list[Blob] = []
    metadata: dict[str, Any] = {}
    name = tool_call_id = tool_name = None
    for chunk in items:
        if chunk.content:
            content.append(chunk.content)
        name = name or chunk.name
        tool_call_id = tool_call_id or chunk.tool_call_id
        tool_name = tool_name or chunk.tool_name
        attachments.extend(chunk.attachments)
        metadata.update(chunk.metadata)
        for frag in chunk.tool_calls:
            key: object
            if frag.index is not None:
                key = ("index", frag.index)
            elif frag.id:
                key = ("id", frag.id)
            else:
                key = None
            target = by_key.get(key) if key is not None else (calls[-1] if calls else None)
            if target is None:
                target = ToolCall(frag.id, frag.name, frag.arguments, frag.index)
                calls.append(target)
                if key is not None:
                    by_key[key] = target
                if frag.id:
                    by_key.setdefault(("id", frag.id), target)
                continue
            if frag.id and not target.id:
                target.id = frag.id
            if frag.name and not target.name:
                target.name = frag.name
            target.arguments += frag.arguments
    for call in calls:
        call.index = None
    return Message(
        first.role, "".join(content), calls, tool_call_id, tool_name, name, attachments, metadata
    )


class _Source:
    """The shared buffer behind a stream and all its readers."""

    __slots__ = ("chunks", "cut", "done", "error", "iterator", "lock", "message")

    def __init__(self, iterator: AsyncIterator[Message] | None, chunks: list[Message]) -> None:
        self.iterator = iterator
        self.chunks = chunks
        self.done = iterator is None
        self.error: BaseException | None = None
        self.lock: asyncio.Lock | None = None
        self.message: Message | None = None
        # The run's cancel signal, for a model reply an agent yields: an immediate cancel cuts
        # the stream (StreamCancelledError, D26). None: nothing cuts it.
        self.cut: CancelSignal | None = None

    async def pull(self, have: int) -> bool:
        """Make sure chunk number ``have`` is buffered; False when the stream ended before it."""
        if self.lock is None:
            self.lock = asyncio.Lock()
        async with self.lock:
            if have < len(self.chunks):
                return True
            if self.done:
                return False
            assert self.iterator is not None
            try:
                cut = self.cut
                if cut is None:
                    chunk = await anext(self.iterator)
                else:
                    chunk = await cut.next_chunk(self.iterator)
            except StopAsyncIteration:
                self._finish()
                return False
            except BaseException as exc:
                # A reader cancelled mid-read leaves the source unusable: the other readers
                # must not mistake that for a clean end.
                self.error = (
                    exc
                    if isinstance(exc, Exception)
                    else RelayKitError("the message stream was cancelled while it was being read")
                )
                self._finish()
                raise
            self.chunks.append(chunk)
            return True

    def _finish(self) -> None:
        # A source that ended or failed needs no close call; an abandoned one is closed by
        # MessageStream.aclose.
        self.done = True
        self.iterator = None


class MessageStream:
    """An async iterable of ``Message`` chunks that several consumers can read in full.

    >>> import asyncio
    >>> s = MessageStream.from_list([Message.assistant("Hel"), Message.assistant("lo")])
    >>> asyncio.run(s.collect()).content
    'Hello'
    """

    __slots__ = ("_source",)

    def __init__(self, source: AsyncIterable[Message]) -> None:
        self._source = _Source(aiter(source), [])

    @classmethod
    def from_list(cls, chunks: Iterable[Message]) -> MessageStream:
        """A stream over chunks that are already known."""
        stream = cls.__new__(cls)
        stream._source = _Source(None, list(chunks))
        return stream

    @classmethod
    def failed(cls, chunks: Iterable[Message], error: BaseException) -> MessageStream:
        """A finished stream whose reading ends with ``error`` after ``chunks``."""
        stream = cls.from_list(chunks)
        stream._source.error = error
        return stream

    @property
    def done(self) -> bool:
        """True once the source has been read to its end (or its error)."""
        return self._source.done

    @property
    def error(self) -> BaseException | None:
        """The error the source ended with, once known."""
        return self._source.error

    @property
    def chunks(self) -> list[Message]:
        """The chunks buffered so far (a copy)."""
        return list(self._source.chunks)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._read()

    async def _read(self) -> AsyncIterator[Message]:
        src = self._source
        i = 0
        while True:
            if i < len(src.chunks):
                yield src.chunks[i]
                i += 1
                continue
            if src.done:
                if src.error is not None:
                    raise src.error
                return
            if not await src.pull(i):
                if src.error is not None:
                    raise src.error
                return

    async def collect(self) -> Message:
        """Read the whole stream and return the concatenated message (cached).

        Raises the error the stream ended with, if any, and ``ValueError`` for an empty stream.
        """
        src = self._source
        if src.message is not None:
            return src.message
        i = len(src.chunks)
        while not src.done:
            if not await src.pull(i):
                break
            i += 1
        if src.error is not None:
            raise src.error
        if not src.chunks:
            raise ValueError("no messages in the message stream")
        src.message = concat_messages(src.chunks)
        return src.message

    async def aclose(self) -> None:
        """Stop reading the source (a producer that is abandoned is closed)."""
        src = self._source
        it = src.iterator
        if it is not None and not src.done:
            src.done = True
            src.iterator = None
            closer = getattr(it, "aclose", None)
            if closer is not None:
                await closer()


# -- saving ------------------------------------------------------------------------------------
def _save_stream(stream: MessageStream) -> Mapping[str, Any]:
    """An ended stream as its concatenated message and its error (the chunking is not kept)."""
    if not stream.done:
        raise SerializationError(
            "cannot save a message stream that has not ended; "
            "materialise it first (materialize_streams)"
        )
    chunks = stream.chunks
    error = stream.error
    if isinstance(error, StreamCancelledError):
        return {"message": None, "error": error}  # a cut reply is never kept (D26)
    return {"message": concat_messages(chunks) if chunks else None, "error": error}


def _load_stream(fields: dict[str, Any]) -> MessageStream:
    """A finished stream from saved fields (ValueError, naming types only, for wrong ones)."""
    message = fields.get("message")
    error = fields.get("error")
    if message is not None and not isinstance(message, Message):
        raise ValueError(f"a stream must hold a relaykit.Message, found {type(message).__name__}")
    if error is not None and not isinstance(error, BaseException):
        raise ValueError(f"a stream's error must be an error, found {type(error).__name__}")
    chunks = [message] if message is not None else []
    if error is not None:
        return MessageStream.failed(chunks, error)
    return MessageStream.from_list(chunks)


# Stored as {"__stream__": {"message": ..., "error": ...}}, the format checkpoints always had.
register_adapter(
    MessageStream,
    "stream",
    fields=("message", "error"),
    save=_save_stream,
    load=_load_stream,
    materialize=MessageStream.collect,
)
