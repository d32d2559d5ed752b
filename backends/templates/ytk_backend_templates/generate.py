"""One kernel generation job: recognise, emit variants, build, score, write the winner + report.

Each job works in its own directory ``<workdir>/templates/<job_id>/`` so that several jobs (the
autoloop runs candidates concurrently) never share scratch files; only the build cache is shared,
and it is written atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ytk_hookspecs.candidates import captured_io_npz, request_candidate
from ytk_hookspecs.errors import StageError, UnsupportedRegion
from ytk_hookspecs.kernel_source import KernelSource, report_path
from ytk_hookspecs.models import (ArchSpec, ArchSpecError, Candidate, KernelGenRequest,
                                  KernelGenResult, KernelPerf, KernelReport, PluginMeta)
from ytk_hookspecs.pt2 import load_exported

from .build import build_variants, cache_dir, compile_cached, winner_source
from .contract import plugin_meta
from .dispatch import dispatch_variant
from .emit_common import Variant
from .regions import Region, SiteShape
from .variants import region_variants

BACKEND = "templates"


def _failed(job_id: str, message: str, report: Path | None = None) -> KernelGenResult:
    return KernelGenResult(job_id=job_id, status="failed", message=message, report=report)


@dataclass
class JobPlan:
    """What a job will build and score, decided before any GPU is touched."""

    job_id: str
    name: str
    region: Region
    shapes: list[SiteShape]
    site_index: list[int]
    meta: PluginMeta
    variants: list[Variant]
    candidate: Candidate | None
    graph_pt2: Path


def plan_job(request: KernelGenRequest, sm: int | None = None) -> JobPlan | KernelGenResult:
    """Recognise the region and emit its variants for sm ``sm`` (default: the request's arch, else
    none of the sm-specific variants); a ``failed`` result when no template fits."""
    from .recognise import load_graph, recognise, site_shape_indices, site_shapes

    target = request.deployment_target
    candidate = request_candidate(request)
    name = request.plugin_name or (candidate.name if candidate else None) or Path(request.reference).name.split(".")[0]
    job_id = f"{BACKEND}-{name}-{uuid.uuid4().hex[:8]}"
    if request.precision != "fp16":
        return _failed(job_id, f"the templates generator emits fp16 kHWC8 kernels with fp32 accumulation; "
                               f"precision {request.precision} is not supported")
    try:
        graph = load_graph(Path(request.reference))
        region = recognise(graph, candidate)
        shapes = site_shapes(graph, candidate)
    except UnsupportedRegion as e:
        return _failed(job_id, f"templates do not recognise region {name}: {e}")
    meta = plugin_meta(region, name, candidate.namespace if candidate else "yasp",
                       candidate.version if candidate else "1", candidate, deployment_target=target)
    if sm is None:
        try:
            sm = ArchSpec.parse(request.arch).sm if request.arch else 0
        except ArchSpecError:
            sm = 0  # require_gpu reports the bad spec
    limit, wide, w16 = _search(request)
    variants = region_variants(region, limit, wide=wide, sm=sm, fp16_weights=w16)
    if wide and len(variants) == len(region_variants(region, limit, sm=sm, fp16_weights=w16)):  # wide only adds
        return _failed(job_id, f"re-optimization of {name}: the templates have no wider search for "
                               f"{region.describe()} than the one that made the plugged kernel")
    return JobPlan(job_id, name, region, shapes, site_shape_indices(candidate, shapes), meta, variants, candidate,
                   Path(request.reference))


def _search(request: KernelGenRequest) -> tuple[int | None, bool, bool]:
    """The request's variant limit (``max_variants``, 0: all), whether it asks for the wide space, and
    whether variants that round the weights to fp16 may compete (``fp16_weights``, default 1)."""
    w16 = request.config.get("fp16_weights", "1")
    if w16 not in ("0", "1"):
        raise StageError(f"--config fp16_weights={w16}: use 1 (variants that hold the weights in fp16, as "
                         "TensorRT's fp16 kernels do, may win; the default) or 0 (only fp32-exact weights)")
    return (int(request.config.get("max_variants", "0")) or None, request.reoptimize is not None, w16 == "1")


def with_sm(plan: JobPlan, request: KernelGenRequest, sm: int) -> JobPlan:
    """``plan`` with the variant list for sm ``sm`` (the GPU is known only after recognition)."""
    limit, wide, w16 = _search(request)
    return replace(plan, variants=region_variants(plan.region, limit, wide=wide, sm=sm, fp16_weights=w16))


def build_job(plan: JobPlan, arch: ArchSpec, jobdir: Path, cache: Path | None, progress: Any = None) -> Any:
    """Compile every variant, and the check build of every possible winner's bundle (both cached)."""
    built = build_variants(plan.variants, plan.meta, arch, jobdir / "build", cache=cache, progress=progress)
    return built


def generate(request: KernelGenRequest, ctx: Any) -> KernelGenResult:
    """Run one job to completion (see module doc); recognition failures are a ``failed`` result."""
    from .gpu import require_gpu

    t0 = time.perf_counter()
    with ctx.progress("reading the region", total=1) as task:
        plan = plan_job(request, sm=0)
        task.advance()
    if isinstance(plan, KernelGenResult):
        return plan
    ctx.log.info("region recognised", plugin=plan.name, region=plan.region.describe(), shapes=len(plan.shapes))
    gpu = require_gpu(request.gpu, request.arch)
    arch = gpu.arch()
    plan = with_sm(plan, request, arch.sm)
    jobdir = Path(ctx.workdir) / "templates" / plan.job_id
    jobdir.mkdir(parents=True, exist_ok=True)
    with ctx.progress(f"{plan.name}: building {len(plan.variants)} variants (nvcc, sm_{arch.sm})",
                      total=len(plan.variants)) as task:
        built = build_job(plan, arch, jobdir, cache_dir(Path(ctx.workdir)), progress=task)
    # Jobs build concurrently but score one at a time: two jobs timing on one GPU would each
    # measure the other's load.
    with gpu_lock(Path(ctx.workdir) / "templates" / f"gpu{gpu.index}.lock", ctx, plan.name):
        return _score_and_write(request, ctx, plan.job_id, jobdir, plan.name, plan.region, plan.shapes,
                                plan.site_index, plan.meta, plan.variants, built, gpu, arch, graph_pt2=plan.graph_pt2,
                                t0=t0, candidate=plan.candidate)


@contextlib.contextmanager
def gpu_lock(path: Path, ctx: Any, name: str) -> Iterator[None]:
    """An exclusive lock (flock) on ``path`` while a job uses the GPU; waits for other jobs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            ctx.log.info("waiting for the GPU", plugin=name, lock=str(path))
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _score_and_write(request: KernelGenRequest, ctx: Any, job_id: str, jobdir: Path, name: str, region: Region,
                     shapes: list, site_index: list[int], meta: Any, variants: list, built: Any, gpu: Any,
                     arch: ArchSpec, graph_pt2: Path, t0: float, candidate: Candidate | None) -> KernelGenResult:
    import torch

    from .cases import ERROR_BUDGET, build_cases
    from .scoring import copy_times, pick_winner, score_variants, torch_times
    from .timing import copy_bandwidth_gbs

    from .reference import torch_region, verify_against_pt2
    from .recognise import load_graph

    device = torch.device("cuda", gpu.index)
    try:
        verify_against_pt2(region, load_exported(graph_pt2).module().to(device),
                           load_graph(graph_pt2).input_shapes, device)
    except UnsupportedRegion as e:
        return _failed(job_id, f"templates do not recognise region {name}: {e}")
    module = torch_region(region)
    io_npz = captured_io_npz(request, candidate)
    with ctx.progress(f"{name}: references ({len(shapes)} shapes)", total=1) as task:
        cases = build_cases(region, module, shapes, device, io_npz)
        copy_gbs = copy_bandwidth_gbs(device)
        task.advance()
    ctx.log.info("copy bandwidth", gbs=round(copy_gbs, 1), cases=len(cases))
    with ctx.progress(f"{name}: scoring {len(variants)} variants on {gpu.name}", total=len(variants)) as task:
        scored = score_variants(variants, built, region, shapes, cases, device, copy_gbs, gpu.l2_bytes, site_index,
                                progress=task, log=ctx.log)
    disp = dispatch_variant(scored, shapes, meta) if len(shapes) > 1 else None
    if disp is not None:
        # per-shape winners differ: build the dispatching plugin and judge it like any candidate
        with ctx.progress(f"{name}: building and scoring a per-shape dispatch ({disp.name})", total=2) as task:
            built_d = build_variants([disp], meta, arch, jobdir / "build-dispatch", cache=cache_dir(Path(ctx.workdir)))
            task.advance()
            scored += score_variants([disp], built_d, region, shapes, cases, device, copy_gbs, gpu.l2_bytes,
                                     site_index, log=ctx.log)
            task.advance()
        variants = [*variants, disp]
    with ctx.progress(f"{name}: timing the torch ops of the region and a memory pass over its bytes", total=2) as task:
        torch_shape_ms = torch_times(module, region, shapes, device, gpu.l2_bytes)
        task.advance()
        copy_shape_ms = copy_times(region, shapes, device, gpu.l2_bytes)
        task.advance()
    n_cases = len(cases)
    del cases
    winner = pick_winner(scored)
    report = KernelReport(
        plugin_name=name, backend=BACKEND, job_id=job_id, region_kind=region.describe(), measured_on=gpu.name,
        simulated=False, error_budget=ERROR_BUDGET, candidates=[s.score for s in scored],
        winner=winner.variant.name if winner else None,
        torch_ms_per_site=[torch_shape_ms[i] for i in site_index],
        floor_ms_per_site=winner.score.floor_ms_per_site if winner else [],
        copy_ms_per_site=[copy_shape_ms[i] for i in site_index],
        notes=[f"copy bandwidth measured in-process: {copy_gbs:.0f} GB/s (bytes read + written)",
               f"{len(variants)} variants; {sum(1 for s in scored if s.score.time_ms_per_site)} passed one case per "
               f"shape and were timed (CUDA-graph replays over rotating input sets >= 3x L2); the fastest were "
               f"checked on all {n_cases} cases in order of time until one passed, and each shape's fastest: "
               f"{sum(1 for s in scored if s.score.correct)} did",
               f"scored for sm_{arch.sm} with nvcc on {arch.cpu_arch}"])
    rpath = report_path(Path(request.output))
    if winner is None:
        report.write(rpath)
        reasons = "; ".join(f"{s.variant.name}: {s.score.rejected}" for s in scored[:3])
        return _failed(job_id, f"no variant of {name} passed the harness ({reasons})", rpath)
    torch_total, win_total = sum(report.torch_ms_per_site), sum(winner.score.time_ms_per_site)
    if win_total > torch_total and request.config.get("allow_slower", "0") != "1":
        report.notes.append(f"no gain: the best variant {winner.variant.name} takes {win_total:.4f} ms over the sites, "
                            f"the region's own torch ops {torch_total:.4f} ms on {gpu.name}")
        report.write(rpath)
        return _failed(job_id, f"no variant of {name} beats the region's torch ops on {gpu.name} (best "
                               f"{winner.variant.name}: {win_total * 1e3:.1f} us vs {torch_total * 1e3:.1f} us over "
                               f"{len(site_index)} site(s)); not worth plugging (--config allow_slower=1 keeps it)",
                       rpath)
    beat = request.reoptimize.kernel_ms_to_beat if request.reoptimize else None
    if beat:
        mean = win_total / max(1, len(site_index))
        if mean >= 0.97 * beat:
            report.notes.append(f"re-optimization: best {winner.variant.name} {mean * 1e3:.1f} us/site, the plugged "
                                f"kernel {beat * 1e3:.1f} us/site")
            report.write(rpath)
            return _failed(job_id, f"re-optimization of {name} found nothing faster than the plugged kernel "
                                   f"(best {winner.variant.name}: {mean * 1e3:.1f} us/site vs {beat * 1e3:.1f} "
                                   f"us/site; 3% better needed) over {len(variants)} variants", rpath)
    header, source = winner_source(winner.variant, meta)
    frac = min(1.0, winner.score.fraction_of_floor or 1e-9)
    final_meta = meta.model_copy(update={"perf": KernelPerf(
        measured_on=gpu.name, achieved_bandwidth_fraction=max(frac, 1e-9),
        time_ms_per_site=winner.score.time_ms_per_site)})
    src = KernelSource(header=header, source=source, meta=final_meta, generator=f"ytk-templates {winner.variant.name}")
    if request.config.get("check_build", "1") != "0":
        check_final_build(winner.variant, meta, arch, jobdir, cache_dir(Path(ctx.workdir)))
    src.write(Path(request.output))
    report.notes.append(f"winner {winner.variant.name}: {sum(winner.score.time_ms_per_site):.4f} ms over "
                        f"{len(site_index)} site(s), {frac:.0%} of the floor; job took "
                        f"{time.perf_counter() - t0:.0f} s")
    report.write(rpath)
    res = KernelGenResult(job_id=job_id, status="done", source=Path(request.output), report=rpath,
                          message=f"{winner.variant.name}: {frac:.0%} of the memory floor, "
                                  f"{sum(report.torch_ms_per_site) / sum(winner.score.time_ms_per_site):.1f}x torch")
    res.write(jobdir / "result.json")
    return res


def check_final_build(variant: Variant, meta: PluginMeta, arch: ArchSpec, jobdir: Path, cache: Path | None) -> None:
    """The winner's bundle must compile exactly as build-plugin compiles it before it is handed out.

    The check build is deterministic (no measured figures in it), so it can come from the cache.
    """
    from ytk_backend_nvcc.builder import describe, translation_unit

    header, source = winner_source(variant, meta)
    src = KernelSource(header=header, source=source, meta=meta, generator="ytk-templates")
    desc = describe(src, arch, "0" * 64, builder="ytk-templates (check build)")
    compile_cached(translation_unit(src, desc), jobdir / "winner_check.so", arch, cache)


def fetch(job_id: str, output: Path, ctx: Any) -> KernelGenResult | None:
    """A finished job's result; its bundle copied to ``output`` when that is another path."""
    jobdir = Path(ctx.workdir) / "templates" / job_id
    f = jobdir / "result.json"
    if not f.is_file():
        return None
    res = KernelGenResult.read(f)
    if res.status == "done" and res.source and output and Path(output).resolve() != Path(res.source).resolve():
        KernelSource.read(res.source).write(Path(output))
        res = res.model_copy(update={"source": Path(output)})
    return res
