"""Pointwise ops: unary activations, broadcasting binary ops, comparisons, casts."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..onnx_graph import ONNX_TO_TORCH
from .registry import NodeCtx, Runtime, op

_UNARY = {
    "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Erf": torch.erf, "Sqrt": torch.sqrt,
    "Exp": torch.exp, "Log": torch.log, "Neg": torch.neg, "Abs": torch.abs, "Reciprocal": torch.reciprocal,
    "Floor": torch.floor, "Ceil": torch.ceil, "Round": torch.round, "Sin": torch.sin, "Cos": torch.cos,
    "Sign": torch.sign, "Not": torch.logical_not, "HardSwish": F.hardswish, "Softplus": F.softplus,
    "Softsign": F.softsign, "Mish": F.mish, "Identity": lambda x: x,
}


def _unary_builder(fn: Runtime) -> Runtime:
    return lambda ctx: fn


for _name, _fn in _UNARY.items():
    op(_name)(_unary_builder(_fn))


def _int_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # ONNX integer Div truncates toward zero; torch's "/" would promote to float.
    if not a.is_floating_point() and not b.is_floating_point():
        return torch.div(a, b, rounding_mode="trunc")
    return torch.div(a, b)


_BINARY = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": _int_div, "Pow": torch.pow,
    "Equal": torch.eq, "Less": torch.lt, "Greater": torch.gt, "LessOrEqual": torch.le,
    "GreaterOrEqual": torch.ge, "And": torch.logical_and, "Or": torch.logical_or, "Xor": torch.logical_xor,
}

for _name, _fn in _BINARY.items():
    op(_name)(_unary_builder(_fn))


@op("Mod")
def _mod(ctx: NodeCtx) -> Runtime:
    return torch.fmod if ctx.attr("fmod", 0) else torch.remainder


@op("Where")
def _where(ctx: NodeCtx) -> Runtime:
    return torch.where


def _variadic(fn: Runtime) -> Runtime:
    def build(ctx: NodeCtx) -> Runtime:
        def run(*xs: torch.Tensor) -> torch.Tensor:
            out = xs[0]
            for x in xs[1:]:
                out = fn(out, x)
            return out
        return run
    return build


op("Sum")(_variadic(torch.add))
op("Max")(_variadic(torch.maximum))
op("Min")(_variadic(torch.minimum))


@op("Mean")
def _mean(ctx: NodeCtx) -> Runtime:
    def run(*xs: torch.Tensor) -> torch.Tensor:
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out / len(xs)
    return run


@op("HardSigmoid")
def _hardsigmoid(ctx: NodeCtx) -> Runtime:
    alpha, beta = float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5))
    if abs(alpha - 1 / 6) < 1e-7 and beta == 0.5:
        return F.hardsigmoid
    return lambda x: torch.clamp(x * alpha + beta, 0.0, 1.0)


@op("LeakyRelu")
def _leaky(ctx: NodeCtx) -> Runtime:
    a = float(ctx.attr("alpha", 0.01))
    return lambda x: F.leaky_relu(x, a)


@op("Elu")
def _elu(ctx: NodeCtx) -> Runtime:
    a = float(ctx.attr("alpha", 1.0))
    return lambda x: F.elu(x, a)


@op("Selu")
def _selu(ctx: NodeCtx) -> Runtime:
    a = float(ctx.attr("alpha", 1.67326319217681884765625))
    g = float(ctx.attr("gamma", 1.05070102214813232421875))
    return lambda x: g * torch.where(x > 0, x, a * (torch.exp(x) - 1))


@op("Gelu")
def _gelu(ctx: NodeCtx) -> Runtime:
    approx = ctx.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        raise ctx.error(f"approximate={approx!r} is not a Gelu mode (none, tanh)")
    return lambda x: F.gelu(x, approximate=approx)


@op("YtkSilu")
def _silu(ctx: NodeCtx) -> Runtime:
    """``x * sigmoid(x)`` in one kernel: the engine's fusion of an exported SiLU (folding._fuse_silu)."""
    return F.silu


@op("PRelu")
def _prelu(ctx: NodeCtx) -> Runtime:
    return lambda x, slope: torch.where(x >= 0, x, x * slope)


@op("Clip", params=(1, 2))
def _clip(ctx: NodeCtx) -> Runtime:
    lo = ctx.floats(1, "min")[0] if ctx.has(1) else ctx.attr("min", None)
    hi = ctx.floats(2, "max")[0] if ctx.has(2) else ctx.attr("max", None)
    if ctx.dtypes[0] is not None and not ctx.dtypes[0].is_floating_point:
        lo = int(lo) if lo is not None else None
        hi = int(hi) if hi is not None else None
    if lo is None and hi is None:
        return lambda x, *_: x
    return lambda x, *_: torch.clamp(x, lo, hi)


def _target_dtype(ctx: NodeCtx, dt: torch.dtype) -> torch.dtype:
    # Inside an fp16 engine every float tensor is fp16: a Cast to float32 keeps the compute dtype,
    # as TensorRT does for a network built with the fp16 flag.
    return ctx.float_dtype if dt.is_floating_point else dt


@op("Cast", layer_type="Cast")
def _cast(ctx: NodeCtx) -> Runtime:
    to = int(ctx.attr("to"))
    if to not in ONNX_TO_TORCH:
        raise ctx.error(f"cast to ONNX element type {to} is not supported")
    dt = _target_dtype(ctx, ONNX_TO_TORCH[to])
    return lambda x: x.to(dt)


@op("CastLike", params=(1,), layer_type="Cast")
def _castlike(ctx: NodeCtx) -> Runtime:
    ref = ctx.dtypes[1]
    if ref is None:
        raise ctx.error("the dtype of input 1 is unknown")
    dt = _target_dtype(ctx, ref)
    return lambda x, *_: x.to(dt)
