"""The autoloop's final report: markdown, two SVG charts, and the JSON for pipelines."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ytk_hookspecs.models import Versioned
from ytk_hookspecs.models.base import sha256_file, write_text_atomic

from ..errors import UsageError
from ..runtime import runtime
from ..stages.verify import VerifyReport, run_verify
from .charts import RoundPoint, latency_by_round, regions_before_after
from .state import AutoloopState, PluginRecord

REPORT_DIR = "report"


class ShipPlugin(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    selector: str
    so: str = Field(description="absolute path of the plugin library")
    sha256: str | None = None


class ShipList(Versioned):
    """What to ship from an autoloop: the final engine bundle, the plugin libraries it loads (with the
    selector each one replaces), and the one command that rebuilds that engine from them. In the workdir's
    list the paths are absolute; in an ``--export`` folder's ``ship.json`` they are relative to that folder,
    and its command runs there."""

    engine_bundle: str
    onnx: str = Field(description="the carved ONNX the engine was built from")
    npz: str = Field(description="the inputs the engine was compiled and benchmarked with")
    arch: str
    precision: str
    engine: str = Field(description="the engine backend that built it")
    worker: str | None = Field(None, description="the Kronos worker it was built on (the rebuild goes there too)")
    plugins: list[ShipPlugin] = Field(default_factory=list)
    reproduce: str = Field(description="a shell command that rebuilds the final engine bundle from these files")
    engine_sha256: str | None = Field(None, description="the engine bundle's sha256 when it was compiled")
    simulated: bool = Field(False, description="built by a simulated engine or generator (the mock): placeholder "
                                               "plugins and a simulated engine, not for deployment")


def _per_site(ms: list[float], shown: int = 4) -> str:
    """The first sites' kernel times, and how many more there are (the full list is in autoloop.json)."""
    if not ms:
        return "-"
    more = f", ... ({len(ms)} sites)" if len(ms) > shown else ""
    return ", ".join(f"{t:.4f}" for t in ms[:shown]) + more


def _generator_cell(p: PluginRecord) -> str:
    """Which generator made a plugin's kernel, and why the ones before it in the chain did not."""
    if not p.generator:
        return "-"
    notes = "; ".join(p.generator_notes)
    return f"{p.generator} (after {notes})" if notes else p.generator


def rebuild_command(ship: ShipList) -> str:
    cmd = ["ytk", "embedded", "compile", "-a", ship.arch, "-p", ship.precision, "--engine", ship.engine,
           "--onnx", ship.onnx, "--npz", ship.npz, "-o", "final.tgz"]
    if ship.worker:  # built on a Kronos worker: rebuilt there too
        cmd += ["--worker", ship.worker]
    for p in ship.plugins:
        cmd += ["--custom-plugin", p.so]
    return shlex.join(cmd)


def ship_list(state: AutoloopState, workdir: Path, simulated_engine: bool) -> ShipList | None:
    best = state.best
    if best is None:
        return None
    w = Path(workdir).resolve()
    prep = w / best.prepare_dir
    plugins = [ShipPlugin(name=p.name, selector=p.selector, so=str(w / p.so), sha256=p.so_sha256)
               for p in best.plugins if p.so]
    compiles = [*state.round0_compiles, *(c for r in state.rounds for c in r.compiles)]
    sha = next((c.sha256 for c in compiles if c.bundle == best.bundle), None)
    simulated = simulated_engine or (bool(plugins) and simulated_generator(state))
    ship = ShipList(engine_bundle=str(w / best.bundle), engine_sha256=sha, onnx=str(prep / "model.onnx"),
                    npz=str(prep / "model.npz"), simulated=simulated,
                    arch=state.arch, precision=state.precision, engine=state.backends.engine,
                    worker=state.worker, plugins=plugins, reproduce="")
    return ship.model_copy(update={"reproduce": rebuild_command(ship)})


def export_replaces(dest: Path, workdir: Path) -> list[Path]:
    """The files an export into ``dest`` replaces (an earlier export's), after checking ``dest`` may take one:
    a new or empty folder, or one holding an earlier export (its ``ship.json``), outside the workdir."""
    dest, w = Path(dest), Path(workdir)
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"--export {dest} is a file; name a folder to copy what ships into (it is created)")
    rd, rw = dest.resolve(), w.resolve()
    if rd == rw or rw in rd.parents:
        raise UsageError(f"--export {dest} lies in the workdir {w}; name a folder outside it")
    if not dest.is_dir() or not any(dest.iterdir()):
        return []
    old = dest / "ship.json"
    try:
        prev = ShipList.read(old)
    except Exception:
        raise UsageError(f"--export {dest} is not empty and holds no earlier export (ship.json): name a new or "
                         "empty folder, so that none of your files is overwritten") from None
    from ytk_hookspecs.models import AdmissionRecord

    # an export's paths are relative to it (older exports wrote absolute ones: dest / absolute is absolute)
    files = [dest / prev.engine_bundle, dest / prev.onnx, dest / prev.npz, dest / "plugins.json"]
    for p in prev.plugins:
        files += [dest / p.so, AdmissionRecord.path_for(dest / p.so)]
    try:  # each region's .pt2 the earlier export copied, as its plugins.json names them
        from ytk_hookspecs.models import PluginsFile

        files += [dest / e.kernelgen_input for e in PluginsFile.read(dest / "plugins.json").plugins
                  if e.kernelgen_input]
    except Exception:  # noqa: BLE001  -- no readable plugins.json: those files stay
        pass
    return [f for f in files if rd in f.resolve().parents]  # never a file outside the old export


def _copy_checked(src: str | Path, dst: Path, sha256: str | None, what: str) -> None:
    """Copy ``src`` and check the copy against the hash recorded when it was made: a file changed since (a
    plugin edited after its admission) is never shipped."""
    shutil.copyfile(src, dst)
    if sha256 is not None and sha256_file(dst) != sha256:
        raise UsageError(f"{what} {src} changed since the autoloop recorded it (sha256 {sha256[:12]}...): not "
                         "exported; run the autoloop again with --fresh to rebuild it")


def export_outputs(ship: ShipList, dest: Path, workdir: Path) -> list[Path]:
    """Copy exactly what ships into ``dest``, all at once (a staging directory swapped in): the engine
    bundle, the carved ONNX with its inputs, ``plugins.json`` and each region's ``.pt2``, ``plugins/<name>.so``
    with its admission verdict (``<name>.so.admission.json``, so a real engine loads the copy without gating
    it again) and ``ship.json`` (this list, pointing at the copies, its rebuild command too). Returns every
    file written."""
    from ytk_hookspecs.models import AdmissionRecord

    from ..staging import Staged

    dest = Path(dest)
    replaced = export_replaces(dest, workdir)
    written: list[Path] = []
    with Staged(dest, marker=dest / "ship.json") as st:
        bundle = st.path(dest / Path(ship.engine_bundle).name)
        _copy_checked(ship.engine_bundle, bundle, ship.engine_sha256, "the engine bundle")
        onnx = st.path(dest / "model.onnx")
        shutil.copyfile(ship.onnx, onnx)
        npz = st.path(dest / "model.npz")
        shutil.copyfile(ship.npz, npz)
        # the carve's record of the custom-op nodes and each region's program (the plugin's fp32
        # reference, what a simulated engine evaluates): the ONNX's own prepare dir, in small
        prep = Path(ship.onnx).parent
        if (prep / "plugins.json").is_file():
            from ytk_hookspecs.models import PluginsFile

            shutil.copyfile(prep / "plugins.json", st.path(dest / "plugins.json"))
            written.append(dest / "plugins.json")
            for entry in PluginsFile.read(prep / "plugins.json").plugins:
                if entry.kernelgen_input and (prep / entry.kernelgen_input).is_file():
                    ref = st.path(dest / entry.kernelgen_input)
                    ref.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(prep / entry.kernelgen_input, ref)
                    written.append(dest / entry.kernelgen_input)
        plugins = []
        for p in ship.plugins:
            so = st.path(dest / "plugins" / f"{p.name}.so")
            so.parent.mkdir(parents=True, exist_ok=True)
            _copy_checked(p.so, so, p.sha256, f"plugin {p.name}")
            plugins.append(p.model_copy(update={"so": f"plugins/{so.name}"}))
            verdict = AdmissionRecord.path_for(p.so)
            if verdict.is_file():
                shutil.copyfile(verdict, AdmissionRecord.path_for(so))
                written.append(AdmissionRecord.path_for(st.final(so)))
        # paths relative to the export, so the folder can be moved or shipped whole and rebuilt where it lands
        copied = ship.model_copy(update={"engine_bundle": st.final(bundle).name, "onnx": "model.onnx",
                                         "npz": "model.npz", "plugins": plugins})
        copied = copied.model_copy(update={"reproduce": rebuild_command(copied)})
        copied.write(st.path(dest / "ship.json"))
        st.commit(replaced=replaced)
    return [dest / copied.engine_bundle, dest / copied.onnx, dest / copied.npz, *[dest / p.so for p in plugins],
            *written, dest / "ship.json"]


class AutoloopReport(Versioned):
    """What ``ytk autoloop --json`` prints. Schema 2 added ``numerics_passed``, ``stop_reason`` and
    ``on_real_gpu``."""

    SCHEMA_VERSION: ClassVar[int] = 2

    workdir: str
    state: AutoloopState
    baseline_ms: float | None
    final_ms: float | None
    speedup: float | None
    simulated: bool
    verify: VerifyReport | None = None
    report_md: str | None = None
    charts: list[str] = Field(default_factory=list)
    ship: ShipList | None = None
    stale: list[str] = Field(default_factory=list, description="what changed since the recorded results were "
                             "measured, when --resume went on with them anyway (empty: nothing changed)")
    numerics_passed: bool | None = Field(None, description="whether the final engine passed numerics against "
                                         "the model's reference (verify); None: not verified")
    stop_reason: str = Field("", description="why the loop stopped (the state's stop_reason)")
    on_real_gpu: str | None = Field(None, description="with a simulated generator: how many of the plugged "
                                    "regions the real generators would take, and why not the rest")


def simulated_generator(state: AutoloopState) -> bool:
    """Whether every kernel generator of the loop is a simulator (its plugins compute the reference, so a
    numerics pass checks the carve and the plumbing, not a kernel)."""
    return runtime().manager.all_simulated(state.backends.chain())


def real_gpu_line(state: AutoloopState, kept: list[PluginRecord]) -> str | None:
    """With a simulated generator, one line on what a GPU run would plug of ``kept``: the real generators the
    automatic choice ranks, how many of the plugged regions they take, and the commonest reasons for the
    rest (None when the loop's generator is real, or no round asked)."""
    from ..propose.models import RealSupport
    from ..propose.report import real_support_line

    asked = [r.real_support for r in state.rounds if r.real_support is not None]
    if not asked or not kept:
        return None
    merged = RealSupport(chain=asked[-1].chain, takes=[n for a in asked for n in a.takes],
                         refuses={n: why for a in asked for n, why in a.refuses.items()})
    return real_support_line(merged, [p.name for p in kept], "plugged regions")


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    """A markdown table; a '|' or a line break inside a cell (a reason, a note) would end the row early."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(" ".join(c.replace("|", "\\|").split("\n")) for c in r) + " |" for r in rows]
    return "\n".join(out)


#: the round stages as a user knows them (the state's "prepare" stage is the carve)
_STAGE_COLUMNS = [("propose", "propose"), ("prepare", "carve"), ("kernelgen", "kernelgen"), ("build", "build"),
                  ("compile", "compile"), ("verify", "verify"), ("decide", "decide")]


def _time_table(state: AutoloopState) -> list[str]:
    """Where the loop's wall time went, per round and stage (seconds)."""
    rows = []
    if state.round0_s:
        r0 = state.round0_s
        total = sum(r0.values())
        rows.append(["0"] + [f"{r0['prepare']:.1f}" if k == "prepare" and "prepare" in r0 else
                             f"{r0['compile']:.1f}" if k == "compile" and "compile" in r0 else "-"
                             for k, _ in _STAGE_COLUMNS] + [_share(state.round0_bookkeeping_s, total), f"{total:.1f}"])
    for r in state.rounds:
        if r.stage_s:
            cells = [f"{r.stage_s[k]:.1f}" if k in r.stage_s else "-" for k, _ in _STAGE_COLUMNS]
            if r.admission_s and "build" in r.stage_s:
                b = [k for k, _ in _STAGE_COLUMNS].index("build")
                cells[b] += f" ({r.admission_s:.1f})"
            total = sum(r.stage_s.values())
            rows.append([str(r.index)] + cells + [_share(r.bookkeeping_s, total), f"{total:.1f}"])
    if not rows:
        return []
    return ["## Time per stage (s)", "", "Round 0's carve column is the model's trace and export; compile includes "
            "writing the engine bundle; in brackets, the part of build the admission gate took. Bookkeeping is "
            "the part of the round's stages spent writing engine bundles and saving the loop's state (already "
            "counted in their columns), with its share of the round.", "",
            _md_table(["round"] + [c for _, c in _STAGE_COLUMNS] + ["bookkeeping", "total"], rows), ""]


def _share(part: float, total: float) -> str:
    return f"{part:.1f} ({100 * part / total:.0f}%)" if total > 0 else f"{part:.1f}"


def dropped_label(c: PluginRecord) -> str:
    """``Name (stage)``: which candidate, and where the loop let it go."""
    return f"{c.name} ({c.dropped_at})" if c.dropped_at else c.name


def build_report(state: AutoloopState, workdir: Path, simulated: bool, host_timing: bool,
                 stale: list[str] | None = None) -> AutoloopReport:
    """``stale``: what changed since the recorded results were measured, when ``--resume`` went on anyway."""
    w = Path(workdir)
    stale = stale or []
    rdir = w / REPORT_DIR
    rdir.mkdir(parents=True, exist_ok=True)
    base, best = state.baseline, state.best
    verify = None
    if base and best:
        ref = w / base.prepare_dir / "model.reference.npz"
        bundles = [w / base.bundle] + ([w / best.bundle] if best.bundle != base.bundle else [])
        verify = run_verify(ref, bundles, no_host=not host_timing)
        write_text_atomic(rdir / "verify.json", verify.model_dump_json(indent=2))
    unit = "SIMULATED figures (mock target)" if simulated else f"measured on the {state.backends.engine} engine"
    points = [RoundPoint("base", base.ms, base.ms)] if base else []
    running = base.ms if base else 0.0
    for r in state.rounds:
        if r.gain_ms is not None and r.gain_ms > 0 and r.result_ms is not None:
            running = r.result_ms
        points.append(RoundPoint(f"round {r.index}", r.result_ms, running))
    kept = best.plugins if best else []
    charts, chart_note = _charts(rdir, points, [(p.name, p.region_ms, p.plugin_ms) for p in kept], unit)
    speedup = base.ms / best.ms if base and best and best.ms else None
    md = [f"# ytk autoloop report{' (SIMULATED)' if simulated else ''}", "",
          f"- model: `{state.model}`", f"- target: `{state.arch}`, precision {state.precision}",
          f"- backends: engine `{state.backends.engine}`, kernelgen `{state.backends.kernelgen}`, "
          f"builder `{state.backends.builder}`",
          f"- wall time: {state.elapsed_s / 60:.1f} min; stopped because: {state.stop_reason or 'not finished'}", ""]
    if stale:
        md += ["> **Resumed with `--resume` although " + "; ".join(stale) + ".** The figures below were measured "
               "before that change; run with `--fresh` to measure the model as it is now.", ""]
    if simulated:
        device = next((r.device for r in verify.rows if r.kind == "bundle"), "") if verify is not None else ""
        device = device.removesuffix(" (simulated)") or f"target {state.arch}"
        md += [f"> Every latency here comes from the {state.backends.engine} backend's simulated {device} (a cost "
               "model), not from hardware.", ""]
    on_gpu = real_gpu_line(state, kept)
    if on_gpu:
        md += [f"> The simulated generator plugged every region; {on_gpu}.", ""]
    if base and best:
        md += ["## Result", "", f"**{base.ms:.3f} ms -> {best.ms:.3f} ms ({speedup:.2f}x)**"
               f"{' (SIMULATED)' if simulated else ''} with "
               f"{len(kept)} plugin(s): {', '.join(p.name for p in kept) or 'none'}.", ""]
    if verify is not None:
        md += ["## Benchmark (verify)", "", _md_table(
            ["Implementation", "Iterations", "Min", "Mean", "p50", "p95", "p99", "Max"],
            [[r.implementation, str(r.iterations), f"{r.min_ms:.3f}", f"{r.mean_ms:.3f}", f"{r.p50_ms:.3f}",
              f"{r.p95_ms:.3f}", f"{r.p99_ms:.3f}", f"{r.max_ms:.3f}"] for r in verify.rows]), "",
               "## Numerics against torch", ""] + ([
               "The simulated generator's plugins compute the region's reference: a pass checks the carve and "
               "the plumbing, not a kernel's precision.", ""] if simulated_generator(state) else []) + [_md_table(
            ["Implementation", "Output", "max abs err", "max rel err", "cosine", "pass"],
            [[n.implementation, verify.output_text(n.output),
              f"{n.max_abs_err:.3g}" if n.max_abs_err is not None else "-",
              f"{n.max_rel_err:.3g}" if n.max_rel_err is not None else "-",
              f"{n.cosine:.6f}" if n.cosine is not None else "-", "yes" if n.passed else "NO"]
             for n in verify.numerics]), ""]
    md += ["## Rounds", "", _md_table(
        ["round", "p50 ms", "gain ms", "added", "dropped (stage)", "note"],
        [["0", f"{base.ms:.3f}" if base else "-", "-", "-", "-", "baseline"]] + [
            [str(r.index), f"{r.result_ms:.3f}" if r.result_ms is not None else "-",
             f"{r.gain_ms:.3f}" if r.gain_ms is not None else "-",
             ", ".join(c.name + (" (re-optimized)" if c.replaces else "")
                       for c in r.candidates if c.status == "kept") or "-",
             ", ".join(dropped_label(c) for c in r.candidates if c.status == "dropped") or "-", r.note or ""]
            for r in state.rounds]), ""]
    md += _time_table(state)
    dropped = [(r.index, c) for r in state.rounds for c in r.candidates if c.status == "dropped"]
    if dropped:
        md += ["## Dropped candidates", "", "A candidate refused or beaten at any stage is dropped alone; the round "
               "goes on with the rest.", "", _md_table(
            ["round", "plugin", "stage", "why", "selector"],
            [[str(i), c.name, c.dropped_at or "-", c.reason, f"`{c.selector}`"]
             for i, c in dropped]), ""]
    if kept:
        md += ["## Plugins in the final engine", "", _md_table(
            ["plugin", "sites", "region ms before", "plugin ms after", "kernel ms/site", "generator", "selector",
             "note"],
            [[p.name, str(p.sites), f"{p.region_ms:.3f}", f"{p.plugin_ms:.3f}" if p.plugin_ms is not None else "-",
              _per_site(p.kernel_ms_per_site), _generator_cell(p), f"`{p.selector}`", p.reason]
             for p in kept]), ""]
    ship = ship_list(state, w, simulated)
    if ship is not None:
        md += ["## What to ship", ""]
        if ship.simulated:
            md += ["> SIMULATED: the engine bundle and plugins below come from a simulated backend (placeholder "
                   "plugins, no GPU code): they rehearse the flow and are not for deployment.", ""]
        md += [f"- engine bundle: `{ship.engine_bundle}`", f"- carved ONNX: `{ship.onnx}`"]
        md += [f"- plugin `{p.name}`: `{p.so}` (replaces `{p.selector}`)" for p in ship.plugins]
        md += ["", "Rebuild the final engine from them:", "", "```bash", ship.reproduce, "```", "",
               "`ytk autoloop ... --export DIR` copies exactly these into DIR.", ""]
    md += ["## Charts", ""]
    md += ([f"![{title}]({name}) ([PNG]({Path(name).with_suffix('.png')}))\n" for title, name in
            (("latency by round", "latency.svg"), ("time per region", "regions.svg"))
            if rdir / name in charts] or [chart_note])
    md += ["", "## Event log", ""] + [f"- {h}" for h in state.history] + [""]
    write_text_atomic(rdir / "autoloop_report.md", "\n".join(md))
    return AutoloopReport(workdir=str(w), state=state, baseline_ms=base.ms if base else None,
                          final_ms=best.ms if best else None, speedup=speedup, simulated=simulated, verify=verify,
                          report_md=str(rdir / "autoloop_report.md"),
                          charts=[str(c) for c in charts], ship=ship, stale=stale, on_real_gpu=on_gpu,
                          numerics_passed=verify.passed if verify is not None else None,
                          stop_reason=state.stop_reason)


def _charts(rdir: Path, points: list[RoundPoint], regions: list[tuple[str, float, float | None]],
            unit: str) -> tuple[list[Path], str]:
    """Draw the two charts (SVG + PNG each); without matplotlib, none and the note that says why."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return [], "(no charts: matplotlib is not installed here; `pip install matplotlib` draws them)"
    written = latency_by_round(points, unit, rdir / "latency.svg")
    written += regions_before_after(regions, unit, rdir / "regions.svg")
    return written, ""
