"""The ONNX graph as the simulated engine sees it: nodes, tensors with concrete shapes, constants.

Shapes come from ONNX shape inference at the shapes of the given inputs. A custom-op node's output
shapes come from the ONNX's own value_info when the exporter left it there, and otherwise from the
plugin's output shape expressions, the way TensorRT asks a plugin for its output dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ytk_hookspecs import shape_expr
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import PLUGIN_DOMAIN, PluginMeta

_STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")

_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4, "int8": 1,
             "uint8": 1, "bool": 1}


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...] | None
    dtype: str
    const: bool = False

    def numel(self) -> int:
        if self.shape is None:
            return 0
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    def nbytes(self, dtype: str | None = None) -> int:
        return self.numel() * _ITEMSIZE.get(dtype or self.dtype, 4)


@dataclass
class Node:
    index: int
    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def is_custom(self) -> bool:
        return self.domain not in _STANDARD_DOMAINS

    @property
    def plugin_key(self) -> tuple[str, str, str]:
        def s(v: Any, default: str) -> str:
            return v.decode() if isinstance(v, bytes) else (default if v is None else str(v))

        return (s(self.attrs.get("plugin_namespace"), ""), self.op_type, s(self.attrs.get("plugin_version"), "1"))


@dataclass
class Graph:
    nodes: list[Node]
    tensors: dict[str, Tensor]
    inputs: list[str]
    outputs: list[str]
    producer: dict[str, int]
    consumers: dict[str, list[int]]

    def tensor(self, name: str) -> Tensor:
        return self.tensors.get(name) or Tensor(name, None, "float32")

    def activations(self, names: list[str]) -> list[str]:
        return [n for n in names if n and not self.tensor(n).const]


def _dtype_name(elem: int) -> str:
    name = TensorProto.DataType.Name(elem).lower() if elem else "float"
    return {"float": "float32", "double": "float64"}.get(name, name)


def _shape_of(vi: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def load_graph(onnx_path: Path, input_shapes: dict[str, tuple[int, ...]],
               plugin_metas: dict[tuple[str, str, str], PluginMeta]) -> Graph:
    """Load ``onnx_path`` with every tensor's shape resolved for the given input shapes."""
    try:
        model = onnx.load(str(onnx_path))
    except Exception as e:
        raise StageError(f"{onnx_path}: not a readable ONNX model: {e}") from None
    g = model.graph
    init_names = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name in input_shapes and vi.name not in init_names:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in input_shapes[vi.name]:
                dims.add().dim_value = int(d)
    if not any(o.domain == PLUGIN_DOMAIN for o in model.opset_import) and \
            any(n.domain == PLUGIN_DOMAIN for n in g.node):
        model.opset_import.append(helper.make_opsetid(PLUGIN_DOMAIN, 1))
    known = _infer(model)
    custom = [n for n in g.node if n.domain not in _STANDARD_DOMAINS]
    # Each pass resolves at least the first custom node whose inputs are known; downstream shapes follow.
    for _ in range(len(custom) + 1):
        added = False
        for n in custom:
            if all(o in known for o in n.output if o):
                continue
            ins = [known.get(i) for i in n.input if i]
            if any(s is None for s in ins):
                continue
            key = _key(n)
            meta = plugin_metas.get(key)
            if meta is None:
                raise StageError(f"custom-op node {n.name} ({key[0]}::{key[1]} v{key[2]}): its output shapes are not "
                                 "in the ONNX and no plugin declares them")
            shapes = [list(s[1]) for s in ins]  # type: ignore[index]
            try:
                ext = shape_expr.evaluate_extents(meta.extents, shapes)
                for o, contract in zip(n.output, meta.outputs):
                    dims = [shape_expr.evaluate(e, shapes, ext) for e in contract.shape]
                    elem = TensorProto.FLOAT16 if contract.dtype == "float16" else TensorProto.FLOAT
                    g.value_info.append(helper.make_tensor_value_info(o, elem, dims))
            except shape_expr.ShapeExprError as e:
                raise StageError(f"custom-op node {n.name}: plugin {key[1]}'s output shape expressions do not "
                                 f"evaluate at input shapes {shapes}: {e}") from None
            added = True
        if not added:
            break
        known = _infer(model)
    return _build(model, known)


def _key(n: onnx.NodeProto) -> tuple[str, str, str]:
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}

    def s(v: Any, default: str) -> str:
        return v.decode() if isinstance(v, bytes) else (default if v is None else str(v))

    return (s(attrs.get("plugin_namespace"), ""), n.op_type, s(attrs.get("plugin_version"), "1"))


def _infer(model: onnx.ModelProto) -> dict[str, tuple[str, tuple[int, ...]]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as e:
        raise StageError(f"ONNX shape inference failed: {e}") from None
    g = inferred.graph
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for vi in (*g.input, *g.value_info, *g.output):
        shp = _shape_of(vi)
        if shp is not None:
            out[vi.name] = (_dtype_name(vi.type.tensor_type.elem_type), shp)
    for t in g.initializer:
        out[t.name] = (_dtype_name(t.data_type), tuple(int(d) for d in t.dims))
    return out


def _build(model: onnx.ModelProto, known: dict[str, tuple[str, tuple[int, ...]]]) -> Graph:
    g = model.graph
    consts = {t.name for t in g.initializer}
    nodes: list[Node] = []
    for i, n in enumerate(g.node):
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute if a.type != onnx.AttributeProto.TENSOR}
        nodes.append(Node(i, n.name or f"{n.op_type}_{i}", n.op_type, n.domain, list(n.input), list(n.output), attrs))
        # Shape subgraphs and Constants fold away at build time, as in TensorRT.
        if n.op_type in ("Constant", "ConstantOfShape", "Shape", "Size") or \
                (n.input and all((not x) or x in consts for x in n.input) and n.domain in _STANDARD_DOMAINS):
            consts.update(o for o in n.output if o)
    tensors: dict[str, Tensor] = {}
    for name, (dt, shp) in known.items():
        tensors[name] = Tensor(name, shp, dt, const=name in consts)
    for name in consts:
        tensors.setdefault(name, Tensor(name, None, "float32", const=True))
    producer = {o: n.index for n in nodes for o in n.outputs if o}
    consumers: dict[str, list[int]] = {}
    for n in nodes:
        for x in n.inputs:
            if x:
                consumers.setdefault(x, []).append(n.index)
    inputs = [vi.name for vi in g.input if vi.name not in {t.name for t in g.initializer}]
    outputs = [vi.name for vi in g.output]
    missing = [n.name for n in nodes if not _folded(n, tensors)
               and any(tensors.get(o) is None or tensors[o].shape is None for o in n.outputs if o)]
    if missing:
        raise StageError(f"could not resolve the output shapes of {len(missing)} node(s) (first: {missing[0]}); the "
                         "simulated engine prices every layer from its real shapes")
    return Graph(nodes, tensors, inputs, outputs, producer, consumers)


def _folded(n: Node, tensors: dict[str, Tensor]) -> bool:
    return all(tensors.get(o) is not None and tensors[o].const for o in n.outputs if o)
