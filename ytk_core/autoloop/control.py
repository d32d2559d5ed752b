"""Workdir lock, limits, and the test-only crash points of autoloop."""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from ytk_hookspecs.pidlock import PidLock

from ..errors import UsageError

LOCK_FILE = ".autoloop.lock"
#: Test-only: ``YTK_AUTOLOOP_CRASH_AT=<point>`` SIGKILLs the process right after that point is reached,
#: so the resume tests can prove that nothing finished is ever redone.
CRASH_ENV = "YTK_AUTOLOOP_CRASH_AT"


class WorkdirLock(PidLock):
    """An exclusive, non-blocking flock on the workdir: two autoloops there refuse to run at once."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(Path(workdir) / LOCK_FILE, lambda holder: UsageError(
            f"another ytk autoloop (pid {holder}) is running on {workdir}; wait for it or use another --workdir"))


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
