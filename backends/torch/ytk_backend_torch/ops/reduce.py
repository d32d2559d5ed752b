"""Reductions. Axes come from the attribute (older opsets) or a constant second input (newer)."""

from __future__ import annotations

import torch

from .registry import NodeCtx, Runtime, normalize_axis, op


def _reduce_axes(ctx: NodeCtx) -> list[int] | None:
    """The axes to reduce, or None for "all"; an empty list with noop_with_empty_axes is identity."""
    r = ctx.rank(0)
    if ctx.has(1):
        axes = ctx.ints(1, "axes")
    else:
        a = ctx.attr("axes", None)
        axes = None if a is None else [int(x) for x in a]
    if not axes:
        return [] if ctx.attr("noop_with_empty_axes", 0) else None
    return sorted(normalize_axis(a, r) for a in axes)


def _reducer(kind: str) -> Runtime:
    def build(ctx: NodeCtx) -> Runtime:
        axes = _reduce_axes(ctx)
        keep = bool(ctx.attr("keepdims", 1))
        if axes == []:
            return lambda x, *_: x
        dims = tuple(axes) if axes is not None else tuple(range(ctx.rank(0)))
        if kind == "mean":
            return lambda x, *_: x.mean(dim=dims, keepdim=keep)
        if kind == "sum":
            return lambda x, *_: x.sum(dim=dims, keepdim=keep)
        if kind == "max":
            return lambda x, *_: x.amax(dim=dims, keepdim=keep)
        if kind == "min":
            return lambda x, *_: x.amin(dim=dims, keepdim=keep)
        if kind == "l2":
            return lambda x, *_: torch.linalg.vector_norm(x, 2, dim=dims, keepdim=keep)
        if kind == "sumsquare":
            return lambda x, *_: (x * x).sum(dim=dims, keepdim=keep)

        def prod(x: torch.Tensor, *_: object) -> torch.Tensor:
            for d in sorted(dims, reverse=True):
                x = x.prod(dim=d, keepdim=keep)
            return x
        return prod
    return build


for _op, _kind in {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min",
                   "ReduceProd": "prod", "ReduceL2": "l2", "ReduceSumSquare": "sumsquare"}.items():
    op(_op, params=(1,), layer_type="Reduce")(_reducer(_kind))


def _arg(fn: Runtime) -> Runtime:
    def build(ctx: NodeCtx) -> Runtime:
        if ctx.attr("select_last_index", 0):
            raise ctx.error("select_last_index=1 is not supported")
        ax = normalize_axis(int(ctx.attr("axis", 0)), ctx.rank(0))
        keep = bool(ctx.attr("keepdims", 1))
        return lambda x: fn(x, dim=ax, keepdim=keep)
    return build


op("ArgMax", layer_type="TopK")(_arg(torch.argmax))
op("ArgMin", layer_type="TopK")(_arg(torch.argmin))


@op("CumSum", params=(1,), layer_type="Scan")
def _cumsum(ctx: NodeCtx) -> Runtime:
    """Prefix sums along a constant axis (position encodings build their coordinates this way); the sum
    runs in fp32 whatever the engine's precision, since a half-precision running sum drifts."""
    ax = normalize_axis(ctx.ints(1, "axis")[0], ctx.rank(0))
    exclusive, reverse = bool(ctx.attr("exclusive", 0)), bool(ctx.attr("reverse", 0))

    def run(x: torch.Tensor, *_: object) -> torch.Tensor:
        acc = x.float() if x.is_floating_point() and x.element_size() < 4 else x
        if reverse:
            acc = acc.flip(ax)
        out = torch.cumsum(acc, dim=ax)
        if exclusive:  # shifted by one, a zero first: exact, unlike subtracting x again
            n = out.shape[ax]
            out = torch.cat([torch.zeros_like(out.narrow(ax, 0, 1)), out.narrow(ax, 0, n - 1)], dim=ax)
        if reverse:
            out = out.flip(ax)
        return out.to(x.dtype)
    return run
