"""The SessionService protocol, sessions and their events, state scopes and name validation.

A *session* is one conversation of one user with one app: the events of its turns, in order,
and its state. State keys carry their scope in a prefix:

- ``app:<key>`` — shared by every user and session of the app;
- ``user:<key>`` — shared by every session of one user of the app;
- ``temp:<key>`` — never stored (a value for the current turn only);
- any other key — the session's own.

A service stores each event's ``state_delta`` by scope, and ``Session.state`` is the merged view
(``app:`` and ``user:`` keys with their prefix, plain keys as they are; never ``temp:`` keys).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, runtime_checkable

from relaykit.codec import register_type
from relaykit.errors import SessionStoreError
from relaykit.events import AgentAction
from relaykit.messages import Message

__all__ = [
    "APP_PREFIX",
    "MAX_NAME_LENGTH",
    "TEMP_PREFIX",
    "USER_PREFIX",
    "HistoryMark",
    "Scope",
    "Session",
    "SessionEvent",
    "SessionService",
    "TurnView",
    "compaction_range",
    "state_scope",
    "validate_lock_timeout",
    "validate_session_name",
    "validate_state_key",
]

#: Prefix of the keys shared by every user and session of an app.
APP_PREFIX: Final = "app:"
#: Prefix of the keys shared by every session of one user of an app.
USER_PREFIX: Final = "user:"
#: Prefix of the keys that are never stored.
TEMP_PREFIX: Final = "temp:"
#: The longest app name, user id, session id, event id or state key (without its prefix).
MAX_NAME_LENGTH: Final = 255

#: Where a state key is kept: ``"app"``, ``"user"``, ``"session"``, or nowhere (``"temp"``).
Scope = Literal["app", "user", "session", "temp"]


@register_type("relaykit.SessionEvent")
@dataclass(slots=True)
class SessionEvent:
    """One complete event of a session, as a ``SessionService`` stores it.

    Only complete events are stored (a streamed message is stored once it has ended).
    ``append_event`` returns the stored copy with ``id`` and ``timestamp`` set.

    >>> event = SessionEvent(author="user", message=Message.user("hi"))
    >>> event.author, event.message.content
    ('user', 'hi')
    """

    #: The event's id, unique within its session; empty until stored (then a uuid4 hex),
    #: unless the caller gave one (kept as given).
    id: str = ""
    #: The id of the turn (invocation) that produced the event.
    invocation_id: str = ""
    #: ``"user"`` for the user's messages, else the name of the agent that produced the event.
    author: str = ""
    #: Seconds since the epoch; 0 until stored (then the store's clock), unless given.
    timestamp: float = 0.0
    #: The event's complete message, if it has one.
    message: Message | None = None
    #: Names of the agents from the root to the author (the run path as plain names).
    run_path: tuple[str, ...] = ()
    #: What the event asked the framework to do (transfer, exit, interrupt, a custom action).
    action: AgentAction | None = None
    #: The error the event reported, as text (its type name and message), if any.
    error: str | None = None
    #: State changes made by the event, keyed with their scope prefix (see ``state_scope``).
    #: ``temp:`` keys are applied to nothing and left out of the stored copy.
    state_delta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Session:
    """One conversation of one user with one app: its events and its merged state.

    ``append_event`` updates the ``Session`` object it is given (``state``, ``events``,
    ``last_update_time``) as well as the store.

    >>> s = Session("shop", "u1", "s1")
    >>> s.state, s.events
    ({}, [])
    """

    #: The app the session belongs to.
    app_name: str
    #: The user the session belongs to.
    user_id: str
    #: The session's id, unique within the app and user.
    id: str
    #: The merged state: ``app:`` keys of the app and ``user:`` keys of the user (prefix kept),
    #: plain keys of the session; never ``temp:`` keys.
    state: dict[str, Any] = field(default_factory=dict)
    #: The stored events in order (empty in the results of ``list_sessions``).
    events: list[SessionEvent] = field(default_factory=list)
    #: Seconds since the epoch of the last change (creation or the last appended event).
    last_update_time: float = 0.0


@dataclass(frozen=True, slots=True)
class HistoryMark:
    """How far a reader has read a session's history (``TurnView.mark``): what the next
    ``read_turn`` needs to return only the events stored since.

    >>> HistoryMark(1, 7, None).last_seq
    7
    """

    #: Which incarnation of the session (a session deleted and created again is another one).
    incarnation: int
    #: The number of events appended to the session so far.
    last_seq: int
    #: The position of the latest compaction summary, or None.
    summary_seq: int | None
    #: The id of the event at ``last_seq`` (checked by the next read), or None.
    last_id: str | None = None

    def leads_to(self, incarnation: int, last_seq: int, summary_seq: int | None) -> bool:
        """Whether a session now at (``incarnation``, ``last_seq``, ``summary_seq``) may be
        read on from this mark: the same session, no new summary, no fewer events (the event
        at ``last_seq`` still has to be ``last_id``: the service checks that).

        >>> mark = HistoryMark(1, 7, None)
        >>> mark.leads_to(1, 9, None), mark.leads_to(2, 9, None), mark.leads_to(1, 6, None)
        (True, False, False)
        """
        return (
            self.incarnation == incarnation
            and self.summary_seq == summary_seq
            and self.last_seq <= last_seq
        )


@dataclass(slots=True)
class TurnView:
    """What a Runner reads at the start of a turn, in one read: the session (state, no
    events), its pause, and its history — whole, or only what was stored since ``after``.

    >>> TurnView(Session("shop", "u1", "s1"), HistoryMark(1, 0, None), [], False, None).delta
    False
    """

    #: The session, with its merged state and without events.
    session: Session
    #: Where the history read ends (give it back as ``after`` next time).
    mark: HistoryMark
    #: The history events: from the latest summary on, or (``delta``) those after ``after``.
    events: list[SessionEvent]
    #: True when ``events`` only holds the events stored after the given mark.
    delta: bool
    #: The session's pause, or None.
    checkpoint: bytes | None


@runtime_checkable
class SessionService(Protocol):
    """Durable sessions: events in order, state by scope, a pause per session, a turn lock.

    Every method validates app names, user ids and session ids first (``validate_session_name``)
    and reports storage failures as ``SessionStoreError`` naming the operation and the session,
    never stored content. A stored event or value that cannot be loaded is a
    ``SerializationError`` naming the session and the event id (or the state key).

    >>> async def first_turn(service: SessionService) -> list[SessionEvent]:
    ...     session = await service.create_session("shop", "u1", "s1")
    ...     async with service.lock("shop", "u1", "s1", timeout=10):
    ...         await service.append_event(session, SessionEvent(
    ...             author="user", message=Message.user("hi"), state_delta={"user:seen": 1}))
    ...         return await service.load_history("shop", "u1", "s1")

    Args of every method:
        app_name: the app the session belongs to.
        user_id: the user the session belongs to.
        session_id: the session's id within the app and user.
    """

    async def create_session(
        self,
        app_name: str,
        user_id: str,
        session_id: str | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> Session:
        """Create a session and return it (no events, its merged state).

        ``SessionExistsError`` if the id is taken.

        Args:
            app_name: the app.
            user_id: the user.
            session_id: the new session's id; None generates one (a uuid4 hex).
            state: initial state, stored by scope like an event's ``state_delta`` (``app:`` and
                ``user:`` keys change the app's and the user's state; ``temp:`` keys are
                dropped).
        """
        ...

    async def get_session(self, app_name: str, user_id: str, session_id: str) -> Session | None:
        """The session with every stored event in order and its merged state, or None."""
        ...

    async def list_sessions(self, app_name: str, user_id: str) -> list[Session]:
        """The user's sessions of the app, oldest first, with their state but no events."""
        ...

    async def delete_session(self, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session, its events, its own state and its pause (no error if absent).

        The app's and the user's state stay.
        """
        ...

    async def append_event(self, session: Session, event: SessionEvent) -> SessionEvent:
        """Store ``event`` at the end of the session in one transaction; return the stored copy.

        The copy has ``id`` and ``timestamp`` set (a non-empty id and a non-zero timestamp
        given by the caller are kept) and no ``temp:`` keys in its ``state_delta``; ``event``
        itself is never changed. The delta is applied by scope: ``app:`` keys to the app's
        state, ``user:`` keys to the user's, plain keys to the session's. The ``session``
        object is updated too (``state``, ``events``, ``last_update_time``), as the store was.

        ``SessionNotFoundError`` if the session does not exist (or was deleted). A compaction
        summary (``compaction_range``) whose ``end`` event is not in the session is refused
        with ``SessionStoreError``.

        Args:
            session: the session to append to (from ``create_session`` or ``get_session``).
            event: the complete event to store.
        """
        ...

    async def load_history(
        self, app_name: str, user_id: str, session_id: str
    ) -> list[SessionEvent]:
        """The events an agent's history needs: the latest compaction summary followed by the
        events after the last one it covers; every event when there is no summary.

        ``SessionNotFoundError`` if the session does not exist.
        """
        ...

    async def set_checkpoint(
        self, app_name: str, user_id: str, session_id: str, data: bytes | None
    ) -> None:
        """Store the session's pause, replacing any, or delete it.

        ``SessionNotFoundError`` when storing one for a session that does not exist.

        Args:
            app_name: the app.
            user_id: the user.
            session_id: the session.
            data: the pause (the Runner's checkpoint document), or None to delete it.
        """
        ...

    async def get_checkpoint(self, app_name: str, user_id: str, session_id: str) -> bytes | None:
        """The session's pause, or None."""
        ...

    def lock(
        self, app_name: str, user_id: str, session_id: str, *, timeout: float
    ) -> AbstractAsyncContextManager[None]:
        """Hold the session's turn lock for an ``async with`` block, across tasks and processes.

        Released when the block ends, and when the holder's process dies. Not reentrant; does
        not check that the session exists.

        Args:
            app_name: the app.
            user_id: the user.
            session_id: the session.
            timeout: the longest wait in seconds (0: one attempt; ``math.inf``: no limit),
                then ``SessionBusyError`` naming the session.
        """
        ...


def state_scope(key: str) -> Scope:
    """Where the state key ``key`` is kept, from its prefix.

    >>> [state_scope(k) for k in ("app:theme", "user:name", "temp:draft", "cart")]
    ['app', 'user', 'temp', 'session']
    """
    if key.startswith(APP_PREFIX):
        return "app"
    if key.startswith(USER_PREFIX):
        return "user"
    if key.startswith(TEMP_PREFIX):
        return "temp"
    return "session"


def compaction_range(event: SessionEvent) -> tuple[str, str] | None:
    """``(start, end)`` event ids when ``event`` is a compaction summary, else None.

    A summary is an event whose ``action.custom`` is exactly
    ``{"compaction": {"start": <event id>, "end": <event id>}}``; it stands for the events from
    ``start`` to ``end`` in an agent's history (``SessionService.load_history``).

    >>> summary = SessionEvent(action=AgentAction(custom={"compaction": {"start": "e1",
    ...                                                                  "end": "e9"}}))
    >>> compaction_range(summary)
    ('e1', 'e9')
    """
    if event.action is None:
        return None
    custom = event.action.custom
    if not isinstance(custom, dict) or custom.keys() != {"compaction"}:
        return None
    covered = custom["compaction"]
    if not isinstance(covered, dict) or covered.keys() != {"start", "end"}:
        return None
    start, end = covered["start"], covered["end"]
    if isinstance(start, str) and isinstance(end, str) and start and end:
        return start, end
    return None


def _check_text(value: object, what: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise SessionStoreError(f"{what} must be a str, not {type(value).__name__}")
    if (not value and not allow_empty) or len(value) > MAX_NAME_LENGTH:
        raise SessionStoreError(
            f"{what} must have {0 if allow_empty else 1} to {MAX_NAME_LENGTH} characters "
            f"(got {len(value)})"
        )
    if "\x00" in value:
        # PostgreSQL text cannot hold NUL, and the ids are joined with NUL to hash them.
        raise SessionStoreError(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SessionStoreError(
            f"{what} must encode as UTF-8 (it contains an unpaired surrogate)"
        ) from None
    return value


def validate_session_name(value: object, what: str) -> str:
    """``value`` if it is a valid app name, user id or session id, else ``SessionStoreError``.

    Valid: a ``str`` of 1–255 characters, without NUL, that encodes as UTF-8 (the rule of
    checkpoint ids). ``what`` names the argument in the message (``"user_id"``); the value is
    never quoted. Every service calls this before touching storage.

    >>> validate_session_name("s-1", "session_id")
    's-1'
    """
    return _check_text(value, what)


def validate_state_key(key: object) -> Scope:
    """The scope of the state key ``key``, or ``SessionStoreError`` if it cannot be stored.

    A key is a ``str``; without its prefix it has 1–255 characters, no NUL, and encodes as
    UTF-8. ``temp:`` keys are checked the same way (a bad one is a bug even if never stored).

    >>> validate_state_key("user:name")
    'user'
    """
    if not isinstance(key, str):
        raise SessionStoreError(f"a state key must be a str, not {type(key).__name__}")
    scope = state_scope(key)
    name = key if scope == "session" else key.partition(":")[2]
    _check_text(name, "a state key (without its prefix)")
    return scope


def validate_lock_timeout(timeout: object) -> float:
    """``timeout`` as a float if it is a number of seconds >= 0, else ``ValueError`` (or
    ``TypeError`` when it is not a number).

    >>> validate_lock_timeout(5)
    5.0
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(
            f"the lock timeout must be a number of seconds, not {type(timeout).__name__}"
        )
    seconds = float(timeout)
    if math.isnan(seconds) or seconds < 0:
        raise ValueError("the lock timeout must be a number of seconds >= 0")
    return seconds
