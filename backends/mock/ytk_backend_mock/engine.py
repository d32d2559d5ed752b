"""The simulated engine: compile = fuse and price every layer; profile = noisy iterations + real outputs.

Nothing here runs on a GPU. The "engine" file is a JSON plan of priced layers, every figure the
profile reports comes from the cost model plus seeded run-to-run noise, and every result says
``simulated=True``. The outputs, however, are computed for real: onnxruntime runs the standard
nodes and each custom-op node is computed by its carved region's reference program.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import (ArchSpec, ArchSpecError, CompileRequest, CompileResult, LayerTime,
                                  PluginDescription, ProfileRequest, ProfileResult)
from ytk_hookspecs.models.base import write_text_atomic

from .cost_model import target_gpu
from .fusion import build_layers, plugin_meta
from .kernelgen import defect_of
from .graph import load_graph
from .layer_info import export_layer_info, export_profile, metadata

#: The TensorRT release whose builder the simulation prices (its fusions, reformats and cost model).
COST_MODEL_TRT = "8.6"
ENGINE_VERSION = f"{COST_MODEL_TRT} (simulated)"
PLAN_FORMAT = "ytk-mock-plan/1"
#: Relative spread of one layer's time from one iteration to the next.
LAYER_NOISE = 0.01
#: Fixed per-inference cost outside the layers (enqueue, event record), in ms.
ENQUEUE_MS = 0.02


def engine_version(arch: ArchSpec) -> str:
    """The TensorRT the target names, and the cost model when that is another release: a trt10 target is not
    said to run 8.6."""
    if arch.tensorrt == COST_MODEL_TRT:
        return ENGINE_VERSION
    return f"{arch.tensorrt} (simulated with the TensorRT {COST_MODEL_TRT} cost model)"


def device_name(sm: int) -> str:
    return "DRIVE AGX Orin (simulated)" if sm == 87 else f"{target_gpu(sm).name} (simulated)"


def _arch(spec: str) -> ArchSpec:
    try:
        return ArchSpec.parse(spec)
    except ArchSpecError as e:
        raise StageError(str(e)) from None


def compile_engine(request: CompileRequest, ctx: StageContext) -> CompileResult:
    t0 = time.perf_counter()
    arch = _arch(request.arch)
    gpu = target_gpu(arch.sm)
    with np.load(request.npz, allow_pickle=False) as z:
        shapes = {k: tuple(int(d) for d in z[k].shape) for k in z.files}
    descs: dict[tuple[str, str, str], PluginDescription] = {
        (p.description.namespace, p.description.name, p.description.version): p.description for p in request.plugins}
    metas = {k: m for k, d in descs.items() if (m := plugin_meta(d)) is not None}
    with ctx.progress("simulated build: shapes, fusion, cost model") as task:
        g = load_graph(request.onnx, shapes, metas)
        layers = build_layers(g, request.precision, gpu, descs)
        task.update(description=f"simulated build: {len(layers)} layers")
    workdir = Path(request.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    plan = {
        "format": PLAN_FORMAT, "simulated": True,
        "note": "ytk mock engine: a priced layer list from a cost model, not a TensorRT engine; nothing ran on a GPU",
        "target": {"arch": arch.spec, "device": device_name(arch.sm), "gpu": gpu.model_dump()},
        "precision": request.precision,
        "layers": [{"name": lay.name, "type": lay.trt_type, "kind": lay.kind, "onnx_nodes": lay.onnx_nodes,
                    "ms": lay.ms, "bytes": lay.cost.bytes if lay.cost else 0.0,
                    "flops": lay.cost.flops if lay.cost else 0.0, "bound": lay.cost.bound if lay.cost else "",
                    "plugin": lay.plugin, "metadata": metadata(lay)} for lay in layers],
    }
    defects = {key[1]: d for key, m in metas.items() if (d := defect_of(m))}
    if defects:  # planted wrong kernels (--config mock_defect=...): the outputs are computed with them
        plan["defects"] = defects  # (only then: the plan seeds the simulated timings)
    engine = workdir / "engine.plan"
    write_text_atomic(engine, json.dumps(plan, indent=1))
    info = workdir / "layer_info.json"
    write_text_atomic(info, json.dumps(export_layer_info(layers, g), indent=1))
    reformats = sum(1 for lay in layers if lay.kind == "reformat")
    log = workdir / "build.log"
    lines = [f"[simulated] TensorRT {engine_version(arch)} builder on {device_name(arch.sm)}, {request.precision}",
             f"[simulated] {len(g.nodes)} ONNX nodes -> {len(layers)} layers ({reformats} reformats, "
             f"{sum(1 for lay in layers if lay.plugin)} plugin layers)"]
    lines += [f"[simulated] plugin {p.description.namespace}::{p.description.name} v{p.description.version} from "
              f"{p.path.name} (sha256 {p.sha256[:12]})" for p in request.plugins]
    write_text_atomic(log, "\n".join(lines) + "\n")
    ctx.log.info("simulated engine built", layers=len(layers), reformats=reformats)
    return CompileResult(engine=engine, backend="mock", backend_version=engine_version(arch), simulated=True,
                         device=device_name(arch.sm), layer_info=info, build_log=log,
                         build_s=round(time.perf_counter() - t0, 3),
                         extra={"layers": len(layers), "reformats": reformats, "onnx_nodes": len(g.nodes)})


def _seed(plan_bytes: bytes) -> int:
    # Seeded from the plan: the same engine gives the same figures, run after run, unless
    # YTK_MOCK_SEED asks for another draw.
    extra = os.environ.get("YTK_MOCK_SEED", "")
    return int.from_bytes(hashlib.sha256(plan_bytes + extra.encode()).digest()[:8], "little")


def profile_engine(request: ProfileRequest, ctx: StageContext) -> ProfileResult:
    plan_path = Path(request.compile.engine)
    raw = plan_path.read_bytes()
    try:
        plan = json.loads(raw)
        assert plan.get("format") == PLAN_FORMAT
    except (ValueError, AssertionError):
        raise StageError(f"{plan_path}: not a mock engine plan; the mock engine only profiles what it built") from None
    layers = plan["layers"]
    base = np.array([lay["ms"] for lay in layers], dtype=np.float64)
    rng = np.random.default_rng(_seed(raw))
    n_iter = max(1, int(request.iterations))
    per_iter: list[np.ndarray] = []
    totals: list[float] = []
    with ctx.progress("simulated profiling", total=request.warmup + n_iter) as task:
        for i in range(request.warmup + n_iter):
            jitter = 1.0 + LAYER_NOISE * rng.standard_normal(len(base))
            it = base * np.clip(jitter, 0.5, None)
            # An occasional slow iteration (clock ramp, a preempting process), as on real boards.
            stall = ENQUEUE_MS * (1.0 + 4.0 * rng.random()) if rng.random() < 0.1 else 0.0
            if i >= request.warmup:
                per_iter.append(it)
                totals.append(float(it.sum() + ENQUEUE_MS + stall))
            task.advance()
    stack = np.stack(per_iter)
    medians = np.median(stack, axis=0)
    means = stack.mean(axis=0)
    workdir = Path(request.request.workdir)
    out_npz = workdir / "outputs.npz"
    with ctx.progress("computing outputs (onnxruntime + region references)"):
        outputs = compute_outputs(Path(request.request.onnx), Path(request.request.npz), plan.get("defects") or {})
    _save_npz(out_npz, outputs)
    raw_profile = workdir / "profile.trtexec.json"
    names = [lay["name"] for lay in layers]
    write_text_atomic(raw_profile, json.dumps(export_profile(names, [list(x) for x in stack], list(medians)),
                                              indent=1))
    result_layers = [LayerTime(name=lay["name"], type=lay["type"], median_ms=round(float(m), 6),
                               average_ms=round(float(a), 6), onnx_nodes=list(lay["onnx_nodes"]),
                               metadata=lay.get("metadata") or None)
                     for lay, m, a in zip(layers, medians, means)]
    return ProfileResult(layers=result_layers, iterations_ms=[round(t, 6) for t in totals], outputs=out_npz,
                         raw_profile=raw_profile, device=plan["target"]["device"], simulated=True)


def compute_outputs(onnx_path: Path, npz: Path, defects: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """The engine's outputs, computed for real on this machine's CPU (plugged regions whose kernel has a
    planted defect, by plugin name, computed with it)."""
    import onnx

    with np.load(npz, allow_pickle=False) as z:
        feeds = {k: z[k] for k in z.files}
    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    if any(n.domain not in ("", "ai.onnx") for n in graph.node):
        from .carved_eval import run_carved_onnx

        try:
            return dict(run_carved_onnx(onnx_path, feeds, prepare_dir=onnx_path.parent, defects=defects))
        except StageError:
            raise
        except Exception as e:
            raise StageError(f"computing the outputs of {onnx_path} failed: {type(e).__name__}: {e}") from None
    # No custom-op node: onnxruntime alone computes it (and torch need not be imported).
    sess = cpu_session(str(onnx_path))
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def _save_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    import io

    from ytk_hookspecs.models.base import write_bytes_atomic

    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    write_bytes_atomic(path, buf.getvalue())


def cpu_session(model: bytes | str) -> Any:
    """An onnxruntime session on the CPU (a serialised model or a path), its per-node warnings off."""
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.log_severity_level = 3
    return onnxruntime.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
