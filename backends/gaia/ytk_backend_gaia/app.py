"""The Gaia service's HTTP API (FastAPI; the OpenAPI document is served at ``/openapi.json``, docs at
``/docs``). The routes are listed in :mod:`.protocol`.

A submit is checked before it is queued: the key (every route but health), the key's quota of active
jobs (429 with ``Retry-After`` over it), the upload's size (413), the archive's members (400, see
:func:`ytk_hookspecs.service.archive.safe_extract`), the spec and the sha256 of every input it
names, and that the backend it asks for is offered here. A job whose content (spec and inputs) a
succeeded job already had is answered from that job's results at once: the same region asked twice
is generated once.
"""

from __future__ import annotations

import asyncio
import shutil
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.responses import FileResponse, Response
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from ytk_hookspecs import StageContext
from ytk_hookspecs.models import ArchSpec, SupportAnswer, SupportRequest, sha256_file
from ytk_hookspecs.service.archive import ArchiveRefused, ExtractLimits, safe_extract
from ytk_hookspecs.service.protocol import (API, IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_RULE, JOB_ID, ErrorBody, utcnow)
from ytk_hookspecs.service.server import (Refusal, add_common_routes, bearer_auth, install_error_handlers,
                                          json_response, received_archive)
from ytk_hookspecs.service.store import JobStore

from . import __version__
from .dispatch import ARCHIVE, Dispatcher, LocalDispatcher, RayDispatcher
from .protocol import (FILE_SHA_HEADER, JOB_SPEC, RESULT_FILES, TOP_LEVEL, BackendStatus, BuildJobSpec, JobList,
                       JobRecord, JobSpec, KernelJobSpec, ServiceInfo, SubmitResponse, SupportQuery, content_hash)
from .runner import LOG, OUT, WORK
from .settings import MB, ServiceSettings

#: how long a client over its quota is asked to wait
QUOTA_RETRY_AFTER_S = 5
_ARCHIVE_BODY = {"requestBody": {"required": True, "content": {
    "application/gzip": {"schema": {"type": "string", "format": "binary"}}}}}
_SUBMIT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": SubmitResponse, "description": "the key's job already existed, or the results were cached"},
    400: {"model": ErrorBody}, 401: {"model": ErrorBody}, 409: {"model": ErrorBody}, 413: {"model": ErrorBody},
    429: {"model": ErrorBody, "description": "the key has its quota of active jobs; retry after Retry-After"}}


class Backends:
    """The generators and the builder this service offers, loaded once as the core loads them."""

    def __init__(self, settings: ServiceSettings) -> None:
        from ytk_hookspecs.loader import PluginLoader

        self.loader = PluginLoader()
        self.loader.add_entry_points()
        self.loader.collect()
        self.settings = settings

    def status(self, name: str, arch: ArchSpec | None) -> BackendStatus:
        b = self.loader.get(name)
        if b is None:
            return BackendStatus(name=name, version="?", simulated=False, available=False,
                                 reason=f"backend {name!r} is not installed on the service")
        av = b.availability(arch)
        return BackendStatus(name=name, version=b.info.version, simulated=b.info.simulated, available=av.available,
                             reason=av.reason, config_keys=dict(b.info.config_keys))

    def impl(self, name: str) -> Any:
        found = self.loader.get(name)
        return found.impl if found is not None else None

    def code(self, name: str) -> str:
        """The fingerprint of ``name``'s installed code: part of the result cache's key, so a generator or
        builder upgraded (or edited in place) on the service never answers with its old code's results."""
        from ytk_hookspecs.fingerprint import code_fingerprint

        impl = self.impl(name)
        return code_fingerprint(impl) if impl is not None else "not-installed"


def create_app(settings: ServiceSettings, log: Any) -> FastAPI:
    """The app for one service; its dispatcher starts with the app (and runs again the jobs on disk that
    were queued, or running when the service stopped)."""
    store: JobStore[JobRecord] = JobStore(settings.jobs_dir, JobRecord, settings.keep_days * 86400.0)
    backends = Backends(settings)
    dispatcher: Dispatcher = (RayDispatcher if settings.ray_address else LocalDispatcher)(settings, store, log)
    submitting = asyncio.Lock()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        store.recover()
        for msg in store.skipped:
            log.warning(f"gaia: skipping an unreadable job record: {msg}")
        # serve() has started Ray already (on the main thread; then this is a no-op). Never on a request
        # thread: Ray's GCS and raylet die with the thread that started them (PR_SET_PDEATHSIG), and a
        # request thread is retired after 10 s idle.
        dispatcher.start()
        again = sorted((r for r in store.all() if r.state in ("queued", "interrupted")), key=lambda r: r.created)
        for rec in again:
            if rec.state == "interrupted":
                store.update(rec.id, state="queued", finished=None, message="queued again: the service restarted")
            dispatcher.enqueue(rec.id)
        log.info("gaia service ready", jobs=len(store.all()), queued_again=len(again), dispatcher=dispatcher.kind,
                 generators=",".join(settings.generators), builder=settings.builder, state_dir=str(settings.state_dir))
        yield
        dispatcher.stop()

    app = FastAPI(title="ytk Gaia service", version=__version__, lifespan=lifespan,
                  description="Kernel generation and plugin builds for `ytk kernelgen compile --kernelgen gaia` "
                              "and `ytk embedded build-plugin --builder gaia`.")
    app.state.store, app.state.dispatcher = store, dispatcher
    install_error_handlers(app)
    caller = bearer_auth(lambda: settings.keys)

    def job_or_404(job_id: str) -> JobRecord:
        rec = store.get(job_id) if JOB_ID.fullmatch(job_id) else None
        if rec is None:
            raise Refusal(404, f"no job {job_id} on this gaia service", exit_code=3)
        pos = dispatcher.position(rec.id)
        return rec.model_copy(update={"queue_position": pos}) if pos is not None else rec

    def _info(arch: str | None) -> ServiceInfo:
        target = _parse_arch(arch) if arch else None
        queued, running = dispatcher.counts()
        return ServiceInfo(version=__version__, arch=target.spec if target else None,
                           generators=[backends.status(g, target) for g in settings.generators],
                           default_generator=settings.generators[0] if settings.generators else None,
                           builder=backends.status(settings.builder, target) if settings.builder else None,
                           dispatcher=dispatcher.kind, slots=0 if settings.ray_address else len(
                               settings.gpus) or settings.slots,
                           max_upload_bytes=settings.max_upload_bytes, max_extract_bytes=settings.max_extract_bytes,
                           max_members=settings.max_members, max_active_per_key=settings.max_active_per_key,
                           queued=queued, running=running)

    add_common_routes(app, service="gaia service", record=JobRecord, job_or_404=job_or_404,
                      log_of=lambda job_id: store.dir(job_id) / LOG, auth=caller, service_tag="service")

    @app.get(f"{API}/info", response_model=ServiceInfo, tags=["service"], dependencies=[Depends(caller)],
             responses={400: {"model": ErrorBody}, 401: {"model": ErrorBody}})
    def info(arch: str | None = Query(None, description="an arch spec: say whether each backend can serve it")
             ) -> Response:
        return json_response(_info(arch))

    @app.post(f"{API}/kernelgen/supports", response_model=SupportAnswer, tags=["kernelgen"],
              responses={400: {"model": ErrorBody}, 401: {"model": ErrorBody}})
    def supports(query: SupportQuery, _: str = Depends(caller)) -> Response:
        """Would the generator take this region? Answered from what propose knows, without its ``.pt2``."""
        name = _generator(query.generator)
        impl = backends.impl(name)
        try:
            ans = impl.supports(SupportRequest(sketch=query.sketch, candidate=query.candidate,
                                               precision=query.precision, config=query.config, arch=query.arch),
                                StageContext(log=log))
        except Exception as e:  # noqa: BLE001  -- a generator that cannot answer leaves it to the job
            ans = SupportAnswer(supported=True, certain=False, backend=name,
                                why=f"{name} could not answer ({type(e).__name__}: {e}); the job decides")
        if not isinstance(ans, SupportAnswer):
            ans = SupportAnswer(supported=False, certain=False, backend=name, why="the generator gave no answer")
        return json_response(ans)

    @app.post(f"{API}/kernelgen/jobs", response_model=SubmitResponse, status_code=201, tags=["kernelgen"],
              responses=_SUBMIT_RESPONSES, openapi_extra=_ARCHIVE_BODY)
    async def submit_kernelgen(request: Request, key: str = Depends(caller),
                               idempotency_key: str = Header(..., description="the client sends the job's content "
                                                             "hash: a re-submit of the same region finds its job"),
                               x_ytk_archive_sha256: str | None = Header(None, description="sha256 of the body")
                               ) -> Response:
        """Submit a kernel generation job: ``job.json`` (a KernelJobSpec) and ``inputs/region.pt2``."""
        return await _submit(request, key, idempotency_key, x_ytk_archive_sha256, "kernelgen")

    @app.post(f"{API}/builds", response_model=SubmitResponse, status_code=201, tags=["builds"],
              responses=_SUBMIT_RESPONSES, openapi_extra=_ARCHIVE_BODY)
    async def submit_build(request: Request, key: str = Depends(caller),
                           idempotency_key: str = Header(..., description="the client sends the job's content hash"),
                           x_ytk_archive_sha256: str | None = Header(None, description="sha256 of the body")
                           ) -> Response:
        """Submit a plugin build: ``job.json`` (a BuildJobSpec) and ``inputs/source.module_source.py``."""
        return await _submit(request, key, idempotency_key, x_ytk_archive_sha256, "build")

    async def _submit(request: Request, owner: str, idem: str, sent_sha: str | None, kind: str) -> Response:
        if not IDEMPOTENCY_KEY.match(idem):
            raise Refusal(400, f"Idempotency-Key must be {IDEMPOTENCY_KEY_RULE}")
        scoped = f"{owner}/{idem}"
        found = _existing(scoped, sent_sha)
        if found is not None:
            return found
        _check_quota(owner)
        async with received_archive(request, settings.state_dir / "incoming", settings.max_upload_bytes,
                                    sent_sha) as (incoming, digest):
            async with submitting:  # one key, one job: a concurrent submit under the same key waits here
                found = _existing(scoped, digest)
                if found is not None:
                    return found
                _check_quota(owner)
                job_id = store.new_id()
                job_dir = store.dir(job_id)
                try:
                    await run_in_threadpool(safe_extract, incoming, job_dir / WORK, _limits(), TOP_LEVEL)
                    spec = _check_spec(job_dir / WORK, kind)
                    backend = _generator(spec.generator) if isinstance(spec, KernelJobSpec) else _builder()
                except ArchiveRefused as e:
                    shutil.rmtree(job_dir, ignore_errors=True)
                    raise Refusal(400, f"archive refused: {e}") from None
                except Refusal:
                    shutil.rmtree(job_dir, ignore_errors=True)
                    raise
                content = content_hash(spec) + f":{backend}@{await run_in_threadpool(backends.code, backend)}"
                rec = JobRecord(id=job_id, kind=spec.kind, owner=owner, idempotency_key=scoped,
                                archive_sha256=digest, content_sha256=content, backend=backend, spec=spec,
                                dispatcher=dispatcher.kind)
                cached = _cached(content)
                if cached is not None:
                    rec = _from_cache(rec, cached)
                    store.add(rec)
                    log.info("gaia job answered from the cache", job=job_id, owner=owner, cached_from=cached.id)
                    return json_response(SubmitResponse(job=rec, created=True, cached=True), 200)
                shutil.move(str(incoming), job_dir / ARCHIVE)
                store.add(rec)
        dispatcher.enqueue(job_id)
        log.info("gaia job queued", job=job_id, kind=kind, owner=owner, backend=backend)
        return json_response(SubmitResponse(job=job_or_404(job_id), created=True), 201)

    def _existing(scoped: str, digest: str | None) -> Response | None:
        rec = store.by_key(scoped)
        if rec is None or rec.state in ("failed", "cancelled"):
            return None  # a final failure is not a result: the same content again is a new job
        if digest and digest != rec.archive_sha256:
            raise Refusal(409, f"Idempotency-Key {scoped.split('/', 1)[1]} belongs to job {rec.id}, submitted with "
                               "other inputs; a new job needs a new key")
        return json_response(SubmitResponse(job=job_or_404(rec.id), created=False), 200)

    def _check_quota(owner: str) -> None:
        active = sum(1 for r in store.all() if r.owner == owner and not r.done)
        if active >= settings.max_active_per_key:
            raise Refusal(429, f"key {owner!r} has {active} active jobs, its quota (--max-active-per-key "
                               f"{settings.max_active_per_key}); waiting for one to finish",
                          headers={"Retry-After": str(QUOTA_RETRY_AFTER_S)})

    def _cached(content: str) -> JobRecord | None:
        return next((r for r in store.all() if r.content_sha256 == content and r.state == "succeeded"
                     and all((store.dir(r.id) / OUT / n).is_file() for n in r.outputs)), None)

    def _from_cache(rec: JobRecord, cached: JobRecord) -> JobRecord:
        out = store.dir(rec.id) / OUT
        out.mkdir(parents=True)
        for name in cached.outputs:
            shutil.copyfile(store.dir(cached.id) / OUT / name, out / name)
        shutil.rmtree(store.dir(rec.id) / WORK, ignore_errors=True)
        (store.dir(rec.id) / LOG).write_text(f"answered from the cache: job {cached.id} had the same content\n")
        now = utcnow()
        return rec.model_copy(update={"state": "succeeded", "started": now, "finished": now, "outputs":
                                      dict(cached.outputs), "cached_from": cached.id,
                                      "message": f"answered from the cache (job {cached.id})"})

    def _limits() -> ExtractLimits:
        return ExtractLimits(max_members=settings.max_members, max_bytes=settings.max_extract_bytes)

    def _check_spec(work: Path, kind: str) -> KernelJobSpec | BuildJobSpec:
        try:
            spec = TypeAdapter(JobSpec).validate_json((work / JOB_SPEC).read_bytes())
        except FileNotFoundError:
            raise Refusal(400, f"archive refused: it holds no {JOB_SPEC}") from None
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ())) or "<root>"
            raise Refusal(400, f"archive refused: {JOB_SPEC} is not a valid job spec (at {where}: "
                               f"{first.get('msg')})") from None
        if spec.kind != kind:
            raise Refusal(400, f"archive refused: {JOB_SPEC} describes a {spec.kind} job, sent to the {kind} route")
        rel, digest = ((spec.reference, spec.reference_sha256) if isinstance(spec, KernelJobSpec)
                       else (spec.source, spec.source_sha256))
        if not (work / rel).is_file():
            raise Refusal(400, f"archive refused: {JOB_SPEC} names {rel}, which the archive does not hold")
        if sha256_file(work / rel) != digest:
            raise Refusal(400, f"archive refused: {rel} does not match its sha256 in {JOB_SPEC}")
        if spec.arch:
            _parse_arch(spec.arch)
        return spec

    def _generator(name: str | None) -> str:
        if not settings.generators:
            raise Refusal(400, "this gaia service offers no kernel generator (start it with --generator NAME)")
        name = name or settings.generators[0]
        if name not in settings.generators:
            raise Refusal(400, f"this gaia service does not offer generator {name!r}; it offers "
                               f"{', '.join(settings.generators)}")
        return name

    def _builder() -> str:
        if not settings.builder:
            raise Refusal(400, "this gaia service builds no plugins (start it with --builder NAME)")
        return settings.builder

    @app.get(f"{API}/jobs", response_model=JobList, tags=["jobs"])
    def list_jobs(key: str = Depends(caller), limit: int = Query(100, ge=1, le=10_000)) -> Response:
        """The caller's jobs, newest first."""
        return json_response(JobList(jobs=[job_or_404(r.id) for r in store.all() if r.owner == key][:limit]))

    @app.get(f"{API}/jobs/{{job_id}}/files/{{name}}", tags=["jobs"], dependencies=[Depends(caller)],
             responses={200: {"content": {"application/octet-stream": {}}, "description": "the result file"},
                        404: {"model": ErrorBody}, 409: {"model": ErrorBody}})
    def job_file(job_id: str, name: str) -> Response:
        """A succeeded job's result: ``module_source.py`` / ``report.json``, or ``plugin.so`` / ``description.json``."""
        rec = job_or_404(job_id)
        if name not in RESULT_FILES[rec.kind]:
            raise Refusal(404, f"a {rec.kind} job has no file {name!r}; it has {', '.join(RESULT_FILES[rec.kind])}")
        if rec.state != "succeeded" or name not in rec.outputs:
            why = f" ({rec.error})" if rec.error else ""
            raise Refusal(409, f"job {job_id} is {rec.state}: it has no results yet{why}", exit_code=3)
        path = store.dir(job_id) / OUT / name
        if not path.is_file():
            raise Refusal(404, f"{name} of job {job_id} is gone from the service's disk", exit_code=3)
        return FileResponse(path, media_type="application/octet-stream", filename=name,
                            headers={FILE_SHA_HEADER: rec.outputs[name]})

    @app.post(f"{API}/jobs/{{job_id}}/cancel", response_model=JobRecord, tags=["jobs"],
              dependencies=[Depends(caller)], responses={404: {"model": ErrorBody}})
    def cancel(job_id: str) -> Response:
        """Cancel a queued or running job (a final one is left as it is)."""
        job_or_404(job_id)
        dispatcher.cancel(job_id)
        return json_response(job_or_404(job_id))

    return app


def _parse_arch(arch: str) -> ArchSpec:
    try:
        return ArchSpec.parse(arch)
    except ValueError as e:
        raise Refusal(400, f"arch {arch!r}: {e}") from None


__all__ = ["MB", "create_app"]
