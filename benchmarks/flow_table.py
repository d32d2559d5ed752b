"""The issue-8 table: baseline engine, plugged engine, torch eager and torch.compile, in ONE run.

    python benchmarks/flow_table.py --base base/base.tgz --plugged gaia/gaia.tgz \
        --model contrib/models/efficientvit_b1/model.py --npz base/model.npz --reference base/model.reference.npz

Every row is timed in the same process on the same GPU with CUDA events over --iterations runs
after --warmup, and the rows are interleaved over --rounds so that clock drift hits them alike.
Engines replay their CUDA graph (as the bundle's own benchmark does); torch rows run the same
model.py in fp16 channels_last, captured in a CUDA graph too (eager; where the model cannot be
captured, e.g. it copies a host tensor in forward, it runs without one and the row says so) or
compiled by inductor.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from engine_torch import graphed, time_cuda  # noqa: E402  (the same CUDA-event timing and graph capture)


def _load_model(path: Path):  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(path.resolve().parent))  # as ytk's loader does: a model imports its neighbours
    spec = importlib.util.spec_from_file_location("flow_model", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.Model().eval(), mod.get_fwd_args()


def _engine_runner(bundle: Path, npz: Path, tmp: Path, mode: str = "eager"):  # type: ignore[no-untyped-def]
    from ytk_backend_torch.engine import load_program, read_inputs
    from ytk_backend_torch.fused import FusedProgram
    from ytk_backend_torch.profiling import GraphRunner
    from ytk_core.bundle import ENGINE, EngineBundle

    b = EngineBundle.open(bundle)
    eng = b.extract(ENGINE, tmp / f"{bundle.stem}.{mode}.plan")
    prog = load_program(eng, torch.device("cuda"))
    inputs = prog.prepare_inputs(read_inputs(npz, prog.plan))
    if mode != "eager":  # the torch engine's inductor mode: the graph between plugins compiled
        prog = FusedProgram(prog, mode)
        with torch.inference_mode():
            prog(inputs)
    runner = GraphRunner(prog, inputs)
    return runner.replay, runner, b.manifest


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--plugged", type=Path, required=True)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--npz", type=Path, required=True)
    ap.add_argument("--reference", type=Path, required=True)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile row")
    ap.add_argument("--inductor-engines", action="store_true",
                    help="also the base and plugged engines in the torch engine's inductor mode (the graph between "
                         "plugins compiled with torch.compile)")
    ap.add_argument("--max-autotune", action="store_true",
                    help="also torch.compile mode max-autotune-no-cudagraphs (minutes: it benchmarks every choice)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    rows: dict[str, list[float]] = {}
    fns = {}
    with tempfile.TemporaryDirectory() as td:
        base_fn, base_runner, base_m = _engine_runner(a.base, a.npz, Path(td))
        plug_fn, plug_runner, plug_m = _engine_runner(a.plugged, a.npz, Path(td))
        fns["ytk engine: base (torch)"] = base_fn
        fns[f"ytk engine: plugged ({len(plug_m.plugins)} plugins)"] = plug_fn
        keep = [base_runner, plug_runner]
        if a.inductor_engines:
            for label, bundle in (("base", a.base), ("plugged", a.plugged)):
                fn, runner, _ = _engine_runner(bundle, a.npz, Path(td), "inductor")
                keep.append(runner)
                fns[f"ytk engine: {label} (torch, inductor mode)"] = fn
        model, args = _load_model(a.model)
        x = args[0].cuda().half().contiguous(memory_format=torch.channels_last)
        m16 = model.cuda().half().to(memory_format=torch.channels_last)
        with torch.no_grad():
            try:
                fns["torch eager fp16 CL (CUDA graph)"] = graphed(lambda inp: m16(inp), x)
            except RuntimeError as e:  # e.g. a host-to-device copy inside forward (timm EdgeNeXt's pos encoding)
                torch.cuda.synchronize()
                print(f"torch eager: CUDA graph capture failed ({str(e).splitlines()[0][:120]}); timed without one")
                fns["torch eager fp16 CL (no graph: capture failed)"] = lambda: m16(x)
            if not a.no_compile:
                cm = torch.compile(m16)
                for _ in range(3):
                    cm(x)
                fns["torch.compile fp16 CL (inductor default)"] = lambda: cm(x)
            if a.max_autotune:
                ma = torch.compile(m16, mode="max-autotune-no-cudagraphs")
                for _ in range(3):
                    ma(x)
                fns["torch.compile fp16 CL (max-autotune)"] = lambda: ma(x)
            for _ in range(a.rounds):
                for name, fn in fns.items():
                    rows.setdefault(name, []).extend(time_cuda(fn, a.warmup, a.iterations))
        ref = dict(np.load(a.reference))
        numerics = {}
        for label, runner in (("base", base_runner), ("plugged", plug_runner)):
            runner.replay()
            torch.cuda.synchronize()
            outs = [o.float().cpu().numpy() for o in runner.outputs]
            numerics[label] = {k: _cos(o, r) for (k, r), o in zip(ref.items(), outs)}
    dev = torch.cuda.get_device_name(0)
    print(f"device: {dev}; torch {torch.__version__}; {a.rounds} rounds x {a.iterations} iterations, interleaved")
    print(f"{'Implementation':<44}{'Iters':>6}{'Min':>9}{'Mean':>9}{'p50':>9}{'p95':>9}{'Max':>9}")
    table = {}
    for name, ms in rows.items():
        s = sorted(ms)
        p50, p95 = statistics.median(s), s[int(0.95 * (len(s) - 1))]
        table[name] = {"iterations": len(s), "min": s[0], "mean": statistics.fmean(s), "p50": p50, "p95": p95,
                       "max": s[-1]}
        print(f"{name:<44}{len(s):>6}{s[0]:>9.3f}{statistics.fmean(s):>9.3f}{p50:>9.3f}{p95:>9.3f}{s[-1]:>9.3f}")
    names = list(table)
    base_p50, plug_p50 = table[names[0]]["p50"], table[names[1]]["p50"]
    print(f"plugged vs base engine: {base_p50 / plug_p50:.2f}x")
    for other in names[2:]:
        print(f"plugged vs {other}: {table[other]['p50'] / plug_p50:.2f}x")
    ind = {k: v["p50"] for k, v in table.items() if k.endswith("(torch, inductor mode)")}
    if len(ind) == 2:
        ib, ip = ind["ytk engine: base (torch, inductor mode)"], ind["ytk engine: plugged (torch, inductor mode)"]
        print(f"plugged vs base, both in the torch engine's inductor mode: {ib / ip:.2f}x")
    print("numerics (cosine vs fp32 torch reference):", json.dumps(numerics))
    if a.json:
        a.json.write_text(json.dumps({"device": dev, "table": table, "numerics": numerics,
                                      "speedup_vs_base": base_p50 / plug_p50}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
