"""Helpers shared by the conformance tests of LLM agents (``ChatModelAgent`` driven by a
``ScriptedModel``): building scripts, running agents and reading events and model requests.

``collect`` and ``names`` are those of :mod:`tests.conformance.helpers`; ``action_kind`` reuses
its namesake but ignores an event's error (here an error shows in the summary's role).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import relaykit as rk
from tests.conformance import helpers as h
from tests.conformance.helpers import collect, names

__all__ = [
    "BaseApprovals",
    "Summary",
    "action_kind",
    "agent",
    "call",
    "calls",
    "chain",
    "collect",
    "contents",
    "errors",
    "interrupt_of",
    "names",
    "run",
    "say",
    "summarize",
    "tool_message",
    "tool_names",
    "transfer_call",
    "user_texts",
]

Summary = tuple[str, list[str], "str | None", "str | None", "str | None"]
"""``(agent, run path, role, text, action)`` — see :func:`summarize`."""

R = TypeVar("R")


# -- building scripts and agents ---------------------------------------------------------------
def call(name: str, args: Any = None, call_id: str = "c1") -> rk.ToolCall:
    """A tool call; ``args`` is JSON-encoded unless it is already a string."""
    text = args if isinstance(args, str) else json.dumps({} if args is None else args)
    return rk.ToolCall(call_id, name, text)


def calls(*tool_calls: rk.ToolCall, text: str = "") -> rk.Message:
    """An assistant message (with ``text``) making ``tool_calls``."""
    return rk.Message.assistant(text, list(tool_calls))


def say(text: str) -> rk.Message:
    """A plain assistant message."""
    return rk.Message.assistant(text)


def transfer_call(dest: str, call_id: str = "t1") -> rk.ToolCall:
    """A ``transfer_to_agent`` call to ``dest``."""
    return call("transfer_to_agent", {"agent_name": dest}, call_id)


def agent(
    name: str,
    script: Sequence[Any],
    *,
    description: str | None = None,
    instruction: str | None = None,
    **options: Any,
) -> tuple[rk.ChatModelAgent, rk.ScriptedModel]:
    """A ``ChatModelAgent`` over a ``ScriptedModel`` playing ``script``, and that model.
    The description and instruction default to ``"<name> desc"`` and ``"You are <name>."``."""
    model = rk.ScriptedModel(script)
    return rk.ChatModelAgent(
        name,
        description if description is not None else f"{name} desc",
        instruction if instruction is not None else f"You are {name}.",
        model=model,
        **options,
    ), model


async def run(root: rk.Agent, *texts: str, **options: Any) -> list[rk.AgentEvent]:
    """Every event of a ``Runner`` over ``root`` run on user messages ``texts``
    (``streaming`` goes to the runner, other options to ``run``)."""
    streaming = options.pop("streaming", False)
    runner = rk.Runner(root, streaming=streaming)
    return await collect(runner.run([rk.Message.user(t) for t in texts], **options))


class BaseApprovals(Generic[R]):
    """An interrupting tool ``approve(item)`` (``self.tool``): the first call interrupts with
    ``{"approve": item}`` and state ``{"item": item}``; on resume it returns
    ``<item>: <resume data>`` when targeted, else interrupts again with its saved state. Every
    call appends ``self.record(ctx, item)`` to ``self.calls`` first."""

    def __init__(self) -> None:
        self.calls: list[R] = []

        @rk.tool
        def approve(ctx: rk.ToolContext, item: str) -> str:
            """Ask a human to approve ``item``."""
            self.calls.append(self.record(ctx, item))
            if not ctx.was_interrupted:
                raise rk.ToolInterrupt({"approve": item}, state={"item": item})
            if not ctx.is_resume_target:
                raise rk.ToolInterrupt({"approve": item}, state=ctx.interrupt_state)
            return f"{item}: {ctx.resume_data}"

        self.tool = approve

    def record(self, ctx: rk.ToolContext, item: str) -> R:
        """What a call of the tool leaves in ``self.calls``."""
        raise NotImplementedError


# -- reading events ----------------------------------------------------------------------------
def action_kind(ev: rk.AgentEvent) -> str | None:
    """The kind of ``ev``'s action (``"interrupt"``, ``"exit"``, ``"transfer:<dest>"``,
    ``"break_loop"``, ``"custom"`` or ``None``); unlike ``helpers.action_kind``, an error
    event is not ``"error"``."""
    if ev.error is None:
        return h.action_kind(ev)
    return h.action_kind(rk.AgentEvent(action=ev.action))


async def summarize(events: Sequence[rk.AgentEvent]) -> list[Summary]:
    """``(agent, run path, role, text, action)``; a tool-call message's text is
    ``call:<name>,...`` (after its own text, if any); an error's role is ``error``."""
    out: list[Summary] = []
    for ev in events:
        role: str | None = None
        text: str | None = None
        if ev.error is not None:
            role, text = "error", f"{type(ev.error).__name__}: {ev.error}"
        elif ev.output is not None:
            msg = await ev.output.get_message()
            assert msg is not None
            role, text = msg.role, msg.content
            if msg.tool_calls:
                text = (
                    (text + " " if text else "")
                    + "call:"
                    + ",".join(c.name for c in msg.tool_calls)
                )
        out.append((ev.agent_name, names(ev.run_path), role, text, action_kind(ev)))
    return out


def errors(events: Sequence[rk.AgentEvent]) -> list[BaseException]:
    """The errors of ``events``, in order."""
    return [ev.error for ev in events if ev.error is not None]


def interrupt_of(events: Sequence[rk.AgentEvent]) -> rk.InterruptInfo:
    """The interrupt of the single interrupt event among ``events``, which must be the last."""
    found = [ev for ev in events if ev.action is not None and ev.action.interrupted is not None]
    assert len(found) == 1, f"expected exactly one interrupt event, got {len(found)}"
    assert found[0] is events[-1], "the interrupt event is the last event"
    info = found[0].action.interrupted  # type: ignore[union-attr]
    assert info is not None
    return info


def chain(ctx: rk.InterruptContext | None) -> list[tuple[str, ...]]:
    """The addresses from a root cause up to the outermost composite, as strings."""
    out: list[tuple[str, ...]] = []
    while ctx is not None:
        out.append(tuple(str(seg) for seg in ctx.address))
        ctx = ctx.parent
    return out


# -- reading model requests --------------------------------------------------------------------
def contents(request: rk.ModelRequest) -> list[tuple[str, str]]:
    """``(role, content)`` of each message sent to the model."""
    return [(m.role, m.content) for m in request.messages]


def user_texts(request: rk.ModelRequest) -> list[str]:
    """The contents of the user messages sent to the model."""
    return [m.content for m in request.messages if m.role == "user"]


def tool_names(request: rk.ModelRequest) -> list[str]:
    """The names of the tools offered to the model."""
    return [t.name for t in request.tools]


def tool_message(request: rk.ModelRequest, call_id: str) -> rk.Message:
    """The (single) tool message answering ``call_id`` in ``request``."""
    [msg] = [m for m in request.messages if m.role == "tool" and m.tool_call_id == call_id]
    return msg
