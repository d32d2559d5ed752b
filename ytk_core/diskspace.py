"""Free disk space, checked before a step writes gigabytes.

A full-size carve writes every region's captured inputs and outputs (GBs); a disk that fills halfway
through leaves torch's archive writer in a state it cannot recover from (it aborts the process when it
is later freed). So the writer asks first: a step that cannot fit stops with one clear line, the same
``ENOSPC`` that a full disk raises, and the callers' handling of a full disk (the CLI's message, the
autoloop stopping rather than blaming a candidate) applies unchanged.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

#: Kept free beyond what a step needs: logs, engine bundles and the next step's small files (at most a
#: tenth of the disk: a 400 MB tmpfs keeps 40 MB spare, not more than it holds).
MARGIN_BYTES = 1 << 30


def margin(path: Path) -> int:
    return min(MARGIN_BYTES, shutil.disk_usage(path).total // 10)


class DiskFull(OSError):
    """``OSError(ENOSPC)`` whose message says what needed the space, how much, and how much is free."""

    def __init__(self, path: Path, need: int, free: int, what: str, spare: int = MARGIN_BYTES) -> None:
        super().__init__(errno.ENOSPC, f"{what} need ~{_gb(need)} there, {_gb(free)} is free "
                                       f"and {_gb(spare)} is kept spare", str(path))
        self.need = need
        self.free = free


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def ensure_free_space(path: Path, need: int, what: str) -> None:
    """Raise :class:`DiskFull` unless ``need`` bytes (plus a margin) fit on the disk holding ``path``.
    ``YTK_FREE_BYTES`` overrides the free space measured (tests plant a full disk with it)."""
    from .config import env_bytes

    override = env_bytes("YTK_FREE_BYTES")
    free = override if override is not None else shutil.disk_usage(path).free
    spare = margin(path)
    if need + spare > free:
        raise DiskFull(Path(path), need, free, what, spare)
