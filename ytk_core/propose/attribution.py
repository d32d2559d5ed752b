"""Every measured millisecond -> an ONNX node owned by a torch module (or a plugin), or glue.

The invariant the rest of propose relies on: ``attributed_ms + glue_ms == total_ms``. Layer time
is split over the nodes a layer computes (see ``roofline.fused_weights``); the share of a node no
torch module owns, and whole layers that resolve to no node (reformats, engine-internal copies,
names that match nothing), go to the unattributed-glue bucket by cause.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ytk_hookspecs.models import LayerTime

from .layer_map import resolve_layers
from .models import GlueItem, LayerAttribution
from .modules import ModuleIndex
from .onnx_graph import OnnxGraph
from .roofline import fused_weights


@dataclass
class Attribution:
    total_ms: float
    node_ms: dict[str, float] = field(default_factory=dict)
    node_layers: dict[str, list[str]] = field(default_factory=dict)
    glue: dict[str, list[float]] = field(default_factory=dict)  # cause -> [ms, layer count]
    layers: list[LayerAttribution] = field(default_factory=list)

    @property
    def attributed_ms(self) -> float:
        return float(sum(self.node_ms.values()))

    @property
    def glue_ms(self) -> float:
        return float(sum(v[0] for v in self.glue.values()))

    def glue_items(self) -> list[GlueItem]:
        return [GlueItem(cause=c, ms=v[0], layers=int(v[1]))  # type: ignore[arg-type]
                for c, v in sorted(self.glue.items(), key=lambda kv: -kv[1][0])]

    def module_ms(self, modules: ModuleIndex, path: str) -> float:
        return float(sum(self.node_ms.get(n, 0.0) for n in modules.nodes_of.get(path, ())))


def attribute(layers: list[LayerTime], graph: OnnxGraph, modules: ModuleIndex, plugin_nodes: set[str],
              precision: str, layer_info: dict | None = None) -> Attribution:
    """Split each layer's median time over the ONNX nodes it computes; the rest is glue."""
    att = Attribution(total_ms=float(sum(lt.median_ms for lt in layers)))
    glue: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    node_ms: dict[str, float] = defaultdict(float)
    node_layers: dict[str, list[str]] = defaultdict(list)
    for r in resolve_layers(layers, graph, layer_info):
        ms = float(r.layer.median_ms)
        if r.kind in ("reformat", "engine") or not r.nodes:
            cause = {"reformat": "reformat", "engine": "engine-internal"}.get(r.kind, "unresolved-layer")
            glue[cause][0] += ms
            glue[cause][1] += 1
            att.layers.append(LayerAttribution(name=r.layer.name, ms=ms, kind=r.kind,  # type: ignore[arg-type]
                                               resolved_by="none", glue_ms=ms, note=r.note))
            continue
        weights = fused_weights(graph, r.nodes, precision)
        unowned = 0.0
        for n, w in zip(r.nodes, weights):
            share = ms * w
            if n in plugin_nodes or n in modules.owner:
                node_ms[n] += share
                node_layers[n].append(r.layer.name)
            else:
                unowned += share
        if unowned > 0:
            glue["unmapped-onnx-node"][0] += unowned
            glue["unmapped-onnx-node"][1] += 1
        kind = "plugin" if any(n in plugin_nodes for n in r.nodes) else "compute"
        att.layers.append(LayerAttribution(name=r.layer.name, ms=ms, kind=kind,  # type: ignore[arg-type]
                                           resolved_by=r.resolved_by, onnx_nodes=list(r.nodes),  # type: ignore
                                           glue_ms=unowned, note=r.note))
    att.node_ms = dict(node_ms)
    att.node_layers = dict(node_layers)
    att.glue = {k: v for k, v in glue.items()}
    return att
