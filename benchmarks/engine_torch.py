"""Benchmark the torch engine on the worked example, side by side with plain torch on the same GPU.

    python benchmarks/engine_torch.py --size 4x1088x1920 --out /tmp/engine_torch

Rows, all fp16 on one GPU, each timed with CUDA events over --iterations runs after --warmup:
  torch engine (CUDA graph)      the engine's benchmark (what a bundle records)
  torch eager fp16 channels_last the same nn.Module, half + channels_last, launched from Python
  torch eager fp16 CL, CUDA graph the same module captured in a CUDA graph (the fair yardstick:
                                 the engine should match or beat it)
  torch.compile (--torch-compile) inductor's default mode on the half + channels_last module
Numerics: the engine's fp16 outputs against the fp32 eager module (max abs error, cosine).
Also printed: the engine's per-layer profile summed by layer type, and its ten slowest layers.
Results go to OUT/engine_torch.json as well.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


def load_example(size: str):  # type: ignore[no-untyped-def]
    os.environ["YTK_EXAMPLE_SIZE"] = size
    spec = importlib.util.spec_from_file_location("evit_bench", REPO / "contrib/models/efficientvit_b1/model.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.Model(), mod.get_fwd_args()


def time_cuda(fn, warmup: int, iterations: int) -> list[float]:  # type: ignore[no-untyped-def]
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iterations)]
    for a, b in pairs:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in pairs]


def summary(name: str, ms: list[float]) -> dict[str, object]:
    s = sorted(ms)
    return {"implementation": name, "iterations": len(s), "min": s[0], "median": statistics.median(s),
            "mean": statistics.fmean(s), "p95": s[min(len(s) - 1, int(0.95 * len(s)))], "max": s[-1]}


def graphed(fn, static_in):  # type: ignore[no-untyped-def]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(static_in)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(static_in)
    return g.replay


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="4x1088x1920")
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--layer-iterations", type=int, default=20)
    ap.add_argument("--torch-compile", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("runs/engine_torch"))
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    from ytk_backend_torch import plugin as engine
    from ytk_core.frontend.export import exact_constant_matching, quiet_exporter
    from ytk_hookspecs import StageContext
    from ytk_hookspecs.models import CompileRequest, ProfileRequest

    a.out.mkdir(parents=True, exist_ok=True)
    model, args = load_example(a.size)
    x = args[0]
    t0 = time.perf_counter()
    with quiet_exporter(), exact_constant_matching(), torch.no_grad():
        torch.onnx.export(model, args, dynamo=True, optimize=True, verbose=False, report=False).save(
            str(a.out / "model.onnx"))
    export_s = time.perf_counter() - t0
    np.savez(a.out / "model.npz", x=x.numpy())

    dev = torch.device("cuda")
    m32 = model.to(dev).eval()
    xd = x.to(dev)
    with torch.no_grad():
        ref = [t.float().cpu().numpy() for t in m32(xd)]

    req = CompileRequest(onnx=a.out / "model.onnx", npz=a.out / "model.npz", arch="x86_64-sm90-linux-cu130-trt10",
                         precision="fp16", workdir=a.out / "engine",
                         options={"profile_iterations": str(a.layer_iterations)})
    ctx = StageContext()
    res = engine.compile_engine(req, ctx)
    prof = engine.profile_engine(ProfileRequest(compile=res, request=req, iterations=a.iterations,
                                                warmup=a.warmup), ctx)
    outs = np.load(prof.outputs)
    numerics = []
    for name, r in zip(outs.files, ref):
        g = outs[name].astype(np.float64).ravel()
        rr = r.astype(np.float64).ravel()
        numerics.append({"output": name, "max_abs": float(np.abs(g - rr).max()),
                         "cosine": float(g @ rr / (np.linalg.norm(g) * np.linalg.norm(rr))),
                         "finite": bool(np.isfinite(g).all())})

    rows = [summary("torch engine (CUDA graph)", prof.iterations_ms)]
    m16 = m32.half().to(memory_format=torch.channels_last)
    x16 = xd.half().contiguous(memory_format=torch.channels_last)
    torch.backends.cudnn.benchmark = True
    with torch.inference_mode():
        rows.append(summary("torch eager fp16 channels_last",
                            time_cuda(lambda: m16(x16), a.warmup, a.iterations)))
        replay = graphed(lambda inp: m16(inp), x16)
        rows.append(summary("torch eager fp16 CL, CUDA graph", time_cuda(replay, a.warmup, a.iterations)))
        if a.torch_compile:
            t1 = time.perf_counter()
            cm = torch.compile(m16)
            cm(x16)
            compile_s = time.perf_counter() - t1
            rows.append({**summary("torch.compile fp16 CL", time_cuda(lambda: cm(x16), a.warmup, a.iterations)),
                         "compile_s": compile_s})

    by_type: dict[str, float] = {}
    for ly in prof.layers:
        by_type[ly.type] = by_type.get(ly.type, 0.0) + ly.median_ms
    slowest = sorted(prof.layers, key=lambda ly: -ly.median_ms)[:10]
    result = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{prof.device}, {platform.machine()}, torch {torch.__version__}",
        "size": a.size, "export_s": export_s, "build_s": res.build_s, "engine": res.extra,
        "rows": rows, "numerics": numerics, "layer_sum_ms": sum(ly.median_ms for ly in prof.layers),
        "by_type_ms": dict(sorted(by_type.items(), key=lambda kv: -kv[1])),
        "slowest": [{"name": ly.name, "type": ly.type, "median_ms": ly.median_ms} for ly in slowest],
        "peak_mem_gb": torch.cuda.max_memory_allocated() / 2**30,
    }
    (a.out / "engine_torch.json").write_text(json.dumps(result, indent=2))
    print(f"# {result['machine']}, size {a.size}, {result['date']}")
    print(f"export {export_s:.1f} s, engine build {res.build_s:.1f} s, {res.extra}")
    print("| implementation | iters | min | median | mean | p95 | max |\n|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['implementation']} | {r['iterations']} | {r['min']:.3f} | {r['median']:.3f} | {r['mean']:.3f} "
              f"| {r['p95']:.3f} | {r['max']:.3f} |")
    print("| output | max abs err | cosine | finite |\n|---|---|---|---|")
    for n in numerics:
        print(f"| {n['output']} | {n['max_abs']:.4g} | {n['cosine']:.6f} | {n['finite']} |")
    print(f"per-layer sum {result['layer_sum_ms']:.3f} ms; by type: "
          + ", ".join(f"{k} {v:.2f}" for k, v in result["by_type_ms"].items()))
    print("slowest: " + "; ".join(f"{s['name']} ({s['type']}) {s['median_ms']:.3f}" for s in result["slowest"]))
    print(f"peak GPU memory {result['peak_mem_gb']:.1f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
