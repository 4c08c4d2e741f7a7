"""Engines, dialect helpers and schema migrations for relaykit's database-backed stores.

Only the database stores import this module (it loads SQLAlchemy; migrating loads Alembic), so
``import relaykit`` stays light. Everything here is shared by every store that keeps its tables
in the same database: one URL check, one set of SQLite connection settings, one clock, one
Alembic environment (``relaykit/_migrations``) with its own version table.
"""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from types import TracebackType
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from relaykit.errors import ConfigurationError, RelayKitError

__all__ = [
    "MIGRATIONS_DIR",
    "SQLITE_BUSY_TIMEOUT_MS",
    "VERSION_TABLE",
    "Schema",
    "StorageFailures",
    "check_engine",
    "create_store_engine",
    "database_now",
    "describe_failure",
    "engine_repr",
    "migrate",
    "url_scheme",
]

#: Alembic's version table for relaykit's own tables; an app's ``alembic_version`` is never used.
VERSION_TABLE: Final = "relaykit_alembic_version"
#: The Alembic environment (``env.py`` and ``versions/``) shipped inside the package.
MIGRATIONS_DIR: Final = Path(__file__).resolve().parent / "_migrations"
#: How long a SQLite connection waits for another connection's (or process's) write lock.
SQLITE_BUSY_TIMEOUT_MS: Final = 30_000
# The key of the PostgreSQL advisory lock that serialises migrations across processes and
# machines: a fixed constant so every relaykit process agrees on it ("rkmigr" in ASCII).
_PG_MIGRATION_LOCK_KEY: Final = 0x726B6D696772
_SUPPORTED_BACKENDS: Final = ("sqlite", "postgresql")
_URL_EXAMPLES: Final = "sqlite+aiosqlite:///path.db or postgresql+asyncpg://user@host/dbname"


def url_scheme(url: object) -> str:
    """The scheme of a database URL (``postgresql+asyncpg``), for messages: never the password."""
    if isinstance(url, sa.URL):
        return url.drivername
    scheme, separator, _ = str(url).partition("://")
    return scheme if separator and scheme else "(none)"


def create_store_engine(url: str, *, owner: str) -> AsyncEngine:
    """An async engine for ``url``, configured for relaykit's stores, or ``ConfigurationError``.

    Accepts SQLite and PostgreSQL URLs with an asyncio driver. The error names the URL's
    scheme and what to install, never the URL itself (it may hold a password). ``owner`` is the
    class named in messages.

    >>> engine = create_store_engine("sqlite+aiosqlite:///app.db", owner="Store")  # doctest: +SKIP
    """
    scheme = url_scheme(url)
    try:
        parsed = sa.make_url(url)
    except (ArgumentError, ValueError, TypeError):
        raise ConfigurationError(
            f"{owner}: cannot parse the database URL (scheme {scheme!r}); use {_URL_EXAMPLES}"
        ) from None
    backend = parsed.get_backend_name()
    if backend not in _SUPPORTED_BACKENDS:
        raise ConfigurationError(
            f"{owner}: database URLs with scheme {scheme!r} are not supported; use {_URL_EXAMPLES}"
        )
    if backend == "sqlite" and (
        parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory"
    ):
        # An in-memory SQLite database shares one connection between all tasks (their
        # transactions would mix) and is gone with the process: it cannot keep checkpoints.
        raise ConfigurationError(
            f"{owner}: an in-memory SQLite database cannot be shared safely by concurrent "
            "tasks; use a file (sqlite+aiosqlite:///path.db), or the in-memory store"
        )
    try:
        engine = create_async_engine(parsed)
    except ImportError:
        extra = "sql" if backend == "sqlite" else "postgres"
        raise ConfigurationError(
            f"{owner}: the driver for {scheme!r} URLs is not installed; "
            f"pip install 'relaykit[{extra}]'"
        ) from None
    except Exception:
        # The driver is unknown or synchronous (sqlite://, postgresql+psycopg2://).
        raise ConfigurationError(
            f"{owner}: cannot use a {scheme!r} URL: relaykit needs an asyncio driver, "
            f"e.g. {_URL_EXAMPLES}"
        ) from None
    _configure_engine(engine)
    return engine


def check_engine(engine: object, *, owner: str) -> AsyncEngine:
    """``engine`` if relaykit's stores can use it (async, SQLite or PostgreSQL), configured.

    A SQLite engine gets relaykit's connection settings for the connections it opens from now
    on (WAL, busy timeout), so pass an engine before it has connected.
    """
    if not isinstance(engine, AsyncEngine):
        raise ConfigurationError(
            f"{owner}: engine must be a SQLAlchemy AsyncEngine (create_async_engine), "
            f"not {type(engine).__name__}"
        )
    if engine.dialect.name not in _SUPPORTED_BACKENDS:
        raise ConfigurationError(
            f"{owner}: {engine.dialect.name!r} databases are not supported; use {_URL_EXAMPLES}"
        )
    _configure_engine(engine)
    return engine


#: Execution option that marks a connection's transactions as read-only on SQLite (they then
#: begin deferred instead of taking the write lock).
READ_ONLY = "relaykit_read_only"
#: Execution option: run the connection's statements outside any transaction (SQLite).
_NO_TRANSACTION = "relaykit_no_transaction"


def _configure_engine(engine: AsyncEngine) -> None:
    """Apply relaykit's per-connection settings to ``engine`` (idempotent)."""
    if engine.dialect.name == "sqlite" and not event.contains(
        engine.sync_engine, "connect", _configure_sqlite_connection
    ):
        event.listen(engine.sync_engine, "connect", _configure_sqlite_connection)
        event.listen(engine.sync_engine, "begin", _begin_sqlite_transaction)


def _begin_sqlite_transaction(conn: sa.Connection) -> None:
    # A write transaction takes the write lock when it begins (BEGIN IMMEDIATE), waiting for
    # it under the busy timeout. A deferred transaction would start as a reader and upgrade on
    # its first write; in WAL mode that upgrade fails at once with SQLITE_BUSY (no waiting)
    # when another connection committed in between — what a burst of concurrent writers does.
    options = conn.get_execution_options()
    if options.get(_NO_TRANSACTION, False):
        return  # statements that cannot run inside a transaction (PRAGMA journal_mode)
    immediate = not options.get(READ_ONLY, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


#: ``PRAGMA synchronous`` of relaykit's SQLite connections (see _configure_sqlite_connection);
#: set ``RELAYKIT_SQLITE_SYNCHRONOUS=FULL`` to sync every commit.
SQLITE_SYNCHRONOUS = (
    "FULL" if os.environ.get("RELAYKIT_SQLITE_SYNCHRONOUS", "").upper() == "FULL" else "NORMAL"
)


def _configure_sqlite_connection(dbapi_connection: Any, connection_record: Any) -> None:
    # Several processes (or engines) write one file: with a busy timeout a writer waits for the
    # lock instead of failing at once with "database is locked", and in WAL mode readers never
    # block the writer nor the writer the readers. The busy timeout comes first, so that the
    # switch to WAL (which needs the lock on a fresh file) waits too. WAL mode is persistent.
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
        except Exception as exc:
            # On a fresh file, connections opened at once race to switch it to WAL, and SQLite
            # answers SQLITE_BUSY at once (no busy wait) to one that would deadlock. Another
            # connection is switching it: this one goes on (migrate() switches it too).
            if type(exc).__name__ != "OperationalError":
                raise
        # In WAL mode, NORMAL syncs the WAL at checkpoints instead of at every commit: a
        # committed transaction survives the process being killed (the crash trials check
        # it); only a power loss or an OS crash can lose the last commits. FULL (SQLite's
        # default) would add an fsync to every stored event (docs/sessions.md#storage).
        cursor.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
    finally:
        cursor.close()
    # The driver must not open transactions by itself: relaykit begins them (see above).
    dbapi_connection.isolation_level = None


def database_now(dialect_name: str) -> sa.ColumnElement[float]:
    """The database's clock as seconds since the epoch (a float), as an SQL expression.

    Claim expiries are compared with this clock, never the client's: every process and machine
    that uses the database then agrees on whether a lease has expired, however their own clocks
    drift. On PostgreSQL it is the server's ``statement_timestamp()`` (one value per statement);
    on SQLite it is the clock of the machine that holds the file (millisecond precision).
    """
    if dialect_name == "postgresql":
        return sa.literal_column(
            "CAST(EXTRACT(EPOCH FROM statement_timestamp()) AS DOUBLE PRECISION)", sa.Double()
        )
    return sa.literal_column("((julianday('now') - 2440587.5) * 86400.0)", sa.Double())


async def migrate(engine: AsyncEngine) -> None:
    """Bring relaykit's tables in ``engine``'s database to the newest schema revision.

    Runs the shipped Alembic environment in one transaction that holds a lock shared by every
    process: on PostgreSQL a transaction-level advisory lock on a fixed key, on SQLite the
    database's write lock (``BEGIN IMMEDIATE``). A second process waits for the first, then finds
    the schema current and does nothing. The DDL and the version stamp commit together (both
    databases have transactional DDL), so a crash mid-migration leaves the old schema.
    """
    async with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            await connection.execute(
                sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK_KEY}
            )
        else:
            # WAL is persistent: set it once more outside any transaction, in case every
            # connection so far lost the race above (it waits under the busy timeout).
            await connection.execution_options(**{_NO_TRANSACTION: True})
            await connection.exec_driver_sql("PRAGMA journal_mode=WAL")
            await connection.commit()
            await connection.execution_options(**{_NO_TRANSACTION: False})
            # Takes the write lock (BEGIN IMMEDIATE, see _begin_sqlite_transaction).
            await connection.begin()
        await connection.run_sync(_upgrade_to_head)
        await connection.commit()


def _upgrade_to_head(connection: sa.Connection) -> None:
    from alembic import command
    from alembic.config import Config

    # No alembic.ini: the environment's location is set here and env.py takes the connection
    # from the attributes ("%" is ConfigParser's interpolation character).
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def describe_failure(exc: BaseException) -> str:
    """A short, safe description of a storage failure, for error messages.

    Only type names and error codes: a driver's message can quote the SQL, its parameters and
    so stored content, and a connection error can quote the host.
    """
    try:
        from alembic.util import CommandError
    except ImportError:  # pragma: no cover - alembic ships with the sql extra
        pass
    else:
        if isinstance(exc, CommandError):
            return (
                "the database holds a relaykit schema revision this version does not know "
                "(was it upgraded by a newer relaykit?)"
            )
    original: BaseException = exc
    if isinstance(exc, DBAPIError) and isinstance(exc.orig, BaseException):
        original = exc.orig
        # SQLAlchemy's async adapters wrap the driver's own exception once more.
        cause = original.__cause__
        if cause is not None and type(cause).__module__.split(".")[0] in ("asyncpg", "sqlite3"):
            original = cause
    details: list[str] = []
    code = (
        getattr(original, "sqlite_errorname", None)
        or getattr(original, "sqlstate", None)
        or getattr(original, "pgcode", None)
    )
    if isinstance(code, str) and code:
        details.append(code)
    if isinstance(original, OSError) and original.errno is not None:
        details.append(errno.errorcode.get(original.errno, f"errno {original.errno}"))
    name = type(original).__name__
    return f"{name} ({', '.join(details)})" if details else name


class Schema:
    """relaykit's tables in one engine's database, migrated once per owner object: by
    ``ensure()`` on first use (or an explicit ``open()``), under an asyncio lock here and
    ``migrate``'s cross-process lock there."""

    __slots__ = ("_engine", "_lock", "_ready")

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._ready = False
        self._lock = asyncio.Lock()

    async def ensure(self) -> None:
        """Migrate the database to the newest revision unless this object already did."""
        if self._ready:
            return
        async with self._lock:
            if not self._ready:
                await migrate(self._engine)
                self._ready = True


def engine_repr(owner: object, engine: AsyncEngine) -> str:
    """``Owner('<url without password>')``: what a store's ``repr`` shows."""
    url = engine.url.render_as_string(hide_password=True)
    return f"{type(owner).__name__}({url!r})"


class StorageFailures:
    """Re-raises a failure inside its block as ``error`` (a relaykit error class).

    The new error says what could not be done (``the <store> could not <what>``) and the kind
    of failure. The original is dropped (``from None``): the driver's message and attributes
    can hold the SQL and its parameters, that is stored content. relaykit's own errors pass
    through; so do cancellation and other ``BaseException``s.
    """

    __slots__ = ("_engine", "_error", "_store", "_what")

    def __init__(
        self, store: str, what: str, engine: AsyncEngine, error: type[RelayKitError]
    ) -> None:
        self._store = store
        self._what = what
        self._engine = engine
        self._error = error

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, RelayKitError):
            return
        backend = self._engine.url.drivername
        raise self._error(
            f"the {self._store} could not {self._what}: {describe_failure(exc)} from "
            f"{backend}. Check that the database is reachable and writable (the driver's "
            "message is withheld: it can contain stored content)"
        ) from None
