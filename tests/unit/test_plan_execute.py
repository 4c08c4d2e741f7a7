"""PlanExecute end to end on ScriptedModel through rk.Runner: plan, steps, replan, answer;
max_steps; a planner that calls no tool; an interrupt in a step and its resume; session mode."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import relaykit as rk
from relaykit import Message, ToolCall
from relaykit.agents.planexecute import PlanExecuteError, PlanExecuteState

Row = tuple[str, str, str, str]


def call(name: str, args: dict[str, Any], call_id: str = "c1") -> Message:
    return Message.assistant("", [ToolCall(call_id, name, json.dumps(args))])


def plan(*steps: str) -> Message:
    return call("plan", {"steps": list(steps)})


def respond(text: str) -> Message:
    return call("respond", {"response": text})


def rows(events: Sequence[rk.AgentEvent]) -> list[Row]:
    """(path, role, text or called tools, action/error) for each event."""
    out: list[Row] = []
    for ev in events:
        path = "/".join(s.agent_name for s in ev.run_path)
        msg = ev.message
        if msg is not None:
            text = msg.content or "calls " + ",".join(c.name for c in msg.tool_calls)
            out.append((path, msg.role, text, ""))
        elif ev.error is not None:
            out.append((path, "", "", f"error: {ev.error}"))
        else:
            out.append((path, "", "", "interrupt" if rk.interrupts.interrupt_of(ev) else "action"))
    return out


class Recorder(rk.BaseAgent):
    """An executor that answers from a list and records the prompt and the session values."""

    def __init__(self, name: str, answers: list[str]) -> None:
        super().__init__(name, "carries out one step")
        self.answers = list(answers)
        self.prompts: list[str] = []
        self.seen: list[dict[str, Any]] = []

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.prompts.append("\n---\n".join(m.content for m in input.messages))
        self.seen.append(dict(ctx.session_values))
        yield rk.AgentEvent.from_message(Message.assistant(self.answers.pop(0)))


PREFIX = "plan_execute"
EXEC = "plan_execute/executor"


async def test_plan_two_steps_then_respond() -> None:
    planner = rk.ScriptedModel([plan("Find Paris' population.", "Find Rome's population.")])
    replanner = rk.ScriptedModel(
        [plan("Find Rome's population."), respond("Rome (2.8M) is bigger than Paris (2.1M).")]
    )
    executor = Recorder("executor", ["Paris: 2.1M.", "Rome: 2.8M."])
    result = await rk.Runner(rk.PlanExecute(planner, executor, replanner)).invoke(
        "Which is bigger, Paris or Rome?"
    )
    assert rows(result.events) == [
        (PREFIX, "assistant", "calls plan", ""),
        (
            PREFIX,
            "tool",
            "plan set:\n1. Find Paris' population.\n2. Find Rome's population.",
            "",
        ),
        (EXEC, "assistant", "Paris: 2.1M.", ""),
        (PREFIX, "assistant", "calls plan", ""),
        (PREFIX, "tool", "plan updated:\n1. Find Rome's population.", ""),
        (EXEC, "assistant", "Rome: 2.8M.", ""),
        (PREFIX, "assistant", "calls respond", ""),
        (PREFIX, "tool", "final answer given", ""),
        (PREFIX, "assistant", "Rome (2.8M) is bigger than Paris (2.1M).", ""),
    ]
    assert result.output is not None
    assert result.output.content == "Rome (2.8M) is bigger than Paris (2.1M)."
    # Every decision call is answered by a tool result with its id (a valid history).
    decisions = [e for e in result.events if e.agent_name == PREFIX and e.message]
    assert [m.message.tool_call_id for m in decisions if m.message.role == "tool"] == ["c1"] * 3
    # The planner: its instruction, then the conversation; offered the plan tool only.
    request = planner.requests[0]
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.messages[1].content == "Which is bigger, Paris or Rome?"
    assert [t.name for t in request.tools] == ["plan"]
    # The executor's input for step 2: one user message with the whole picture.
    assert executor.prompts[1] == (
        "## Objective\nWhich is bigger, Paris or Rome?\n\n"
        "## The plan\n1. Find Rome's population.\n\n"
        "## Completed steps and their results\n"
        "1. Find Paris' population.\n   Result: Paris: 2.1M.\n\n"
        "## Your task\nCarry out this step, and only this step: Find Rome's population.\n"
        "Reply with its result."
    )
    assert "(none yet)" in executor.prompts[0]
    # The session values as the executor saw them at each step.
    assert executor.seen[0]["plan"] == ["Find Paris' population.", "Find Rome's population."]
    assert executor.seen[0]["past_steps"] == []
    assert executor.seen[1]["plan"] == ["Find Rome's population."]
    assert executor.seen[1]["past_steps"] == [
        {"step": "Find Paris' population.", "result": "Paris: 2.1M."}
    ]
    # The replanner: offered plan and respond, reading the steps done so far.
    last = replanner.requests[1]
    assert [t.name for t in last.tools] == ["plan", "respond"]
    assert last.messages[0].role == "system"
    assert "2. Find Rome's population.\n   Result: Rome: 2.8M." in last.messages[1].content


async def test_replanner_revises_the_remaining_steps() -> None:
    planner = rk.ScriptedModel([plan("Draft the email.", "Send the email.")])
    replanner = rk.ScriptedModel(
        [
            plan("Shorten the draft.", "Send the email."),  # a new step replaces the old plan
            plan("Send the email."),
            respond("Sent a short email."),
        ]
    )
    executor = Recorder("writer", ["A long draft.", "A short draft.", "Sent."])
    result = await rk.Runner(rk.PlanExecute(planner, executor, replanner, name="mailer")).invoke(
        "Email Bob."
    )
    texts = [r[2] for r in rows(result.events) if r[0] == "mailer/writer"]
    assert texts == ["A long draft.", "A short draft.", "Sent."]
    assert [p.split("only this step: ")[1].split("\n")[0] for p in executor.prompts] == [
        "Draft the email.",
        "Shorten the draft.",
        "Send the email.",
    ]
    assert executor.seen[1]["plan"] == ["Shorten the draft.", "Send the email."]
    assert (
        "mailer",
        "tool",
        "plan updated:\n1. Shorten the draft.\n2. Send the email.",
        "",
    ) in rows(result.events)
    assert result.output is not None and result.output.content == "Sent a short email."


async def test_max_steps_reached_answers_with_the_last_result() -> None:
    planner = rk.ScriptedModel([plan("Step A.", "Step B.", "Step C.")])
    replanner = rk.ScriptedModel([plan("Step B.", "Step C."), plan("Step C.")])
    executor = Recorder("executor", ["A done.", "B done."])
    agent = rk.PlanExecute(planner, executor, replanner, max_steps=2)
    result = await rk.Runner(agent).invoke("Do A, B and C.")
    assert rows(result.events)[-3:] == [
        (PREFIX, "assistant", "calls plan", ""),
        (
            PREFIX,
            "tool",
            "max_steps=2 reached: the plan is not carried out further; the last step's "
            "result is the answer",
            "",
        ),
        (PREFIX, "assistant", "B done.", ""),
    ]
    assert not [e for e in result.events if e.error is not None]
    assert len(executor.prompts) == 2 and len(replanner.requests) == 2
    assert result.output is not None and result.output.content == "B done."


async def test_planner_without_a_tool_call_is_an_error_event() -> None:
    planner = rk.ScriptedModel([Message.assistant("Sure, I will just do it.")])
    executor = Recorder("executor", [])
    agent = rk.PlanExecute(planner, executor, rk.ScriptedModel([]))
    events = [ev async for ev in rk.Runner(agent).query("Plan my trip.")]
    assert rows(events)[0] == (PREFIX, "assistant", "Sure, I will just do it.", "")
    assert len(events) == 2 and isinstance(events[1].error, PlanExecuteError)
    assert events[1].agent_name == PREFIX
    assert str(events[1].error) == (
        "PlanExecute 'plan_execute': the planner replied without calling a tool (it must call "
        "'plan'); its reply: 'Sure, I will just do it.'"
    )
    assert executor.prompts == []
    with pytest.raises(rk.AgentRunError):
        await rk.Runner(
            rk.PlanExecute(
                rk.ScriptedModel([Message.assistant("no")]),
                Recorder("executor", []),
                rk.ScriptedModel([]),
            )
        ).invoke("Plan my trip.")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (call("search", {}), "the replanner called an unexpected tool 'search'"),
        (
            Message.assistant("", [ToolCall("a", "plan", "{}"), ToolCall("b", "respond", "{}")]),
            "the replanner called 2 tools (plan, respond); it must call exactly one",
        ),
        (call("plan", {"steps": []}), "without 'steps' as a non-empty list"),
        (call("respond", {"answer": "x"}), "called 'respond' without a string 'response'"),
    ],
)
async def test_bad_replanner_decisions_are_error_events(reply: Message, expected: str) -> None:
    agent = rk.PlanExecute(
        rk.ScriptedModel([plan("Only step.")]),
        Recorder("executor", ["done"]),
        rk.ScriptedModel([reply]),
    )
    events = [ev async for ev in rk.Runner(agent).query("go")]
    assert isinstance(events[-1].error, PlanExecuteError)
    assert expected in str(events[-1].error)


def test_configuration_errors() -> None:
    model = rk.ScriptedModel([])
    with pytest.raises(rk.errors.ConfigurationError, match="max_steps must be an int >= 1"):
        rk.PlanExecute(model, Recorder("executor", []), model, max_steps=0)
    with pytest.raises(rk.errors.ConfigurationError, match="the planner must be a ChatModel"):
        rk.PlanExecute("gpt", Recorder("executor", []), model)  # type: ignore[arg-type]
    with pytest.raises(rk.errors.ConfigurationError, match="a name of its own"):
        rk.PlanExecute(model, Recorder("plan_execute", []), model)


class Lookups:
    """A tool that looks a city up; Rome needs approval (an interrupt) before it runs."""

    def __init__(self) -> None:
        self.calls: list[str] = []

        @rk.tool
        def lookup(ctx: rk.ToolContext, city: str) -> str:
            """The population of a city."""
            if city == "Rome" and not ctx.is_resume_target:
                raise rk.ToolInterrupt({"approve": city})
            self.calls.append(city)
            return f"{city}: {'2.1M' if city == 'Paris' else '2.8M'}"

        self.tool = lookup


def approving_agent(lookups: Lookups) -> rk.PlanExecute:
    executor = rk.ChatModelAgent(
        "executor",
        model=rk.ScriptedModel(
            [
                call("lookup", {"city": "Paris"}, "t1"),
                Message.assistant("Paris has 2.1M people."),
                call("lookup", {"city": "Rome"}, "t2"),
                Message.assistant("Rome has 2.8M people."),
            ]
        ),
        tools=[lookups.tool],
    )
    return rk.PlanExecute(
        rk.ScriptedModel([plan("Look up Paris.", "Look up Rome.")]),
        executor,
        rk.ScriptedModel([plan("Look up Rome."), respond("Rome is bigger.")]),
    )


async def test_interrupt_in_step_two_resumes_that_step_once() -> None:
    lookups = Lookups()
    agent = approving_agent(lookups)
    runner = rk.Runner(agent, checkpoint_store=rk.InMemoryCheckpointStore())
    paused = await runner.invoke("Paris or Rome?", checkpoint_id="trip")
    assert paused.interrupt is not None and paused.checkpoint_id == "trip"
    assert rows(paused.events)[-2:] == [
        (EXEC, "assistant", "calls lookup", ""),
        (EXEC, "", "", "interrupt"),
    ]
    point = paused.interrupt.contexts[0]
    assert point.info == {"approve": "Rome"}
    assert [str(s) for s in point.address] == [
        "agent:plan_execute",
        "agent:executor",
        "tool:lookup:t2",
    ]
    top = paused.interrupt.top()
    assert top is not None and top.info == "plan-execute interrupted at step 2: Look up Rome."
    assert isinstance(top.state, PlanExecuteState)
    assert top.state.plan == ["Look up Rome."] and top.state.round == 1
    assert lookups.calls == ["Paris"]

    done = await runner.invoke_resume("trip", targets={point.id: True})
    assert rows(done.events) == [
        (EXEC, "tool", "Rome: 2.8M", ""),
        (EXEC, "assistant", "Rome has 2.8M people.", ""),
        (PREFIX, "assistant", "calls respond", ""),
        (PREFIX, "tool", "final answer given", ""),
        (PREFIX, "assistant", "Rome is bigger.", ""),
    ]
    assert done.interrupt is None and done.output is not None
    assert done.output.content == "Rome is bigger."
    # Step 1's tool did not run again, step 2's ran once; nobody planned again.
    assert lookups.calls == ["Paris", "Rome"]
    assert isinstance(agent.planner, rk.ScriptedModel) and len(agent.planner.requests) == 1
    assert isinstance(agent.replanner, rk.ScriptedModel)
    assert len(agent.replanner.requests) == 2
    assert "1. Look up Paris.\n   Result: Paris has 2.1M people.\n2. Look up Rome.\n" in (
        agent.replanner.requests[1].messages[1].content
    )
    with pytest.raises(rk.errors.CheckpointNotFoundError):
        await runner.invoke_resume("trip")  # the completed resume deleted the checkpoint


async def test_session_mode_stores_plan_past_steps_and_final_answer_as_state() -> None:
    service = rk.InMemorySessionService()
    lookups = Lookups()
    runner = rk.Runner(approving_agent(lookups), app_name="trips", session_service=service)
    first = [
        ev
        async for ev in runner.run([Message.user("Paris or Rome?")], user_id="ana", session_id="s1")
    ]
    assert rk.interrupts.interrupt_of(first[-1]) is not None
    point = rk.interrupts.interrupt_of(first[-1])
    assert point is not None
    second = [
        ev
        async for ev in runner.resume(
            user_id="ana", session_id="s1", targets={point.contexts[0].id: True}
        )
    ]
    assert [r[2] for r in rows(second)][-1] == "Rome is bigger."
    assert lookups.calls == ["Paris", "Rome"]
    session = await service.get_session("trips", "ana", "s1")
    assert session is not None
    assert session.state["plan"] == ["Look up Rome."]
    assert session.state["past_steps"] == [
        {"step": "Look up Paris.", "result": "Paris has 2.1M people."},
        {"step": "Look up Rome.", "result": "Rome has 2.8M people."},
    ]
    assert session.state["final_answer"] == "Rome is bigger."
    # The values were stored as state deltas of the plan-execute agent's own events.
    deltas = [(e.author, sorted(e.state_delta)) for e in session.events if e.state_delta]
    assert deltas == [
        ("plan_execute", ["past_steps", "plan"]),  # with the planner's result
        ("plan_execute", ["past_steps"]),  # step 1 done: with the replanner's call
        ("plan_execute", ["plan"]),  # the revised plan: with its result
        ("plan_execute", ["past_steps"]),  # after the resume, step 2 done
        ("plan_execute", ["final_answer"]),  # with the final answer
    ]
    final = next(e for e in session.events if e.state_delta.get("final_answer"))
    assert final.message is not None and final.message.content == "Rome is bigger."


def test_the_example_pauses_at_the_approval_and_answers_after_the_resume() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "examples.plan_execute"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
        check=True,
    ).stdout.splitlines()
    assert out[0].startswith("[analyst] calls plan ")
    assert out[7:10] == [
        '[analyst > researcher] calls population {"city": "Rome"}',
        "[analyst > researcher] (paused)",
        "-- approving {'approve': 'look up Rome'}",
    ]
    assert out[-2:] == [
        "[analyst] assistant: Rome is bigger: 2.8 million against 2.1 million.",
        "Answer: Rome is bigger: 2.8 million against 2.1 million.",
    ]
