"""Bytes, FLOPs and the roofline bound of a region on the target GPU.

A region's traffic is what crosses its boundary (inputs read, outputs written, weights read):
tensors that stay inside a fused kernel never touch memory. Its bound is the faster of the two
limits a kernel cannot beat, ``max(bytes / bandwidth, flops / peak)``. "TRT at roofline" is then a
measured statement: the engine's time for the region is within a small factor of that bound.
"""

from __future__ import annotations

from collections.abc import Iterable

from ytk_hookspecs.models import GpuProperties

from .models import RooflineFigures
from .onnx_graph import Node, OnnxGraph

WEIGHTED_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "QLinearConv", "QLinearMatMul"}
ATTENTION_OPS = {"Attention", "MultiHeadAttention", "ScaledDotProductAttention", "GroupQueryAttention"}
_POINTWISE = {"Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "Erf",
              "Gelu", "Pow", "Sqrt", "Reciprocal", "Clip", "Neg", "Abs", "Exp", "Log", "Max", "Min", "Where",
              "PRelu", "Elu", "Selu", "Softplus", "Mish", "Cast", "Not", "And", "Or", "Equal", "Less", "Greater"}
_REDUCING = {"Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "LayerNormalization",
             "GroupNormalization", "InstanceNormalization", "GlobalAveragePool", "GlobalMaxPool", "AveragePool",
             "MaxPool", "RMSNormalization"}


def _prod(xs: Iterable[int | str]) -> int | None:
    n = 1
    for x in xs:
        if not isinstance(x, int):
            return None
        n *= x
    return n


def is_weighted(g: OnnxGraph, node: Node) -> bool:
    """A GEMM-like op with a constant operand: conv, linear, matmul against weights."""
    return node.op_type in WEIGHTED_OPS and any(g.is_const(t) for t in node.inputs[:2] if t)


def is_attention_op(g: OnnxGraph, node: Node) -> bool:
    """An activation x activation product (Q.K, attn.V) or a fused attention op."""
    if node.op_type in ATTENTION_OPS:
        return True
    return node.op_type in ("MatMul", "Einsum") and len([t for t in node.inputs if t]) >= 2 and \
        not any(g.is_const(t) for t in node.inputs if t)


def node_flops(g: OnnxGraph, node: Node) -> int | None:
    """Multiply-adds count twice; pointwise ops one per element; data movement none."""
    out = g.shape(node.outputs[0]) if node.outputs and node.outputs[0] else None
    op = node.op_type
    if op in ("Conv", "ConvTranspose") and len(node.inputs) > 1:
        w = g.shape(node.inputs[1])
        ref = out if op == "Conv" else g.shape(node.inputs[0])
        if w is None or ref is None:
            return None
        a, b = _prod(ref), _prod(w[1:])
        return None if a is None or b is None else 2 * a * b
    if op in ("MatMul", "Gemm"):
        x = g.shape(node.inputs[0])
        if x is None or out is None:
            return None
        k = x[0] if op == "Gemm" and node.attrs.get("transA") else x[-1]
        n = _prod(out)
        return None if n is None or not isinstance(k, int) else 2 * n * k
    if out is None:
        return None
    n = _prod(out)
    if n is None:
        return None
    if op in _POINTWISE:
        return n
    if op == "BatchNormalization":
        return 2 * n
    if op in _REDUCING:
        src = g.shape(node.inputs[0]) if node.inputs else None
        m = _prod(src) if src else n
        return 5 * (m or n)
    if op in ATTENTION_OPS or op == "Einsum":
        return 2 * n
    return 0


def boundary(g: OnnxGraph, nodes: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
    """(activation inputs, outputs, constant inputs) crossing the region boundary, in graph order."""
    inside = set(nodes)
    ordered = sorted(inside, key=lambda n: g.by_name[n].index)
    produced = {o for n in ordered for o in g.by_name[n].outputs if o}
    graph_out = set(g.graph_outputs)
    ins: list[str] = []
    consts: list[str] = []
    outs: list[str] = []
    for name in ordered:
        node = g.by_name[name]
        for t in node.inputs:
            if not t or t in produced:
                continue
            bucket = consts if g.is_const(t) else ins
            if t not in bucket:
                bucket.append(t)
        for o in node.outputs:
            if o and (o in graph_out or any(c not in inside for c in g.consumers.get(o, []))):
                outs.append(o)
    return ins, outs, consts


def region_cost(g: OnnxGraph, nodes: Iterable[str], precision: str) -> tuple[int | None, int | None]:
    """(bytes crossing the boundary, FLOPs) of a region; None where a shape is unknown."""
    nodes = list(nodes)
    ins, outs, consts = boundary(g, nodes)
    total = 0
    for t in (*ins, *outs, *consts):
        b = g.tensor_bytes(t, precision)
        if b is None:
            return None, None
        total += b
    flops = 0
    for n in nodes:
        f = node_flops(g, g.by_name[n])
        if f is None:
            return total, None
        flops += f
    return total, flops


def roofline(bytes_: int, flops: int, measured_ms: float, gpu: GpuProperties, precision: str, *,
             launches: int = 0, launch_ms: float = 0.0) -> RooflineFigures:
    """The bound and how close the measurement is to it.

    A plugin is at least one kernel launch per site, so ``launches x launch_ms`` is part of the
    bound: a tiny region already costing little more than its launch has nothing left to win.
    """
    peak = gpu.fp16_tflops if precision == "fp16" else gpu.fp32_tflops
    mem_ms = bytes_ / (gpu.mem_bandwidth_gbs * 1e9) * 1e3
    cmp_ms = flops / (peak * 1e12) * 1e3
    floor = launches * launch_ms
    bound = max(mem_ms, cmp_ms) + floor
    return RooflineFigures(bytes=int(bytes_), flops=int(flops), bound_ms=bound, launch_ms=floor,
                           measured_ms=measured_ms, fraction=(bound / measured_ms) if measured_ms > 0 else 0.0,
                           limiter="memory" if mem_ms >= cmp_ms else "compute", gpu=gpu.name)


def fused_weights(g: OnnxGraph, nodes: list[str], precision: str) -> list[float]:
    """How one fused layer's time splits over the ONNX nodes it computes.

    Each node is charged the boundary tensors it touches (inputs it reads from outside the layer,
    its weights) plus its FLOPs; the layer's outputs go to its heaviest node. So a residual add
    fused into a conv is charged the residual it reads, not a standalone kernel's full traffic.
    Falls back to an even split where shapes are unknown.
    """
    if len(nodes) == 1:
        return [1.0]
    inside = set(nodes)
    produced = {o for n in nodes for o in g.by_name[n].outputs if o}
    graph_out = set(g.graph_outputs)
    cost: list[float] = []
    out_bytes = 0
    for name in nodes:
        node = g.by_name[name]
        b = 0
        for t in node.inputs:
            if t and t not in produced:
                tb = g.tensor_bytes(t, precision)
                if tb is None:
                    return [1.0] * len(nodes)
                b += tb
        for o in node.outputs:
            if o and (o in graph_out or any(c not in inside for c in g.consumers.get(o, []))):
                ob = g.tensor_bytes(o, precision)
                if ob is None:
                    return [1.0] * len(nodes)
                out_bytes += ob
        f = node_flops(g, node) or 0
        # One byte of traffic costs about as much as ~100 fp16 FLOPs on the targets we know (Orin: 42.5
        # TFLOPS / 205 GB/s); the exact ratio only matters between nodes of one layer.
        cost.append(b + f / 100.0)
    heaviest = max(range(len(nodes)), key=lambda i: node_flops(g, g.by_name[nodes[i]]) or 0)
    cost[heaviest] += out_bytes
    s = sum(cost)
    if s <= 0:
        return [1.0] * len(nodes)
    return [c / s for c in cost]
