"""An agent as a tool: a lead agent asks a researcher (its own history, shared values).

Run: ``.venv/bin/python -m examples.agent_tool`` (offline, ScriptedModel).
"""

from __future__ import annotations

import asyncio
import json

import relaykit as rk
from relaykit import Message, ToolCall

researcher = rk.ChatModelAgent(
    "researcher",
    "Finds facts about a topic.",
    "Answer with one fact.",
    rk.ScriptedModel([Message.assistant("Fact: the Eiffel Tower is 330 m tall.")]),
)

lead = rk.ChatModelAgent(
    "lead",
    "Writes answers.",
    "Use the researcher for facts.",
    rk.ScriptedModel(
        [
            Message.assistant(
                "",
                [
                    ToolCall(
                        "r1", "researcher", json.dumps({"request": "height of the Eiffel Tower"})
                    )
                ],
            ),
            lambda request: Message.assistant(
                f"Answer, from research: {request.messages[-1].content}"
            ),
        ]
    ),
    tools=[rk.AgentTool(researcher)],
)


async def main() -> None:
    async for ev in rk.Runner(lead).query("How tall is the Eiffel Tower?"):
        msg = ev.output.message if ev.output else None
        print(
            f"[{' > '.join(s.agent_name for s in ev.run_path)}] {msg.role}: "
            f"{msg.content or [c.name for c in msg.tool_calls]}"
            if msg
            else ev
        )


if __name__ == "__main__":
    asyncio.run(main())
