"""A resume's exclusive claim on its checkpoint (D21): taken before any agent runs, renewed
while the resume runs, finished (replaced or deleted) or released when it ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

from relaykit.checkpoints.base import DEFAULT_CLAIM_TTL, CheckpointStore, validate_claim_ttl
from relaykit.errors import CheckpointBusyError, CheckpointStoreError, RelayKitError, RunnerError

__all__ = ["Claim", "claim_ttl", "describe_store_failure"]

logger = logging.getLogger("relaykit")

#: Releases of claims whose resume was cancelled while claiming (see _Claim.acquire).
_background: set[asyncio.Task[None]] = set()


def claim_ttl(store: CheckpointStore) -> float:
    """The store's claim lease (``claim_ttl``, default 5 minutes), checked."""
    return validate_claim_ttl(getattr(store, "claim_ttl", DEFAULT_CLAIM_TTL))


def describe_store_failure(exc: BaseException) -> str:
    """A store failure for an error message: relaykit errors say what happened; anything
    else only by type, since a driver's text may quote stored content (D21)."""
    return str(exc) if isinstance(exc, RelayKitError) else type(exc).__name__


class Claim:
    """One resume's exclusive claim on its checkpoint: acquired before any agent runs,
    renewed every third of its ttl while the resume runs, finished or released at the end."""

    __slots__ = ("_renewer", "checkpoint_id", "held", "owner", "store", "ttl")

    def __init__(self, store: CheckpointStore, checkpoint_id: str, ttl: float) -> None:
        self.store = store
        self.checkpoint_id = checkpoint_id
        self.ttl = ttl
        self.owner = uuid.uuid4().hex
        self.held = False
        self._renewer: asyncio.Task[None] | None = None

    async def acquire(self) -> bytes:
        """Claim the checkpoint (before any agent runs) and start renewing the claim."""
        claiming = asyncio.ensure_future(self.store.claim(self.checkpoint_id, self.owner, self.ttl))
        try:
            # Shielded: a resume cancelled while its claim is being taken must not leave a
            # claim behind that nobody releases (it would block the checkpoint for the ttl).
            data = await asyncio.shield(claiming)
        except asyncio.CancelledError:
            claiming.add_done_callback(self._release_if_claimed)
            raise
        except RelayKitError:
            raise
        except Exception as exc:
            raise CheckpointStoreError(
                f"checkpoint store failed to claim checkpoint {self.checkpoint_id!r}: "
                f"{type(exc).__name__}"
            ) from None
        self.held = True
        self._renewer = asyncio.get_running_loop().create_task(self._renew())
        return data

    def _release_if_claimed(self, claiming: asyncio.Future[bytes]) -> None:
        if claiming.cancelled() or claiming.exception() is not None:
            return
        task = asyncio.get_running_loop().create_task(
            self.store.release(self.checkpoint_id, self.owner)
        )
        _background.add(task)  # keep a reference until it is done
        task.add_done_callback(_background.discard)

    async def _renew(self) -> None:
        while self.held:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self.store.renew(self.checkpoint_id, self.owner, self.ttl)
            except CheckpointBusyError:
                logger.error(
                    "lost the claim on checkpoint %r while resuming it", self.checkpoint_id
                )
                return
            except Exception as exc:  # a transient store failure: try again next time
                logger.warning(
                    "could not renew the claim on checkpoint %r: %s",
                    self.checkpoint_id,
                    describe_store_failure(exc),
                )

    async def finish(self, data: bytes | None) -> RunnerError | None:
        """Replace (``data``) or delete (``None``) the checkpoint and end the claim; the error
        to report if that failed."""
        self.held = False
        try:
            await self.store.finish(self.checkpoint_id, self.owner, data)
        except Exception as exc:
            what = "save" if data is not None else "consume"
            return RunnerError(
                f"failed to {what} checkpoint {self.checkpoint_id!r} after "
                f"resuming it: {describe_store_failure(exc)}"
            )
        return None

    async def release(self) -> None:
        """End the claim and keep the checkpoint (best effort: an expired claim is harmless)."""
        if not self.held:
            return
        self.held = False
        try:
            # Shielded: a cancelled resume still releases its claim at once.
            await asyncio.shield(self.store.release(self.checkpoint_id, self.owner))
        except Exception as exc:
            logger.warning(
                "could not release the claim on checkpoint %r (it expires by itself): %s",
                self.checkpoint_id,
                describe_store_failure(exc),
            )

    async def stop_renewing(self) -> None:
        task, self._renewer = self._renewer, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
