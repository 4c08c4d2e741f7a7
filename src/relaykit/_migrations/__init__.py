"""relaykit's Alembic environment: the schema of the tables relaykit keeps in an app's database.

The stores run it themselves (``relaykit._db.migrate``) on first use; there is no alembic.ini.
Its version table is ``relaykit_alembic_version``, so an app's own Alembic history in the same
database (``alembic_version``) is never read or written.

To change a table, add a revision to ``versions/`` by hand (``r0002_<what>.py`` with
``down_revision`` set to the newest one) that works on both SQLite and PostgreSQL; never edit a
released revision, and never rely on ``create_all`` to change an existing table.
"""
