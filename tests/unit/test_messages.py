"""Unit tests: Message constructors, concatenation of chunks, MessageStream (API.md, Messages)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import relaykit as rk
from relaykit.messages import concat_messages


def chunk(text: str = "", *calls: rk.ToolCall) -> rk.Message:
    return rk.Message.assistant(text, list(calls))


class Source:
    """An async-generator source that counts how many chunks were pulled from it."""

    def __init__(
        self, texts: list[str], error: BaseException | None = None, pause: float = 0.0
    ) -> None:
        self.texts = texts
        self.error = error
        self.pause = pause
        self.pulled = 0
        self.closed = False

    async def gen(self) -> AsyncIterator[rk.Message]:
        try:
            for text in self.texts:
                self.pulled += 1
                await asyncio.sleep(self.pause)
                yield chunk(text)
            if self.error is not None:
                raise self.error
        finally:
            self.closed = True


async def read_all(stream: rk.MessageStream) -> list[str]:
    """Chunk contents, then ``!<error>`` if the stream ended in an error."""
    out: list[str] = []
    try:
        async for m in stream:
            out.append(m.content)
            await asyncio.sleep(0)
    except Exception as exc:
        out.append(f"!{exc}")
    return out


# -- messages ----------------------------------------------------------------------------------
def test_message_constructors() -> None:
    assert rk.Message.user("hi") == rk.Message("user", "hi")
    assert rk.Message.system("s").role == "system"
    call = rk.ToolCall("c1", "f", '{"a": 1}')
    a = rk.Message.assistant("x", [call])
    assert (a.role, a.content, a.tool_calls) == ("assistant", "x", [call])
    t = rk.Message.tool("r", tool_call_id="c1", tool_name="f")
    assert (t.role, t.content, t.tool_call_id, t.tool_name) == ("tool", "r", "c1", "f")
    blob = rk.Blob("image/png", b"\x00")
    assert rk.Message.user("u", attachments=[blob]).attachments == [blob]
    # Default lists are not shared between messages.
    m1, m2 = rk.Message.user("a"), rk.Message.user("b")
    m1.attachments.append(blob)
    assert m2.attachments == []


# -- concatenation -----------------------------------------------------------------------------
def test_concat_joins_contents_and_merges_metadata() -> None:
    first = chunk("Hel")
    first.metadata["a"] = 1
    last = chunk("lo")
    last.metadata.update({"a": 2, "usage": {"input_tokens": 3, "output_tokens": 4}})
    merged = concat_messages([first, chunk(""), last])
    assert merged.role == "assistant" and merged.content == "Hello"
    assert merged.metadata == {"a": 2, "usage": {"input_tokens": 3, "output_tokens": 4}}
    with pytest.raises(ValueError):
        concat_messages([])


def test_concat_merges_tool_call_fragments_by_index() -> None:
    chunks = [
        chunk("", rk.ToolCall("c1", "search", '{"q"', index=0)),
        chunk("", rk.ToolCall("", "", ': "x"}', index=0), rk.ToolCall("c2", "calc", "{", index=1)),
        chunk("", rk.ToolCall("", "", "}", index=1)),
    ]
    merged = concat_messages(chunks)
    assert [(c.id, c.name, c.arguments) for c in merged.tool_calls] == [
        ("c1", "search", '{"q": "x"}'),
        ("c2", "calc", "{}"),
    ]
    assert all(c.index is None for c in merged.tool_calls)
    # The chunks themselves are not modified.
    assert chunks[0].tool_calls[0].arguments == '{"q"'


def test_concat_merges_tool_call_fragments_by_id() -> None:
    merged = concat_messages(
        [
            chunk("a", rk.ToolCall("c1", "search", '{"q":')),
            chunk("b", rk.ToolCall("c2", "calc", '{"x":')),
            chunk("", rk.ToolCall("c1", "", ' "y"}')),
            chunk("", rk.ToolCall("c2", "", " 1}")),
            chunk("", rk.ToolCall("", "", "")),  # no id and no index: continues the last call
        ]
    )
    assert merged.content == "ab"
    assert [(c.id, c.name, c.arguments) for c in merged.tool_calls] == [
        ("c1", "search", '{"q": "y"}'),
        ("c2", "calc", '{"x": 1}'),
    ]


def test_concat_fragment_without_id_continues_previous_call() -> None:
    merged = concat_messages(
        [
            chunk("", rk.ToolCall("c1", "f", "{")),
            chunk("", rk.ToolCall("", "", '"a": 1')),
            chunk("", rk.ToolCall("", "", "}")),
        ]
    )
    assert [(c.id, c.name, c.arguments) for c in merged.tool_calls] == [("c1", "f", '{"a": 1}')]


# -- MessageStream -----------------------------------------------------------------------------
async def test_from_list_and_collect() -> None:
    stream = rk.MessageStream.from_list([chunk("a"), chunk("b")])
    assert stream.done
    message = await stream.collect()
    assert message.content == "ab"
    assert await stream.collect() is message  # cached
    assert [m.content async for m in stream] == ["a", "b"]


async def test_two_consumers_read_every_chunk_and_the_source_once() -> None:
    source = Source(["c0", "c1", "c2"])
    stream = rk.MessageStream(source.gen())
    assert not stream.done
    first, second = await asyncio.gather(read_all(stream), read_all(stream))
    assert first == second == ["c0", "c1", "c2"]
    assert source.pulled == 3
    assert stream.done and stream.error is None
    assert (await stream.collect()).content == "c0c1c2"
    assert await read_all(stream) == ["c0", "c1", "c2"]  # a late reader too
    assert source.pulled == 3


async def test_collect_caches_and_other_readers_keep_their_chunks() -> None:
    source = Source(["x", "y"])
    stream = rk.MessageStream(source.gen())
    reader = aiter(stream)
    assert (await anext(reader)).content == "x"
    message = await stream.collect()
    assert message.content == "xy"
    assert (await anext(reader)).content == "y"
    with pytest.raises(StopAsyncIteration):
        await anext(reader)
    assert await stream.collect() is message
    assert source.pulled == 2
    assert stream.chunks == [chunk("x"), chunk("y")]


async def test_error_at_the_end_is_raised_to_every_reader() -> None:
    boom = ValueError("boom")
    stream = rk.MessageStream(Source(["a", "b"], error=boom).gen())
    first, second = await asyncio.gather(read_all(stream), read_all(stream))
    assert first == second == ["a", "b", "!boom"]
    assert stream.done and stream.error is boom
    with pytest.raises(ValueError, match="boom"):
        await stream.collect()
    assert await read_all(stream) == ["a", "b", "!boom"]
    with pytest.raises(ValueError, match="boom"):
        await stream.collect()


async def test_will_retry_error_and_failed_streams() -> None:
    stream = rk.MessageStream.failed([chunk("part")], rk.errors.WillRetryError("retry"))
    assert await read_all(stream) == ["part", "!retry"]
    with pytest.raises(rk.errors.WillRetryError):
        await stream.collect()
    assert stream.chunks == [chunk("part")]


async def test_empty_stream_collect_is_an_error() -> None:
    async def nothing() -> AsyncIterator[rk.Message]:
        return
        yield  # pragma: no cover

    stream = rk.MessageStream(nothing())
    assert await read_all(stream) == []
    with pytest.raises(ValueError, match="no messages"):
        await stream.collect()


async def test_stream_of_tool_call_fragments_collects_to_whole_calls() -> None:
    stream = rk.MessageStream.from_list(
        [
            chunk("", rk.ToolCall("call_1", "transfer_to_agent", '{"agent_', index=0)),
            chunk("", rk.ToolCall("", "", 'name": "B"}', index=0)),
        ]
    )
    message = await stream.collect()
    assert message.tool_calls == [rk.ToolCall("call_1", "transfer_to_agent", '{"agent_name": "B"}')]


async def test_aclose_closes_an_abandoned_source() -> None:
    source = Source(["a", "b", "c"])
    stream = rk.MessageStream(source.gen())
    reader = aiter(stream)
    assert (await anext(reader)).content == "a"
    await stream.aclose()
    assert source.closed and stream.done


async def test_agent_output_get_message_either_way() -> None:
    plain = rk.AgentEvent.from_message(rk.Message.assistant("p")).output
    assert plain is not None and not plain.is_streaming
    assert (await plain.get_message()).content == "p"  # type: ignore[union-attr]
    streamed = rk.AgentEvent.from_message(rk.MessageStream.from_list([chunk("s"), chunk("t")]))
    out = streamed.output
    assert out is not None and out.is_streaming and out.role == "assistant"
    assert (await out.get_message()).content == "st"  # type: ignore[union-attr]
    tool = rk.AgentEvent.from_message(rk.Message.tool("r", tool_call_id="c", tool_name="f"))
    assert tool.output is not None and (tool.output.role, tool.output.tool_name) == ("tool", "f")


async def test_cancelled_reader_does_not_silently_truncate_other_readers() -> None:
    """A reader cancelled while it pulls the source must not make the stream look complete
    to the other readers: they get every chunk, or an error — never a clean partial end."""
    gate = asyncio.Event()
    waiting = asyncio.Event()

    async def source() -> AsyncIterator[rk.Message]:
        yield chunk("a")
        waiting.set()
        await gate.wait()
        yield chunk("b")

    stream = rk.MessageStream(source())

    async def reader() -> list[str]:
        return [m.content async for m in stream]

    task = asyncio.create_task(reader())
    await waiting.wait()  # the task is pulling chunk "b"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()
    other = await read_all(stream)
    assert other == ["a", "b"] or other[-1].startswith("!"), other
