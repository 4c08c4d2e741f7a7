"""Plan, execute, replan: a planner splits a question into steps, an executor with a tool
carries them out (one lookup needs approval: the run pauses and resumes), a replanner answers.

Run: ``.venv/bin/python -m examples.plan_execute`` (offline, ScriptedModel).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import relaykit as rk
from relaykit import Message, ToolCall


def call(name: str, call_id: str, **args: Any) -> Message:
    """A scripted assistant reply calling one tool."""
    return Message.assistant("", [ToolCall(call_id, name, json.dumps(args))])


@rk.tool
def population(ctx: rk.ToolContext, city: str) -> str:
    """The population of a city (looking Rome up needs approval)."""
    if city == "Rome" and not ctx.is_resume_target:
        raise rk.ToolInterrupt({"approve": f"look up {city}"})
    return {"Paris": "2.1 million", "Rome": "2.8 million"}[city]


def build() -> rk.PlanExecute:
    planner = rk.ScriptedModel(
        [call("plan", "p1", steps=["Find Paris' population.", "Find Rome's population."])]
    )
    executor = rk.ChatModelAgent(
        "researcher",
        "looks facts up",
        model=rk.ScriptedModel(
            [
                call("population", "t1", city="Paris"),
                Message.assistant("Paris has 2.1 million people."),
                call("population", "t2", city="Rome"),
                Message.assistant("Rome has 2.8 million people."),
            ]
        ),
        tools=[population],
    )
    replanner = rk.ScriptedModel(
        [
            call("plan", "r1", steps=["Find Rome's population."]),  # the rest of the plan
            call("respond", "r2", response="Rome is bigger: 2.8 million against 2.1 million."),
        ]
    )
    return rk.PlanExecute(planner, executor, replanner, name="analyst")


def show(ev: rk.AgentEvent) -> None:
    path = " > ".join(s.agent_name for s in ev.run_path)
    msg = ev.message
    if msg is None:
        what = "(paused)" if rk.interrupts.interrupt_of(ev) else f"error: {ev.error}"
    elif msg.tool_calls:
        what = "; ".join(f"calls {c.name} {c.arguments}" for c in msg.tool_calls)
    else:
        what = f"{msg.role}: {msg.content}".replace("\n", " | ")
    print(f"[{path}] {what}")


async def main() -> None:
    runner = rk.Runner(build(), checkpoint_store=rk.InMemoryCheckpointStore())
    paused = await runner.invoke("Which city is bigger, Paris or Rome?", checkpoint_id="cities")
    for ev in paused.events:
        show(ev)
    assert paused.interrupt is not None
    point = paused.interrupt.contexts[0]
    print(f"-- approving {point.info}")
    done = await runner.invoke_resume("cities", targets={point.id: True})
    for ev in done.events:
        show(ev)
    print(f"Answer: {done.output.content if done.output else None}")


if __name__ == "__main__":
    asyncio.run(main())
