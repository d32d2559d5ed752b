"""The job queue: one engine build at a time per GPU, each job in a child process (:mod:`.runner`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any

from ytk_core.kronos.protocol import JobRecord, utcnow
from ytk_hookspecs.models import ArtifactError, sha256_file
from ytk_hookspecs.service.queue import SlotQueue

from .runner import OUT, RESULT, WORK, JobOutcome
from .settings import WorkerSettings
from .store import JobStore

LOG = "log.txt"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
#: fields of the child's JSON log lines that the job's log leaves out (the worker's own bookkeeping)
_QUIET = ("event", "level", "timestamp", "run_id")


def _render(raw: bytes) -> tuple[str, str]:
    """One line of the child's output as the job's log shows it, and its event (the job's message)."""
    line = _ANSI.sub("", raw.decode(errors="replace")).rstrip()
    try:
        rec = json.loads(line)
    except ValueError:
        rec = None
    if not isinstance(rec, dict) or "event" not in rec:
        return line + "\n", line.strip()
    event = str(rec["event"])
    extra = " ".join(f"{k}={v}" for k, v in rec.items() if k not in _QUIET)
    stamp = str(rec.get("timestamp", ""))[11:19]
    return f"{stamp} {str(rec.get('level', 'info')):<7} {event}{'  ' + extra if extra else ''}\n", event


class Scheduler(SlotQueue):
    def __init__(self, settings: WorkerSettings, store: JobStore, log: Any) -> None:
        super().__init__(list(settings.gpus), "kronos")
        self.settings = settings
        self.store = store
        self.log = log

    def run(self, job_id: str, slot: str | None) -> None:
        self._run(job_id, slot)

    def crashed(self, job_id: str, e: Exception) -> None:
        self.log.error("kronos job failed in the worker itself", job=job_id, error=f"{type(e).__name__}: {e}")
        self.store.update(job_id, state="failed", finished=utcnow(), exit_code=1,
                          error=f"internal error in the kronos worker: {type(e).__name__}: {e}")

    def _run(self, job_id: str, gpu: str | None) -> None:
        rec = self.store.get(job_id)
        if rec is None or rec.state != "queued":
            return
        job_dir = self.store.dir(job_id)
        shutil.rmtree(job_dir / OUT, ignore_errors=True)
        (job_dir / RESULT).unlink(missing_ok=True)
        rec = self.store.update(job_id, state="running", started=utcnow(), finished=None, attempts=rec.attempts + 1,
                                message="starting the compile", error="", exit_code=0, warnings=[])
        self.log.info("kronos job started", job=job_id, attempt=rec.attempts, gpu=gpu)
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        cmd = [sys.executable, "-m", "ytk_backend_kronos.runner", str(job_dir), "--engine", self.settings.engine,
               "--parent", str(os.getpid())]
        with open(job_dir / LOG, "ab") as logf:
            logf.write(f"--- attempt {rec.attempts} started {utcnow()}\n".encode())
            logf.flush()
            proc = self.spawn(job_id, cmd, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            try:
                assert proc.stdout is not None
                for raw in proc.stdout:
                    text, event = _render(raw)
                    logf.write(text.encode())
                    logf.flush()
                    if event:
                        self.store.update(job_id, persist=False, message=event[:300])
                rc = proc.wait()
            finally:
                self.reap(job_id)
        self._finish(job_id, rc)

    def _finish(self, job_id: str, rc: int) -> JobRecord:
        job_dir = self.store.dir(job_id)
        if self.stopping:
            self.log.info("kronos job interrupted by the worker's shutdown", job=job_id)
            return self.store.update(job_id, state="interrupted", finished=utcnow(),
                                     message="the worker was stopped while this job ran")
        try:
            out = JobOutcome.read(job_dir / RESULT)
        except ArtifactError:
            how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
            self.log.warning("kronos job's compile process died", job=job_id, rc=rc)
            return self.store.update(job_id, state="failed", finished=utcnow(), exit_code=3,
                                     error=f"the compile process on the worker {how} before it reported (an engine "
                                           "crash?); the job's log has its last words",
                                     message=f"the compile process {how}")
        if out.state == "failed":
            self.log.info("kronos job failed", job=job_id, exit_code=out.exit_code)
            return self.store.update(job_id, state="failed", finished=utcnow(), error=out.error,
                                     exit_code=out.exit_code, message="failed")
        bundle = job_dir / str(out.bundle)
        self.log.info("kronos job succeeded", job=job_id)
        shutil.rmtree(job_dir / WORK, ignore_errors=True)  # only an interrupted job runs again: its inputs can go
        return self.store.update(job_id, state="succeeded", finished=utcnow(), warnings=out.warnings,
                                 bundle_sha256=sha256_file(bundle), bundle_bytes=bundle.stat().st_size,
                                 message="done")
