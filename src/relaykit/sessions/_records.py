"""What every session service does before and after storage: validation, stored copies, encoding.

The services share these steps so that they accept, refuse, store and load exactly the same
things. Everything here runs before any I/O (or after it, to decode): a bad name, a bad state
key or a value the codec cannot save fails before a row is written.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from relaykit.checkpoints.base import check_data
from relaykit.codec import dumps, loads
from relaykit.errors import (
    SerializationError,
    SessionBusyError,
    SessionNotFoundError,
    SessionStoreError,
)
from relaykit.sessions.base import (
    APP_PREFIX,
    USER_PREFIX,
    Session,
    SessionEvent,
    compaction_range,
    state_scope,
    validate_session_name,
    validate_state_key,
)

__all__ = [
    "EVENT_FORMAT",
    "STATE_FORMAT",
    "PreparedAppend",
    "SessionRef",
    "StateWrite",
    "StoredScope",
    "apply_to_session",
    "check_pause",
    "deadline_after",
    "decode_event",
    "decode_value",
    "merged_state",
    "prepare_append",
    "prepare_state",
    "unknown_summary_end",
]

#: The codec document kind of a stored event.
EVENT_FORMAT: Final = "relaykit/session-event"
#: The codec document kind of a stored state value.
STATE_FORMAT: Final = "relaykit/session-state"

StoredScope = Literal["app", "user", "session"]
_SCOPE_ORDER: Final = {"app": 0, "user": 1, "session": 2, "temp": 3}
_PREFIXES: Final[dict[StoredScope, str]] = {"app": APP_PREFIX, "user": USER_PREFIX, "session": ""}


@dataclass(frozen=True, slots=True)
class SessionRef:
    """A validated (app name, user id, session id), and how messages name it."""

    app_name: str
    user_id: str
    session_id: str

    @classmethod
    def of(cls, app_name: object, user_id: object, session_id: object) -> SessionRef:
        """The reference, or ``SessionStoreError`` naming the invalid argument."""
        return cls(
            validate_session_name(app_name, "app_name"),
            validate_session_name(user_id, "user_id"),
            validate_session_name(session_id, "session_id"),
        )

    def __str__(self) -> str:
        return f"session {self.session_id!r} (app {self.app_name!r}, user {self.user_id!r})"

    def lock_name(self) -> bytes:
        """A fixed-size name of the session's turn lock (a SHA-256 digest of its names)."""
        return _digest("lock", self.app_name, self.user_id, self.session_id)

    def owner(self, scope: StoredScope) -> bytes:
        """The key of the state ``scope`` of this session belongs to: the app, the user, or the
        session itself (a SHA-256 digest: fixed-size, whatever the lengths of the names)."""
        if scope == "app":
            return _digest("app", self.app_name)
        if scope == "user":
            return _digest("user", self.app_name, self.user_id)
        return _digest("session", self.app_name, self.user_id, self.session_id)

    def not_found(self, doing: str) -> SessionNotFoundError:
        """The error for an operation on a session that does not exist."""
        return SessionNotFoundError(
            f"cannot {doing} {self}: no such session (create it with create_session)"
        )

    def busy(self, timeout: float) -> SessionBusyError:
        """The error for a lock that another turn held for longer than ``timeout``."""
        return SessionBusyError(
            f"{self} is busy: another turn held it for longer than the {timeout:g} s wait. "
            "Retry once that turn has ended"
        )


def _digest(*parts: str) -> bytes:
    # Names never contain NUL (validate_session_name), so joining with NUL is unambiguous.
    return hashlib.sha256("\x00".join(parts).encode("utf-8")).digest()


@dataclass(frozen=True, slots=True)
class StateWrite:
    """One state key to store: its scope, its name without the prefix, its value as it loads
    back, and the encoded value."""

    scope: StoredScope
    name: str
    value: Any
    data: bytes

    @property
    def key(self) -> str:
        """The key as ``Session.state`` shows it (with its prefix)."""
        return _PREFIXES[self.scope] + self.name


def prepare_state(state: Mapping[str, Any], ref: SessionRef) -> list[StateWrite]:
    """The stored writes of ``state``: keys validated, ``temp:`` keys dropped, values encoded
    and loaded back (a value that would not load is refused now, not on every later read).

    Sorted by scope and name: every transaction then upserts shared keys in the same order, so
    two of them writing the same ``user:`` keys never deadlock (PostgreSQL row locks).
    """
    if not isinstance(state, Mapping):
        raise TypeError(f"a state delta must be a mapping, not {type(state).__name__}")
    writes: list[StateWrite] = []
    for key, value in state.items():
        scope = validate_state_key(key)
        if scope == "temp":
            continue
        data = dumps(value, kind=STATE_FORMAT)
        try:
            stored = decode_value(data, key, ref)
        except SerializationError as exc:
            raise SerializationError(f"cannot store {exc}") from None
        writes.append(StateWrite(scope, key[len(_PREFIXES[scope]) :], stored, data))
    writes.sort(key=lambda w: (w.scope, w.name))
    return writes


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    """An event ready to be stored: the stored copy, its document, its state writes."""

    ref: SessionRef
    #: The stored copy as it loads back, returned to the caller (``id`` and ``timestamp`` set,
    #: no ``temp:`` keys; it shares no object with the caller's event).
    event: SessionEvent
    #: The copy as the codec's JSON document.
    data: bytes
    writes: list[StateWrite]
    #: ``(start, end)`` event ids if the event is a compaction summary.
    covers: tuple[str, str] | None
    #: The new ``last_update_time`` of the session (the appending process's clock).
    now: float


def prepare_append(session: object, event: object) -> PreparedAppend:
    """Validate ``session`` and ``event`` and build the stored copy (``event`` is unchanged).

    A non-empty ``event.id`` and a non-zero ``event.timestamp`` are kept as given. The copy is
    encoded and loaded back: an event that would not load (a field of the wrong type, say) is
    refused now, instead of making every later read of the session fail.
    """
    if not isinstance(session, Session):
        raise TypeError(f"append_event needs a Session, not {type(session).__name__}")
    if not isinstance(event, SessionEvent):
        raise TypeError(f"append_event needs a SessionEvent, not {type(event).__name__}")
    ref = SessionRef.of(session.app_name, session.user_id, session.id)
    if event.id:
        validate_session_name(event.id, "an event id")
    elif not isinstance(event.id, str):
        raise SessionStoreError(f"an event id must be a str, not {type(event.id).__name__}")
    timestamp = event.timestamp
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
        raise TypeError(f"an event timestamp must be a number, not {type(timestamp).__name__}")
    writes = prepare_state(event.state_delta, ref)
    now = time.time()
    stored = dataclasses.replace(
        event,
        id=event.id or uuid.uuid4().hex,
        timestamp=float(timestamp) or now,
        # A fresh dict: the stored delta is the scoped one, without temp: keys.
        state_delta={write.key: write.value for write in writes},
    )
    data = dumps(stored, kind=EVENT_FORMAT)
    try:
        loaded = decode_event(data, stored.id, ref)
    except SerializationError as exc:
        raise SerializationError(f"cannot store {exc}") from None
    return PreparedAppend(ref, loaded, data, writes, compaction_range(loaded), now)


def unknown_summary_end(appended: PreparedAppend) -> SessionStoreError:
    """The error for a compaction summary whose ``end`` event is not in the session."""
    assert appended.covers is not None
    return SessionStoreError(
        f"cannot append compaction summary {appended.event.id!r} to {appended.ref}: the event "
        f"it ends with, {appended.covers[1]!r}, is not in the session"
    )


def deadline_after(timeout: float) -> float | None:
    """The event-loop time ``timeout`` seconds from now (None for an infinite timeout)."""
    return None if math.isinf(timeout) else asyncio.get_running_loop().time() + timeout


def check_pause(data: object) -> bytes | None:
    """``data`` as bytes (or None), else ``TypeError``: a session's pause is bytes."""
    return None if data is None else check_data(data)


def apply_to_session(session: Session, appended: PreparedAppend) -> None:
    """Update the caller's ``Session`` object as the store was updated."""
    for write in appended.writes:
        # The loaded copy of the value, as every later read of the session returns it.
        session.state[write.key] = write.value
    session.events.append(appended.event)
    session.last_update_time = appended.now


def merged_state(rows: Iterable[tuple[str, object]], ref: SessionRef) -> dict[str, Any]:
    """``Session.state`` from stored ``(key, value)`` rows (values decoded): ``app:`` keys,
    ``user:`` keys, then the session's, each sorted (the same order from every service)."""
    ordered = sorted(rows, key=lambda row: (_SCOPE_ORDER[state_scope(row[0])], row[0]))
    return {key: decode_value(data, key, ref) for key, data in ordered}


def decode_value(data: object, key: str, ref: SessionRef) -> Any:
    """A stored state value, or ``SerializationError`` naming the key and the session."""
    what = f"state key {key!r} of {ref}"
    return loads(_as_bytes(data, what), kind=STATE_FORMAT, what=what)


def decode_event(data: object, event_id: str, ref: SessionRef) -> SessionEvent:
    """A stored event, or ``SerializationError`` naming the event id and the session."""
    what = f"event {event_id!r} of {ref}"
    event = loads(_as_bytes(data, what), kind=EVENT_FORMAT, what=what)
    if not isinstance(event, SessionEvent):
        raise SerializationError(
            f"{what} is not a session event (it holds a {type(event).__name__})"
        )
    if event.id != event_id:
        raise SerializationError(f"{what} holds another event's id")
    return event


def _as_bytes(data: object, what: str) -> bytes:
    # Drivers return BLOB/BYTEA columns as bytes or memoryview; a row written by hand can hold
    # text (SQLite columns take any type).
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SerializationError(f"{what} is corrupt (stored as {type(data).__name__}, not bytes)")
    return bytes(data)
