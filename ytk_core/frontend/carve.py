"""Step 3: replace every region a selector matches by one custom-op node, and write what a
kernel generator needs (plugins.json, candidates.json, plugin_candidates/<Name>.*)."""

from __future__ import annotations

import operator
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ytk_hookspecs import StageContext
from ytk_hookspecs.models import (Candidate, CandidatesFile, CarveRequest, CarveResult, FxNodesFile,
                                  PluginEntry, PluginsFile, SiteInfo, TensorInfo)
from ytk_hookspecs.models.base import ArtifactError, sha256_file, write_bytes_atomic

from ..diskspace import ensure_free_space
from ..errors import INTERNAL_CARVE_ERROR, RegionRefused, UsageError
from .canonical import canonicalise
from .capture import capture, capture_onnx, weight_values
from .onnx_rewrite import OnnxGraph, finalize, replace_with_plugin
from .region_module import RegionSpec, analyse, build_module, conv_signature, folded_weights, is_batch_norm
from .region_rules import FactGraph
from .regions import GraphIndex, Site, is_conv, is_identity, match_sites, region_nodes
from .selectors import Selector, parse_selector

PLUGINS_JSON = "plugins.json"
CANDIDATES_JSON = "candidates.json"
CANDIDATES_DIR = "plugin_candidates"
_ONNX_FLOAT = 1


@dataclass
class SitePlan:
    site: Site
    spec: RegionSpec
    lift: str
    onnx_nodes: list[str]
    onnx_inputs: list[str]
    onnx_outputs: list[str]


@dataclass
class PluginPlan:
    sel: Selector
    sites: list[SitePlan]
    notes: list[str] = field(default_factory=list)


def carve_artifact_paths(prep_dir: Path, keep: set[str] | None = None) -> list[Path]:
    """What an earlier carve in this directory wrote (only its own files; kernels and .so stay)."""
    cj = prep_dir / CANDIDATES_JSON
    keep = keep or set()
    out: list[Path] = []
    if cj.is_file():
        try:
            old = CandidatesFile.read(cj)
            for c in old.candidates:
                if c.name in keep:
                    continue
                out += [prep_dir / rel for rel in (c.files.pt2, c.files.io_npz, c.files.inputs_pt,
                                                   c.files.reference_py) if rel]
        except ArtifactError:
            pass
    if not keep:
        out += [prep_dir / PLUGINS_JSON, cj]
    return out


def remove_carve_artifacts(prep_dir: Path, keep: set[str] | None = None) -> None:
    """Delete what an earlier carve in this directory wrote (only its own files; kernels and .so stay)."""
    for path in carve_artifact_paths(prep_dir, keep):
        path.unlink(missing_ok=True)


def _trace_state(request: CarveRequest, fx: FxNodesFile) -> Any:
    from . import trace as trace_mod
    from .export import export_onnx, export_program
    from .loader import load_model

    st = trace_mod.RECENT_TRACES.get(sha256_file(request.onnx))
    if st is not None:
        return st
    # Carve called on its own: re-export and make sure the graph is the one fx_nodes.json describes.
    loaded = load_model(Path(fx.model))
    prog = export_onnx(export_program(loaded.model, loaded.args, loaded.path), loaded.args, loaded.path, 18)
    names = {n.name for n in prog.exported_program.graph.nodes}
    if names != {n.name for n in fx.nodes}:
        raise UsageError(f"{request.fx_nodes} no longer matches {fx.model}; run prepare again without --plugin first")
    state = trace_mod.TraceState(onnx_sha256=fx.onnx_sha256, loaded=loaded, onnx_program=prog)
    trace_mod.remember(state)
    return state


def _map_boundary(fx_nodes: list[Any], onnx_names: list[str], onnx_of: dict[str, list[str]], og: OnnxGraph,
                  what: str, where: str) -> list[str]:
    """ONNX tensor name for each FX boundary value (value names normally equal FX node names)."""
    out = []
    merged: dict[str, str] = {}  # ONNX boundary tensor -> the FX value read in its place
    for n in fx_nodes:
        # An eval Dropout's clone is no ONNX value of its own: its consumers read its input's tensor.
        while n.name not in onnx_names and is_identity(n) and n.args and hasattr(n.args[0], "name"):
            n = n.args[0]
        if n.name in onnx_names:
            out.append(n.name)
            continue
        src = [a.name for a in n.all_input_nodes if a.name in onnx_names and a.name not in merged]
        if what == "input" and n.name in og.producer and len(n.all_input_nodes) == 1 and len(src) == 1:
            # The ONNX optimiser merged this op into the region's node, which reads the op's input instead
            # (HGNetV2's stem pads once for a conv and a pool: the Conv took the pad into its pads, the pool
            # still reads the Pad). The plugin reads the op's own tensor, as the region's program does.
            merged[src[0]] = n.name
            out.append(n.name)
            continue
        produced = [o for on in onnx_of.get(n.name, []) if on in og.nodes
                    for o in og.nodes[on].output if o in onnx_names]
        if len(produced) > 1 and n.target is operator.getitem:
            # q, k, v = x.chunk(3): each getitem is one output of the one Split they all map to
            produced = [o for o in produced if any(list(og.nodes[on].output).index(o) == n.args[1]
                                                   for on in onnx_of[n.name] if o in og.nodes[on].output)]
        if len(produced) != 1:
            # a bug of the FX-to-ONNX mapping, not the user's selector: exit 1 as an internal carve error
            raise RuntimeError(f"at {where}: cannot find the ONNX tensor of region {what} {n.name}")
        out.append(produced[0])
    if sorted(out) != sorted(merged.get(t, t) for t in onnx_names):
        raise RuntimeError(f"at {where}: region {what}s differ between FX ({out}) and ONNX ({onnx_names})")
    return out


def _plan(sels: list[Selector], gi: GraphIndex, ep: Any, fx: FxNodesFile, og: OnnxGraph) -> list[PluginPlan]:
    sig = ep.graph_signature
    weight_names = set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers) | set(
        getattr(sig, "inputs_to_lifted_tensor_constants", {}))
    out_node = next(n for n in gi.nodes if n.op == "output")
    ctx = _PlanContext(gi=gi, og=og, weight_names=weight_names, graph_outputs=set(out_node.all_input_nodes),
                       onnx_of={n.name: n.onnx_nodes for n in fx.nodes},
                       facts=FactGraph.from_fx_nodes(fx, weight_names))
    claimed: dict[str, str] = {}
    plans = []
    for sel in sels:
        with _named_failures(sel):
            sites = _plan_selector(sel, ctx, claimed)
            plans.append(PluginPlan(sel=sel, sites=sites, notes=_around_note(sel, sites[0], gi) if sites else []))
    return plans


def _around_note(sel: Selector, first: SitePlan, gi: GraphIndex) -> list[str]:
    """What an :around region of a module leaves outside (its projections, norms, MLP): a new user selected
    ``TransformerEncoderLayer:around`` and got the attention core under the layer's name, with no word."""
    from .regions import IDENTITY_OPS, PLUMBING_OPS, _is, op_name

    if not sel.around or not first.site.module_path:
        return []
    inside = {n.name for n in first.site.nodes}
    calls = [c for c in gi.calls_of(first.site.module_path) if inside & {n.name for n in c}]
    left = [n for n in (calls[0] if calls else []) if n.op == "call_function" and n.name not in inside]
    # what :around would not absorb itself (its plumbing rule): the GEMMs, convs and norms left to the engine
    work = Counter(op_name(n).split(".")[0].lstrip("_") for n in left
                   if n.target is not operator.getitem and not _is(n, PLUMBING_OPS + IDENTITY_OPS))
    if not work:
        return []
    named = ", ".join(f"{op} x{k}" if k > 1 else op for op, k in sorted(work.items()))
    return [f":around took the attention core of {first.site.module_path} ({len(inside)} of its "
            f"{len(inside) + len(left)} ops); {named} stay outside, in the engine. Select the module without "
            ":around to carve all of it"]


@contextmanager
def _named_failures(sel: Selector) -> Iterator[None]:
    """One selector's failure, named, so a caller carving several (the autoloop) drops just this one rather
    than carving groups of them to find it. A crash of the carve itself (not a refusal) says it is a bug;
    the disk, memory and the like are nobody's selector and pass unchanged."""
    try:
        yield
    except (RegionRefused, OSError, MemoryError):
        raise
    except UsageError as e:
        msg = str(e) if sel.text in str(e) else f"selector {sel.text!r}: {e}"  # which of several selectors
        raise RegionRefused(sel.text, "carve", msg, hint=e.hint) from e
    except Exception as e:
        text = " ".join(str(e).split()) or "(no message)"
        raise RegionRefused(sel.text, "carve", f"{INTERNAL_CARVE_ERROR} on {sel.text!r}: {type(e).__name__}: "
                                               f"{text}", exit_code=1, internal=True) from e


@dataclass
class _PlanContext:
    gi: GraphIndex
    og: OnnxGraph
    weight_names: set[str]
    graph_outputs: set[Any]
    onnx_of: dict[str, list[str]]
    facts: FactGraph


def _plan_selector(sel: Selector, ctx: _PlanContext, claimed: dict[str, str]) -> list[SitePlan]:
    gi, og, onnx_of = ctx.gi, ctx.og, ctx.onnx_of
    site_plans = []
    succ = og.successors() if sel.part is not None else None
    for site in match_sites(sel, gi):
        where = site.module_path or sel.text
        site.nodes = [gi.by_name[n] for n in region_nodes(sel, site, ctx.facts, gi, succ)]
        for n in site.nodes:
            if not onnx_of.get(n.name):
                # no ONNX node of its own (a constant the exporter folded, an identity): nothing is
                # replaced, so two regions may each compute it (the parts of one :around block do)
                continue
            if n.name in claimed and claimed[n.name] != sel.text:
                raise UsageError(f"selectors {claimed[n.name]!r} and {sel.text!r} both claim fx node {n.name} "
                                 f"(in {where}); regions must not overlap. Narrow one with @where.")
            claimed[n.name] = sel.text
        spec, lift = analyse(site.nodes, ctx.weight_names, ctx.graph_outputs, sel.lift, where, ctx.facts)
        onnx_nodes = sorted({o for n in site.nodes for o in onnx_of.get(n.name, [])})
        if not onnx_nodes:
            raise UsageError(f"selector {sel.text!r}: region {where} became no ONNX node (it was constant-folded "
                             "or optimised away); there is nothing to replace")
        og.check_convex(onnx_nodes, where)
        b = og.boundary(onnx_nodes)
        if len(b.outputs) > 1 and sel.kind in ("span", "nodes"):
            # A block's region may hand several values on (attention output and its weights): one
            # custom-op node with several outputs. A hand-drawn span that leaks a value more likely
            # misses a consumer, so it is refused with the edges it would cut.
            leaks = [f"{o} -> "
                     f"{', '.join(c for c in og.consumers.get(o, []) if c not in set(onnx_nodes)) or 'graph output'}"
                     for o in b.outputs]
            raise UsageError(f"selector {sel.text!r}: region {where} has {len(b.outputs)} values used outside it "
                             f"({'; '.join(leaks)}); carving it would cut those edges. Grow the region to include "
                             "those consumers or narrow it so only one value leaves.")
        ins = _map_boundary(spec.activations, b.inputs, onnx_of, og, "input", where)
        outs = _map_boundary(spec.outputs, b.outputs, onnx_of, og, "output", where)
        site_plans.append(SitePlan(site=site, spec=spec, lift=lift, onnx_nodes=onnx_nodes, onnx_inputs=ins,
                                   onnx_outputs=outs))
    return site_plans


def _check_same_baked(sel: Selector, first: SitePlan, site: SitePlan, weights: dict[str, Any]) -> None:
    """Every site of a plugin runs site 0's program, baked constants included: sites that bake
    different weights (``@lift=none`` on a multi-site selector, a Linear's weights) would all get
    site 0's numbers, so they are refused here rather than found by verify."""
    import torch

    a, b = first.spec.baked, site.spec.baked
    differ = len(a) != len(b) or any(
        tuple(weights[x.name].shape) != tuple(weights[y.name].shape)
        or not torch.equal(weights[x.name], weights[y.name])
        for x, y in zip(a, b))
    if differ:
        names = ", ".join(y.name for y in b[:3])
        # only a conv's weight and bias (a BatchNorm after it folded in) can be lifted: the advice to drop
        # @lift=none helps just when every baked weight feeds one and @lift=none is what kept it baked
        if sel.lift == "none" and all(any(is_conv(u) or is_batch_norm(u) for u in y.users) for y in b):
            fix = "Drop @lift=none (a conv's weights are then inputs of the plugin) or give each site its own selector."
        else:
            fix = ("Only a conv's weights (with a BatchNorm folded into it) can be lifted as plugin inputs; give "
                   "each site its own selector (propose proposes such a region once per site).")
        raise UsageError(f"selector {sel.text!r}: {_site_label(site, first)} bakes different weights "
                         f"({names}) than {_site_label(first, site)}; one plugin carries one set of baked "
                         f"constants. {fix}")


def _split_advice(sel: Selector, first: SitePlan, site: SitePlan) -> str:
    """How to give two sites their own selectors: by module where they have two, else by FX node name (calls at
    the model's root, or two calls in one module, which no @where tells apart)."""
    if first.site.module_path != site.site.module_path and first.site.module_path and site.site.module_path:
        return "split the selector with @where"
    names = [sp.site.nodes[0].name for sp in (first, site) if sp.site.nodes]
    return ("@where cannot tell these sites apart; select each op by its FX node name instead "
            f"({', '.join(f'yasp::{sel.name}_{i}={n}' for i, n in enumerate(names))}; fx_nodes.json lists them)")


def _site_label(sp: SitePlan, other: SitePlan) -> str:
    """A site by its module, and by its first op where another site has the same module (two calls of it, or
    two ``call:`` sites in one module), or the model's root."""
    path = sp.site.module_path or "the model's root"
    if sp.site.module_path == other.site.module_path and sp.site.nodes:
        return f"{path} (at {sp.site.nodes[0].name})"
    return path


def _inventory(gm: Any) -> dict[str, int]:
    return dict(sorted(Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function").items()))


def _program_signature(gm: Any) -> list[tuple[str, str, str]]:
    """The region program as ops and their non-tensor arguments (an index, a scale, a dim): two sites whose
    programs differ only in the names of their tensors have the same signature."""
    import torch.fx

    out = []
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "get_attr", "output"):
            out.append((n.op, "", ""))
        else:
            out.append((n.op, str(n.target), repr(torch.fx.node.map_arg((n.args, n.kwargs), lambda _: "%"))))
    return out


def _check_site_runs_site0_program(sel: Any, first: Any, where: str, gm: Any, ins: list[Any],
                                   outs: list[Any], split: str = "split the selector with @where") -> None:
    """One plugin runs site 0's program everywhere: where a site's program differs from it beyond tensor names
    (a per-head index, a scale), site 0's program must still reproduce that site's own outputs."""
    import torch

    if _program_signature(gm) == _program_signature(first):
        return
    try:
        with torch.no_grad():
            got = first(*ins)
    except Exception:  # another shape: a dynamic program is checked at every site when it is exported
        return
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    for g, want in zip(got, outs):
        if g.shape != want.shape:
            raise UsageError(f"selector {sel.text!r} matches regions whose output sizes are baked in differently: "
                             f"the program of its first site makes {list(g.shape)} from {where}'s inputs, where "
                             f"{where} makes {list(want.shape)} (an interpolate's size, a reshape's shape). One plugin "
                             f"runs one program at every site: one selector per output size; {split}.")
        lo, hi = torch.aminmax(want)
        scale = max(abs(float(lo)), abs(float(hi))) or 1.0
        err = float((g - want).abs_().max())
        if not err <= 1e-4 * scale + 1e-5 * scale:
            raise UsageError(f"selector {sel.text!r} matches regions that compute different things: the program of "
                             f"its first site does not reproduce {where} (max diff {err:.3g}; their ops take different "
                             f"arguments, such as an index or a scale). One plugin runs one program at every site: "
                             f"{split}.")


def _tinfo(name: str, t: Any) -> TensorInfo:
    return TensorInfo(name=name, shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""))


def carve(request: CarveRequest, ctx: StageContext) -> CarveResult:
    import onnx
    import torch

    t0 = time.perf_counter()
    sels = [parse_selector(s) for s in request.selectors]
    seen: dict[str, str] = {}
    for s in sels:
        if s.name in seen:
            raise UsageError(f"plugin name {s.name!r} is used by two selectors ({seen[s.name]!r} and {s.text!r}); "
                             "each plugin needs its own name")
        seen[s.name] = s.text
    prep = Path(request.prepare_dir)
    fx = FxNodesFile.read(request.fx_nodes)
    state = _trace_state(request, fx)
    ep = state.onnx_program.exported_program
    sig = ep.graph_signature
    gi = GraphIndex(ep.graph, set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers) |
                    set(getattr(sig, "inputs_to_lifted_tensor_constants", {})))
    proto = onnx.load(str(request.onnx))
    og = OnnxGraph(proto)
    with ctx.progress("matching selectors to regions", total=len(sels)):
        plans = _plan(sels, gi, ep, fx, og)
    # FX boundary value -> its ONNX tensor; one onnxruntime run on the traced ONNX captures them all.
    onnx_name = {n.name: t for p in plans for sp in p.sites
                 for n, t in zip(sp.spec.activations + sp.spec.outputs, sp.onnx_inputs + sp.onnx_outputs)}
    with ctx.progress("capturing region inputs and outputs (onnxruntime)"):
        feeds = {i.name: a.detach().cpu().numpy() for i, a in zip(proto.graph.input, state.loaded.args)}
        try:
            got = capture_onnx(proto, feeds, sorted(set(onnx_name.values())))
            values = {fx_name: torch.from_numpy(np.ascontiguousarray(got[t])) for fx_name, t in onnx_name.items()}
        except Exception as e:  # an op onnxruntime lacks: run the exported program instead (slower, same values)
            ctx.log.warning("onnxruntime capture failed; capturing with the exported program", error=str(e)[:200])
            values = capture(ep, state.loaded.args, set(onnx_name))
    weights = weight_values(ep)
    remove_carve_artifacts(prep)
    cdir = prep / CANDIDATES_DIR
    cdir.mkdir(parents=True, exist_ok=True)
    ensure_free_space(cdir, _capture_bytes(plans, values), f"the captured inputs and outputs of {len(plans)} region(s)")
    candidates, entries, value_infos = [], [], {}
    pending: list[Future] = []
    with ctx.progress("exporting regions and rewriting the ONNX", total=len(plans)) as task, \
            ThreadPoolExecutor(max_workers=1) as writer:
        for plan in plans:
            with _named_failures(plan.sel):
                cand, entry, futures = _carve_plugin(plan, values, weights, og, prep, cdir, value_infos, writer)
            candidates.append(cand)
            entries.append(entry)
            pending += futures
            task.advance()
        for f in pending:
            f.result()  # surface a failed write before any JSON points at the file
    finalize(og, value_infos)
    try:
        onnx.checker.check_model(proto)
        proto = onnx.shape_inference.infer_shapes(proto, check_type=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise UsageError("internal carve error: the carved ONNX fails the ONNX checker: "
                         f"{str(e).splitlines()[0]}") from None
    write_bytes_atomic(Path(request.onnx), proto.SerializeToString())
    onnx_name = Path(request.onnx).name
    CandidatesFile(onnx=onnx_name, candidates=candidates).write(prep / CANDIDATES_JSON)
    PluginsFile(onnx=onnx_name, plugins=entries).write(prep / PLUGINS_JSON)
    return CarveResult(plugins=prep / PLUGINS_JSON, candidates=prep / CANDIDATES_JSON, onnx=Path(request.onnx),
                       custom_nodes=sum(len(p.sites) for p in plans), wall_s=time.perf_counter() - t0)


def _check_float_boundary(sel: Selector, where: str, sp: Any, acts: list[Any], outs: list[Any]) -> None:
    """A plugin's activations and outputs are tensors of the engine's precision (fp16 or fp32): an integer one
    (token ids into an embedding, an argmax out) would be read or written as floats, silently wrong past
    2048 in fp16. Refused here, naming the tensor."""
    for what, names, ts in (("input", [a.name for a in sp.spec.activations], acts),
                            ("output", [o.name for o in sp.spec.outputs], outs)):
        for name, t in zip(names, ts):
            if not t.is_floating_point():
                raise UsageError(f"selector {sel.text!r}: region {where} has the {str(t.dtype).replace('torch.', '')} "
                                 f"{what} {name}; a plugin's inputs and outputs are floating-point tensors at the "
                                 "engine's precision. Start the region after the op that makes floats of it (the "
                                 "embedding's gather), or end it before the op that makes integers or a mask (an "
                                 "argmax, a comparison).")


def _capture_bytes(plans: list[PluginPlan], values: dict[str, Any]) -> int:
    """What the region files will take on disk: every site's inputs twice (``io.npz`` and ``inputs.pt``)
    and its outputs once; the programs and lifted weights are small beside them."""
    total = 0
    for plan in plans:
        for sp in plan.sites:
            total += 2 * sum(int(values[a.name].nbytes) for a in sp.spec.activations)
            total += sum(int(values[o.name].nbytes) for o in sp.spec.outputs)
    return total


def _reproduces(gm: Any, ins: list[Any], outs: list[Any]) -> str:
    """'' when ``gm`` run on the site's captured inputs gives its captured outputs, else what went wrong."""
    import torch

    try:
        with torch.no_grad():
            got = gm(*ins)
    except (MemoryError, OSError):  # the machine, not the region
        raise
    except Exception as e:  # noqa: BLE001 - a rebuilt module that cannot run is reported like a wrong one
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    for g, want in zip(got, outs):
        # One temporary and two reductions: allclose on GB-sized captures costs seconds per site.
        lo, hi = torch.aminmax(want)
        scale = max(abs(float(lo)), abs(float(hi))) or 1.0
        err = float((g - want).abs_().max())
        if not err <= 1e-4 * scale + 1e-5 * scale:
            return f"max diff {err:.3g}"
    return ""


def _signatures(spec: RegionSpec) -> list[tuple[Any, ...]]:
    return [conv_signature(c, spec) for c in spec.convs]


def _rebuilt_region(spec: Any, weights: dict[str, Any], ins: list[Any], outs: list[Any],
                    where: str) -> tuple[Any, list[str]]:
    """The region as a module in canonical form (checked against the model's own captured outputs), or, where a
    canonical rewrite broke it, as traced -- said in the notes; a traced module that does not reproduce the model
    either is an internal error."""
    gm = build_module(spec, weights)
    notes = canonicalise(gm)
    why = _reproduces(gm, ins, outs)
    if why and notes:
        gm, first = build_module(spec, weights), why
        why = _reproduces(gm, ins, outs)
        notes = [f"canonical: left as traced (the canonical form did not reproduce the model: {first})"]
    if why:
        raise UsageError(f"internal carve error: region {where} rebuilt as a module does not reproduce the model "
                         f"({why}); please report this")
    return gm, notes


def _carve_plugin(plan: PluginPlan, values: dict[str, Any], weights: dict[str, Any], og: OnnxGraph, prep: Path,
                  cdir: Path, value_infos: dict[str, tuple[int, list[int]]],
                  writer: Any = None) -> tuple[Candidate, PluginEntry, list[Future]]:
    sel = plan.sel
    site_inputs: list[list[Any]] = []
    site_outputs: list[list[Any]] = []
    modules = []
    infos: list[SiteInfo] = []
    for k, sp in enumerate(plan.sites):
        where = sp.site.module_path or sel.text
        pairs = folded_weights(sp.spec, weights)
        ins = [values[a.name] for a in sp.spec.activations] + [t for pair in pairs for t in pair]
        outs = [values[o.name] for o in sp.spec.outputs]
        _check_float_boundary(sel, where, sp, ins[:len(sp.spec.activations)], outs)  # before any arithmetic on them
        gm, canon_notes = _rebuilt_region(sp.spec, weights, ins, outs, where)
        if k and _inventory(gm) != _inventory(modules[0]):
            raise UsageError(f"selector {sel.text!r} matches regions of different structure: "
                             f"{_site_label(plan.sites[0], sp)} runs {_inventory(modules[0])} but "
                             f"{_site_label(sp, plan.sites[0])} runs {_inventory(gm)}. One plugin needs one kind of "
                             f"region: {_split_advice(sel, plan.sites[0], sp)}.")
        sig0, sig = _signatures(plan.sites[0].spec), _signatures(sp.spec)
        if k and sig != sig0:
            raise UsageError(f"selector {sel.text!r} matches convolutions of different kinds: "
                             f"{_site_label(plan.sites[0], sp)} has {sig0} (kernel, stride, padding, dilation, "
                             f"depthwise) but {_site_label(sp, plan.sites[0])} has {sig}. "
                             f"{_split_advice(sel, plan.sites[0], sp)}.")
        if k and len(ins) != len(site_inputs[0]):
            raise UsageError(f"selector {sel.text!r}: sites differ in input count "
                             f"({len(site_inputs[0])} vs {len(ins)})")
        if k:
            _check_same_baked(sel, plan.sites[0], sp, weights)
            _check_site_runs_site0_program(sel, modules[0], _site_label(sp, plan.sites[0]), gm, ins, outs,
                                           _split_advice(sel, plan.sites[0], sp))
        modules.append(gm)
        site_inputs.append(ins)
        site_outputs.append(outs)
        wnames = []
        for j, (w, b) in enumerate(pairs):
            wnames += [(f"{sel.name}.site{k}.w{j}", w.numpy()), (f"{sel.name}.site{k}.b{j}", b.numpy())]
        node_name = f"{sel.name}_{k}"
        from .onnx_rewrite import OnnxBoundary

        replace_with_plugin(og, OnnxBoundary(nodes=sp.onnx_nodes, inputs=sp.onnx_inputs, outputs=sp.onnx_outputs),
                            node_name, sel.name, sel.namespace, "1", wnames)
        for name, t in zip(sp.onnx_outputs, outs):
            value_infos[name] = (_ONNX_FLOAT, list(t.shape))
        in_names = sp.onnx_inputs + [w for w, _ in wnames]
        infos.append(SiteInfo(index=k, module_path=sp.site.module_path, onnx_node=node_name,
                              inputs=[_tinfo(n, t) for n, t in zip(in_names, ins)],
                              outputs=[_tinfo(n, t) for n, t in zip(sp.onnx_outputs, outs)],
                              replaced_onnx_nodes=sp.onnx_nodes, fx_nodes=[n.name for n in sp.site.nodes]))
    n_in = len(site_inputs[0])
    constant_axes = [[all(s[i].shape[a] == site_inputs[0][i].shape[a] for s in site_inputs)
                      for a in range(site_inputs[0][i].dim())] for i in range(n_in)]
    n_act = len(plan.sites[0].spec.activations)
    n_pairs = len(plan.sites[0].spec.convs) + len(plan.sites[0].spec.norms)  # lifted (weight, bias) pairs
    arg_names = [f"in{i}" for i in range(n_act)] + [x for j in range(n_pairs) for x in (f"w{j}", f"b{j}")]
    roles = ["activation"] * n_act + ["weight", "bias"] * n_pairs
    dynamic = {arg_names[i]: [a for a, c in enumerate(axes) if not c] for i, axes in enumerate(constant_axes)
               if not all(axes)}
    from .op_attrs import merged_region_ops
    from .region_files import write_region_files

    files, notes, futures = write_region_files(sel, modules[0], site_inputs, site_outputs, arg_names, dynamic, prep,
                                               cdir, writer)
    cand = Candidate(name=sel.name, namespace=sel.namespace, version="1", selector=sel.text,
                     ops_name=sel.ops_name or sel.kind, around=sel.around, lift=plan.sites[0].lift,  # type: ignore[arg-type]
                     input_roles=roles, sites=infos, op_inventory=_inventory(modules[0]),  # type: ignore[arg-type]
                     ops=merged_region_ops(modules, site_inputs),
                     constant_axes=constant_axes, dynamic_dims=dynamic, files=files,
                     notes=plan.notes + canon_notes + notes)
    entry = PluginEntry(name=sel.name, namespace=sel.namespace, version="1", op_type=sel.name, selector=sel.text,
                        sites=len(plan.sites), site_nodes=[s.onnx_node for s in infos], kernelgen_input=files.pt2)
    return cand, entry, futures
