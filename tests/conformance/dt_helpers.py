"""Helpers for the deterministic-transfer conformance tests (DT-01 … DT-15).

Scripted custom agents whose behaviour is a small async-generator function, and compact
descriptions of events so that tests can compare exact event orders.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from contextlib import aclosing
from typing import Any

import relaykit as rk

RunFn = Callable[["ScriptedAgent", rk.RunContext, rk.AgentInput], AsyncIterator[rk.AgentEvent]]
ResumeFn = Callable[
    ["ResumableScriptedAgent", rk.RunContext, rk.ResumeInfo], AsyncIterator[rk.AgentEvent]
]


class ScriptedAgent(rk.BaseAgent):
    """A non-resumable custom agent: ``run`` delegates to ``script(agent, ctx, input)``.

    Every run records the messages the agent received (``inputs``) and its run path.
    """

    def __init__(self, name: str, script: RunFn | None = None, *, description: str = "") -> None:
        super().__init__(name, description)
        self._script = script
        self.inputs: list[list[rk.Message]] = []
        self.run_paths: list[tuple[str, ...]] = []

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.inputs.append(list(input.messages))
        self.run_paths.append(names(ctx.run_path))
        if self._script is None:
            yield say(f"{self.name} done")
            return
        async with aclosing(self._script(self, ctx, input)) as events:
            async for ev in events:
                yield ev


class ResumableScriptedAgent(ScriptedAgent):
    """A resumable custom agent; ``resume`` delegates to ``on_resume(agent, ctx, info)``."""

    def __init__(
        self,
        name: str,
        script: RunFn | None = None,
        on_resume: ResumeFn | None = None,
        *,
        description: str = "",
    ) -> None:
        super().__init__(name, script, description=description)
        self._on_resume = on_resume
        self.resume_infos: list[rk.ResumeInfo] = []

    async def resume(
        self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.resume_infos.append(info)
        if self._on_resume is None:
            yield say(f"{self.name} resumed")
            return
        async with aclosing(self._on_resume(self, ctx, info)) as events:
            async for ev in events:
                yield ev


def say(text: str) -> rk.AgentEvent:
    """An assistant text event."""
    return rk.AgentEvent.from_message(rk.Message.assistant(text))


def transfer_pair(dest: str) -> list[rk.AgentEvent]:
    """What an LLM's transfer looks like: the call message and the tool event with the action."""
    call, result = rk.transfer_messages(dest)
    tool_ev = rk.AgentEvent.from_message(result, role="tool", tool_name=result.tool_name)
    tool_ev.action = rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction(dest))
    return [rk.AgentEvent.from_message(call), tool_ev]


def texts(*items: str) -> RunFn:
    """A script that says each text in turn."""

    async def script(
        agent: ScriptedAgent, ctx: rk.RunContext, input: rk.AgentInput
    ) -> AsyncIterator[rk.AgentEvent]:
        for item in items:
            yield say(item)

    return script


def names(run_path: Iterable[rk.RunStep]) -> tuple[str, ...]:
    """A run path as a tuple of agent names."""
    return tuple(step.agent_name for step in run_path)


def transfer_dest(ev: rk.AgentEvent) -> str | None:
    """The destination of the event's transfer action, if any."""
    if ev.action is None or ev.action.transfer_to_agent is None:
        return None
    return ev.action.transfer_to_agent.dest_agent_name


def describe(ev: rk.AgentEvent) -> str:
    """A compact, comparable description: ``<agent> <what>``.

    ``what`` is ``say <text>``, ``call -> <dest>`` (an assistant message calling
    ``transfer_to_agent``), ``transfer -> <dest>`` (the tool event carrying the action),
    ``error``, ``interrupt``, ``exit``, ``stream`` or ``other``.
    """
    who = ev.agent_name
    if ev.error is not None:
        return f"{who} error"
    action = ev.action
    if action is not None and action.interrupted is not None:
        return f"{who} interrupt"
    if action is not None and action.exit:
        return f"{who} exit"
    dest = transfer_dest(ev)
    if dest is not None:
        return f"{who} transfer -> {dest}"
    out = ev.output
    if out is not None and out.stream is not None:
        return f"{who} stream"
    msg = out.message if out is not None else None
    if msg is not None and msg.tool_calls:
        dests = ",".join(
            json.loads(c.arguments).get("agent_name", "?")
            if c.name == "transfer_to_agent"
            else c.name
            for c in msg.tool_calls
        )
        return f"{who} call -> {dests}"
    if msg is not None:
        return f"{who} say {msg.content}"
    return f"{who} other"


def describe_all(events: Iterable[rk.AgentEvent]) -> list[str]:
    """``describe`` for each event."""
    return [describe(ev) for ev in events]


async def collect(events: AsyncIterable[rk.AgentEvent]) -> list[rk.AgentEvent]:
    """Read an event stream to its end."""
    return [ev async for ev in events]


def contents(messages: Iterable[rk.Message]) -> list[tuple[str, str]]:
    """(role, content) of each message, for exact comparisons of agent inputs."""
    return [(m.role, m.content) for m in messages]


def rewritten_transfer(agent: str, dest: str) -> list[tuple[str, str]]:
    """The two user-role context lines another agent reads for ``agent``'s transfer (D2)."""
    args = json.dumps({"agent_name": dest})
    return [
        (
            "user",
            f"For context: [{agent}] called tool: `transfer_to_agent` with arguments: {args}.",
        ),
        (
            "user",
            f"For context: [{agent}] `transfer_to_agent` tool returned result: "
            f"successfully transferred to agent [{dest}].",
        ),
    ]


def said(agent: str, text: str) -> tuple[str, str]:
    """The context line another agent reads for ``agent``'s text."""
    return ("user", f"For context: [{agent}] said: {text}.")


def assert_transfer_pair(call_ev: rk.AgentEvent, tool_ev: rk.AgentEvent, dest: str) -> None:
    """The exact shape of a deterministic transfer pair (DT-01, D2)."""
    assert call_ev.error is None and tool_ev.error is None
    assert call_ev.output is not None and tool_ev.output is not None
    call = call_ev.output.message
    result = tool_ev.output.message
    assert call is not None and result is not None
    assert call.role == "assistant"
    assert call_ev.output.role == "assistant"
    assert call.content == ""
    assert len(call.tool_calls) == 1
    tool_call = call.tool_calls[0]
    assert tool_call.name == "transfer_to_agent"
    assert tool_call.arguments == json.dumps({"agent_name": dest})
    assert tool_call.id
    assert call_ev.action is None or call_ev.action.transfer_to_agent is None
    assert result.role == "tool"
    assert tool_ev.output.role == "tool"
    assert result.content == f"successfully transferred to agent [{dest}]"
    assert result.tool_call_id == tool_call.id
    assert result.tool_name == "transfer_to_agent"
    assert tool_ev.output.tool_name == "transfer_to_agent"
    assert tool_ev.action is not None and tool_ev.action.transfer_to_agent is not None
    assert tool_ev.action.transfer_to_agent.dest_agent_name == dest
    assert tool_ev.action.interrupted is None and not tool_ev.action.exit


def error_text(ev: rk.AgentEvent) -> str:
    """The error message of an error event."""
    assert ev.error is not None, f"not an error event: {describe(ev)}"
    return str(ev.error)
