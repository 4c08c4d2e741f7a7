"""ScriptedLiveModel: the scripted realtime model the live tests and the offline demo use."""

from __future__ import annotations

import asyncio

import pytest

import relaykit as rk
from relaykit.errors import ConfigurationError, LiveSessionClosedError, RelayKitError
from relaykit.models.live import LiveConfig, LiveResponse, ScriptedLiveModel

WAIT = ScriptedLiveModel.WAIT


async def test_steps_play_in_order_and_messages_become_responses() -> None:
    partial = LiveResponse(rk.Message.assistant("He"), partial=True)
    model = ScriptedLiveModel(
        [[partial, rk.Message.assistant("Hello"), LiveResponse(turn_complete=True)]]
    )
    conn = await model.connect(LiveConfig([rk.Message.system("s")]))
    got = [r async for r in conn.receive()]
    assert got == [
        partial,
        LiveResponse(rk.Message.assistant("Hello")),
        LiveResponse(turn_complete=True),
    ]
    assert [c.messages[0].content for c in model.connects] == ["s"]


async def test_wait_blocks_until_the_client_sends_one_more_item() -> None:
    model = ScriptedLiveModel(
        [[WAIT, rk.Message.assistant("one"), WAIT, rk.Message.assistant("two")]]
    )
    conn = await model.connect(LiveConfig([]))
    seen: list[str] = []

    async def read() -> None:
        async for r in conn.receive():
            assert r.message is not None
            seen.append(r.message.content)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.01)
    assert seen == []
    await conn.send(rk.Message.user("a"))
    await asyncio.sleep(0.01)
    assert seen == ["one"]
    await conn.send_realtime(rk.Blob("audio/pcm", b"\x00\x01"))
    await reader
    assert seen == ["one", "two"]
    assert conn.sent == [rk.Message.user("a"), rk.Blob("audio/pcm", b"\x00\x01")]


async def test_close_ends_a_pending_wait_and_later_sends_raise() -> None:
    model = ScriptedLiveModel([[WAIT, rk.Message.assistant("never")]])
    conn = await model.connect(LiveConfig([]))
    reader = asyncio.create_task(anext(conn.receive(), None))
    await asyncio.sleep(0.01)
    await conn.close()
    await conn.close()
    assert await reader is None
    assert conn.closed
    with pytest.raises(LiveSessionClosedError):
        await conn.send(rk.Message.user("late"))
    assert conn.sent == []


async def test_exceptions_fail_connect_or_receive_and_the_script_can_run_out() -> None:
    model = ScriptedLiveModel(
        [OSError("refused"), [rk.Message.assistant("x"), ConnectionError("reset")]]
    )
    with pytest.raises(OSError, match="refused"):
        await model.connect(LiveConfig([]))
    conn = await model.connect(LiveConfig([]))
    got: list[LiveResponse] = []
    with pytest.raises(ConnectionError, match="reset"):
        async for r in conn.receive():
            got.append(r)
    assert len(got) == 1
    with pytest.raises(RelayKitError, match="ran out of connections"):
        await model.connect(LiveConfig([]))
    assert len(model.connects) == 3
    assert len(model.connections) == 1


def test_live_run_config_checks_its_limits() -> None:
    assert rk.LiveRunConfig().modalities == ("text",)
    with pytest.raises(ConfigurationError, match="max_realtime_chunk_bytes"):
        rk.LiveRunConfig(max_realtime_chunk_bytes=-1)
    with pytest.raises(ConfigurationError, match="modalities"):
        rk.LiveRunConfig(modalities=())
