"""One job's run: the generator or the builder it names, called as the core would call it, in a folder.

The same code runs a job in a child process of the service (``python -m ytk_backend_gaia.runner``)
and inside a Ray task on any node of a cluster (:mod:`.dispatch`). A job's folder holds ``work/``
(the unpacked archive), ``out/`` (its results, under the names the API serves) and ``log.txt``.
Whatever the backend raises becomes the job's failure, never the service's.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

from pydantic import TypeAdapter

from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import StageError

from .protocol import JOB_SPEC, BuildJobSpec, JobOutcome, JobSpec, KernelJobSpec

WORK, OUT, LOG, RESULT = "work", "out", "log.txt", "result.json"
#: how often a generator that answers ``running`` is asked again
FETCH_EVERY_S = 2.0


class JobLog:
    """A :class:`~ytk_hookspecs.context.StageLogger` writing the job's log, one line per event."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def _line(self, level: str, event: str, kw: dict[str, Any]) -> None:
        extra = "".join(f" {k}={v}" for k, v in kw.items())
        self.stream.write(f"{time.strftime('%H:%M:%S')} {level:<7} {event}{extra}\n")
        self.stream.flush()

    def debug(self, event: str, **kw: Any) -> None:
        self._line("debug", event, kw)

    def info(self, event: str, **kw: Any) -> None:
        self._line("info", event, kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._line("warning", event, kw)

    def error(self, event: str, **kw: Any) -> None:
        self._line("error", event, kw)


def read_spec(work: Path) -> KernelJobSpec | BuildJobSpec:
    return TypeAdapter(JobSpec).validate_json((work / JOB_SPEC).read_text())


def load_backend(name: str) -> Any:
    """The installed backend ``name``, loaded as the core loads it; a missing one is the job's failure."""
    from ytk_hookspecs.loader import PluginLoader

    loader = PluginLoader()
    loader.add_entry_points()
    loader.collect()
    found = loader.get(name)
    if found is None:
        raise StageError(f"backend {name!r} is not installed on the gaia service")
    return found


def run_job(job_dir: Path, backend: str, log: IO[str]) -> JobOutcome:
    """Run the job in ``job_dir`` with ``backend``; its results land in ``job_dir/out``."""
    work, out = job_dir / WORK, job_dir / OUT
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ctx = StageContext(log=JobLog(log), workdir=job_dir / "scratch", run_id=job_dir.name)
    try:
        spec = read_spec(work)
        impl = load_backend(backend).impl
        ctx.log.info(f"{spec.kind} job starting", backend=backend)
        if isinstance(spec, KernelJobSpec):
            outputs = _generate(impl, spec, work, out, ctx)
        else:
            outputs = _build(impl, spec, work, out, ctx)
    except StageError as e:
        ctx.log.error(f"failed: {e}")
        return JobOutcome(state="failed", error=_local_paths_out(str(e), job_dir), exit_code=e.exit_code)
    except Exception as e:  # noqa: BLE001  -- a bug in a backend is its job's failure, never the service's
        traceback.print_exc(file=log)
        first = (str(e).strip().splitlines() or [""])[0][:300]
        return JobOutcome(state="failed", exit_code=1,
                          error=f"internal error in backend {backend!r} on the gaia service: {type(e).__name__}: "
                                f"{_local_paths_out(first, job_dir)} (the job's log has the traceback)")
    from ytk_hookspecs.models import sha256_file

    ctx.log.info("job succeeded")
    return JobOutcome(state="succeeded", outputs={name: sha256_file(out / name) for name in outputs})


def _generate(impl: Any, spec: KernelJobSpec, work: Path, out: Path, ctx: StageContext) -> list[str]:
    from ytk_hookspecs.contract import check_meta_against_candidate, check_source
    from ytk_hookspecs.kernel_source import KernelSource, KernelSourceError, report_path
    from ytk_hookspecs.models import KernelGenRequest, KernelGenResult

    source = out / "region.module_source.py"  # the name the generator writes; served as module_source.py
    req = KernelGenRequest(reference=(work / spec.reference).resolve(), gpu=spec.gpu, config=spec.config,
                           deployment_target=spec.deployment_target, reoptimize=spec.reoptimize,
                           output=source.resolve(), candidate=spec.candidate, arch=spec.arch,
                           precision=spec.precision, plugin_name=spec.plugin_name)
    res = impl.submit(req, ctx)
    while isinstance(res, KernelGenResult) and res.status == "running":
        time.sleep(FETCH_EVERY_S)
        res = impl.fetch(res.job_id, source.resolve(), ctx)
    if not isinstance(res, KernelGenResult):
        raise StageError(f"the generator returned {type(res).__name__}, not a KernelGenResult")
    if res.status == "failed":
        raise StageError(f"kernel generation failed (job {res.job_id}): {res.message}")
    src_path, rep_path = Path(res.source or source), Path(res.report or report_path(source))
    try:
        src = KernelSource.read(src_path)
    except KernelSourceError as e:
        raise StageError(f"the generator's source is not a valid kernel source bundle: {e}") from None
    rep = check_source(src, "module_source.py")
    if spec.candidate is not None:
        rep.extend(check_meta_against_candidate(src.meta, spec.candidate, spec.precision))
    if not rep.ok:
        raise StageError("the generated kernel breaks its region's contract:\n  - " + "\n  - ".join(rep.errors))
    shutil.move(str(src_path), out / "module_source.py")
    shutil.move(str(rep_path), out / "report.json")
    return ["module_source.py", "report.json"]


def _build(impl: Any, spec: BuildJobSpec, work: Path, out: Path, ctx: StageContext) -> list[str]:
    from ytk_hookspecs.models import BuildRequest
    from ytk_hookspecs.plugin_info import PluginInfoError, read_plugin_description

    so = out / "plugin.so"
    req = BuildRequest(source=(work / spec.source).resolve(), plugin_name=spec.plugin_name, arch=spec.arch,
                       output=so.resolve(), engine_api=spec.engine_api)
    res = impl.build_plugin(req, ctx)
    built = Path(getattr(res, "so_path", so))
    if built.resolve() != so.resolve() and built.is_file():
        shutil.move(str(built), so)
    try:
        desc = read_plugin_description(so)  # what the .so says of itself, not what the builder claims
    except (PluginInfoError, OSError) as e:
        raise StageError(f"the builder's plugin has no readable self-description: {e}") from None
    desc.write(out / "description.json")
    return ["plugin.so", "description.json"]


def _local_paths_out(text: str, job_dir: Path) -> str:
    """The service's job folder means nothing to the client: paths in a message are the archive's."""
    from ytk_hookspecs.service.http import local_paths_out

    return local_paths_out(text, job_dir / WORK, job_dir / OUT, job_dir)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ytk_backend_gaia.runner")
    ap.add_argument("job_dir", type=Path)
    ap.add_argument("--backend", required=True)
    ap.add_argument("--parent", type=int, required=True)
    args = ap.parse_args(argv)
    from ytk_hookspecs.service.queue import die_with_parent

    die_with_parent(args.parent)
    outcome = run_job(args.job_dir, args.backend, sys.stdout)
    outcome.write(args.job_dir / RESULT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
