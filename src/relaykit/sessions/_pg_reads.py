"""The Runner's turn read on PostgreSQL, straight on asyncpg's connection.

Through SQLAlchemy each of the read's statements pays for its result machinery; here each is
one ``fetch`` of SQL asyncpg prepares once per connection, in one read-only REPEATABLE READ
transaction (one snapshot). The SQL matches the Core statements of ``_tables``.
"""

from __future__ import annotations

from typing import Any

from relaykit.sessions._sqlite_worker import TurnRows
from relaykit.sessions._tables import (
    CHECKPOINTS_TABLE,
    EVENTS_TABLE,
    SESSIONS_TABLE,
    STATE_TABLE,
)
from relaykit.sessions.base import HistoryMark

__all__ = ["read_turn_asyncpg"]

_SESSION = (
    f"SELECT pk, last_update_time, summary_seq, history_from_seq, last_seq FROM {SESSIONS_TABLE}"
    " WHERE session_key = $1"
)
_EVENT_ID_AT = f"SELECT event_id FROM {EVENTS_TABLE} WHERE session_pk = $1 AND seq = $2"
_EVENTS_AFTER = (
    f"SELECT seq, event_id, data FROM {EVENTS_TABLE} WHERE session_pk = $1 AND seq > $2 "
    "ORDER BY seq"
)
_STATE = f"SELECT key, value FROM {STATE_TABLE} WHERE owner = ANY($1::bytea[])"
_PAUSE = f"SELECT data FROM {CHECKPOINTS_TABLE} WHERE session_pk = $1"


async def read_turn_asyncpg(
    raw: Any, session_key: bytes, owners: list[bytes], after: HistoryMark | None
) -> TurnRows | None:
    """What ``DatabaseSessionService.read_turn`` reads, on the asyncpg connection ``raw``."""
    async with raw.transaction(isolation="repeatable_read", readonly=True):
        found = await raw.fetchrow(_SESSION, session_key)
        if found is None:
            return None
        pk, _, summary_seq, history_from, last_seq = found
        delta = after is not None and after.leads_to(pk, last_seq, summary_seq)
        if delta and after is not None and after.last_id is not None and after.last_seq:
            delta = await raw.fetchval(_EVENT_ID_AT, pk, after.last_seq) == after.last_id
        if delta and after is not None:
            events = await raw.fetch(_EVENTS_AFTER, pk, after.last_seq)
        elif summary_seq is None:
            events = await raw.fetch(_EVENTS_AFTER, pk, 0)
        else:
            rows = await raw.fetch(_EVENTS_AFTER, pk, history_from)
            events = sorted(rows, key=lambda row: row[0] != summary_seq)
        state = await raw.fetch(_STATE, owners)
        pause = await raw.fetchval(_PAUSE, pk)
    return TurnRows(
        tuple(found),
        delta,
        [(row[0], row[1], bytes(row[2])) for row in events],
        [(row[0], bytes(row[1])) for row in state],
        bytes(pause) if pause is not None else None,
    )
