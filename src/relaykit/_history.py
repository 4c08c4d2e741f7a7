"""The history a flow agent builds for its agent: the root input plus the run history, other
agents' messages rewritten as context lines (FA-03, FA-07), transfer pairs skipped (D5)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from relaykit.codec import register_type
from relaykit.context import RecordedEvent, RunContext
from relaykit.messages import Message

__all__ = [
    "HistoryEntry",
    "HistoryRewriter",
    "default_history",
    "place_result",
    "rewrite_message",
    "strip_transfer",
    "transfer_call_ids",
]


@register_type("relaykit.HistoryEntry")
@dataclass(slots=True)
class HistoryEntry:
    """One message of the history a flow agent builds for its agent (what a
    ``HistoryRewriter`` receives).

    >>> HistoryEntry(False, "billing", Message.assistant("refunded")).agent_name
    'billing'
    """

    #: True for a message of the run's input; False for one an agent produced.
    is_user_input: bool
    #: The agent that produced the message ("" for the run's input).
    agent_name: str
    #: The message as it was produced (not rewritten).
    message: Message


HistoryRewriter = Callable[[RunContext, list[HistoryEntry]], Awaitable[list[Message]]]
"""Builds an agent's input messages from the history entries (``as_flow_agent(...,
history_rewriter=...)``), instead of the default rewriting (docs/trees-and-transfer.md)."""


def rewrite_message(message: Message, agent_name: str) -> Message:
    """Another agent's message as the user-role context line the next agent reads (FA-07).

    >>> rewrite_message(Message.assistant("refunded"), "billing").content
    'For context: [billing] said: refunded.'
    """
    role = message.role
    if role == "assistant" and not message.tool_calls:
        text = (
            f"For context: [{agent_name}] said: {message.content}."
            if message.content
            else "For context:"
        )
    elif role == "assistant":
        parts = ["For context:"]
        if message.content:
            parts.append(f" [{agent_name}] said: {message.content}.")
        for call in message.tool_calls:
            parts.append(
                f" [{agent_name}] called tool: `{call.name}` with arguments: {call.arguments}."
            )
        text = "".join(parts)
    elif role == "tool" and message.content:
        text = (
            f"For context: [{agent_name}] `{message.tool_name}` tool returned result: "
            f"{message.content}."
        )
    else:
        text = "For context:"
    attachments = list(message.attachments) if message.attachments else []
    return Message("user", text, [], None, None, None, attachments, {})


def default_history(
    name: str,
    messages: list[Message],
    records: Sequence[RecordedEvent],
    count: int,
    skip_ids: set[str] | None,
) -> list[Message]:
    """Root input + history: own messages as they are, others' rewritten (cached per event)."""
    append = messages.append
    for i in range(count):
        rec = records[i]
        msg = rec.message
        if msg is None:
            continue  # no message (actions, errors) or a stream that will be retried
        author = rec.event.agent_name
        if skip_ids:
            stripped = strip_transfer(rec, msg, skip_ids)
            if stripped is None:
                continue
            if stripped is not msg:
                append(stripped if author == name else rewrite_message(stripped, author))
                continue
        if author == name:
            if msg.role == "tool":
                place_result(messages, msg)
            else:
                append(msg)
        else:
            rewritten = rec.rewritten
            if rewritten is None:
                rewritten = rec.rewritten = rewrite_message(msg, author)
            append(rewritten)
    return messages


def place_result(messages: list[Message], result: Message) -> None:
    """Add an agent's own tool ``result`` right after its call's message and the results
    already there. A result that came late (a live session's long-running call answered after
    the model went on talking, an answer stored when a session ended) would otherwise follow
    other messages, and providers reject a call whose results do not follow it. A result whose
    call is not in ``messages`` is appended.

    >>> from relaykit.messages import ToolCall
    >>> calls = Message.assistant("", [ToolCall("r1", "refund", "{}")])
    >>> history = [calls, Message.user("Is it quick?"), Message.assistant("Soon.")]
    >>> place_result(history, Message.tool("approved", tool_call_id="r1"))
    >>> [m.role for m in history]
    ['assistant', 'tool', 'user', 'assistant']
    """
    call_id = result.tool_call_id
    i = len(messages)
    while i and messages[i - 1].role == "tool":
        i -= 1
    if not call_id or (i and _calls(messages[i - 1], call_id)):
        messages.append(result)  # the common case: it follows its call (and its siblings)
        return
    for j in range(i - 1, -1, -1):
        if _calls(messages[j], call_id):
            k = j + 1
            while k < len(messages) and messages[k].role == "tool":
                k += 1
            messages.insert(k, result)
            return
    messages.append(result)


def _calls(message: Message, call_id: str) -> bool:
    return message.role == "assistant" and any(c.id == call_id for c in message.tool_calls)


def transfer_call_ids(records: Sequence[RecordedEvent]) -> set[str]:
    ids: set[str] = set()
    for rec in records:
        a = rec.event.action
        msg = rec.message
        if (
            a is not None
            and a.transfer_to_agent is not None
            and msg is not None
            and msg.role == "tool"
            and msg.tool_call_id
        ):
            ids.add(msg.tool_call_id)
    return ids


def strip_transfer(rec: RecordedEvent, msg: Message, ids: set[str]) -> Message | None:
    """D5: drop a transfer's tool message and its call; keep the rest of the call message."""
    if msg.role == "tool":
        a = rec.event.action
        if msg.tool_call_id in ids and a is not None and a.transfer_to_agent is not None:
            return None
        return msg
    if msg.role != "assistant" or not any(c.id in ids for c in msg.tool_calls):
        return msg
    calls = [c for c in msg.tool_calls if c.id not in ids]
    if not calls and not msg.content:
        return None
    return dataclasses.replace(msg, tool_calls=calls)
