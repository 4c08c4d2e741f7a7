"""AgentTool: an agent used as a tool, with its own run history and checkpoint scope; its
events stay inside unless it forwards them (``emit_internal_events``, D28)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from relaykit._aio import closing, ended_with, must_propagate
from relaykit.agent import Agent, AgentInput
from relaykit.checkpoints.document import Checkpoint
from relaykit.codec import register_type
from relaykit.context import RunContext, RunHistory
from relaykit.errors import ConfigurationError, MaxTransfersError, ToolError
from relaykit.events import AgentEvent, RunPath, transfer_messages
from relaykit.flow import FlowAgent, as_flow_agent, rewrite_message
from relaykit.interrupts import InterruptInfo, interrupt_of
from relaykit.messages import Message
from relaykit.models.base import ToolSpec
from relaykit.tools.base import ToolContext, ToolEvents
from relaykit.tools.function import ToolInterrupt

__all__ = ["MAX_AGENT_TOOL_DEPTH", "AgentTool", "AgentToolState"]

#: How deeply agents may call agents as tools within one run (D23).
MAX_AGENT_TOOL_DEPTH = 16

_DEFAULT_PARAMETERS: dict[str, object] = {
    "type": "object",
    "properties": {"request": {"type": "string", "description": "request to be processed"}},
    "required": ["request"],
}


@register_type("relaykit.AgentToolState")
@dataclass(slots=True)
class AgentToolState:
    """What an interrupted agent tool saves: the inner run's checkpoint (its
    ``ToolInterrupt`` state).

    >>> from relaykit.interrupts import interrupt
    >>> ctx = RunContext.new()
    >>> state = AgentToolState(Checkpoint.of(ctx, interrupt(ctx, "ok?").action.interrupted))
    >>> state.checkpoint.interrupt_data
    'ok?'
    """

    #: The inner run, as the Runner would save it (input, history, values, interrupt).
    checkpoint: Checkpoint


class AgentTool:
    """An agent as a tool: the inner agent runs with its own history (sharing session values);
    its exit / transfer / break-loop stay inside; its interrupts surface through the tool.

    The tool's result is the text of the inner run's last message.

    >>> import asyncio
    >>> import relaykit as rk
    >>> researcher = rk.ChatModelAgent("researcher", "finds facts", model=rk.ScriptedModel(
    ...     [Message.assistant("Paris has 2.1 million inhabitants.")]))
    >>> lead = rk.ChatModelAgent("lead", model=rk.ScriptedModel([
    ...     Message.assistant("", [rk.ToolCall("c1", "researcher", '{"request": "Paris?"}')]),
    ...     Message.assistant("About 2.1 million.")]), tools=[AgentTool(researcher)])
    >>> result = asyncio.run(rk.Runner(lead).invoke("How many people live in Paris?"))
    >>> [ev.message.content for ev in result.events if ev.output]
    ['', 'Paris has 2.1 million inhabitants.', 'About 2.1 million.']

    Args:
        agent: the inner agent; it needs a name (the tool's name) and a description (the
            tool's description).
        full_chat_history_as_input: give the inner agent the calling agent's conversation
            (rewritten as context) instead of the ``request`` argument.
        input_schema: the JSON schema of the tool's arguments; the inner agent then receives
            the arguments as JSON text. By default the tool takes one string, ``request``.
        emit_internal_events: forward the inner agent's events to the caller while the tool
            runs (the calling ``ChatModelAgent`` yields them as they arrive): their run path
            is prefixed with the caller's, and they are marked ``internal`` -- delivered and
            seen by ``on_event``, but never recorded in any history, never stored in a
            session and never acted on (D28). Errors and interrupts are not forwarded: they
            remain the tool's own.

    With ``emit_internal_events=True`` the caller sees the inner run as it happens:

    >>> researcher = rk.ChatModelAgent("researcher", "finds facts", model=rk.ScriptedModel(
    ...     [Message.assistant("Paris has 2.1 million inhabitants.")]))
    >>> tool = AgentTool(researcher, emit_internal_events=True)
    >>> lead = rk.ChatModelAgent("lead", model=rk.ScriptedModel([
    ...     Message.assistant("", [rk.ToolCall("c1", "researcher", '{"request": "Paris?"}')]),
    ...     Message.assistant("About 2.1 million.")]), tools=[tool])
    >>> result = asyncio.run(rk.Runner(lead).invoke("How many people live in Paris?"))
    >>> [([str(s) for s in ev.run_path], ev.internal, ev.message.content) for ev in result.events]
    ... # doctest: +NORMALIZE_WHITESPACE
    [(['lead'], False, ''),
     (['lead', 'researcher'], True, 'Paris has 2.1 million inhabitants.'),
     (['lead'], False, 'Paris has 2.1 million inhabitants.'),
     (['lead'], False, 'About 2.1 million.')]
    """

    def __init__(
        self,
        agent: Agent,
        full_chat_history_as_input: bool = False,
        input_schema: dict[str, object] | None = None,
        emit_internal_events: bool = False,
    ) -> None:
        if not agent.name:
            raise ConfigurationError("agent tool requires an agent with a non-empty name")
        if not agent.description:
            raise ConfigurationError(
                f"agent tool requires a non-empty description (agent {agent.name!r})"
            )
        #: The inner agent.
        self.agent = agent
        #: Whether the inner agent receives the caller's conversation.
        self.full_chat_history_as_input = full_chat_history_as_input
        #: The arguments' JSON schema, when not the default ``{"request": string}``.
        self.input_schema = input_schema
        #: Whether the inner agent's events are forwarded to the caller (marked ``internal``).
        self.emit_internal_events = emit_internal_events
        self._flow: FlowAgent = agent if isinstance(agent, FlowAgent) else as_flow_agent(agent)
        self._spec = ToolSpec(
            agent.name,
            agent.description,
            input_schema if input_schema is not None else _DEFAULT_PARAMETERS,
        )

    @property
    def name(self) -> str:
        """The tool's name: the agent's name."""
        return self._spec.name

    @property
    def spec(self) -> ToolSpec:
        """Named and described like the agent; parameters ``{"request": string}`` by default."""
        return self._spec

    def __repr__(self) -> str:
        if self.emit_internal_events:
            return f"AgentTool({self.agent!r}, emit_internal_events=True)"
        return f"AgentTool({self.agent!r})"

    def _input(self, ctx: ToolContext, arguments: dict[str, object]) -> list[Message]:
        if self.full_chat_history_as_input:
            caller = ctx.run_context.run_path[-1].agent_name if ctx.run_context.run_path else ""
            out: list[Message] = []
            for msg in ctx.chat_history:
                if msg.role == "system":
                    continue
                out.append(msg if msg.role == "user" else rewrite_message(msg, caller))
            out.extend(rewrite_message(m, caller) for m in transfer_messages(self.agent.name))
            return out
        if self.input_schema is not None:
            return [Message.user(json.dumps(arguments, ensure_ascii=False))]
        request = arguments.get("request")
        if not isinstance(request, str):
            raise ToolError(f"agent tool '{self.agent.name}' needs a string argument 'request'")
        return [Message.user(request)]

    async def call(self, ctx: ToolContext, arguments: dict[str, object]) -> str:
        """Run (or resume) the inner agent; the result is the text of its last message.

        Args:
            ctx: the call's context (on a resume, the inner run's saved checkpoint).
            arguments: ``{"request": <text>}``, or arguments of ``input_schema``.
        """
        outer = ctx.run_context
        # D23: agents calling each other as tools nest without a transfer to count: bound the
        # nesting (every agent-tool call adds a tool segment to the address).
        depth = sum(1 for segment in outer.address if segment.kind == "tool")
        if depth > MAX_AGENT_TOOL_DEPTH:
            raise MaxTransfersError(
                f"agent tool '{self.agent.name}': agents called as tools are nested deeper than "
                f"{MAX_AGENT_TOOL_DEPTH} levels (an agent that keeps calling itself or its "
                "caller as a tool?)"
            )
        streaming = outer.root_input.enable_streaming if outer.root_input else False
        state = ctx.interrupt_state if ctx.was_interrupted else None
        if isinstance(state, AgentToolState):
            cp = state.checkpoint
            # The inner run's interrupt points are in the outer checkpoint's tree, below this
            # call's own point (they are not saved twice: see _consume).
            below = (
                outer.resume_state.interrupt_below(outer.address)
                if outer.resume_state is not None
                else None
            )
            interrupted = InterruptInfo(
                cp.interrupt_data,
                below.contexts if below is not None else [],
                None,
                dict(cp.pending_chains),
            )
            inner = RunContext(
                address=outer.address,
                history=cp.history(outer.history.values),
                root_input=cp.root_input,
                options=outer.options,
                resume_state=outer.resume_state,
            )
            if outer.resume_state is not None:
                outer.resume_state.pending_chains.update(interrupted.pending_chains)
            gen = self._flow.resume(inner, cp.resume_info(interrupted))
        elif ctx.was_interrupted:
            raise ToolError(
                f"agent tool '{self.agent.name}' was interrupted, but its "
                "interrupt state is missing"
            )
        else:
            root_input = AgentInput(self._input(ctx, arguments), streaming)
            inner = RunContext(
                address=outer.address,
                history=RunHistory(outer.history.values),
                root_input=root_input,
                options=outer.options,
                resume_state=outer.resume_state,
            )
            gen = self._flow.run(inner, root_input)
        forward = ctx.events if self.emit_internal_events else None
        return await self._consume(inner, gen, forward, outer.run_path)

    async def _consume(
        self,
        inner: RunContext,
        gen: AsyncIterator[AgentEvent],
        forward: ToolEvents | None = None,
        caller: RunPath = (),
    ) -> str:
        last: AgentEvent | None = None
        what = f"agent tool '{self.agent.name}'"
        try:
            async with closing(gen):
                async for ev in gen:
                    if ev.error is not None:
                        # An error event may carry a BaseException: never re-raise a bare
                        # CancelledError or GeneratorExit into the calling agent (D24).
                        raise ended_with(ev.error, what)
                    last = ev
                    interrupted = interrupt_of(ev)
                    if forward is not None and interrupted is None:
                        forward.emit(_internal(ev, caller))
                    if interrupted is not None:
                        # The inner points (and their states) become part of the caller's
                        # tree through ``sub_interrupts``; the saved state keeps the rest of
                        # the inner run. Saving the points here too would nest every deeper
                        # agent tool's state twice per level: exponential in the depth.
                        checkpoint = dataclasses.replace(
                            Checkpoint.of(inner, interrupted), points=[]
                        )
                        raise ToolInterrupt(
                            "agent tool interrupt",
                            AgentToolState(checkpoint),
                            sub_interrupts=(interrupted,),
                        )
        except Exception:
            raise  # errors and interrupts as they are
        except BaseException as exc:
            # D24: the inner run ending with CancelledError (not ours), GeneratorExit... is
            # this tool's error; cancellation from outside propagates.
            if must_propagate(exc):
                raise
            raise ended_with(exc, what) from exc
        if last is None:
            raise ToolError(f"agent tool '{self.agent.name}' returned no event")
        message = await last.output.get_message() if last.output is not None else None
        return message.content if message is not None else ""


def _internal(ev: AgentEvent, caller: RunPath) -> AgentEvent:
    """The caller's copy of an inner event (§8.4, D28): the run path prefixed with the
    caller's, marked ``internal``. Its actions were settled inside the tool: a break-loop
    is marked done so that no loop above the caller acts on it."""
    action = ev.action
    if action is not None and action.break_loop is not None and not action.break_loop.done:
        action = dataclasses.replace(
            action, break_loop=dataclasses.replace(action.break_loop, done=True)
        )
    return AgentEvent(
        ev.agent_name,
        (*caller, *ev.run_path),
        ev.output,
        action,
        None,
        ev.state_delta,
        internal=True,
    )
