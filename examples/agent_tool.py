"""An agent as a tool: a lead agent asks a researcher (its own history, shared values).

``lead`` has one tool, ``researcher`` — an ``rk.AgentTool`` around the researcher agent: the
lead calls it with a request, the researcher runs on that request alone, and its answer comes
back as the tool's result. Unlike a transfer, control stays with the lead.

Runs offline on ScriptedModel (the scripts answer as functions of the request, so they serve
any number of turns). Run: ``.venv/bin/python -m examples.agent_tool``; chat with it:
``.venv/bin/relaykit run examples/agent_tool``; draw it: ``.venv/bin/relaykit tree
examples/agent_tool``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable

import relaykit as rk
from relaykit import Message, ModelRequest, ToolCall

APP_NAME = "lead"
#: What the researcher knows, by a word of the request.
FACTS = {
    "eiffel": "Fact: the Eiffel Tower is 330 m tall.",
    "everest": "Fact: Mount Everest is 8,849 m high.",
    "nile": "Fact: the Nile is about 6,650 km long.",
}


def _researcher(request: ModelRequest) -> Message:
    asked = request.messages[-1].content
    found = [fact for word, fact in FACTS.items() if word in asked.lower()]
    return Message.assistant(found[0] if found else f"I found nothing about: {asked}")


def _lead(request: ModelRequest) -> Message:
    last = request.messages[-1]
    if last.role == "tool":  # the researcher's answer
        return Message.assistant(f"Answer, from research: {last.content}")
    arguments = json.dumps({"request": last.content})
    return Message.assistant("", [ToolCall("r1", "researcher", arguments)])


def _model(script: Callable[[ModelRequest], Message]) -> rk.ScriptedModel:
    return rk.ScriptedModel(itertools.repeat(script), record_requests=False)


researcher = rk.ChatModelAgent(
    "researcher", "Finds facts about a topic.", "Answer with one fact.", _model(_researcher)
)

lead = rk.ChatModelAgent(
    "lead",
    "Writes answers.",
    "Use the researcher for facts.",
    _model(_lead),
    tools=[rk.AgentTool(researcher)],
)

#: The app's root agent, for ``relaykit run`` / ``relaykit tree``.
root_agent = lead


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
