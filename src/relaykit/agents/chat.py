"""ChatModelAgent: an LLM agent with a ReAct tool loop (docs/llm-agents-and-tools.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

from relaykit._aio import closing, ended_with, must_propagate
from relaykit._cancel import CallCut, CancelSignal
from relaykit.agents._hooks import call_tool, model_reply, modify_history
from relaykit.agents._live_only import LiveOnlyModel
from relaykit.agents._prompts import (
    EXIT_TOOL,
    MissingPlaceholderError,
    fill_instruction,
    transfer_instruction,
)
from relaykit.agents._retry import RetryingModel, stream_with_retry
from relaykit.agents._tool_calls import (
    EXIT,
    MAX_ARGUMENT_DEPTH,
    ChatModelAgentState,
    ExitTool,
    PendingToolCall,
    Prepared,
    ReplyStream,
    ToolCallResult,
    TransferTool,
    checked_state,
    error_result,
    name_tool,
    parse_arguments,
    result_text,
    tool_message,
    with_unique_call_ids,
)
from relaykit.agents.agent_tool import AgentTool
from relaykit.context import RunContext
from relaykit.errors import (
    ConfigurationError,
    MaxIterationsError,
    RelayKitError,
    StreamCancelledError,
    ToolError,
)
from relaykit.events import (
    TRANSFER_TOOL_NAME,
    AgentEvent,
    AgentInput,
    AgentOutput,
)
from relaykit.interrupts import (
    Address,
    AddressSegment,
    InterruptContext,
    ResumeInfo,
    ResumeState,
    composite_interrupt,
    interrupt_of,
    stateful_interrupt,
)
from relaykit.messages import Message, ToolCall
from relaykit.models.base import ChatModel, ModelRequest, ToolSpec
from relaykit.models.live import LiveModel
from relaykit.options import ModelRetry
from relaykit.tools.base import (
    RESERVED_TOOL_NAMES,
    Tool,
    ToolContext,
    ToolEvents,
    is_builtin_tool,
)
from relaykit.tools.builtin import EXIT_LOOP_TOOL_NAME
from relaykit.tools.function import FunctionTool, ToolInterrupt

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "ChatModelAgent",
    "ChatModelAgentState",
    "PendingToolCall",
    "ToolCallResult",
]


class ChatModelAgent:
    """An LLM agent: calls its model, runs the tools it asks for, until it answers.

    The calls of one model reply run concurrently, each paired with its result by a tool-call
    id that the agent makes unique first (D24). A bad call (unknown tool, arguments that are
    not a JSON object or nest deeper than ``MAX_ARGUMENT_DEPTH``, ``ToolError``) goes back to
    the model as ``error: ...`` (D15); a tool that raises, ends with another
    ``BaseException`` or returns a value that cannot be JSON ends the agent with an error
    event, and the other calls still running are cancelled and awaited. The tool names
    ``transfer_to_agent``, ``exit`` and ``exit_loop`` are reserved for the built-in tools;
    ``tools=[relaykit.exit_loop]`` lets the model end the ``LoopAgent`` the agent runs in.
    A transfer must name one of the agent's targets: any other name goes back to the model
    (D22). With a Runner's plugins, ``before_model`` / ``after_model`` run around each model
    call and ``before_tool`` / ``after_tool`` around each tool call but the synthetic
    ``transfer_to_agent`` (rules in ``relaykit.agents._hooks``).

    >>> import asyncio
    >>> import relaykit as rk
    >>> @rk.tool
    ... def get_weather(city: str) -> str:
    ...     '''The weather in a city.'''
    ...     return f"It is sunny in {city}."
    >>> model = rk.ScriptedModel([
    ...     Message.assistant("", [ToolCall("call_1", "get_weather", '{"city": "Paris"}')]),
    ...     Message.assistant("Sunny in Paris.")])
    >>> agent = ChatModelAgent("helper", "answers questions", instruction="Be brief.",
    ...                        model=model, tools=[get_weather])
    >>> result = asyncio.run(rk.Runner(agent).invoke("Weather in Paris?"))
    >>> [(ev.output.role, ev.message.content) for ev in result.events if ev.output]
    [('assistant', ''), ('tool', 'It is sunny in Paris.'), ('assistant', 'Sunny in Paris.')]

    Args:
        name: the agent's name, unique in its tree; must not be empty.
        description: what the agent does (an LLM agent that may transfer to it reads it).
        instruction: the system message. ``{key}`` placeholders take session values,
            ``{key?}`` is empty when the value is missing, ``{{key}}`` is a literal
            (docs/llm-agents-and-tools.md#d16).
        model: the chat model to call; required (``ConfigurationError`` without one) unless
            ``live_model`` is given (then a run reaching the agent is its error event).
        tools: the tools the model may call; unique names, none of ``RESERVED_TOOL_NAMES``
            except the built-in tools themselves (``relaykit.exit_loop``).
        max_iterations: the most model calls in one turn; the next one raises
            ``MaxIterationsError`` (an error event). 0 or less means the default, 20.
        output_key: save the agent's final answer in this session value.
        return_directly: names of tools whose result ends the agent's turn (the result is the
            agent's answer instead of a new model call).
        exit_tool: offer the built-in ``exit`` tool: the model ends the enclosing flow with a
            final result.
        retry: call the model again when a call fails (``relaykit.ModelRetry``; a streamed
            reply that fails part-way ends in ``WillRetryError``, docs/retries-and-options.md).
            None: a failed call ends the agent.
        live_model: the realtime model ``Runner.run_live`` connects when the agent runs live
            (docs/live.md).
    """

    def __init__(
        self,
        name: str,
        description: str = "",
        instruction: str = "",
        model: ChatModel | None = None,
        tools: Sequence[Tool] = (),
        max_iterations: int = 20,
        output_key: str | None = None,
        return_directly: Sequence[str] = (),
        exit_tool: bool = False,
        retry: ModelRetry | None = None,
        live_model: LiveModel | None = None,
    ) -> None:
        if not name:
            raise ConfigurationError("ChatModelAgent needs a non-empty name")
        if model is None and live_model is None:
            raise ConfigurationError(f"ChatModelAgent {name!r} needs a model (or a live_model)")
        if retry is not None and not isinstance(retry, ModelRetry):
            raise ConfigurationError(
                f"ChatModelAgent {name!r}: retry must be a relaykit.ModelRetry, not "
                f"{type(retry).__name__}"
            )
        #: The agent's name.
        self.name = name
        #: What the agent does.
        self.description = description
        #: The system message template.
        self.instruction = instruction
        #: The chat model the agent calls.
        self.model: ChatModel = model if model is not None else LiveOnlyModel(name)
        #: The realtime model ``Runner.run_live`` connects, or None.
        self.live_model = live_model
        #: The most model calls in one turn.
        self.max_iterations = max_iterations if max_iterations > 0 else 20
        #: The session value the final answer is saved under, if any.
        self.output_key = output_key
        #: Names of tools whose result ends the agent's turn.
        self.return_directly = frozenset(return_directly)
        #: Whether the built-in ``exit`` tool is offered.
        self.exit_tool = exit_tool
        #: How failed model calls are retried (None: not at all).
        self.retry = retry
        self._prepared: dict[tuple[tuple[str, str], ...], Prepared] = {}
        self._tools: tuple[Tool, ...] = ()
        self.tools = tools

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The tools the model may call (assign a new sequence to change them: it is checked
        again, as when the agent was built)."""
        return self._tools

    @tools.setter
    def tools(self, tools: Sequence[Tool]) -> None:
        checked = tuple(tools)
        names = [t.spec.name for t in checked]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ConfigurationError(
                f"ChatModelAgent {self.name!r}: duplicate tool names {sorted(duplicates)}"
            )
        for t in checked:
            # D24: the agent adds its built-ins by name; a user tool of that name would be
            # silently replaced (or would shadow the built-in) -- refuse it instead.
            if t.spec.name in RESERVED_TOOL_NAMES and not is_builtin_tool(t):
                raise ConfigurationError(
                    f"ChatModelAgent {self.name!r}: tool {t.spec.name!r} ({t!r}) uses a name "
                    f"reserved for relaykit's built-in tools "
                    f"({', '.join(sorted(RESERVED_TOOL_NAMES))}); rename the tool (for the "
                    "built-in exit tool, pass exit_tool=True)"
                )
        self._tools = checked
        self._prepared = {}  # built again from the new tools

    def __repr__(self) -> str:
        return f"ChatModelAgent(name={self.name!r})"

    # -- preparation -----------------------------------------------------------------------
    def _prepare(self, ctx: RunContext) -> Prepared:
        flow = ctx.flow
        targets: tuple[tuple[str, str], ...] = ()
        if flow is not None:
            targets = tuple((a.name, a.description) for a in flow.transfer_targets())
        prepared = self._prepared.get(targets)
        if prepared is None:
            instruction = self.instruction
            tools: dict[str, Tool] = {t.spec.name: t for t in self.tools}
            rd = set(self.return_directly)
            if EXIT_LOOP_TOOL_NAME in tools:  # only the built-in may carry the name
                rd.add(EXIT_LOOP_TOOL_NAME)
            if targets:
                instruction = f"{instruction}\n\n{transfer_instruction(targets)}"
                # Built once per set of targets (this cache), never per call (D22).
                tools[TRANSFER_TOOL_NAME] = TransferTool([n for n, _ in targets])
                rd.add(TRANSFER_TOOL_NAME)
            if self.exit_tool:
                tools[EXIT_TOOL.name] = EXIT
                rd.add(EXIT_TOOL.name)
            prepared = Prepared(instruction, tools, [t.spec for t in tools.values()], frozenset(rd))
            self._prepared[targets] = prepared
        return prepared

    def _system_message(self, ctx: RunContext, prepared: Prepared) -> Message | None:
        if not prepared.instruction:
            return None
        base = self.instruction
        try:
            filled = fill_instruction(base, ctx.history.values, self.name)
        except MissingPlaceholderError as exc:
            raise ConfigurationError(exc.args[0]) from None
        if filled is base:
            return Message("system", prepared.instruction)
        return Message("system", filled + prepared.instruction[len(base) :])

    # -- run / resume ----------------------------------------------------------------------
    def run(self, ctx: RunContext, input: AgentInput, **options: Any) -> AsyncIterator[AgentEvent]:
        """Run the tool loop on ``input.messages`` (with the instruction as system message).

        Args:
            ctx: where the agent runs; its ``flow`` gives the transfer targets.
            input: the conversation (the agent appends to this list) and whether to stream.
            **options: per-run options (none used by this agent: it reads what the run
                designated to it, ``ctx.options.agent_options``).
        """
        return self._loop(ctx, input, self.max_iterations, bool(input.enable_streaming), None)

    def resume(
        self, ctx: RunContext, info: ResumeInfo, **options: Any
    ) -> AsyncIterator[AgentEvent]:
        """Continue the tool batch that was interrupted; finished calls are not run again.

        Args:
            ctx: where the agent runs; its ``resume_state`` says which calls are targets.
            info: the agent's own resume; ``interrupt_state`` must be the
                ``ChatModelAgentState`` it saved (``ConfigurationError`` otherwise).
            **options: per-run options (as for ``run``).
        """
        state = checked_state(self.name, info.interrupt_state)
        return self._loop(ctx, None, state.remaining_iterations, info.enable_streaming, state)

    async def _loop(
        self,
        ctx: RunContext,
        input: AgentInput | None,
        remaining: int,
        streaming: bool,
        paused: ChatModelAgentState | None,
    ) -> AsyncIterator[AgentEvent]:
        prepared = self._prepare(ctx)
        cancel = ctx.options.cancel
        late: list[Message] = []
        if paused is not None:
            messages = paused.messages
            if not paused.calls:  # a cancel paused the agent before a model call (D26)
                paused = None
                late, ctx.options.resume_messages = ctx.options.resume_messages, []
        else:
            system = self._system_message(ctx, prepared)
            assert input is not None  # run() passes the input; resume() the paused state
            # The framework hands each agent a fresh message list of its own (AgentInput).
            messages = input.messages
            if system is not None:
                messages.insert(0, system)
        designated = ctx.options.agent_options
        mine = designated.get(self.name) if designated else None
        model_options = None
        if mine is not None:  # options this run designated to the agent (D28)
            if mine.history_modifier is not None:
                modify_history(self.name, mine.history_modifier, messages, paused)
            model_options = mine.model_options or None
        # Session mode: the user's texts sent with a resume come before the next model call.
        messages.extend(late)
        retry = self.retry
        model: ChatModel = (
            self.model if retry is None else RetryingModel(self.model, retry, self.name)
        )
        inv = ctx.options.invocation
        hooks = inv if inv is not None and inv.plugins else None  # plugins (agents/_hooks.py)
        resumed = False
        while True:
            if paused is None:
                if cancel is not None and cancel.mode is not None and cancel.stops_before_model():
                    yield self._paused_before_model(ctx, messages, remaining, cancel)
                    return
                if remaining <= 0:
                    raise MaxIterationsError(
                        f"agent {self.name!r} exceeded max_iterations={self.max_iterations} "
                        "model calls without a final answer"
                    )
                remaining -= 1
                # The live list: a model must copy what it keeps beyond the call.
                request = (
                    ModelRequest(messages, prepared.specs)
                    if model_options is None
                    else ModelRequest(messages, prepared.specs, dict(model_options))
                )
                reply: Message | None = None
                try:
                    if hooks is not None:
                        if cancel is None:
                            reply = await model_reply(hooks, self.name, model, request)
                        else:
                            with cancel.cut_point():
                                reply = await model_reply(hooks, self.name, model, request)
                    # D24: the reply recorded (history, next model call) and executed has unique
                    # tool-call ids; a streamed reply's chunks stay the provider's.
                    if reply is not None:  # settled by the model hooks (not streamed)
                        if cancel is not None and cancel.mode is not None:
                            cancel.replied = True  # before the event: the safe point is here
                        yield AgentEvent("", (), AgentOutput(reply, None, "assistant"))
                    elif streaming and retry is not None:
                        accepted: list[Message] = []
                        attempts = stream_with_retry(
                            self.model, request, retry, self.name, accepted, cancel
                        )
                        async with closing(attempts) as streamed:
                            async for ev in streamed:
                                yield ev
                        reply = accepted[0]
                    elif streaming:
                        stream = ReplyStream(model.stream(request), cancel)
                        try:
                            yield AgentEvent("", (), AgentOutput(None, stream, "assistant"))
                            reply = await stream.collect()
                        finally:
                            if not stream.done:  # the caller stopped early: close the model call
                                await stream.aclose()
                    else:
                        if cancel is None:
                            reply = await model.generate(request)
                        else:
                            with cancel.cut_point():
                                reply = await model.generate(request)
                        if reply.tool_calls:
                            reply = with_unique_call_ids(reply)
                        if cancel is not None and cancel.mode is not None:
                            cancel.replied = True
                        yield AgentEvent("", (), AgentOutput(reply, None, "assistant"))
                except (CallCut, StreamCancelledError):
                    if cancel is None or not cancel.immediate:
                        raise
                    # D26: the call was cut; the resume makes it again (not counted twice).
                    yield self._paused_before_model(ctx, messages, remaining + 1, cancel)
                    return
                if cancel is not None and cancel.mode is not None:
                    # D26: a reply arrived after the cancel; with AFTER_MODEL no agent of the
                    # run starts another model call (a caller of an agent tool, a branch).
                    cancel.replied = True
                messages.append(reply)
                if not reply.tool_calls:
                    self._save_output(ctx, reply.content)
                    return
                state = ChatModelAgentState(
                    messages, list(reply.tool_calls), remaining_iterations=remaining
                )
                for call in reversed(reply.tool_calls):
                    if call.name in prepared.return_directly:
                        state.return_directly_call = call.id
                        break
                todo: list[tuple[ToolCall, ResumeInfo | None]] = [(c, None) for c in state.calls]
                self._refuse_partial_transfers(prepared, state, todo)
                if (
                    todo
                    and cancel is not None
                    and cancel.mode is not None
                    and cancel.stops_after_model()
                ):
                    # D26: the reply is kept; its calls wait, not started, for the resume.
                    for call, _ in todo:
                        state.pending[call.id] = self._cut_call(ctx, call, cancel)
                    yield self._interrupt_event(ctx, state)
                    return
                answering: dict[str, PendingToolCall] = {}
            else:
                state, paused = paused, None
                resumed = True
                todo = []
                # The interrupted calls being answered: one a cancel cuts waits again as it was.
                answering = {}
                # The cut calls the resume gave a result for: that is their result.
                given: list[tuple[ToolCall, ResumeInfo]] = []
                for call in state.calls:
                    pending = state.pending.get(call.id)
                    if pending is None:
                        continue
                    address = (*ctx.address, AddressSegment("tool", call.name, call.id))
                    rs = ctx.resume_state
                    claimed = rs.claim(address, ResumeInfo()) if rs is not None else ResumeInfo()
                    if pending.cut:
                        # A call a cancel stopped waits for no answer (as the agents a cancel
                        # stopped): it runs again from the start (D26), targeted or not --
                        # unless the resume gave its result (a tool response for it, a target
                        # with data other than None): then that is its result and the tool
                        # does not run (D12).
                        del state.pending[call.id]
                        if rs is not None and _given(rs, address, claimed):
                            given.append((call, claimed))
                        else:
                            todo.append((call, None))
                    elif claimed.is_resume_target:
                        todo.append((call, claimed))
                        del state.pending[call.id]
                        answering[call.id] = pending
                    else:  # D8: not targeted: stays pending with the same id
                        pending.point = self._reinterrupt(ctx, call, pending)
                history = state.messages[:-1]
                for call, claimed in given:
                    outcome = await self._invoke(ctx, prepared, call, claimed, history, given=True)
                    answered = self._settle(state, call, outcome)
                    if answered is not None and call.name not in prepared.return_directly:
                        yield answered
            async with closing(self._batch(ctx, prepared, state, todo)) as results:
                async for ev in results:
                    yield ev
            for call in state.calls:
                cut = state.pending.get(call.id)
                if cut is not None and cut.cut and call.id in answering:
                    pending = answering[call.id]
                    pending.point = self._reinterrupt(ctx, call, pending)
                    state.pending[call.id] = pending
            if state.pending:
                yield self._interrupt_event(ctx, state)
                return
            for call in state.calls:
                messages.append(state.results[call.id].message)
            if resumed:
                # Session mode: the user's texts sent with the tool responses follow the
                # results (a user message never separates a call from its results, D25).
                resumed = False
                late = ctx.options.resume_messages
                if late:
                    messages.extend(late)
                    ctx.options.resume_messages = []  # read by the first resumed agent only
            # D3: the results of transfer (and other return-directly) calls are held until the
            # whole batch finished -- also across a pause inside the batch -- and delivered
            # together, in call order, so a chain of transfers is never cut short.
            for call in state.calls:
                if call.name in prepared.return_directly:
                    yield _result_event(state.results[call.id])
            rd = state.return_directly_call
            if rd is not None:
                result = state.results[rd]
                if not result.is_error:  # a failed call does not return directly (D15, D22)
                    # exit_loop's "exiting the loop" is a notice, not the agent's answer.
                    if result.message.tool_name != EXIT_LOOP_TOOL_NAME:
                        self._save_output(ctx, result.message.content)
                    return
            remaining = state.remaining_iterations

    @staticmethod
    def _refuse_partial_transfers(
        prepared: Prepared,
        state: ChatModelAgentState,
        todo: list[tuple[ToolCall, ResumeInfo | None]],
    ) -> None:
        """Several transfer calls in one response form a chain (D3); if any names an agent
        that cannot be reached (D22), none transfers: the valid ones are answered with an
        error too (removed from ``todo``; delivered with the other held results) and the
        model is called again to choose anew."""
        transfer = prepared.tools.get(TRANSFER_TOOL_NAME)
        if not isinstance(transfer, TransferTool):
            return
        calls = [c for c, _ in todo if c.name == TRANSFER_TOOL_NAME]
        if len(calls) < 2 or all(transfer.accepts(c) for c in calls):
            return
        refused = {c.id for c in calls if transfer.accepts(c)}
        todo[:] = [item for item in todo if item[0].id not in refused]
        for call in calls:
            if call.id in refused:
                state.results[call.id] = error_result(
                    call,
                    "not transferred: another transfer_to_agent call "
                    "in this response names an agent that cannot be "
                    "reached; call it again with valid agents only",
                )

    def _save_output(self, ctx: RunContext, text: str) -> None:
        if self.output_key:
            ctx.set_session_value(self.output_key, text)

    # -- tools -----------------------------------------------------------------------------
    async def _batch(
        self,
        ctx: RunContext,
        prepared: Prepared,
        state: ChatModelAgentState,
        todo: list[tuple[ToolCall, ResumeInfo | None]],
    ) -> AsyncIterator[AgentEvent]:
        """Run the calls of one batch (concurrently); yield each result as it finishes.

        A failing call ends the batch with its error; the calls still running are cancelled
        and awaited (also when the agent itself is cancelled or closed) -- no task outlives it.
        """
        held = prepared.return_directly  # delivered by the loop once the batch finished
        history = state.messages[:-1]
        # Agent tools' forwarded inner events (D28): yielded as they arrive, never recorded.
        events = ToolEvents.if_wanted(prepared.tools.get(c.name) for c, _ in todo)
        if len(todo) == 1 and events is None:
            call, resume = todo[0]
            outcome = await self._invoke(ctx, prepared, call, resume, history)
            ev = self._settle(state, call, outcome)
            if ev is not None and call.name not in held:
                yield ev
            return
        tasks = {
            asyncio.ensure_future(
                _carrying_exits(self._invoke(ctx, prepared, c, r, history, events))
            ): c
            for c, r in todo
        }
        try:
            waiting: set[asyncio.Future[Any]] = set(tasks)
            while waiting:
                if events is None:
                    done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                else:  # the events a call forwarded come before its result
                    done, _ = await asyncio.wait(
                        {*waiting, events.wait()}, return_when=asyncio.FIRST_COMPLETED
                    )
                    waiting -= done
                    for internal in events.drain():
                        yield internal
                for task in [t for t in tasks if t in done]:
                    call = tasks[task]
                    if task.cancelled():
                        # Only this batch cancels its tasks, and not before it ends: the tool
                        # cancelled its own task. That ends the tool, not the whole run.
                        raise RelayKitError(
                            f"tool '{call.name}' ended with CancelledError (its task was cancelled)"
                        )
                    result = task.result()
                    if isinstance(result, _Exit):
                        raise result.exc  # in the agent's task, as a single call would
                    ev = self._settle(state, call, result)
                    if ev is not None and call.name not in held:
                        yield ev
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def _settle(
        state: ChatModelAgentState, call: ToolCall, outcome: ToolCallResult | PendingToolCall
    ) -> AgentEvent | None:
        if isinstance(outcome, PendingToolCall):
            state.pending[call.id] = outcome
            return None
        state.pending.pop(call.id, None)
        state.results[call.id] = outcome
        return _result_event(outcome)

    async def _invoke(
        self,
        ctx: RunContext,
        prepared: Prepared,
        call: ToolCall,
        resume: ResumeInfo | None,
        history: list[Message],
        events: ToolEvents | None = None,
        given: bool = False,
    ) -> ToolCallResult | PendingToolCall:
        """Run one call; with ``given``, a cut call the resume answered: ``resume.resume_data``
        is its result, through the ``after_tool`` hooks as a long-running tool's answer is,
        and the tool does not run (nor is the call cut again: nothing runs that could be)."""
        found = prepared.tools.get(call.name)
        cancel = ctx.options.cancel
        tool: Tool
        if given:
            tool = _GivenResult(found.spec if found is not None else ToolSpec(call.name, ""))
        elif found is None:
            available = ", ".join(sorted(prepared.tools)) or "none"
            return error_result(call, f"unknown tool '{call.name}'; available tools: {available}")
        else:
            tool = found
        # Parsed here for every kind of tool (function, agent, MCP, custom): D15 applies to all.
        arguments = parse_arguments(call)
        if isinstance(arguments, ToolCallResult):
            if not given:
                return arguments
            arguments = {}  # the given result stands all the same (the hooks see no arguments)
        run_ctx = ctx.derive(address=(*ctx.address, AddressSegment("tool", call.name, call.id)))
        tctx = ToolContext(run_ctx, call.name, call.id)
        if resume is not None:
            tctx.was_interrupted = resume.was_interrupted
            tctx.interrupt_state = resume.interrupt_state
            tctx.is_resume_target = resume.is_resume_target
            tctx.resume_data = resume.resume_data
        tctx.chat_history = history
        tctx.events = events
        inv = ctx.options.invocation
        if inv is not None and (not inv.plugins or isinstance(found, TransferTool)):
            inv = None  # no tool hooks (none for the synthetic transfer_to_agent)
        try:
            if cancel is None or isinstance(
                tool, (AgentTool, TransferTool, ExitTool, _GivenResult)
            ):
                # An agent tool's inner agents stop at their own safe points (D26); the
                # built-in transfer and exit tools return at once.
                result = await call_tool(tool, tctx, call, arguments, resume, inv, self.name)
            elif _runs_in_thread(tool):
                # D26: a worker thread cannot be stopped. Cutting the await would only drop
                # the thread's result, and the resume would run the call again -- while the
                # thread may still be at work. So once started such a call is not cut, its
                # tool hooks included (a cut in after_tool would drop the result just the
                # same): an immediate cancel waits for it and keeps its result. A call the
                # cancel came before does not start.
                if cancel.immediate:
                    raise CallCut
                result = await call_tool(tool, tctx, call, arguments, resume, inv, self.name)
            else:
                with cancel.cut_point():
                    result = await call_tool(tool, tctx, call, arguments, resume, inv, self.name)
        except CallCut:
            assert cancel is not None
            return self._cut_call(ctx, call, cancel)  # D26: cut; the resume runs it again
        except ToolError as exc:
            return ToolCallResult(tool_message(call, f"error: {exc}"), tctx.action, True)
        except ToolInterrupt as ti:
            ev = (
                composite_interrupt(run_ctx, ti.info, ti.state, *ti.sub_interrupts)
                if ti.sub_interrupts
                else stateful_interrupt(run_ctx, ti.info, ti.state)
            )
            return PendingToolCall(ti.info, ti.state, _point_of(ev))
        except Exception as exc:  # the tool failed: the agent's error event (D9, FA-13)
            name_tool(exc, call)
            raise
        except BaseException as exc:
            # D24/D9: a CancelledError the tool caught from something else, a GeneratorExit it
            # raised, ... end the tool (an error event naming it), never the run by escaping
            # raw. Cancellation from outside, KeyboardInterrupt and SystemExit propagate.
            if must_propagate(exc):
                raise
            raise ended_with(exc, f"tool '{call.name}'") from exc
        return ToolCallResult(tool_message(call, result_text(call, result)), tctx.action)

    def _reinterrupt(
        self, ctx: RunContext, call: ToolCall, pending: PendingToolCall
    ) -> InterruptContext:
        run_ctx = ctx.derive(address=(*ctx.address, AddressSegment("tool", call.name, call.id)))
        return _point_of(stateful_interrupt(run_ctx, pending.info, pending.state))

    def _cut_call(self, ctx: RunContext, call: ToolCall, cancel: CancelSignal) -> PendingToolCall:
        """A call a cancel stopped before it finished (or started): it waits for the resume."""
        info = cancel.info()
        run_ctx = ctx.derive(address=(*ctx.address, AddressSegment("tool", call.name, call.id)))
        return PendingToolCall(info, None, _point_of(stateful_interrupt(run_ctx, info, None)), True)

    def _paused_before_model(
        self, ctx: RunContext, messages: list[Message], remaining: int, cancel: CancelSignal
    ) -> AgentEvent:
        """D26: the agent's interrupt when a cancel stops it before a model call; the resume
        makes that call (``ChatModelAgentState`` without calls)."""
        state = ChatModelAgentState(messages, [], remaining_iterations=remaining)
        return stateful_interrupt(ctx, cancel.info(), state)

    def _interrupt_event(self, ctx: RunContext, state: ChatModelAgentState) -> AgentEvent:
        # In call order, not completion order: the interrupt does not depend on timing.
        ids = [call.id for call in state.calls if call.id in state.pending]
        subs = [p for p in (state.pending[i].point for i in ids) if p is not None]
        info = {"agent": self.name, "interrupted_tool_calls": ids}
        return composite_interrupt(ctx, info, state, *subs)


def _given(rs: ResumeState, address: Address, claimed: ResumeInfo) -> bool:
    """Whether the resume gave data for the point at ``address`` (claimed as ``claimed``): a
    target the caller named with data other than None (``targets={id: data}``, a tool
    response in session mode). A resume of every point gives none (D8), and None is what
    such a resume gives each point: no result."""
    return (
        claimed.is_resume_target
        and claimed.resume_data is not None
        and not rs.resume_all
        and rs.id_for(address) in rs.data
    )


def _runs_in_thread(tool: Tool) -> bool:
    """Whether the tool's calls run in a worker thread (a plain function tool), which nothing
    can stop: such a call is not cut once it started (D26)."""
    return isinstance(tool, FunctionTool) and not tool.is_async


class _GivenResult:
    """Stands in for the tool of a cut call the resume gave a result for (D26, D12). It is
    long-running for ``call_tool``, whose way with an answered long-running call is what such
    a call needs: the resume's data is the result and only the ``after_tool`` hooks run on
    it. The tool itself is never called."""

    __slots__ = ("spec",)

    long_running = True

    def __init__(self, spec: ToolSpec) -> None:
        self.spec = spec

    @property
    def name(self) -> str:
        """The answered tool's name."""
        return self.spec.name

    async def call(self, ctx: ToolContext, arguments: dict[str, object]) -> object:
        """Never called: ``call_tool`` takes an answered long-running call's result from the
        resume."""
        raise AssertionError(f"the answered call {ctx.tool_call_id!r} must not run")


def _result_event(result: ToolCallResult) -> AgentEvent:
    msg = result.message
    return AgentEvent("", (), AgentOutput(msg, None, "tool", msg.tool_name), result.action)


def _point_of(ev: AgentEvent) -> InterruptContext:
    """The top point of an interrupt event made by the interrupt functions."""
    info = interrupt_of(ev)
    top = info.top() if info is not None else None
    assert top is not None
    return top


_R = TypeVar("_R")


class _Exit:
    """A ``SystemExit`` or ``KeyboardInterrupt`` a concurrent tool call raised, carried out
    of its task: raised in a task of its own, asyncio hands it straight to the event loop
    (which stops), bypassing the agent and whoever runs it."""

    __slots__ = ("exc",)

    def __init__(self, exc: SystemExit | KeyboardInterrupt) -> None:
        self.exc = exc


async def _carrying_exits(call: Awaitable[_R]) -> _R | _Exit:
    try:
        return await call
    except (SystemExit, KeyboardInterrupt) as exc:
        return _Exit(exc)
