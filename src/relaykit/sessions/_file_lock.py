"""An exclusive lock on a file (``flock``), taken with a bounded wait: the SQLite turn lock.

``flock`` locks belong to an open file description, so two tasks of one process that each open
the file exclude each other as two processes do, and the kernel drops the lock when the holder's
process dies. The lock never touches the database: a SQLite write transaction held for a whole
turn would block every other session of the file.

The holder removes the file before it unlocks, so lock files do not pile up. That is safe
because a lock only counts while its file is still the one at the path: a waiter that wins the
lock of a removed file notices (the path is gone, or names another file) and tries again.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from relaykit.sessions._poll import poll

__all__ = ["LockTimeout", "acquire_file_lock", "release_file_lock"]


class LockTimeout(Exception):
    """Another holder kept the lock for the whole wait."""


def _try_lock(path: Path) -> int | None:
    """A descriptor holding the lock on the file at ``path``, or None if someone holds it.

    These are a few quick system calls on a local file: they run on the event loop.
    """
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        held = os.fstat(fd)
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            return fd
        # The previous holder removed this file after we opened it: not the lock anymore.
        os.close(fd)


async def acquire_file_lock(path: Path, deadline: float | None) -> int:
    """A descriptor holding the lock of ``path``, tried until ``deadline`` (event-loop time;
    None: forever), else ``LockTimeout``. At least one attempt is made.

    Give the descriptor back to ``release_file_lock``.
    """
    held: list[int] = []

    async def attempt() -> bool:
        fd = _try_lock(path)
        if fd is not None:
            held.append(fd)
        return fd is not None

    if not await poll(attempt, deadline):
        raise LockTimeout(str(path))
    return held[0]


def release_file_lock(fd: int, path: Path) -> None:
    """Release the lock ``acquire_file_lock`` returned (and remove its file)."""
    try:
        # Removed while still locked, so nobody can lock this file and believe they hold it.
        path.unlink(missing_ok=True)
    finally:
        os.close(fd)  # closing the last descriptor releases the flock
