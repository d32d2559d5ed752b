"""Job records on disk, written atomically, so a restarted worker knows every job it had.

``<state dir>/jobs/<id>/``: ``record.json`` (:class:`~ytk_core.kronos.protocol.JobRecord`), ``work/``
(the unpacked archive), ``log.txt`` (the compile's log), ``result.json`` (what the child reported),
``out/<bundle>.tgz``. On start, a job recorded as running was cut short by the worker's own end: it
is marked ``interrupted`` (a re-submit with its idempotency key restarts it); queued jobs stay queued.
"""

from __future__ import annotations

import re
import threading
import uuid
from pathlib import Path

from ytk_core.kronos.protocol import JobRecord, utcnow
from ytk_hookspecs.models import ArtifactError

RECORD = "record.json"
JOB_ID = re.compile(r"^[0-9a-f]{32}$")


class JobStore:
    """Every job's record, in memory and on disk; all methods are thread-safe."""

    def __init__(self, jobs_dir: Path) -> None:
        self.root = jobs_dir
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._jobs: dict[str, JobRecord] = {}
        self._by_key: dict[str, str] = {}
        self.skipped: list[str] = []  # records that could not be read (reported once, at start)

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex

    def dir(self, job_id: str) -> Path:
        if not JOB_ID.match(job_id):
            raise KeyError(job_id)
        return self.root / job_id

    def recover(self) -> list[JobRecord]:
        """Load every record; running ones become ``interrupted``. Returns the queued jobs, oldest first."""
        with self._lock:
            for d in sorted(self.root.iterdir()):
                if not (d / RECORD).is_file() or not JOB_ID.match(d.name):
                    continue
                try:
                    rec = JobRecord.read(d / RECORD)
                except ArtifactError as e:
                    self.skipped.append(str(e))
                    continue
                if rec.state == "running":
                    rec = rec.model_copy(update={"state": "interrupted", "finished": utcnow(),
                                                 "message": "the worker stopped while this job ran"})
                    rec.write(d / RECORD)
                self._jobs[rec.id] = rec
                self._by_key[rec.idempotency_key] = rec.id
            return sorted((r for r in self._jobs.values() if r.state == "queued"), key=lambda r: r.created)

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            return self._jobs.get(job_id)

    def by_key(self, key: str) -> JobRecord | None:
        with self._lock:
            jid = self._by_key.get(key)
            return self._jobs.get(jid) if jid else None

    def all(self) -> list[JobRecord]:
        with self._lock:
            return sorted(self._jobs.values(), key=lambda r: r.created, reverse=True)

    def add(self, rec: JobRecord) -> JobRecord:
        with self._lock:
            self._save(rec)
            self._by_key[rec.idempotency_key] = rec.id
            return rec

    def update(self, job_id: str, persist: bool = True, **fields: object) -> JobRecord:
        """Change fields of a job's record; ``persist=False`` only in memory (a progress message)."""
        with self._lock:
            rec = self._jobs[job_id].model_copy(update=fields)
            if persist:
                self._save(rec)
            else:
                self._jobs[job_id] = rec
            return rec

    def _save(self, rec: JobRecord) -> None:
        rec = JobRecord.model_validate(rec.model_dump())  # a copy with update= is not validated: check it here
        rec.write(self.dir(rec.id) / RECORD)
        self._jobs[rec.id] = rec
