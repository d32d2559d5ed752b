"""One triton kernel job, on a CUDA machine: contract, compile per site shape, record, build, score.

The contract is generic: every floating input fp16 (weights too: the engine casts lifted weights once),
4-D activations kHWC8 where their channels allow it, outputs likewise; the extents are every dim of
every activation input, so a plan's shape cases are told apart exactly. Output dims become expressions
over those inputs when one input dim equals them at every site, else constants when they never vary.

Scoring is the core's own: :mod:`ytk_hookspecs.admission` (guarded buffers, poisoned outputs, graph
replays, a tolerance from the region's fp32 reference and its own fp16 error) on fresh inputs per site
shape, timed by graph replays, against the region's torch ops in fp16 and the memory floor. A plugin
slower than the region's own ops fails the job (``allow_slower=1`` keeps it).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from ytk_hookspecs.candidates import request_candidate
from ytk_hookspecs.errors import StageError, UnsupportedRegion
from ytk_hookspecs.kernel_source import KernelSource, report_path
from ytk_hookspecs.models import (ArchSpec, ArchSpecError, CandidateScore, KernelGenRequest, KernelGenResult,
                                  KernelPerf, KernelReport, PluginMeta, TensorContract)

BACKEND = "triton"
ERROR_BUDGET = ("the core's admission budget: per element |out - ref| <= rel*|ref| + 4*E + abs*max|ref|, ref = the "
                "region's .pt2 in fp32 (TF32 off), E = the region's own ops' largest error at fp16")


def _failed(job_id: str, message: str, report: Path | None = None) -> KernelGenResult:
    return KernelGenResult(job_id=job_id, status="failed", message=message, report=report)


def _site_shapes(candidate: Any, program_shapes: list[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
    if candidate is None or not candidate.sites:
        return [program_shapes]
    seen: list[list[tuple[int, ...]]] = []
    for s in candidate.sites:
        try:
            key = [tuple(int(d) for d in t.shape) for t in s.inputs]
        except (TypeError, ValueError):
            raise UnsupportedRegion(f"site {s.index} has symbolic input dims; plans are compiled per concrete "
                                    "shape") from None
        if key not in seen:
            seen.append(key)
    return seen


def _format(shape: list[int] | tuple[int, ...]) -> str:
    return "kHWC8" if len(shape) == 4 and shape[1] % 8 == 0 else "kLINEAR"


def contract(name: str, namespace: str, version: str, roles: list[str], shapes: list[list[tuple[int, ...]]],
             out_shapes: list[list[tuple[int, ...]]], in_dtypes: list[str], target: str) -> PluginMeta:
    """The plugin's contract from the sites' input and output shapes (see the module docstring)."""
    acts = [i for i, r in enumerate(roles) if r == "activation"]
    extents = {f"I{i}D{d}": f"in{i}[{d}]" for i in acts for d in range(len(shapes[0][i]))}
    inputs = []
    for i, (role, dt) in enumerate(zip(roles, in_dtypes)):
        dims = [f"in{i}[{d}]" if role == "activation" else str(shapes[0][i][d]) for d in range(len(shapes[0][i]))]
        if role != "activation" and any(s[i] != shapes[0][i] for s in shapes):
            raise UnsupportedRegion(f"input {i} ({role}) has a different shape at different sites")
        fmt = _format(shapes[0][i]) if role == "activation" and dt == "float16" else "kLINEAR"
        inputs.append(TensorContract(name=f"in{i}", dtype=dt, format=fmt, role=role, shape=dims))  # type: ignore[arg-type]
    outputs = []
    for k in range(len(out_shapes[0])):
        dims = []
        for d in range(len(out_shapes[0][k])):
            vals = [o[k][d] for o in out_shapes]
            expr = next((f"in{i}[{j}]" for i in acts for j in range(len(shapes[0][i]))
                         if all(s[i][j] == v for s, v in zip(shapes, vals))), None)
            if expr is None and len(set(vals)) == 1:
                expr = str(vals[0])
            if expr is None:
                raise UnsupportedRegion(f"output {k} dim {d} ({vals}) follows no input dim across the sites")
            dims.append(expr)
        outputs.append(TensorContract(name=f"out{k}", dtype="float16", format=_format(out_shapes[0][k]),
                                      role="activation", shape=dims))
    return PluginMeta(plugin_name=name, plugin_namespace=namespace, plugin_version=version,
                      deployment_target=target, inputs=inputs, outputs=outputs, extents=extents,  # type: ignore[arg-type]
                      launcher=f"ytk_launch_{name}", workspace=f"ytk_workspace_{name}")


def generate(request: KernelGenRequest, workdir: Path) -> KernelGenResult:
    """The whole job (see the module docstring)."""
    import torch

    from ytk_hookspecs.admission import local_cuda
    from ytk_hookspecs.pt2 import load_exported

    candidate = request_candidate(request)
    name = request.plugin_name or (candidate.name if candidate else None) or Path(request.reference).name.split(".")[0]
    job_id = f"{BACKEND}-{name}-{uuid.uuid4().hex[:8]}"
    if request.precision != "fp16":
        return _failed(job_id, f"the triton generator builds fp16 plugins; precision {request.precision} is not one")
    got = local_cuda()
    if isinstance(got, str):
        return _failed(job_id, f"the triton generator compiles and scores on a local CUDA GPU: {got}")
    dev, gpu = got
    props = torch.cuda.get_device_properties(dev)
    local_sm = props.major * 10 + props.minor
    sms = [local_sm]
    if request.arch:
        try:
            target_sm = ArchSpec.parse(request.arch).sm
        except ArchSpecError as e:
            return _failed(job_id, str(e))
        sms = sorted({local_sm, target_sm})
    try:
        ep = load_exported(Path(request.reference))
        # on the GPU, weights too: inductor traces it with the inputs there (a LayerNorm's weight left on the
        # host stopped it with "Unhandled FakeTensor Device Propagation")
        program = ep.module().to(dev)
        roles = list(candidate.input_roles) if candidate else ["activation"] * len(ep.graph_signature.user_inputs)
        metas = [n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"
                 and n.name in ep.graph_signature.user_inputs]
        shapes = _site_shapes(candidate, [tuple(int(d) for d in v.shape) for v in metas])
        return _run(request, workdir, job_id, name, candidate, program, roles, shapes, dev, gpu, local_sm, sms)
    except UnsupportedRegion as e:
        return _failed(job_id, f"triton cannot plug region {name}: {e}")
    except (MemoryError, OSError):  # the disk or memory, not the region: the loop stops on them
        raise
    except Exception as e:  # noqa: BLE001 - inductor's own failure on this region: the job fails, saying so
        first = (str(e).strip().splitlines() or [""])[0][:300]
        where = _keep_traceback(workdir / BACKEND / job_id, e)
        return _failed(job_id, f"triton could not compile region {name}: {type(e).__name__}: {first}"
                               f"{f' (traceback: {where})' if where else ''}")


def _keep_traceback(jobdir: Path, e: BaseException) -> Path | None:
    """Write an unexpected failure's whole traceback into the job's directory (inductor's own errors say
    little in their first line: "InductorError: AssertionError:"), so that it can be reported upstream."""
    import traceback

    try:
        jobdir.mkdir(parents=True, exist_ok=True)
        path = jobdir / "error.txt"
        path.write_text("".join(traceback.format_exception(e)))
        return path
    except OSError:
        return None


def _run(request: KernelGenRequest, workdir: Path, job_id: str, name: str, candidate: Any, program: Any,
         roles: list[str], shapes: list[list[tuple[int, ...]]], dev: Any, gpu: str, local_sm: int,
         sms: list[int]) -> KernelGenResult:
    import torch

    from ytk_hookspecs.admission import low_precision

    from .record import recording

    low = low_precision(program, "fp16")
    if low is None:
        raise UnsupportedRegion("the region's program cannot be made fp16")
    g = torch.Generator().manual_seed(0)
    logical = [[torch.randn(s, generator=g) for s in case] for case in shapes]
    outs0 = []
    for case in logical:
        try:
            with torch.no_grad():
                outs0.append([tuple(o.shape) for o in _as_list(program(*[t.to(dev) for t in case]))])
        except Exception as e:  # a program exported for other shapes than a site's (guards), or one that fails
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise UnsupportedRegion(f"the region's program does not run at site shapes "
                                    f"{[list(t.shape) for t in case]}: {type(e).__name__}: {first}") from None
    in_dtypes = ["float16"] * len(roles)
    meta = contract(name, candidate.namespace if candidate else "yasp", candidate.version if candidate else "1",
                    roles, shapes, outs0, in_dtypes, request.deployment_target)
    mode = request.config.get("mode", "max-autotune")
    cases, handles, t0 = [], {}, time.perf_counter()
    with recording() as rec:
        _compile_cases(logical, meta, low, roles, mode, dev, rec, cases, handles)
    compile_s = time.perf_counter() - t0
    return _finish(request, workdir, job_id, name, program, low, logical, outs0, meta, mode, cases, handles, dev,
                   gpu, local_sm, sms, compile_s)


def _compile_cases(logical: list[Any], meta: PluginMeta, low: Any, roles: list[str], mode: str, dev: Any, rec: Any,
                   cases: list[Any], handles: dict[str, Any]) -> None:
    import torch
    from torch._inductor.utils import run_and_get_code

    from ytk_hookspecs.admission import kernel_inputs

    from .record import check_output_code, compile_options, record_case

    for case in logical:
        ins = kernel_inputs(meta, case, dev)
        fmt = [t.format for t in meta.outputs]

        def run(*xs: Any, _low: Any = low, _fmt: list[str] = fmt) -> tuple[Any, ...]:
            ys = _as_list(_low(*xs))
            return tuple(y.contiguous(memory_format=torch.channels_last) if f == "kHWC8" else y.contiguous()
                         for y, f in zip(ys, _fmt))

        torch._dynamo.reset()
        fn = torch.compile(run, dynamic=False, options=compile_options(mode))
        with torch.no_grad():
            _, codes = run_and_get_code(fn, *ins)
            check_output_code(codes)
            extents = [int(case_t.shape[d]) for i, case_t in enumerate(case) if roles[i] == "activation"
                       for d in range(case_t.dim())]
            shape_case, _, kernels = record_case(fn, ins, extents, rec)
        handles.update({f"h{h:x}": ck for h, ck in kernels.items()})
        cases.append(shape_case)


def _finish(request: KernelGenRequest, workdir: Path, job_id: str, name: str, program: Any, low: Any,
            logical: list[Any], outs0: list[Any], meta: PluginMeta, mode: str, cases: list[Any],
            handles: dict[str, Any], dev: Any, gpu: str, local_sm: int, sms: list[int],
            compile_s: float) -> KernelGenResult:
    from ytk_hookspecs.admission import (AdmissionCase, check_case, copy_floor_ms, kernel_inputs,
                                         reference_and_tolerance, time_replays)
    from ytk_hookspecs.launcher import LauncherLibrary

    from ytk_hookspecs.kernel_source import launcher_header

    from .launcher import launcher_source
    from .plan import LaunchPlan
    from .record import kernel_binaries

    plan = LaunchPlan(kernels=kernel_binaries(handles, sms, local_sm), cases=cases, n_inputs=len(meta.inputs),
                      n_outputs=len(meta.outputs), triton_version=_triton_version())
    src = KernelSource(header=launcher_header(meta.launcher, meta.workspace),
                       source=launcher_source(plan, f"ytk_triton_{name}", meta.launcher, meta.workspace),
                       meta=meta, generator=BACKEND)
    # build for the local GPU and score it there
    from ytk_backend_nvcc.builder import build
    from ytk_backend_nvcc.cross import host_arch
    from ytk_hookspecs import StageContext
    from ytk_hookspecs.models import BuildRequest

    jobdir = workdir / BACKEND / job_id
    jobdir.mkdir(parents=True, exist_ok=True)
    draft = src.write(jobdir / f"{name}.module_source.py")
    so = jobdir / f"{name}.so"
    try:
        build(BuildRequest(source=draft, plugin_name=name, arch=f"{host_arch()}-sm{local_sm}-linux-cu130-trt10",
                           output=so), StageContext(workdir=jobdir))
    except StageError as e:
        return _failed(job_id, f"the plan's launcher for {name} did not build: {e}")
    lib = LauncherLibrary(so)
    captured = _captured(request, request_candidate(request), logical)
    times, torch_ms, floors, problems = [], [], [], []
    for ci, case in enumerate(logical):
        # a drawn case, and the inputs the carve captured at a site of this shape: on a drawn case the region's
        # own fp16 ops may overflow (a linear attention over thousands of tokens of randn), the captured ones
        # are what the region sees in the model
        draws = [(f"shape{ci}", case)] + ([(f"shape{ci} captured", captured[ci])] if ci in captured else [])
        passed, skipped, wrong = [], [], []
        for label, ins in draws:
            ref, tol, why = reference_and_tolerance(program, low, ins, "fp16", dev, [c.dtype for c in meta.inputs])
            if why:  # the region's own fp16 ops overflow on these inputs: nothing fair to compare against
                skipped.append(f"{label}: {why}")
                continue
            res = check_case(lib, AdmissionCase(label, kernel_inputs(meta, ins, dev), ref, tol), dev)
            (passed if res.ok else wrong).append(res)
        if wrong or not passed:
            problems += [p for r in wrong for p in r.problems] or skipped
            continue
        ms = time_replays(passed[0])
        times.append(ms if ms is not None else float("nan"))
        torch_ms.append(_time_torch(low, kernel_inputs(meta, case, dev)))
        nbytes = sum(t.numel() * 2 for t in case) + sum(_numel(o) * 2 for o in outs0[ci])
        floors.append(copy_floor_ms(nbytes, dev))
    rep_path = report_path(Path(request.output))
    winner_ok = not problems and len(times) == len(logical)
    # measured once per shape case; the report, like every generator's, lists them per site (the sum over the
    # sites is the region's time)
    site_case = _site_cases(request_candidate(request), logical) if winner_ok else []
    times, torch_ms, floors = ([per_case[i] for i in site_case] for per_case in (times, torch_ms, floors))
    slower = winner_ok and sum(times) > sum(torch_ms)
    score = CandidateScore(variant=f"inductor-{mode}", params={"kernels": len(plan.kernels), "compile_s":
                                                               round(compile_s, 1)},
                           correct=winner_ok, time_ms_per_site=times, floor_ms_per_site=floors,
                           fraction_of_floor=(sum(floors) / sum(times)) if winner_ok and sum(times) > 0 else None,
                           rejected="; ".join(problems[:3]) or None)
    report = KernelReport(plugin_name=name, backend=BACKEND, job_id=job_id, region_kind="compiled",
                          measured_on=gpu, simulated=False, error_budget=ERROR_BUDGET, candidates=[score],
                          winner=score.variant if winner_ok else None, torch_ms_per_site=torch_ms,
                          floor_ms_per_site=floors,
                          notes=[f"{len(plan.kernels)} Triton kernel(s) over {len(cases)} shape case(s), cubins for "
                                 f"{', '.join(f'sm_{s}' for s in plan.sms)}; Triton {plan.triton_version}"])
    report.write(rep_path)
    if not winner_ok:
        return _failed(job_id, f"the compiled plan for {name} failed its checks: {problems[0]}", rep_path)
    if slower and request.config.get("allow_slower") != "1":
        return _failed(job_id, f"the compiled plan for {name} is slower than the region's torch ops on {gpu} "
                               f"({sum(times) * 1e3:.1f} us vs {sum(torch_ms) * 1e3:.1f} us over {len(times)} "
                               "site(s)); "
                               "not worth plugging (--config allow_slower=1 keeps it)", rep_path)
    frac = min(1.0, max(1e-6, score.fraction_of_floor or 1e-6))
    final = KernelSource(header=src.header, source=src.source, generator=BACKEND,
                         meta=meta.model_copy(update={"perf": KernelPerf(measured_on=gpu,
                                                                         achieved_bandwidth_fraction=frac,
                                                                         time_ms_per_site=times)}))
    final.write(Path(request.output))
    return KernelGenResult(job_id=job_id, status="done", source=Path(request.output), report=rep_path,
                           message=f"{len(plan.kernels)} Triton kernel(s), {sum(times) * 1e3:.1f} us vs torch "
                                   f"{sum(torch_ms) * 1e3:.1f} us")


def _captured(request: KernelGenRequest, candidate: Any, logical: list[Any]) -> dict[int, list[Any]]:
    """The carve's captured inputs by shape case, fp32 (the reference rounds what the contract feeds as fp16)."""
    from ytk_hookspecs.candidates import captured_io_npz, captured_site_inputs

    out: dict[int, list[Any]] = {}
    for ins in captured_site_inputs(captured_io_npz(request, candidate)):
        key = [tuple(t.shape) for t in ins]
        for ci, case in enumerate(logical):
            if ci not in out and [tuple(t.shape) for t in case] == key:
                out[ci] = [t.float() for t in ins]
    return out


def _site_cases(candidate: Any, logical: list[Any]) -> list[int]:
    """For each site of the candidate, the index of its shape case."""
    if candidate is None or not candidate.sites:
        return [0]
    keys = [[tuple(t.shape) for t in case] for case in logical]
    return [keys.index([tuple(int(d) for d in t.shape) for t in s.inputs]) for s in candidate.sites]


def _time_torch(fn: Any, ins: list[Any]) -> float:
    import torch

    from ytk_hookspecs.admission import _timed_replays

    stream = torch.cuda.Stream()
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(3):
            fn(*ins)
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, stream=stream):
        fn(*ins)
    ms = sorted(_timed_replays(graph, stream, 50))
    return ms[len(ms) // 2]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _triton_version() -> str:
    from .aot import triton_version

    return triton_version()
