"""Agents, models and tools for the cancellation tests: counted calls, calls that block until
released, and runs driven to a given event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable

import relaykit as rk
from relaykit import AgentEvent, Message, ToolCall
from relaykit.messages import MessageStream
from relaykit.models.base import ModelRequest
from relaykit.models.scripted import ScriptedResponse, split_into_chunks


class Gate:
    """Something that blocks until it is opened; ``entered`` is set while it is waited on."""

    def __init__(self, *, open: bool = False) -> None:
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()
        if open:
            self.opened.set()

    async def wait(self) -> None:
        self.entered.set()
        await self.opened.wait()


class Counter:
    """A tool that records each start, finish and cut of its calls, and may block on a gate
    (the gate is only waited on while ``blocking``)."""

    def __init__(self, name: str, gate: Gate | None = None) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.cut: list[str] = []
        self.gate = gate

        async def run(item: str) -> str:
            self.started.append(item)
            try:
                if self.gate is not None:
                    await self.gate.wait()
            except asyncio.CancelledError:
                self.cut.append(item)
                raise
            self.finished.append(item)
            return f"{name} did {item}"

        run.__doc__ = f"{name} an item."
        self.tool = rk.FunctionTool(run, name=name)


def call(call_id: str, tool: str, item: str) -> ToolCall:
    return ToolCall(call_id, tool, f'{{"item": "{item}"}}')


def asks(*calls: ToolCall) -> Message:
    """A model reply asking for ``calls``."""
    return Message.assistant("", list(calls))


class GatedModel(rk.ScriptedModel):
    """A ScriptedModel whose calls wait at ``gate`` (before replying, or in a stream after the
    first chunk) while ``gated`` holds the call numbers to hold (1 = the first call);
    ``calls`` counts the calls made, cut ones included."""

    def __init__(self, responses: Iterable[ScriptedResponse], gated: Iterable[int] = ()) -> None:
        super().__init__(responses)
        self.gated = set(gated)
        self.gate = Gate()
        self.calls = 0

    async def generate(self, request: ModelRequest) -> Message:
        self.calls += 1
        if self.calls in self.gated:
            await self.gate.wait()
        return self._next(request)

    def stream(self, request: ModelRequest) -> MessageStream:
        self.calls += 1
        return MessageStream(self._gated_chunks(request, self.calls))

    async def _gated_chunks(self, request: ModelRequest, number: int) -> AsyncIterator[Message]:
        chunks = split_into_chunks(self._next(request))
        for i, chunk in enumerate(chunks):
            if i == 1 and number in self.gated:
                await self.gate.wait()
            yield chunk


def texts(events: Iterable[AgentEvent]) -> list[tuple[str, str, str]]:
    """(agent, role, text) of every event with a whole message."""
    return [
        (ev.agent_name, ev.output.role, ev.message.content)
        for ev in events
        if ev.output is not None and ev.message is not None
    ]


def last_interrupt(events: list[AgentEvent]) -> rk.InterruptInfo:
    action = events[-1].action
    assert action is not None and action.interrupted is not None
    return action.interrupted


def point_addresses(info: rk.InterruptInfo) -> list[list[str]]:
    return [[str(s) for s in point.address] for point in info.contexts]


async def cancel_at(
    handle: rk.RunHandle, when: Callable[[AgentEvent], bool], mode: rk.CancelMode
) -> tuple[list[AgentEvent], rk.CancelOutcome | None]:
    """Iterate ``handle``; cancel (from the loop body) at the first event ``when`` accepts."""
    events: list[AgentEvent] = []
    outcome: rk.CancelOutcome | None = None
    async for ev in handle:
        events.append(ev)
        if outcome is None and when(ev):
            outcome = await handle.cancel(mode)
    return events, outcome
