"""The worker's HTTP API (FastAPI; the OpenAPI document is served at ``/openapi.json``, docs at ``/docs``).

=======================================  =================================================================
``GET  /v1/health``                      liveness, no token needed
``GET  /v1/info``                        :class:`WorkerInfo`: the engine, its target, the limits
``POST /v1/jobs``                        body: the job archive (application/gzip); header ``Idempotency-Key``
``GET  /v1/jobs``                        :class:`JobList`, newest first
``GET  /v1/jobs/{id}``                   :class:`JobRecord`
``GET  /v1/jobs/{id}/log?offset=N``      :class:`LogChunk`: the compile's log from byte N
``GET  /v1/jobs/{id}/bundle``            the engine bundle (.tgz) of a succeeded job
=======================================  =================================================================

Every route but health needs ``Authorization: Bearer <token>``. Every refusal is an
:class:`ErrorBody`: one line for the user and the exit status the client ends with.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.responses import FileResponse, Response
from starlette.concurrency import run_in_threadpool

from ytk_core.kronos.protocol import (API, BUNDLE_SHA_HEADER, JOB_SPEC, ErrorBody, JobList, JobRecord, JobSpec,
                                      SubmitResponse, WorkerInfo)
from ytk_hookspecs.models import ArtifactError, sha256_file
from ytk_hookspecs.service.protocol import IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_RULE
from ytk_hookspecs.service.server import (Refusal, add_common_routes, bearer_auth, install_error_handlers,
                                          json_response, received_archive)

from . import __version__
from .extract import ArchiveRefused, safe_extract
from .runner import WORK
from .scheduler import LOG, Scheduler
from .settings import WorkerSettings
from .store import JobStore

_json = json_response


def create_app(settings: WorkerSettings, info: WorkerInfo, log: Any) -> FastAPI:
    """The app for one worker; its queue starts with the app (and resumes the queued jobs on disk)."""
    store = JobStore(settings.jobs_dir, settings.keep_days * 86400.0)
    sched = Scheduler(settings, store, log)
    submitting = asyncio.Lock()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        queued = store.recover()
        for msg in store.skipped:
            log.warning(f"kronos: skipping an unreadable job record: {msg}")
        sched.start()
        for rec in queued:
            sched.enqueue(rec.id)
        interrupted = sum(1 for r in store.all() if r.state == "interrupted")
        log.info("kronos worker ready", engine=settings.engine, jobs=len(store.all()), queued=len(queued),
                 interrupted=interrupted, state_dir=str(settings.state_dir))
        yield
        sched.stop()

    app = FastAPI(title="ytk Kronos worker", version=__version__, lifespan=lifespan,
                  description="Builds and profiles engines on the target for `ytk embedded compile --worker`.")
    app.state.store, app.state.scheduler = store, sched

    install_error_handlers(app)
    authorized = bearer_auth(lambda: {"kronos": settings.token})

    def job_or_404(job_id: str) -> JobRecord:
        rec = store.get(job_id) if re.fullmatch(r"[0-9a-f]{32}", job_id) else None
        if rec is None:
            raise Refusal(404, f"no job {job_id} on this worker (its records are in {settings.state_dir}; were "
                               "they removed?)", exit_code=3)
        pos = sched.position(rec.id)
        return rec.model_copy(update={"queue_position": pos}) if pos is not None else rec

    add_common_routes(app, service="kronos worker", record=JobRecord, job_or_404=job_or_404,
                      log_of=lambda job_id: store.dir(job_id) / LOG, auth=authorized, service_tag="worker")

    @app.get(f"{API}/info", response_model=WorkerInfo, tags=["worker"], dependencies=[Depends(authorized)])
    def worker_info() -> Response:
        queued, running = sched.counts()
        return _json(info.model_copy(update={"queued": queued, "running": running}))

    @app.post(f"{API}/jobs", response_model=SubmitResponse, status_code=201, tags=["jobs"],
              dependencies=[Depends(authorized)],
              responses={200: {"model": SubmitResponse, "description": "the key's job already existed"},
                         400: {"model": ErrorBody}, 401: {"model": ErrorBody}, 409: {"model": ErrorBody},
                         413: {"model": ErrorBody}},
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/gzip": {"schema": {"type": "string", "format": "binary"}}}}})
    async def submit(request: Request,
                     idempotency_key: str = Header(..., description="the same key on a retried submit runs the "
                                                                    "job once"),
                     x_ytk_archive_sha256: str | None = Header(None, description="sha256 of the body")) -> Response:
        """Submit a job: the body is the job archive (``job.json``, ``inputs/``, ``plugins/``)."""
        if not IDEMPOTENCY_KEY.match(idempotency_key):
            raise Refusal(400, f"Idempotency-Key must be {IDEMPOTENCY_KEY_RULE}")
        found = _existing(idempotency_key, x_ytk_archive_sha256)
        if found is not None:
            return found
        async with received_archive(request, settings.state_dir / "incoming", settings.max_upload_bytes,
                                    x_ytk_archive_sha256) as (incoming, digest):
            async with submitting:  # one key, one job: a concurrent submit under the same key waits here
                found = _existing(idempotency_key, digest)
                if found is not None:
                    return found
                job_id = store.new_id()
                job_dir = store.dir(job_id)
                try:
                    await run_in_threadpool(safe_extract, incoming, job_dir / WORK, settings.limits)
                    spec = _check_spec(job_dir / WORK)
                except ArchiveRefused as e:
                    shutil.rmtree(job_dir, ignore_errors=True)
                    raise Refusal(400, f"archive refused: {e}") from None
                except Refusal:
                    shutil.rmtree(job_dir, ignore_errors=True)
                    raise
                store.add(JobRecord(id=job_id, idempotency_key=idempotency_key, archive_sha256=digest, spec=spec,
                                    engine=settings.engine))
        sched.enqueue(job_id)
        log.info("kronos job queued", job=job_id, arch=spec.arch, plugins=len(spec.plugins))
        return _json(SubmitResponse(job=job_or_404(job_id), created=True), 201)

    def _existing(key: str, digest: str | None) -> Response | None:
        rec = store.by_key(key)
        if rec is None:
            return None
        if digest and digest != rec.archive_sha256:
            raise Refusal(409, f"Idempotency-Key {key} belongs to job {rec.id}, submitted with other inputs; a new job "
                               "needs a new key")
        if rec.state == "interrupted":
            store.update(rec.id, state="queued", message="restarted by a re-submit", finished=None)
            sched.enqueue(rec.id)
            log.info("kronos job restarted by a re-submit", job=rec.id)
            return _json(SubmitResponse(job=job_or_404(rec.id), created=False, restarted=True), 200)
        return _json(SubmitResponse(job=job_or_404(rec.id), created=False), 200)

    def _check_spec(work: Path) -> JobSpec:
        try:
            spec = JobSpec.read(work / JOB_SPEC)
        except ArtifactError as e:
            raise Refusal(400, f"archive refused: {str(e).replace(str(work) + '/', '')}") from None
        if spec.engine and spec.engine != settings.engine:
            raise Refusal(400, f"the job asks for the {spec.engine} engine; this worker runs {settings.engine}")
        wanted = [(spec.onnx, spec.onnx_sha256), (spec.npz, spec.npz_sha256),
                  *((p.path, p.sha256) for p in spec.plugins)]
        for rel, digest in wanted:
            p = work / rel
            if not p.is_file():
                raise Refusal(400, f"archive refused: job.json names {rel}, which the archive does not hold")
            if sha256_file(p) != digest:
                raise Refusal(400, f"archive refused: {rel} does not match its sha256 in job.json")
        return spec

    @app.get(f"{API}/jobs", response_model=JobList, tags=["jobs"], dependencies=[Depends(authorized)])
    def list_jobs(limit: int = Query(100, ge=1, le=10_000)) -> Response:
        return _json(JobList(jobs=[job_or_404(r.id) for r in store.all()[:limit]]))

    @app.get(f"{API}/jobs/{{job_id}}/bundle", tags=["jobs"], dependencies=[Depends(authorized)],
             responses={200: {"content": {"application/gzip": {}}, "description": "the engine bundle"},
                        404: {"model": ErrorBody}, 409: {"model": ErrorBody}})
    def job_bundle(job_id: str) -> Response:
        rec = job_or_404(job_id)
        if rec.state != "succeeded" or not rec.bundle_sha256:
            why = f" ({rec.error})" if rec.error else ""
            raise Refusal(409, f"job {job_id} is {rec.state}: it has no bundle{why}", exit_code=3)
        path = store.dir(job_id) / "out" / rec.spec.output_name
        if not path.is_file():
            raise Refusal(404, f"the bundle of job {job_id} is gone from the worker's disk", exit_code=3)
        return FileResponse(path, media_type="application/gzip", filename=rec.spec.output_name,
                            headers={BUNDLE_SHA_HEADER: rec.bundle_sha256})

    return app


def worker_info(settings: WorkerSettings) -> WorkerInfo:
    """What ``/v1/info`` says: the engine (checked here, at start), its target, the limits."""
    from ytk_core import __version__ as ytk_version
    from ytk_core.runtime import runtime
    from ytk_core.target import detect_arch
    from ytk_hookspecs.models import ArchSpec

    arch, _why = detect_arch()
    rt = runtime()
    backend = rt.manager.get(settings.engine)
    assert backend is not None  # the CLI selected it
    av = backend.availability(ArchSpec.parse(arch))
    return WorkerInfo(ytk_version=ytk_version, engine=settings.engine, engine_version=backend.info.version,
                      simulated=backend.info.simulated, engine_available=av.available, engine_reason=av.reason or "",
                      slots=settings.slots, arch=arch, device=_device_name(backend.info.simulated, arch),
                      max_upload_bytes=settings.max_upload_bytes, max_extract_bytes=settings.max_extract_bytes,
                      max_members=settings.max_members)


def _device_name(simulated: bool, arch: str) -> str:
    from ytk_core.target import local_gpu_name

    name = local_gpu_name()
    if simulated or not name:
        return f"{arch} (simulated)" if simulated else f"{arch} (no local GPU found)"
    return name

