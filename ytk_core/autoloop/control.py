"""Workdir lock, limits, and the test-only crash points of autoloop."""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

LOCK_FILE = ".autoloop.lock"
#: Test-only: ``YTK_AUTOLOOP_CRASH_AT=<point>`` SIGKILLs the process right after that point is reached,
#: so the resume tests can prove that nothing finished is ever redone.
CRASH_ENV = "YTK_AUTOLOOP_CRASH_AT"


class WorkdirLock:
    """An exclusive, non-blocking flock on the workdir: two autoloops there refuse to run at once."""

    def __init__(self, workdir: Path) -> None:
        self.path = Path(workdir) / LOCK_FILE
        self.fd: int | None = None

    def __enter__(self) -> "WorkdirLock":
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise UsageError(f"another ytk autoloop (pid {holder}) is running on {self.path.parent}; wait for it "
                                 "or use another --workdir") from None
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
        """Release the lock however the run ended (an error included) and leave no lock file behind.

        The file is unlinked while still locked, so no other autoloop can lock it in between; one that
        opened it just before sees the inode gone and opens the path again (see ``__enter__``).
        """
        if self.fd is not None:
            try:
                self.path.unlink()
            except OSError:
                pass
            os.close(self.fd)  # closing releases the flock; a SIGKILLed holder releases it too
            self.fd = None


def parse_duration(text: str | None) -> float | None:
    """'45m', '2h', '90s', '1h30m' -> seconds. A bare number is refused: 45 could mean minutes as well."""
    if text is None or text == "":
        return None
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        raise UsageError(f"--time-budget {text!r}: give a unit, e.g. {t}s or {t}m (45m, 2h, 1h30m, 90s)")
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", t)
    if not parts or "".join(a + b for a, b in parts) != t:
        raise UsageError(f"--time-budget {text!r}: expected a duration like 45m, 2h, 1h30m or 90s")
    return sum(float(v) * {"h": 3600, "m": 60, "s": 1}[u] for v, u in parts)


@dataclass
class Clock:
    """Wall time spent across resumed runs (the budget covers the whole job, not one process)."""

    spent_before: float
    budget_s: float | None
    start: float = field(default_factory=time.monotonic)

    @property
    def spent(self) -> float:
        return self.spent_before + (time.monotonic() - self.start)

    def exhausted(self) -> bool:
        return self.budget_s is not None and self.budget_s >= 0 and self.spent >= self.budget_s


def checkpoint(point: str) -> None:
    if os.environ.get(CRASH_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
