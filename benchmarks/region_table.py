"""Per carved region, in one run on the GPU: its torch ops, torch.compile of it, each kernel generator's
plugin, and the memory floor (issue 23's per-family table).

    python benchmarks/region_table.py PREPARE_DIR [--generators templates,triton] [--json OUT]

PREPARE_DIR is a carve's output (``candidates.json`` and ``plugin_candidates/*.pt2``), e.g. an autoloop
round's ``roundN/prepare`` at full size. Every figure is the sum over the candidate's sites of a
per-site median: the region's fp16 torch ops (eager, CUDA graph), torch.compile max-autotune
(Triton-only GEMM/conv, CUDA graph), and each generator's job report (its kernel timed by the core's
graph replays; a failed job shows its reason). Ratios are against torch eager.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _site_inputs(cand: Any, program: Any) -> list[list[Any]]:
    import torch

    out = []
    for site in cand.sites:
        out.append([torch.randn([int(d) for d in t.shape], device="cuda").half() for t in site.inputs])
    return out


def _job(generator: str, pt2: Path, cand: Any, prep: Path, work: Path) -> tuple[float | None, str]:
    import torch

    from ytk_hookspecs import StageContext
    from ytk_hookspecs.models import KernelGenRequest, KernelReport

    out = work / generator / f"{cand.name}.module_source.py"
    out.parent.mkdir(parents=True, exist_ok=True)
    req = KernelGenRequest(reference=pt2, gpu=torch.cuda.get_device_name(), config={"allow_slower": "1"},
                           output=out, candidate=cand, prepare_dir=prep, plugin_name=cand.name)
    if generator == "templates":
        from ytk_backend_templates.generate import generate as gen_t

        res = gen_t(req, StageContext(workdir=work / generator))
    else:
        from ytk_backend_triton.generate import generate as gen_x

        res = gen_x(req, work / generator)
    if res.status != "done" or res.report is None:
        return None, res.message[:120]
    rep = KernelReport.read(res.report)
    win = next((c for c in rep.candidates if c.variant == rep.winner), None)
    return (sum(win.time_ms_per_site) if win and win.time_ms_per_site else None), ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prepare_dir", type=Path)
    ap.add_argument("--generators", default="templates,triton")
    ap.add_argument("--only", help="comma-separated candidate names")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch

    from ytk_backend_triton.generate import _time_torch  # the generators' own timing: graph replays, median
    from ytk_hookspecs.models import CandidatesFile
    from ytk_hookspecs.pt2 import load_exported

    if not torch.cuda.is_available():
        print("error: this table is measured on a CUDA GPU", file=sys.stderr)
        return 2
    cands = CandidatesFile.read(a.prepare_dir / "candidates.json").candidates
    if a.only:
        keep = set(a.only.split(","))
        cands = [c for c in cands if c.name in keep]
    gens = [g for g in a.generators.split(",") if g]
    work = a.prepare_dir.parent / "region_table"
    from ytk_hookspecs.admission import copy_floor_ms

    big = 1 << 30
    gbs = big / (copy_floor_ms(big, torch.device("cuda")) * 1e6)  # bytes read + written per second / 1e9
    rows = []
    for c in cands:
        pt2 = a.prepare_dir / (c.files.pt2 or f"plugin_candidates/{c.name}.pt2")
        prog = load_exported(pt2).module().cuda().half()  # an exported program is already in eval form; .eval() raises
        sites = _site_inputs(c, prog)
        row: dict[str, Any] = {"candidate": c.name, "family": c.ops_name, "sites": len(sites)}
        with torch.no_grad():
            row["torch_ms"] = sum(_time_torch(prog, ins) for ins in sites)
            try:
                opts = {"max_autotune": True, "max_autotune_gemm_backends": "TRITON",
                        "max_autotune_conv_backends": "TRITON", "triton.cudagraphs": False}
                cm = torch.compile(prog, dynamic=False, options=opts)
                row["compile_ms"] = sum(_time_torch(cm, ins) for ins in sites)
            except Exception as e:  # inductor's own failure is a row's data
                row["compile_ms"], row["compile_note"] = None, f"{type(e).__name__}: {str(e)[:80]}"
            outs = [prog(*ins) for ins in sites]
        # each site's inputs read once and outputs written once, at the bandwidth of a large copy (the
        # harness's floor): one graph replay of a small copy would carry the replay's own latency
        row["floor_ms"] = sum((sum(t.numel() * 2 for t in ins) + sum(
            o.numel() * 2 for o in (out if isinstance(out, (tuple, list)) else [out]))) / (gbs * 1e6)
            for ins, out in zip(sites, outs))
        for g in gens:
            row[f"{g}_ms"], row[f"{g}_note"] = _job(g, pt2, c, a.prepare_dir, work)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    head = ["candidate", "sites", "torch", "compile"] + gens + ["floor"]
    print(" | ".join(head))
    for r in rows:
        cells = [r["candidate"], str(r["sites"])]
        for k in ["torch_ms", "compile_ms"] + [f"{g}_ms" for g in gens] + ["floor_ms"]:
            v = r.get(k)
            cells.append("-" if v is None else f"{v:.4f}" + (f" ({r['torch_ms'] / v:.2f}x)" if k != "torch_ms" and
                                                                  k != "floor_ms" and v else ""))
        print(" | ".join(cells))
    if a.json:
        a.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
