"""DatabaseCheckpointStore: checkpoints in SQLite or PostgreSQL through SQLAlchemy (async).

Needs the ``sql`` extra (SQLite, ``sqlite+aiosqlite:///path.db``) or ``postgres``
(``postgresql+asyncpg://user@host/db``). One row per checkpoint id; a re-interrupt overwrites
the row, so storage stays linear in live checkpoints.
"""

from __future__ import annotations

from typing import Any

from relaykit.errors import ConfigurationError

__all__ = ["DatabaseCheckpointStore"]


class DatabaseCheckpointStore:
    """A ``CheckpointStore`` in a relational database.

    >>> store = DatabaseCheckpointStore("sqlite+aiosqlite:///relaykit.db")  # doctest: +SKIP
    """

    def __init__(self, url: str, *, table: str = "relaykit_checkpoints",
                 engine: Any = None) -> None:
        try:
            import sqlalchemy as sa
            from sqlalchemy.ext.asyncio import create_async_engine
        except ImportError:  # pragma: no cover - depends on the installed extras
            raise ConfigurationError(
                "DatabaseCheckpointStore needs SQLAlchemy: pip install 'relaykit[sql]' "
                "(or 'relaykit[postgres]')") from None
        self.url = url
        try:
            self._engine = engine if engine is not None else create_async_engine(url)
        except Exception as exc:
            raise ConfigurationError(f"DatabaseCheckpointStore: cannot use database URL "
                                     f"{url!r}: {exc}") from None
        self._sa = sa
        metadata = sa.MetaData()
        self._table = sa.Table(
            table, metadata,
            sa.Column("checkpoint_id", sa.String(255), primary_key=True),
            sa.Column("data", sa.LargeBinary, nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False,
                      server_default=sa.func.now(), onupdate=sa.func.now()),
        )
        self._metadata = metadata
        self._ready = False

    async def _ensure(self) -> None:
        if not self._ready:
            async with self._engine.begin() as conn:
                await conn.run_sync(self._metadata.create_all)
            self._ready = True

    async def get(self, checkpoint_id: str) -> bytes | None:
        """The bytes saved under ``checkpoint_id``, or None."""
        await self._ensure()
        t = self._table
        async with self._engine.connect() as conn:
            row = (await conn.execute(self._sa.select(t.c.data).where(
                t.c.checkpoint_id == checkpoint_id))).first()
        return bytes(row[0]) if row is not None else None

    async def set(self, checkpoint_id: str, data: bytes) -> None:
        """Save or overwrite the checkpoint (one transaction)."""
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"checkpoint data must be bytes, not {type(data).__name__}")
        await self._ensure()
        t = self._table
        async with self._engine.begin() as conn:
            updated = await conn.execute(t.update().where(t.c.checkpoint_id == checkpoint_id)
                                         .values(data=bytes(data), updated_at=self._sa.func.now()))
            if updated.rowcount == 0:
                await conn.execute(t.insert().values(checkpoint_id=checkpoint_id,
                                                     data=bytes(data)))

    async def delete(self, checkpoint_id: str) -> None:
        """Forget ``checkpoint_id`` (no error if unknown)."""
        await self._ensure()
        t = self._table
        async with self._engine.begin() as conn:
            await conn.execute(t.delete().where(t.c.checkpoint_id == checkpoint_id))

    async def aclose(self) -> None:
        """Dispose of the engine's connections."""
        await self._engine.dispose()
