"""Small custom agents and helpers shared by the conformance tests.

A *step* of a ``ScriptedAgent`` is one of:

- ``str`` — an assistant message with that text;
- ``Message`` / ``MessageStream`` — an event carrying it (a stream gives a streaming output);
- ``AgentEvent`` — yielded as is (the same object every time the step runs);
- an exception instance — raised at that point;
- a callable ``(ctx) -> AgentEvent | None`` — called when the step is reached (interrupts,
  decisions that depend on the run path...); ``None`` yields nothing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Union

import relaykit as rk

Step = Union[  # noqa: UP007 - a runtime alias, kept readable
    str,
    rk.Message,
    rk.MessageStream,
    rk.AgentEvent,
    BaseException,
    Callable[[rk.RunContext], "rk.AgentEvent | None"],
]
ResumeSteps = Union[  # noqa: UP007
    Sequence[Step], Callable[[rk.RunContext, rk.ResumeInfo], Sequence[Step]]
]
Summary = tuple[str, list[str], "str | None", "str | None"]


# -- building blocks ---------------------------------------------------------------------------
def user(text: str) -> rk.Message:
    return rk.Message.user(text)


def names(run_path: Iterable[rk.RunStep]) -> list[str]:
    """A run path as a list of agent names."""
    return [step.agent_name for step in run_path]


def transfer(dest: str) -> rk.AgentEvent:
    """An action-only transfer event (a fresh object)."""
    return rk.AgentEvent.transfer(dest)


def llm_transfer(dest: str, *, text: str = "", call_id: str = "call_1") -> list[Step]:
    """What an LLM agent yields to transfer: an assistant message calling ``transfer_to_agent``
    (JSON arguments, D2) and the tool event answering it, which carries the transfer action."""
    call = rk.Message.assistant(
        text, [rk.ToolCall(call_id, "transfer_to_agent", json.dumps({"agent_name": dest}))]
    )
    result = rk.Message.tool(
        f"successfully transferred to agent [{dest}]",
        tool_call_id=call_id,
        tool_name="transfer_to_agent",
    )
    return [
        call,
        with_action(result, rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction(dest))),
    ]


def with_action(message: rk.Message, action: rk.AgentAction) -> rk.AgentEvent:
    """An event carrying ``message`` and ``action``."""
    ev = rk.AgentEvent.from_message(message)
    ev.action = action
    return ev


def interrupt_step(info: Any, state: Any = None) -> Callable[[rk.RunContext], rk.AgentEvent]:
    """A step that interrupts (stateful when ``state`` is given)."""

    def step(ctx: rk.RunContext) -> rk.AgentEvent:
        if state is None:
            return rk.interrupt(ctx, info)
        return rk.stateful_interrupt(ctx, info, state)

    return step


def stream_of(
    *texts: str, error: BaseException | None = None, closed: list[str] | None = None
) -> rk.MessageStream:
    """A stream whose async-generator source yields one assistant chunk per text, then raises
    ``error`` if given. ``closed`` (if given) gets ``"closed"`` appended when the source's
    ``finally`` runs."""

    async def source() -> AsyncIterator[rk.Message]:
        try:
            for text in texts:
                yield rk.Message.assistant(text)
            if error is not None:
                raise error
        finally:
            if closed is not None:
                closed.append("closed")

    return rk.MessageStream(source())


def _to_event(ctx: rk.RunContext, step: Step) -> rk.AgentEvent | None:
    if isinstance(step, str):
        return rk.AgentEvent.from_message(rk.Message.assistant(step))
    if isinstance(step, (rk.Message, rk.MessageStream)):
        return rk.AgentEvent.from_message(step)
    if isinstance(step, rk.AgentEvent):
        return step
    if isinstance(step, BaseException):
        raise step
    return step(ctx)


# -- agents ------------------------------------------------------------------------------------
class ScriptedAgent(rk.BaseAgent):
    """Yields its steps; records every input, run path and whether its generator was closed.

    ``closed`` counts the times its generator's ``finally`` ran, ``completed`` the times it
    reached its end (so ``closed - completed`` runs were stopped from outside or raised).
    """

    def __init__(self, name: str, steps: Sequence[Step] = (), *, description: str = "") -> None:
        super().__init__(name, description or f"{name} description")
        self.steps = list(steps)
        self.inputs: list[rk.AgentInput] = []
        self.run_paths: list[list[str]] = []
        self.started = 0
        self.closed = 0
        self.completed = 0

    @property
    def input_texts(self) -> list[list[str]]:
        """The message contents of each input received."""
        return [[m.content for m in inp.messages] for inp in self.inputs]

    async def _play(
        self, ctx: rk.RunContext, steps: Sequence[Step]
    ) -> AsyncIterator[rk.AgentEvent]:
        self.started += 1
        self.run_paths.append(names(ctx.run_path))
        try:
            for step in steps:
                ev = _to_event(ctx, step)
                if ev is not None:
                    yield ev
            self.completed += 1
        finally:
            self.closed += 1

    def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.inputs.append(input)
        return self._play(ctx, self.steps)


class ResumableScriptedAgent(ScriptedAgent):
    """A ``ScriptedAgent`` that can resume: plays ``resume_steps`` (or what the callable
    returns for the ``ResumeInfo``) and records every ``ResumeInfo`` it receives."""

    def __init__(
        self,
        name: str,
        steps: Sequence[Step] = (),
        resume_steps: ResumeSteps = (),
        *,
        description: str = "",
    ) -> None:
        super().__init__(name, steps, description=description)
        self.resume_steps = resume_steps
        self.resume_infos: list[rk.ResumeInfo] = []

    def resume(
        self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.resume_infos.append(info)
        steps = self.resume_steps
        if callable(steps):
            steps = steps(ctx, info)
        return self._play(ctx, steps)


def leaf(name: str, info: Any, state: Any = None) -> ResumableScriptedAgent:
    """An agent that interrupts with ``info`` (and ``state``) and, on resume (D8), finishes
    with ``"<name> done <resume data>"`` when it is a resume target, else interrupts again
    with the same info and its saved state."""

    def on_resume(ctx: rk.RunContext, resumed: rk.ResumeInfo) -> list[Step]:
        if resumed.is_resume_target:
            return [f"{name} done {resumed.resume_data}"]
        return [interrupt_step(info, resumed.interrupt_state)]

    return ResumableScriptedAgent(name, [interrupt_step(info, state)], on_resume)


class RaisingAgent(rk.BaseAgent):
    """Yields ``before`` texts, then raises ``error`` (inside its generator)."""

    def __init__(self, name: str, error: BaseException, before: Sequence[str] = ()) -> None:
        super().__init__(name)
        self.error = error
        self.before = list(before)

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        for text in self.before:
            yield rk.AgentEvent.from_message(rk.Message.assistant(text))
        raise self.error


class EagerRaisingAgent(rk.BaseAgent):
    """An agent whose ``run`` raises before returning an iterator (not a generator)."""

    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(name)
        self.error = error

    def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        raise self.error


class FanoutAgent(rk.BaseAgent):
    """A custom composite: runs each child (as a flow agent below it) one after the other,
    forwards their events and, when some of them interrupt, yields one ``composite_interrupt``
    over their interrupts. Its state is the list of children still interrupted; on resume it
    resumes only those."""

    def __init__(self, name: str, children: Sequence[rk.Agent]) -> None:
        super().__init__(name)
        self.sub_agents = [rk.as_flow_agent(child) for child in children]
        self.resume_infos: list[rk.ResumeInfo] = []
        self.closed = 0

    async def _each(
        self, ctx: rk.RunContext, calls: list[tuple[str, Any]]
    ) -> AsyncIterator[rk.AgentEvent]:
        interrupts: list[rk.AgentEvent] = []
        pending: list[str] = []
        try:
            for name, gen in calls:
                async with contextlib.aclosing(gen) as events:
                    async for ev in events:
                        if ev.action is not None and ev.action.interrupted is not None:
                            interrupts.append(ev)
                            pending.append(name)
                            continue
                        yield ev
            if interrupts:
                yield rk.composite_interrupt(ctx, f"{self.name} interrupted", pending, *interrupts)
        finally:
            self.closed += 1

    def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        return self._each(ctx, [(sub.name, sub.run(ctx, input)) for sub in self.sub_agents])

    def resume(
        self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.resume_infos.append(info)
        pending = set(info.interrupt_state or ())
        return self._each(
            ctx,
            [(sub.name, sub.resume(ctx, info)) for sub in self.sub_agents if sub.name in pending],
        )


# -- reading results ---------------------------------------------------------------------------
async def collect(events: AsyncIterable[rk.AgentEvent]) -> list[rk.AgentEvent]:
    """Every event of ``events``, in order."""
    return [ev async for ev in events]


def action_kind(ev: rk.AgentEvent) -> str | None:
    """``"error"``, ``"interrupt"``, ``"exit"``, ``"transfer:<dest>"``, ``"break_loop"``,
    ``"custom"`` or ``None``."""
    if ev.error is not None:
        return "error"
    a = ev.action
    if a is None:
        return None
    if a.interrupted is not None:
        return "interrupt"
    if a.exit:
        return "exit"
    if a.transfer_to_agent is not None:
        return f"transfer:{a.transfer_to_agent.dest_agent_name}"
    if a.break_loop is not None:
        return "break_loop"
    if a.custom is not None:
        return "custom"
    return None


def message_text(msg: rk.Message | None) -> str | None:
    """A message's content, or ``call:<name>,...`` for a content-less tool-call message."""
    if msg is None:
        return None
    if not msg.content and msg.tool_calls:
        return "call:" + ",".join(c.name for c in msg.tool_calls)
    return msg.content


async def summarize(events: Iterable[rk.AgentEvent]) -> list[Summary]:
    """``(agent_name, run path names, text, action kind)`` per event; the text of an error
    event is the error's text; streams are concatenated (one that ended in an error gives its
    chunks followed by `` !<error type>``)."""
    out: list[Summary] = []
    for ev in events:
        text: str | None
        if ev.error is not None:
            text = str(ev.error)
        elif ev.output is not None:
            try:
                text = message_text(await ev.output.get_message())
            except Exception as exc:  # a stream that ended in an error: its chunks and the error
                stream = ev.output.stream
                chunks = stream.chunks if stream is not None else []
                text = "".join(c.content for c in chunks) + f" !{type(exc).__name__}"
        else:
            text = None
        out.append((ev.agent_name, names(ev.run_path), text, action_kind(ev)))
    return out


async def run_summary(
    runner: rk.Runner, *messages: rk.Message | str, **options: Any
) -> list[Summary]:
    """Run ``runner`` on ``messages`` (strings become user messages) and summarise."""
    msgs = [user(m) if isinstance(m, str) else m for m in messages]
    return await summarize(await collect(runner.run(msgs, **options)))


def interrupt_contexts(events: Sequence[rk.AgentEvent]) -> list[rk.InterruptContext]:
    """The root-cause contexts of the (single) interrupt event among ``events``."""
    found = [ev for ev in events if ev.action is not None and ev.action.interrupted is not None]
    assert len(found) == 1, f"expected one interrupt event, got {len(found)}"
    interrupted = found[0].action.interrupted  # type: ignore[union-attr]
    assert interrupted is not None
    return interrupted.contexts
