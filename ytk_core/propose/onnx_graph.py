"""A read-only index over the ONNX graph: node order, dataflow, shapes, attributes.

Weights are never needed (only their dims), so the model is parsed once and the index keeps only
names, shapes and attributes; that keeps propose well under a second on the worked example.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ytk_hookspecs.models import PLUGIN_DOMAIN

from ..errors import UsageError

_ELEM_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
_FLOAT_TYPES = {1, 10, 11, 16}
_ELEM_NAMES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool", 10: "float16",
               11: "float64", 16: "bfloat16"}


@dataclass
class Node:
    name: str
    op_type: str
    domain: str
    index: int
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class TensorMeta:
    shape: list[int | str] | None
    elem_type: int

    @property
    def dtype(self) -> str:
        return _ELEM_NAMES.get(self.elem_type, f"onnx-type-{self.elem_type}")

    @property
    def is_float(self) -> bool:
        return self.elem_type in _FLOAT_TYPES


class OnnxGraph:
    """Names, order, producers/consumers, shapes and attributes of an ONNX model's main graph."""

    def __init__(self, model: Any, path: Path | None = None) -> None:
        from onnx import helper

        g = model.graph
        self.path = path
        self.nodes: list[Node] = []
        self.by_name: dict[str, Node] = {}
        self.producer: dict[str, str] = {}
        self.consumers: dict[str, list[str]] = {}
        self.meta: dict[str, TensorMeta] = {}
        self.constants: set[str] = set()
        self.graph_inputs = [i.name for i in g.input]
        self.graph_outputs = [o.name for o in g.output]
        for init in g.initializer:
            self.constants.add(init.name)
            self.meta[init.name] = TensorMeta(shape=[int(d) for d in init.dims], elem_type=init.data_type)
        for vi in (*g.input, *g.output, *g.value_info):
            self.meta.setdefault(vi.name, _meta_of(vi))
        for i, n in enumerate(g.node):
            name = n.name or (n.output[0] if n.output else f"<node {i}>")
            attrs = {}
            for a in n.attribute:
                if a.type == a.GRAPH or a.type == a.GRAPHS:
                    attrs[a.name] = "<subgraph>"
                elif a.type == a.TENSOR:
                    attrs[a.name] = "<tensor>"
                    if n.op_type == "Constant":
                        t = a.t
                        for o in n.output:
                            self.meta.setdefault(o, TensorMeta(shape=[int(d) for d in t.dims], elem_type=t.data_type))
                else:
                    attrs[a.name] = helper.get_attribute_value(a)
            node = Node(name=name, op_type=n.op_type, domain=n.domain, index=i, inputs=list(n.input),
                        outputs=list(n.output), attrs=attrs)
            self.nodes.append(node)
            self.by_name[name] = node
            for o in n.output:
                if o:
                    self.producer[o] = name
            for t in n.input:
                if t:
                    self.consumers.setdefault(t, []).append(name)
            if n.op_type == "Constant":
                self.constants.update(o for o in n.output if o)

    @classmethod
    def load(cls, path: str | Path) -> "OnnxGraph":
        """Parse ``path`` (external weight files are not read); a bad file is a clear error."""
        import onnx

        p = Path(path)
        if not p.is_file():
            raise UsageError(f"{p}: ONNX file not found; pass the model.onnx the engine was compiled from (--onnx)")
        try:
            model = onnx.load(str(p), load_external_data=False)
        except Exception as e:  # protobuf raises its own DecodeError
            raise UsageError(f"{p}: not a readable ONNX model ({type(e).__name__}: {str(e)[:200]})") from None
        graph = cls(model, p)
        if graph.missing_shapes():
            try:
                inferred = onnx.shape_inference.infer_shapes(model)
                for vi in inferred.graph.value_info:
                    graph.meta.setdefault(vi.name, _meta_of(vi))
            except Exception:
                pass  # shapes stay unknown; roofline figures for those regions are reported as unknown
        return graph

    # -- queries ----------------------------------------------------------------------------------
    def missing_shapes(self) -> int:
        return sum(1 for n in self.nodes for o in n.outputs
                   if o and (self.meta.get(o) is None or self.meta[o].shape is None))

    def shape(self, tensor: str) -> list[int | str] | None:
        m = self.meta.get(tensor)
        return m.shape if m else None

    def is_const(self, tensor: str) -> bool:
        return tensor in self.constants

    def is_plugin(self, node: Node) -> bool:
        return node.domain == PLUGIN_DOMAIN or "plugin_namespace" in node.attrs

    def activation_inputs(self, node: Node) -> list[str]:
        return [t for t in node.inputs if t and not self.is_const(t)]

    def const_inputs(self, node: Node) -> list[str]:
        return [t for t in node.inputs if t and self.is_const(t)]

    def tensor_bytes(self, tensor: str, precision: str) -> int | None:
        """Bytes of ``tensor`` as the engine holds it: float tensors at the engine precision."""
        m = self.meta.get(tensor)
        if m is None or m.shape is None or any(not isinstance(d, int) for d in m.shape):
            return None
        n = 1
        for d in m.shape:
            n *= int(d)
        size = (2 if precision == "fp16" else 4) if m.is_float else _ELEM_BYTES.get(m.elem_type, 4)
        return n * size

    def successors(self) -> dict[str, list[str]]:
        """Each node's consumers (what the carve's convexity and part rules walk: region_rules)."""
        return {n.name: [c for o in n.outputs if o for c in self.consumers.get(o, [])] for n in self.nodes}

    def span(self, first: str, last: str) -> list[str]:
        """Nodes from ``first`` to ``last`` inclusive, in graph order."""
        a, b = self.by_name[first].index, self.by_name[last].index
        lo, hi = min(a, b), max(a, b)
        return [n.name for n in self.nodes[lo:hi + 1]]


def _meta_of(vi: Any) -> TensorMeta:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return TensorMeta(shape=None, elem_type=tt.elem_type)
    dims: list[int | str] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or "?")
    return TensorMeta(shape=dims, elem_type=tt.elem_type)
