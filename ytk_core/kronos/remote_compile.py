"""``ytk embedded compile --worker URL``: the compile runs on a Kronos worker on the target.

The inputs are checked here first exactly as a local compile checks them (a plugin that does not
match its node costs no upload), packed into one archive and submitted under an idempotency key;
the job is polled by id with a progress display; the bundle comes back, is checked member by member
and against what was sent, and lands at ``-o`` atomically. Killed at any point (this process or the
worker), the same command again resumes the job, or restarts it when the worker lost it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from ytk_hookspecs.models.base import replace_file
from ytk_hookspecs.models import Versioned, sha256_file
from ytk_hookspecs.models.base import file_mode

from ..errors import BackendError, UsageError, YtkError
from ..runtime import runtime
from .client import TOKEN_ENV, KronosClient, WorkerUnreachable
from .jobpack import pack_job
from .protocol import JobRecord, JobSpec, WorkerInfo

#: ``--worker local``: compile here even when ytk.toml names a worker
LOCAL = "local"
POLL_S = (0.25, 2.0)  # first and longest wait between two polls
#: how many times one command submits again a job its worker interrupted
MAX_RESTARTS = 2


class RemoteJobRef(Versioned):
    """``.<bundle>.kronos-job.json`` beside the output while a job is out: what a re-run resumes."""

    worker: str
    job_id: str
    idempotency_key: str
    spec_sha256: str


def resolve_worker(flag: str | None) -> str | None:
    """The worker a compile goes to: ``--worker`` (``local``: none), else ``[workers] kronos`` in ytk.toml."""
    if flag is not None and not flag.strip():  # `--worker "$UNSET"` in a script: never a quiet local compile
        raise UsageError("--worker '': expected a worker's URL (e.g. http://target:8470) or `local`")
    if flag:
        return None if flag == LOCAL else flag
    url = (runtime().config.get("workers") or {}).get("kronos")
    return str(url) if url else None


def resolve_token() -> str | None:
    """``YTK_KRONOS_TOKEN``, else ``[workers] kronos_token`` in ytk.toml."""
    return os.environ.get(TOKEN_ENV) or (runtime().config.get("workers") or {}).get("kronos_token") or None


def worker_info(url: str) -> WorkerInfo:
    """Ask the worker what it runs (its engine, its target); a bad token or URL is one error line."""
    with KronosClient(url, resolve_token()) as client:
        return client.info()


def compile_on_worker(url: str, arch: str, precision: str, onnx: Path, npz: Path, output: Path,
                      custom_plugins: list[Path], iterations: int, warmup: int, engine: str | None,
                      allow_unused_plugin: bool, allow_unverified: bool):  # type: ignore[no-untyped-def]
    """Compile on the worker at ``url``; returns the :class:`~ytk_core.stages.compile.CompileOutcome` a local
    compile would have."""
    from ytk_hookspecs.nodes import custom_nodes, match_plugins
    from ..stages import compile as local
    from ..stages.inputs import existing_file, output_file, parse_arch, parse_precision

    rt = runtime()
    prec = parse_precision(precision)
    if iterations < 1:
        raise UsageError("--iterations must be at least 1")
    with KronosClient(url, resolve_token()) as client:
        client.on_retry(rt.log.warning)  # a worker that is down says so while it is retried
        info = client.info()
        if engine and engine != info.engine:
            raise UsageError(f"--engine {engine}: the kronos worker at {url} runs the {info.engine} engine; start it "
                             f"with `ytk worker kronos --engine {engine}` or drop --engine")
        if not info.engine_available:
            raise BackendError(f"the kronos worker at {url} cannot run its {info.engine} engine: {info.engine_reason}")
        target = parse_arch(info.arch if arch == "auto" else arch)
        onnx = existing_file(onnx, "--onnx", "Run `ytk embedded prepare` first.")
        npz = existing_file(npz, "--npz", "Run `ytk embedded prepare` first.")
        output = output_file(output, "-o/--output")
        local._check_inputs(onnx, npz)
        plugins = local._read_plugins(list(custom_plugins or []))
        nodes = custom_nodes(onnx)
        match = match_plugins(nodes, plugins, prec, sm=target.sm, simulated_engine=info.simulated)
        if match.errors:
            raise YtkError(f"{len(match.errors)} plugin problem(s) found before building the engine (nothing was "
                           "compiled):\n  - " + "\n  - ".join(match.errors))
        if match.unused and not allow_unused_plugin:
            raise UsageError(local._unused_message(match.unused, nodes, onnx))
        plugin_nodes: dict[str, list[str]] = {}
        for node_name, pf in match.matches.items():
            plugin_nodes.setdefault(pf.description.name, []).append(node_name)
        spec = JobSpec(arch=target.spec, precision=prec, onnx_sha256=sha256_file(onnx), npz_sha256=sha256_file(npz),
                       iterations=iterations, warmup=warmup, allow_unused_plugin=allow_unused_plugin,
                       allow_unverified=allow_unverified, engine=info.engine, output_name=output.name)
        job = _run_job(client, info, spec, onnx, npz, [pf.path for pf in plugins],
                       [pf.description.name for pf in plugins], output)
        bundle = _fetch_bundle(client, job, spec, output, info, onnx, [pf.path for pf in plugins])
    for w in job.warnings:
        rt.log.warning(f"kronos worker: {w}")
    return local.CompileOutcome(bundle=output, manifest=bundle.manifest, profile=bundle.profile,
                                benchmark=bundle.benchmark, warnings=list(job.warnings), plugin_nodes=plugin_nodes,
                                engine_selection=f"engine={info.engine} (kronos worker {url}, {info.device})")


def _ref_path(output: Path) -> Path:
    return output.with_name(f".{output.name}.kronos-job.json")


def _run_job(client: KronosClient, info: WorkerInfo, spec: JobSpec, onnx: Path, npz: Path, plugins: list[Path],
             names: list[str], output: Path) -> JobRecord:
    """Submit (or resume) the job and poll it to its end; a job that did not succeed is one error line. A job
    the worker interrupted (it was stopped or restarted while the job ran) is submitted again under the same key,
    which restarts it, up to :data:`MAX_RESTARTS` times; the submit waits out a restarting worker for the retry
    budget."""
    for restarts in range(MAX_RESTARTS + 1):
        job = _submit_and_follow(client, info, spec, onnx, npz, plugins, names, output)
        if job.state != "interrupted" or restarts == MAX_RESTARTS:
            break
        runtime().log.warning(f"kronos job {job.id} on {client.url} was interrupted "
                              f"({job.message or 'the worker stopped'}); submitting it again")
    if job.state == "succeeded":
        return job
    ref_file = _ref_path(output)
    if job.state == "failed":
        ref_file.unlink(missing_ok=True)  # a final answer: the same command again is a new job
        raise YtkError(f"the compile on the kronos worker at {client.url} failed (job {job.id}): {job.error}",
                       exit_code=job.exit_code or 3)
    raise BackendError(f"kronos job {job.id} on {client.url} was interrupted {MAX_RESTARTS + 1} times, last: "
                       f"{job.message or 'the worker stopped'}; run the same command again to restart it")


def _submit_and_follow(client: KronosClient, info: WorkerInfo, spec: JobSpec, onnx: Path, npz: Path,
                       plugins: list[Path], names: list[str], output: Path) -> JobRecord:
    rt = runtime()
    archive = output.with_name(f".{output.name}.kronos-{rt.run_id}.tmp.tgz")
    try:
        with rt.context(None, "kronos").progress(f"packing the job for {client.url}"):
            spec = pack_job(archive, spec, onnx, npz, plugins, names, simulated=info.simulated)
        size = archive.stat().st_size
        if size > info.max_upload_bytes:
            raise UsageError(f"the job archive is {_mb(size)} (the ONNX, npz and plugins), over the kronos worker's "
                             f"{_mb(info.max_upload_bytes)} upload limit; start the worker with a larger "
                             "--max-upload-mb")
        spec_sha = _spec_sha(spec)
        ref_file = _ref_path(output)
        ref = _read_ref(ref_file)
        # the key means something only to the worker that holds its job: another worker starts a new one
        resumed = ref is not None and ref.spec_sha256 == spec_sha
        key = ref.idempotency_key if ref is not None and resumed else uuid.uuid4().hex
        RemoteJobRef(worker=client.url, job_id=ref.job_id if ref and resumed else "", idempotency_key=key,
                     spec_sha256=spec_sha).write(ref_file)
        with rt.context(None, "kronos").progress(f"uploading {_mb(size)} to {client.url}") as task:
            client.on_retry(lambda m: task.update(description=m))
            try:
                sub = client.submit(archive, key)
            except WorkerUnreachable:
                raise  # the job may exist: the same command again asks with the same key
            except YtkError:
                ref_file.unlink(missing_ok=True)  # refused: no job was made
                raise
    finally:
        archive.unlink(missing_ok=True)
    job = sub.job
    RemoteJobRef(worker=client.url, job_id=job.id, idempotency_key=key, spec_sha256=spec_sha).write(ref_file)
    how = ("restarted (it had been interrupted)" if sub.restarted else "submitted" if sub.created
           else f"resumed ({job.state})")
    rt.log.info(f"kronos job {job.id} {how}", worker=client.url, engine=info.engine)
    return _poll(client, job)


def _poll(client: KronosClient, job: JobRecord) -> JobRecord:
    from ytk_hookspecs.service.http import follow_job

    rt = runtime()
    log = rt.context(None, "kronos").log
    label = f"kronos job {job.id} on {client.url}"
    with rt.context(None, "kronos").progress(label) as task:
        client.on_retry(lambda m: task.update(description=f"{label}: {m}"))
        try:
            return follow_job(client, job, label, task, lambda line: log.debug(f"worker: {line}"),
                              lambda j, _last: j.message, POLL_S)
        except WorkerUnreachable as e:
            raise BackendError(f"{e}, while waiting for job {job.id}; once the worker is back, run the same "
                               "command again: it resumes the job, or restarts it if the worker lost it") from None


def _fetch_bundle(client: KronosClient, job: JobRecord, spec: JobSpec, output: Path, info: WorkerInfo, onnx: Path,
                  plugins: list[Path]):  # type: ignore[no-untyped-def]
    """Download the bundle beside ``output``, check it as any bundle and against what was sent, move it in."""
    from ytk_hookspecs.models import ArtifactError

    from ..bundle import OUTPUTS, EngineBundle
    from ..stages.compile import _check_outputs

    rt = runtime()
    tmp = output.with_name(f".{output.name}.kronos-{rt.run_id}.tmp")
    try:
        with rt.context(None, "kronos").progress(f"downloading the bundle of job {job.id}"):
            digest = client.download_bundle(job.id, tmp)
        if job.bundle_sha256 and digest != job.bundle_sha256:
            raise BackendError(f"the bundle of kronos job {job.id} does not match the sha256 the worker recorded; "
                               "run the command again")
        try:
            bundle = EngineBundle.open(tmp)
        except ArtifactError as e:
            raise BackendError(f"kronos job {job.id} returned a bad engine bundle: {e}") from None
        m = bundle.manifest
        want = {"arch": spec.arch, "precision": spec.precision, "onnx_sha256": spec.onnx_sha256,
                "npz_sha256": spec.npz_sha256, "simulated": info.simulated, "engine_backend": info.engine}
        wrong = [f"{k} {getattr(m, k)!r} (sent {v!r})" for k, v in want.items() if getattr(m, k) != v]
        if sorted(p.sha256 for p in m.plugins) != sorted(sha256_file(p) for p in plugins):
            wrong.append("its plugins' sha256 differ from the .so files sent")
        if wrong:
            raise BackendError(f"kronos job {job.id} returned a bundle that is not of this compile: {'; '.join(wrong)}")
        bundle.extract(OUTPUTS, tmp.with_name(tmp.name + ".outputs.npz"))
        try:
            _check_outputs(onnx, tmp.with_name(tmp.name + ".outputs.npz"), info.engine)
        finally:
            tmp.with_name(tmp.name + ".outputs.npz").unlink(missing_ok=True)
        os.chmod(tmp, file_mode())  # the download is 0600 like any temp file; a bundle is an ordinary file
        replace_file(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    _ref_path(output).unlink(missing_ok=True)
    bundle.path = output
    return bundle


def _read_ref(path: Path) -> RemoteJobRef | None:
    if not path.is_file():
        return None
    try:
        return RemoteJobRef.read(path)
    except Exception:  # a damaged reference is no reference: the job starts afresh
        return None


def _spec_sha(spec: JobSpec) -> str:
    import hashlib

    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n} bytes"
