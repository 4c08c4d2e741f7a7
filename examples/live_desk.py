"""A live (realtime) support desk, offline: ``Runner.run_live`` over a scripted live model.

The user types a question, the model streams its answer in partial chunks, calls a tool (the
Runner runs it and sends the result back over the connection), then the user speaks and the
model's transcriptions of both sides arrive. Everything complete is stored in the session as
it happens; the partial chunks are only shown.

``ScriptedLiveModel`` plays what a realtime model would send (text only, so it runs in a
terminal without audio). Run it with ``python -m examples.live_desk``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Literal

import relaykit as rk
from relaykit import Blob, LiveResponse, Message, ScriptedLiveModel, ToolCall

ORDERS = {"1234": {"status": "shipped", "carrier": "DHL", "eta": "Thursday"}}


@rk.tool
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: the order number, digits only
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise rk.ToolError(f"no order {order_id}")
    return {"order_id": order_id, **order}


def chunk(text: str, transcription: Literal["input", "output"] | None = None) -> LiveResponse:
    """A partial chunk of the model's text, or of a transcription."""
    return LiveResponse(Message.assistant(text), partial=True, transcription=transcription)


def scripted_model() -> ScriptedLiveModel:
    """What a realtime model would send on one connection, step by step."""
    wait = ScriptedLiveModel.WAIT
    answer = "Order 1234 shipped with DHL and arrives on Thursday."
    return ScriptedLiveModel(
        [
            [
                wait,  # the user's question
                chunk("Let me "),
                chunk("look that up."),
                Message.assistant(
                    "Let me look that up.",
                    [ToolCall("call_1", "lookup_order", json.dumps({"order_id": "1234"}))],
                ),
                wait,  # the tool's result, sent back by the Runner
                chunk("Order 1234 shipped "),
                chunk("with DHL and arrives on Thursday."),
                Message.assistant(answer),
                LiveResponse(turn_complete=True),
                wait,  # the user's speech
                chunk("Great, thank", "input"),
                LiveResponse(Message.assistant("Great, thank you!"), transcription="input"),
                chunk("You're welcome", "output"),
                LiveResponse(
                    Message.assistant("You're welcome, have a nice day!"), transcription="output"
                ),
                LiveResponse(turn_complete=True),
            ]
        ]
    )


class Screen:
    """Prints live events: partial chunks as they come, one line per message."""

    def __init__(self) -> None:
        self.shown = ""  # the text of the message being streamed (on an open line)
        self.open_line = False

    def _end(self, text: str = "") -> None:
        if self.open_line:
            # the complete message repeats the chunks: print what they did not show
            print(text[len(self.shown) :] if text.startswith(self.shown) else f" [{text}]")
            self.open_line, self.shown = False, ""

    def show(self, ev: rk.AgentEvent) -> None:
        out = ev.output
        response = out.custom if isinstance(out, rk.AgentOutput) else None
        who = ev.agent_name
        if isinstance(response, LiveResponse) and response.transcription == "input":
            who = "user (heard)"
        elif isinstance(response, LiveResponse) and response.transcription == "output":
            who = f"{ev.agent_name} (said)"
        message = ev.message
        if ev.error is not None:
            self._end()
            print(f"  error: {ev.error}")
        elif out is not None and out.stream is not None:
            text = out.stream.chunks[0].content
            if not self.open_line:
                print(f"  {who} ▸ ", end="")
                self.open_line = True
            print(text, end="", flush=True)
            self.shown += text
        elif message is not None and message.tool_calls:
            self._end(message.content)
            for call in message.tool_calls:
                print(f"  {ev.agent_name} → {call.name}({call.arguments})")
        elif message is not None and message.role == "tool":
            print(f"  {ev.agent_name} ← {message.tool_name}: {message.content}")
        elif message is not None:
            if self.open_line:
                self._end(message.content)
            else:
                print(f"  {who}: {message.content}")
        elif isinstance(response, LiveResponse) and response.turn_complete:
            self._end()
            print("  (turn complete)")


async def until_turn_complete(events: AsyncIterator[rk.AgentEvent], screen: Screen) -> None:
    async for ev in events:
        screen.show(ev)
        response = ev.output.custom if ev.output is not None else None
        if isinstance(response, LiveResponse) and response.turn_complete:
            return


async def main() -> None:
    desk = rk.ChatModelAgent(
        "desk",
        "answers questions about orders",
        "You are a friendly support desk. Look orders up before answering.",
        tools=[lookup_order],
        live_model=scripted_model(),
    )
    service = rk.InMemorySessionService()
    runner = rk.Runner(desk, app_name="live-desk", session_service=service)
    screen = Screen()
    async with runner.run_live(user_id="ada", session_id="call-1") as live:
        events = live.events()
        print("> Hi! Where is my order 1234?")
        await live.send(Message.user("Hi! Where is my order 1234?"))
        await until_turn_complete(events, screen)
        print("> (speaks: 3200 bytes of audio)")
        await live.send_realtime(Blob("audio/pcm;rate=16000", bytes(3200)))
        async for ev in events:  # until the model closes the connection
            screen.show(ev)
    session = await service.get_session("live-desk", "ada", "call-1")
    assert session is not None
    print("stored:")
    for event in session.events:
        if event.message is not None:
            message = event.message
            text = message.content or ", ".join(call.name for call in message.tool_calls)
            print(f"  {event.author:5} {message.role:9} {text}")


if __name__ == "__main__":
    asyncio.run(main())
