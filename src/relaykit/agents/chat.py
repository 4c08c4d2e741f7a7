"""ChatModelAgent: an LLM agent with a ReAct tool loop (eino-reference §7)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from relaykit._aio import closing
from relaykit.agents._prompts import (
    EXIT_TOOL,
    TRANSFER_TOOL,
    MissingPlaceholderError,
    fill_instruction,
    transfer_instruction,
)
from relaykit.codec import register_type
from relaykit.context import RunContext
from relaykit.errors import ConfigurationError, MaxIterationsError, ToolError
from relaykit.events import AgentAction, AgentEvent, AgentOutput, TransferToAgentAction
from relaykit.interrupts import (
    AddressSegment,
    InterruptSignal,
    ResumeInfo,
    composite_interrupt,
    stateful_interrupt,
)
from relaykit.messages import Message, ToolCall
from relaykit.models.base import ChatModel, ModelRequest, ToolSpec
from relaykit.tools.base import Tool, ToolContext
from relaykit.tools.function import ToolInterrupt

__all__ = ["ChatModelAgent", "ChatModelAgentState", "PendingToolCall", "ToolCallResult"]


@register_type("relaykit.ToolCallResult")
@dataclass(slots=True)
class ToolCallResult:
    """A finished tool call: its tool message and the action the tool attached."""

    message: Message
    action: AgentAction | None = None
    is_error: bool = False


@register_type("relaykit.PendingToolCall", exclude=("signal",))
@dataclass(slots=True)
class PendingToolCall:
    """An interrupted tool call: what it said and what it saved."""

    info: Any = None
    state: Any = None
    # Its interrupt signal, until the agent's composite interrupt collects it (not saved).
    signal: InterruptSignal | None = field(default=None, repr=False, compare=False)


@register_type("relaykit.ChatModelAgentState")
@dataclass(slots=True)
class ChatModelAgentState:
    """A ChatModelAgent paused in a tool batch (its interrupt state)."""

    messages: list[Message]
    calls: list[ToolCall]
    results: dict[str, ToolCallResult] = field(default_factory=dict)
    pending: dict[str, PendingToolCall] = field(default_factory=dict)
    remaining_iterations: int = 0
    return_directly_call: str | None = None


class _TransferTool:
    spec = TRANSFER_TOOL

    async def call(self, ctx: ToolContext, arguments: dict[str, Any]) -> Any:
        name = arguments.get("agent_name")
        if not isinstance(name, str) or not name:
            raise ToolError("transfer_to_agent needs a string argument 'agent_name'")
        ctx.set_action(AgentAction(transfer_to_agent=TransferToAgentAction(name)))
        return f"successfully transferred to agent [{name}]"


class _ExitTool:
    spec = EXIT_TOOL

    async def call(self, ctx: ToolContext, arguments: dict[str, Any]) -> Any:
        result = arguments.get("final_result")
        if not isinstance(result, str):
            raise ToolError("exit needs a string argument 'final_result'")
        ctx.set_action(AgentAction(exit=True))
        return result


_TRANSFER = _TransferTool()
_EXIT = _ExitTool()


@dataclass(slots=True)
class _Prepared:
    instruction: str
    tools: dict[str, Tool]
    specs: list[ToolSpec]
    return_directly: frozenset[str]


def _json_default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _tool_message(call: ToolCall, content: str) -> Message:
    return Message("tool", content, [], call.id, call.name)


class ChatModelAgent:
    """An LLM agent: calls its model, runs the tools it asks for, until it answers.

    >>> agent = ChatModelAgent("helper", "answers questions", instruction="Be brief.",
    ...                        model=ScriptedModel([Message.assistant("Hi!")]))  # doctest: +SKIP
    """

    def __init__(self, name: str, description: str = "", instruction: str = "",
                 model: ChatModel | None = None, tools: Sequence[Tool] = (),
                 max_iterations: int = 20,
                 output_key: str | None = None, return_directly: Sequence[str] = (),
                 exit_tool: bool = False) -> None:
        if not name:
            raise ConfigurationError("ChatModelAgent needs a non-empty name")
        if model is None:
            raise ConfigurationError(f"ChatModelAgent {name!r} needs a model")
        self.name = name
        self.description = description
        self.instruction = instruction
        self.model: ChatModel = model
        self.tools = list(tools)
        self.max_iterations = max_iterations if max_iterations > 0 else 20
        self.output_key = output_key
        self.return_directly = frozenset(return_directly)
        self.exit_tool = exit_tool
        names = [t.spec.name for t in self.tools]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ConfigurationError(f"ChatModelAgent {name!r}: duplicate tool names "
                                     f"{sorted(duplicates)}")
        self._prepared: dict[tuple[tuple[str, str], ...], _Prepared] = {}

    def __repr__(self) -> str:
        return f"ChatModelAgent(name={self.name!r})"

    # -- preparation -----------------------------------------------------------------------
    def _prepare(self, ctx: RunContext) -> _Prepared:
        flow = ctx.flow
        targets: tuple[tuple[str, str], ...] = ()
        if flow is not None:
            targets = tuple((a.name, a.description) for a in flow.transfer_targets())
        prepared = self._prepared.get(targets)
        if prepared is None:
            instruction = self.instruction
            tools: dict[str, Tool] = {t.spec.name: t for t in self.tools}
            rd = set(self.return_directly)
            if targets:
                instruction = f"{instruction}\n\n{transfer_instruction(targets)}"
                tools[TRANSFER_TOOL.name] = _TRANSFER
                rd.add(TRANSFER_TOOL.name)
            if self.exit_tool:
                tools[EXIT_TOOL.name] = _EXIT
                rd.add(EXIT_TOOL.name)
            prepared = _Prepared(instruction, tools, [t.spec for t in tools.values()],
                                 frozenset(rd))
            self._prepared[targets] = prepared
        return prepared

    def _system_message(self, ctx: RunContext, prepared: _Prepared) -> Message | None:
        if not prepared.instruction:
            return None
        base = self.instruction
        try:
            filled = fill_instruction(base, ctx.history.values, self.name)
        except MissingPlaceholderError as exc:
            raise ConfigurationError(exc.args[0]) from None
        if filled is base:
            return Message("system", prepared.instruction)
        return Message("system", filled + prepared.instruction[len(base):])

    # -- run / resume ----------------------------------------------------------------------
    def run(self, ctx: RunContext, input: Any, **options: Any) -> AsyncIterator[AgentEvent]:
        """Run the tool loop on ``input.messages`` (with the instruction as system message)."""
        return self._loop(ctx, input, self.max_iterations, bool(input.enable_streaming), None)

    def resume(self, ctx: RunContext, info: ResumeInfo,
               **options: Any) -> AsyncIterator[AgentEvent]:
        """Continue the tool batch that was interrupted; finished calls are not run again."""
        state = info.interrupt_state
        if not isinstance(state, ChatModelAgentState):
            raise ConfigurationError(
                f"ChatModelAgent {self.name!r} was asked to resume with an invalid interrupt "
                f"state of type {type(state).__name__}")
        return self._loop(ctx, None, state.remaining_iterations, info.enable_streaming, state)

    async def _loop(self, ctx: RunContext, input: Any, remaining: int, streaming: bool,
                    paused: ChatModelAgentState | None) -> AsyncIterator[AgentEvent]:
        prepared = self._prepare(ctx)
        if paused is not None:
            messages = paused.messages
        else:
            system = self._system_message(ctx, prepared)
            # The framework hands each agent a fresh message list of its own (AgentInput).
            messages = input.messages
            if system is not None:
                messages.insert(0, system)
        model = self.model
        while True:
            if paused is None:
                if remaining <= 0:
                    raise MaxIterationsError(
                        f"agent {self.name!r} exceeded max_iterations={self.max_iterations} "
                        "model calls without a final answer")
                remaining -= 1
                # The live list: a model must copy what it keeps beyond the call.
                request = ModelRequest(messages, prepared.specs)
                if streaming:
                    stream = model.stream(request)
                    try:
                        yield AgentEvent("", (), AgentOutput(None, stream, "assistant"))
                        reply = await stream.collect()
                    finally:
                        if not stream.done:  # the caller stopped early: close the model call
                            await stream.aclose()
                else:
                    reply = await model.generate(request)
                    yield AgentEvent("", (), AgentOutput(reply, None, "assistant"))
                messages.append(reply)
                if not reply.tool_calls:
                    self._save_output(ctx, reply.content)
                    return
                state = ChatModelAgentState(messages, list(reply.tool_calls),
                                            remaining_iterations=remaining)
                for call in reversed(reply.tool_calls):
                    if call.name in prepared.return_directly:
                        state.return_directly_call = call.id
                        break
                todo: list[tuple[ToolCall, ResumeInfo | None]] = [(c, None) for c in state.calls]
            else:
                state, paused = paused, None
                todo = []
                for call in state.calls:
                    pending = state.pending.get(call.id)
                    if pending is None:
                        continue
                    address = (*ctx.address, AddressSegment("tool", call.name, call.id))
                    rs = ctx.resume_state
                    claimed = rs.claim(address, ResumeInfo()) if rs is not None else ResumeInfo()
                    if claimed.is_resume_target:
                        todo.append((call, claimed))
                        del state.pending[call.id]
                    else:  # D8: not targeted: stays pending with the same id
                        pending.signal = self._reinterrupt(ctx, call, pending)
            async with closing(self._batch(ctx, prepared, state, todo)) as results:
                async for ev in results:
                    yield ev
            if state.pending:
                yield self._interrupt_event(ctx, state)
                return
            for call in state.calls:
                messages.append(state.results[call.id].message)
            rd = state.return_directly_call
            if rd is not None:
                result = state.results[rd]
                yield _result_event(result)  # held until the whole batch finished
                if not result.is_error:  # a failed call does not return directly (D15)
                    self._save_output(ctx, result.message.content)
                    return
            remaining = state.remaining_iterations

    def _save_output(self, ctx: RunContext, text: str) -> None:
        if self.output_key:
            ctx.set_session_value(self.output_key, text)

    # -- tools -----------------------------------------------------------------------------
    async def _batch(self, ctx: RunContext, prepared: _Prepared, state: ChatModelAgentState,
                     todo: list[tuple[ToolCall, ResumeInfo | None]]
                     ) -> AsyncIterator[AgentEvent]:
        """Run the calls of one batch (concurrently); yield each result as it finishes."""
        rd = state.return_directly_call
        history = state.messages[:-1]
        if len(todo) == 1:
            call, resume = todo[0]
            outcome = await self._invoke(ctx, prepared, call, resume, history)
            ev = self._settle(state, call, outcome)
            if ev is not None and call.id != rd:
                yield ev
            return
        tasks = {asyncio.ensure_future(self._invoke(ctx, prepared, c, r, history)): c
                 for c, r in todo}
        try:
            waiting = set(tasks)
            while waiting:
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in [t for t in tasks if t in done]:
                    call = tasks[task]
                    ev = self._settle(state, call, task.result())
                    if ev is not None and call.id != rd:
                        yield ev
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def _settle(state: ChatModelAgentState, call: ToolCall,
                outcome: ToolCallResult | PendingToolCall) -> AgentEvent | None:
        if isinstance(outcome, PendingToolCall):
            state.pending[call.id] = outcome
            return None
        state.pending.pop(call.id, None)
        state.results[call.id] = outcome
        return _result_event(outcome)

    async def _invoke(self, ctx: RunContext, prepared: _Prepared, call: ToolCall,
                      resume: ResumeInfo | None,
                      history: list[Message]) -> ToolCallResult | PendingToolCall:
        tool = prepared.tools.get(call.name)
        if tool is None:
            available = ", ".join(sorted(prepared.tools)) or "none"
            return ToolCallResult(_tool_message(call, f"error: unknown tool '{call.name}'; "
                                                      f"available tools: {available}"),
                                  None, True)
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError as exc:
            return ToolCallResult(_tool_message(
                call, f"error: arguments of tool '{call.name}' are not valid JSON: {exc}"),
                None, True)
        if not isinstance(arguments, dict):
            return ToolCallResult(_tool_message(
                call, f"error: arguments of tool '{call.name}' must be a JSON object"), None, True)
        run_ctx = ctx.derive(address=(*ctx.address, AddressSegment("tool", call.name, call.id)))
        tctx = ToolContext(run_ctx, call.name, call.id)
        if resume is not None:
            tctx.was_interrupted = resume.was_interrupted
            tctx.interrupt_state = resume.interrupt_state
            tctx.is_resume_target = resume.is_resume_target
            tctx.resume_data = resume.resume_data
        tctx.chat_history = history
        long_running = getattr(tool, "long_running", False)
        try:
            if long_running and resume is not None and resume.is_resume_target:
                result = resume.resume_data
            else:
                result = await tool.call(tctx, arguments)
                if long_running:
                    raise ToolInterrupt({"tool": call.name, "tool_call_id": call.id,
                                         "arguments": arguments, "started": result})
        except ToolError as exc:
            return ToolCallResult(_tool_message(call, f"error: {exc}"), tctx.action, True)
        except ToolInterrupt as ti:
            ev = (composite_interrupt(run_ctx, ti.info, ti.state, *ti.sub_interrupts)
                  if ti.sub_interrupts else stateful_interrupt(run_ctx, ti.info, ti.state))
            assert ev.action is not None and ev.action.signal is not None
            return PendingToolCall(ti.info, ti.state, ev.action.signal)
        content = result if isinstance(result, str) else json.dumps(
            result, default=_json_default, ensure_ascii=False)
        return ToolCallResult(_tool_message(call, content), tctx.action)

    def _reinterrupt(self, ctx: RunContext, call: ToolCall,
                     pending: PendingToolCall) -> InterruptSignal:
        run_ctx = ctx.derive(address=(*ctx.address, AddressSegment("tool", call.name, call.id)))
        ev = stateful_interrupt(run_ctx, pending.info, pending.state)
        assert ev.action is not None and ev.action.signal is not None
        return ev.action.signal

    def _interrupt_event(self, ctx: RunContext, state: ChatModelAgentState) -> AgentEvent:
        subs = [p.signal for p in state.pending.values() if p.signal is not None]
        info = {"agent": self.name, "interrupted_tool_calls": list(state.pending)}
        return composite_interrupt(ctx, info, state, *subs)


def _result_event(result: ToolCallResult) -> AgentEvent:
    msg = result.message
    return AgentEvent("", (), AgentOutput(msg, None, "tool", msg.tool_name), result.action)
