"""TensorRT-style layers out of ONNX nodes: fusion, layer names, tensor formats and reformats.

Rules (a simplified TensorRT 8.6 builder):

* a convolution absorbs the single-consumer chain of pointwise ops after it (activation, residual
  add): ``/conv/Conv + /act/Relu`` for a bare ReLU, ``A + PWN(B, C)`` otherwise;
* a chain of pointwise ops fuses into one ``PWN(...)`` layer (nested two at a time, as TensorRT
  names them); consecutive shuffles fuse into one ``A + B`` shuffle;
* constants and shape arithmetic fold away; a custom-op node is one plugin layer;
* in fp16, convolutions keep activations channels-last (kHWC8 fp16), matmul/shuffle/slice layers
  want row-major (kLINEAR); the network's own inputs and outputs are fp32 kLINEAR. Wherever a
  producer's format differs from what its consumer takes (a plugin's declared formats included),
  a ``Reformatting CopyNode for Input Tensor i to <layer>`` layer is inserted. Those cover no ONNX
  node: they are the glue that plugins with matching formats remove.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ytk_hookspecs.models import PluginDescription, PluginMeta

from .cost_model import KINDS, Cost, Efficiency, GpuProperties, is_zero_copy, op_flops, op_kind, roofline_ms
from .graph import Graph, Node

#: Achieved bandwidth assumed for a plugin whose kernel declares no measured characteristics.
UNDECLARED_PLUGIN_FRACTION = 0.25

_TRT_TYPES = {
    "conv_1x1": "CaskConvolution", "conv_dense": "CaskConvolution", "conv_grouped": "CaskConvolution",
    "conv_depthwise_3x3": "CaskConvolution", "conv_depthwise_5x5": "CaskConvolution",
    "conv_depthwise_strided": "CaskConvolution", "gemm": "MatrixMultiply", "pointwise": "PointWiseV2",
    "shuffle": "Shuffle", "slice": "Slice", "concat": "Concatenation", "pad": "Padding", "reduce": "Reduce",
    "pool": "Pooling", "resize": "Resize", "reformat": "Reformat", "plugin": "PluginV2", "other": "Unknown",
}

Fmt = tuple[str, str]  # (dtype, format)


@dataclass
class Layer:
    name: str
    kind: str
    onnx_nodes: list[str]
    inputs: list[str]
    outputs: list[str]
    weights: list[str] = field(default_factory=list)
    in_formats: list[Fmt] = field(default_factory=list)
    out_formats: list[Fmt] = field(default_factory=list)
    cost: Cost | None = None
    plugin: str | None = None
    zero_copy: bool = False

    @property
    def trt_type(self) -> str:
        return _TRT_TYPES.get(self.kind, "Unknown")

    @property
    def ms(self) -> float:
        return self.cost.ms if self.cost else 0.0


def _pwn(names: list[str]) -> str:
    if len(names) <= 2:
        return f"PWN({', '.join(names)})"
    return f"PWN({_pwn(names[:-1])}, {names[-1]})"


def _folded(n: Node, g: Graph) -> bool:
    return n.op_type in ("Constant", "ConstantOfShape", "Shape", "Size") or \
        all(g.tensor(o).const for o in n.outputs if o)


def group_nodes(g: Graph) -> list[list[Node]]:
    """Partition the non-folded nodes into fused groups, in execution order."""
    assigned: set[int] = set()
    done_tensors = set(g.inputs) | {t for t, v in g.tensors.items() if v.const}
    groups: list[list[Node]] = []
    outputs = set(g.outputs)

    def chain_next(last: Node, ok_kind: str) -> Node | None:
        outs = [o for o in last.outputs if o]
        if len(outs) != 1 or outs[0] in outputs:
            return None
        cons = g.consumers.get(outs[0], [])
        if len(cons) != 1:
            return None
        c = g.nodes[cons[0]]
        if c.index in assigned or c.is_custom or _folded(c, g) or op_kind(c, g) != ok_kind:
            return None
        # Every other input must already exist, or the fused kernel could not start.
        if any(x and x != outs[0] and x not in done_tensors for x in c.inputs):
            return None
        return c

    for n in g.nodes:
        if n.index in assigned or _folded(n, g):
            continue
        grp = [n]
        kind = "plugin" if n.is_custom else op_kind(n, g)
        follow = {"conv_1x1": "pointwise", "conv_dense": "pointwise", "conv_grouped": "pointwise",
                  "conv_depthwise_3x3": "pointwise", "conv_depthwise_5x5": "pointwise",
                  "conv_depthwise_strided": "pointwise", "pointwise": "pointwise", "shuffle": "shuffle"}.get(kind)
        assigned.add(n.index)
        done_tensors.update(o for o in n.outputs if o)
        while follow and len(grp) < 5:
            nxt = chain_next(grp[-1], follow)
            if nxt is None:
                break
            grp.append(nxt)
            assigned.add(nxt.index)
            done_tensors.update(o for o in nxt.outputs if o)
        groups.append(grp)
    return groups


def layer_name(grp: list[Node], g: Graph) -> str:
    head = grp[0]
    kind = op_kind(head, g)
    if head.is_custom:
        return head.name
    if kind.startswith("conv"):
        rest = [n.name for n in grp[1:]]
        if not rest:
            return head.name
        if len(grp) == 2 and grp[1].op_type == "Relu":
            return f"{head.name} + {grp[1].name}"
        return f"{head.name} + {_pwn(rest)}"
    if kind == "pointwise":
        return _pwn([n.name for n in grp])
    return " + ".join(n.name for n in grp)


def _want_format(kind: str, precision: str) -> str | None:
    """The format a standard layer takes; None means it follows its first input's."""
    if precision != "fp16":
        return "kLINEAR"
    if kind.startswith("conv"):
        return "kHWC8"
    if kind in ("pointwise", "concat", "pool"):
        return None
    return "kLINEAR"


def _nbytes(g: Graph, name: str, fmt: Fmt) -> float:
    t = g.tensor(name)
    size = {"float16": 2, "float32": 4, "int8": 1, "int32": 4}.get(fmt[0], 4)
    n = t.numel() * size
    if fmt[1] == "kHWC8" and t.shape and len(t.shape) == 4 and t.shape[1]:
        c = t.shape[1]
        n = n * (math.ceil(c / 8) * 8) / c
    return float(n)


def build_layers(g: Graph, precision: str, gpu: GpuProperties,
                 plugins: dict[tuple[str, str, str], PluginDescription]) -> list[Layer]:
    """The engine's layers in execution order, reformats included, each priced by the cost model."""
    act_dtype = "float16" if precision == "fp16" else "float32"
    fmt_of: dict[str, Fmt] = {i: ("float32", "kLINEAR") for i in g.inputs}
    layers: list[Layer] = []
    for grp in group_nodes(g):
        head = grp[0]
        members = {o for n in grp for o in n.outputs if o}
        ext_in: list[str] = []
        weights: list[str] = []
        for n in grp:
            for x in n.inputs:
                if not x or x in members or x in ext_in or x in weights:
                    continue
                (weights if g.tensor(x).const else ext_in).append(x)
        outs = [o for n in grp for o in n.outputs if o and (o in g.outputs or any(
            c not in {m.index for m in grp} for c in g.consumers.get(o, [])))]
        name = layer_name(grp, g)
        if head.is_custom:
            desc = plugins.get(head.plugin_key)
            if desc is None:
                from ytk_hookspecs.errors import StageError

                ns, op, ver = head.plugin_key
                raise StageError(f"node {head.name} needs plugin {ns}::{op} v{ver}, which was not supplied")
            acts = [x for x in head.inputs if x and not g.tensor(x).const]
            idx = {x: i for i, x in enumerate(i for i in head.inputs if i)}
            want = [(desc.input_dtypes[idx[x]], desc.input_formats[idx[x]]) for x in acts]
            out_fmts = list(zip(desc.output_dtypes, desc.output_formats))
            lay = Layer(name, "plugin", [head.name], acts, [o for o in head.outputs if o], weights, want, out_fmts,
                        plugin=desc.name)
        else:
            kind = op_kind(head, g)
            wf = _want_format(kind, precision)
            first = fmt_of.get(ext_in[0], (act_dtype, "kLINEAR")) if ext_in else (act_dtype, "kLINEAR")
            fmt = (act_dtype, wf if wf is not None else first[1])
            lay = Layer(name, kind, [n.name for n in grp], ext_in, outs, weights, [fmt] * len(ext_in),
                        [fmt] * len(outs), zero_copy=kind == "shuffle" and all(is_zero_copy(n, g) for n in grp))
        for i, (x, want_fmt) in enumerate(zip(lay.inputs, lay.in_formats)):
            have = fmt_of.get(x, (act_dtype, "kLINEAR"))
            if have != want_fmt:
                layers.append(_reformat(g, f"Reformatting CopyNode for Input Tensor {i} to {lay.name}", x, have,
                                        want_fmt, gpu, precision))
        lay.cost = _price(lay, g, gpu, precision, plugins.get(head.plugin_key) if head.is_custom else None)
        layers.append(lay)
        for o, f in zip(lay.outputs, lay.out_formats):
            fmt_of[o] = f
    by_output = {o: lay for lay in layers for o in lay.outputs}
    for k, o in enumerate(g.outputs):
        have = fmt_of.get(o, ("float32", "kLINEAR"))
        if have != ("float32", "kLINEAR") and o in by_output:
            layers.append(_reformat(g, f"Reformatting CopyNode for Output Tensor {k} to {by_output[o].name}", o,
                                    have, ("float32", "kLINEAR"), gpu, precision))
    return layers


def _reformat(g: Graph, name: str, tensor: str, have: Fmt, want: Fmt, gpu: GpuProperties,
              precision: str) -> Layer:
    lay = Layer(name, "reformat", [], [tensor], [tensor], in_formats=[have], out_formats=[want])
    nbytes = _nbytes(g, tensor, have) + _nbytes(g, tensor, want)
    lay.cost = roofline_ms(nbytes, 0.0, KINDS["reformat"], gpu, precision)
    return lay


def _price(lay: Layer, g: Graph, gpu: GpuProperties, precision: str, desc: PluginDescription | None) -> Cost:
    w_dtype = "float16" if precision == "fp16" else "float32"
    if desc is not None:
        meta = plugin_meta(desc)
        frac = meta.perf.achieved_bandwidth_fraction if meta and meta.perf else UNDECLARED_PLUGIN_FRACTION
        idx = {x: i for i, x in enumerate(i for i in g.nodes[g.producer[lay.outputs[0]]].inputs if i)}
        nbytes = sum(_nbytes(g, x, f) for x, f in zip(lay.inputs, lay.in_formats))
        nbytes += sum(_nbytes(g, w, (desc.input_dtypes[idx[w]], "kLINEAR")) for w in lay.weights if w in idx)
        nbytes += sum(_nbytes(g, o, f) for o, f in zip(lay.outputs, lay.out_formats))
        return roofline_ms(nbytes, 0.0, Efficiency(frac, 1.0, False), gpu, precision)
    if lay.zero_copy:
        return Cost(0.0, 0.0, 0.001, "launch")
    out_bytes = sum(_nbytes(g, o, f) for o, f in zip(lay.outputs, lay.out_formats))
    if lay.kind == "slice":
        # A slice reads only the part it keeps, not the whole tensor it cuts from.
        return roofline_ms(2.0 * out_bytes, 0.0, KINDS["slice"], gpu, precision)
    nbytes = sum(_nbytes(g, x, f) for x, f in zip(lay.inputs, lay.in_formats))
    nbytes += sum(_nbytes(g, w, (w_dtype, "kLINEAR")) for w in lay.weights
                  if g.tensor(w).shape is not None and len(g.tensor(w).shape or ()) > 1)
    nbytes += out_bytes
    flops = sum(op_flops(g.nodes[g.producer[o]], g) for o in {o for o in _group_outputs(lay, g)})
    return roofline_ms(nbytes, flops, KINDS.get(lay.kind, KINDS["other"]), gpu, precision)


def _group_outputs(lay: Layer, g: Graph) -> list[str]:
    names = set(lay.onnx_nodes)
    return [n.outputs[0] for n in g.nodes if n.name in names and n.outputs and n.outputs[0]]


def plugin_meta(desc: PluginDescription) -> PluginMeta | None:
    """The plugin_meta a plugin was built from (carried in its self-description)."""
    if not desc.meta_yaml:
        return None
    try:
        return desc.plugin_meta()
    except Exception:
        return None
