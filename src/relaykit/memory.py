"""The memory service: what an app remembers of a user's past sessions, searched by keywords.

Nothing writes memory on its own: an app calls ``add_session`` when it decides that a session
is worth remembering (when it ends, after a summary, never for a private one...), and an agent
or tool calls ``search`` to recall it. Memory belongs to one user of one app: a search never
returns another user's or another app's entries.

The service reads sessions through two small protocols (``SessionView``, ``SessionEventView``):
anything with the same attributes — the session service's ``Session`` among them — can be
remembered.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from relaykit.codec import register_type
from relaykit.messages import Message

__all__ = [
    "InMemoryMemoryService",
    "MemoryEntry",
    "MemoryService",
    "SessionEventView",
    "SessionView",
]


@register_type("relaykit.MemoryEntry")
@dataclass(slots=True)
class MemoryEntry:
    """One remembered message of a past session.

    >>> entry = MemoryEntry("user", Message.user("I live in Lyon"), 1700000000.0, "s-1")
    >>> entry.message.content
    'I live in Lyon'
    """

    author: str
    """Who wrote the message: ``"user"`` or the name of the agent."""
    message: Message
    """The message itself (a text message: memory keeps no event without text)."""
    timestamp: float
    """When its event happened, in seconds since the epoch."""
    session_id: str
    """The session it comes from."""


class SessionEventView(Protocol):
    """What the memory service reads from a session event."""

    @property
    def author(self) -> str:
        """Who wrote the event's message."""
        ...

    @property
    def message(self) -> Message | None:
        """The event's message; events without one (actions, errors) are not remembered."""
        ...

    @property
    def timestamp(self) -> float:
        """When the event happened, in seconds since the epoch."""
        ...


class SessionView(Protocol):
    """What the memory service reads from a session."""

    @property
    def app_name(self) -> str:
        """The app the session belongs to."""
        ...

    @property
    def user_id(self) -> str:
        """The user the session belongs to."""
        ...

    @property
    def id(self) -> str:
        """The session's id."""
        ...

    @property
    def events(self) -> Sequence[SessionEventView]:
        """The session's events, oldest first."""
        ...


@runtime_checkable
class MemoryService(Protocol):
    """Remembers sessions and finds their messages again, per user of an app.

    >>> isinstance(InMemoryMemoryService(), MemoryService)
    True
    """

    async def add_session(self, session: SessionView) -> None:
        """Remember the text messages of ``session``, replacing what was remembered of it."""
        ...

    async def search(self, app_name: str, user_id: str, query: str) -> list[MemoryEntry]:
        """Entries of ``user_id``'s sessions of ``app_name`` that match ``query``, best first."""
        ...


_WORD = re.compile(r"\w+")


def _words(text: str) -> frozenset[str]:
    """The distinct words of ``text``, case-folded (so "Straße" matches "STRASSE")."""
    return frozenset(word.casefold() for word in _WORD.findall(text))


@dataclass(slots=True, frozen=True)
class _Indexed:
    entry: MemoryEntry
    words: frozenset[str]


class InMemoryMemoryService:
    """Memory in a dict, searched by keywords: for tests, demos and single-process apps.

    A message matches when it shares at least one word with the query (case-insensitive);
    results are ordered by the number of shared words, then newest first. Every method runs to
    its end without awaiting, so concurrent tasks are safe.

    >>> import asyncio
    >>> from types import SimpleNamespace as Record
    >>> session = Record(app_name="shop", user_id="alice", id="s-1", events=[
    ...     Record(author="user", message=Message.user("My size is 38"), timestamp=1.0),
    ...     Record(author="shop_assistant", message=None, timestamp=2.0)])
    >>> memory = InMemoryMemoryService()
    >>> async def demo():
    ...     await memory.add_session(session)
    ...     return await memory.search("shop", "alice", "what SIZE again?")
    >>> [entry.message.content for entry in asyncio.run(demo())]
    ['My size is 38']
    """

    def __init__(self) -> None:
        # (app name, user id) -> session id -> that session's entries, oldest first.
        self._remembered: dict[tuple[str, str], dict[str, list[_Indexed]]] = {}

    async def add_session(self, session: SessionView) -> None:
        """Remember the events of ``session`` that carry a text message.

        Adding a session again replaces what was remembered of it (no duplicates): add it
        whenever it has grown, with all its events — a session listed without its events would
        replace what was remembered of it with nothing.
        """
        app_name, user_id, session_id = session.app_name, session.user_id, session.id
        for kind, value in (("app_name", app_name), ("user_id", user_id), ("id", session_id)):
            if not isinstance(value, str):
                raise TypeError(f"a session's {kind} must be a str, not {type(value).__name__}")
        indexed: list[_Indexed] = []
        for event in session.events:
            message = event.message
            if not isinstance(message, Message) or not message.content.strip():
                continue  # tool calls, actions and errors carry no text to recall
            # A copy: later changes to the session's message do not change what was indexed.
            kept = dataclasses.replace(
                message,
                tool_calls=list(message.tool_calls),
                attachments=list(message.attachments),
                metadata=dict(message.metadata),
            )
            entry = MemoryEntry(event.author, kept, event.timestamp, session_id)
            indexed.append(_Indexed(entry, _words(message.content)))
        sessions = self._remembered.setdefault((app_name, user_id), {})
        if indexed:
            sessions[session_id] = indexed
        else:
            sessions.pop(session_id, None)

    async def search(self, app_name: str, user_id: str, query: str) -> list[MemoryEntry]:
        """Entries of ``user_id``'s sessions of ``app_name`` sharing a word with ``query``.

        Ordered by the number of shared words, then newest first; empty when the query has no
        words.
        """
        if not isinstance(query, str):
            raise TypeError(f"a memory query must be a str, not {type(query).__name__}")
        wanted = _words(query)
        if not wanted:
            return []
        scored: list[tuple[int, float, int, MemoryEntry]] = []
        sessions = self._remembered.get((app_name, user_id), {})
        for entries in sessions.values():
            for item in entries:
                score = len(wanted & item.words)
                if score:
                    entry = item.entry
                    # len(scored) keeps equal scores and times in the order they were added.
                    scored.append((-score, -entry.timestamp, len(scored), entry))
        scored.sort(key=lambda row: row[:3])
        return [MemoryEntry(e.author, e.message, e.timestamp, e.session_id) for *_, e in scored]
