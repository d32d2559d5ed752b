"""From regions to the two tables: WHAT TO PLUG and NOT WORTH PLUGGING.

Order of judgement for each shape family: a region the kernel contract cannot express is reported
as such; a family the engine already runs near the arch's roofline is not worth a kernel (measured
time against bytes/bandwidth and FLOPs/throughput, never the op type alone); the rest fold into
candidates per op (``families.fold``), and what stays under ``--min-ms`` is reported as too small.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ytk_hookspecs.models import GpuProperties, RegionSketch

from .attribution import Attribution
from .families import Family, fold, group_families, tag_ambiguous
from .globs import synthesize
from .models import NotWorthRow, Proposal, ProposeOptions, RooflineFigures, SiteTime
from .modules import ModuleIndex
from .naming import op_label, remainder_label, spatial_suffix, unique, unique_labels
from .onnx_graph import OnnxGraph
from .regions import Region
from .roofline import is_weighted, region_cost, roofline

_GLUE_WHY = {
    "reformat": "reformats between regions",
    "engine-internal": "engine-internal copies",
    "unresolved-layer": "layers whose names match no ONNX node",
    "unmapped-onnx-node": "ONNX nodes no torch module owns",
}


@dataclass
class Judge:
    """Everything the table builders need, in one place."""

    graph: OnnxGraph
    mods: ModuleIndex
    att: Attribution
    gpu: GpuProperties | None
    precision: str
    options: ProposeOptions
    engine_word: str = "TRT"
    warnings: list[str] = field(default_factory=list)

    def site(self, r: Region) -> SiteTime:
        layers = sorted({ly for n in r.nodes for ly in self.att.node_layers.get(n, [])})
        return SiteTime(module_path=r.path, ms=r.ms, onnx_nodes=list(r.nodes), layers=layers,
                        input_shapes=[s for s in r.sig.get("inputs", []) if s is not None])

    def roofline(self, regions: list[Region], ms: float) -> RooflineFigures | None:
        if self.gpu is None:
            return None
        total_b = total_f = 0
        for r in regions:
            b, f = region_cost(self.graph, r.nodes, self.precision)
            if b is None or f is None:
                return None
            total_b += b
            total_f += f
        return roofline(total_b, total_f, ms, self.gpu, self.precision, launches=len(regions),
                        launch_ms=self.options.launch_ms)

    def selector(self, fam: Family, name: str) -> str:
        globs = synthesize([r.path for r in fam.regions], self.mods.instances(fam.cls))
        around = ":around" if fam.around else ""
        where = f"@where={','.join(globs)}" if globs else ""
        epilogue = "@epilogue" if fam.regions[0].epilogue else ""
        part = f"@part={fam.regions[0].part}" if fam.regions[0].part is not None else ""
        branches = "@branches" if fam.regions[0].branches else ""
        return f"{self.options.namespace}::{name}={fam.cls}{around}{where}{epilogue}{part}{branches}"


def build_tables(j: Judge, regions: list[Region], outside: list[str],
                 taken_names: set[str]) -> tuple[list[Proposal], list[NotWorthRow]]:
    """(new candidates sorted by time, NOT WORTH PLUGGING rows)."""
    rows: list[NotWorthRow] = []
    fams = group_families([r for r in regions if r.cannot is None])
    roof: dict[int, RooflineFigures | None] = {id(f): j.roofline(f.regions, f.ms) for f in fams}
    if j.gpu is None and fams:
        j.warnings.append("no target GPU known (arch missing or not in GPU_PROPERTIES): roofline not judged, so "
                          "no family is ruled out as 'at roofline'; pass --arch")
    at_roof = [f for f in fams if (rf := roof[id(f)]) is not None and f.ms > 0
               and rf.fraction >= j.options.roofline_fraction]
    rest = [f for f in fams if f not in at_roof]
    worth, small = fold(rest, own_kernel_ms=j.options.own_kernel_ms, min_ms=j.options.min_ms,
                        merge=j.options.merge_shape_families)
    tag_ambiguous(worth)
    names = unique([f.default_name for f in worth], [spatial_suffix(f.sig) for f in worth])
    names = [_avoid(n, taken_names) for n in names]
    labels = unique_labels([f.label for f in worth], [list(f.sig.get("spatial") or []) for f in worth],
                           [[r.path for r in f.regions] for f in worth])
    labels, roof_labels = _apart_from_roofline(worth, labels, at_roof)
    props = []
    for f, name, label in zip(worth, names, labels):
        props.append(Proposal(
            name=name, namespace=j.options.namespace, label=label, selector=j.selector(f, name), ops_name=f.cls,
            around=f.around, kind=f.kind, dynamic=f.dynamic,
            families=[m.label for m in f.members] if f.dynamic else [f.label],
            sites=[j.site(r) for r in f.regions], ms=f.ms, ms_per_site=[r.ms for r in f.regions],
            roofline=j.roofline(f.regions, f.ms), sketch=sketch_of(f)))
    props.sort(key=lambda p: -p.ms)
    rows += _roofline_rows(j, at_roof, roof, roof_labels)
    if small:
        ms = sum(f.ms for f in small)
        rows.append(NotWorthRow(label=f"families under {j.options.min_ms:.3g} ms", category="under_threshold",
                                sites=sum(len(f.regions) for f in small), ms=ms,
                                reason="a kernelgen run cannot repay this", members=[f.label for f in small]))
    # a GEMM an attention block applies itself (nn.MultiheadAttention's F.linear projections) is heavy, yet no
    # selector reaches it: the block's :around region leaves it out and it has no module of its own
    unreached = [n for n in outside if (node := j.graph.by_name.get(n)) is not None and is_weighted(j.graph, node)]
    if unreached:
        ms = sum(j.att.node_ms.get(n, 0.0) for n in unreached)
        owners = sorted({j.mods.owner_path(n) or "" for n in unreached})
        rows.append(NotWorthRow(label="GEMMs no selector reaches", category="outside_regions", sites=len(owners),
                                ms=ms, reason=_unreached_reason(j, unreached, owners), members=owners))
    unreached_set = set(unreached)
    rest = [n for n in outside if n not in unreached_set]
    if rest:
        ms = sum(j.att.node_ms.get(n, 0.0) for n in rest)
        owners = sorted({j.mods.owner_path(n) or "" for n in rest})
        rows.append(NotWorthRow(label="ops outside any region", category="outside_regions", sites=len(owners),
                                ms=ms, reason=_outside_reason(j, rest), members=owners))
    rows.append(glue_row(j.att))
    rows += _cannot_rows([r for r in regions if r.cannot is not None])
    return props, [r for r in rows if r.ms > 0 or r.category == "glue"]


def _unreached_reason(j: Judge, nodes: list[str], owners: list[str]) -> str:
    """Why weighted ops outside every region cannot be proposed: the module that applies them also holds an
    attention product, and its :around region does not take them in."""
    types = sorted({j.graph.by_name[n].op_type for n in nodes})
    classes = sorted({j.mods.cls_of.get(o, "?") for o in owners})
    return (f"{'/'.join(types)} with weights that {', '.join(classes)} applies itself (a functional call on its "
            "weights: no module call to select, and its :around region leaves them out)")


def _outside_reason(j: Judge, outside: list[str]) -> str:
    """No heavy op to build a kernel around, and what the time is spent on instead (its top ONNX op types), so
    that norms and activations are not passed off as plumbing."""
    by_type: dict[str, float] = defaultdict(float)
    for n in outside:
        node = j.graph.by_name.get(n)
        by_type[node.op_type if node is not None else "?"] += j.att.node_ms.get(n, 0.0)
    spent = sorted(((ms, t) for t, ms in by_type.items() if ms > 0), reverse=True)
    if not spent:
        return "no heavy op to build a kernel around"
    return "no heavy op to build a kernel around: " + ", ".join(f"{t} {ms:.2g} ms" for ms, t in spent[:3]) \
        + (", ..." if len(spent) > 3 else "")


def sketch_of(f: Family) -> RegionSketch:
    """What a kernel generator is shown of a family before any carve (its first region's geometry)."""
    sig = f.regions[0].sig

    def ints(v: object) -> list[int]:
        return [int(x) for x in v] if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v) else []

    def dim(v: object) -> int | str | None:
        return v if isinstance(v, (int, str)) else None

    return RegionSketch(kind=f.kind, ops_name=f.cls, around=f.around, kernel=ints(sig.get("k")),
                        stride=ints(sig.get("stride")), dilation=ints(sig.get("dilation")), pads=ints(sig.get("pads")),
                        groups=sig.get("groups") if isinstance(sig.get("groups"), int) else None,
                        channels_in=None if f.dynamic else dim(sig.get("C")),
                        channels_out=None if f.dynamic else dim(sig.get("Cout")),
                        onnx_ops=dict(sig.get("ops") or ()),
                        channels=[(dim(m.sig.get("C")), dim(m.sig.get("Cout"))) for m in (f.members or [f])])


def _avoid(name: str, taken: set[str]) -> str:
    out, k = name, 2
    while out in taken:
        out = f"{name}_{k}"
        k += 1
    taken.add(out)
    return out


def _apart_from_roofline(worth: list[Family], labels: list[str],
                         at_roof: list[Family]) -> tuple[list[str], dict[int, str]]:
    """A family proposed and one of another spatial size left out as at roofline read the same ("depthwise
    3x3 s1  (C=32)" in both tables): add the spatial size to both. Returns the proposal labels and, by
    ``id(family)``, the at-roofline families' labels that changed."""
    roof_labels: dict[int, str] = {}
    plain = [f.label for f in worth]

    def shape(f: Family) -> str:
        return "x".join(str(v) for v in f.sig.get("spatial") or [])

    for f in at_roof:
        if f.dynamic or f.regions[0].gemm_like or not shape(f) or f.label not in plain:
            continue
        roof_labels[id(f)] = f"{f.label}  {shape(f)}"
        labels = [f"{lab}  {shape(w)}" if lab == w.label == f.label and not w.dynamic and shape(w) else lab
                  for lab, w in zip(labels, worth)]
    return labels, roof_labels


def _roofline_rows(j: Judge, at_roof: list[Family], roof: dict[int, RooflineFigures | None],
                   roof_labels: dict[int, str] | None = None) -> list[NotWorthRow]:
    rows = []
    gemms = [f for f in at_roof if f.regions[0].gemm_like]
    others = [f for f in at_roof if not f.regions[0].gemm_like]

    def reason(fs: list[Family]) -> str:
        bound = sum(roof[id(f)].bound_ms for f in fs)  # type: ignore[union-attr]
        meas = sum(f.ms for f in fs)
        gpu = j.gpu.name if j.gpu else "target"
        # how near the bound, and what a kernel running at the bound would save: at the default --roofline
        # 0.5 a family at 52% is "at roofline" yet nearly half its time is above the bound
        return (f"{j.engine_word} at roofline — {100 * bound / meas:.0f}% of the {gpu} bound; "
                f"a kernel at the bound would save at most {meas - bound:.2g} ms")

    if gemms:
        rows.append(NotWorthRow(label="1x1 / dense GEMMs", category="roofline",
                                sites=sum(len(f.regions) for f in gemms), ms=sum(f.ms for f in gemms),
                                reason=reason(gemms), members=[f.label for f in gemms],
                                sketches=[sketch_of(f) for f in gemms]))
    by_op: dict[str, list[Family]] = defaultdict(list)
    for f in others:
        by_op[op_label(f.kind, f.cls, f.sig)].append(f)
    for fs in sorted(by_op.values(), key=lambda fs: -sum(f.ms for f in fs)):
        label = (roof_labels or {}).get(id(fs[0]), fs[0].label) if len(fs) == 1 else \
            remainder_label(fs[0].kind, fs[0].cls, [f.sig for f in fs]).replace("  (dynamic remainder)", "")
        rows.append(NotWorthRow(label=label, category="roofline", sites=sum(len(f.regions) for f in fs),
                                ms=sum(f.ms for f in fs), reason=reason(fs), members=[f.label for f in fs],
                                sketches=[sketch_of(f) for f in fs]))
    return rows


def glue_row(att: Attribution) -> NotWorthRow:
    causes = [c for c, v in sorted(att.glue.items(), key=lambda kv: -kv[1][0]) if v[0] > 0]
    why = "; ".join(_GLUE_WHY[c] for c in causes[:2]) or "none measured"
    if "reformat" in causes:
        why += "; shrinks as regions get plugged"
    return NotWorthRow(label="unattributed glue", category="glue", sites=None, ms=att.glue_ms, reason=why,
                       members=[f"{c}: {att.glue[c][0]:.3f} ms in {int(att.glue[c][1])} layer(s)" for c in causes])


def _cannot_rows(regions: list[Region]) -> list[NotWorthRow]:
    groups: dict[tuple[str, str], list[Region]] = defaultdict(list)
    for r in regions:
        fam = Family(kind=r.kind, cls=r.cls, around=r.around, regions=[r])
        groups[(fam.label, r.cannot or "")].append(r)
    return [NotWorthRow(label=label, category="cannot_express", sites=len(rs), ms=sum(r.ms for r in rs),
                        reason=f"cannot express: {why}", members=[r.path or "<root>" for r in rs])
            for (label, why), rs in sorted(groups.items(), key=lambda kv: -sum(r.ms for r in kv[1]))]


def summary_line(props: list[Proposal], total_ms: float, engine_word: str, simulated: bool = False) -> str:
    """The closing line: "N candidates covering X ms of the Y ms" (and the plugged regions' share)."""
    d = 1 if total_ms >= 10 else (2 if total_ms >= 1 else 3)
    new = [p for p in props if not p.already_plugged]
    plugged = [p for p in props if p.already_plugged]
    cand_ms = sum(p.ms for p in new)
    parts = []
    if plugged:
        pl_ms = sum(p.ms for p in plugged)
        parts.append(f"{len(plugged)} plugged region{'s' if len(plugged) != 1 else ''} take {pl_ms:.{d}f} ms "
                     f"(the time to beat).")
    if new:
        share = 100.0 * cand_ms / total_ms if total_ms > 0 else 0.0
        parts.append(f"{len(new)} candidate{'s' if len(new) != 1 else ''} covering {cand_ms:.{d}f} ms of the "
                     f"{total_ms:.{d}f} ms — {share:.0f}% of the model's time sits in regions a custom kernel could "
                     f"take over. Every {engine_word} ms figure is what that region costs today, the most a "
                     "perfect plugin could recover.")
        asked = [p for p in new if p.supported is not None]
        taken = [p for p in asked if p.supported]
        if len(taken) < len(asked):  # the share above is not what the asked generator would take over
            t_ms = sum(p.ms for p in taken)
            t_share = 100.0 * t_ms / total_ms if total_ms > 0 else 0.0
            parts.append(f"The kernel generator asked takes {len(taken)} of the {len(asked)} "
                         f"({t_ms:.{d}f} ms, {t_share:.0f}%); the others need another generator.")
    else:
        parts.append(f"0 new candidates: no other region of the {total_ms:.{d}f} ms is worth a kernel at these "
                     "thresholds.")
    if simulated:
        parts.append("(All figures are SIMULATED by the engine's cost model, not measured on hardware.)")
    return " ".join(parts)
