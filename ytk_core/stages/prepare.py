"""``ytk embedded prepare``: trace + export (step 1) and, with --plugin, carve (step 3)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from ytk_hookspecs.models import CarveRequest, CarveResult, TensorInfo, TraceRequest, TraceResult
from ytk_hookspecs.models.base import sha256_file

from ..artifacts import PREPARE_MANIFEST, PrepareManifest
from ..frontend.export import torch_env
from ..runtime import emit_json, runtime, stdout
from .taps import TAPS_FILE, TAPS_REFERENCE


def _rel(p: Path, base: Path) -> str:
    try:
        return str(Path(p).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(Path(p).resolve())


@dataclass
class PrepareOutcome:
    trace: TraceResult
    carve: CarveResult | None
    manifest: PrepareManifest
    prep_dir: Path
    wall_s: float


def do_prepare(model: Path, onnx_out: Path, npz_out: Path, reference_out: Path, selectors: list[str],
               debug_taps: bool = False) -> PrepareOutcome:
    """Trace (and carve) without printing; the CLI and autoloop both call this. ``debug_taps``: every
    plugin boundary becomes a graph output with its fp32 reference kept (:mod:`.taps`)."""
    rt = runtime()
    t0 = time.perf_counter()
    prep_dir = onnx_out.parent if str(onnx_out.parent) else Path(".")
    if selectors:
        # Parse every selector before the (slow) export so a typo costs nothing.
        from ..frontend.selectors import parse_selector

        for s in selectors:
            parse_selector(s)
    elif debug_taps:
        from ..errors import UsageError

        raise UsageError("--debug-taps taps the boundaries of carved regions: pass --plugin selectors too")
    front = rt.frontend()
    from ..frontend.carve import carve_artifact_paths
    from ..frontend.trace import check_writable

    check_writable(onnx_out, npz_out, reference_out, prep_dir / PREPARE_MANIFEST)
    from ..staging import Staged

    # Everything lands at once or not at all: a failed trace or carve leaves the directory's previous
    # outputs (an earlier carve's ONNX, candidates and manifest) exactly as they were.
    with Staged(prep_dir, marker=prep_dir / PREPARE_MANIFEST) as st:
        trace: TraceResult = front.backend.impl.trace(
            TraceRequest(model_path=model, onnx_out=st.path(onnx_out), npz_out=st.path(npz_out),
                         reference_out=st.path(reference_out)), rt.context(front, "trace", st.dir))
        carve: CarveResult | None = None
        if selectors:
            carve = front.backend.impl.carve(
                CarveRequest(prepare_dir=st.dir, onnx=trace.onnx, fx_nodes=trace.fx_nodes, selectors=selectors),
                rt.context(front, "carve", st.dir))
            if debug_taps:
                from .taps import add_taps

                with rt.context(front, "carve", st.dir).progress("adding debug taps at every plugin boundary"):
                    add_taps(carve.onnx, st.dir, carve.candidates, trace.reference)
            carve = carve.model_copy(update={k: st.final(getattr(carve, k)) for k in ("plugins", "candidates", "onnx")})
        trace = trace.model_copy(update={k: st.final(getattr(trace, k)) for k in ("onnx", "npz", "reference",
                                                                                  "fx_nodes")})
        manifest = PrepareManifest(
            model=str(Path(model).resolve()), model_sha256=sha256_file(model), env=torch_env(),
            onnx=_rel(onnx_out, prep_dir), npz=_rel(npz_out, prep_dir), reference=_rel(reference_out, prep_dir),
            fx_nodes=_rel(trace.fx_nodes, prep_dir), plugins=_rel(carve.plugins, prep_dir) if carve else None,
            candidates=_rel(carve.candidates, prep_dir) if carve else None, selectors=list(selectors),
            torch_version=_torch_version(), taps=TAPS_FILE if debug_taps else None,
            output_labels=dict(trace.output_labels))
        manifest.write(st.path(prep_dir / PREPARE_MANIFEST))
        st.commit(replaced=carve_artifact_paths(prep_dir) + [prep_dir / TAPS_FILE, prep_dir / TAPS_REFERENCE])
    return PrepareOutcome(trace=trace, carve=carve, manifest=manifest, prep_dir=prep_dir,
                          wall_s=time.perf_counter() - t0)


def run_prepare(model: Path, onnx_out: Path, npz_out: Path, reference_out: Path, selectors: list[str],
                json_out: bool, debug_taps: bool = False) -> None:
    out = do_prepare(model, onnx_out, npz_out, reference_out, selectors, debug_taps)
    trace, carve, manifest, prep_dir, wall = out.trace, out.carve, out.manifest, out.prep_dir, out.wall_s
    if json_out:
        emit_json({"trace": trace.model_dump(mode="json"), "carve": carve.model_dump(mode="json") if carve else None,
                   "prepare": manifest.model_dump(mode="json"), "wall_s": round(wall, 2)})
        return
    t = Table(title=f"prepare: {model}", title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("value")
    t.add_row("FX nodes", str(trace.fx_node_count))
    t.add_row("ONNX nodes", str(trace.onnx_node_count))
    t.add_row("module coverage", f"{trace.coverage * 100:.1f}% of ONNX compute nodes map to a torch module")
    t.add_row("inputs", ", ".join(f"{i.name} {list(i.shape)}" for i in trace.inputs))
    def shown(o: TensorInfo) -> str:  # a dict's key first, where the model names the output
        label = trace.output_labels.get(o.name)
        return f"{label} = {o.name} {list(o.shape)}" if label else f"{o.name} {list(o.shape)}"

    t.add_row("outputs", ", ".join(shown(o) for o in trace.outputs))
    for label, p in (("onnx", onnx_out), ("inputs npz", npz_out), ("reference npz", reference_out),
                     ("fx nodes", trace.fx_nodes), ("manifest", prep_dir / PREPARE_MANIFEST)):
        t.add_row(label, str(p))
    if manifest.taps:
        t.add_row("debug taps", f"{prep_dir / manifest.taps}: every plugin boundary is a graph output (compile "
                                "ships them in the bundle; verify names the region that drifts)")
    t.add_row("wall time", f"{wall:.1f} s")
    stdout.print(t)
    if carve is not None:
        from ..frontend.carve_report import print_carve_table

        print_carve_table(carve)


def _torch_version() -> str:
    import torch

    return str(torch.__version__)
