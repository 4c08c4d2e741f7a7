"""Alembic environment of relaykit's tables, run programmatically by ``relaykit._db.migrate``.

The caller passes an open connection (already inside the transaction that holds the migration
lock) in ``config.attributes["connection"]``; there is no offline (SQL script) mode.
"""

from __future__ import annotations

from alembic import context

from relaykit._db import VERSION_TABLE

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "relaykit's migrations run through relaykit itself (await store.open()), which passes "
        "the database connection; they are not run from the alembic command line"
    )

context.configure(connection=connection, target_metadata=None, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
