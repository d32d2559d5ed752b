"""How a worker was started: its state folder, engine, token and limits."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .extract import ExtractLimits

MB = 1 << 20


@dataclass(frozen=True)
class WorkerSettings:
    state_dir: Path
    engine: str
    token: str
    max_upload_bytes: int = 2048 * MB
    max_extract_bytes: int = 8192 * MB
    max_members: int = 4096
    #: GPU indices, one engine build at a time on each; empty: one slot, the environment's devices as they are
    gpus: tuple[str, ...] = ()

    @property
    def slots(self) -> int:
        return max(1, len(self.gpus))

    @property
    def limits(self) -> ExtractLimits:
        return ExtractLimits(max_members=self.max_members, max_bytes=self.max_extract_bytes)

    #: finished jobs (records, uploads, logs, results) are deleted this many days after they finished
    keep_days: float = 7.0

    @property
    def jobs_dir(self) -> Path:
        return self.state_dir / "jobs"
