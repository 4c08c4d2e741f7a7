"""OpenTelemetry tracing of a Runner's invocations, agents, model calls and tool calls.

Off by default, and free when off: this module imports ``opentelemetry`` only when a
``TracingPlugin`` is built. ``enable()`` (or ``RELAYKIT_TRACING=1`` in the environment) turns
it on for every Runner built afterwards: the Runner appends a ``TracingPlugin`` to its
plugins. Spans follow the GenAI semantic conventions (docs/tracing.md):

* ``invoke_agent <root>``: the invocation (one ``run`` or ``resume``), the root span;
* ``invoke_agent <name>``: each agent run, a child of the agent it runs in (a transfer's
  target: a child of the transferring agent's parent, the invocation for the root agent);
* ``chat <model>`` and ``execute_tool <name>``: the agent's model and tool calls.

>>> tracing_enabled({"RELAYKIT_TRACING": "1"}), tracing_enabled({"RELAYKIT_TRACING": "no"})
(True, False)
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relaykit._tree import unwrap_layers
from relaykit.events import AgentEvent
from relaykit.messages import Message, MessageStream
from relaykit.models.base import ModelRequest
from relaykit.plugins import InvocationContext, Plugin

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider

__all__ = ["TracingPlugin", "disable", "enable", "tracing_enabled", "with_tracing"]

_ON_VALUES = frozenset({"1", "true", "yes", "on"})
_enabled = False
_provider: TracerProvider | None = None

#: The agent spans open in this task, innermost last: (invocation id, agent name, span). A
#: ParallelAgent's branch tasks copy it when they start, so their agents nest under it.
_stack: ContextVar[tuple[tuple[str, str, Span], ...]] = ContextVar("relaykit_spans", default=())


def enable(tracer_provider: TracerProvider | None = None) -> None:
    """Trace every Runner built from now on (the global tracer provider by default).

    Args:
        tracer_provider: where the spans go; None: OpenTelemetry's global provider.
    """
    global _enabled, _provider
    _enabled, _provider = True, tracer_provider


def disable() -> None:
    """Stop tracing the Runners built from now on (``RELAYKIT_TRACING`` still applies)."""
    global _enabled, _provider
    _enabled, _provider = False, None


def tracing_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``enable()`` was called or ``RELAYKIT_TRACING`` is 1, true, yes or on.

    Args:
        environ: the environment to read (``os.environ`` by default).
    """
    env = os.environ if environ is None else environ
    return _enabled or env.get("RELAYKIT_TRACING", "").strip().lower() in _ON_VALUES


def with_tracing(plugins: Sequence[Plugin], root: Any) -> list[Plugin]:
    """``plugins``, plus a ``TracingPlugin`` for the tree under ``root`` when tracing is on and
    none is there yet (what the Runner calls when it is built)."""
    given = list(plugins)
    if tracing_enabled() and not any(isinstance(p, TracingPlugin) for p in given):
        given.append(TracingPlugin(_provider, root=root))
    return given


def _model_names(root: Any) -> dict[str, str]:
    """Agent name -> the name of its model, for every agent of the tree holding a model."""
    names: dict[str, str] = {}
    stack, seen = [root], set()
    while stack:
        agent = stack.pop()
        if agent is None or id(agent) in seen:
            continue
        seen.add(id(agent))
        for layer in unwrap_layers(agent):
            model = getattr(layer, "model", None)
            if model is not None and isinstance(getattr(layer, "name", None), str):
                label = getattr(model, "model", None)
                label = label if isinstance(label, str) else getattr(model, "name", None)
                names[layer.name] = label if isinstance(label, str) else type(model).__name__
            stack.extend(getattr(layer, "sub_agents", None) or ())
    return names


@dataclass(slots=True)
class _Chat:
    """An open model call: its span, and the streamed reply whose usage it waits for."""

    span: Span
    stream: MessageStream | None = None


@dataclass(slots=True)
class _Trace:
    """The open spans of one invocation."""

    root: Span
    resumed: bool
    #: Opened without ``before_run`` (a resume without sessions): no ``after_run`` follows.
    lazy: bool = False
    agents: dict[str, Span] = field(default_factory=dict)
    chats: dict[str, _Chat] = field(default_factory=dict)
    #: id(arguments) -> (agent name, tool-call id or None, span).
    tools: dict[int, tuple[str, str | None, Span]] = field(default_factory=dict)
    call_ids: dict[tuple[str, str], deque[str]] = field(default_factory=dict)
    error: str | None = None
    interrupted: bool = False


class TracingPlugin(Plugin):
    """A ``Plugin`` recording each invocation as OpenTelemetry spans (see the module doc).

    Attributes hold names, ids and token usage only, never message or tool contents.

    Args:
        tracer_provider: where the spans go; None: OpenTelemetry's global provider.
        root: the Runner's root agent: names the invocation span and the models (optional).
        name: the plugin's name.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        root: Any = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        from opentelemetry import trace

        self._trace = trace
        self._tracer = trace.get_tracer("relaykit", tracer_provider=tracer_provider)
        self._root_name: str | None = getattr(root, "name", None)
        self._models = _model_names(root)
        self._open: dict[str, _Trace] = {}

    # -- spans -----------------------------------------------------------------------------
    def _start(self, name: str, parent: Span | None, attrs: dict[str, Any]) -> Span:
        context = self._trace.set_span_in_context(parent) if parent is not None else None
        return self._tracer.start_span(name, context=context, attributes=attrs)

    def _begin(self, ctx: InvocationContext, resumed: bool, lazy: bool = False) -> _Trace:
        agent = self._root_name
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "relaykit.invocation_id": ctx.invocation_id,
            "relaykit.app_name": ctx.app_name,
        }
        if agent is not None:
            attrs["gen_ai.agent.name"] = agent
        if ctx.session_id is not None:
            attrs["relaykit.session_id"] = ctx.session_id
        if resumed:
            attrs["relaykit.resumed"] = True
        span = self._tracer.start_span(
            f"invoke_agent {agent}" if agent else "invoke_agent", context=None, attributes=attrs
        )
        self._open[ctx.invocation_id] = _Trace(span, resumed, lazy)
        return self._open[ctx.invocation_id]

    def _get(self, ctx: InvocationContext) -> _Trace:
        """The invocation's spans; a resume without ``before_run`` (no session) opens them."""
        tr = self._open.get(ctx.invocation_id)
        return tr if tr is not None else self._begin(ctx, resumed=True, lazy=True)

    def _agent(self, ctx: InvocationContext, tr: _Trace, agent_name: str) -> Span:
        """The agent's open span; one opened now (a resumed agent) when it has none."""
        span = tr.agents.get(agent_name)
        if span is None:
            span = self._open_agent(ctx, tr, agent_name, resumed=True)
        return span

    def _open_agent(
        self, ctx: InvocationContext, tr: _Trace, agent_name: str, resumed: bool
    ) -> Span:
        inv_id = ctx.invocation_id
        stack = tuple(e for e in _stack.get() if e[0] == inv_id and tr.agents.get(e[1]) is e[2])
        parent = stack[-1][2] if stack else tr.root
        if tr.root is parent and self._root_name is None and not tr.agents:
            tr.root.update_name(f"invoke_agent {agent_name}")
            tr.root.set_attribute("gen_ai.agent.name", agent_name)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent_name,
            "relaykit.invocation_id": ctx.invocation_id,
        }
        if resumed:
            attrs["relaykit.resumed"] = True
            if not tr.resumed:
                tr.resumed = True
                tr.root.set_attribute("relaykit.resumed", True)
        span = self._start(f"invoke_agent {agent_name}", parent, attrs)
        tr.agents[agent_name] = span
        _stack.set((*stack, (inv_id, agent_name, span)))
        return span

    def _fail(self, span: Span, error: str | None) -> None:
        if error is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error))
            span.set_attribute("error.type", error)

    async def _end_chat(self, tr: _Trace, agent_name: str, error: str | None = None) -> None:
        chat = tr.chats.pop(agent_name, None)
        if chat is None:
            return
        stream = chat.stream
        if stream is not None and stream.done:
            if stream.error is not None:
                error = error or type(stream.error).__name__
            else:
                self._usage(chat.span, await stream.collect())
        self._fail(chat.span, error)
        chat.span.end()

    def _end_tools(
        self, tr: _Trace, agent_name: str, error: str | None, call_id: str | None = None
    ) -> None:
        for key, (owner, cid, span) in list(tr.tools.items()):
            if owner == agent_name and (call_id is None or cid == call_id):
                del tr.tools[key]
                self._fail(span, error)
                span.end()

    async def _end_agent(self, tr: _Trace, agent_name: str, error: str | None) -> None:
        await self._end_chat(tr, agent_name, error)
        self._end_tools(tr, agent_name, error)
        span = tr.agents.pop(agent_name, None)
        if span is not None:
            self._fail(span, error)
            span.end()
        if not tr.agents and agent_name == self._root_name and tr.lazy:
            await self._finish(tr)  # a resume without after_run: the root agent completed

    async def _finish(self, tr: _Trace) -> None:
        """End every span still open in the invocation, innermost first, then the root."""
        invocation_id = next((k for k, v in self._open.items() if v is tr), None)
        if invocation_id is None:
            return
        del self._open[invocation_id]
        for name in reversed(list(tr.agents)):
            await self._end_agent(tr, name, tr.error)
        if tr.interrupted:
            tr.root.set_attribute("relaykit.interrupted", True)
        self._fail(tr.root, tr.error)
        tr.root.end()

    @staticmethod
    def _usage(span: Span, message: Message) -> None:
        usage = message.metadata.get("usage") if message.metadata else None
        if isinstance(usage, Mapping):
            for key in ("input_tokens", "output_tokens"):
                value = usage.get(key)
                if isinstance(value, int):
                    span.set_attribute(f"gen_ai.usage.{key}", value)

    # -- hooks -----------------------------------------------------------------------------
    async def before_run(self, ctx: InvocationContext) -> Message | None:
        """Open the invocation span (marked resumed once an agent continues without having
        started in it: a resume runs no ``before_agent`` for the agents it continues)."""
        _stack.set(())
        self._begin(ctx, resumed=False)
        return None

    async def after_run(self, ctx: InvocationContext) -> None:
        """End the invocation's spans still open (an agent that failed or paused)."""
        if (tr := self._open.get(ctx.invocation_id)) is not None:
            await self._finish(tr)

    async def before_agent(self, ctx: InvocationContext, agent_name: str) -> Message | None:
        """Open the agent's span, a child of the agent it runs in."""
        self._open_agent(ctx, self._get(ctx), agent_name, resumed=False)
        return None

    async def after_agent(self, ctx: InvocationContext, agent_name: str) -> Message | None:
        """End the agent's span (it completed)."""
        tr = self._get(ctx)
        self._agent(ctx, tr, agent_name)
        await self._end_agent(tr, agent_name, None)
        return None

    async def before_model(
        self, ctx: InvocationContext, agent_name: str, request: ModelRequest
    ) -> Message | None:
        """Open a ``chat`` span under the agent's."""
        tr = self._get(ctx)
        parent = self._agent(ctx, tr, agent_name)
        await self._end_chat(tr, agent_name)
        asked = (request.options or {}).get("model")
        model = asked if isinstance(asked, str) else self._models.get(agent_name)
        attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.agent.name": agent_name}
        if model is not None:
            attrs["gen_ai.request.model"] = model
        name = f"chat {model}" if model else "chat"
        tr.chats[agent_name] = _Chat(self._start(name, parent, attrs))
        return None

    async def before_tool(
        self, ctx: InvocationContext, agent_name: str, tool_name: str, arguments: dict[str, Any]
    ) -> object | None:
        """Open an ``execute_tool`` span under the agent's (keyed by the call's arguments)."""
        tr = self._get(ctx)
        parent = self._agent(ctx, tr, agent_name)
        await self._end_chat(tr, agent_name)
        self._open_tool(tr, parent, agent_name, tool_name, arguments)
        return None

    def _open_tool(
        self, tr: _Trace, parent: Span, agent: str, tool: str, arguments: dict[str, Any]
    ) -> Span:
        attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
        ids = tr.call_ids.get((agent, tool))
        call_id = ids.popleft() if ids else None
        if call_id is not None:
            attrs["gen_ai.tool.call.id"] = call_id
        span = self._start(f"execute_tool {tool}", parent, attrs)
        tr.tools[id(arguments)] = (agent, call_id, span)
        return span

    async def after_tool(
        self,
        ctx: InvocationContext,
        agent_name: str,
        tool_name: str,
        arguments: dict[str, Any],
        result: object,
    ) -> object | None:
        """End the tool's span (one opened now for a call resumed without ``before_tool``)."""
        tr = self._get(ctx)
        entry = tr.tools.pop(id(arguments), None)
        if entry is None:
            parent = self._agent(ctx, tr, agent_name)
            self._open_tool(tr, parent, agent_name, tool_name, arguments)
            entry = tr.tools.pop(id(arguments))
        entry[2].end()
        return None

    async def on_event(self, ctx: InvocationContext, event: AgentEvent) -> AgentEvent | None:
        """End model calls at their reply, note tool-call ids and transfers, and end the spans
        of an agent that failed (status ERROR) or paused."""
        tr = self._open.get(ctx.invocation_id)
        if tr is None or event.internal:
            return None
        name = event.agent_name
        out, action = event.output, event.action
        if out is not None and out.role == "assistant" and name in tr.chats:
            if out.stream is not None:
                tr.chats[name].stream = out.stream
            elif out.message is not None:
                self._usage(tr.chats[name].span, out.message)
                await self._end_chat(tr, name)
            if out.message is not None:
                for call in out.message.tool_calls:
                    tr.call_ids.setdefault((name, call.name), deque()).append(call.id)
        elif out is not None and out.role == "tool" and out.message is not None:
            # A result while the span is open (no after_tool): the tool raised ToolError.
            self._end_tools(tr, name, "ToolError", out.message.tool_call_id or "")
        if event.run_path and name in tr.agents:
            path = "/".join(step.agent_name for step in event.run_path)
            tr.agents[name].set_attribute("relaykit.run_path", path)
        if event.error is not None:
            tr.error = type(event.error).__name__
            span = tr.agents.get(name)
            if span is not None:
                span.add_event("error", {"error.type": tr.error})
            await self._end_agent(tr, name, tr.error)
        elif action is not None and action.interrupted is not None:
            tr.interrupted = True
            span = tr.agents.get(name)
            if span is not None:
                span.set_attribute("relaykit.interrupted", True)
            await self._end_agent(tr, name, None)
        elif action is not None and action.transfer_to_agent is not None:
            dest = action.transfer_to_agent.dest_agent_name
            span = tr.agents.get(name)
            if span is not None:
                span.set_attribute("relaykit.transfer.to", dest)
                span.add_event("transfer", {"relaykit.transfer.to": dest})
        return None

    async def close(self) -> None:
        """End the spans of invocations never ended (a resume without sessions that paused or
        failed: the Runner runs no ``after_run`` for it)."""
        for tr in list(self._open.values()):
            await self._finish(tr)
