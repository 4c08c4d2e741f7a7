"""The prompts and tools of ``PlanExecute`` (docs/plan-execute.md), and how it renders them.

>>> print(render_steps(["Find the population of Paris.", "Compare it with Rome."]))
1. Find the population of Paris.
2. Compare it with Rome.
>>> print(render_past_steps([{"step": "Find the population.", "result": "2.1 million."}]))
1. Find the population.
   Result: 2.1 million.
"""

from __future__ import annotations

from collections.abc import Sequence

from relaykit.messages import Message
from relaykit.models.base import ToolSpec

__all__ = [
    "EXECUTOR_PROMPT",
    "PLANNER_INSTRUCTION",
    "PLAN_TOOL",
    "REPLANNER_INSTRUCTION",
    "REPLANNER_PROMPT",
    "RESPOND_TOOL",
    "objective_of",
    "render_past_steps",
    "render_steps",
]

#: The tool the planner and the replanner call with the steps still to do.
PLAN_TOOL = ToolSpec(
    "plan",
    "Set the plan: the steps still to do, in order, each one a self-contained instruction.",
    {
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                "items": {"type": "string"},
                "description": "the steps, in the order to carry them out",
            }
        },
        "required": ["steps"],
    },
)

#: The tool the replanner calls to finish with the answer for the user.
RESPOND_TOOL = ToolSpec(
    "respond",
    "Finish: give the final answer to the user's request.",
    {
        "type": "object",
        "properties": {
            "response": {"type": "string", "description": "the final answer for the user"}
        },
        "required": ["response"],
    },
)

#: The planner's system message; the conversation follows it.
PLANNER_INSTRUCTION = (
    "You are a planner. Break the user's request into a short list of steps that, carried out "
    "in order, achieve it. Make each step a self-contained instruction that an assistant with "
    "tools can carry out on its own. Call the `plan` tool with the steps; do not carry them "
    "out yourself."
)

#: The replanner's system message; ``REPLANNER_PROMPT`` follows it as a user message.
REPLANNER_INSTRUCTION = (
    "You are a replanner. You review the progress of a plan made to achieve an objective and "
    "decide what happens next: call `respond` with the final answer when the objective is "
    "achieved (or cannot be achieved), or call `plan` with the steps that remain."
)

#: The replanner's user message (``str.format`` fields: objective, plan, past_steps).
REPLANNER_PROMPT = """\
## Objective
{objective}

## The plan so far
{plan}

## Completed steps and their results
{past_steps}

## Your decision
If the objective is achieved, call `respond` with the final answer for the user. Otherwise \
call `plan` with the steps that remain to be done (not the completed ones)."""

#: The executor's input, one user message (``str.format`` fields: objective, plan,
#: past_steps, step).
EXECUTOR_PROMPT = """\
## Objective
{objective}

## The plan
{plan}

## Completed steps and their results
{past_steps}

## Your task
Carry out this step, and only this step: {step}
Reply with its result."""


def render_steps(steps: Sequence[str]) -> str:
    """The steps as a numbered list (``(none)`` when there are none)."""
    return "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1)) or "(none)"


def render_past_steps(past: Sequence[dict[str, str]]) -> str:
    """The completed steps, numbered, each followed by its result (``(none yet)`` if empty)."""
    if not past:
        return "(none yet)"
    lines: list[str] = []
    for i, done in enumerate(past, 1):
        result = done["result"].replace("\n", "\n   ")
        lines.append(f"{i}. {done['step']}\n   Result: {result}")
    return "\n".join(lines)


def objective_of(messages: Sequence[Message]) -> str:
    """The request the plan serves: the text of the messages the planner received (system
    messages left out), one per line.

    >>> objective_of([Message.system("Be brief."), Message.user("Compare Paris and Rome.")])
    'Compare Paris and Rome.'
    """
    return "\n".join(m.content for m in messages if m.role != "system" and m.content)
