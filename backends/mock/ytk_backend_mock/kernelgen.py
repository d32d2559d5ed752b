"""Mock kernel generation: a contract-valid kernel source for a carved region, with no real kernel.

What is real: the contract (inputs in the node's order with lifted weights, dtypes and formats for
the engine precision, output shape expressions derived from the region's sites, extents, launcher
symbol), so every check downstream runs on the same path as with a generated kernel. What is not:
the CUDA body is a placeholder that is never run, and the kernel's performance is declared by the
simulator (``perf.measured_on`` and ``report.json`` say SIMULATED).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import BadConfig
from ytk_hookspecs.kernel_source import KernelSource, KernelSourceError, report_path
from ytk_hookspecs.models import (ArchSpec, Candidate, CandidateScore, KernelGenRequest, KernelGenResult,
                                  KernelPerf, KernelReport, PluginMeta, SupportAnswer, SupportRequest,
                                  TensorContract, gpu_sm)
from ytk_hookspecs.models.base import write_bytes_atomic

from .cost_model import LAUNCH_MS, target_gpu

#: Bandwidth fraction the simulator credits a generated kernel with, by region kind. A fused
#: depthwise kernel streams its tile once; attention-like regions keep more intermediates.
SIMULATED_FRACTION = {"conv": 0.75, "attention": 0.55, "other": 0.6}

def _sm(request: KernelGenRequest) -> int:
    if request.arch:
        try:
            return ArchSpec.parse(request.arch).sm
        except ValueError:
            pass
    return gpu_sm(request.gpu) or 87


def region_kind(cand: Candidate) -> str:
    ops = " ".join(cand.op_inventory).lower()
    # a fused attention op (F.scaled_dot_product_attention as traced, its flash / efficient spellings) is
    # attention too, not "a region without attention matmuls"
    if "matmul" in ops or "bmm" in ops or "attention" in ops:
        return "attention"
    if "conv" in ops:
        return "conv"
    return "other"


def _expr_for_output(cand: Candidate, o: int, ax: int, act_idx: list[int]) -> str | None:
    """A contract expression over the inputs' dims that gives output ``o``'s axis ``ax`` at every site.

    Tried in order: the same axis of an activation, any axis of any input (e.g. a 1x1 conv's output
    channels are its weight's dim 0), a strided window ``(x + b)//s + 1`` (strided convs and pools),
    a ratio ``x*n//d`` (splits and joins), then a constant. Expressions are checked on every site."""
    vals = [s.outputs[o].shape[ax] for s in cand.sites]
    if not all(isinstance(v, int) for v in vals):
        return None
    n_in = len(cand.sites[0].inputs)
    others = [i for i in range(n_in) if i not in act_idx]
    rank = [len(t.shape) for t in cand.sites[0].inputs]
    dims = ([(i, ax) for i in act_idx] + [(i, a) for i in act_idx for a in range(rank[i]) if a != ax]
            + [(i, a) for i in others for a in range(rank[i])])

    def dim(s: Any, i: int, a: int) -> int | None:
        shp = s.inputs[i].shape
        return shp[a] if a < len(shp) and isinstance(shp[a], int) else None

    def fits(fn: Any, i: int, a: int) -> bool:
        for s, v in zip(cand.sites, vals):
            x = dim(s, i, a)
            if x is None or fn(x) != v:
                return False
        return True

    for i, a in dims:
        if fits(lambda x: x, i, a):
            return f"in{i}[{a}]"
    if len(set(vals)) == 1:
        return str(vals[0])
    for i, a in dims:
        for st in (2, 3, 4):
            for b in range(-8, 9):
                if fits(lambda x, b=b, st=st: (x + b) // st + 1, i, a):
                    return f"(in{i}[{a}] {'+' if b >= 0 else '-'} {abs(b)})//{st} + 1"
        for num, den in ((1, 2), (1, 3), (2, 3), (2, 1), (3, 1), (4, 1), (1, 4), (3, 2)):
            if fits(lambda x, num=num, den=den: x * num // den, i, a):
                return f"in{i}[{a}]*{num}//{den}"
    return None


#: ``--config mock_defect=KIND``: a planted wrong kernel, for testing what finds one (debug taps, numerics
#: gates). The mock engine computes the plugged region with the defect (SIMULATED, like all it does).
DEFECTS = {"shift": "an off-by-one: every output row shifted by one element",
           "overflow": "fp16 overflow: an intermediate held in fp16 at a scale where the upper half of the "
                       "output's range becomes inf"}
DEFECT_PREFIX = "SIMULATED defect: "


def defect_of(meta: PluginMeta) -> str | None:
    """The planted defect a mock kernel's contract states, if any."""
    for c in meta.constraints:
        if c.startswith(DEFECT_PREFIX):
            return c[len(DEFECT_PREFIX):].split(" ")[0]
    return None


def apply_defect(kind: str, out: Any) -> Any:
    """What a kernel with the planted defect ``kind`` computes instead of ``out`` (a numpy array)."""
    import numpy as np

    if kind == "shift":
        return np.roll(out, 1, axis=-1)
    peak = float(np.abs(out).max()) if out.size else 0.0
    scale = np.float32(65504.0 / (0.5 * peak)) if peak > 0 else np.float32(1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        return (out * scale).astype(np.float16).astype(out.dtype) / scale


def make_meta(cand: Candidate, precision: str, sm: int, fraction: float) -> PluginMeta:
    """The plugin contract for ``cand``; raises ValueError when an output extent is not expressible."""
    act_dtype = "float16" if precision == "fp16" else "float32"
    site0 = cand.sites[0]
    act_idx = [i for i, r in enumerate(cand.input_roles) if r == "activation"]

    def fmt(shape: list[int | str], act: bool) -> str:
        return "kHWC8" if act and precision == "fp16" and len(shape) == 4 else "kLINEAR"

    inputs = []
    for i, (t, role) in enumerate(zip(site0.inputs, cand.input_roles)):
        act = role == "activation"
        dims = []
        for ax, d in enumerate(t.shape):
            same = all(len(s.inputs[i].shape) > ax and s.inputs[i].shape[ax] == d for s in cand.sites)
            dims.append(str(d) if same and isinstance(d, int) else f"in{i}[{ax}]")
        inputs.append(TensorContract(name=f"in{i}_{role}", dtype=act_dtype if act else "float32",
                                     format=fmt(t.shape, act), role=role, shape=dims))  # type: ignore[arg-type]
    outputs = []
    for o, t in enumerate(site0.outputs):
        dims = []
        for ax in range(len(t.shape)):
            e = _expr_for_output(cand, o, ax, act_idx)
            if e is None:
                raise ValueError(f"output {o} axis {ax} takes values {[s.outputs[o].shape[ax] for s in cand.sites]} "
                                 "across the sites, which no input dim or constant expresses")
            dims.append(e)
        outputs.append(TensorContract(name=f"out{o}", dtype=act_dtype, format=fmt(t.shape, True), shape=dims))
    first = site0.inputs[act_idx[0]] if act_idx else site0.inputs[0]
    k = act_idx[0] if act_idx else 0
    letters = "NCHW" if len(first.shape) == 4 else [f"D{a}" for a in range(len(first.shape))]
    extents = {str(letters[a]): f"in{k}[{a}]" for a in range(len(first.shape))}
    gpu = target_gpu(sm)
    per_site = []
    for s in cand.sites:
        nbytes = 0.0
        for t, c in zip((*s.inputs, *s.outputs), (*inputs, *outputs)):
            n = 1
            for d in t.shape:
                n *= int(d) if isinstance(d, int) else 1
            nbytes += n * (2 if c.dtype == "float16" else 4)
        per_site.append(round(nbytes / (gpu.mem_bandwidth_gbs * 1e9 * fraction) * 1e3 + LAUNCH_MS, 6))
    return PluginMeta(
        plugin_name=cand.name, plugin_namespace=cand.namespace, plugin_version=cand.version,
        deployment_target="tensorrt", inputs=inputs, outputs=outputs, accumulation="float32", extents=extents,
        launcher=f"{cand.name}_launch", workspace=f"{cand.name}_workspace",
        constraints=["SIMULATED: generated by the ytk mock kernel generator; the CUDA body is a placeholder"],
        perf=KernelPerf(measured_on=f"SIMULATED {gpu.name} (mock kernelgen; nothing ran)",
                        achieved_bandwidth_fraction=fraction, time_ms_per_site=per_site))


def _cuda(meta: PluginMeta) -> tuple[str, str]:
    sig = (f"int {meta.launcher}(const void* const* inputs, void* const* outputs, const int64_t* extents, "
           "void* workspace, cudaStream_t stream)")
    header = (f"// {meta.plugin_name}: launcher contract (see plugin_meta.yaml)\n#pragma once\n"
              "#include <cstddef>\n#include <cstdint>\n#include <cuda_runtime.h>\n"
              f"extern \"C\" {sig};\nextern \"C\" size_t {meta.workspace}(const int64_t* extents);\n")
    source = (
        "// SIMULATION PLACEHOLDER from the ytk mock kernel generator. This is not a kernel and it is\n"
        "// never run on a GPU: the mock engine prices the plugin from plugin_meta.perf (declared, not\n"
        "// measured) and computes its outputs from the region's reference program. A real engine refuses\n"
        "// plugins built from it. Generate a real kernel with --kernelgen templates or gaia.\n"
        "// (no #include of the header: builders put CUDA_HEADER ahead of this source)\n\n"
        f"extern \"C\" size_t {meta.workspace}(const int64_t* extents) {{ (void)extents; return 0; }}\n\n"
        f"extern \"C\" {sig} {{\n"
        "    (void)inputs; (void)outputs; (void)extents; (void)workspace; (void)stream;\n"
        "    return 801;  // cudaErrorNotSupported: there is no kernel here\n}\n")
    return header, source


def _job_dir(ctx: StageContext, job_id: str) -> Path:
    return Path(ctx.workdir) / "mock-kernelgen" / job_id


def _config_fraction(raw: str | None, default: float) -> float:
    """``--config mock_bandwidth_fraction``: a value it cannot use is the user's typo (exit 2), not a failed job."""
    if raw is None:
        return default
    try:
        fraction = float(raw)
    except ValueError:
        fraction = float("nan")
    if not 0 < fraction <= 1:
        raise BadConfig(f"--config mock_bandwidth_fraction={raw}: a fraction of the memory floor in (0, 1]")
    return fraction


def submit(request: KernelGenRequest, ctx: StageContext) -> KernelGenResult:
    cand = request.candidate
    blob = json.dumps({"c": cand.model_dump(mode="json") if cand else None, "cfg": request.config,
                       "p": request.precision, "g": request.gpu, "a": request.arch,
                       "r": request.reoptimize.model_dump() if request.reoptimize else None}, sort_keys=True)
    job_id = "mock-" + hashlib.sha256(blob.encode()).hexdigest()[:12]
    if cand is None:
        return KernelGenResult(job_id=job_id, status="failed", message=(
            "the mock kernel generator works from the region's candidates.json entry (written by "
            "`ytk embedded prepare --plugin`), and none was found for this .pt2"))
    if not cand.sites:
        return KernelGenResult(job_id=job_id, status="failed", message=f"region {cand.name} has no sites")
    fraction = _config_fraction(request.config.get("mock_bandwidth_fraction"), SIMULATED_FRACTION[region_kind(cand)])
    defect = request.config.get("mock_defect", "")
    if defect and defect not in DEFECTS:
        raise BadConfig(f"--config mock_defect={defect}: the mock plants one of {', '.join(DEFECTS)}")
    sm = _sm(request)
    with ctx.progress(f"mock kernelgen {cand.name} (simulated)"):
        try:
            meta = make_meta(cand, request.precision, sm, fraction)
            if defect:  # stated in the contract, where the mock engine reads it back
                meta.constraints.append(f"{DEFECT_PREFIX}{defect} ({DEFECTS[defect]})")
        except ValueError as e:
            return KernelGenResult(job_id=job_id, status="failed",
                                   message=f"region {cand.name}: the kernel contract cannot express it: {e}")
        beat = request.reoptimize.bar_ms() if request.reoptimize else 0.0
        per_site = meta.perf.time_ms_per_site if meta.perf else []
        if beat > 0 and per_site and sum(per_site) / len(per_site) >= 0.97 * beat:
            return KernelGenResult(job_id=job_id, status="failed", message=(
                f"re-optimization of {cand.name} (SIMULATED): the mock generator's kernel declares "
                f"{sum(per_site) / len(per_site):.4f} ms/site, not faster than the bar of {beat:.6g} ms/site"))
        header, source = _cuda(meta)
        src = KernelSource(header=header, source=source, meta=meta, generator="ytk-mock (SIMULATED placeholder)")
        report = KernelReport(
            plugin_name=cand.name, backend="mock", job_id=job_id, region_kind=region_kind(cand),
            measured_on=meta.perf.measured_on if meta.perf else "SIMULATED", simulated=True,
            error_budget="not applicable: nothing ran (the mock engine computes this region from its reference)",
            candidates=[CandidateScore(variant="mock-placeholder", params={"bandwidth_fraction": fraction},
                                       compiled=False, correct=None,
                                       time_ms_per_site=meta.perf.time_ms_per_site if meta.perf else [])],
            winner="mock-placeholder",
            notes=["SIMULATED: per-site times are the simulator's declared figures from bytes moved at "
                   f"{fraction:.0%} of {target_gpu(sm).name}'s bandwidth, not measurements"])
        job = _job_dir(ctx, job_id)
        src.write(job / "source.module_source.py")
        report.write(job / "report.json")
        out = Path(request.output)
        src.write(out)
        rep = report.write(report_path(out))
    return KernelGenResult(job_id=job_id, status="done", source=out, report=rep,
                           message="SIMULATED placeholder kernel (contract only)")


def fetch(job_id: str, output: Path, ctx: StageContext) -> KernelGenResult | None:
    job = _job_dir(ctx, job_id)
    src = job / "source.module_source.py"
    if not job_id.startswith("mock-") or not src.is_file():
        return None
    try:
        KernelSource.read(src)
    except KernelSourceError as e:
        return KernelGenResult(job_id=job_id, status="failed", message=str(e))
    out = Path(output)
    write_bytes_atomic(out, src.read_bytes())
    rep = report_path(out)
    write_bytes_atomic(rep, (job / "report.json").read_bytes())
    return KernelGenResult(job_id=job_id, status="done", source=out, report=rep,
                           message="SIMULATED placeholder kernel (contract only)")


def supports(request: SupportRequest) -> SupportAnswer:
    """The mock simulates a kernel for any carved region whose contract it can write (its submit's rule)."""
    cand = request.candidate
    if cand is None:
        return SupportAnswer(supported=True, certain=False, backend="mock",
                             why="the mock simulates a kernel for any region the carve accepts (SIMULATED)")
    if not cand.sites:
        return SupportAnswer(supported=False, backend="mock", why=f"region {cand.name} has no sites")
    try:
        make_meta(cand, request.precision, 87, SIMULATED_FRACTION[region_kind(cand)])
    except ValueError as e:
        return SupportAnswer(supported=False, backend="mock", why=f"the kernel contract cannot express it: {e}")
    kind = region_kind(cand)
    what = {"conv": "a conv region", "attention": "an attention region"}.get(
        kind, "a region without convs or attention matmuls (a linear layer, elementwise ops)")
    return SupportAnswer(supported=True, backend="mock", kind=kind,
                         why=f"simulates a kernel for {what}, priced as its '{kind}' class (SIMULATED)")
