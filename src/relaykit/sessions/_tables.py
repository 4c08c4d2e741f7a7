"""The tables of DatabaseSessionService and the statements it runs on them, built once.

Imported through ``relaykit.sessions.database``, which turns a missing SQLAlchemy into a
``ConfigurationError`` naming the extra to install.
"""

from __future__ import annotations

from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

SESSIONS_TABLE: Final = "relaykit_sessions"
EVENTS_TABLE: Final = "relaykit_session_events"
STATE_TABLE: Final = "relaykit_session_state"
CHECKPOINTS_TABLE: Final = "relaykit_session_checkpoints"

# The tables as the service uses them. Their schema is owned by the migration
# r0002_sessions.py (never created from these definitions), which must produce these columns.
_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_metadata = sa.MetaData()
_sessions = sa.Table(
    SESSIONS_TABLE,
    _metadata,
    sa.Column("pk", _PK, primary_key=True, autoincrement=True),
    # SHA-256 of (app name, user id, session id): SessionRef.owner("session").
    sa.Column("session_key", sa.LargeBinary(32), nullable=False, unique=True),
    sa.Column("app_name", sa.Text(), nullable=False),
    sa.Column("user_id", sa.Text(), nullable=False),
    sa.Column("session_id", sa.Text(), nullable=False),
    # The seq of the last event appended (seqs start at 1): the number of events appended.
    sa.Column("last_seq", sa.Integer(), nullable=False),
    # The seq of the latest compaction summary, and of the last event it covers.
    sa.Column("summary_seq", sa.Integer(), nullable=True),
    sa.Column("history_from_seq", sa.Integer(), nullable=True),
    sa.Column("last_update_time", sa.Double(), nullable=False),
)
_events = sa.Table(
    EVENTS_TABLE,
    _metadata,
    sa.Column("session_pk", _PK, primary_key=True, autoincrement=False),
    sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("event_id", sa.Text(), nullable=False),
    sa.Column("data", sa.LargeBinary(), nullable=False),
)
_state = sa.Table(
    STATE_TABLE,
    _metadata,
    # SHA-256 of the scope and the names of the app, the user or the session (SessionRef.owner).
    sa.Column("owner", sa.LargeBinary(32), primary_key=True),
    sa.Column("key", sa.Text(), primary_key=True),  # with its prefix, as Session.state shows it
    sa.Column("scope", sa.String(16), nullable=False),
    sa.Column("app_name", sa.Text(), nullable=False),
    sa.Column("user_id", sa.Text(), nullable=False),  # "" for app state
    sa.Column("session_id", sa.Text(), nullable=False),  # "" for app and user state
    sa.Column("value", sa.LargeBinary(), nullable=False),
)
_checkpoints = sa.Table(
    CHECKPOINTS_TABLE,
    _metadata,
    sa.Column("session_pk", _PK, primary_key=True, autoincrement=False),
    sa.Column("data", sa.LargeBinary(), nullable=False),
)
_s, _e, _st, _cp = _sessions.c, _events.c, _state.c, _checkpoints.c


def _param(name: str) -> sa.BindParameter[Any]:
    return sa.bindparam(name)


# Statements built once: executing a prebuilt statement skips building and hashing it again
# (SQLAlchemy's compiled cache then serves the SQL), which matters on the append path.
_FIND_SESSION = sa.select(_s.pk).where(_s.session_key == _param("key"))
_FIND_SESSION_KEY_SHARE = _FIND_SESSION.with_for_update(key_share=True)
_READ_SESSION = sa.select(
    _s.pk, _s.last_update_time, _s.summary_seq, _s.history_from_seq, _s.last_seq
).where(_s.session_key == _param("key"))
_BUMP_SESSION = (
    sa.update(_sessions)
    .where(_s.session_key == _param("key"))
    .values(last_seq=_s.last_seq + sa.literal_column("1"), last_update_time=_param("now"))
    .returning(_s.pk, _s.last_seq)
)
_INSERT_EVENT = sa.insert(_events)
_SUMMARY_END = sa.select(sa.func.max(_e.seq)).where(
    _e.session_pk == _param("pk"), _e.event_id == _param("end")
)
_SET_SUMMARY = (
    sa.update(_sessions)
    .where(_s.pk == _param("session"))
    .values(summary_seq=_param("summary"), history_from_seq=_param("end"))
)
_ALL_EVENTS = (
    sa.select(_e.seq, _e.event_id, _e.data).where(_e.session_pk == _param("pk")).order_by(_e.seq)
)
_EVENTS_AFTER = (
    sa.select(_e.seq, _e.event_id, _e.data)
    .where(_e.session_pk == _param("pk"), _e.seq > _param("after"))
    .order_by(_e.seq)
)
_EVENT_ID_AT = sa.select(_e.event_id).where(_e.session_pk == _param("pk"), _e.seq == _param("seq"))
_READ_STATE = sa.select(_st.key, _st.value).where(
    _st.owner.in_([_param("app"), _param("user"), _param("session")])
)
_SHARED_STATE = sa.select(_st.key, _st.value).where(_st.owner.in_([_param("app"), _param("user")]))
_LIST_SESSIONS = (
    sa.select(_s.session_id, _s.last_update_time, _st.key, _st.value)
    .select_from(_sessions.outerjoin(_state, _st.owner == _s.session_key))
    .where(_s.app_name == _param("app_name"), _s.user_id == _param("user_id"))
    .order_by(_s.pk)
)
_DELETE_SESSION = sa.delete(_sessions).where(_s.session_key == _param("key")).returning(_s.pk)
_DELETE_EVENTS = sa.delete(_events).where(_e.session_pk == _param("pk"))
_DELETE_CHECKPOINT = sa.delete(_checkpoints).where(_cp.session_pk == _param("pk"))
_DELETE_OWN_STATE = sa.delete(_state).where(_st.owner == _param("owner"))
_DELETE_CHECKPOINT_OF = sa.delete(_checkpoints).where(
    _cp.session_pk.in_(sa.select(_s.pk).where(_s.session_key == _param("key")).scalar_subquery())
)
_GET_CHECKPOINT = (
    sa.select(_cp.data)
    .select_from(_checkpoints.join(_sessions, _cp.session_pk == _s.pk))
    .where(_s.session_key == _param("key"))
)


def _dialect_statements(backend: str) -> tuple[sa.Executable, sa.Executable, sa.Executable]:
    """The upserts of the backend: create a session, write a state key, save a pause."""
    insert = postgresql.insert if backend == "postgresql" else sqlite.insert
    create = insert(_sessions).on_conflict_do_nothing(index_elements=[_s.session_key])
    state = insert(_state)
    checkpoint = insert(_checkpoints)
    return (
        create.returning(_s.pk),
        state.on_conflict_do_update(
            index_elements=[_st.owner, _st.key], set_={"value": state.excluded.value}
        ),
        checkpoint.on_conflict_do_update(
            index_elements=[_cp.session_pk], set_={"data": checkpoint.excluded.data}
        ),
    )
