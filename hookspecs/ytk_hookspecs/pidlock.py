"""One process at a time on a folder: an exclusive, non-blocking ``flock`` on a file in it that holds the
holder's pid. The autoloop locks its workdir with it, a Gaia service or Kronos worker its state folder. A
SIGKILLed holder releases it too (the kernel drops the lock with the process)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

__all__ = ["PidLock"]


class PidLock:
    """``with PidLock(path, refused):`` -- ``refused(holder_pid)`` is the error raised when another process
    holds the lock. The file is removed when the holder leaves, however it leaves (an error included)."""

    def __init__(self, path: Path, refused: Callable[[str], BaseException]) -> None:
        self.path = Path(path)
        self.refused = refused
        self.fd: int | None = None

    def __enter__(self) -> "PidLock":
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise self.refused(holder) from None
            # The holder we waited on may have unlinked the file between our open and our flock: then we
            # hold a lock on a dead inode, so open the path again.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return self

    def __exit__(self, *exc: Any) -> None:
        """Unlink the file while still holding it, so no other process can lock it in between (one that opened
        it just before sees the inode gone and opens the path again), then release it."""
        if self.fd is not None:
            try:
                self.path.unlink()
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None
