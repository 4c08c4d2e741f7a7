"""The session database of a command: ``--db`` (a URL or a SQLite file), opened or refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from relaykit.errors import ConfigurationError, SessionStoreError
from relaykit.sessions.base import SessionService

from ._errors import USAGE, CliError
from ._loading import LoadedApp

__all__ = [
    "database_url",
    "default_database",
    "missing_database",
    "open_sessions",
    "shown_database",
]

#: Short schemes ``--db`` accepts for the asyncio drivers relaykit uses.
_SCHEMES = {
    "sqlite": "sqlite+aiosqlite",
    "postgres": "postgresql+asyncpg",
    "postgresql": "postgresql+asyncpg",
}


def default_database(app: LoadedApp) -> str:
    """``sqlite+aiosqlite:///<app folder>/.relaykit/sessions.db``."""
    return f"sqlite+aiosqlite:///{app.folder / '.relaykit' / 'sessions.db'}"


def database_url(db: str) -> str:
    """The URL ``--db`` means: a file path is a SQLite file; ``sqlite://`` and
    ``postgresql://`` get relaykit's asyncio drivers.

    >>> database_url("postgresql://bo@db/shop")
    'postgresql+asyncpg://bo@db/shop'
    >>> database_url("/tmp/shop.db")
    'sqlite+aiosqlite:////tmp/shop.db'
    """
    scheme, sep, rest = db.partition("://")
    if not sep:
        return f"sqlite+aiosqlite:///{Path(db).expanduser().resolve()}"
    return f"{_SCHEMES.get(scheme, scheme)}://{rest}"


def shown_database(db: str) -> str:
    """``--db`` for a message, without a password.

    >>> shown_database("postgresql://bo:secret@db/shop"), shown_database("shop.db")
    ('postgresql://bo:***@db/shop', 'shop.db')
    """
    if "://" not in db:
        return db
    import sqlalchemy as sa

    try:
        return sa.make_url(db).render_as_string(hide_password=True)
    except Exception:
        return db.partition("://")[0] + "://..."


def _check_sqlite_file(path: str) -> None:
    """Open the SQLite file with the standard library first: a missing folder, a folder, a
    file that is no database, a file without permission are refused here, with SQLite's own
    words. (A connect that fails inside aiosqlite leaves its worker thread to report to the
    closed event loop after the command ends.)"""
    file = Path(path)
    if not file.parent.is_dir():
        raise CliError(
            f"cannot open the session database {file}: the folder {file.parent} does not exist"
        )
    if file.is_dir():
        raise CliError(f"cannot open the session database {file}: it is a folder")
    try:
        connection = sqlite3.connect(file)
        try:
            connection.execute("PRAGMA schema_version").fetchone()  # reads the file's header
        finally:
            connection.close()
    except sqlite3.Error as exc:
        raise CliError(f"cannot open the session database {file}: {exc}") from exc


def missing_database(app: LoadedApp, db: str | None) -> Path | None:
    """The SQLite file the session database would be, when its folder exists but it does not
    (yet): commands that only read or delete sessions say so instead of creating an empty
    database (a mistyped ``--db`` would otherwise look like a database without sessions)."""
    import sqlalchemy as sa

    url = default_database(app) if db is None else database_url(db)
    try:
        parsed = sa.make_url(url)
    except Exception:  # a bad URL: open_sessions says what is wrong with it
        return None
    if parsed.get_backend_name() != "sqlite" or "uri" in parsed.query:
        return None
    if not parsed.database or parsed.database == ":memory:":
        return None
    file = Path(parsed.database)
    # A missing folder stays an error of opening (a wrong path, not a database not made yet).
    return file if file.parent.is_dir() and not file.exists() else None


async def open_sessions(app: LoadedApp, db: str | None) -> SessionService:
    """The app's session service, opened (tables created): ``CliError`` when it cannot be."""
    from relaykit.sessions.database import DatabaseSessionService

    if db is None:
        (app.folder / ".relaykit").mkdir(parents=True, exist_ok=True)
        url = default_database(app)
    else:
        url = database_url(db)
    try:
        service = DatabaseSessionService(url)
    except ConfigurationError as exc:
        raise CliError(f"--db: {exc}", USAGE) from exc
    import sqlalchemy as sa

    parsed = sa.make_url(url)  # parsed by the service already
    if parsed.get_backend_name() == "sqlite" and parsed.database and "uri" not in parsed.query:
        try:
            _check_sqlite_file(parsed.database)
        except CliError:
            await service.aclose()
            raise
    try:
        await service.open()
    except (SessionStoreError, OSError) as exc:
        await service.aclose()
        raise CliError(f"cannot open the session database {shown_database(url)}: {exc}") from exc
    return service
