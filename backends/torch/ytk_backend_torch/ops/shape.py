"""Data movement and shape ops. Every shape, index and axis is resolved at build time from the
static input shapes, so at runtime these are plain views, copies and index kernels."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .registry import NodeCtx, Runtime, normalize_axis, op

INT64_MAX = 2 ** 63 - 1


@op("Constant", layer_type="Constant")
def _constant(ctx: NodeCtx) -> Runtime:
    a = ctx.node.attrs
    if "value" in a:
        v = a["value"]
    elif "value_float" in a:
        v = torch.tensor(float(a["value_float"]), dtype=torch.float32)
    elif "value_floats" in a:
        v = torch.tensor([float(x) for x in a["value_floats"]], dtype=torch.float32)
    elif "value_int" in a:
        v = torch.tensor(int(a["value_int"]), dtype=torch.int64)
    elif "value_ints" in a:
        v = torch.tensor([int(x) for x in a["value_ints"]], dtype=torch.int64)
    else:
        raise ctx.error(f"no supported value attribute (has {sorted(a)})")
    return lambda: v


@op("ConstantOfShape", params=(0,), layer_type="Constant")
def _constant_of_shape(ctx: NodeCtx) -> Runtime:
    shape = ctx.ints(0, "shape")
    val = ctx.attr("value", torch.zeros(1, dtype=torch.float32)).reshape(-1)
    out = torch.full(shape, val[0].item(), dtype=val.dtype)
    return lambda *_: out


@op("Shape", params=(0,), layer_type="Shape")
def _shape(ctx: NodeCtx) -> Runtime:
    s = list(ctx.shape(0))
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    out = torch.tensor(s[start:end], dtype=torch.int64)
    return lambda *_: out


@op("Size", params=(0,), layer_type="Shape")
def _size(ctx: NodeCtx) -> Runtime:
    out = torch.tensor(math.prod(ctx.shape(0)), dtype=torch.int64)
    return lambda *_: out


@op("Range", layer_type="Fill")
def _range(ctx: NodeCtx) -> Runtime:
    start, limit, delta = (ctx.const(i).item() for i in range(3))
    out = torch.arange(start, limit, delta, dtype=ctx.const(0).dtype)
    return lambda *_: out


@op("Dropout", "Identity", layer_type="Identity")
def _identity(ctx: NodeCtx) -> Runtime:
    return lambda x, *_: x


def reshape_target(ctx: NodeCtx, in_shape: tuple[int, ...], spec: list[int], allowzero: bool) -> list[int]:
    out = [in_shape[i] if (d == 0 and not allowzero) else d for i, d in enumerate(spec)]
    if out.count(-1) > 1:
        raise ctx.error(f"reshape target {spec} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        out[out.index(-1)] = math.prod(in_shape) // known if known else 0
    if math.prod(out) != math.prod(in_shape):
        raise ctx.error(f"cannot reshape {list(in_shape)} to {spec}")
    return out


@op("Reshape", params=(1,), layer_type="Shuffle")
def _reshape(ctx: NodeCtx) -> Runtime:
    target = reshape_target(ctx, ctx.shape(0), ctx.ints(1, "shape"), bool(ctx.attr("allowzero", 0)))
    return lambda x, *_: x.reshape(target)


@op("Flatten", layer_type="Shuffle")
def _flatten(ctx: NodeCtx) -> Runtime:
    s = ctx.shape(0)
    ax = normalize_axis(int(ctx.attr("axis", 1)), len(s))
    target = [math.prod(s[:ax]), math.prod(s[ax:])]
    return lambda x: x.reshape(target)


@op("DepthToSpace", layer_type="Shuffle")
def _depth_to_space(ctx: NodeCtx) -> Runtime:
    """ONNX DepthToSpace; mode CRD is torch's pixel_shuffle, DCR (the default) takes the block first."""
    if ctx.rank(0) != 4:
        raise ctx.error(f"needs a 4-D input, not {ctx.rank(0)}-D")
    bs = int(ctx.attr("blocksize"))
    mode = ctx.attr("mode", "DCR")
    n, c, hh, ww = ctx.shape(0)
    if c % (bs * bs):
        raise ctx.error(f"{c} channels do not divide into blocks of {bs}x{bs}")
    if mode == "CRD":
        return lambda x: F.pixel_shuffle(x, bs)
    if mode != "DCR":
        raise ctx.error(f"mode={mode!r} is not supported (DCR and CRD are)")
    co = c // (bs * bs)
    return lambda x: (x.reshape(n, bs, bs, co, hh, ww).permute(0, 3, 4, 1, 5, 2)
                      .reshape(n, co, hh * bs, ww * bs))


@op("SpaceToDepth", layer_type="Shuffle")
def _space_to_depth(ctx: NodeCtx) -> Runtime:
    if ctx.rank(0) != 4:
        raise ctx.error(f"needs a 4-D input, not {ctx.rank(0)}-D")
    bs = int(ctx.attr("blocksize"))
    n, c, hh, ww = ctx.shape(0)
    if hh % bs or ww % bs:
        raise ctx.error(f"spatial size {hh}x{ww} does not divide into blocks of {bs}")
    return lambda x: (x.reshape(n, c, hh // bs, bs, ww // bs, bs).permute(0, 3, 5, 1, 2, 4)
                      .reshape(n, c * bs * bs, hh // bs, ww // bs))


@op("Transpose", layer_type="Shuffle")
def _transpose(ctx: NodeCtx) -> Runtime:
    perm = list(ctx.attr("perm", list(reversed(range(ctx.rank(0))))))
    return lambda x: x.permute(perm)


def _axes(ctx: NodeCtx, input_index: int) -> list[int] | None:
    if ctx.has(input_index):
        return ctx.ints(input_index, "axes")
    a = ctx.attr("axes", None)
    return None if a is None else [int(x) for x in a]


@op("Squeeze", params=(1,), layer_type="Shuffle")
def _squeeze(ctx: NodeCtx) -> Runtime:
    s = ctx.shape(0)
    axes = _axes(ctx, 1)
    drop = {normalize_axis(a, len(s)) for a in axes} if axes is not None else {i for i, d in enumerate(s) if d == 1}
    target = [d for i, d in enumerate(s) if i not in drop]
    return lambda x, *_: x.reshape(target)


@op("Unsqueeze", params=(1,), layer_type="Shuffle")
def _unsqueeze(ctx: NodeCtx) -> Runtime:
    s = list(ctx.shape(0))
    axes = _axes(ctx, 1)
    if axes is None:
        raise ctx.error("needs axes")
    r = len(s) + len(axes)
    target = s
    for a in sorted(normalize_axis(a, r) for a in axes):
        target.insert(a, 1)
    return lambda x, *_: x.reshape(target)


@op("Concat", layer_type="Concatenation")
def _concat(ctx: NodeCtx) -> Runtime:
    ax = normalize_axis(int(ctx.attr("axis")), ctx.rank(0))
    return lambda *xs: torch.cat(xs, dim=ax)


@op("Split", params=(1,), layer_type="Slice")
def _split(ctx: NodeCtx) -> Runtime:
    s = ctx.shape(0)
    ax = normalize_axis(int(ctx.attr("axis", 0)), len(s))
    n_out = len(ctx.node.outputs)
    if ctx.has(1):
        sizes = ctx.ints(1, "split")
    elif "split" in ctx.node.attrs:
        sizes = [int(x) for x in ctx.attr("split")]
    else:
        n = int(ctx.attr("num_outputs", n_out))
        chunk = -(-s[ax] // n)
        sizes = [min(chunk, s[ax] - i * chunk) for i in range(n)]
    return lambda x, *_: torch.split(x, sizes, dim=ax)


@op("Slice", params=(1, 2, 3, 4), layer_type="Slice")
def _slice(ctx: NodeCtx) -> Runtime:
    s = ctx.shape(0)
    if ctx.opset < 10 and not ctx.has(1):
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes = list(ctx.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
        axes = ctx.ints(3, "axes") if ctx.has(3) else list(range(len(starts)))
        steps = ctx.ints(4, "steps") if ctx.has(4) else [1] * len(starts)
    index: list[slice] = [slice(None)] * len(s)
    flips: list[tuple[int, torch.Tensor]] = []
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax = normalize_axis(ax, len(s))
        # Python's slice clamping is ONNX's: INT64_MAX ends, negative starts, reversed ranges.
        r = range(s[ax])[slice(max(min(st, INT64_MAX), -INT64_MAX), max(min(en, INT64_MAX), -INT64_MAX), sp)]
        if sp > 0:
            index[ax] = slice(r.start, r.start + len(r) * r.step, r.step) if len(r) else slice(0, 0)
        else:
            flips.append((ax, torch.tensor(list(r), dtype=torch.int64, device=ctx.device)))
    idx = tuple(index)
    if not flips:
        return lambda x, *_: x[idx]

    def run(x: torch.Tensor, *_: object) -> torch.Tensor:
        y = x[idx]
        for ax, ii in flips:
            y = y.index_select(ax, ii)
        return y
    return run


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


@op("Pad", params=(1, 2, 3), layer_type="Padding")
def _pad(ctx: NodeCtx) -> Runtime:
    r = ctx.rank(0)
    mode = ctx.attr("mode", "constant")
    if mode not in _PAD_MODES:
        raise ctx.error(f"pad mode {mode!r} is not supported")
    if ctx.has(1):
        pads = ctx.ints(1, "pads")
        value = ctx.const(2).reshape(-1)[0].item() if ctx.has(2) else 0
        axes = [normalize_axis(a, r) for a in ctx.ints(3, "axes")] if ctx.has(3) else list(range(r))
    else:
        pads, value, axes = list(ctx.attr("pads")), ctx.attr("value", 0.0), list(range(r))
    n = len(axes)
    begin, end = [0] * r, [0] * r
    for i, ax in enumerate(axes):
        begin[ax], end[ax] = pads[i], pads[n + i]
    first = next((i for i in range(r) if begin[i] or end[i]), r)
    tpad: list[int] = []
    for i in reversed(range(first, r)):
        tpad += [begin[i], end[i]]
    tmode = _PAD_MODES[mode]
    if not tpad:
        return lambda x, *_: x
    if tmode == "constant":
        return lambda x, *_: F.pad(x, tpad, value=value)
    return lambda x, *_: F.pad(x, tpad, mode=tmode)


@op("Gather", layer_type="Gather")
def _gather(ctx: NodeCtx) -> Runtime:
    s = ctx.shape(0)
    ax = normalize_axis(int(ctx.attr("axis", 0)), len(s))
    idx_const = ctx.consts[1] if len(ctx.consts) > 1 else None
    if idx_const is not None:
        idx = idx_const.to(torch.int64)
        idx = torch.where(idx < 0, idx + s[ax], idx)
        if idx.dim() == 0:
            i = int(idx)
            return lambda x, *_: x.select(ax, i)
        flat = idx.reshape(-1).to(ctx.device)
        out_shape = list(s[:ax]) + list(idx.shape) + list(s[ax + 1:])
        return lambda x, *_: x.index_select(ax, flat).reshape(out_shape)

    def run(x: torch.Tensor, ind: torch.Tensor) -> torch.Tensor:
        ind = torch.where(ind < 0, ind + s[ax], ind).to(torch.int64)
        return x.index_select(ax, ind.reshape(-1)).reshape(list(s[:ax]) + list(ind.shape) + list(s[ax + 1:]))
    return run


@op("GatherElements", layer_type="Gather")
def _gather_elements(ctx: NodeCtx) -> Runtime:
    s = ctx.shape(0)
    ax = normalize_axis(int(ctx.attr("axis", 0)), len(s))
    return lambda x, ind: torch.gather(x, ax, torch.where(ind < 0, ind + s[ax], ind).to(torch.int64))


@op("Expand", params=(1,), layer_type="Shuffle")
def _expand(ctx: NodeCtx) -> Runtime:
    target = list(torch.broadcast_shapes(tuple(ctx.shape(0)), tuple(ctx.ints(1, "shape"))))
    return lambda x, *_: x.expand(target)


@op("Tile", params=(1,), layer_type="Slice")
def _tile(ctx: NodeCtx) -> Runtime:
    reps = ctx.ints(1, "repeats")
    return lambda x, *_: x.repeat(reps)


_RESIZE_NEAREST = {("asymmetric", "floor"): "nearest", ("half_pixel", "round_prefer_ceil"): "nearest-exact",
                   ("tf_half_pixel_for_nn", "floor"): "nearest-exact"}
_LINEAR_MODES = {3: "linear", 4: "bilinear", 5: "trilinear"}


@op("Resize", params=(1, 2, 3), layer_type="Resize")
def _resize(ctx: NodeCtx) -> Runtime:
    s = ctx.shape(0)
    r = len(s)
    mode = ctx.attr("mode", "nearest")
    ctm = ctx.attr("coordinate_transformation_mode", "half_pixel")
    if ctx.attr("antialias", 0) or ctx.attr("exclude_outside", 0) or "axes" in ctx.node.attrs:
        raise ctx.error("antialias / exclude_outside / axes are not supported")
    scales = ctx.floats(2, "scales") if ctx.has(2) and ctx.const(2).numel() else None
    sizes = ctx.ints(3, "sizes") if ctx.has(3) else None
    if sizes is None and scales is None:
        raise ctx.error("needs scales or sizes")
    if (sizes and sizes[:2] != list(s[:2])) or (scales and scales[:2] != [1.0, 1.0]):
        raise ctx.error("only spatial dims (2 and up) can be resized")
    kw: dict[str, object] = {}
    if sizes is not None:
        kw["size"] = sizes[2:]
    else:
        kw["scale_factor"] = scales[2:]  # type: ignore[index]
        kw["recompute_scale_factor"] = False
    if mode == "nearest":
        key = (ctm, ctx.attr("nearest_mode", "round_prefer_floor"))
        if key not in _RESIZE_NEAREST:
            raise ctx.error(f"nearest resize with coordinate_transformation_mode={key[0]!r}, "
                            f"nearest_mode={key[1]!r} is not supported")
        kw["mode"] = _RESIZE_NEAREST[key]
    elif mode in ("linear", "cubic"):
        if ctm not in ("half_pixel", "pytorch_half_pixel", "align_corners"):
            raise ctx.error(f"{mode} resize with coordinate_transformation_mode={ctm!r} is not supported")
        if mode == "cubic" and (r != 4 or abs(float(ctx.attr("cubic_coeff_a", -0.75)) + 0.75) > 1e-6):
            raise ctx.error("cubic resize needs a 4-D input and cubic_coeff_a=-0.75")
        kw["mode"] = "bicubic" if mode == "cubic" else _LINEAR_MODES.get(r, "bilinear")
        kw["align_corners"] = ctm == "align_corners"
    else:
        raise ctx.error(f"resize mode {mode!r} is not supported")
    return lambda x, *_: F.interpolate(x, **kw)  # type: ignore[arg-type]
