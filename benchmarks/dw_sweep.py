"""Sweep depthwise template variants on chosen shapes, with a same-size memory pass as the practical
ceiling (a developer tool for issue work; the product's scoring is the templates harness).

    python benchmarks/dw_sweep.py build DIR CASES [--params JSON] [--arch SPEC]   # host: nvcc only
    python benchmarks/dw_sweep.py run DIR                                          # GPU machine (*)
    YTK_SWEEP_MANIFEST=other.json python benchmarks/dw_sweep.py run DIR           # other cases, same builds

(*) on the device machine first ``source benchmarks/device_env.sh`` and put ``hookspecs``, the repo,
``backends/nvcc`` and ``backends/templates`` on PYTHONPATH; carry DIR as a tarball (the libraries
link the CUDA runtime statically: ~1 MB each, they compress ~20x together).

CASES is ``k,s,C,N,H,W[;...]`` (C < 0: channels as a runtime extent). ``build`` emits every variant
of each case's space (``wide``), plus the parameter dicts of ``--params`` (a JSON list; tried on
every case they are legal for), and compiles each with the nvcc backend's driver into DIR (with a
manifest). ``run`` times each variant the way the harness does (CUDA-graph replays over rotating
input/output sets larger than the L2, median of 15), checks it coarsely against torch's fp32 conv +
hardswish (max error within 2% of the output range: this catches broken variants, the generator's
harness applies the real error budget), and prints per case: the device copy bandwidth floor, an
elementwise pass over the same bytes (what a plain memory-bound kernel of this size reaches), cuDNN,
and each variant's time and fraction of the floor.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / p) for p in ("hookspecs", ".", "backends/nvcc", "backends/templates")]

from dw_dev import extents, load_launcher, pointers  # noqa: E402
from ytk_backend_templates import emit_dwconv  # noqa: E402
from ytk_backend_templates.regions import DwConvRegion  # noqa: E402


def _cases(text: str) -> list[tuple[int, ...]]:
    return [tuple(int(v) for v in c.split(",")) for c in text.split(";") if c.strip()]


def _region(k: int, s: int, c: int) -> DwConvRegion:
    """C < 0: the dynamic-remainder form (channels a runtime extent) at |C| channels."""
    return DwConvRegion(k=k, stride=s, act="hardswish", channels=c if c > 0 else None)


def build(out: Path, cases: str, params: str, arch_spec: str, space: bool = True) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from ytk_backend_nvcc.toolchain import compile_shared
    from ytk_backend_templates.emit_common import PRELUDE
    from ytk_hookspecs.models import ArchSpec

    arch = ArchSpec.parse(arch_spec)
    extra = json.loads(params) if params else []
    out.mkdir(parents=True, exist_ok=True)
    jobs, manifest = [], []
    for case in _cases(cases):
        k, s, c = case[:3]
        r = _region(k, s, c)
        points = emit_dwconv.variant_space(r, wide=True) if space else []
        for p in extra:
            p = {**{"wreg": 0, "pf": 1, "mb": 0}, **p} if p.get("stage") == "strip" else dict(p)
            if p not in points and (not r.channels or r.channels % int(p.get("cb", 8)) == 0):
                points.append(p)
        for p in points:
            name = emit_dwconv.variant_name(p)
            so = out / f"k{k}s{s}c{c if c > 0 else 'dyn'}_{name}.so"  # one build per region
            manifest.append({"case": list(case), "variant": name, "so": so.name})
            if not so.exists() and all(j[1] != so for j in jobs):
                jobs.append((emit_dwconv.emit(r, p, "v0", "v0_launch").body, so))
    print(f"{len(manifest)} variants, {len(jobs)} to compile", flush=True)

    def one(job: tuple[str, Path]) -> str:
        try:
            compile_shared(PRELUDE + job[0], job[1], arch)
            return ""
        except Exception as e:  # keep the others
            return f"{job[1].name}: {str(e)[:400]}"

    with ThreadPoolExecutor(4) as ex:
        for err in ex.map(one, jobs):
            if err:
                print("FAILED", err, flush=True)
    manifest = [m for m in manifest if (out / m["so"]).exists()]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


def run(out: Path) -> None:
    import torch
    import torch.nn.functional as F

    from ytk_backend_templates.timing import copy_bandwidth_gbs, rotation_sets, time_copy, time_launches

    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    gbs = copy_bandwidth_gbs(dev)
    manifest = json.loads((out / os.environ.get("YTK_SWEEP_MANIFEST", "manifest.json")).read_text())
    by_case: dict[tuple[int, ...], list[dict[str, object]]] = {}
    for m in manifest:
        by_case.setdefault(tuple(m["case"]), []).append(m)
    print(f"copy bandwidth {gbs:.0f} GB/s; L2 {l2 >> 20} MB", flush=True)
    results = []
    for case, ms in by_case.items():
        k, s, c0, n, h, w = case
        r, c = _region(k, s, c0), abs(c0)
        ho, wo = r.out_hw(h, w)
        moved = (n * h * w * c + n * ho * wo * c) * 2
        sets = rotation_sets(moved, l2)
        g = torch.Generator(device=dev).manual_seed(0)
        xs = [torch.randn(n, h, w, c, device=dev, dtype=torch.float16, generator=g) for _ in range(sets)]
        ys = [torch.empty(n, ho, wo, c, device=dev, dtype=torch.float16) for _ in range(sets)]
        wt = torch.randn(c, k * k, device=dev, generator=g) * 0.3
        b = torch.randn(c, device=dev, generator=g)
        ref = F.hardswish(F.conv2d(xs[0].permute(0, 3, 1, 2).float(), wt.view(c, 1, k, k), b, s, k // 2,
                                   groups=c)).permute(0, 2, 3, 1)
        floor_us = moved / (gbs * 1e9) * 1e6
        copy_us = time_copy(moved, dev, l2) * 1e3  # the same bytes through an elementwise pass
        xc = [x.permute(0, 3, 1, 2) for x in xs]  # channels_last views
        wc = wt.view(c, 1, k, k).half().contiguous(memory_format=torch.channels_last)
        bc = b.half()
        cudnn_us = time_launches(lambda i: F.hardswish(F.conv2d(xc[i], wc, bc, s, k // 2, groups=c)),
                                 sets).median_ms * 1e3
        print(f"\n## k{k} s{s} C{c} N{n} {h}x{w}: floor {floor_us:.1f} us; memory pass over the same bytes "
              f"{copy_us:.1f} us "
              f"({100 * floor_us / copy_us:.0f}% of floor); cuDNN+hardswish {cudnn_us:.1f} us", flush=True)
        rows = []
        for m in ms:
            fn = load_launcher(out / m["so"])
            ins = [pointers(x, wt, b) for x in xs]
            outs = [pointers(y) for y in ys]
            ext = extents(n, c, h, w, ho, wo)

            def launch(i: int) -> None:
                rc = fn(ins[i], outs[i], ext, None, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
                if rc:
                    raise RuntimeError(f"launch returned {rc}")

            ys[0].fill_(float("nan"))
            try:
                launch(0)
                torch.cuda.synchronize()
            except RuntimeError as e:
                print(f"{m['variant']}: {e}", flush=True)
                continue
            err = (ys[0].float() - ref).abs().max().item()
            t = time_launches(launch, sets)
            us = t.median_ms * 1e3
            # YTK_SWEEP_HOT=1: also time one input/output set over and over (L2-resident when it
            # fits): what the kernel reaches when DRAM is not its limit
            hot = time_launches(launch, 1).median_ms * 1e3 if os.environ.get("YTK_SWEEP_HOT") else None
            ok = err < 2e-2 * max(1.0, ref.abs().max().item())
            rows.append((us, m["variant"], ok, err, hot))
            results.append({"case": list(case), "variant": m["variant"], "us": us, "hot_us": hot, "floor_us": floor_us,
                            "copy_us": copy_us, "cudnn_us": cudnn_us, "max_err": err, "ok": ok})
        for us, name, ok, err, hot in sorted(rows):
            print(f"{name:44s} {us:7.1f} us {100 * floor_us / us:4.0f}%"
                  f"{'' if hot is None else f'  hot {hot:6.1f} us'}{'' if ok else f'  WRONG max err {err:.3g}'}",
                  flush=True)
        del xs, ys
        torch.cuda.empty_cache()
    (out / "results.json").write_text(json.dumps(results, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["build", "run"])
    ap.add_argument("dir", type=Path)
    ap.add_argument("cases", nargs="?", default="")
    ap.add_argument("--params", default="")
    ap.add_argument("--arch", default="x86_64-sm90-linux-cu130-trt10")
    ap.add_argument("--no-space", action="store_true", help="only the --params points, not the region's space")
    a = ap.parse_args()
    if a.what == "build":
        build(a.dir, a.cases, a.params, a.arch, not a.no_space)
    else:
        run(a.dir)


if __name__ == "__main__":
    main()
