"""``make demo``: the support desk, offline on ScriptedModel (or ``--model openai:...``).

Turn 1 asks about an order (triage → orders → back to triage). Turn 2 asks for a refund: the
refund tool pauses for approval and the checkpoint is saved in a SQLite file; a fresh Runner on
a fresh store object — as another process would — resumes it, which consumes the checkpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import relaykit as rk
from examples.support_desk import build_desk
from relaykit import Message


def describe(ev: rk.AgentEvent, message: Message | None) -> str:
    path = " > ".join(step.agent_name for step in ev.run_path)
    who = f"[{path}]"
    if ev.error is not None:
        return f"{who} ERROR: {ev.error}"
    action = ev.action
    if action is not None and action.interrupted is not None:
        questions = "; ".join(
            str(c.info.get("question", c.info)) if isinstance(c.info, dict) else str(c.info)
            for c in action.interrupted.contexts
        )
        return f"{who} PAUSED for a human: {questions}"
    if message is None:
        return f"{who} {action}"
    if message.role == "tool":
        extra = ""
        if action is not None and action.transfer_to_agent is not None:
            extra = "  → control goes to " + action.transfer_to_agent.dest_agent_name
        return f"{who} tool {message.tool_name} returned: {message.content}{extra}"
    if message.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        return f"{who} calls {calls}"
    return f"{who} says: {message.content}"


async def show(events: AsyncIterator[rk.AgentEvent], history: list[Message]) -> str | None:
    """Print a turn; collect its messages into ``history``; return a pending interrupt id."""
    pending = None
    async for ev in events:
        message = await ev.output.get_message() if ev.output is not None else None
        print("  " + describe(ev, message))
        if message is not None:
            history.append(message)
        if ev.action is not None and ev.action.interrupted is not None:
            pending = ev.action.interrupted.contexts[0].id
    return pending


async def main(model: str | None, db: str | None) -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = db or f"sqlite+aiosqlite:///{Path(folder) / 'checkpoints.db'}"
        await desk(model, url)


async def desk(model: str | None, url: str) -> None:
    history: list[Message] = []
    print("relaykit support desk" + (f" on {model}" if model else " (scripted model, offline)"))

    async with rk.DatabaseCheckpointStore(url) as store:
        print("\nTurn 1 — user: Where is my order 1234?")
        history.append(Message.user("Where is my order 1234?"))
        runner = rk.Runner(build_desk(model), checkpoint_store=store)
        await show(runner.run(history), history)

        print("\nTurn 2 — user: I want a refund for order 1234, it arrived broken.")
        history.append(Message.user("I want a refund for order 1234, it arrived broken."))
        pending = await show(runner.run(history, checkpoint_id="refund-1234"), history)
        if pending is None:
            print("  (the model did not ask for approval)")
            return
        size = len(await store.get("refund-1234") or b"")
        print(f"  checkpoint 'refund-1234' saved in SQLite ({size} bytes of JSON)")

    print("\nLater, in a fresh Runner — a manager approves the refund:")
    async with rk.DatabaseCheckpointStore(url) as store:  # what another process would open
        fresh = rk.Runner(build_desk(model), checkpoint_store=store)
        await show(
            fresh.resume("refund-1234", targets={pending: {"approved": True, "by": "manager Ana"}}),
            history,
        )
        try:
            await fresh.invoke_resume("refund-1234")
        except rk.errors.CheckpointNotFoundError:
            print(
                "  a second approval finds nothing to resume: the checkpoint was consumed, "
                "so the refund is never paid twice"
            )


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--model",
        default=None,
        help="a provider string such as openai:gpt-4o-mini (default: scripted)",
    )
    parser.add_argument(
        "--db",
        default=None,
        help="checkpoint database URL (default: a SQLite file in a temporary "
        "folder), e.g. postgresql+asyncpg://user@host/db",
    )
    args = parser.parse_args()
    asyncio.run(main(args.model, args.db))


if __name__ == "__main__":
    cli()
