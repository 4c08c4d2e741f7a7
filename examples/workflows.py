"""Workflows: a research step fans out in parallel, a writer drafts, a loop refines.

Run: ``.venv/bin/python -m examples.workflows`` (offline, ScriptedModel).
"""

from __future__ import annotations

import asyncio
from typing import Any

import relaykit as rk
from relaykit import Message


def llm(name: str, *answers: str, **options: Any) -> rk.ChatModelAgent:
    """A chat agent whose (scripted) model gives ``answers`` in turn."""
    model = rk.ScriptedModel([Message.assistant(a) for a in answers])
    return rk.ChatModelAgent(name, f"the {name} agent", f"You are the {name}.", model, **options)


class Critic(rk.BaseAgent):
    """Approves the draft on the second round: its BreakLoopAction ends the loop."""

    async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
        rounds = ctx.get_session_value("rounds", 0) + 1
        ctx.set_session_value("rounds", rounds)
        if rounds < 2:
            yield rk.AgentEvent.from_message(Message.assistant("Too long; cut it."))
        else:
            yield rk.AgentEvent.from_message(Message.assistant("Approved."))
            yield rk.AgentEvent(action=rk.AgentAction(break_loop=rk.BreakLoopAction(self.name)))


def build() -> rk.Agent:
    research = rk.ParallelAgent(
        "research",
        [
            llm("web", "The web says: Paris has 2.1M people."),
            llm("docs", "Our docs say: Paris is the capital of France."),
        ],
    )
    writer = llm(
        "writer",
        "Draft: Paris, capital of France, 2.1M people, and much more...",
        "Paris: capital of France, 2.1M people.",
        output_key="draft",
    )
    refine = rk.LoopAgent("refine", [writer, Critic("critic", "reviews drafts")], max_iterations=5)
    return rk.SequentialAgent("report", [research, refine])


async def main() -> None:
    runner = rk.Runner(build())
    async for ev in runner.query("Write two lines about Paris."):
        msg = await ev.output.get_message() if ev.output else None
        path = " > ".join(s.agent_name for s in ev.run_path)
        print(f"[{path}] {msg.content if msg else ev.action}")


if __name__ == "__main__":
    asyncio.run(main())
