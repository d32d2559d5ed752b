"""Engine layer -> the ONNX nodes it computes.

Sources, best first: the engine's own ``onnx_nodes`` (the mock and torch engines fill them), the
layer's TensorRT 10 ``Metadata`` (``[ONNX Layer: ...]``), the layer name (see ``trt_names``), and
for nameless helper layers the tensors the detailed layer info says they read and write.
ForeignNode spans are resolved last, so that nodes another layer names explicitly stay with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ytk_hookspecs.models import LayerTime

from .onnx_graph import OnnxGraph
from .trt_names import ParsedName, is_unnamed, metadata_nodes, parse_layer_name, undecorate


@dataclass
class ResolvedLayer:
    layer: LayerTime
    parsed: ParsedName
    kind: str                      # compute | reformat | engine
    nodes: list[str] = field(default_factory=list)
    resolved_by: str = "none"
    note: str = ""
    spans: list[tuple[str, str]] = field(default_factory=list)  # resolved (first, last) node names


class NameResolver:
    """Looks names up in the ONNX graph, undoing the decorations TensorRT adds."""

    def __init__(self, graph: OnnxGraph) -> None:
        self.g = graph
        self._cache: dict[str, list[str]] = {}
        # Longest first, so a fallback substring match prefers "node_conv2d_25" over "n0".
        self._by_len = sorted((n for n in graph.by_name if len(n) >= 6 or "/" in n), key=len, reverse=True)

    def atom(self, atom: str) -> list[str]:
        if atom in self._cache:
            return self._cache[atom]
        out = self._lookup(atom)
        self._cache[atom] = out
        return out

    def _lookup(self, atom: str) -> list[str]:
        g = self.g
        if not atom or is_unnamed(atom):
            return []
        copy = atom.rstrip().endswith("copy")
        for cand in undecorate(atom):
            if cand in g.by_name:
                return [cand]
            if cand in g.producer:
                if copy:
                    # "<tensor> copy" is the concat consuming that tensor copying it into place.
                    cats = [c for c in g.consumers.get(cand, []) if g.by_name[c].op_type == "Concat"]
                    if cats:
                        return cats[:1]
                return [g.producer[cand]]
        for name in self._by_len:
            if name in atom:
                return [name]
        return []


def resolve_layers(layers: list[LayerTime], graph: OnnxGraph,
                   layer_info: dict[str, dict[str, Any]] | None = None) -> list[ResolvedLayer]:
    """Resolve every layer to ONNX nodes (possibly none: that time becomes glue)."""
    names = NameResolver(graph)
    out: list[ResolvedLayer] = []
    for layer in layers:
        parsed = parse_layer_name(layer.name)
        r = ResolvedLayer(layer=layer, parsed=parsed, kind=parsed.kind)
        if layer.type == "Reformat" and not layer.onnx_nodes and not layer.metadata:
            r.kind = "reformat"  # an engine that names its reformats its own way still types them
        out.append(r)
        if r.kind == "reformat":
            continue
        known = [n for n in layer.onnx_nodes if n in graph.by_name]
        if known:
            r.nodes, r.resolved_by, r.kind = known, "engine", "compute"
            if len(known) < len(layer.onnx_nodes):
                r.note = f"{len(layer.onnx_nodes) - len(known)} engine-reported node(s) not in this ONNX"
            continue
        meta = [n for n in metadata_nodes(layer.metadata) if n in graph.by_name]
        if meta:
            # TensorRT 10 names Myelin kernels "__myl_..."; their metadata still says what they compute.
            r.nodes, r.resolved_by, r.kind = meta, "metadata", "compute"
            continue
        if parsed.kind == "engine":
            continue
        nodes: list[str] = []
        for a in parsed.atoms:
            for n in names.atom(a):
                if n not in nodes:
                    nodes.append(n)
        for first, last in parsed.spans:
            f, lst = names.atom(first), names.atom(last)
            if f and lst:
                lo = min(f + lst, key=lambda n: graph.by_name[n].index)
                hi = max(f + lst, key=lambda n: graph.by_name[n].index)
                r.spans.append((lo, hi))
            elif f or lst:
                nodes += [n for n in (f or lst) if n not in nodes]
                r.note = "one end of a ForeignNode span is not in the ONNX; attributed to the other end"
        if nodes or r.spans:
            r.nodes, r.resolved_by = nodes, ("span" if r.spans and not nodes else "name")
    _resolve_spans(out, graph)
    if layer_info:
        _resolve_from_layer_info(out, graph, layer_info)
    return out


def _resolve_spans(resolved: list[ResolvedLayer], graph: OnnxGraph) -> None:
    claimed = {n for r in resolved if not r.spans for n in r.nodes}
    for r in resolved:
        for lo, hi in r.spans:
            rng = graph.span(lo, hi)
            free = [n for n in rng if n not in claimed] or rng
            r.nodes += [n for n in free if n not in r.nodes]


def _resolve_from_layer_info(resolved: list[ResolvedLayer], graph: OnnxGraph,
                             info: dict[str, dict[str, Any]]) -> None:
    """Nameless helper layers: follow the tensors the detailed layer info lists.

    A helper's output that is an ONNX tensor belongs to the node producing it; otherwise the helper
    serves whichever named layer consumes its output.
    """
    by_input: dict[str, list[ResolvedLayer]] = {}
    for r in resolved:
        li = info.get(r.layer.name)
        for t in (li or {}).get("Inputs", []) or []:
            if isinstance(t, dict) and "Name" in t:
                by_input.setdefault(str(t["Name"]), []).append(r)
    for r in resolved:
        if r.kind != "compute" or r.nodes:
            continue
        li = info.get(r.layer.name)
        if not li:
            continue
        outs = [str(t["Name"]) for t in li.get("Outputs", []) or [] if isinstance(t, dict) and "Name" in t]
        nodes = [graph.producer[t] for t in outs if t in graph.producer]
        if not nodes:
            for t in outs:
                for consumer in by_input.get(t, []):
                    if consumer.nodes:
                        nodes = list(consumer.nodes)
                        break
                if nodes:
                    break
        if nodes:
            r.nodes, r.resolved_by = sorted(set(nodes), key=lambda n: graph.by_name[n].index), "layer-info"
