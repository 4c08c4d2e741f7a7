"""Checkpoints with claims: create ``relaykit_checkpoints``, or adopt an older relaykit's table.

relaykit before migrations created ``relaykit_checkpoints(checkpoint_id, data, updated_at)`` with
``create_all``. Such a table is kept with its rows and gets the claim columns; a fresh database
gets the whole table.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "relaykit_checkpoints"


def _claim_columns() -> list[sa.Column[object]]:
    # Who holds the resume's claim and until when: seconds since the epoch by the database's
    # clock (see relaykit._db.database_now); both NULL when nobody holds it.
    return [
        sa.Column("claim_owner", sa.Text(), nullable=True),
        sa.Column("claim_expires_at", sa.Double(), nullable=True),
    ]


def upgrade() -> None:
    """Create the checkpoints table, or add the claim columns to an existing one."""
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table(TABLE):
        op.create_table(
            TABLE,
            sa.Column("checkpoint_id", sa.String(255), primary_key=True),
            sa.Column("data", sa.LargeBinary(), nullable=False),
            sa.Column(
                "updated_at",
                sa.DateTime(timezone=True),
                nullable=False,
                server_default=sa.func.now(),
            ),
            *_claim_columns(),
        )
        return
    present = {column["name"] for column in inspector.get_columns(TABLE)}
    for column in _claim_columns():
        if column.name not in present:
            op.add_column(TABLE, column)


def downgrade() -> None:
    """Drop the checkpoints table (this is the first revision: before it relaykit had none)."""
    op.drop_table(TABLE)
