"""Model retries and per-agent options: a reply that breaks off mid-stream is retried, and a
payment approved for a smaller amount is edited into the paused conversation on resume.

Run: ``.venv/bin/python -m examples.retries`` (offline: the models are scripted).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import relaykit as rk
from relaykit import Message, ToolCall
from relaykit.errors import WillRetryError
from relaykit.options import HistoryModifier


class DroppedOnce:
    """A streaming model whose first reply breaks off after two chunks (a dropped connection);
    later calls stream the scripted replies."""

    def __init__(self, replies: list[Message]) -> None:
        self.replies = iter(replies)
        self.calls = 0

    async def generate(self, request: rk.ModelRequest) -> Message:
        return next(self.replies)

    def stream(self, request: rk.ModelRequest) -> rk.MessageStream:
        self.calls += 1
        first = self.calls == 1
        reply = None if first else next(self.replies)

        async def chunks() -> AsyncIterator[Message]:
            if reply is None:
                yield Message.assistant("I will pay ")
                yield Message.assistant("the")
                raise ConnectionError("connection reset by peer")
            yield reply

        return rk.MessageStream(chunks())


@rk.tool
def pay(ctx: rk.ToolContext, amount: int) -> str:
    """Pay an amount once a human approved it."""
    if not ctx.is_resume_target:
        raise rk.ToolInterrupt({"question": f"pay {amount} EUR?"})
    currency = rk.tool_options(ctx).get("currency", "EUR")
    return f"paid {amount} {currency}"


def approve(amount: int) -> HistoryModifier:
    """A history modifier: the paused ``pay`` call gets the amount the human approved."""

    def edit(messages: list[Message]) -> list[Message]:
        *earlier, reply = messages
        calls = [ToolCall(c.id, c.name, json.dumps({"amount": amount})) for c in reply.tool_calls]
        return [*earlier, Message.assistant(reply.content, calls)]

    return edit


async def show(events: AsyncIterator[rk.AgentEvent]) -> str | None:
    """Print each event; return the id of the interrupt point, if the run paused."""
    point = None
    async for ev in events:
        if ev.output is not None and ev.output.stream is not None:
            texts = []
            try:
                async for chunk in ev.output.stream:
                    texts.append(chunk.content or " ".join(c.name for c in chunk.tool_calls))
                print(f"stream: {''.join(texts)!r}")
            except WillRetryError as exc:
                print(f"stream: {''.join(texts)!r} ended: will retry (attempt {exc.retry_attempt})")
        elif ev.output is not None and ev.output.message is not None:
            print(f"{ev.output.message.role}: {ev.output.message.content}")
        elif ev.action is not None and ev.action.interrupted is not None:
            context = ev.action.interrupted.contexts[0]
            point = context.id
            print(f"paused: {context.info['question']}")
    return point


async def main() -> None:
    model = DroppedOnce(
        [
            Message.assistant("", [ToolCall("p1", "pay", '{"amount": 500}')]),
            Message.assistant("Payment done."),
        ]
    )
    agent = rk.ChatModelAgent(
        "payer",
        "pays invoices",
        "Pay what the user asks for.",
        model=model,
        tools=[pay],
        retry=rk.ModelRetry(max_retries=2, backoff=lambda attempt: 0.01 * attempt),
    )
    runner = rk.Runner(agent, streaming=True, checkpoint_store=rk.InMemoryCheckpointStore())
    point = await show(runner.run([Message.user("Pay invoice 42.")], checkpoint_id="invoice-42"))
    assert point is not None
    options = rk.ResumeOptions(history_modifier=approve(50), tool_options={"currency": "CHF"})
    await show(runner.resume("invoice-42", targets={point: True}, agent_options={"payer": options}))


if __name__ == "__main__":
    asyncio.run(main())
