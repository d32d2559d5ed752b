"""Benchmark the templates kernel generator on the worked example's regions, side by side in one run.

For every region (EfficientViT-B1 at batch 4, 1088x1920, fp16): the generated kernel's time (the
winner of the autotuning, CUDA-graph replays over rotating inputs larger than the L2), the torch
time of the region's own ops in fp16 channels_last (cuDNN conv + bias + activation; for LiteMLA
the region's torch ops), the physical floor (bytes moved / device copy bandwidth measured in the
same process), the fraction of the floor reached, and a plain memory pass over the same bytes timed
the same way (what a memory-bound kernel of that size reaches: small tensors fall short of the floor
even there). A second table sums each op's sites (DwConv3x3s1 whatever its channels, LiteMLA, ...:
the issue's region families): their kernel, torch and floor times and the fraction of the floor the
op reaches over the model (also written as ``kernels_templates_ops.json``). Every figure is measured
here; nothing is recorded or estimated.

    python benchmarks/kernels_templates.py [--regions A,B] [--out DIR]      # on a CUDA machine
    python benchmarks/kernels_templates.py --prebuild --arch SPEC --cache DIR  # CPU: fill the build cache
    python benchmarks/kernels_templates.py --prebuild --carved-only --prepare-dir CARVE --arch SPEC --cache DIR

``--prebuild`` compiles every variant of the benchmark's and the GPU tests' regions for ``--arch`` into a build cache,
so a GPU machine with the same nvcc
spends its time scoring rather than compiling. It needs nvcc, not a GPU. With ``--carved-only``, only the regions
of a ``prepare --plugin`` directory, every variant: what ``ytk autoloop`` will build for that model (a carve at the
model's full size on a CPU host, e.g. ``benchmarks/zoo.py --size 4x1088x1920 --stop-after carve``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels_regions import REPO, all_names, make_region  # noqa: E402

from ytk_core.propose.naming import op_of  # noqa: E402
from ytk_hookspecs import StageContext  # noqa: E402
from ytk_hookspecs.models import ArchSpec, KernelGenRequest, KernelReport  # noqa: E402


class _Log:
    def _p(self, lvl: str, event: str, **kw: object) -> None:
        print(f"[{lvl}] {event} " + " ".join(f"{k}={v}" for k, v in kw.items()), file=sys.stderr, flush=True)

    def debug(self, event: str, **kw: object) -> None:
        pass

    def info(self, event: str, **kw: object) -> None:
        self._p("info", event, **kw)

    def warning(self, event: str, **kw: object) -> None:
        self._p("warn", event, **kw)

    def error(self, event: str, **kw: object) -> None:
        self._p("error", event, **kw)


def _request(root: Path, name: str, gpu: str, cfg: dict[str, str] | None = None) -> KernelGenRequest:
    pt2, cand = make_region(root, name)
    # check_build=0: the benchmark times kernels; the bundle's own build is covered by the tests.
    return KernelGenRequest(reference=pt2, gpu=gpu, config={"deployment_target": "tensorrt", "check_build": "0",
                                                            **(cfg or {})},
                            output=root / "sources" / f"{name}.module_source.py", candidate=cand, prepare_dir=root,
                            plugin_name=name)


def carved_requests(prep: Path, gpu: str, all_variants: bool = False) -> list[KernelGenRequest]:
    """One request per region of a real ``prepare --plugin`` directory (its candidates.json)."""
    from ytk_hookspecs.models import CandidatesFile

    cands = CandidatesFile.read(prep / "candidates.json").candidates
    # Four variants each: this run checks the real flow (dynamic-shape .pt2, captured inputs, the final
    # bundle build), not speed; the carve is small. ``all_variants``: every variant, as an autoloop's job builds
    config = {"deployment_target": "tensorrt"} if all_variants else \
        {"deployment_target": "tensorrt", "max_variants": "4", "allow_slower": "1"}
    return [KernelGenRequest(reference=prep / c.files.pt2, gpu=gpu, config=config,
                             output=prep / "sources" / f"{c.name}.module_source.py", candidate=c, prepare_dir=prep,
                             plugin_name=c.name) for c in cands if c.files.pt2]


def prebuild(arch_spec: str, cache: Path, root: Path, prep: Path | None = None, carved_only: bool = False) -> None:
    """Compile every variant of the benchmark's and the GPU tests' regions (and a carve's, if given).
    ``carved_only``: only the carve's, every variant of each (what an autoloop on that model builds)."""
    from ytk_backend_templates.generate import JobPlan, plan_job

    arch = ArchSpec.parse(arch_spec)
    reqs: list[KernelGenRequest] = [] if carved_only else [_request(root / "bench", n, "any") for n in all_names()]
    carved = carved_requests(prep, "any", all_variants=carved_only) if prep else []
    def test_request(fixture: tuple, name: str, maxv: int = 0) -> KernelGenRequest:  # type: ignore[type-arg]
        pt2, cand = fixture
        return KernelGenRequest(reference=pt2, gpu="any", config={"deployment_target": "tensorrt",
                                **({"max_variants": str(maxv)} if maxv else {})},
                                output=root / "x.module_source.py", candidate=cand, plugin_name=name)

    if not carved_only:
        reqs += _test_requests(root / "tests", test_request)
    plans = [p for p in (plan_job(r, sm=arch.sm) for r in reqs + carved) if isinstance(p, JobPlan)]
    return _prebuild_plans(plans, {r.plugin_name for r in carved}, arch, cache, root, prep)


def _test_requests(t: Path, test_request: Any) -> list[KernelGenRequest]:
    """The GPU tests' regions (tests/backends/templates fixtures), as prebuild requests."""
    from templates_fixtures import (GPU_DW_REGIONS, GPU_DW_RESIDUAL_REGIONS, GPU_DWLN_REGIONS, GPU_LITEMLA_REGIONS,
                                    GPU_PW_REGIONS, GPU_SE_REGIONS, dw_fixture, dwln_fixture, litemla_fixture,
                                    pw_fixture, se_fixture)

    reqs: list[KernelGenRequest] = []
    reqs += [test_request(dw_fixture(t, name, k, s, act, shapes, bias=bias), name, maxv)
             for name, k, s, act, _c, bias, shapes, maxv in GPU_DW_REGIONS]
    reqs += [test_request(dw_fixture(t, name, k, 1, act, shapes, residual="after"), name)
             for name, k, act, _c, shapes in GPU_DW_RESIDUAL_REGIONS]
    reqs += [test_request(litemla_fixture(t, name, shapes, joined=joined), name, maxv)
             for name, joined, shapes, maxv in GPU_LITEMLA_REGIONS]
    reqs += [test_request(se_fixture(t, name, act, gate, shapes, bias=bias, style=style), name)
             for name, act, gate, bias, style, shapes in GPU_SE_REGIONS]
    reqs += [test_request(pw_fixture(t, name, act, shapes, group_in=gin, group_out=gout, bias=bias), name, maxv)
             for name, act, gin, gout, bias, shapes, maxv in GPU_PW_REGIONS]
    reqs += [test_request(dwln_fixture(t, name, k, s, shapes, bias=bias, closed=closed, native=native,
                                       dynamic=dynamic), name)
             for name, k, s, closed, bias, native, dynamic, shapes in GPU_DWLN_REGIONS]
    return reqs


def _prebuild_plans(plans: list[Any], carved_names: set[str], arch: ArchSpec, cache: Path, root: Path,
                    prep: Path | None) -> None:
    """Compile every plan's variants into ``cache`` (and a carved region's final check builds)."""
    from ytk_backend_templates.generate import build_job, check_final_build

    done: set[str] = set()
    t0 = time.perf_counter()
    for p in plans:
        key = f"{p.name}/{len(p.variants)}/{p.meta.model_dump_json()}"
        if key in done:
            continue
        done.add(key)
        print(f"prebuild {p.name}: {len(p.variants)} variants", file=sys.stderr, flush=True)
        build_job(p, arch, root / "build" / p.name, cache)
        if prep is not None and p.name in carved_names and p.graph_pt2.is_relative_to(prep):
            for v in p.variants:  # the carve's runs keep the final check build: cache every candidate's
                check_final_build(v, p.meta, arch, root / "build" / p.name, cache)
    print(f"prebuild done in {time.perf_counter() - t0:.0f} s -> {cache}", file=sys.stderr)


def run(names: list[str], root: Path, out: Path, prep: Path | None = None) -> list[dict[str, object]]:
    import torch

    from ytk_backend_templates.generate import generate

    gpu = torch.cuda.get_device_name(0)
    ctx = StageContext(log=_Log(), workdir=root / "work")
    rows: list[dict[str, object]] = []
    carved = {r.plugin_name: r for r in carved_requests(prep, gpu)} if prep else {}
    for name in (list(carved) if prep else names):
        t0 = time.perf_counter()
        req = carved[name] if prep else _request(root, name, gpu)
        res = generate(req, ctx)
        row: dict[str, object] = {"region": name, "status": res.status, "message": res.message,
                                  "wall_s": round(time.perf_counter() - t0, 1)}
        if res.report and Path(res.report).is_file():
            rep = KernelReport.read(res.report)
            win = next((c for c in rep.candidates if c.variant == rep.winner), None)
            sites = req.candidate.sites if req.candidate else []
            row.update(winner=rep.winner, sites=len(sites),
                       shapes=[list(s.inputs[0].shape) + ([s.outputs[0].shape[1]] if s.outputs and
                                                          s.outputs[0].shape[1] != s.inputs[0].shape[1] else [])
                               for s in sites],
                       kernel_ms=win.time_ms_per_site if win else None,
                       spread_ms=win.spread_ms_per_site if win else None,
                       torch_ms=rep.torch_ms_per_site, floor_ms=rep.floor_ms_per_site,
                       copy_ms=rep.copy_ms_per_site,
                       correct=sum(1 for c in rep.candidates if c.correct), variants=len(rep.candidates),
                       notes=rep.notes,
                       candidates=[c.model_dump(mode="json") for c in rep.candidates])
            (out / f"{name}.report.json").write_text(Path(res.report).read_text())
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "candidates"}), file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict[str, object]]) -> str:
    head = ("| region | site shape (NCHW[, C out]) | sites | winner | kernel us | torch fp16 us | floor us | "
            "% of floor | x torch | memory pass us (% of floor) |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        if r.get("kernel_ms") is None:
            lines.append(f"| {r['region']} | | | {r['status']}: {str(r['message'])[:80]} | | | | | | |")
            continue
        seen: set[str] = set()
        copies = r.get("copy_ms") or [None] * len(r["shapes"])  # type: ignore[arg-type]
        for shp, k, t, f, c in zip(r["shapes"], r["kernel_ms"], r["torch_ms"], r["floor_ms"], copies):  # type: ignore[call-overload]
            key = str(shp)
            if key in seen:
                continue
            seen.add(key)
            n = sum(1 for s in r["shapes"] if str(s) == key)  # type: ignore[attr-defined]
            lines.append(f"| {r['region']} | {shp} | {n} | {r['winner']} | {k * 1e3:.1f} | {t * 1e3:.1f} | "
                         f"{f * 1e3:.1f} | {100 * f / k:.0f}% | {t / k:.1f}x | "
                         + (f"{c * 1e3:.1f} ({100 * f / c:.0f}%) |" if c else "|"))
    return "\n".join(lines)


def by_op(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Per op (the plugin name's op part, ``naming.op_of``: DwConv3x3s1 gathers the shape families
    DwConv3x3s1C256, ... and the remainder DwConv3x3s1Dyn) over every site of the run, each site
    counted as often as the model has it: summed kernel, torch and floor times (ms), the fraction of
    the floor the op reaches (floor sum / kernel sum: a site weighs by its time, as the scoring's
    per-candidate fraction does) and its speed-up over torch."""
    sums: dict[str, list[float]] = {}
    for r in rows:
        if r.get("kernel_ms") is not None:
            s = sums.setdefault(op_of(str(r["region"])), [0.0, 0.0, 0.0, 0.0])
            for k, t, f in zip(r["kernel_ms"], r["torch_ms"], r["floor_ms"]):  # type: ignore[call-overload]
                s[0], s[1], s[2], s[3] = s[0] + 1, s[1] + k, s[2] + t, s[3] + f
    return [{"op": op, "sites": int(n), "kernel_ms": k, "torch_ms": t, "floor_ms": f, "fraction_of_floor": f / k,
             "x_torch": t / k} for op, (n, k, t, f) in sums.items()]


def op_table(rows: list[dict[str, object]]) -> str:
    """``by_op`` as a markdown table (times in us)."""
    lines = ["| op | sites | kernel us (sum) | torch fp16 us (sum) | floor us (sum) | % of floor | x torch |",
             "|---|---|---|---|---|---|---|"]
    for o in by_op(rows):
        k, t, f = (float(o[x]) for x in ("kernel_ms", "torch_ms", "floor_ms"))  # type: ignore[arg-type]
        lines.append(f"| {o['op']} | {o['sites']} | {k * 1e3:.1f} | {t * 1e3:.1f} | {f * 1e3:.1f} | "
                     f"{100 * f / k:.0f}% | {t / k:.1f}x |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--regions", default=",".join(all_names()))
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--prebuild", action="store_true")
    ap.add_argument("--arch", default="x86_64-sm90-linux-cu130-trt10")
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--carved-only", action="store_true",
                    help="--prebuild: only the --prepare-dir carve's regions, every variant (what an autoloop builds)")
    ap.add_argument("--prepare-dir", type=Path, default=None,
                    help="score the regions of this `prepare --plugin` directory instead of the worked example's")
    a = ap.parse_args()
    import tempfile

    root = a.workdir or Path(tempfile.mkdtemp(prefix="ytk-kbench-"))
    if a.prebuild:
        prebuild(a.arch, a.cache or root / "cache", root, a.prepare_dir, carved_only=a.carved_only)
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    rows = run([n for n in a.regions.split(",") if n], root, a.out, a.prepare_dir)
    (a.out / "kernels_templates.json").write_text(json.dumps(rows, indent=1))
    (a.out / "kernels_templates_ops.json").write_text(json.dumps(by_op(rows), indent=1))
    t = table(rows) + "\n\n" + op_table(rows)
    (a.out / "kernels_templates.md").write_text(t + "\n")
    print(t)
    return 0 if all(r["status"] == "done" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
