"""Cancelling runs and resuming them: a research run stopped once its tool batch finished, an
answer cut while it streamed, and a stuck tool whose cancel timed out and became immediate.
Each cancelled run is saved like an interrupt and resumed later by another Runner (as another
process would), and nothing that finished runs again.

Run: ``.venv/bin/python -m examples.cancel`` (offline: the models are scripted).
"""

from __future__ import annotations

import asyncio

import relaykit as rk
from relaykit import CancelMode, Message, ToolCall

SEARCHES: list[str] = []
FETCHING = asyncio.Event()  # set when the stuck tool has started
STUCK = asyncio.Event()  # the stuck tool waits for it (set once the run is resumed)


@rk.tool
async def search(query: str) -> str:
    """Search the web."""
    SEARCHES.append(query)
    return f"results for {query!r}"


@rk.tool
async def fetch_report(url: str) -> str:
    """Download a report (this one hangs until it is released)."""
    FETCHING.set()
    await STUCK.wait()
    return f"report from {url}"


def researcher(replies: list[Message]) -> rk.ChatModelAgent:
    return rk.ChatModelAgent(
        "researcher",
        "researches a topic",
        "Research, then answer in one sentence.",
        model=rk.ScriptedModel(replies),
        tools=[search, fetch_report],
    )


def describe(outcome: rk.CancelOutcome) -> str:
    assert outcome.interrupt is not None
    data = outcome.interrupt.data
    waiting = [str(p.address[-1]) for p in outcome.interrupt.contexts]
    return (
        f"paused as {outcome.checkpoint_id!r}: {data.mode.name}"
        f"{' (timed out, escalated)' if outcome.timed_out else ''}; waiting: {waiting}"
    )


async def stop_after_the_batch(store: rk.CheckpointStore) -> None:
    print("1. cancel(AFTER_TOOLS) when the model asks for two searches")
    agent = researcher(
        [
            Message.assistant(
                "",
                [
                    ToolCall("c1", "search", '{"query": "Eiffel Tower height"}'),
                    ToolCall("c2", "search", '{"query": "Eiffel Tower antenna"}'),
                ],
            ),
            Message.assistant("The Eiffel Tower is 330 m tall, antennas included."),
        ]
    )
    handle = rk.Runner(agent, checkpoint_store=store).query(
        "How tall is the Eiffel Tower?", checkpoint_id="research-1"
    )
    async for ev in handle:
        if ev.message is not None and ev.message.tool_calls:
            print(f"   model asks for {len(ev.message.tool_calls)} searches: stop requested")
            print(f"   {describe(await handle.cancel(CancelMode.AFTER_TOOLS))}")
        elif ev.message is not None:
            print(f"   {ev.message.role}: {ev.message.content}")
    # Later, in another process: a new Runner on the same store.
    done = await rk.Runner(agent, checkpoint_store=store).invoke_resume("research-1")
    assert done.output is not None
    print(f"   resumed: {done.output.content}")
    print(f"   searches run: {len(SEARCHES)} (none twice)")


async def cut_a_stream(store: rk.CheckpointStore) -> None:
    print("2. cancel(IMMEDIATE) while the answer streams")
    agent = researcher([Message.assistant("Paris has about 2.1 million inhabitants.")] * 2)
    runner = rk.Runner(agent, checkpoint_store=store, streaming=True)
    handle = runner.query("How many people live in Paris?", checkpoint_id="research-2")
    async for ev in handle:
        if ev.output is not None and ev.output.stream is not None:
            read = ""
            try:
                async for chunk in ev.output.stream:
                    read += chunk.content
                    if len(read) > 10:  # the user presses "stop"
                        print(f"   {describe(await handle.cancel())}")
            except rk.StreamCancelledError:
                print(f"   stream cut after {read!r} (the partial answer is not kept)")
    done = await rk.Runner(agent, checkpoint_store=store).invoke_resume("research-2")
    assert done.output is not None
    print(f"   resumed: {done.output.content}")


async def escalate_a_stuck_tool(store: rk.CheckpointStore) -> None:
    print("3. cancel(AFTER_TOOLS, timeout=0.1) while a tool hangs")
    agent = researcher(
        [
            Message.assistant("", [ToolCall("c3", "fetch_report", '{"url": "https://x.test"}')]),
            Message.assistant("The report says the tower was repainted in 2024."),
        ]
    )
    handle = rk.Runner(agent, checkpoint_store=store).query(
        "What does the report say?", checkpoint_id="research-3"
    )
    running = asyncio.ensure_future(handle.result())
    await FETCHING.wait()  # the tool call is under way
    print(f"   {describe(await handle.cancel(CancelMode.AFTER_TOOLS, timeout=0.1))}")
    await running
    STUCK.set()  # the report server is back: the cut call runs again on resume
    done = await rk.Runner(agent, checkpoint_store=store).invoke_resume("research-3")
    assert done.output is not None
    print(f"   resumed: {done.output.content}")


async def main() -> None:
    store = rk.InMemoryCheckpointStore()
    await stop_after_the_batch(store)
    await cut_a_stream(store)
    await escalate_a_stuck_tool(store)


if __name__ == "__main__":
    asyncio.run(main())
