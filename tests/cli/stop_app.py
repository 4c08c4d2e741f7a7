"""An app whose turns wait at known places, for the tests of Ctrl-C in ``relaykit run``.

``bot`` looks a question up (``lookup``, at once), then streams its answer: "The answer ",
then nothing more until the gate opens, then "is 42.". Asked to "wait", it calls
``wait_for_gate``, a tool that waits for the gate (it says on stderr that it waits); cut by a
cancel, it says so on stderr and cleans up until the gate opens. The gate is the file named
by ``STOP_APP_GATE``: it is open once the file exists (or when the variable is not set), so a
test opens it from outside the chat's process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import relaykit as rk
from relaykit import Message, MessageStream, ModelRequest, ToolCall

APP_NAME = "stops"


async def gate() -> None:
    """Wait until the gate is open."""
    path = os.environ.get("STOP_APP_GATE")
    while path is not None and not Path(path).exists():
        await asyncio.sleep(0.01)


@rk.tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"the facts about {topic}"


@rk.tool
async def wait_for_gate() -> str:
    """Wait until the gate opens."""
    print("wait_for_gate: waiting", file=sys.stderr, flush=True)
    try:
        await gate()
    except asyncio.CancelledError:
        print("wait_for_gate: cut, cleaning up", file=sys.stderr, flush=True)
        await gate()  # a cleanup that takes its time: the cancel waits for it
        raise
    return "the gate is open"


def _turn(request: ModelRequest) -> list[Message]:
    """The messages since the user's last one."""
    last = max(i for i, m in enumerate(request.messages) if m.role == "user")
    return request.messages[last:]


def reply(request: ModelRequest) -> Message:
    """What ``bot`` says next (a tool call, or its answer)."""
    turn = _turn(request)
    results = [m for m in turn if m.role == "tool"]
    if "wait" in turn[0].content:
        if results:
            return Message.assistant(f"Waited: {results[-1].content}.")
        return Message.assistant("", [ToolCall("call_wait", "wait_for_gate", "{}")])
    if results:
        return Message.assistant("The answer is 42.")
    topic = json.dumps({"topic": turn[0].content})
    return Message.assistant("", [ToolCall("call_lookup", "lookup", topic)])


class GatedModel:
    """Streams ``reply``; the answer "The answer is 42." stops after "The answer " until the
    gate opens."""

    async def generate(self, request: ModelRequest) -> Message:
        return reply(request)

    def stream(self, request: ModelRequest) -> MessageStream:
        return MessageStream(self._chunks(reply(request)))

    async def _chunks(self, message: Message) -> AsyncIterator[Message]:
        if message.content.startswith("The answer "):
            yield Message.assistant("The answer ")
            await gate()
            yield Message.assistant(message.content.removeprefix("The answer "))
        else:
            yield message


root_agent = rk.ChatModelAgent(
    "bot", "Answers questions.", "Answer.", model=GatedModel(), tools=[lookup, wait_for_gate]
)
