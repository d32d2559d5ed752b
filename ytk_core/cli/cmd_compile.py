"""`ytk embedded compile`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from .embedded import app
from .options import ArchOpt, EngineOpt, JsonOpt, PrecisionOpt, WorkerOpt

SIMULATED_NOTE = "SIMULATED: figures come from the engine backend's cost model, not from hardware"


@app.command("compile")
def compile_(
    arch: ArchOpt,
    onnx: Annotated[Path, typer.Option("--onnx", help="ONNX from prepare")],
    npz: Annotated[Path, typer.Option("--npz", help="inputs from prepare")],
    output: Annotated[Path, typer.Option("-o", "--output", help="engine bundle to write (.tgz)")],
    precision: PrecisionOpt = "fp16",
    custom_plugin: Annotated[Optional[list[Path]], typer.Option(
        "--custom-plugin", help="plugin .so (repeatable)")] = None,
    iterations: Annotated[int, typer.Option("--iterations", help="benchmark iterations")] = 10,
    warmup: Annotated[int, typer.Option("--warmup", help="iterations run before measuring")] = 3,
    allow_unused_plugin: Annotated[bool, typer.Option(
        "--allow-unused-plugin", help="a --custom-plugin that serves no custom-op node is a warning, "
                                      "not an error")] = False,
    allow_unverified: Annotated[bool, typer.Option(
        "--allow-unverified", help="a real engine may load a plugin the admission gate could not run (no GPU of "
        "its SM here, no region reference); a rejected plugin is never loaded")] = False,
    engine: EngineOpt = None,
    worker: WorkerOpt = None,
    top: Annotated[int, typer.Option("--top", help="slowest layers to list")] = 5,
    json_: JsonOpt = False,
) -> None:
    """Build an engine on the target, profile it, and write the engine bundle.

    Every custom-op node of the ONNX must be served by one --custom-plugin .so, matched on
    (namespace, name, version), input arity and dtypes before anything is built; a --custom-plugin
    that serves no node is an error (exit 2) unless --allow-unused-plugin. A real engine loads only
    plugins the admission gate admitted (<plugin>.so.admission.json, written by build-plugin
    --candidates; a .so without one is gated here when a GPU of its SM and the candidates.json beside
    the ONNX are at hand): a rejected plugin exits 5, an unverified one exits 2 unless --allow-unverified.
    With --worker (or [workers] kronos in ytk.toml) the engine is built and profiled by that Kronos
    worker on its target; killed, the same command again resumes its job.
    """
    from ..kronos.remote_compile import resolve_worker
    from ..runtime import emit_json
    from ..stages.compile import run_compile

    out = run_compile(arch, precision, onnx, npz, output, custom_plugin or [], iterations, warmup, engine,
                      allow_unused_plugin=allow_unused_plugin, allow_unverified=allow_unverified,
                      worker=resolve_worker(worker))
    if json_:
        emit_json({"bundle": str(out.bundle), "manifest": out.manifest.model_dump(mode="json"),
                   "totals": out.totals(), "plugin_nodes": out.plugin_nodes, "warnings": out.warnings,
                   "engine_selection": out.engine_selection})
        return
    print_summary(out, top)


def print_summary(out, top: int = 5) -> None:  # type: ignore[no-untyped-def]
    """The short human summary of a compile (stdout)."""
    from ..runtime import stdout

    m, t = out.manifest, out.totals()
    sim = " (SIMULATED)" if m.simulated else ""
    stdout.print(f"wrote {out.bundle}  label {m.label!r}", highlight=False, markup=False)
    stdout.print(f"engine   {m.engine_backend} {m.engine_version} on {m.device}, {m.precision}, {m.arch}",
                 highlight=False, markup=False)
    if m.simulated:
        stdout.print(SIMULATED_NOTE, highlight=False, markup=False)
    stdout.print(f"latency  median {t['median_ms']:.3f} ms  (min {t['min_ms']:.3f}, max {t['max_ms']:.3f} over "
                 f"{t['iterations']} iterations){sim}", highlight=False, markup=False)
    stdout.print(f"layers   {t['layers']} (per-layer medians sum to {t['layers_sum_ms']:.3f} ms; "
                 f"{t['reformat_layers']} reformat layers){sim}", highlight=False, markup=False)
    if out.plugin_nodes:
        parts = [f"{name} x{len(nodes)}" for name, nodes in sorted(out.plugin_nodes.items())]
        stdout.print(f"plugins  {len(out.plugin_nodes)} resolved: {', '.join(parts)}", highlight=False, markup=False)
    if m.taps_exposed_as:
        note = f" ({m.taps_note})" if m.taps_note else ""
        stdout.print(f"taps     debug taps exposed as {m.taps_exposed_as}{note}", highlight=False, markup=False)
    if top > 0:
        tab = Table(title=f"slowest layers{sim}", title_justify="left")
        tab.add_column("ms", justify="right")
        tab.add_column("%", justify="right")
        tab.add_column("type")
        tab.add_column("layer")
        total = out.profile.total_ms or 1.0
        for lay in sorted(out.profile.layers, key=lambda x: -x.median_ms)[:top]:
            tab.add_row(f"{lay.median_ms:.3f}", f"{100 * lay.median_ms / total:.1f}", lay.type, lay.name)
        stdout.print(tab)
