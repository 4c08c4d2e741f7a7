"""The tool calls of a ChatModelAgent: their saved state, the built-in transfer and exit
tools, argument parsing (D15, bounded depth), unique call ids (D24) and JSON-safe results."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from pydantic_core import to_jsonable_python

from relaykit._cancel import CancelSignal
from relaykit.agents._prompts import (
    EXIT_TOOL,
    transfer_tool_spec,
)
from relaykit.codec import register_type
from relaykit.errors import (
    ConfigurationError,
    SerializationError,
    ToolError,
)
from relaykit.events import (
    TRANSFER_TOOL_NAME,
    AgentAction,
    TransferToAgentAction,
)
from relaykit.interrupts import (
    InterruptContext,
)
from relaykit.messages import Message, MessageStream, ToolCall
from relaykit.models.base import ToolSpec
from relaykit.tools.base import Tool, ToolContext

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "ChatModelAgentState",
    "PendingToolCall",
    "ToolCallResult",
]

MAX_ARGUMENT_DEPTH = 64
"""How deeply a model may nest the JSON arguments of a tool call: the arguments object itself is
level 1. Deeper arguments go back to the model as ``error: ...`` (D15) instead of reaching the
tool (or exhausting the interpreter's recursion limit while they are parsed)."""


@register_type("relaykit.ToolCallResult")
@dataclass(slots=True)
class ToolCallResult:
    """A finished tool call: its tool message and the action the tool attached.

    >>> ToolCallResult(Message.tool("42", tool_call_id="call_1", tool_name="add")).is_error
    False
    """

    #: The tool message answering the call (the result, or ``error: ...``).
    message: Message
    #: The action the tool attached (``ToolContext.set_action``), if any.
    action: AgentAction | None = None
    #: True when the call failed and the model receives ``error: ...`` (D15).
    is_error: bool = False


@register_type("relaykit.PendingToolCall", exclude=("point",))
@dataclass(slots=True)
class PendingToolCall:
    """An interrupted tool call: what it said and what it saved.

    >>> PendingToolCall({"question": "approve?"}).info
    {'question': 'approve?'}
    """

    #: What the tool's ``ToolInterrupt`` told the caller (application-defined, hence ``Any``).
    info: Any = None
    #: What the tool's ``ToolInterrupt`` saved (application-defined, hence ``Any``).
    state: Any = None
    # Its interrupt point, until the agent's composite interrupt collects it (not saved: the
    # checkpoint saves the whole tree).
    point: InterruptContext | None = field(default=None, repr=False, compare=False)
    #: True for a call a cancel stopped before it finished, or before it started (D26): the
    #: resume runs it from the start (``info`` is the ``Cancelled`` value).
    cut: bool = False


@register_type("relaykit.ChatModelAgentState")
@dataclass(slots=True)
class ChatModelAgentState:
    """A ChatModelAgent paused in a tool batch (its interrupt state); without ``calls``, a
    ChatModelAgent a cancel paused before a model call (D26).

    >>> call = ToolCall("call_1", "approve", "{}")
    >>> state = ChatModelAgentState([Message.assistant("", [call])], [call])
    >>> state.pending, state.remaining_iterations
    ({}, 0)
    """

    #: The conversation so far, ending with the model reply whose calls are running.
    messages: list[Message]
    #: The calls of that reply, in the model's order.
    calls: list[ToolCall]
    #: The finished calls' results, by tool-call id (not run again on resume).
    results: dict[str, ToolCallResult] = field(default_factory=dict)
    #: The interrupted calls, by tool-call id.
    pending: dict[str, PendingToolCall] = field(default_factory=dict)
    #: The model calls the agent may still make (``max_iterations`` minus those made).
    remaining_iterations: int = 0
    #: The id of the call whose result ends the agent's turn (``return_directly``), if any.
    return_directly_call: str | None = None


def checked_state(agent_name: str, state: object) -> ChatModelAgentState:
    """``state`` as the saved state of a ChatModelAgent resuming: refused with a
    ``ConfigurationError`` when it is not one, or when its calls, results and pending calls do
    not match (a corrupt or hand-edited checkpoint) -- rather than failing half-way through.

    >>> try:
    ...     checked_state("helper", {"calls": []})
    ... except ConfigurationError as exc:
    ...     print(str(exc)[-44:])
    with an invalid interrupt state of type dict
    """
    if not isinstance(state, ChatModelAgentState):
        raise ConfigurationError(
            f"ChatModelAgent {agent_name!r} was asked to resume with an invalid interrupt "
            f"state of type {type(state).__name__}"
        )
    ids = [call.id for call in state.calls]
    if not ids and not state.pending and not state.results and state.return_directly_call is None:
        return state  # paused before a model call (D26)
    known = set(ids)
    if (
        len(known) != len(ids)
        or not state.pending
        or not set(state.pending) <= known
        or not set(state.results) <= known
        or any(i not in state.pending and i not in state.results for i in ids)
        or state.return_directly_call not in (None, *ids)
    ):
        raise ConfigurationError(
            f"ChatModelAgent {agent_name!r} was asked to resume with an inconsistent "
            "interrupt state (its tool calls, results and pending calls do not match)"
        )
    return state


class TransferTool:
    """``transfer_to_agent`` for one set of targets (D22): the spec's ``enum`` lists them, and
    a call naming any other agent goes back to the model as ``error: ...`` (no action set)."""

    __slots__ = ("_error", "_targets", "spec")

    name = TRANSFER_TOOL_NAME

    def __init__(self, targets: Sequence[str]) -> None:
        self.spec = transfer_tool_spec(targets)
        self._targets = frozenset(targets)
        self._error = f"valid agents: {', '.join(targets)}"

    async def call(self, ctx: ToolContext, arguments: dict[str, object]) -> str:
        name = arguments.get("agent_name")
        if not isinstance(name, str) or not name:
            raise ToolError("transfer_to_agent needs a string argument 'agent_name'")
        if name not in self._targets:
            raise ToolError(f"cannot transfer to '{name}'; {self._error}")
        ctx.set_action(AgentAction(transfer_to_agent=TransferToAgentAction(name)))
        return f"successfully transferred to agent [{name}]"

    def accepts(self, call: ToolCall) -> bool:
        """True when ``call`` names a valid target (checked before a batch runs)."""
        arguments = parse_arguments(call)
        return (
            not isinstance(arguments, ToolCallResult)
            and arguments.get("agent_name") in self._targets
        )


class ExitTool:
    spec = EXIT_TOOL
    name = EXIT_TOOL.name

    async def call(self, ctx: ToolContext, arguments: dict[str, object]) -> str:
        result = arguments.get("final_result")
        if not isinstance(result, str):
            raise ToolError("exit needs a string argument 'final_result'")
        ctx.set_action(AgentAction(exit=True))
        return result


EXIT = ExitTool()


@dataclass(slots=True)
class Prepared:
    instruction: str
    tools: dict[str, Tool]
    specs: list[ToolSpec]
    return_directly: frozenset[str]


def tool_message(call: ToolCall, content: str) -> Message:
    return Message("tool", content, [], call.id, call.name)


def error_result(call: ToolCall, text: str) -> ToolCallResult:
    """A bad call answered with ``error: <text>`` for the model to correct (D15)."""
    return ToolCallResult(tool_message(call, f"error: {text}"), None, True)


# -- tool-call ids (D24) -----------------------------------------------------------------------
def with_unique_call_ids(reply: Message) -> Message:
    """``reply`` with every empty or repeated tool-call id replaced by ``<id or "call">_<n>``
    (``n``: the call's index in the reply); the first occurrence of an id keeps it.

    Some OpenAI-compatible servers send empty or duplicate ids; results are paired with their
    calls by id, so they must be unique. ``reply`` itself is returned when they already are
    (one set pass: the common case costs next to nothing), else a copy: the provider's message
    and chunks are left as they were.
    """
    calls = reply.tool_calls
    seen: set[str] = set()
    for call in calls:
        if not call.id or call.id in seen:
            break
        seen.add(call.id)
    else:
        return reply
    taken = {call.id for call in calls}  # a new id must not take a later call's own id
    seen.clear()
    unique: list[ToolCall] = []
    for n, call in enumerate(calls):
        call_id = call.id
        if not call_id or call_id in seen:
            call_id = f"{call.id or 'call'}_{n}"
            while call_id in taken or call_id in seen:
                call_id = f"{call_id}_{n}"
            call = ToolCall(call_id, call.name, call.arguments, call.index)
        seen.add(call_id)
        unique.append(call)
    return dataclasses.replace(reply, tool_calls=unique)


class ReplyStream(MessageStream):
    """A model's streamed reply as the agent yields it (D24): iterating it gives the provider's
    chunks as they arrive (ids as the provider sent them); the collected message -- what the
    run history, the agent and the next model call use -- has unique tool-call ids.

    It shares the model stream's buffer instead of re-reading it, so the chunks cost nothing
    extra; whoever collects it (the run history, the agent, the caller, before or after the
    others) gets the same message.
    """

    __slots__ = ("_reply",)

    def __init__(self, stream: MessageStream, cancel: CancelSignal | None = None) -> None:
        # Sharing ``_source`` (private to messages.py) is deliberate: a pass-through iterator
        # would buffer every chunk twice and take a second lock per chunk.
        self._source = stream._source
        self._reply: Message | None = None
        if cancel is not None:
            self._source.cut = cancel  # an immediate cancel cuts the reply (D26)

    async def collect(self) -> Message:
        """The concatenated reply with unique tool-call ids (cached)."""
        reply = self._reply
        if reply is None:
            reply = self._reply = with_unique_call_ids(await super().collect())
        return reply

    @property
    def chunks(self) -> list[Message]:
        """The buffered chunks; once ids were rewritten, the collected reply as one chunk.

        Checkpoints and sessions store a stream as the concatenation of its ``chunks``: this
        way they store the ids the history and the model saw, not the provider's."""
        reply = self._reply
        if reply is not None and self._source.message is not reply:
            return [reply]
        return list(self._source.chunks)


# -- tool-call arguments and results -----------------------------------------------------------
def parse_arguments(call: ToolCall) -> dict[str, object] | ToolCallResult:
    """The call's JSON arguments as a dict, or the ``error: ...`` result for the model (D15)."""
    text = call.arguments
    if not text or text.isspace():
        return {}
    try:
        arguments = json.loads(text)
    except RecursionError:  # deeper than the interpreter can parse
        return error_result(call, _too_deep(call))
    except ValueError as exc:
        return error_result(call, f"arguments of tool '{call.name}' are not valid JSON: {exc}")
    if not isinstance(arguments, dict):
        return error_result(call, f"arguments of tool '{call.name}' must be a JSON object")
    # Nesting cannot exceed the number of opening brackets: usual arguments are never walked.
    if text.count("{") + text.count("[") > MAX_ARGUMENT_DEPTH and _deeper_than(
        arguments, MAX_ARGUMENT_DEPTH
    ):
        return error_result(call, _too_deep(call))
    return arguments


def _too_deep(call: ToolCall) -> str:
    return f"arguments of tool '{call.name}' are nested deeper than {MAX_ARGUMENT_DEPTH} levels"


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether parsed JSON ``value`` nests objects/arrays more than ``limit`` levels deep
    (iterative: the value may be as deep as the parser allowed)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))
    return False


def result_text(call: ToolCall, result: object) -> str:
    """A tool's return value as the tool message's content: a ``str`` as is, anything else as
    JSON. A value that cannot be JSON is the tool failing (``SerializationError``): the model
    must never receive invalid JSON, nor a silent ``str()`` of an unknown object."""
    if isinstance(result, str):
        return result
    try:
        value = to_jsonable_python(result, bytes_mode="base64", fallback=_not_jsonable)
    except _NotJSONable as exc:
        what = f"an object of type {type(exc.value).__qualname__}"
    except (ValueError, RecursionError) as exc:  # pydantic refuses cycles and extreme depth
        what = str(exc) or type(exc).__name__
    else:
        try:
            return json.dumps(value, allow_nan=False, ensure_ascii=False)
        except (ValueError, TypeError, RecursionError) as exc:  # NaN and infinities, mostly
            what = _non_finite(value) or str(exc) or type(exc).__name__
    raise SerializationError(
        f"tool '{call.name}' returned a value that cannot be sent to the model as JSON: {what}"
    )


class _NotJSONable(Exception):
    def __init__(self, value: object) -> None:
        super().__init__(type(value).__qualname__)
        self.value = value


def _not_jsonable(value: object) -> NoReturn:
    """pydantic's fallback for a value it does not know: refuse it (never ``str()`` it)."""
    raise _NotJSONable(value)


def _non_finite(value: object) -> str | None:
    """``float NaN`` / ``float infinity`` for the first non-finite float in a JSON-able
    ``value``, else None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            if math.isnan(item):
                return "float NaN"
            return "float infinity" if item > 0 else "float -infinity"
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def name_tool(exc: BaseException, call: ToolCall) -> None:
    """Note on a tool's exception which call raised it (the event's error stays ``exc``)."""
    note = f"raised by tool '{call.name}' (tool call {call.id!r})"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)
