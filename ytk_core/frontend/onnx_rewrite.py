"""ONNX surgery: replace each site's nodes by one custom-op node that TensorRT's parser resolves.

TensorRT looks a plugin up by (op_type, plugin_namespace, plugin_version); the node keeps the
region's boundary tensor names, so the rest of the graph is untouched.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from ytk_hookspecs.models import PLUGIN_DOMAIN

from ..errors import UsageError
from .region_rules import convexity_witness, from_sources


@dataclass
class OnnxBoundary:
    nodes: list[str]
    inputs: list[str]    # non-initializer tensors consumed from outside, in first-use order
    outputs: list[str]   # tensors produced inside and consumed outside (or graph outputs)


class OnnxGraph:
    """Index over a ModelProto for region surgery."""

    def __init__(self, proto: Any) -> None:
        self.proto = proto
        self.refresh()

    def refresh(self) -> None:
        g = self.proto.graph
        self.nodes = {n.name: n for n in g.node}
        self.producer = {o: n.name for n in g.node for o in n.output}
        self.consumers: dict[str, list[str]] = defaultdict(list)
        for n in g.node:
            for i in n.input:
                if i:
                    self.consumers[i].append(n.name)
        self.initializers = {t.name for t in g.initializer}
        self.graph_outputs = {o.name for o in g.output}
        self._constant: dict[str, bool] = {}

    def constant(self, tensor: str) -> bool:
        """Computed from initializers alone: a node chain the exporter did not fold (EVA02's rotary table,
        chunked into sin and cos once for every block). torch.export bakes such a value into a region's
        program, so it is no input of the plugin."""
        def source(t: str) -> bool | None:
            return t in self.initializers if self.producer.get(t, "") not in self.nodes else None

        return from_sources(tensor, self._constant, source,
                            lambda t: [i for i in self.nodes[self.producer[t]].input if i])

    def boundary(self, names: list[str]) -> OnnxBoundary:
        inside = set(names)
        order = [n.name for n in self.proto.graph.node if n.name in inside]
        produced = {o for nm in order for o in self.nodes[nm].output}
        ins: list[str] = []
        for nm in order:
            for i in self.nodes[nm].input:
                if i and i not in produced and i not in self.initializers and i not in ins and not self.constant(i):
                    ins.append(i)
        outs = [o for nm in order for o in self.nodes[nm].output
                if o in self.graph_outputs or any(c not in inside for c in self.consumers.get(o, []))]
        return OnnxBoundary(nodes=order, inputs=ins, outputs=outs)

    def successors(self) -> dict[str, list[str]]:
        """Each node's consumers (what region_rules' convexity and part rules walk)."""
        return {nm: [c for o in n.output for c in self.consumers.get(o, [])] for nm, n in self.nodes.items()}

    def check_convex(self, names: list[str], where: str) -> None:
        """Refuse a region that an outside path leaves and re-enters (it could not be one node)."""
        hit = convexity_witness(names, self.successors())
        if hit is not None:
            cur, c = hit
            raise UsageError(f"region {where} is not convex: ONNX node {cur} (outside the region) depends on the "
                             f"region and feeds {c} inside it; one plugin node cannot replace it. Narrow the selector "
                             "(@where, or a span A...B) so the region is one connected block; an :around region "
                             "takes one of its convex parts with @part=K (propose proposes them).")


def replace_with_plugin(og: OnnxGraph, b: OnnxBoundary, node_name: str, op_type: str, namespace: str, version: str,
                        weights: list[tuple[str, np.ndarray]]) -> Any:
    """Remove ``b.nodes`` and insert the custom-op node; returns the new NodeProto."""
    from onnx import helper, numpy_helper

    g = og.proto.graph
    for wname, arr in weights:
        g.initializer.append(numpy_helper.from_array(np.ascontiguousarray(arr), wname))
    node = helper.make_node(op_type, inputs=b.inputs + [w for w, _ in weights], outputs=b.outputs, name=node_name,
                            domain=PLUGIN_DOMAIN, plugin_namespace=namespace, plugin_version=version)
    remove = set(b.nodes)
    all_nodes = list(g.node)
    first = next(i for i, n in enumerate(all_nodes) if n.name in remove)
    kept = [n for n in all_nodes[:first] if n.name not in remove] + [node] + \
        [n for n in all_nodes[first:] if n.name not in remove]
    del g.node[:]
    g.node.extend(kept)
    og.refresh()
    return node


def finalize(og: OnnxGraph, value_infos: dict[str, tuple[int, list[int]]]) -> None:
    """Topologically re-sort, drop dead initializers, declare custom-op outputs, add the plugin domain."""
    from onnx import helper

    g = og.proto.graph
    _toposort(g)
    _drop_dead_constants(og)
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    known = {v.name for v in g.value_info}
    for name, (elem, shape) in value_infos.items():
        if name not in known and name not in {o.name for o in g.output}:
            g.value_info.append(helper.make_tensor_value_info(name, elem, shape))
    if not any(op.domain == PLUGIN_DOMAIN for op in og.proto.opset_import):
        og.proto.opset_import.append(helper.make_opsetid(PLUGIN_DOMAIN, 1))
    og.refresh()


def _drop_dead_constants(og: OnnxGraph) -> None:
    """Remove the constant chains no node reads any more (a table whose readers all became plugins that bake it)."""
    g = og.proto.graph
    while True:
        used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
        dead = [n for n in g.node if n.output and not any(o in used for o in n.output)
                and all(og.constant(o) for o in n.output if o)]
        if not dead:
            return
        for n in dead:
            g.node.remove(n)
        og.refresh()


def _toposort(g: Any) -> None:
    nodes = list(g.node)
    available = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
    pending = deque(range(len(nodes)))
    out = []
    stalls = 0
    while pending:
        i = pending.popleft()
        if all(x in available for x in nodes[i].input):
            out.append(nodes[i])
            available.update(nodes[i].output)
            stalls = 0
        else:
            pending.append(i)
            stalls += 1
            if stalls > len(pending):
                missing = [x for x in nodes[i].input if x not in available]
                raise UsageError(f"internal carve error: ONNX node {nodes[i].name} waits on {missing}; the rewritten "
                                 "graph has a cycle")
    del g.node[:]
    g.node.extend(out)
