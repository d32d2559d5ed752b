"""The shared job store of the Kronos and Gaia services: finished jobs go after --keep-days, nothing else."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ytk_hookspecs.models import Versioned
from ytk_hookspecs.service.store import RECORD, JobStore


class Rec(Versioned):
    id: str
    idempotency_key: str
    state: str = "queued"
    created: str = ""
    finished: str | None = None
    message: str = ""


def _ago(days: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(days=days)).isoformat()


def test_finished_jobs_older_than_keep_are_deleted_with_their_folders(tmp_path):
    plain: JobStore[Rec] = JobStore(tmp_path / "jobs", Rec)  # a service started without a limit wrote these
    old = plain.add(Rec(id="a" * 32, idempotency_key="k-old", state="succeeded", created=_ago(9), finished=_ago(8)))
    (plain.dir(old.id) / "log.txt").write_text("x")
    fresh = plain.add(Rec(id="b" * 32, idempotency_key="k-new", state="failed", created=_ago(2), finished=_ago(1)))
    running = plain.add(Rec(id="c" * 32, idempotency_key="k-run", state="running", created=_ago(30)))
    queued = plain.add(Rec(id="d" * 32, idempotency_key="k-q", state="queued", created=_ago(30)))
    store: JobStore[Rec] = JobStore(tmp_path / "jobs", Rec, keep_s=7 * 86400)
    store.recover()  # on start: the job that finished 8 days ago goes, folder and key
    assert store.get(old.id) is None and not (tmp_path / "jobs" / old.id).exists() and store.by_key("k-old") is None
    assert {r.id for r in store.all()} == {fresh.id, running.id, queued.id}
    store.update(queued.id, state="succeeded", finished=_ago(10))
    store.add(Rec(id="e" * 32, idempotency_key="k-e", created=_ago(0)))  # and whenever a job is added
    assert store.get(queued.id) is None
    # a restart prunes what aged while the service was down
    later = JobStore(tmp_path / "jobs", Rec, keep_s=0.5 * 86400)
    later.recover()
    assert later.get(fresh.id) is None and not (tmp_path / "jobs" / fresh.id / RECORD).exists()
    assert later.get("e" * 32) is not None  # still queued
    assert later.get(running.id) is not None and later.get(running.id).state == "interrupted"  # finished just now
    # without keep_s nothing is ever deleted
    forever: JobStore[Rec] = JobStore(tmp_path / "jobs", Rec)
    forever.recover()
    assert forever.prune(datetime.now(timezone.utc) + timedelta(days=3650)) == []
