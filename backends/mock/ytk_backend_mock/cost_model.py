"""The simulated target's cost model: how long a layer takes, from its bytes and FLOPs.

A layer's time is the larger of its memory time (bytes moved over the target's published
bandwidth) and its compute time (FLOPs over the published peak), each divided by an efficiency
that reflects what real engines achieve on that kind of layer, plus a launch overhead:

* dense GEMMs and 1x1 convolutions run on tensor cores near the roofline;
* depthwise convolutions run on CUDA cores far from it (little reuse, strided channel access);
* pointwise chains are fused and pay only for the tensors entering and leaving them.

The efficiencies are the simulator's assumptions, written down here so they can be argued with;
they are not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

from ytk_hookspecs.models import GPU_PROPERTIES, GpuProperties

from .graph import Graph, Node

#: Per kernel launch inside an engine (CUDA-graph-free enqueue on an embedded GPU), in ms.
LAUNCH_MS = 0.003


@dataclass(frozen=True)
class Efficiency:
    """Fractions of the bandwidth and compute roofline a kind of layer achieves."""

    bandwidth: float
    compute: float
    tensor_cores: bool


KINDS: dict[str, Efficiency] = {
    "conv_1x1": Efficiency(0.85, 0.70, True),
    "conv_dense": Efficiency(0.75, 0.55, True),
    "conv_grouped": Efficiency(0.45, 0.20, True),
    "conv_depthwise_3x3": Efficiency(0.30, 0.15, False),
    "conv_depthwise_5x5": Efficiency(0.22, 0.12, False),
    "conv_depthwise_strided": Efficiency(0.25, 0.12, False),
    "gemm": Efficiency(0.80, 0.60, True),
    "pointwise": Efficiency(0.70, 0.50, False),
    "shuffle": Efficiency(0.45, 1.0, False),
    "slice": Efficiency(0.60, 1.0, False),
    "concat": Efficiency(0.60, 1.0, False),
    "pad": Efficiency(0.50, 1.0, False),
    "reduce": Efficiency(0.40, 0.30, False),
    "pool": Efficiency(0.50, 0.30, False),
    "resize": Efficiency(0.50, 0.30, False),
    "reformat": Efficiency(0.55, 1.0, False),
    "other": Efficiency(0.30, 0.20, False),
}

POINTWISE_OPS = {
    "Add", "Sub", "Mul", "Div", "Relu", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "Clip", "LeakyRelu",
    "Elu", "Selu", "Erf", "Sqrt", "Pow", "Exp", "Log", "Neg", "Abs", "Gelu", "Cast", "Softplus", "Max", "Min",
    "Reciprocal", "Identity", "PRelu", "Mish", "Where", "Not", "Equal", "Less", "Greater", "Floor", "Ceil",
    "Round", "BatchNormalization", "Dropout",
}
SHUFFLE_OPS = {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"}
SLICE_OPS = {"Slice", "Split", "Gather", "GatherElements"}
REDUCE_OPS = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2", "Softmax", "LogSoftmax",
              "LayerNormalization", "GlobalAveragePool", "GlobalMaxPool", "InstanceNormalization",
              "GroupNormalization"}
POOL_OPS = {"MaxPool", "AveragePool", "LpPool"}


def op_kind(n: Node, g: Graph) -> str:
    """The cost-model kind of one ONNX node."""
    op = n.op_type
    if op in ("Conv", "ConvTranspose"):
        w = g.tensor(n.inputs[1]).shape or ()
        groups = int(n.attrs.get("group", 1))
        cin = (w[1] * groups) if len(w) > 1 else 0
        k = tuple(int(x) for x in n.attrs.get("kernel_shape", w[2:] if len(w) > 2 else ()))
        stride = tuple(int(s) for s in n.attrs.get("strides", [1] * len(k)))
        if groups > 1 and groups == cin:
            if any(s > 1 for s in stride):
                return "conv_depthwise_strided"
            return "conv_depthwise_5x5" if max(k or (3,)) >= 5 else "conv_depthwise_3x3"
        if groups > 1:
            return "conv_grouped"
        return "conv_1x1" if all(x == 1 for x in k) else "conv_dense"
    if op in ("MatMul", "Gemm", "Einsum"):
        return "gemm"
    if op in POINTWISE_OPS:
        return "pointwise"
    if op in SHUFFLE_OPS:
        return "shuffle"
    if op in SLICE_OPS:
        return "slice"
    if op == "Concat":
        return "concat"
    if op == "Pad":
        return "pad"
    if op in REDUCE_OPS:
        return "reduce"
    if op in POOL_OPS:
        return "pool"
    if op == "Resize":
        return "resize"
    return "other"


def op_flops(n: Node, g: Graph) -> float:
    """Multiply-adds count twice; elementwise ops one FLOP per output element."""
    out = g.tensor(n.outputs[0]) if n.outputs else None
    numel = out.numel() if out is not None else 0
    if n.op_type in ("Conv", "ConvTranspose"):
        w = g.tensor(n.inputs[1]).shape or ()
        per_out = 1
        for d in w[1:]:
            per_out *= int(d)
        return 2.0 * numel * per_out
    if n.op_type in ("MatMul", "Gemm"):
        a = g.tensor(n.inputs[0]).shape or ()
        k = a[-1] if a else 0
        if n.op_type == "Gemm" and int(n.attrs.get("transA", 0)) and len(a) == 2:
            k = a[0]
        return 2.0 * numel * int(k)
    return float(numel)


def is_zero_copy(n: Node, g: Graph) -> bool:
    """A shuffle that only relabels dims (no data movement), which engines elide."""
    if n.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
        return True
    if n.op_type == "Transpose":
        perm = list(n.attrs.get("perm", []))
        shp = g.tensor(n.inputs[0]).shape or ()
        moved = [p for p in perm if shp and shp[p] != 1]
        return moved == sorted(moved)
    return False


@dataclass
class Cost:
    bytes: float
    flops: float
    ms: float
    bound: str  # "memory" | "compute" | "launch"


def roofline_ms(nbytes: float, flops: float, eff: Efficiency, gpu: GpuProperties, precision: str) -> Cost:
    """Time of one kernel moving ``nbytes`` and doing ``flops`` at efficiency ``eff`` on ``gpu``."""
    bw = gpu.mem_bandwidth_gbs * 1e9 * eff.bandwidth
    if eff.tensor_cores:
        peak = (gpu.fp16_tflops if precision == "fp16" else gpu.fp32_tflops) * 1e12
    else:
        # CUDA cores: fp16 runs two lanes per fp32 lane.
        peak = gpu.fp32_tflops * 1e12 * (2.0 if precision == "fp16" else 1.0)
    mem_ms = nbytes / bw * 1e3
    cmp_ms = flops / (peak * eff.compute) * 1e3 if flops else 0.0
    body = max(mem_ms, cmp_ms)
    bound = "compute" if cmp_ms > mem_ms else "memory"
    if body < LAUNCH_MS:
        bound = "launch"
    return Cost(nbytes, flops, body + LAUNCH_MS, bound)


def target_gpu(sm: int) -> GpuProperties:
    """The GPU the simulation prices against (Orin's published figures when the SM is unknown)."""
    return GPU_PROPERTIES.get(sm, GPU_PROPERTIES[87])
