"""An agent tool that forwards its inner events: the caller watches the researcher work.

``AgentTool(agent, emit_internal_events=True)``: the researcher's events reach the caller while
the tool runs, with the lead's run path in front and marked ``internal`` (shown as ``~``); they
are never part of the lead's history, and a session would never store them (D28).

Run: ``.venv/bin/python -m examples.agent_tool_events`` (offline, ScriptedModel).
"""

from __future__ import annotations

import asyncio
import json

import relaykit as rk
from relaykit import Message, ToolCall


@rk.tool
def search(query: str) -> str:
    """Search the reference books."""
    return "The Eiffel Tower is 330 m tall (since 2022)."


researcher = rk.ChatModelAgent(
    "researcher",
    "Finds facts about a topic.",
    "Search, then answer with one fact.",
    rk.ScriptedModel(
        [
            Message.assistant("", [ToolCall("s1", "search", json.dumps({"query": "Eiffel"}))]),
            lambda request: Message.assistant(f"Fact: {request.messages[-1].content}"),
        ]
    ),
    tools=[search],
)

lead = rk.ChatModelAgent(
    "lead",
    "Writes answers.",
    "Use the researcher for facts.",
    rk.ScriptedModel(
        [
            Message.assistant(
                "",
                [ToolCall("r1", "researcher", json.dumps({"request": "height of the tower"}))],
            ),
            # The lead's history holds its tool call and the result, nothing of the inner run.
            lambda request: Message.assistant(
                f"Answer ({len(request.messages)} messages seen): {request.messages[-1].content}"
            ),
        ]
    ),
    tools=[rk.AgentTool(researcher, emit_internal_events=True)],
)


async def main() -> None:
    async for ev in rk.Runner(lead).query("How tall is the Eiffel Tower?"):
        msg = ev.message
        if msg is None:
            continue
        mark = "~" if ev.internal else " "
        path = " > ".join(step.agent_name for step in ev.run_path)
        print(f"{mark}[{path}] {msg.role}: {msg.content or [c.name for c in msg.tool_calls]}")


if __name__ == "__main__":
    asyncio.run(main())
