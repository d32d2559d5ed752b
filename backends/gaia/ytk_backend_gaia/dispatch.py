"""Where jobs run: in child processes of the service (:class:`LocalDispatcher`, one job per slot), or as
Ray tasks on a cluster (:class:`RayDispatcher`, each asking for the resources ``--ray-num-gpus`` /
``--ray-num-cpus`` name, one GPU by default), so a team's pool of GPU hosts serves many users.

Both end a job the same way (:meth:`Dispatcher.commit`): its outcome is recorded once. A Ray task
whose worker process dies is run again by Ray (``--ray-max-retries``); its results still land once,
because only the first outcome of a job that is not final yet is committed.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import ArtifactError
from ytk_hookspecs.service.protocol import utcnow
from ytk_hookspecs.service.queue import SlotQueue
from ytk_hookspecs.service.store import JobStore

from .errors import GaiaUsageError
from .protocol import JobOutcome, JobRecord
from .runner import LOG, OUT, RESULT, WORK, run_job
from .settings import ServiceSettings

#: the archive a job was submitted with, kept in its folder until it is final (a Ray task ships it)
ARCHIVE = "job.tgz"


class Dispatcher:
    """What both dispatchers share: starting a job's record, and committing its outcome exactly once."""

    kind = "local"

    def __init__(self, settings: ServiceSettings, store: JobStore[JobRecord], log: Any) -> None:
        self.settings, self.store, self.log = settings, store, log
        self._commit_lock = threading.Lock()

    def begin(self, job_id: str, message: str) -> JobRecord | None:
        """Mark a queued job running; None when it is no longer queued (cancelled while it waited)."""
        with self._commit_lock:
            rec = self.store.get(job_id)
            if rec is None or rec.state != "queued":
                return None
            rec = self.store.update(job_id, state="running", started=utcnow(), finished=None, message=message,
                                    attempts=rec.attempts + 1, error="", exit_code=0, outputs={})
        self.log.info("gaia job started", job=job_id, kind=rec.kind, backend=rec.backend, attempt=rec.attempts)
        return rec

    def commit(self, job_id: str, outcome: JobOutcome) -> JobRecord | None:
        """Record a job's outcome, once: a job already final (cancelled, or a result already in) keeps its own."""
        with self._commit_lock:
            rec = self.store.get(job_id)
            if rec is None or rec.done:
                self.log.info("gaia job: a late outcome ignored", job=job_id, state=rec.state if rec else None)
                return None
            if outcome.state == "succeeded":
                rec = self.store.update(job_id, state="succeeded", finished=utcnow(), outputs=outcome.outputs,
                                        message="done")
                shutil.rmtree(self.store.dir(job_id) / WORK, ignore_errors=True)
                (self.store.dir(job_id) / ARCHIVE).unlink(missing_ok=True)
            else:
                rec = self.store.update(job_id, state="failed", finished=utcnow(), error=outcome.error,
                                        exit_code=outcome.exit_code or 3, message=outcome.message or "failed")
        self.log.info(f"gaia job {rec.state}", job=job_id, kind=rec.kind, backend=rec.backend)
        return rec

    def cancel(self, job_id: str) -> None:
        """Cancel a job that is not final: its record says so at once, then its run is ended."""
        with self._commit_lock:
            rec = self.store.get(job_id)
            if rec is None or rec.done:
                return
            self.store.update(job_id, state="cancelled", finished=utcnow(), message="cancelled by the client")
        self.log.info("gaia job cancelled", job=job_id)
        self.terminate(job_id)

    def interrupted(self, job_id: str) -> None:
        with self._commit_lock:
            rec = self.store.get(job_id)
            if rec is not None and not rec.done:
                self.store.update(job_id, state="interrupted", finished=utcnow(),
                                  message="the service was stopped while this job ran; it runs again when the "
                                          "service starts")

    # -- what each dispatcher implements -------------------------------------------------------------
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def enqueue(self, job_id: str) -> None: ...
    def terminate(self, job_id: str) -> None: ...
    def position(self, job_id: str) -> int | None: return None
    def counts(self) -> tuple[int, int]: return 0, 0


class LocalDispatcher(Dispatcher):
    """One job at a time per slot (per GPU with ``--gpus``), each in a child process that dies with the service."""

    kind = "local"

    def __init__(self, settings: ServiceSettings, store: JobStore[JobRecord], log: Any) -> None:
        super().__init__(settings, store, log)
        outer = self

        class _Queue(SlotQueue):
            def run(self, job_id: str, slot: str | None) -> None:
                outer._run(job_id, slot)

            def crashed(self, job_id: str, error: Exception) -> None:
                outer.commit(job_id, JobOutcome(state="failed", exit_code=1, error=(
                    f"internal error in the gaia service: {type(error).__name__}: {error}")))

        slots: list[str | None] = list(settings.gpus) or [None] * settings.slots
        self.queue = _Queue(slots, "gaia")

    def start(self) -> None:
        self.queue.start()

    def stop(self) -> None:
        self.queue.stop()

    def enqueue(self, job_id: str) -> None:
        self.queue.enqueue(job_id)

    def terminate(self, job_id: str) -> None:
        self.queue.terminate(job_id)

    def position(self, job_id: str) -> int | None:
        return self.queue.position(job_id)

    def counts(self) -> tuple[int, int]:
        return self.queue.counts()

    def _run(self, job_id: str, gpu: str | None) -> None:
        rec = self.begin(job_id, f"running {'on GPU ' + gpu if gpu is not None else 'here'}")
        if rec is None:
            return
        job_dir = self.store.dir(job_id)
        (job_dir / RESULT).unlink(missing_ok=True)
        env = dict(os.environ)
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
        cmd = [sys.executable, "-m", "ytk_backend_gaia.runner", str(job_dir), "--backend", rec.backend,
               "--parent", str(os.getpid())]
        with open(job_dir / LOG, "ab") as logf:
            logf.write(f"--- attempt {rec.attempts} started {utcnow()}\n".encode())
            logf.flush()
            proc = self.queue.spawn(job_id, cmd, env, stdout=logf, stderr=subprocess.STDOUT)
            try:
                rc = proc.wait()
            finally:
                self.queue.reap(job_id)
        if self.queue.stopping:
            self.interrupted(job_id)
            return
        try:
            outcome = JobOutcome.read(job_dir / RESULT)
        except ArtifactError:
            how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
            outcome = JobOutcome(state="failed", exit_code=3, message=f"the job's process {how}",
                                 error=f"the job's process on the gaia service {how} before it reported; its log "
                                       "has its last words")
        self.commit(job_id, outcome)


#: a Ray task's scratch folder in the node's temp dir: ``ytk-gaia-<worker pid>-<random>``
SCRATCH_PREFIX = "ytk-gaia-"


def _sweep_orphans() -> None:
    """Remove the scratch folders of Ray tasks whose worker process died (a killed worker cannot clean up;
    Ray runs the task again elsewhere): any ``ytk-gaia-<pid>-*`` in this node's temp dir whose pid is gone."""
    for d in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        pid = d.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:  # alive, another user's
            pass


def gaia_job(archive: bytes, backend: str, top_level: tuple[str, ...], limits: tuple[int, int]
             ) -> tuple[str, dict[str, bytes], str]:
    """A Ray task: the job in ``archive`` run with ``backend`` in a scratch folder of whichever node runs
    it. Returns the outcome (JSON), the result files and the log."""
    from ytk_hookspecs.service.archive import ExtractLimits, safe_extract

    _sweep_orphans()
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as td:
        job_dir = Path(td) / "job"
        job_dir.mkdir()
        (job_dir / ARCHIVE).write_bytes(archive)
        safe_extract(job_dir / ARCHIVE, job_dir / WORK, ExtractLimits(*limits), top_level)
        log = io.StringIO()
        log.write(f"--- ray task on {os.uname().nodename} (pid {os.getpid()}) started {utcnow()}\n")
        outcome = run_job(job_dir, backend, log)
        files = {name: (job_dir / OUT / name).read_bytes() for name in outcome.outputs}
        return outcome.model_dump_json(), files, log.getvalue()


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def _reachable(address: str, source: str = "--ray") -> None:
    """A ``HOST:PORT`` (or ``ray://HOST:PORT``) that does not answer is one line now, not minutes of Ray's
    own retries before a traceback."""
    import socket

    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        return  # not an address this can check: ray.init says what is wrong with it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as e:
        raise StageError(f"{source} {address}: no Ray cluster answers there ({e.strerror or e}); start one "
                         "(`ray start --head`) or check the address") from None


class RayDispatcher(Dispatcher):
    """Each job a Ray task; Ray's scheduler queues them until the resources they ask for are free."""

    kind = "ray"

    def __init__(self, settings: ServiceSettings, store: JobStore[JobRecord], log: Any) -> None:
        super().__init__(settings, store, log)
        self._refs: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._remote: Any = None
        self.stopping = False

    def start(self) -> None:
        """Start or join Ray: called by ``serve`` before the app, so a cluster that cannot be had is one line;
        the app's start-up calls it again (a no-op then)."""
        import signal

        import ray

        if self._remote is not None:
            return
        address = str(self.settings.ray_address)
        if address not in ("local", "auto"):
            _reachable(address, self.settings.ray_source)
        main = threading.current_thread() is threading.main_thread()
        sigterm = signal.getsignal(signal.SIGTERM) if main else None
        try:
            ray.init(address=None if address == "local" else address, ignore_reinit_error=True,
                     include_dashboard=False, log_to_driver=False, configure_logging=False,
                     namespace="ytk-gaia")
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise StageError(f"{self.settings.ray_source} {address}: Ray could not start or connect: "
                             f"{_first_line(e)}") from None
        finally:
            if main:  # ray.init makes SIGTERM a sys.exit(); the service stops on it as it does without Ray
                signal.signal(signal.SIGTERM, sigterm)
        resources = ray.cluster_resources()
        self._check_resources(address, resources)
        self._remote = ray.remote(gaia_job)
        self.log.info("gaia: jobs go to the Ray cluster", address=address, resources=str(resources))

    def _check_resources(self, address: str, resources: dict[str, float]) -> None:
        """A job asking for more GPUs or CPUs than the cluster has would wait forever, its state "running"."""
        import ray

        s = self.settings
        gpus, cpus = resources.get("GPU", 0.0), resources.get("CPU", 0.0)
        if s.ray_num_gpus <= gpus and s.ray_num_cpus <= cpus:
            return
        where = "Ray on this machine (--ray local)" if address == "local" else f"the Ray cluster at {address}"
        short = (f"{where} has {gpus:g} GPU(s) and {cpus:g} CPU(s), but every job asks for "
                 f"{s.ray_num_gpus:g} GPU and {s.ray_num_cpus:g} CPU (--ray-num-gpus, --ray-num-cpus)")
        if address == "local":  # this machine is the whole cluster: no node can join it
            ray.shutdown()
            raise GaiaUsageError(f"{short}: no job could ever run (--ray-num-gpus 0 runs jobs without a GPU)")
        self.log.warning(f"{short}: jobs wait until a node that has them joins")

    def stop(self) -> None:
        import ray

        self.stopping = True
        with self._lock:
            refs = list(self._refs.values())
        for ref in refs:
            ray.cancel(ref, force=True)
        ray.shutdown()

    def enqueue(self, job_id: str) -> None:
        threading.Thread(target=self._dispatch, args=(job_id,), name=f"gaia-ray-{job_id[:8]}", daemon=True).start()

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return 0, len(self._refs)

    def terminate(self, job_id: str) -> None:
        import ray

        with self._lock:
            ref = self._refs.get(job_id)
        if ref is not None:
            ray.cancel(ref, force=True)

    def _dispatch(self, job_id: str) -> None:
        import ray
        from ray.exceptions import RayError, TaskCancelledError

        from .protocol import TOP_LEVEL

        s = self.settings
        rec = self.begin(job_id, f"sent to the Ray cluster (asking for {s.ray_num_gpus:g} GPU, "
                                 f"{s.ray_num_cpus:g} CPU)")
        if rec is None:
            return
        job_dir = self.store.dir(job_id)
        try:
            archive = (job_dir / ARCHIVE).read_bytes()
            ref = self._remote.options(num_gpus=s.ray_num_gpus, num_cpus=s.ray_num_cpus,
                                       max_retries=s.ray_max_retries, retry_exceptions=False,
                                       name=f"gaia-{rec.kind}-{job_id[:8]}").remote(
                archive, rec.backend, TOP_LEVEL, (s.max_members, s.max_extract_bytes))
            with self._lock:
                self._refs[job_id] = ref
            try:
                raw, files, log_text = ray.get(ref)
            finally:
                with self._lock:
                    self._refs.pop(job_id, None)
        except TaskCancelledError:
            return  # the cancel recorded the job's state
        except RayError as e:
            if self.stopping:
                self.interrupted(job_id)
                return
            first = _first_line(e)
            self.commit(job_id, JobOutcome(state="failed", exit_code=3, error=(
                f"the Ray task of this job failed ({type(e).__name__}: {first}; Ray ran it up to "
                f"{s.ray_max_retries + 1} time(s))")))
            return
        with open(job_dir / LOG, "a") as logf:
            logf.write(log_text)
        outcome = JobOutcome.model_validate_json(raw)
        if outcome.state == "succeeded":
            out = job_dir / OUT
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            for name, data in files.items():
                (out / name).write_bytes(data)
        self.commit(job_id, outcome)
