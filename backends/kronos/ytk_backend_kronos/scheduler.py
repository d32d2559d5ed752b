"""The job queue: one engine build at a time per GPU, each job in a child process (:mod:`.runner`)."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
from typing import Any

from ytk_core.kronos.protocol import JobRecord, utcnow
from ytk_hookspecs.models import ArtifactError, sha256_file

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


class Scheduler:
    def __init__(self, settings: WorkerSettings, store: JobStore, log: Any) -> None:
        self.settings = settings
        self.store = store
        self.log = log
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._waiting: list[str] = []
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.stopping = False

    def start(self) -> None:
        gpus: list[str | None] = list(self.settings.gpus) or [None]
        for i, gpu in enumerate(gpus):
            t = threading.Thread(target=self._slot, args=(gpu,), name=f"kronos-slot-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def enqueue(self, job_id: str) -> None:
        with self._lock:
            self._waiting.append(job_id)
        self._queue.put(job_id)

    def position(self, job_id: str) -> int | None:
        with self._lock:
            return self._waiting.index(job_id) if job_id in self._waiting else None

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self._waiting), len(self._procs)

    def stop(self) -> None:
        """The worker is shutting down: running compiles end (their jobs become interrupted)."""
        self.stopping = True
        with self._lock:
            procs = list(self._procs.values())
        for p in procs:
            p.terminate()
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=10)

    # -- one slot -------------------------------------------------------------------------------------
    def _slot(self, gpu: str | None) -> None:
        while True:
            job_id = self._queue.get()
            if job_id is None or self.stopping:
                return
            with self._lock:
                if job_id in self._waiting:
                    self._waiting.remove(job_id)
            try:
                self._run(job_id, gpu)
            except Exception as e:  # noqa: BLE001  -- one job's trouble never stops the slot
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
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL)
            with self._lock:
                self._procs[job_id] = proc
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
                with self._lock:
                    self._procs.pop(job_id, None)
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
