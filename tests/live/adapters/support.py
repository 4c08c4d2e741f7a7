"""Helpers both adapters' loopback tests share: a tool, the model factory, reading responses,
and the check of closing a connection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from relaykit.errors import LiveSessionClosedError
from relaykit.messages import Blob, Message
from relaykit.models import GeminiLiveModel, LiveConnection, LiveResponse, OpenAIRealtimeModel
from relaykit.models.base import ToolSpec

if TYPE_CHECKING:
    from tests.live.adapters.conftest import LiveServer, Peer

WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)

M = TypeVar("M", GeminiLiveModel, OpenAIRealtimeModel)


@contextlib.asynccontextmanager
async def model_factory(
    cls: type[M], model: str, **defaults: Any
) -> AsyncIterator[Callable[..., M]]:
    """A function making ``cls(model, **defaults, **kwargs)``; the models are closed after."""
    built: list[M] = []

    def make(**kwargs: Any) -> M:
        made = cls(model, **{**defaults, **kwargs})
        built.append(made)
        return made

    yield make
    for made in built:
        await made.aclose()


async def take(conn: LiveConnection, n: int) -> list[LiveResponse]:
    """The next ``n`` responses of ``conn``."""
    out: list[LiveResponse] = []
    async with contextlib.aclosing(conn.receive()) as responses:  # type: ignore[type-var]
        async for response in responses:
            out.append(response)
            if len(out) == n:
                break
    return out


def partial(content: str) -> LiveResponse:
    return LiveResponse(Message.assistant(content), partial=True)


def complete(content: str) -> LiveResponse:
    return LiveResponse(Message.assistant(content))


async def check_close(
    server: LiveServer,
    connect: Callable[[], Awaitable[LiveConnection]],
    handshake: Callable[[Peer], Awaitable[Any]],
) -> LiveConnection:
    """Close a connection twice while a ``receive()`` waits for the server: the read ends,
    sends are refused, the socket closed once normally (1000) after the setup frame only."""
    close_codes: list[int | None] = []

    async def script(peer: Peer) -> None:
        await handshake(peer)
        await peer.wait_closed()
        close_codes.append(peer.ws.close_code)

    server.run(script)
    conn = await connect()
    reader = asyncio.create_task(take(conn, 1))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not reader.done()  # the reader waits for the server
    await conn.close()
    await conn.close()
    assert await reader == []
    with pytest.raises(LiveSessionClosedError, match="closed connection"):
        await conn.send(Message.user("hi"))
    with pytest.raises(LiveSessionClosedError):
        await conn.send_realtime(Blob("audio/pcm", b"\x00"))
    assert [r async for r in conn.receive()] == []
    await server.finished()
    assert close_codes == [1000]
    assert len(server.peer.frames) == 1
    return conn
