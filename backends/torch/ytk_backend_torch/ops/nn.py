"""Layers with weights or windows: convolution, normalisation, matrix products, pooling, softmax."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .registry import NodeCtx, Runtime, normalize_axis, op, to_compute

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_MAXPOOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVGPOOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def _window_pads(ctx: NodeCtx, spatial: tuple[int, ...], kernel: list[int], strides: list[int],
                 dilations: list[int]) -> tuple[list[int], list[int]]:
    """(begin, end) padding per spatial dim, resolving ``auto_pad`` against the static input shape."""
    n = len(spatial)
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0] * (2 * n)))
        return pads[:n], pads[n:]
    if auto == "VALID":
        return [0] * n, [0] * n
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"auto_pad={auto!r} is not supported")
    begin, end = [], []
    for i in range(n):
        out = math.ceil(spatial[i] / strides[i])
        total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - spatial[i], 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin, end


def _torch_pad(begin: list[int], end: list[int]) -> list[int]:
    # F.pad lists the last dimension first.
    out: list[int] = []
    for b, e in zip(reversed(begin), reversed(end)):
        out += [b, e]
    return out


@op("Conv", weights=(1, 2), layer_type="Convolution")
def _conv(ctx: NodeCtx) -> Runtime:
    nsp = ctx.rank(0) - 2
    if nsp not in _CONV:
        raise ctx.error(f"{nsp}-D convolution is not supported (1-D to 3-D are)")
    w_shape = ctx.shape(1)
    kernel = list(ctx.attr("kernel_shape", list(w_shape[2:])))
    strides = list(ctx.attr("strides", [1] * nsp))
    dil = list(ctx.attr("dilations", [1] * nsp))
    groups = int(ctx.attr("group", 1))
    begin, end = _window_pads(ctx, ctx.shape(0)[2:], kernel, strides, dil)
    fmt = torch.channels_last if nsp == 2 else None
    w = ctx.weight(1, fmt)
    b = ctx.weight(2) if ctx.has(2) else None
    conv = _CONV[nsp]
    if begin == end:
        pad = tuple(begin)
        return lambda x, *_: conv(x, w, b, strides, pad, dil, groups)
    tpad = _torch_pad(begin, end)
    return lambda x, *_: conv(F.pad(x, tpad), w, b, strides, 0, dil, groups)


_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@op("ConvTranspose", weights=(1, 2), layer_type="Deconvolution")
def _conv_transpose(ctx: NodeCtx) -> Runtime:
    """ONNX ConvTranspose: ``pads`` (or ``auto_pad`` with ``output_shape``) crop the full transposed
    convolution, ``output_padding`` extends it at the end. torch takes one padding per dimension for both
    ends, so uneven pads run the full convolution and crop; rows past the full output hold the bias only."""
    nsp = ctx.rank(0) - 2
    if nsp not in _CONV_T:
        raise ctx.error(f"{nsp}-D transposed convolution is not supported (1-D to 3-D are)")
    spatial = ctx.shape(0)[2:]
    kernel = list(ctx.attr("kernel_shape", list(ctx.shape(1)[2:])))
    strides = list(ctx.attr("strides", [1] * nsp))
    dil = list(ctx.attr("dilations", [1] * nsp))
    groups = int(ctx.attr("group", 1))
    out_pad = list(ctx.attr("output_padding", [0] * nsp))
    full = [(spatial[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(nsp)]
    auto = ctx.attr("auto_pad", "NOTSET")
    out_shape = ctx.attr("output_shape", None)
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = list(out_shape)[-nsp:] if out_shape is not None else [spatial[i] * strides[i] for i in range(nsp)]
        total = [full[i] + out_pad[i] - want[i] for i in range(nsp)]
        if out_shape is None:
            total = [max(t, 0) for t in total]  # 'same' asks for more than the full output: no padding (as ORT)
        elif any(t < 0 for t in total):
            raise ctx.error(f"output_shape {want} is larger than the transposed convolution's full output "
                            f"{[full[i] + out_pad[i] for i in range(nsp)]}")
        # the ONNX spec: SAME_UPPER puts the smaller half at the start; SAME_LOWER (and output_shape alone) the
        # larger
        begin = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        end = [total[i] - begin[i] for i in range(nsp)]
    elif auto == "VALID":
        begin, end = [0] * nsp, [0] * nsp
    elif auto in ("NOTSET", ""):
        pads = list(ctx.attr("pads", [0] * (2 * nsp)))
        begin, end = pads[:nsp], pads[nsp:]
    else:
        raise ctx.error(f"auto_pad={auto!r} is not supported")
    w = ctx.weight(1)
    b = ctx.weight(2) if ctx.has(2) else None
    conv = _CONV_T[nsp]
    if begin == end and all(0 <= p < max(s, d) for p, s, d in zip(out_pad, strides, dil)):
        pad = tuple(begin)
        return lambda x, *_: conv(x, w, b, strides, pad, out_pad, groups, dil)
    sizes = [full[i] + out_pad[i] - begin[i] - end[i] for i in range(nsp)]
    bias_shape = (1, -1) + (1,) * nsp

    def run(x: torch.Tensor, *_: torch.Tensor) -> torch.Tensor:
        y = conv(x, w, None, strides, 0, 0, groups, dil)
        grow = [max(0, begin[i] + sizes[i] - full[i]) for i in range(nsp)]
        if any(grow):
            y = F.pad(y, _torch_pad([0] * nsp, grow))
        for i in range(nsp):
            y = y.narrow(2 + i, begin[i], sizes[i])
        return y if b is None else y + b.reshape(bias_shape)
    return run


@op("BatchNormalization", params=(1, 2, 3, 4), layer_type="Scale")
def _batchnorm(ctx: NodeCtx) -> Runtime:
    if len([o for o in ctx.node.outputs if o]) > 1:
        raise ctx.error("training-mode BatchNormalization (running statistics outputs) is not supported")
    a, b = bn_affine(ctx.const(1), ctx.const(2), ctx.const(3), ctx.const(4), float(ctx.attr("epsilon", 1e-5)))
    bshape = [-1] + [1] * (ctx.rank(0) - 2)
    scale = to_compute(a.reshape(bshape), ctx.float_dtype).to(ctx.device)
    shift = to_compute(b.reshape(bshape), ctx.float_dtype).to(ctx.device)
    return lambda x, *_: torch.addcmul(shift, x, scale)


def bn_affine(scale: torch.Tensor, bias: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
              eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """BatchNorm as ``x * a + b`` per channel, computed in float64 so folding adds no error."""
    inv = scale.double() / torch.sqrt(var.double() + eps)
    return inv.float(), (bias.double() - mean.double() * inv).float()


@op("InstanceNormalization", weights=(1, 2), layer_type="Normalization")
def _instnorm(ctx: NodeCtx) -> Runtime:
    w, b = ctx.weight(1), ctx.weight(2)
    eps = float(ctx.attr("epsilon", 1e-5))
    return lambda x, *_: F.instance_norm(x, weight=w, bias=b, eps=eps)


@op("LayerNormalization", weights=(1, 2), layer_type="Normalization")
def _layernorm(ctx: NodeCtx) -> Runtime:
    if len([o for o in ctx.node.outputs if o]) > 1:
        raise ctx.error("the Mean / InvStdDev outputs of LayerNormalization are not supported")
    r = ctx.rank(0)
    axis = normalize_axis(int(ctx.attr("axis", -1)), r)
    ns = tuple(ctx.shape(0)[axis:])
    eps = float(ctx.attr("epsilon", 1e-5))
    w = ctx.weight(1).expand(ns).contiguous()
    b = ctx.weight(2).expand(ns).contiguous() if ctx.has(2) else None
    return lambda x, *_: F.layer_norm(x, ns, w, b, eps)


@op("MatMul", layer_type="MatrixMultiply")
def _matmul(ctx: NodeCtx) -> Runtime:
    return torch.matmul


@op("Einsum", layer_type="MatrixMultiply")
def _einsum(ctx: NodeCtx) -> Runtime:
    eq = ctx.attr("equation")
    eq = eq.decode() if isinstance(eq, bytes) else str(eq)
    return lambda *xs: torch.einsum(eq, *xs)


@op("Gemm", layer_type="MatrixMultiply")
def _gemm(ctx: NodeCtx) -> Runtime:
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    ta, tb = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    b_const = ctx.consts[1] if len(ctx.consts) > 1 else None
    c_const = ctx.consts[2] if ctx.has(2) and len(ctx.consts) > 2 else None
    if b_const is not None and not ta and (not ctx.has(2) or c_const is not None):
        # The common Linear layer: one cuBLAS call with the bias fused, weights laid out once.
        w = ctx.weight(1)
        w = (w if tb else w.t()).contiguous()
        if alpha != 1.0:
            w = w * alpha
        bias = ctx.weight(2) * beta if c_const is not None else None
        if bias is not None and bias.dim() == 2 and bias.shape[0] == 1:
            bias = bias.reshape(-1)
        if bias is None or bias.dim() <= 1:
            return lambda a, *_: F.linear(a, w, bias)
        return lambda a, *_: F.linear(a, w) + bias

    def run(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None) -> torch.Tensor:
        y = torch.matmul(a.t() if ta else a, b.t() if tb else b)
        if alpha != 1.0:
            y = y * alpha
        if c is not None:
            y = y + (c * beta if beta != 1.0 else c)
        return y
    return run


def _pool_common(ctx: NodeCtx) -> tuple[int, list[int], list[int], list[int], list[int], list[int]]:
    nsp = ctx.rank(0) - 2
    if nsp not in _MAXPOOL:
        raise ctx.error(f"{nsp}-D pooling is not supported (1-D to 3-D are)")
    kernel = list(ctx.attr("kernel_shape"))
    strides = list(ctx.attr("strides", [1] * nsp))
    dil = list(ctx.attr("dilations", [1] * nsp))
    begin, end = _window_pads(ctx, ctx.shape(0)[2:], kernel, strides, dil)
    return nsp, kernel, strides, dil, begin, end


@op("MaxPool", layer_type="Pooling")
def _maxpool(ctx: NodeCtx) -> Runtime:
    if len([o for o in ctx.node.outputs if o]) > 1:
        raise ctx.error("the Indices output of MaxPool is not supported")
    nsp, k, s, d, begin, end = _pool_common(ctx)
    ceil = bool(ctx.attr("ceil_mode", 0))
    pool = _MAXPOOL[nsp]
    if begin == end and all(p <= kk // 2 for p, kk in zip(begin, k)):
        return lambda x: pool(x, k, s, begin, d, ceil)
    tpad = _torch_pad(begin, end)
    return lambda x: pool(F.pad(x, tpad, value=-math.inf), k, s, 0, d, ceil)


@op("AveragePool", layer_type="Pooling")
def _avgpool(ctx: NodeCtx) -> Runtime:
    nsp, k, s, d, begin, end = _pool_common(ctx)
    if any(x != 1 for x in d):
        raise ctx.error("dilated AveragePool is not supported")
    ceil = bool(ctx.attr("ceil_mode", 0))
    include = bool(ctx.attr("count_include_pad", 0))
    pool = _AVGPOOL[nsp]
    if begin == end and all(p <= kk // 2 for p, kk in zip(begin, k)):
        return lambda x: pool(x, k, s, begin, ceil, include)
    if not include:
        raise ctx.error("AveragePool with asymmetric padding and count_include_pad=0 is not supported")
    tpad = _torch_pad(begin, end)
    return lambda x: pool(F.pad(x, tpad), k, s, 0, ceil, True)


@op("GlobalAveragePool", layer_type="Reduce")
def _gap(ctx: NodeCtx) -> Runtime:
    dims = tuple(range(2, ctx.rank(0)))
    return lambda x: x.mean(dim=dims, keepdim=True)


@op("GlobalMaxPool", layer_type="Reduce")
def _gmp(ctx: NodeCtx) -> Runtime:
    dims = tuple(range(2, ctx.rank(0)))
    return lambda x: x.amax(dim=dims, keepdim=True)


def _softmax_like(fn: Runtime) -> Runtime:
    def build(ctx: NodeCtx) -> Runtime:
        r = ctx.rank(0)
        if ctx.opset >= 13:
            ax = normalize_axis(int(ctx.attr("axis", -1)), r)
            return lambda x: fn(x, dim=ax)
        # Before opset 13 the input is coerced to 2-D at ``axis`` and normalised over the tail.
        ax = normalize_axis(int(ctx.attr("axis", 1)), r)
        shape = ctx.shape(0)
        return lambda x: fn(x.reshape(math.prod(shape[:ax]), -1), dim=1).reshape(shape)
    return build


op("Softmax", layer_type="SoftMax")(_softmax_like(torch.softmax))
op("LogSoftmax", layer_type="SoftMax")(_softmax_like(torch.log_softmax))


@op("YtkAttention", layer_type="Attention")
def _attention(ctx: NodeCtx) -> Runtime:
    """``softmax(scale * (a @ b) [+ mask]) @ v`` in one fused attention call: the engine's own fusion of the
    MatMul -> [Mul|Div] -> [Add] -> Softmax -> MatMul chain an ONNX exporter writes for attention
    (:func:`ytk_backend_torch.folding._fuse_attention`), as TensorRT fuses it. ``b`` is the keys as the first
    MatMul reads them, already transposed (``[..., d, S]``)."""
    scale = float(ctx.attr("scale"))
    r = ctx.rank(0)
    masked = ctx.has(3)
    windows = int(ctx.attr("windows", 0))
    if windows:
        return _windowed_attention(ctx, scale, windows)
    # add: a float mask added to the scores; fill_true / fill_false: a boolean condition whose True / False
    # positions a Where filled with -inf (sdpa's boolean mask names the positions that attend)
    mode = ctx.attr("mask_mode", "add")
    if mode not in ("add", "fill_true", "fill_false"):
        raise ctx.error(f"mask_mode={mode!r} is not one of add, fill_true, fill_false")

    def run(a: torch.Tensor, b: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if mask is not None and mode == "fill_true":  # fill_false's condition already names who attends
            mask = ~mask
        k = b.transpose(-1, -2).contiguous()  # the fused kernels read keys with unit stride in their last dim
        if r == 4:
            return F.scaled_dot_product_attention(a, k, v, attn_mask=mask, scale=scale)
        lead = a.shape[:-2]
        q4, k4, v4 = (t.reshape(1, -1, *t.shape[-2:]) for t in (a, k, v))
        m4 = mask.unsqueeze(0) if mask is not None and mask.dim() == 3 else mask  # rank 3 only (see the fusion)
        y = F.scaled_dot_product_attention(q4, k4, v4, attn_mask=m4, scale=scale)
        return y.reshape(*lead, *y.shape[-2:])

    if masked:
        return run
    return lambda a, b, v, *_: run(a, b, v)


def _windowed_attention(ctx: NodeCtx, scale: float, windows: int) -> Runtime:
    """Attention over ``[groups * windows, heads, L, d]`` with a per-window additive mask (input 4, broadcast over
    ``[groups, windows, heads, L, S]``) on top of the usual one (input 3, maybe absent): Swin's shifted windows.
    When neither mask varies with the group, the windows are folded into the heads (``[groups, windows * heads,
    L, d]``) so that one ``[1, windows * heads, L, S]`` mask serves every group; otherwise the mask is expanded to
    the scores' shape."""
    if ctx.attr("mask_mode", "add") != "add":
        raise ctx.error("a per-window mask (windows=...) is additive: mask_mode must be add")
    if ctx.rank(0) != 4:
        raise ctx.error(f"a per-window mask needs rank-4 attention inputs, not rank {ctx.rank(0)}")
    rows, heads, length = ctx.shape(0)[:3]
    if rows % windows:
        raise ctx.error(f"windows={windows} does not divide the {rows} rows of the attention")
    groups, keys = rows // windows, ctx.shape(1)[-1]
    view = (groups, windows, heads, length, keys)

    def run(a: torch.Tensor, b: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
            wmask: torch.Tensor) -> torch.Tensor:
        k = b.transpose(-1, -2).contiguous()
        w5 = wmask.reshape((1,) * (5 - wmask.dim()) + tuple(wmask.shape))
        m5 = w5
        if mask is not None:
            m4 = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
            if m4.shape[0] != 1:  # a mask per row: split its rows into (groups, windows)
                m4 = m4.expand(rows, *m4.shape[1:])
                m5 = w5 + m4.reshape(groups, windows, *m4.shape[1:])
            else:
                m5 = w5 + m4.unsqueeze(0)
        if m5.shape[0] == 1:
            fold = m5.expand(1, windows, heads, length, keys).reshape(1, windows * heads, length, keys)
            q4, k4, v4 = (t.reshape(groups, windows * heads, *t.shape[-2:]) for t in (a, k, v))
            y = F.scaled_dot_product_attention(q4, k4, v4, attn_mask=fold, scale=scale)
            return y.reshape(rows, heads, *y.shape[-2:])
        full = m5.expand(view).reshape(rows, heads, length, keys)
        return F.scaled_dot_product_attention(a, k, v, attn_mask=full, scale=scale)

    return run
