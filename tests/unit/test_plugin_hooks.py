"""The plugins' agent, model and tool hooks (D12, D25) on real trees.

The runs are built as the Runner builds them: the root's flow agent runs with a ``RunContext``
whose ``options.invocation`` carries the plugins (``run`` and ``pause_and_resume`` below), so
the hooks are tested without the run-level hooks of the Runner.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

import relaykit as rk
from relaykit._invocation import Invocation
from relaykit.checkpoints.document import Checkpoint
from relaykit.context import RunOptions
from relaykit.errors import PluginError, ToolError
from relaykit.plugins import InvocationContext, Plugin, PluginManager
from relaykit.resume import ResumeState

Key = tuple[Any, ...]


class Recorder(Plugin):
    """Logs every agent, model and tool hook call as a tuple and answers from ``returns`` (by
    ``(hook, agent)`` or ``(hook, agent, tool)``), raising what ``raises`` names instead."""

    def __init__(
        self,
        log: list[Key],
        returns: dict[Key, Any] | None = None,
        raises: dict[Key, BaseException] | None = None,
        name: str = "recorder",
    ) -> None:
        super().__init__(name)
        self.log = log
        self.returns = returns or {}
        self.raises = raises or {}
        self.contexts: list[InvocationContext] = []

    async def _hook(self, ctx: InvocationContext, entry: Key, key: Key) -> Any:
        self.contexts.append(ctx)
        self.log.append(entry)
        if key in self.raises:
            raise self.raises[key]
        return self.returns.get(key)

    async def before_agent(self, ctx: InvocationContext, agent_name: str) -> rk.Message | None:
        key = ("before_agent", agent_name)
        result: rk.Message | None = await self._hook(ctx, key, key)
        return result

    async def after_agent(self, ctx: InvocationContext, agent_name: str) -> rk.Message | None:
        key = ("after_agent", agent_name)
        result: rk.Message | None = await self._hook(ctx, key, key)
        return result

    async def before_model(
        self, ctx: InvocationContext, agent_name: str, request: rk.ModelRequest
    ) -> rk.Message | None:
        key = ("before_model", agent_name)
        result: rk.Message | None = await self._hook(ctx, key, key)
        return result

    async def after_model(
        self, ctx: InvocationContext, agent_name: str, response: rk.Message
    ) -> rk.Message | None:
        key = ("after_model", agent_name)
        result: rk.Message | None = await self._hook(ctx, (*key, response.content), key)
        return result

    async def before_tool(
        self, ctx: InvocationContext, agent_name: str, tool_name: str, arguments: dict[str, Any]
    ) -> object | None:
        key = ("before_tool", agent_name, tool_name)
        value: object | None = await self._hook(ctx, key, key)
        return value

    async def after_tool(
        self,
        ctx: InvocationContext,
        agent_name: str,
        tool_name: str,
        arguments: dict[str, Any],
        result: object,
    ) -> object | None:
        key = ("after_tool", agent_name, tool_name)
        value: object | None = await self._hook(ctx, (*key, result), key)
        return value


def invocation(*plugins: Plugin) -> Invocation:
    return Invocation(InvocationContext("app", "u", "s", "inv"), PluginManager(list(plugins)))


async def run(
    agent: rk.Agent, text: str, inv: Invocation, *, streaming: bool = False
) -> list[rk.AgentEvent]:
    """Run ``agent`` (as the root of its tree) on ``text`` with the plugins of ``inv``."""
    root = rk.as_flow_agent(agent)
    ctx = rk.RunContext(options=RunOptions())
    ctx.options.invocation = inv
    return [ev async for ev in root.run(ctx, rk.AgentInput([rk.Message.user(text)], streaming))]


async def pause_and_resume(
    agent: rk.Agent, text: str, inv: Invocation, answer: Any
) -> tuple[list[rk.AgentEvent], list[rk.AgentEvent]]:
    """Run until the run interrupts, then resume every waiting point with ``answer``."""
    root = rk.as_flow_agent(agent)
    ctx = rk.RunContext(options=RunOptions())
    ctx.options.invocation = inv
    first = [ev async for ev in root.run(ctx, rk.AgentInput([rk.Message.user(text)]))]
    action = first[-1].action
    assert action is not None and action.interrupted is not None, first[-1]
    interrupted = action.interrupted
    cp = Checkpoint.of(ctx, interrupted)
    targets = {point.id: answer for point in interrupted.contexts}
    resumed = rk.RunContext(
        root_input=cp.root_input,
        history=cp.history(),
        options=RunOptions(),
        resume_state=ResumeState.of(interrupted, targets),
    )
    resumed.options.invocation = inv
    second = [ev async for ev in root.resume(resumed, cp.resume_info(interrupted))]
    return first, second


def summary(events: Sequence[rk.AgentEvent]) -> list[tuple[str, str]]:
    """``(agent, what)``: the message text, ``!exit``, ``->target``, ``!interrupt`` or
    ``error:<type>``."""
    out: list[tuple[str, str]] = []
    for ev in events:
        a = ev.action
        if ev.error is not None:
            what = f"error:{type(ev.error).__name__}"
        elif a is not None and a.interrupted is not None:
            what = "!interrupt"
        elif a is not None and a.transfer_to_agent is not None:
            what = f"->{a.transfer_to_agent.dest_agent_name}"
        elif ev.output is not None and ev.output.message is not None:
            what = ev.output.message.content
            if a is not None and a.exit:
                what += " !exit"
        elif a is not None and a.exit:
            what = "!exit"
        else:
            what = "?"
        out.append((ev.agent_name, what))
    return out


def say(text: str) -> rk.Message:
    return rk.Message.assistant(text)


def calls(name: str, args: dict[str, Any] | None = None, call_id: str = "c1") -> rk.Message:
    return rk.Message.assistant("", [rk.ToolCall(call_id, name, json.dumps(args or {}))])


def transfer_to(dest: str) -> rk.Message:
    return calls("transfer_to_agent", {"agent_name": dest})


def llm(
    name: str, *script: rk.Message, tools: Sequence[rk.Tool] = (), **kw: Any
) -> rk.ChatModelAgent:
    return rk.ChatModelAgent(
        name, f"the {name} agent", model=rk.ScriptedModel(list(script)), tools=tools, **kw
    )


def requests_of(agent: rk.ChatModelAgent) -> list[rk.ModelRequest]:
    model = agent.model
    assert isinstance(model, rk.ScriptedModel)
    return model.requests


@rk.tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order} shipped"


class Boom(rk.BaseAgent):
    async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
        yield rk.AgentEvent.from_message(say("trying"))
        raise RuntimeError("boom")


class Asks(rk.BaseAgent):
    async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
        yield rk.interrupt(ctx, "ok?")


# -- agent hooks ------------------------------------------------------------------------------
async def test_hooks_run_in_order_around_every_agent_model_and_tool_call() -> None:
    log: list[Key] = []
    plugin = Recorder(log)
    billing = llm("billing", calls("lookup", {"order": "42"}), say("It shipped."), tools=[lookup])
    triage = rk.set_sub_agents(llm("triage", transfer_to("billing")), [billing])

    events = await run(triage, "where is order 42?", invocation(plugin))

    assert summary(events) == [
        ("triage", ""),
        ("triage", "->billing"),
        ("billing", ""),
        ("billing", "order 42 shipped"),
        ("billing", "It shipped."),
    ]
    # No tool hooks for the synthetic transfer_to_agent; after_agent(triage) before billing.
    assert log == [
        ("before_agent", "triage"),
        ("before_model", "triage"),
        ("after_model", "triage", ""),
        ("after_agent", "triage"),
        ("before_agent", "billing"),
        ("before_model", "billing"),
        ("after_model", "billing", ""),
        ("before_tool", "billing", "lookup"),
        ("after_tool", "billing", "lookup", "order 42 shipped"),
        ("before_model", "billing"),
        ("after_model", "billing", "It shipped."),
        ("after_agent", "billing"),
    ]
    assert {c.invocation_id for c in plugin.contexts} == {"inv"}


async def test_before_agent_message_is_the_agents_whole_answer() -> None:
    log: list[Key] = []
    closed = rk.Message.assistant("drafting is closed today")
    plugin = Recorder(log, returns={("before_agent", "draft"): closed})
    draft = llm("draft")  # an empty script: calling its model would fail the run
    review = llm("review", say("nothing to review"))
    pipe = rk.SequentialAgent("pipe", [draft, review])

    events = await run(pipe, "write", invocation(plugin))

    assert summary(events) == [
        ("draft", "drafting is closed today"),
        ("review", "nothing to review"),
    ]
    assert [s.agent_name for s in events[0].run_path] == ["pipe", "draft"]
    assert requests_of(draft) == []
    # Recorded in the history: the next agent reads it as context.
    seen = [m.content for m in requests_of(review)[0].messages]
    assert any("drafting is closed today" in text for text in seen), seen
    assert ("after_agent", "draft") not in log
    assert ("after_agent", "review") in log
    assert log[-1] == ("after_agent", "pipe")


async def test_after_agent_message_comes_before_the_transfer_target() -> None:
    log: list[Key] = []
    note = rk.Message.assistant("handing you over to billing")
    plugin = Recorder(log, returns={("after_agent", "triage"): note})
    billing = llm("billing", say("Billing here."))
    triage = rk.set_sub_agents(llm("triage", transfer_to("billing")), [billing])

    events = await run(triage, "refund?", invocation(plugin))

    assert summary(events) == [
        ("triage", ""),
        ("triage", "->billing"),
        ("triage", "handing you over to billing"),
        ("billing", "Billing here."),
    ]
    assert [s.agent_name for s in events[2].run_path] == ["triage"]
    seen = [m.content for m in requests_of(billing)[0].messages]
    assert any("handing you over to billing" in text for text in seen), seen


async def test_after_agent_message_of_a_plain_answer_is_the_last_event() -> None:
    plugin = Recorder([], returns={("after_agent", "helper"): say("(checked)")})
    events = await run(llm("helper", say("Hi.")), "hi", invocation(plugin))
    assert summary(events) == [("helper", "Hi."), ("helper", "(checked)")]


@pytest.mark.parametrize("agent", [Boom("worker", "fails"), Asks("worker", "asks")])
async def test_after_agent_does_not_run_after_an_error_or_an_interrupt(agent: rk.Agent) -> None:
    log: list[Key] = []
    plugin = Recorder(log, returns={("after_agent", "worker"): say("never")})
    events = await run(agent, "go", invocation(plugin))
    assert summary(events)[-1][1] in ("error:RuntimeError", "!interrupt")
    assert log == [("before_agent", "worker")]


async def test_an_exit_stays_the_agents_last_event() -> None:
    log: list[Key] = []
    plugin = Recorder(
        log,
        returns={
            ("after_agent", "draft"): say("draft noted"),
            ("after_agent", "pipe"): say("pipe noted"),
        },
    )
    draft = llm("draft", calls("exit", {"final_result": "final text"}), exit_tool=True)
    review = llm("review")  # must not run: the exit ends the workflow
    pipe = rk.SequentialAgent("pipe", [draft, review])

    events = await run(pipe, "write", invocation(plugin))

    assert summary(events) == [
        ("draft", ""),
        ("draft", "draft noted"),
        ("draft", "final text !exit"),
        ("pipe", "pipe noted"),
        ("pipe", "!exit"),
    ]
    assert ("before_agent", "review") not in log
    assert requests_of(review) == []


async def test_an_exit_followed_by_more_events_is_delivered_in_place() -> None:
    class ExitsThenTalks(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
            yield rk.AgentEvent.exit()
            yield rk.AgentEvent.from_message(say("still here"))

    plugin = Recorder([], returns={("after_agent", "odd"): say("noted")})
    events = await run(ExitsThenTalks("odd", "odd"), "go", invocation(plugin))
    assert summary(events) == [("odd", "!exit"), ("odd", "still here"), ("odd", "noted")]


async def test_before_agent_raising_is_the_agents_error_event() -> None:
    log: list[Key] = []
    plugin = Recorder(log, raises={("before_agent", "billing"): ValueError("closed")})
    billing = llm("billing")
    triage = rk.set_sub_agents(llm("triage", transfer_to("billing")), [billing])

    events = await run(triage, "refund?", invocation(plugin))

    last = events[-1]
    assert last.agent_name == "billing"
    assert [s.agent_name for s in last.run_path] == ["triage", "billing"]
    assert isinstance(last.error, PluginError)
    assert last.error.hook == "before_agent" and last.error.plugin_name == "recorder"
    assert isinstance(last.error.__cause__, ValueError)
    assert requests_of(billing) == []
    assert ("after_agent", "billing") not in log


async def test_after_agent_raising_fails_the_agent_and_stops_its_transfer() -> None:
    plugin = Recorder([], raises={("after_agent", "triage"): ValueError("audit failed")})
    billing = llm("billing")
    triage = rk.set_sub_agents(llm("triage", transfer_to("billing")), [billing])

    events = await run(triage, "refund?", invocation(plugin))

    assert summary(events) == [
        ("triage", ""),
        ("triage", "->billing"),
        ("triage", "error:PluginError"),
    ]
    assert requests_of(billing) == []  # D1: an error does not transfer


async def test_hook_returning_a_non_message_is_a_clear_error() -> None:
    plugin = Recorder([], returns={("before_agent", "helper"): "hello"})
    events = await run(llm("helper"), "hi", invocation(plugin))
    error = events[-1].error
    assert isinstance(error, PluginError)
    assert "before_agent returned a str for agent 'helper'" in str(error)


async def test_workflow_children_and_agent_tools_get_agent_hooks() -> None:
    log: list[Key] = []
    plugin = Recorder(log)
    researcher = llm("researcher", say("Paris has 2.1 million inhabitants."))
    lead = llm(
        "lead",
        calls("researcher", {"request": "Paris?"}),
        say("About 2.1 million."),
        tools=[rk.AgentTool(researcher)],
    )
    pipe = rk.SequentialAgent("pipe", [lead])

    events = await run(pipe, "How many people live in Paris?", invocation(plugin))

    assert summary(events)[-1] == ("lead", "About 2.1 million.")
    agent_hooks = [entry for entry in log if entry[0].endswith("_agent")]
    assert agent_hooks == [
        ("before_agent", "pipe"),
        ("before_agent", "lead"),
        ("before_agent", "researcher"),
        ("after_agent", "researcher"),
        ("after_agent", "lead"),
        ("after_agent", "pipe"),
    ]
    assert ("before_tool", "lead", "researcher") in log
    assert ("before_model", "researcher") in log


async def test_a_deterministic_wrapper_around_a_flow_agent_runs_the_hooks_once() -> None:
    log: list[Key] = []
    plugin = Recorder(log, returns={("after_agent", "worker"): say("worker done")})
    worker = rk.with_deterministic_transfer(
        rk.as_flow_agent(llm("worker", say("draft ready"))), ["reviewer"]
    )
    root = rk.set_sub_agents(worker, [llm("reviewer", say("looks good"))])

    events = await run(root, "go", invocation(plugin))

    assert [e for e in log if e[0].endswith("_agent")] == [
        ("before_agent", "worker"),
        ("after_agent", "worker"),
        ("before_agent", "reviewer"),
        ("after_agent", "reviewer"),
    ]
    assert summary(events)[-3:] == [
        ("worker", "->reviewer"),
        ("worker", "worker done"),
        ("reviewer", "looks good"),
    ]


async def test_a_resumed_agent_runs_after_agent_but_not_before_agent() -> None:
    @rk.tool
    def approve(ctx: rk.ToolContext, amount: int) -> str:
        """Ask for approval."""
        if not ctx.is_resume_target:
            raise rk.ToolInterrupt({"question": f"pay {amount}?"})
        return "approved" if ctx.resume_data else "refused"

    log: list[Key] = []
    plugin = Recorder(log)
    desk = llm("desk", calls("approve", {"amount": 10}), say("Paid."), tools=[approve])
    root = rk.set_sub_agents(llm("front", transfer_to("desk")), [desk])

    first, second = await pause_and_resume(root, "pay 10", invocation(plugin), True)

    assert summary(first)[-1] == ("desk", "!interrupt")
    assert summary(second) == [("desk", "approved"), ("desk", "Paid.")]
    paused_at = log.index(("before_tool", "desk", "approve")) + 1
    # The pause: no after_tool and no after_agent for the interrupted call and agent. The
    # resume: no before_agent (nor before_tool) again; after_tool and after_agent on completion.
    assert log[paused_at:] == [
        ("after_tool", "desk", "approve", "approved"),
        ("before_model", "desk"),
        ("after_model", "desk", "Paid."),
        ("after_agent", "desk"),
    ]


# -- model hooks ------------------------------------------------------------------------------
async def test_before_model_reply_replaces_the_model_call() -> None:
    log: list[Key] = []
    plugin = Recorder(log, returns={("before_model", "helper"): say("cached answer")})
    helper = llm("helper")  # an empty script: the model must not be called

    events = await run(helper, "hi", invocation(plugin), streaming=True)

    assert summary(events) == [("helper", "cached answer")]
    assert events[0].output is not None and events[0].output.stream is None
    assert requests_of(helper) == []
    assert ("after_model", "helper", "cached answer") not in log


async def test_after_model_sees_the_whole_reply_and_replaces_it_without_streaming() -> None:
    log: list[Key] = []
    plugin = Recorder(log, returns={("after_model", "helper"): say("[redacted]")})
    helper = llm("helper", say("the secret is 42"))

    events = await run(helper, "secret?", invocation(plugin), streaming=True)

    assert summary(events) == [("helper", "[redacted]")]
    out = events[0].output
    assert out is not None and out.stream is None  # not streamed while after_model runs
    assert ("after_model", "helper", "the secret is 42") in log


async def test_replies_stream_when_no_plugin_overrides_after_model() -> None:
    class Counter(Plugin):
        async def before_model(
            self, ctx: InvocationContext, agent_name: str, request: rk.ModelRequest
        ) -> rk.Message | None:
            return None

    events = await run(llm("helper", say("streamed")), "hi", invocation(Counter()), streaming=True)
    out = events[0].output
    assert out is not None and out.stream is not None
    assert (await out.stream.collect()).content == "streamed"


async def test_a_replaced_reply_with_tool_calls_runs_them_with_unique_ids() -> None:
    double = rk.Message.assistant(
        "",
        [
            rk.ToolCall("x", "lookup", '{"order": "1"}'),
            rk.ToolCall("x", "lookup", '{"order": "2"}'),
        ],
    )

    class Rewrite(Plugin):
        async def after_model(
            self, ctx: InvocationContext, agent_name: str, response: rk.Message
        ) -> rk.Message | None:
            return double if response.content == "let me think" else None

    helper = llm("helper", say("let me think"), say("Both shipped."), tools=[lookup])
    events = await run(helper, "orders?", invocation(Rewrite()))

    tool_messages = [ev.output.message for ev in events if ev.output and ev.output.role == "tool"]
    assert sorted(m.content for m in tool_messages if m) == [
        "order 1 shipped",
        "order 2 shipped",
    ]
    assert len({m.tool_call_id for m in tool_messages if m}) == 2  # D24
    assert summary(events)[-1] == ("helper", "Both shipped.")


@pytest.mark.parametrize("hook", ["before_model", "after_model"])
async def test_a_model_hook_raising_is_the_model_call_failing(hook: str) -> None:
    plugin = Recorder([], raises={(hook, "helper"): ValueError("quota")})
    events = await run(llm("helper", say("never seen")), "hi", invocation(plugin))
    assert summary(events) == [("helper", "error:PluginError")]
    error = events[0].error
    assert isinstance(error, PluginError) and error.hook == hook


# -- tool hooks -------------------------------------------------------------------------------
async def test_before_tool_value_replaces_the_call_and_after_tool_sees_it() -> None:
    ran: list[str] = []

    @rk.tool
    def charge(amount: int) -> str:
        """Charge the card."""
        ran.append("charge")
        return "charged"

    log: list[Key] = []
    plugin = Recorder(log, returns={("before_tool", "cashier", "charge"): {"dry_run": True}})
    cashier = llm("cashier", calls("charge", {"amount": 5}), say("Done."), tools=[charge])

    events = await run(cashier, "charge 5", invocation(plugin))

    assert ran == []
    assert summary(events)[1] == ("cashier", '{"dry_run": true}')
    assert ("after_tool", "cashier", "charge", {"dry_run": True}) in log


async def test_after_tool_replaces_the_result_and_before_tool_may_edit_arguments() -> None:
    class Audit(Plugin):
        async def before_tool(
            self, ctx: InvocationContext, agent_name: str, tool_name: str, arguments: dict[str, Any]
        ) -> object | None:
            arguments["order"] = arguments["order"].strip()
            return None

        async def after_tool(
            self,
            ctx: InvocationContext,
            agent_name: str,
            tool_name: str,
            arguments: dict[str, Any],
            result: object,
        ) -> object | None:
            return f"{result} (audited)"

    helper = llm("helper", calls("lookup", {"order": " 7 "}), say("ok"), tools=[lookup])
    events = await run(helper, "order 7?", invocation(Audit()))
    assert summary(events)[1] == ("helper", "order 7 shipped (audited)")


async def test_a_tool_error_from_a_hook_goes_back_to_the_model() -> None:
    plugin = Recorder([], raises={("before_tool", "helper", "lookup"): ToolError("not allowed")})
    helper = llm("helper", calls("lookup", {"order": "1"}), say("Sorry."), tools=[lookup])

    events = await run(helper, "order 1?", invocation(plugin))

    assert summary(events) == [
        ("helper", ""),
        ("helper", "error: not allowed"),
        ("helper", "Sorry."),
    ]
    assert requests_of(helper)[1].messages[-1].content == "error: not allowed"


async def test_another_hook_failure_is_the_tool_failing() -> None:
    plugin = Recorder([], raises={("after_tool", "helper", "lookup"): KeyError("gone")})
    helper = llm("helper", calls("lookup", {"order": "1"}), say("never"), tools=[lookup])

    events = await run(helper, "order 1?", invocation(plugin))

    assert summary(events) == [("helper", ""), ("helper", "error:PluginError")]
    error = events[-1].error
    assert isinstance(error, PluginError) and error.hook == "after_tool"
    assert any("raised by tool 'lookup'" in note for note in getattr(error, "__notes__", []))


async def test_the_exit_tool_gets_tool_hooks() -> None:
    log: list[Key] = []
    helper = llm("helper", calls("exit", {"final_result": "bye"}), exit_tool=True)
    await run(helper, "bye", invocation(Recorder(log)))
    assert ("before_tool", "helper", "exit") in log
    assert ("after_tool", "helper", "exit", "bye") in log


async def test_without_plugins_the_invocation_changes_nothing() -> None:
    billing = llm("billing", say("Billing here."))
    triage = rk.set_sub_agents(llm("triage", transfer_to("billing")), [billing])
    events = await run(triage, "refund?", invocation())
    assert summary(events) == [
        ("triage", ""),
        ("triage", "->billing"),
        ("billing", "Billing here."),
    ]


async def test_a_resumed_workflow_runs_after_agent_for_itself_and_its_children() -> None:
    @rk.tool
    def approve(ctx: rk.ToolContext) -> str:
        """Ask for approval."""
        if not ctx.is_resume_target:
            raise rk.ToolInterrupt("approve?")
        return "approved"

    log: list[Key] = []
    desk = llm("desk", calls("approve"), say("Approved."), tools=[approve])
    pipe = rk.SequentialAgent("pipe", [desk, llm("closer", say("Closed."))])

    _, second = await pause_and_resume(pipe, "go", invocation(Recorder(log)), True)

    paused_at = log.index(("before_tool", "desk", "approve")) + 1
    assert [e for e in log[paused_at:] if e[0].endswith("_agent")] == [
        ("after_agent", "desk"),
        ("before_agent", "closer"),
        ("after_agent", "closer"),
        ("after_agent", "pipe"),
    ]
    assert summary(second)[-1] == ("closer", "Closed.")


# -- through the Runner -----------------------------------------------------------------------
class RunLog(Recorder):
    """A Recorder that also logs the run-level hooks."""

    async def before_run(self, ctx: InvocationContext) -> rk.Message | None:
        self.log.append(("before_run",))
        return None

    async def after_run(self, ctx: InvocationContext) -> None:
        self.log.append(("after_run",))


async def test_runner_plugins_wrap_the_agent_model_and_tool_hooks() -> None:
    log: list[Key] = []
    plugin = RunLog(log, returns={("after_agent", "billing"): say("(billing checked)")})
    billing = llm("billing", calls("lookup", {"order": "9"}), say("Shipped."), tools=[lookup])
    triage = rk.set_sub_agents(llm("triage", transfer_to("billing")), [billing])

    result = await rk.Runner(triage, plugins=[plugin]).invoke("order 9?")

    assert summary(result.events)[-2:] == [
        ("billing", "Shipped."),
        ("billing", "(billing checked)"),
    ]
    assert result.output is not None and result.output.content == "(billing checked)"
    assert log[0] == ("before_run",) and log[-1] == ("after_run",)
    assert [e for e in log if e[0].endswith("_agent")] == [
        ("before_agent", "triage"),
        ("after_agent", "triage"),
        ("before_agent", "billing"),
        ("after_agent", "billing"),
    ]
    assert ("after_tool", "billing", "lookup", "order 9 shipped") in log


async def test_runner_session_mode_stores_hook_messages_with_the_session() -> None:
    from relaykit.sessions import InMemorySessionService

    closed = rk.Message.assistant("the shop is closed")
    plugin = Recorder([], returns={("before_agent", "shop"): closed})
    sessions = InMemorySessionService()
    shop = llm("shop")  # never called
    runner = rk.Runner(shop, app_name="app", session_service=sessions, plugins=[plugin])

    result = await runner.invoke("open?", user_id="u", session_id="s")

    assert summary(result.events) == [("shop", "the shop is closed")]
    session = await sessions.get_session("app", "u", "s")
    assert session is not None
    assert [(e.author, e.message.content) for e in session.events if e.message] == [
        ("user", "open?"),
        ("shop", "the shop is closed"),
    ]
