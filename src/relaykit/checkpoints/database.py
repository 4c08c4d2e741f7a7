"""DatabaseCheckpointStore: checkpoints in SQLite or PostgreSQL through SQLAlchemy (async).

Needs the ``sql`` extra (SQLite, ``sqlite+aiosqlite:///path.db``) or ``postgres``
(``postgresql+asyncpg://user@host/db``). One row per checkpoint id in ``relaykit_checkpoints``;
a re-interrupt overwrites the row, so storage stays linear in live checkpoints.

Every write is one atomic statement (an upsert, or an update/delete conditioned on the claim),
never a read followed by a write, so concurrent resumes and saves in any number of processes
agree. The table is created and upgraded by relaykit's Alembic migrations under a lock shared by
all processes (see ``relaykit._db.migrate``).
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from relaykit.checkpoints.base import (
    DEFAULT_CLAIM_TTL,
    MAX_CLAIM_TTL,
    check_data,
    validate_checkpoint_id,
    validate_claim_ttl,
)
from relaykit.errors import (
    CheckpointBusyError,
    CheckpointNotFoundError,
    CheckpointStoreError,
    ConfigurationError,
)

try:
    import sqlalchemy as sa
    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.ext.asyncio import AsyncEngine

    from relaykit import _db
except ImportError:  # pragma: no cover - depends on the installed extras
    raise ConfigurationError(
        "DatabaseCheckpointStore needs SQLAlchemy and Alembic: pip install 'relaykit[sql]' "
        "(SQLite) or 'relaykit[postgres]' (PostgreSQL)"
    ) from None

__all__ = ["CHECKPOINTS_TABLE", "DatabaseCheckpointStore"]

#: The table the store keeps checkpoints in.
CHECKPOINTS_TABLE = "relaykit_checkpoints"

# The table as the store uses it. Its schema is owned by the migrations in relaykit/_migrations
# (never created from this definition), which must produce exactly these columns.
_metadata = sa.MetaData()
_checkpoints = sa.Table(
    CHECKPOINTS_TABLE,
    _metadata,
    sa.Column("checkpoint_id", sa.String(255), primary_key=True),
    sa.Column("data", sa.LargeBinary(), nullable=False),
    sa.Column(
        "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
    ),
    # The resume's claim: its owner and its expiry in seconds since the epoch *by the database's
    # clock* (``_db.database_now``), so that processes on different machines agree on expiry.
    sa.Column("claim_owner", sa.Text(), nullable=True),
    sa.Column("claim_expires_at", sa.Double(), nullable=True),
)
_c = _checkpoints.c


class DatabaseCheckpointStore:
    """A ``CheckpointStore`` in a SQLite or PostgreSQL database, safe across processes.

    The table ``relaykit_checkpoints`` is created (or upgraded) on first use, or up front with
    ``await store.open()``. Storage failures raise ``CheckpointStoreError`` naming the operation
    and the checkpoint id, never SQL or stored content. SQLite files must be on a local disk
    (WAL mode does not work over network file systems).

    >>> import asyncio, os, tempfile
    >>> async def main(path: str) -> bytes | None:
    ...     async with DatabaseCheckpointStore(f"sqlite+aiosqlite:///{path}") as store:
    ...         await store.set("order-1", b"document")
    ...         return await store.get("order-1")
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     asyncio.run(main(os.path.join(folder, "app.db")))
    b'document'

    Args:
        url: ``sqlite+aiosqlite:///path.db`` or ``postgresql+asyncpg://user@host/db``.
        claim_ttl: seconds a resume's claim lasts unless renewed (the Runner reads it).
        engine: an ``AsyncEngine`` to use instead of creating one from ``url`` (shared with
            other stores, say); the store configures but never disposes it.
    """

    def __init__(
        self, url: str, *, claim_ttl: float = DEFAULT_CLAIM_TTL, engine: AsyncEngine | None = None
    ) -> None:
        owner = type(self).__name__
        #: The database URL as given.
        self.url = url
        #: Seconds a resume's claim lasts unless renewed (the Runner passes it to ``claim``).
        self.claim_ttl = validate_claim_ttl(claim_ttl)
        if engine is None:
            self._engine = _db.create_store_engine(url, owner=owner)
            self._owns_engine = True
        else:
            self._engine = _db.check_engine(engine, owner=owner)
            self._owns_engine = False
        self._backend = self._engine.dialect.name
        self._now = _db.database_now(self._backend)
        self._schema = _db.Schema(self._engine)

    def __repr__(self) -> str:
        return _db.engine_repr(self, self._engine)

    async def open(self) -> None:
        """Create or upgrade the checkpoints table now (otherwise the first operation does).

        Safe to call from many tasks and processes at once: the migration runs once.
        """
        with _StorageFailures("open its database", None, self._engine):
            await self._ensure_schema()

    async def _ensure_schema(self) -> None:
        await self._schema.ensure()

    async def get(self, checkpoint_id: str) -> bytes | None:
        """The bytes saved under ``checkpoint_id``, or None."""
        validate_checkpoint_id(checkpoint_id)
        with _StorageFailures("read", checkpoint_id, self._engine):
            await self._ensure_schema()
            async with self._engine.connect() as conn:
                conn = await conn.execution_options(**{_db.READ_ONLY: True})
                row = (
                    await conn.execute(sa.select(_c.data).where(_c.checkpoint_id == checkpoint_id))
                ).first()
            return _stored_bytes(row[0], checkpoint_id) if row is not None else None

    async def set(self, checkpoint_id: str, data: bytes) -> None:
        """Save (or overwrite) ``data`` in one atomic upsert; drops any claim."""
        validate_checkpoint_id(checkpoint_id)
        payload = check_data(data)
        with _StorageFailures("save", checkpoint_id, self._engine):
            await self._ensure_schema()
            async with self._engine.begin() as conn:
                await conn.execute(self._upsert(checkpoint_id, payload))

    def _upsert(self, checkpoint_id: str, payload: bytes) -> sa.Executable:
        # INSERT ... ON CONFLICT DO UPDATE: concurrent first saves of one id all succeed, where
        # an update-then-insert makes all but one fail on the primary key.
        insert = postgresql.insert if self._backend == "postgresql" else sqlite.insert
        statement = insert(_checkpoints).values(checkpoint_id=checkpoint_id, data=payload)
        return statement.on_conflict_do_update(
            index_elements=[_c.checkpoint_id],
            set_={
                "data": statement.excluded.data,
                "updated_at": sa.func.now(),
                "claim_owner": None,
                "claim_expires_at": None,
            },
        )

    async def delete(self, checkpoint_id: str) -> None:
        """Forget ``checkpoint_id`` and its claim (no error if unknown)."""
        validate_checkpoint_id(checkpoint_id)
        with _StorageFailures("delete", checkpoint_id, self._engine):
            await self._ensure_schema()
            async with self._engine.begin() as conn:
                await conn.execute(sa.delete(_checkpoints).where(_c.checkpoint_id == checkpoint_id))

    async def claim(self, checkpoint_id: str, owner: str, ttl: float) -> bytes:
        """Claim the checkpoint for ``owner`` for ``ttl`` seconds and return its document.

        One atomic UPDATE ... RETURNING takes the claim when it is free, expired or already
        ``owner``'s. Raises ``CheckpointNotFoundError`` or ``CheckpointBusyError``.
        """
        validate_checkpoint_id(checkpoint_id)
        with _StorageFailures("claim", checkpoint_id, self._engine):
            await self._ensure_schema()
            async with self._engine.begin() as conn:
                row = (
                    await conn.execute(
                        sa.update(_checkpoints)
                        .where(
                            _c.checkpoint_id == checkpoint_id,
                            sa.or_(
                                _c.claim_owner.is_(None), _c.claim_owner == owner, *self._expired()
                            ),
                        )
                        .values(claim_owner=owner, claim_expires_at=self._now + float(ttl))
                        .returning(_c.data)
                    )
                ).first()
                if row is not None:
                    # Checked before the commit: a corrupt row is refused, not claimed.
                    data = _stored_bytes(row[0], checkpoint_id)
                # Nothing claimed: only now tell "absent" from "held by someone else". This
                # read decides which error to raise, never whether to write.
                exists = (
                    row is not None
                    or (
                        await conn.execute(
                            sa.select(_c.checkpoint_id).where(_c.checkpoint_id == checkpoint_id)
                        )
                    ).first()
                    is not None
                )
        if row is not None:
            return data
        if exists:
            raise CheckpointBusyError(checkpoint_id)
        raise CheckpointNotFoundError(checkpoint_id)

    def _expired(self) -> tuple[sa.ColumnElement[bool], ...]:
        """When a claim counts as expired: its time has come, or its stored expiry is not a
        usable time (NULL, NaN, text, or further ahead than any claim may last: corrupt)."""
        expires = _c.claim_expires_at
        return (expires.is_(None), expires <= self._now, expires > self._now + MAX_CLAIM_TTL)

    async def renew(self, checkpoint_id: str, owner: str, ttl: float) -> None:
        """Extend ``owner``'s unexpired claim to ``ttl`` seconds from now.

        ``CheckpointBusyError`` if ``owner`` lost it (it expired, another resume claimed it, or
        the checkpoint was replaced or deleted).
        """
        validate_checkpoint_id(checkpoint_id)
        with _StorageFailures("renew the claim on", checkpoint_id, self._engine):
            await self._ensure_schema()
            async with self._engine.begin() as conn:
                renewed = await conn.execute(
                    sa.update(_checkpoints)
                    .where(
                        _c.checkpoint_id == checkpoint_id,
                        _c.claim_owner == owner,
                        _c.claim_expires_at > self._now,
                    )
                    .values(claim_expires_at=self._now + float(ttl))
                )
                lost = renewed.rowcount == 0
                if lost:
                    # As in the in-memory store, an expired claim met on the way is dropped, so
                    # an owner told its claim is lost cannot finish the resume afterwards.
                    await conn.execute(
                        sa.update(_checkpoints)
                        .where(_c.checkpoint_id == checkpoint_id, sa.or_(*self._expired()))
                        .values(claim_owner=None, claim_expires_at=None)
                    )
        if lost:
            raise CheckpointBusyError(
                checkpoint_id,
                f"the claim on checkpoint {checkpoint_id!r} was lost (it expired "
                "and another resume claimed it, or the checkpoint was replaced)",
            )

    async def release(self, checkpoint_id: str, owner: str) -> None:
        """Drop ``owner``'s claim and keep the checkpoint (no error if not held)."""
        validate_checkpoint_id(checkpoint_id)
        with _StorageFailures("release the claim on", checkpoint_id, self._engine):
            await self._ensure_schema()
            async with self._engine.begin() as conn:
                await conn.execute(
                    sa.update(_checkpoints)
                    .where(_c.checkpoint_id == checkpoint_id, _c.claim_owner == owner)
                    .values(claim_owner=None, claim_expires_at=None)
                )

    async def finish(self, checkpoint_id: str, owner: str, data: bytes | None) -> None:
        """Replace the checkpoint with ``data`` and drop the claim, or delete it (``None``).

        Only while ``owner`` holds the claim (an expired claim nobody took over still counts),
        else ``CheckpointBusyError`` and nothing is written.
        """
        validate_checkpoint_id(checkpoint_id)
        payload = check_data(data) if data is not None else None
        held = (_c.checkpoint_id == checkpoint_id) & (_c.claim_owner == owner)
        with _StorageFailures("finish the resume of", checkpoint_id, self._engine):
            await self._ensure_schema()
            async with self._engine.begin() as conn:
                if payload is None:
                    result = await conn.execute(sa.delete(_checkpoints).where(held))
                else:
                    result = await conn.execute(
                        sa.update(_checkpoints)
                        .where(held)
                        .values(
                            data=payload,
                            updated_at=sa.func.now(),
                            claim_owner=None,
                            claim_expires_at=None,
                        )
                    )
        if result.rowcount == 0:
            raise CheckpointBusyError(
                checkpoint_id,
                f"cannot finish the resume of checkpoint {checkpoint_id!r}: its "
                "claim was lost (it expired and another resume claimed it, or the checkpoint "
                "was replaced or deleted)",
            )

    async def aclose(self) -> None:
        """Close the database connections (of an engine the store created; not a given one)."""
        if self._owns_engine:
            await self._engine.dispose()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _StorageFailures(
    operation: str, checkpoint_id: str | None, engine: AsyncEngine
) -> _db.StorageFailures:
    """Failures in the block become ``CheckpointStoreError`` naming the operation and id."""
    what = operation if checkpoint_id is None else f"{operation} checkpoint {checkpoint_id!r}"
    return _db.StorageFailures("checkpoint store", what, engine, CheckpointStoreError)


def _stored_bytes(value: object, checkpoint_id: str) -> bytes:
    """The stored document, or ``CheckpointStoreError`` for a corrupt row (never ``bytes()``
    of a number, which would allocate that many bytes)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise CheckpointStoreError(
        f"checkpoint {checkpoint_id!r}: the stored row is corrupt (its data is a "
        f"{type(value).__name__}, not bytes)"
    )
