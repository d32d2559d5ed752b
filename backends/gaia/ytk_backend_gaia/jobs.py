"""The client's side of a job: check it, pack it, submit it under its content hash, follow it with a
progress line, and bring its results back all-or-nothing.

A job outlives its client: killed while a job runs, ``ytk kernelgen get JOB -o X --kernelgen gaia``
follows the same job to its end and writes its results (the job id is logged at submit), and running
the same ``kernelgen compile`` again finds the job by its content hash instead of starting another.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ytk_hookspecs import StageContext
from ytk_hookspecs.kernel_source import report_path
from ytk_hookspecs.models import (CORE_CONFIG_KEYS, ArchSpec, ArchSpecError, BuildRequest, BuildResult,
                                  KernelGenRequest, KernelGenResult, gpu_sm, sha256_file)
from ytk_hookspecs.models.base import file_mode
from ytk_hookspecs.service.archive import write_archive
from ytk_hookspecs.service.http import ServiceError, follow_job
from ytk_hookspecs.service.protocol import JOB_ID

from .client import GaiaClient
from .config import require_settings
from .errors import GaiaJobFailed, GaiaUsageError
from .protocol import JOB_SPEC, BackendStatus, BuildJobSpec, JobRecord, KernelJobSpec, ServiceInfo, content_hash

POLL_S = (0.2, 2.0)  # first and longest wait between two polls
DEPLOYMENT_TARGET = ("kernelgen with the gaia backend needs --config deployment_target=tensorrt: the kernel must be "
                     "destined for a TensorRT plugin to become a .so, and a job is not cheap, so none was sent")


# -- kernel generation ------------------------------------------------------------------------------
def generate(request: KernelGenRequest, ctx: StageContext) -> KernelGenResult:
    """``submit``: one kernel generation job on the service, followed to its end."""
    settings = require_settings(ctx.config)
    target = check_kernel_target(request)
    with GaiaClient(settings) as client:
        client.on_retry(ctx.log.warning)
        info = client.info(target.spec if target else None)
        gen = _generator(client, info, settings.generator, request)
        spec = KernelJobSpec(generator=gen.name, reference_sha256=sha256_file(request.reference), gpu=request.gpu,
                             arch=request.arch, precision=request.precision, config=dict(request.config),
                             deployment_target=request.deployment_target, reoptimize=request.reoptimize,
                             plugin_name=request.plugin_name, candidate=request.candidate)
        job = _submit(client, info, ctx, spec, [(spec.reference, Path(request.reference))], request.plugin_name)
        ctx.log.info(f"gaia job {job.id}: if this process stops, its result stays on the service: "
                     f"ytk kernelgen get {job.id} -o {request.output} --kernelgen gaia")
        return _kernel_result(client, job, Path(request.output), ctx)


def fetch(job_id: str, output: Path, ctx: StageContext) -> KernelGenResult | None:
    """``ytk kernelgen get JOB``: follow a job the service knows to its end and write its results."""
    if not JOB_ID.fullmatch(job_id):
        return None
    settings = require_settings(ctx.config)
    with GaiaClient(settings) as client:
        client.on_retry(ctx.log.warning)
        try:
            job = client.job(job_id)
        except ServiceError as e:
            if e.status == 404 and e.kind == "refused":  # the service's own "no such job"
                return None
            raise
        if job.kind != "kernelgen":
            raise GaiaUsageError(f"gaia job {job_id} is a plugin build, not a kernel generation job")
        return _kernel_result(client, job, Path(output), ctx)


def check_kernel_target(request: KernelGenRequest) -> ArchSpec | None:
    """What is checked before a job is sent: a TensorRT kernel, an arch that parses, a GPU of the arch's SM."""
    if request.deployment_target != "tensorrt":
        raise GaiaUsageError(DEPLOYMENT_TARGET)
    if not request.arch:
        return None
    try:
        target = ArchSpec.parse(request.arch)
    except ArchSpecError as e:
        raise GaiaUsageError(f"-a {request.arch}: {e}") from None
    sm = gpu_sm(request.gpu)
    if sm is not None and sm != target.sm:
        raise GaiaUsageError(f"-g {request.gpu} is an sm_{sm} GPU but the target {target.spec} is sm_{target.sm}: a "
                             "kernel is scored on the GPU it will run on")
    return target


def _generator(client: GaiaClient, info: ServiceInfo, wanted: str | None, request: KernelGenRequest) -> BackendStatus:
    name = wanted or info.default_generator
    gen = next((g for g in info.generators if g.name == name), None)
    if gen is None:
        offered = ", ".join(g.name for g in info.generators) or "none"
        raise GaiaUsageError(f"the gaia service at {client.url} offers no generator {name!r} (it offers {offered}); "
                             "set [backends.gaia] generator in ytk.toml to one of them")
    if not gen.available:
        where = f" for {info.arch}" if info.arch else ""
        raise GaiaJobFailed(f"the gaia service at {client.url} cannot run generator {gen.name}{where}: {gen.reason}")
    unknown = sorted(k for k in request.config if k not in CORE_CONFIG_KEYS and k not in gen.config_keys)
    if unknown:
        raise GaiaUsageError(f"--config {', '.join(unknown)}: not a key the service's generator {gen.name} reads "
                             f"(it reads: {', '.join(sorted(gen.config_keys)) or 'none'})")
    return gen


def _kernel_result(client: GaiaClient, job: JobRecord, output: Path, ctx: StageContext) -> KernelGenResult:
    job = follow(client, job, ctx, output)
    if job.state != "succeeded":
        return KernelGenResult(job_id=job.id, status="failed", message=_why(job, client))
    report = report_path(output)
    with _landing(output, ctx) as land:
        land(client, job, "report.json", report)
        land(client, job, "module_source.py", output)
    how = f"answered from the cache of job {job.cached_from}" if job.cached_from else f"generated by {job.backend}"
    return KernelGenResult(job_id=job.id, status="done", source=output, report=report,
                           message=f"{how} on the gaia service at {client.url}")


# -- plugin builds ----------------------------------------------------------------------------------
def build(request: BuildRequest, ctx: StageContext) -> BuildResult:
    """``build_plugin``: one build job on the service; the .so lands at ``request.output`` once checked."""
    from ytk_hookspecs.plugin_info import PluginInfoError, read_plugin_description
    from ytk_hookspecs.models import PluginDescription

    t0 = time.perf_counter()
    settings = require_settings(ctx.config)
    try:
        target = ArchSpec.parse(request.arch)
    except ArchSpecError as e:
        raise GaiaUsageError(f"-a {request.arch}: {e}") from None
    output = Path(request.output)
    with GaiaClient(settings) as client:
        client.on_retry(ctx.log.warning)
        info = client.info(target.spec)
        if info.builder is None:
            raise GaiaJobFailed(f"the gaia service at {client.url} builds no plugins (started with --builder none)")
        if not info.builder.available:
            raise GaiaJobFailed(f"the gaia service at {client.url} cannot build for {target.spec} with its "
                                f"{info.builder.name} builder: {info.builder.reason}")
        spec = BuildJobSpec(source_sha256=sha256_file(request.source), plugin_name=request.plugin_name,
                            arch=target.spec, engine_api=request.engine_api)
        job = _submit(client, info, ctx, spec, [(spec.source, Path(request.source))], request.plugin_name)
        job = follow(client, job, ctx)
        if job.state != "succeeded":
            raise GaiaJobFailed(f"the plugin build on the gaia service at {client.url} failed (job {job.id}): "
                                f"{_why(job, client)}", exit_code=job.exit_code or 3)
        described = output.with_name(f".{output.name}.gaia-{uuid.uuid4().hex[:8]}.description.json")
        try:
            if client.download_file(job.id, "description.json", described) != job.outputs.get("description.json"):
                raise GaiaJobFailed(f"description.json of gaia job {job.id} does not match the sha256 the service "
                                    "recorded; run the command again")
            desc = PluginDescription.read(described)
        finally:
            described.unlink(missing_ok=True)
        with _landing(output, ctx) as land:
            land(client, job, "plugin.so", output, executable=True, check=lambda so: _same_description(
                so, desc, job, read_plugin_description, PluginInfoError))
        log = client.log(job.id).text
    return BuildResult(so_path=output, description=desc, log=log[-20000:], wall_s=time.perf_counter() - t0)


def _same_description(so: Path, said: Any, job: JobRecord, read: Any, error: Any) -> None:
    try:
        got = read(so)
    except error as e:
        raise GaiaJobFailed(f"the plugin of gaia job {job.id} has no readable self-description: {e}") from None
    if got != said:
        raise GaiaJobFailed(f"the plugin of gaia job {job.id} does not describe itself as the service said it would")


# -- shared -----------------------------------------------------------------------------------------
def _submit(client: GaiaClient, info: ServiceInfo, ctx: StageContext, spec: KernelJobSpec | BuildJobSpec,
            inputs: list[tuple[str, Path]], name: str | None) -> JobRecord:
    """Pack and submit; the idempotency key is the job's content hash, so the same job is never sent twice."""
    scratch = Path(ctx.workdir) / "gaia"
    scratch.mkdir(parents=True, exist_ok=True)
    archive = scratch / f"{spec.kind}-{uuid.uuid4().hex}.tgz"
    try:
        write_archive(archive, [(JOB_SPEC, spec.model_dump_json(indent=2).encode()), *inputs])
        size = archive.stat().st_size
        if size > info.max_upload_bytes:
            raise GaiaUsageError(f"the job is {size} bytes packed, over the gaia service's "
                                 f"{info.max_upload_bytes}-byte upload limit; nothing was sent (the service's "
                                 "--max-upload-mb sets it)")
        key = f"{spec.kind}-{content_hash(spec)[:56]}"
        what = f"{spec.kind} job" + (f" for {name}" if name else "")
        with ctx.progress(f"sending the {what} to {client.url}") as task:
            client.on_retry(lambda m: task.update(description=m))
            sub = client.submit(spec.kind, archive, key)
    finally:
        archive.unlink(missing_ok=True)
    job = sub.job
    how = ("answered from the service's cache" if sub.cached else "submitted" if sub.created
           else f"found running already ({job.state})" if not job.done else f"found ({job.state})")
    ctx.log.info(f"gaia {spec.kind} job {job.id} {how}", service=client.url, runs=job.backend)
    return job


def follow(client: GaiaClient, job: JobRecord, ctx: StageContext, output: Path | None = None) -> JobRecord:
    """Poll the job to its end, its state and its log's latest line on the progress line (``output``: where a
    kernel job's results go, for the command that picks it up if the service cannot be reached)."""
    label = f"gaia {job.kind} job {job.id[:12]} ({job.backend})"
    with ctx.progress(label) as task:
        client.on_retry(lambda m: task.update(description=f"{label}: {m}"))
        try:
            return follow_job(client, job, label, task, lambda line: ctx.log.debug(f"gaia: {line}"),
                              lambda j, last: last[:120] if last and not j.done else "", POLL_S)
        except ServiceError as e:
            resume = (f"ytk kernelgen get {job.id} -o {output or '<X>.module_source.py'} --kernelgen gaia"
                      if job.kind == "kernelgen" else "the same build-plugin command")
            raise ServiceError(f"{e}, while following job {job.id}; the job stays on the service (one that was "
                               f"stopped runs again when it restarts): once it is reachable, {resume} picks it up",
                               e.kind, e.exit_code, e.status) from None


def _why(job: JobRecord, client: GaiaClient) -> str:
    if job.state == "cancelled":
        return f"job {job.id} was cancelled on the gaia service at {client.url}"
    return job.error or job.message or job.state


@contextmanager
def _landing(output: Path, ctx: StageContext) -> Iterator[Any]:
    """Download a job's files beside their destinations, then move them all in, or none of them."""
    staged: list[tuple[Path, Path]] = []

    def land(client: GaiaClient, job: JobRecord, name: str, dest: Path, executable: bool = False,
             check: Any = None) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.gaia-{uuid.uuid4().hex[:8]}.tmp")
        staged.append((tmp, dest))
        digest = client.download_file(job.id, name, tmp)
        if job.outputs.get(name) and digest != job.outputs[name]:
            raise GaiaJobFailed(f"{name} of gaia job {job.id} does not match the sha256 the service recorded; run "
                                "the command again")
        if check is not None:
            check(tmp)
        os.chmod(tmp, file_mode(executable))

    try:
        yield land
        for tmp, dest in staged:  # every file is here and checked: only renames are left
            os.replace(tmp, dest)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
