"""InMemorySessionService: sessions in dicts, for tests and single-process apps.

It stores what the database service stores — the codec's JSON of every event and state value —
and decodes it on every read, so both services accept, refuse and return the same things, and a
caller changing an object after appending it never changes what is stored.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from relaykit.errors import SessionExistsError
from relaykit.sessions._local_lock import KeyedLocks
from relaykit.sessions._records import (
    PreparedAppend,
    SessionRef,
    StateWrite,
    StoredScope,
    apply_to_session,
    check_pause,
    deadline_after,
    decode_event,
    merged_state,
    prepare_append,
    prepare_state,
    unknown_summary_end,
)
from relaykit.sessions.base import (
    HistoryMark,
    Session,
    SessionEvent,
    TurnView,
    validate_lock_timeout,
    validate_session_name,
)

__all__ = ["InMemorySessionService"]


@dataclass(slots=True)
class _StoredSession:
    events: list[tuple[str, bytes]] = field(default_factory=list)  # (event id, document)
    # The last position of each event id, to resolve the range of a compaction summary.
    positions: dict[str, int] = field(default_factory=dict)
    # The latest compaction summary's position and the position of the last event it covers.
    summary: tuple[int, int] | None = None
    checkpoint: bytes | None = None
    last_update_time: float = 0.0
    incarnation: int = 0


class InMemorySessionService:
    """A ``SessionService`` in dicts: nothing survives the process.

    The turn lock is an ``asyncio.Lock`` per session: it serialises the tasks of this process.

    >>> import asyncio
    >>> service = InMemorySessionService()
    >>> session = asyncio.run(service.create_session("shop", "u1", "s1", {"user:name": "Ada"}))
    >>> session.state
    {'user:name': 'Ada'}
    """

    def __init__(self) -> None:
        self._sessions: dict[SessionRef, _StoredSession] = {}
        # (scope, owner names) -> {key: encoded value}: the app's state is owned by (app,), the
        # user's by (app, user), the session's own by (app, user, session).
        self._state: dict[tuple[StoredScope, tuple[str, ...]], dict[str, bytes]] = {}
        self._locks = KeyedLocks()
        self._incarnations = itertools.count(1)

    @staticmethod
    def _owner(ref: SessionRef, scope: StoredScope) -> tuple[StoredScope, tuple[str, ...]]:
        if scope == "app":
            return scope, (ref.app_name,)
        if scope == "user":
            return scope, (ref.app_name, ref.user_id)
        return scope, (ref.app_name, ref.user_id, ref.session_id)

    def _write_state(self, ref: SessionRef, writes: list[StateWrite]) -> None:
        for write in writes:
            self._state.setdefault(self._owner(ref, write.scope), {})[write.key] = write.data

    def _read_state(self, ref: SessionRef) -> dict[str, Any]:
        scopes: tuple[StoredScope, ...] = ("app", "user", "session")
        return merged_state(
            [
                row
                for scope in scopes
                for row in self._state.get(self._owner(ref, scope), {}).items()
            ],
            ref,
        )

    async def create_session(
        self,
        app_name: str,
        user_id: str,
        session_id: str | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> Session:
        """Create a session (see ``SessionService.create_session``)."""
        ref = SessionRef.of(
            app_name, user_id, uuid.uuid4().hex if session_id is None else session_id
        )
        writes = prepare_state(state or {}, ref)
        if ref in self._sessions:
            raise SessionExistsError(f"cannot create {ref}: the id is taken")
        now = time.time()
        self._sessions[ref] = _StoredSession(
            last_update_time=now, incarnation=next(self._incarnations)
        )
        self._write_state(ref, writes)
        return Session(ref.app_name, ref.user_id, ref.session_id, self._read_state(ref), [], now)

    async def get_session(self, app_name: str, user_id: str, session_id: str) -> Session | None:
        """The session with its events and merged state, or None."""
        ref = SessionRef.of(app_name, user_id, session_id)
        stored = self._sessions.get(ref)
        if stored is None:
            return None
        events = [decode_event(data, event_id, ref) for event_id, data in stored.events]
        return Session(
            ref.app_name,
            ref.user_id,
            ref.session_id,
            self._read_state(ref),
            events,
            stored.last_update_time,
        )

    async def list_sessions(self, app_name: str, user_id: str) -> list[Session]:
        """The user's sessions of the app, oldest first, with state, without events."""
        owner = (
            validate_session_name(app_name, "app_name"),
            validate_session_name(user_id, "user_id"),
        )
        return [
            Session(
                ref.app_name,
                ref.user_id,
                ref.session_id,
                self._read_state(ref),
                [],
                stored.last_update_time,
            )
            for ref, stored in self._sessions.items()
            if (ref.app_name, ref.user_id) == owner
        ]

    async def delete_session(self, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session, its events, its own state and its pause (no error if absent)."""
        ref = SessionRef.of(app_name, user_id, session_id)
        self._sessions.pop(ref, None)
        self._state.pop(self._owner(ref, "session"), None)

    async def append_event(self, session: Session, event: SessionEvent) -> SessionEvent:
        """Store a copy of ``event`` and update ``session`` (see ``SessionService``)."""
        appended = prepare_append(session, event)
        stored = self._sessions.get(appended.ref)
        if stored is None:
            raise appended.ref.not_found("append an event to")
        summary = None
        if appended.covers is not None:
            end = stored.positions.get(appended.covers[1])
            if end is None:
                raise unknown_summary_end(appended)
            summary = (len(stored.events), end)
        self._store(stored, appended, summary)
        apply_to_session(session, appended)
        return appended.event

    def _store(
        self, stored: _StoredSession, appended: PreparedAppend, summary: tuple[int, int] | None
    ) -> None:
        # No await from here to the end: the append is atomic for every other task.
        stored.positions[appended.event.id] = len(stored.events)
        stored.events.append((appended.event.id, appended.data))
        if summary is not None:
            stored.summary = summary
        stored.last_update_time = appended.now
        self._write_state(appended.ref, appended.writes)

    async def load_history(
        self, app_name: str, user_id: str, session_id: str
    ) -> list[SessionEvent]:
        """The latest summary and the events after the range it covers, or every event."""
        ref = SessionRef.of(app_name, user_id, session_id)
        stored = self._sessions.get(ref)
        if stored is None:
            raise ref.not_found("load the history of")
        rows = list(enumerate(stored.events))
        if stored.summary is not None:
            summary, end = stored.summary
            rows = [rows[summary]] + [row for row in rows[end + 1 :] if row[0] != summary]
        return [decode_event(data, event_id, ref) for _, (event_id, data) in rows]

    async def read_turn(
        self, app_name: str, user_id: str, session_id: str, *, after: HistoryMark | None = None
    ) -> TurnView | None:
        """The session without events, its pause and its history (only the events stored
        since ``after`` when that mark is still valid), or None when it does not exist.

        Args:
            app_name: the app.
            user_id: the user.
            session_id: the session.
            after: the mark of an earlier read of this session (``TurnView.mark``).
        """
        ref = SessionRef.of(app_name, user_id, session_id)
        stored = self._sessions.get(ref)
        if stored is None:
            return None
        summary_seq = stored.summary[0] + 1 if stored.summary is not None else None
        last_id = stored.events[-1][0] if stored.events else None
        mark = HistoryMark(stored.incarnation, len(stored.events), summary_seq, last_id)
        delta = (
            after is not None
            and after.leads_to(mark.incarnation, mark.last_seq, mark.summary_seq)
            and (
                after.last_id is None
                or after.last_seq == 0
                or stored.events[after.last_seq - 1][0] == after.last_id
            )
        )
        if delta:
            assert after is not None
            rows = stored.events[after.last_seq :]
            events = [decode_event(data, event_id, ref) for event_id, data in rows]
        else:
            events = await self.load_history(app_name, user_id, session_id)
        session = Session(
            ref.app_name,
            ref.user_id,
            ref.session_id,
            self._read_state(ref),
            [],
            stored.last_update_time,
        )
        return TurnView(session, mark, events, delta, stored.checkpoint)

    async def set_checkpoint(
        self, app_name: str, user_id: str, session_id: str, data: bytes | None
    ) -> None:
        """Store the session's pause, or delete it (``None``)."""
        ref = SessionRef.of(app_name, user_id, session_id)
        payload = check_pause(data)
        stored = self._sessions.get(ref)
        if stored is None:
            if payload is None:
                return
            raise ref.not_found("save the pause of")
        stored.checkpoint = payload

    async def get_checkpoint(self, app_name: str, user_id: str, session_id: str) -> bytes | None:
        """The session's pause, or None."""
        stored = self._sessions.get(SessionRef.of(app_name, user_id, session_id))
        return stored.checkpoint if stored is not None else None

    def lock(
        self, app_name: str, user_id: str, session_id: str, *, timeout: float
    ) -> AbstractAsyncContextManager[None]:
        """The session's turn lock within this process (an ``asyncio.Lock`` per session)."""
        ref = SessionRef.of(app_name, user_id, session_id)
        return self._hold(ref, validate_lock_timeout(timeout))

    @asynccontextmanager
    async def _hold(self, ref: SessionRef, timeout: float) -> AsyncIterator[None]:
        try:
            await self._locks.acquire(ref, deadline_after(timeout))
        except TimeoutError:
            raise ref.busy(timeout) from None
        try:
            yield
        finally:
            self._locks.release(ref)

    async def aclose(self) -> None:
        """Nothing to release (for symmetry with the database service)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
