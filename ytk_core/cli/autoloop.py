"""``ytk autoloop``: propose -> plug, unattended, until no gain remains."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from ..errors import UsageError
from ..runtime import emit_json, stdout
from .app import app
from .options import BuilderOpt, EngineOpt, JsonOpt, KernelgenOpt, PrecisionOpt, WorkerOpt


@app.command("autoloop")
def autoloop(
    model: Annotated[Path, typer.Argument(help="model.py with a Model class and get_fwd_args()")],
    arch: Annotated[str, typer.Option("-a", "--arch", help="target arch spec, or 'auto' (the local GPU, else the "
                                      "worked example's DRIVE AGX Orin)")],
    workdir: Annotated[Path, typer.Option("--workdir", help="every round's artifacts and the resumable state")],
    precision: PrecisionOpt = "fp16",
    engine: EngineOpt = None,
    worker: WorkerOpt = None,
    kernelgen: KernelgenOpt = None,
    builder: BuilderOpt = None,
    max_rounds: Annotated[int, typer.Option("--max-rounds", help="rounds of propose -> plug after the baseline")] = 4,
    min_gain_ms: Annotated[str, typer.Option("--min-gain-ms", help="stop when a candidate or a round is worth less "
                                             "than this: milliseconds (0.1, 0.1ms) or a share of the baseline "
                                             "engine's latency (1%)")] = "1%",
    max_jobs: Annotated[int, typer.Option("--max-jobs", help="kernel generation jobs in flight")] = 4,
    roofline: Annotated[float, typer.Option(
        "--roofline", help="as propose's: a family measured at this fraction of its roofline bound or better is "
                           "not worth a kernel (1: only one at the bound itself)")] = 0.5,
    time_budget: Annotated[Optional[str], typer.Option(
        "--time-budget", help="e.g. 45m, 2h; checked between rounds")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="go on with the workdir's recorded results even though "
                                         "model.py, its inputs or a backend's version changed (the summary and "
                                         "report then say they predate the change)")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="discard the workdir's earlier autoloop (state, rounds, "
                                        "report) and start over")] = False,
    export: Annotated[Optional[Path], typer.Option("--export", help="copy what ships into this directory: the final "
                                                   "engine bundle, the carved ONNX with its model.npz, plugins.json "
                                                   "and each region's .pt2, the plugin .so files with their "
                                                   "admission verdicts, and ship.json (the rebuild command)")] = None,
    json_: JsonOpt = False,
) -> None:
    """Prepare and compile the baseline, then repeat propose -> carve -> generate -> build -> compile -> verify
    until no gain remains. Kill it at any point and run the same command again: it resumes. With --worker
    every engine is compiled and profiled by that Kronos worker on its target."""
    from ..autoloop.report import dropped_label
    from ..autoloop.run import run_autoloop
    from ..kronos.remote_compile import resolve_worker
    from ..stages.inputs import parse_arch

    if arch != "auto":
        parse_arch(arch)  # a malformed -a is a UsageError (exit 2) before the workdir is even locked
    if resume and fresh:
        raise UsageError("--resume and --fresh contradict each other: pick one")
    if export is not None:
        from ..autoloop.report import export_replaces

        export_replaces(export, workdir)  # a wrong --export is said before the loop runs, not after

    from ..autoloop.report import simulated_generator
    from ..autoloop.state import BackendChoice

    rep = run_autoloop(model, arch, precision, workdir,
                       BackendChoice(engine=engine, kernelgen=kernelgen, builder=builder),
                       max_rounds, min_gain_ms, max_jobs, time_budget,
                       on_change="fresh" if fresh else "resume" if resume else "ask", worker=resolve_worker(worker),
                       roofline=roofline)
    exported: list[Path] = []
    if export is not None and rep.ship is not None:
        from ..autoloop.report import export_outputs

        try:
            exported = export_outputs(rep.ship, export, workdir)
        except OSError as e:
            raise UsageError(f"--export {export}: cannot write there: {e.strerror or e}") from None
    if json_:
        emit_json(rep)
        _fail_on_final_numerics(rep)
        return
    st = rep.state
    sim = " (SIMULATED)" if rep.simulated else ""
    t = Table(title=f"autoloop{sim}: {st.model}", title_justify="left")
    for c in ("round", "p50 ms", "gain ms", "kept", "dropped"):
        t.add_column(c)
    t.add_row("0 (baseline)", f"{st.baseline.ms:.3f}" if st.baseline else "-", "-", "-", "-")
    for r in st.rounds:
        if not r.candidates and r.result_ms is None:
            continue  # a round that found nothing to try: the "stopped:" line below says so (the report keeps it)
        t.add_row(str(r.index), f"{r.result_ms:.3f}" if r.result_ms is not None else "-",
                  f"{r.gain_ms:.3f}" if r.gain_ms is not None else "-",
                  ", ".join(c.name + (" (re-optimized)" if c.replaces else "")
                            for c in r.candidates if c.status == "kept") or "-",
                  ", ".join(dropped_label(c) for c in r.candidates if c.status == "dropped") or "-")
    stdout.print(t)
    n_dropped = sum(1 for r in st.rounds for c in r.candidates if c.status == "dropped")
    if n_dropped:  # "(decide)" alone tells a new user nothing: the report has each one's reason
        stdout.print(f"dropped: {n_dropped} candidate(s), each with its reason in the report's \"Dropped "
                     f"candidates\" table ({rep.report_md})", markup=False, highlight=False, soft_wrap=True)
    if rep.baseline_ms and rep.final_ms:
        numerics = "" if rep.verify is None else (", numerics pass" if rep.verify.passed else ", numerics FAIL")
        if numerics and simulated_generator(st):
            numerics += " (of the carve and plumbing: the simulated plugins compute the reference)"
        stdout.print(f"{rep.baseline_ms:.3f} ms -> {rep.final_ms:.3f} ms ({rep.speedup:.2f}x){sim}{numerics}; "
                     f"stopped: {st.stop_reason}", markup=False, highlight=False)
    if rep.on_real_gpu:
        stdout.print(f"note: the simulated generator plugged every region; {rep.on_real_gpu}", markup=False,
                     highlight=False, soft_wrap=True)
    for what in rep.stale:
        stdout.print(f"note: resumed although {what}: these figures were measured before that change "
                     "(--fresh measures the model as it is now)", markup=False, highlight=False)
    if rep.ship is not None:
        stdout.print(f"ship{' (SIMULATED)' if rep.ship.simulated else ''}: {_shown(rep.ship.engine_bundle)}"
                     + "".join(f"\n      {_shown(p.so)}  ({p.selector})" for p in rep.ship.plugins),
                     markup=False, highlight=False)
        stdout.print(f"rebuild: {rep.ship.reproduce}", markup=False, highlight=False, soft_wrap=True)
    if exported:
        sim = (" (SIMULATED: a simulated engine's bundle and placeholder plugins, not for deployment)"
               if rep.ship is not None and rep.ship.simulated else "")
        stdout.print(f"exported {len(exported)} file(s) to {export}{sim}", markup=False, highlight=False)
    stdout.print(f"report: {rep.report_md}", markup=False, highlight=False)
    _fail_on_final_numerics(rep)


def _fail_on_final_numerics(rep) -> None:  # type: ignore[no-untyped-def]
    """A final engine that fails verify against round 0's reference is never a quiet exit 0."""
    from ..errors import NumericsFailed

    if rep.verify is not None and not rep.verify.passed:
        raise NumericsFailed("the final engines fail numerics against the model's reference: "
                             + "; ".join(rep.verify.failure_lines()[:3]) + f" (see {rep.report_md}); do not ship them")


def _shown(path: str) -> str:
    """A path as the user would type it from here: relative when it lies below the current directory."""
    p = Path(path)
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)
