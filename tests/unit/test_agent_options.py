"""Per-agent options of one run or resume: ``Runner.run(..., agent_options={name: ...})`` (D28).

Only the named agent gets them: model options in its ``ModelRequest.options``, tool options
for its tools (``rk.tool_options``), a history modifier applied before its next model call
(on a resume: to the paused conversation, whose tool calls then continue as edited).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit as rk
from relaykit.errors import ConfigurationError
from relaykit.messages import Message, ToolCall


@rk.tool
def units(ctx: rk.ToolContext) -> str:
    """The unit system to answer in."""
    return str(rk.tool_options(ctx).get("units", "metric"))


def content(ev: rk.AgentEvent) -> str:
    assert ev.message is not None
    return ev.message.content


def asks_units(answer: str) -> rk.ScriptedModel:
    return rk.ScriptedModel(
        [Message.assistant("", [ToolCall("u1", "units", "{}")]), Message.assistant(answer)]
    )


def two_agents() -> tuple[rk.SequentialAgent, rk.ScriptedModel, rk.ScriptedModel]:
    first, second = asks_units("first done"), asks_units("second done")
    tree = rk.SequentialAgent(
        "pipeline",
        [
            rk.ChatModelAgent("first", model=first, tools=[units]),
            rk.ChatModelAgent("second", model=second, tools=[units]),
        ],
    )
    return tree, first, second


async def test_model_and_tool_options_reach_only_the_named_agent() -> None:
    tree, first, second = two_agents()
    options = rk.AgentOptions(model_options={"temperature": 0.1}, tool_options={"units": "SI+"})
    result = await rk.Runner(tree).invoke("go", agent_options={"second": options})
    assert [(ev.agent_name, content(ev)) for ev in result.events if ev.output] == [
        ("first", ""),
        ("first", "metric"),
        ("first", "first done"),
        ("second", ""),
        ("second", "SI+"),
        ("second", "second done"),
    ]
    assert [r.options for r in first.requests] == [{}, {}]
    assert [r.options for r in second.requests] == [{"temperature": 0.1}] * 2


async def test_a_plain_mapping_is_read_as_agent_options_and_copied_per_request() -> None:
    tree, first, second = two_agents()
    given = {"first": {"model_options": {"max_tokens": 5}}}
    await rk.Runner(tree).invoke("go", agent_options=given)
    assert [r.options for r in first.requests] == [{"max_tokens": 5}] * 2
    assert [r.options for r in second.requests] == [{}, {}]
    assert first.requests[0].options is not first.requests[1].options
    assert given == {"first": {"model_options": {"max_tokens": 5}}}


def test_options_are_checked_when_the_run_is_called() -> None:
    tree, _, _ = two_agents()
    runner = rk.Runner(tree)
    with pytest.raises(ConfigurationError, match="names 'third', which is not an agent") as e:
        runner.run([Message.user("go")], agent_options={"third": rk.AgentOptions()})
    assert "'first', 'pipeline', 'second'" in str(e.value)
    with pytest.raises(ConfigurationError, match=r"agent_options\['first'\]: .*'temperature'"):
        runner.run([Message.user("go")], agent_options={"first": {"temperature": 1}})
    with pytest.raises(ConfigurationError, match=r"agent_options\['first'\] must be AgentOpt"):
        runner.run([Message.user("go")], agent_options={"first": 1})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="model_options must be a mapping, not list"):
        runner.run([Message.user("go")], agent_options={"first": {"model_options": []}})
    with pytest.raises(ConfigurationError, match="agent_options must be a mapping"):
        runner.run([Message.user("go")], agent_options=["first"])  # type: ignore[arg-type]
    store_runner = rk.Runner(tree, checkpoint_store=rk.InMemoryCheckpointStore())
    with pytest.raises(ConfigurationError, match="names 'nobody'"):
        store_runner.resume("cp", agent_options={"nobody": {}})


class Echo(rk.BaseAgent):
    """A custom agent: answers with the options the run designated to it."""

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        mine = ctx.options.agent_options.get(self.name)
        text = json.dumps(dict(mine.model_options) if mine is not None else None)
        yield rk.AgentEvent.from_message(Message.assistant(text))


async def test_a_custom_agent_reads_the_options_meant_for_it() -> None:
    model = rk.ScriptedModel([Message.assistant("hi")] * 2)
    tree = rk.SequentialAgent("seq", [Echo("echo"), rk.ChatModelAgent("chat", model=model)])
    result = await rk.Runner(tree).invoke(
        "go", agent_options={"echo": rk.AgentOptions(model_options={"depth": 2})}
    )
    assert [content(ev) for ev in result.events] == ['{"depth": 2}', "hi"]
    assert model.requests[0].options == {}
    result = await rk.Runner(tree).invoke("go", agent_options={"chat": {}})
    assert content(result.events[0]) == "null"


@rk.tool
def pay(ctx: rk.ToolContext, amount: int) -> str:
    """Pay an amount once a human approved it."""
    if not ctx.is_resume_target:
        raise rk.ToolInterrupt({"question": f"pay {amount}?"})
    return f"paid {amount}"


def approve_50(messages: list[Message]) -> list[Message]:
    """The human approved 50 instead of the 500 the model asked for."""
    *earlier, reply = messages
    calls = [ToolCall(c.id, c.name, json.dumps({"amount": 50})) for c in reply.tool_calls]
    return [*earlier, Message.assistant(reply.content, calls)]


def payer() -> tuple[rk.ChatModelAgent, rk.ScriptedModel]:
    model = rk.ScriptedModel(
        [
            Message.assistant("", [ToolCall("p1", "pay", '{"amount": 500}')]),
            lambda request: Message.assistant(f"Done: {request.messages[-1].content}."),
        ]
    )
    return rk.ChatModelAgent("payer", "pays", "Pay.", model=model, tools=[pay]), model


async def test_a_history_modifier_on_resume_edits_the_pending_call_before_it_continues() -> None:
    agent, model = payer()
    runner = rk.Runner(agent, checkpoint_store=rk.InMemoryCheckpointStore())
    paused = await runner.invoke("pay the invoice")
    assert paused.interrupt is not None and paused.checkpoint_id is not None
    assert paused.interrupt.contexts[0].info == {"question": "pay 500?"}
    point = paused.interrupt.contexts[0].id
    done = await runner.invoke_resume(
        paused.checkpoint_id,
        targets={point: True},
        agent_options={"payer": rk.ResumeOptions(history_modifier=approve_50)},
    )
    assert [content(ev) for ev in done.events] == ["paid 50", "Done: paid 50."]
    last = model.requests[-1].messages
    assert [(m.role, m.content) for m in last] == [
        ("system", "Pay."),
        ("user", "pay the invoice"),
        ("assistant", ""),
        ("tool", "paid 50"),
    ]
    assert last[2].tool_calls[0].arguments == '{"amount": 50}'


async def test_a_history_modifier_that_drops_the_paused_calls_is_an_error_event() -> None:
    agent, _ = payer()
    runner = rk.Runner(agent, checkpoint_store=rk.InMemoryCheckpointStore())
    paused = await runner.invoke("pay the invoice")
    assert paused.checkpoint_id is not None
    events = [
        ev
        async for ev in runner.resume(
            paused.checkpoint_id, agent_options={"payer": {"history_modifier": lambda m: m[:-1]}}
        )
    ]
    assert len(events) == 1 and isinstance(events[0].error, ConfigurationError)
    assert "must keep the paused model reply last, with its tool calls ['p1']" in str(
        events[0].error
    )


async def test_a_history_modifier_on_run_rewrites_the_conversation_once() -> None:
    model = rk.ScriptedModel(
        [
            Message.assistant("", [ToolCall("u1", "units", "{}")]),
            Message.assistant("ok"),
        ]
    )
    agent = rk.ChatModelAgent("a", instruction="Be brief.", model=model, tools=[units])
    calls: list[list[str]] = []

    def last_user_only(messages: list[Message]) -> list[Message]:
        calls.append([m.content for m in messages])
        return [m for m in messages if m.role == "system"] + messages[-1:]

    history = [Message.user("old question"), Message.assistant("old answer"), Message.user("new")]
    await rk.Runner(agent).invoke(
        history, agent_options={"a": {"history_modifier": last_user_only}}
    )
    assert calls == [["Be brief.", "old question", "old answer", "new"]]
    assert [m.content for m in model.requests[0].messages] == ["Be brief.", "new"]
    assert [m.content for m in model.requests[1].messages] == ["Be brief.", "new", "", "metric"]


async def test_options_in_session_mode_reach_the_named_agent() -> None:
    tree, first, second = two_agents()
    runner = rk.Runner(tree, session_service=rk.InMemorySessionService())
    result = await runner.invoke(
        "go",
        user_id="u",
        session_id="s",
        agent_options={"first": {"model_options": {"seed": 7}, "tool_options": {"units": "x"}}},
    )
    assert [content(ev) for ev in result.events if ev.agent_name == "first"] == [
        "",
        "x",
        "first done",
    ]
    assert [r.options for r in first.requests] == [{"seed": 7}] * 2
    assert [r.options for r in second.requests] == [{}, {}]


class Keywords(rk.BaseAgent):
    """A custom agent that reports the keyword options its run received."""

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        got = {k: dict(v) for k, v in options.items() if k in ("model_options", "tool_options")}
        yield rk.AgentEvent.from_message(Message.assistant(json.dumps(got, sort_keys=True)))


async def test_a_custom_agent_receives_its_designated_options_as_keyword_options() -> None:
    tree = rk.SequentialAgent("seq", [Keywords("first"), Keywords("second")])
    result = await rk.Runner(tree).invoke(
        "go",
        agent_options={
            "first": rk.AgentOptions(model_options={"depth": 2}, tool_options={"dry": True}),
        },
    )
    # Only the named agent gets them; they do not leak through the workflow to the others.
    assert [content(ev) for ev in result.events] == [
        '{"model_options": {"depth": 2}, "tool_options": {"dry": true}}',
        "{}",
    ]
    designated = {"seq": rk.AgentOptions(model_options={"x": 1})}
    result = await rk.Runner(tree).invoke("go", agent_options=designated)
    assert [content(ev) for ev in result.events] == ["{}", "{}"]  # the workflow's stay its own
