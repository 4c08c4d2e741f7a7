"""Tracing: the spans a traced Runner records (names, nesting, GenAI attributes, status)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import relaykit as rk
from relaykit import telemetry
from relaykit.sessions import InMemorySessionService
from relaykit.telemetry import TracingPlugin


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    yield InMemorySpanExporter()
    telemetry.disable()


def provider_for(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def usage(text: str, tokens_in: int, tokens_out: int, *calls: rk.ToolCall) -> rk.Message:
    return rk.Message(
        "assistant",
        text,
        list(calls),
        metadata={"usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}},
    )


@rk.tool
def lookup(order: str) -> str:
    """Look up an order.

    Args:
        order: the order number.
    """
    return f"order {order} shipped"


def tree(spans: tuple[ReadableSpan, ...]) -> list[tuple[str, str | None]]:
    """(span name, parent span name) in the order the spans started."""
    by_id = {s.context.span_id: s.name for s in spans if s.context is not None}
    ordered = sorted(spans, key=lambda s: s.start_time or 0)
    return [(s.name, by_id.get(s.parent.span_id) if s.parent else None) for s in ordered]


def named(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_run_with_a_transfer_and_a_tool_call_is_a_span_tree(
    exporter: InMemorySpanExporter,
) -> None:
    telemetry.enable(provider_for(exporter))
    billing = rk.ChatModelAgent(
        "billing",
        model=rk.ScriptedModel(
            [
                usage("", 20, 5, rk.ToolCall("call-7", "lookup", '{"order": "9"}')),
                usage("Shipped.", 30, 3),
            ],
            name="billing-model",
        ),
        tools=[lookup],
    )
    transfer = rk.ToolCall("t1", "transfer_to_agent", '{"agent_name": "billing"}')
    triage = rk.set_sub_agents(
        rk.ChatModelAgent(
            "triage", model=rk.ScriptedModel([usage("", 10, 2, transfer)], name="triage-model")
        ),
        [billing],
    )
    result = await rk.Runner(triage).invoke("where is order 9?")
    assert result.output is not None and result.output.content == "Shipped."

    spans = exporter.get_finished_spans()
    assert tree(spans) == [
        ("invoke_agent triage", None),
        ("invoke_agent triage", "invoke_agent triage"),
        ("chat triage-model", "invoke_agent triage"),
        ("invoke_agent billing", "invoke_agent triage"),
        ("chat billing-model", "invoke_agent billing"),
        ("execute_tool lookup", "invoke_agent billing"),
        ("chat billing-model", "invoke_agent billing"),
    ]
    root = min(spans, key=lambda s: s.start_time or 0)
    agent_triage = next(s for s in spans if s.name == "invoke_agent triage" and s is not root)
    # The transfer target is a sibling of the transferring agent, under the invocation.
    assert named(spans, "invoke_agent billing").parent == root.context
    invocation_id = attrs(root)["relaykit.invocation_id"]
    assert attrs(root)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(root)["gen_ai.agent.name"] == "triage"
    assert "relaykit.resumed" not in attrs(root)
    assert attrs(agent_triage)["relaykit.transfer.to"] == "billing"
    assert [e.name for e in agent_triage.events] == ["transfer"]
    assert attrs(named(spans, "invoke_agent billing")) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "billing",
        "relaykit.invocation_id": invocation_id,
        "relaykit.run_path": "triage/billing",
    }
    chats = [s for s in spans if s.name == "chat billing-model"]
    assert [
        (attrs(c)["gen_ai.usage.input_tokens"], attrs(c)["gen_ai.usage.output_tokens"])
        for c in sorted(chats, key=lambda s: s.start_time or 0)
    ] == [(20, 5), (30, 3)]
    assert attrs(chats[0])["gen_ai.request.model"] == "billing-model"
    assert attrs(chats[0])["gen_ai.operation.name"] == "chat"
    assert attrs(named(spans, "execute_tool lookup")) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "call-7",
    }
    assert all(s.status.status_code is StatusCode.UNSET for s in spans)
    # No content in attributes: neither the question nor the tool's result.
    every_value = " ".join(str(v) for s in spans for v in attrs(s).values())
    assert "order 9" not in every_value and "shipped" not in every_value


async def test_a_streamed_reply_ends_its_chat_span_with_its_usage(
    exporter: InMemorySpanExporter,
) -> None:
    agent = rk.ChatModelAgent("echo", model=rk.ScriptedModel([usage("Hi!", 4, 1)]))
    runner = rk.Runner(
        agent, streaming=True, plugins=[TracingPlugin(provider_for(exporter), root=agent)]
    )
    events = [ev async for ev in runner.query("hi")]
    assert events[0].output is not None and events[0].output.stream is not None
    await events[0].output.stream.collect()

    spans = exporter.get_finished_spans()
    chat = named(spans, "chat scripted")
    assert (
        attrs(chat)["gen_ai.usage.input_tokens"],
        attrs(chat)["gen_ai.usage.output_tokens"],
    ) == (
        4,
        1,
    )
    assert len(spans) == 3


async def test_a_parallel_workflow_nests_each_branch_under_it(
    exporter: InMemorySpanExporter,
) -> None:
    branches = [
        rk.ChatModelAgent(n, model=rk.ScriptedModel([rk.Message.assistant(n)]))
        for n in ("left", "right")
    ]
    both = rk.ParallelAgent("both", branches)
    await rk.Runner(both, plugins=[TracingPlugin(provider_for(exporter), root=both)]).invoke("go")

    parents = dict(tree(exporter.get_finished_spans()))
    assert parents["invoke_agent left"] == "invoke_agent both"
    assert parents["invoke_agent right"] == "invoke_agent both"
    assert parents["chat scripted"] in {"invoke_agent left", "invoke_agent right"}


async def test_an_agent_error_sets_the_status_to_error(exporter: InMemorySpanExporter) -> None:
    failing = rk.ChatModelAgent("broken", model=rk.ScriptedModel([TimeoutError("secret detail")]))
    runner = rk.Runner(failing, plugins=[TracingPlugin(provider_for(exporter), root=failing)])
    events = [ev async for ev in runner.query("hi")]
    assert events[-1].error is not None

    spans = exporter.get_finished_spans()
    assert [s.name for s in spans].count("invoke_agent broken") == 2
    assert {s.name for s in spans} == {"invoke_agent broken", "chat scripted"}
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "TimeoutError"
        assert attrs(span)["error.type"] == "TimeoutError"
        assert "secret" not in str(attrs(span))


@rk.tool
def approve(ctx: rk.ToolContext) -> str:
    """Ask for approval."""
    if not ctx.is_resume_target:
        raise rk.ToolInterrupt("approve?")
    return "approved"


def desk() -> rk.ChatModelAgent:
    call = rk.ToolCall("a1", "approve", "{}")
    return rk.ChatModelAgent(
        "desk",
        model=rk.ScriptedModel([rk.Message.assistant("", [call]), usage("Approved.", 7, 2)]),
        tools=[approve],
    )


async def test_a_resumed_session_invocation_is_marked_resumed(
    exporter: InMemorySpanExporter,
) -> None:
    agent = desk()
    plugin = TracingPlugin(provider_for(exporter), root=agent)
    runner = rk.Runner(agent, session_service=InMemorySessionService(), plugins=[plugin])
    paused = await runner.invoke("pay", user_id="u", session_id="s")
    assert paused.interrupt is not None
    first = exporter.get_finished_spans()
    exporter.clear()
    point = paused.interrupt.contexts[0].id
    done = await runner.invoke_resume(user_id="u", session_id="s", targets={point: True})
    assert done.output is not None and done.output.content == "Approved."

    roots = [s for s in first if s.parent is None]
    assert len(roots) == 1 and attrs(roots[0])["relaykit.interrupted"] is True
    assert attrs(named(first, "execute_tool approve"))["gen_ai.tool.call.id"] == "a1"
    second = exporter.get_finished_spans()
    (root,) = [s for s in second if s.parent is None]
    assert attrs(root)["relaykit.resumed"] is True
    assert attrs(root)["relaykit.invocation_id"] == attrs(roots[0])["relaykit.invocation_id"]
    parents = dict(tree(second))
    assert parents["execute_tool approve"] == "invoke_agent desk"
    assert parents["chat scripted"] == "invoke_agent desk"
    assert attrs(named(second, "chat scripted"))["gen_ai.usage.input_tokens"] == 7


async def test_a_checkpoint_resume_is_traced_as_a_resumed_invocation(
    exporter: InMemorySpanExporter,
) -> None:
    agent = desk()
    telemetry.enable(provider_for(exporter))
    runner = rk.Runner(agent, checkpoint_store=rk.InMemoryCheckpointStore())
    paused = await runner.invoke("pay")
    assert paused.interrupt is not None and paused.checkpoint_id is not None
    exporter.clear()
    point = paused.interrupt.contexts[0].id
    await runner.invoke_resume(paused.checkpoint_id, targets={point: True})

    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.parent is None]
    assert root.name == "invoke_agent desk" and attrs(root)["relaykit.resumed"] is True
    assert {n for n, p in tree(spans) if p == "invoke_agent desk"} >= {"chat scripted"}


async def test_the_environment_variable_turns_tracing_on(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = rk.ChatModelAgent("a", model=rk.ScriptedModel([rk.Message.assistant("ok")]))
    assert not any(isinstance(p, TracingPlugin) for p in rk.Runner(agent).plugins)
    monkeypatch.setenv("RELAYKIT_TRACING", "1")
    assert [type(p) for p in rk.Runner(agent).plugins] == [TracingPlugin]
    mine = TracingPlugin(provider_for(exporter))
    assert rk.Runner(agent, plugins=[mine]).plugins == (mine,)  # not twice
    await rk.Runner(agent, plugins=[mine]).invoke("hi")
    # Without a root agent, the invocation span is named after the first agent.
    assert [s.name for s in exporter.get_finished_spans()][-1] == "invoke_agent a"


def test_tracing_off_records_nothing_and_imports_no_opentelemetry() -> None:
    code = (
        "import asyncio, sys, relaykit as rk\n"
        "agent = rk.ChatModelAgent('a', model=rk.ScriptedModel([rk.Message.assistant('ok')]))\n"
        "runner = rk.Runner(agent)\n"
        "asyncio.run(runner.invoke('hi'))\n"
        "print(len(runner.plugins), any(m.startswith('opentelemetry') for m in sys.modules))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "RELAYKIT_TRACING"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    )
    assert done.stdout.split() == ["0", "False"]
