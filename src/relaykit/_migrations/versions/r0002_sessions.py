"""Durable sessions: create the four tables of ``DatabaseSessionService``.

- ``relaykit_sessions``: one row per session, with a surrogate key (``pk``) that the other tables
  use, a fixed-size unique ``session_key`` (a SHA-256 digest of app name, user id and session
  id: three 255-character names do not fit in one PostgreSQL index entry), the last event
  number, and where the latest compaction summary and the range it covers are.
- ``relaykit_session_events``: one row per event, the codec's JSON, numbered per session.
- ``relaykit_session_state``: one row per state key of an app, a user or a session (upserted, so
  writers of different keys never overwrite each other), owned by a SHA-256 digest of the names.
- ``relaykit_session_checkpoints``: the pause of a session, at most one.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A 64-bit key on PostgreSQL; SQLite only gives "INTEGER PRIMARY KEY" (the rowid) its
# autoincrement, and its INTEGER holds 64 bits anyway.
_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Create the session tables and their indexes."""
    op.create_table(
        "relaykit_sessions",
        sa.Column("pk", _PK, primary_key=True, autoincrement=True),
        sa.Column("session_key", sa.LargeBinary(32), nullable=False),
        sa.Column("app_name", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("summary_seq", sa.Integer(), nullable=True),
        sa.Column("history_from_seq", sa.Integer(), nullable=True),
        sa.Column("last_update_time", sa.Double(), nullable=False),
        sa.UniqueConstraint("session_key", name="uq_relaykit_sessions_session_key"),
        # Never reuse the key of a deleted session (SQLite would reuse the highest rowid).
        sqlite_autoincrement=True,
    )
    op.create_index("ix_relaykit_sessions_app_user", "relaykit_sessions", ["app_name", "user_id"])
    op.create_table(
        "relaykit_session_events",
        sa.Column("session_pk", _PK, primary_key=True, autoincrement=False),
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
    )
    op.create_table(
        "relaykit_session_state",
        sa.Column("owner", sa.LargeBinary(32), primary_key=True),
        sa.Column("key", sa.Text(), primary_key=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("app_name", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
    )
    op.create_table(
        "relaykit_session_checkpoints",
        sa.Column("session_pk", _PK, primary_key=True, autoincrement=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
    )


def downgrade() -> None:
    """Drop the session tables."""
    for table in (
        "relaykit_session_checkpoints",
        "relaykit_session_state",
        "relaykit_session_events",
    ):
        op.drop_table(table)
    op.drop_index("ix_relaykit_sessions_app_user", table_name="relaykit_sessions")
    op.drop_table("relaykit_sessions")
