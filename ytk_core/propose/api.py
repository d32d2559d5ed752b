"""``propose()``: the Python API behind ``ytk embedded propose`` (autoloop calls it directly)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ytk_hookspecs.models import ArchSpec, ArchSpecError, FxNodesFile, GpuProperties
from ytk_hookspecs.models.base import sha256_file

from ..errors import UsageError
from ..thresholds import profile_disagreement
from .attribution import attribute
from .given import given_tables
from .measurement import Measurement, load_measurement
from .models import NotWorthRow, Proposal, ProposeOptions, ProposeReport, RealSupport
from .modules import ModuleIndex, load_fx_nodes
from .onnx_graph import OnnxGraph
from .plugged import load_carve, plugged_proposals, plugin_nodes
from .proposals import Judge, build_tables, glue_row, summary_line
from .regions import discover_regions
from .tables import class_table, module_table

#: Engines whose layer times are TensorRT layer times (the mock simulates TensorRT 8.6).
_TRT_ENGINES = {"tensorrt", "mock", "trtexec"}


def engine_word(engine: str) -> str:
    """How the tables name the measured time: "TRT ms" for TensorRT (and the mock simulating it)."""
    if engine in _TRT_ENGINES:
        return "TRT"
    return engine if engine and engine != "unknown" else "engine"


def _gpu(arch: str | None, warnings: list[str]) -> GpuProperties | None:
    if not arch:
        return None
    try:
        spec = ArchSpec.parse(arch)
    except ArchSpecError as e:
        warnings.append(f"arch {arch!r} not understood ({e}); roofline not judged")
        return None
    if spec.gpu is None:
        warnings.append(f"no GPU limits on record for sm{spec.sm}; roofline not judged")
    return spec.gpu


def propose(profile: str | Path, onnx: str | Path, fx_nodes: str | Path, plugins: str | Path | None = None,
            options: ProposeOptions | None = None, *, layer_info: str | Path | None = None,
            depth: int = 3) -> ProposeReport:
    """Attribute a measured profile to torch modules and say what to plug.

    ``profile`` is an engine bundle (``.tgz``) or a trtexec ``--exportProfile`` JSON (then pass
    ``layer_info`` and ``options.arch`` for the best attribution and a roofline). ``plugins`` is the
    carve's plugins.json (default: beside the ONNX). Raises ``UsageError`` on bad input.
    """
    opts = options or ProposeOptions()
    m = load_measurement(profile, layer_info, arch=opts.arch, precision=opts.precision)
    return propose_measurement(m, Path(onnx), Path(fx_nodes), Path(plugins) if plugins else None, opts, depth=depth)


def propose_measurement(m: Measurement, onnx: Path, fx_nodes: Path, plugins: Path | None, opts: ProposeOptions,
                        *, depth: int = 3) -> ProposeReport:
    """``propose()`` for an already loaded measurement (a bundle or trtexec files)."""
    warnings: list[str] = []
    graph = OnnxGraph.load(onnx)
    fx = load_fx_nodes(fx_nodes)
    mods = ModuleIndex(fx, present=set(graph.by_name))
    carve = load_carve(onnx, plugins)
    pnodes = plugin_nodes(graph, carve)
    _check_files(m, graph, fx, onnx, pnodes, warnings)
    att = attribute(m.layers, graph, mods, pnodes, m.precision, m.layer_info)
    if opts.min_pct is not None:  # --min-ms 2%: a share of this profile's time
        opts = opts.model_copy(update={"min_ms": opts.min_pct / 100.0 * att.total_ms})
    disagree = profile_disagreement(att.total_ms, m.end_to_end_ms, m.other_runs_ms)
    if disagree:
        warnings.append(disagree)
    lost = sum(att.glue.get(c, [0.0])[0] for c in ("unresolved-layer", "unmapped-onnx-node"))
    if att.total_ms > 0 and lost > 0.2 * att.total_ms:
        warnings.append(f"{100 * lost / att.total_ms:.0f}% of the time is in layers that match no ONNX node owned by "
                        "a torch module: is this the ONNX (and fx_nodes.json) the engine was built from? For a raw "
                        "trtexec profile, --layer-info with detailed layer info helps")
    word = engine_word(m.engine)
    plugged = plugged_proposals(graph, carve, pnodes, att)
    if opts.plugins:
        props, rows, w = given_tables(opts.plugins, fx, mods, att, plugged, graph)
        warnings += w
        rows.append(glue_row(att))
    else:
        regions, outside = discover_regions(graph, mods, att.node_ms, carve.site_paths if carve else None)
        _mark_overlaps(regions, carve, pnodes)
        judge = Judge(graph=graph, mods=mods, att=att, gpu=_gpu(m.arch, warnings), precision=m.precision,
                      options=opts, engine_word=word)
        new, rows = build_tables(judge, regions, outside, {p.name for p in plugged})
        warnings += judge.warnings
        props = plugged + new
    real = None
    if opts.kernelgen is not None and not opts.plugins:
        real = _ask_kernelgen(props, rows, opts.kernelgen, m.arch, m.precision, warnings)
    from ..target import off_target_note

    off = off_target_note(m.device, m.arch, m.simulated)
    if off:
        warnings.append(off)
    cand_ms = sum(p.ms for p in props if not p.already_plugged)
    plugged_ms = sum(p.ms for p in props if p.already_plugged)
    return ProposeReport(
        source=str(m.source), source_label=m.label, engine=m.engine, engine_version=m.engine_version,
        device=m.device, arch=m.arch, precision=m.precision, simulated=m.simulated, onnx=str(onnx),
        fx_nodes=str(fx_nodes), plugins_file=str(carve.path) if carve else None, total_ms=att.total_ms,
        end_to_end_ms=m.end_to_end_ms, attributed_ms=att.attributed_ms, glue_ms=att.glue_ms,
        candidates_ms=cand_ms, plugged_ms=plugged_ms, proposals=props, not_worth=rows, glue=att.glue_items(),
        class_table=class_table(mods, att), module_table=module_table(mods, att, depth), layers=att.layers,
        options=opts, summary=summary_line(props, att.total_ms, word, m.simulated), warnings=warnings,
        real_support=real)


def _ask_kernelgen(props: list[Proposal], rows: list[NotWorthRow], kernelgen: str, arch: str | None,
                   precision: str, warnings: list[str]) -> RealSupport | None:
    """Ask the selected generator about every new proposal (no GPU, no carve: the sketch only), and about
    the families left out as at roofline: a generator of the user's own may take only those (naive-dw's
    depthwise convs), and the user should hear that ``--roofline`` hides them rather than see no taker.
    When the selected generators are all simulated, also what the real ones would take (returned)."""
    from ..errors import YtkError
    from ..runtime import runtime
    from ..stages.supports import check_sketch

    try:
        spec = ArchSpec.parse(arch) if arch else None
        sel = runtime().select_chain("kernelgen", None if kernelgen == "auto" else kernelgen, spec,
                                     need_available=False)
    except (YtkError, ValueError) as e:
        warnings.append(f"kernel generator not asked: {str(e).splitlines()[0]}")
        return None
    for p in props:
        if p.already_plugged or p.sketch is None:
            continue
        ans = check_sketch(p.sketch, None, spec, precision, selection=sel)
        p.supported, p.support_why, p.support_certain, p.support_backend = (ans.supported, ans.why, ans.certain,
                                                                             ans.backend)
    for row in rows:
        answers = [check_sketch(sk, None, spec, precision, selection=sel) for sk in row.sketches]
        if answers:
            taken = [a for a in answers if a.supported]
            row.supported = bool(taken)
            row.supported_members = [m for m, a in zip(row.members, answers) if a.supported]
            row.support_why, row.support_backend = (taken or answers)[0].why, (taken or answers)[0].backend
    if not all(s.backend.info.simulated for s in sel):
        return None
    return _ask_real_chain([p for p in props if not p.already_plugged], spec, precision)


def _ask_real_chain(props: list[Proposal], spec: ArchSpec | None, precision: str) -> RealSupport:
    """What the real generators the automatic choice ranks would take of ``props``, from the sketches (a
    generator that cannot answer counts as refusing)."""
    from ..errors import YtkError
    from ..plugins.selection import chain_label, real_auto_chain
    from ..runtime import runtime
    from ..stages.supports import check_sketch

    chain = real_auto_chain(runtime().manager, "kernelgen")
    out = RealSupport(chain=chain_label(chain))
    for p in props:
        why = "no real kernel generator is installed"
        if chain and p.sketch is not None:
            try:
                ans = check_sketch(p.sketch, None, spec, precision, selection=chain)
            except YtkError as e:
                ans, why = None, str(e).splitlines()[0]
            if ans is not None and ans.supported:
                out.takes.append(p.name)
                continue
            if ans is not None:
                why = ans.why or "not supported"
        elif chain:
            why = "propose made no sketch of it to ask with"
        out.refuses[p.name] = " ".join(why.split())
    return out


def _mark_overlaps(regions: list[Any], carve: Any, pnodes: set[str]) -> None:
    """A region that contains, or lies inside, a plugged region cannot be carved beside it (the carve
    refuses two selectors claiming one node): say so instead of proposing it."""
    plugged_paths = set(carve.site_paths.values()) if carve is not None else set()
    for r in regions:
        if r.cannot is not None:
            continue
        hit = next((p for p in plugged_paths if p == r.path or p.startswith(r.path + ".") or
                    (p and r.path.startswith(p + "."))), None) if r.path else None
        if hit is None and pnodes & set(r.nodes):
            hit = next(iter(sorted(pnodes & set(r.nodes))))
        if hit is not None:
            r.cannot = f"overlaps the plugged region {hit}: re-carve without that plugin to plug this one instead"


def _check_files(m: Measurement, graph: OnnxGraph, fx: FxNodesFile, onnx: Path, pnodes: set[str],
                 warnings: list[str]) -> None:
    """Mismatched inputs give wrong attributions silently; say so loudly instead."""
    digest = sha256_file(onnx)
    if m.onnx_sha256 and m.onnx_sha256 != digest:
        # every layer would be attributed to the wrong nodes, or to none: a wrong answer, not a caveat
        raise UsageError(f"{m.label} was compiled from a different ONNX than {onnx} (sha256 differs), so its "
                         "layers cannot be attributed to that graph; pass the model.onnx of the prepare directory "
                         "the bundle was compiled from")
    if fx.onnx_sha256 and fx.onnx_sha256 != digest and not pnodes:
        warnings.append(f"fx_nodes.json was written for a different ONNX than {onnx}; pass the fx_nodes.json "
                        "prepare wrote beside it")
    named = [ly for ly in m.layers if ly.onnx_nodes or ly.metadata]
    if not named and m.engine not in _TRT_ENGINES:
        warnings.append(f"engine {m.engine!r} reports no ONNX nodes per layer; attribution relies on layer names")
