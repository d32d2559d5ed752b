"""Job records on disk, written atomically, so a restarted worker knows every job it had.

``<jobs dir>/<id>/record.json`` holds one record (any :class:`~ytk_hookspecs.models.Versioned` model
with ``id``, ``idempotency_key``, ``state``, ``created``, ``finished`` and ``message``). On start, a
job recorded as running was cut short by the worker's own end: it is marked ``interrupted`` (a
re-submit with its idempotency key restarts it); queued jobs stay queued. A store given ``keep_s``
deletes finished jobs (their folders: uploads, logs, results) once they finished longer ago than that,
when it starts and whenever a job is added; a client asking for one then hears it is unknown.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Generic, TypeVar

from ..errors import StageError
from ..pidlock import PidLock
from ..models import ArtifactError, Versioned
from .protocol import JOB_ID, utcnow

__all__ = ["RECORD", "LOCK", "R", "StateDirInUse", "state_dir_lock", "JobStore"]


RECORD = "record.json"
#: held (flock) by the one service that owns a state folder, for as long as it runs
LOCK = ".service.lock"
R = TypeVar("R", bound=Versioned)


class StateDirInUse(StageError):
    """Another running service owns the state folder: a second one would take its running jobs for
    interrupted ones and run them again beside it (exit 2)."""

    exit_code = 2


def state_dir_lock(state_dir: Path) -> PidLock:
    """The lock the one service running on ``state_dir`` holds (``with``), refused naming the holder."""
    return PidLock(state_dir / LOCK, lambda holder: StateDirInUse(
        f"--state-dir {state_dir} is in use by another running service (pid {holder}); give this one a "
        "--state-dir of its own, or stop that one"))


class JobStore(Generic[R]):
    """Every job's record, in memory and on disk; all methods are thread-safe."""

    def __init__(self, jobs_dir: Path, record: type[R], keep_s: float | None = None) -> None:
        self.root = jobs_dir
        self.keep_s = keep_s  # finished jobs older than this are deleted (None: kept for ever)
        self.root.mkdir(parents=True, exist_ok=True)
        self.record = record
        self._lock = threading.RLock()
        self._jobs: dict[str, R] = {}
        self._by_key: dict[str, str] = {}
        self.skipped: list[str] = []  # records that could not be read (reported once, at start)

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex

    def dir(self, job_id: str) -> Path:
        if not JOB_ID.match(job_id):
            raise KeyError(job_id)
        return self.root / job_id

    def recover(self) -> list[R]:
        """Load every record; running ones become ``interrupted``. Returns the queued jobs, oldest first."""
        with self._lock:
            loaded: list[R] = []
            for d in sorted(self.root.iterdir()):
                if not (d / RECORD).is_file() or not JOB_ID.match(d.name):
                    continue
                try:
                    rec = self.record.read(d / RECORD)
                except ArtifactError as e:
                    self.skipped.append(str(e))
                    continue
                if getattr(rec, "state") == "running":
                    rec = rec.model_copy(update={"state": "interrupted", "finished": utcnow(),
                                                 "message": "the worker stopped while this job ran"})
                    rec.write(d / RECORD)
                loaded.append(rec)
            for rec in sorted(loaded, key=lambda r: getattr(r, "created")):  # a key's latest job wins
                self._jobs[getattr(rec, "id")] = rec
                self._by_key[getattr(rec, "idempotency_key")] = getattr(rec, "id")
            self.prune()
            return [r for r in sorted(self._jobs.values(), key=lambda r: getattr(r, "created"))
                    if getattr(r, "state") == "queued"]

    def get(self, job_id: str) -> R | None:
        with self._lock:
            return self._jobs.get(job_id)

    def by_key(self, key: str) -> R | None:
        with self._lock:
            jid = self._by_key.get(key)
            return self._jobs.get(jid) if jid else None

    def all(self) -> list[R]:
        with self._lock:
            return sorted(self._jobs.values(), key=lambda r: getattr(r, "created"), reverse=True)

    def add(self, rec: R) -> R:
        """Record a new job; its idempotency key now names it (a key's earlier job is no longer found by it)."""
        with self._lock:
            self._save(rec)
            self._by_key[getattr(rec, "idempotency_key")] = getattr(rec, "id")
            self.prune()
            return rec

    def prune(self, now: datetime | None = None) -> list[str]:
        """Delete the jobs that finished more than ``keep_s`` ago (records, folders, their idempotency keys);
        queued and running jobs are never touched. Returns the ids deleted."""
        if self.keep_s is None:
            return []
        cutoff = (now or datetime.now(timezone.utc)) - timedelta(seconds=self.keep_s)
        gone = []
        with self._lock:
            for job_id, rec in list(self._jobs.items()):
                finished = getattr(rec, "finished", None)
                if getattr(rec, "state") in ("queued", "running") or not finished:
                    continue
                try:
                    when = datetime.fromisoformat(str(finished))
                except ValueError:
                    continue
                if when.tzinfo is None:
                    when = when.replace(tzinfo=timezone.utc)
                if when < cutoff:
                    shutil.rmtree(self.root / job_id, ignore_errors=True)
                    del self._jobs[job_id]
                    key = getattr(rec, "idempotency_key")
                    if self._by_key.get(key) == job_id:
                        del self._by_key[key]
                    gone.append(job_id)
        return gone

    def update(self, job_id: str, persist: bool = True, **fields: object) -> R:
        """Change fields of a job's record; ``persist=False`` only in memory (a progress message)."""
        with self._lock:
            rec = self._jobs[job_id].model_copy(update=fields)
            if persist:
                self._save(rec)
            else:
                self._jobs[job_id] = rec
            return rec

    def _save(self, rec: R) -> None:
        rec = self.record.model_validate(rec.model_dump())  # a copy with update= is not validated: check it here
        job_id = getattr(rec, "id")
        rec.write(self.dir(job_id) / RECORD)
        self._jobs[job_id] = rec
