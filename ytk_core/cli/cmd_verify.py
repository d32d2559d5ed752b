"""`ytk embedded verify`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from .embedded import app
from .options import JsonOpt


@app.command("verify")
def verify(
    reference: Annotated[Path, typer.Argument(help="model.reference.npz from prepare")],
    bundles: Annotated[list[Path], typer.Argument(help="engine bundles to compare")],
    host_iterations: Annotated[int, typer.Option("--host-iterations", help="iterations of the torch host row")] = 20,
    no_host: Annotated[bool, typer.Option("--no-host", help="skip timing torch on this machine")] = False,
    host_budget: Annotated[float, typer.Option(
        "--host-budget", help="seconds the torch host row may take; it stops early (>= 1 iteration)")] = 120.0,
    max_rel_err: Annotated[Optional[float], typer.Option(
        "--max-rel-err", help="override the per-precision bound on max|err| / max|reference|")] = None,
    min_cosine: Annotated[Optional[float], typer.Option(
        "--min-cosine", help="override the per-precision bound on cosine similarity")] = None,
    layers: Annotated[int, typer.Option("--layers", help="slowest layers to list per bundle (0: none)")] = 10,
    json_: JsonOpt = False,
) -> None:
    """Benchmark table across bundles and numerics against the torch reference.

    Exits non-zero (5) when any output of any bundle is outside its precision's tolerance, and
    when the outputs cannot all be compared: an empty reference, an output only the reference or
    only the engine has, or a shape or dtype that differs.
    """
    from ..errors import NumericsFailed
    from ..runtime import emit_json, stdout
    from ..stages.verify import run_verify

    rep = run_verify(reference, bundles, host_iterations, no_host, max_rel_err, min_cosine, layers, host_budget)
    if json_:
        emit_json(rep)
    else:
        render(rep, stdout)
    if not rep.passed:
        raise NumericsFailed("\n".join(rep.failure_lines()))


def _f(v: float | None, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def render(rep, out) -> None:  # type: ignore[no-untyped-def]
    """The benchmark table, speedups, per-layer tops and the numerics table."""

    p = dict(highlight=False, markup=False)
    t = Table(title="latency (ms)", title_justify="left")
    for col in ("Implementation", "Iterations", "Min", "Mean", "p50", "p95", "p99", "Max"):
        t.add_column(col, justify="left" if col == "Implementation" else "right")
    for r in rep.rows:
        t.add_row(r.implementation, str(r.iterations), *(f"{v:.3f}" for v in (
            r.min_ms, r.mean_ms, r.p50_ms, r.p95_ms, r.p99_ms, r.max_ms)))
    out.print(t)
    sims = [r for r in rep.rows if r.simulated]
    if sims:
        devices = sorted({r.device for r in sims})
        out.print(f"(simulated): SIMULATED figures from the engine's cost model on {', '.join(devices)}; "
                  "not a measurement", **p)
    from ..target import off_target_note

    for r in rep.rows:
        if r.kind == "torch-host":
            out.print(f"{r.implementation}: this machine, not the target; ignore it when the two are different "
                      "hardware", **p)
        elif (off := off_target_note(r.device, None, r.simulated)) is not None:
            out.print(f"{r.implementation}: {off}", **p)
    if rep.host_note:
        out.print(f"note: {rep.host_note}", **p)
    devices = {r.implementation: (r.device, r.simulated) for r in rep.rows}
    for s in rep.speedups:
        line = (f"{s.baseline} -> {s.implementation}: {s.baseline_p50_ms:.3f} ms -> {s.p50_ms:.3f} ms (p50), "
                f"{s.speedup:.2f}x" + ("  SIMULATED" if s.simulated else ""))
        if s.other_device:
            dev, sim = devices.get(s.implementation, ("?", False))
            line += (f"  (not a speedup: {s.other_device} against {dev}{' (simulated)' if sim else ''}, two "
                     "machines)")
        out.print(line, **p)
    for bl in rep.layers:
        if not bl.layers:
            continue
        lt = Table(title=f"slowest layers: {bl.implementation} (sum of layer medians {bl.total_ms:.3f} ms)",
                   title_justify="left")
        for col in ("ms", "%", "type", "layer"):
            lt.add_column(col, justify="right" if col in ("ms", "%") else "left")
        for lay in bl.layers:
            lt.add_row(f"{lay.median_ms:.3f}", f"{100 * lay.median_ms / (bl.total_ms or 1):.1f}", lay.type, lay.name)
        out.print(lt)
    nt = Table(title="numerics vs torch reference", title_justify="left")
    for col in ("Implementation", "Output", "Shape", "max abs err", "max rel err", "p99.9 rel err", "p99 rel err",
                "cosine", "tolerance", "result"):
        nt.add_column(col, justify="right" if "err" in col or col == "cosine" else "left")
    for n in rep.numerics:
        nt.add_row(n.implementation, rep.output_text(n.output), "x".join(map(str, n.shape)), _f(n.max_abs_err, ".3e"),
                   _f(n.max_rel_err, ".3e"), _f(n.p999_rel_err, ".3e"), _f(n.p99_rel_err, ".3e"),
                   _f(n.cosine, ".6f"), n.tolerance.describe(), "PASS" if n.passed else f"FAIL: {n.detail}")
    out.print(nt)
    out.print("max rel err = max|engine - reference| / max|reference| per output; p99.9 / p99 rel err: the same "
              "error's percentiles over the output's elements (the pass rule is on the max and the cosine)", **p)
    for v in rep.taps:
        tt = Table(title=f"debug taps: {v.implementation} (plugin boundaries in graph order)", title_justify="left")
        for col in ("Boundary", "Tap", "max abs err", "max rel err", "p99 rel err", "cosine", "result"):
            tt.add_column(col, justify="left" if col in ("Boundary", "Tap", "result") else "right")
        for b, n in zip(v.boundaries or [""] * len(v.numerics), v.numerics):
            tt.add_row(b, n.output, _f(n.max_abs_err, ".3e"), _f(n.max_rel_err, ".3e"), _f(n.p99_rel_err, ".3e"),
                       _f(n.cosine, ".6f"), "PASS" if n.passed else f"FAIL: {n.detail}")
        out.print(tt)
        out.print(f"{'DRIFT' if v.plugin else 'taps'}: {v.reason}", **p)
        if v.exposed_as:
            out.print(f"taps exposed as {v.exposed_as}" + (f": {v.exposure_note}" if v.exposure_note else ""), **p)
        if v.untapped is not None:
            u = v.untapped
            out.print(f"tapped vs untapped: {v.implementation} {u.tapped_p50_ms:.3f} ms against {u.untapped} "
                      f"{u.untapped_p50_ms:.3f} ms (p50), {u.ratio:.2f}x the untapped latency", **p)
    for note in dict.fromkeys(v.fusion_note for v in rep.taps if v.fusion_note):
        out.print(f"note: {note}", **p)
    for line in rep.problems:
        out.print(f"FAIL: {line}", **p)
