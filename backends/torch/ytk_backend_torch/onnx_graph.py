"""Reading an ONNX file into the small graph form the executor folds and runs.

Only what execution needs is kept: nodes in file order (ONNX requires topological order), their
attributes as Python values, initializers as torch tensors, and the static input shapes. Every
problem a user can cause (a missing file, an input with a symbolic dim, a dangling edge) is a
:class:`StageError` naming the file and the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

from ytk_hookspecs.errors import StageError

#: ONNX element type -> torch dtype (the types an inference graph carries).
ONNX_TO_TORCH: dict[int, torch.dtype] = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.BFLOAT16: torch.bfloat16,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT16: torch.int16,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.BOOL: torch.bool,
}


@dataclass
class Node:
    """One ONNX node: ``inputs`` keeps empty strings for omitted optional inputs."""

    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op_type": self.op_type, "domain": self.domain,
                "inputs": list(self.inputs), "outputs": list(self.outputs), "attrs": _plain(self.attrs)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Node":
        return cls(d["name"], d["op_type"], d["domain"], list(d["inputs"]), list(d["outputs"]), dict(d["attrs"]))


@dataclass
class GraphInput:
    name: str
    shape: list[int]
    dtype: torch.dtype


@dataclass
class Graph:
    nodes: list[Node]
    initializers: dict[str, torch.Tensor]
    inputs: list[GraphInput]
    outputs: list[str]
    #: shapes the file itself declares (value_info / outputs), used to check plugin outputs
    declared_shapes: dict[str, list[int]]
    opset: int


def _plain(v: Any) -> Any:
    """Attributes as JSON-able values (torch.save of the plan stores them with the tensors)."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _attr_value(a: onnx.AttributeProto) -> Any:
    if a.type == onnx.AttributeProto.TENSOR:
        return torch.from_numpy(np.array(numpy_helper.to_array(a.t)))
    if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return None  # control flow is refused by op support, the body is never needed
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list):
        return [x.decode() if isinstance(x, bytes) else x for x in v]
    return v


def _static_shape(vi: onnx.ValueInfoProto) -> list[int] | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return dims


def load_graph(path: Path) -> Graph:
    """Load ``path`` (external data next to it is resolved) into a :class:`Graph`."""
    path = Path(path)
    try:
        model = onnx.load(str(path))
    except FileNotFoundError:
        raise StageError(f"{path}: ONNX file not found") from None
    except Exception as e:
        raise StageError(f"{path}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    return graph_from_proto(model, str(path))


def graph_from_proto(model: onnx.ModelProto, origin: str = "<model>") -> Graph:
    """Convert an in-memory ``ModelProto``; ``origin`` names it in errors."""
    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    inits: dict[str, torch.Tensor] = {}
    for t in g.initializer:
        try:
            arr = numpy_helper.to_array(t, base_dir="")
        except Exception as e:
            raise StageError(f"{origin}: initializer {t.name!r} cannot be read ({e}); if the model uses "
                             "external data, keep the data file next to the .onnx") from None
        inits[t.name] = torch.from_numpy(np.array(arr))
    inputs = []
    for vi in g.input:
        if vi.name in inits:
            continue  # old exporters list initializers as inputs too
        shape = _static_shape(vi)
        if shape is None:
            raise StageError(
                f"{origin}: graph input {vi.name!r} has a symbolic or unknown shape. The torch engine builds "
                "for the static shapes of model.npz; export with fixed input sizes (prepare does this).")
        et = vi.type.tensor_type.elem_type
        if et not in ONNX_TO_TORCH:
            raise StageError(f"{origin}: graph input {vi.name!r} has ONNX element type {et}, which the torch "
                             "engine does not support")
        inputs.append(GraphInput(vi.name, shape, ONNX_TO_TORCH[et]))
    declared: dict[str, list[int]] = {}
    for vi in list(g.value_info) + list(g.output):
        s = _static_shape(vi)
        if s is not None:
            declared[vi.name] = s
    known = set(inits) | {i.name for i in inputs}
    nodes: list[Node] = []
    used_names: set[str] = set()
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        while name in used_names:  # unnamed or duplicate nodes still need a unique layer name
            name = f"{name}_{i}"
        used_names.add(name)
        for x in n.input:
            if x and x not in known:
                raise StageError(f"{origin}: node {name!r} ({n.op_type}) reads {x!r}, which no earlier node "
                                 "produces; the graph is not topologically sorted or is broken")
        known.update(o for o in n.output if o)
        nodes.append(Node(name, n.op_type, n.domain, list(n.input), list(n.output),
                          {a.name: _attr_value(a) for a in n.attribute}))
    for o in g.output:
        if o.name not in known:
            raise StageError(f"{origin}: graph output {o.name!r} is produced by no node")
    return Graph(nodes, inits, inputs, [o.name for o in g.output], declared, opset)
