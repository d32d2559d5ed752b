"""Kronos job records on disk: the shared restart-safe store (:mod:`ytk_hookspecs.service.store`).

``<state dir>/jobs/<id>/``: ``record.json`` (:class:`~ytk_core.kronos.protocol.JobRecord`), ``work/``
(the unpacked archive), ``log.txt`` (the compile's log), ``result.json`` (what the child reported),
``out/<bundle>.tgz``. On start, a job recorded as running was cut short by the worker's own end: it
is marked ``interrupted`` (a re-submit with its idempotency key restarts it); queued jobs stay queued.
"""

from __future__ import annotations

from pathlib import Path

from ytk_core.kronos.protocol import JobRecord
from ytk_hookspecs.service.store import RECORD
from ytk_hookspecs.service.store import JobStore as _JobStore

__all__ = ["RECORD", "JobStore"]


class JobStore(_JobStore[JobRecord]):
    def __init__(self, jobs_dir: Path, keep_s: float | None = None) -> None:
        super().__init__(jobs_dir, JobRecord, keep_s)
