"""The recognised math in plain torch, checked once against the region's own ``.pt2``.

A carved ``.pt2`` is exported at one shape (``ep.module()`` refuses others, and reshapes in it are
specialised), while a plugin serves every site shape, the dynamic remainder's several channel
counts included. So references and the torch baseline run this torch rendering of the recognised
region, and :func:`verify_against_pt2` first proves it computes what the ``.pt2`` computes at
the export shape; a recognition that does not reproduce the region is refused.
"""

from __future__ import annotations

from typing import Any

from ytk_hookspecs.errors import UnsupportedRegion

from .regions import Conv1x1Region, DwConvLNRegion, DwConvRegion, LiteMLARegion, Region, SERegion

_ACT = {
    "none": lambda F, x: x,
    "relu": lambda F, x: F.relu(x),
    "relu6": lambda F, x: F.relu6(x),
    "hardswish": lambda F, x: F.hardswish(x),
    "silu": lambda F, x: F.silu(x),
    "gelu": lambda F, x: F.gelu(x),
    "gelu_tanh": lambda F, x: F.gelu(x, approximate="tanh"),
    "hardsigmoid": lambda F, x: F.hardsigmoid(x),
    "sigmoid": lambda F, x: x.sigmoid(),
    "tanh": lambda F, x: x.tanh(),
}


def torch_region(region: Region) -> Any:
    """A callable computing the region with torch ops (inputs in the node's order)."""
    import torch
    import torch.nn.functional as F

    if isinstance(region, DwConvRegion):
        def dw(x: Any, w: Any, b: Any = None) -> Any:
            y = _ACT[region.act](F, F.conv2d(x, w, b, region.stride, region.pad, 1, x.shape[1]))
            return y + x if region.residual else y
        return dw
    if isinstance(region, Conv1x1Region):
        def pw(x: Any, w: Any, b: Any = None) -> Any:
            y = F.conv2d(x, w, b, 1, 0, 1, x.shape[1] // w.shape[1])
            return _ACT[region.act](F, y)
        return pw
    if isinstance(region, SERegion):
        def se(x: Any, *params: Any) -> Any:
            w1, b1, w2, b2 = region.split_params(params)
            s = F.conv2d(x.mean((2, 3), keepdim=True), w1, b1)
            s = _ACT[region.gate](F, F.conv2d(_ACT[region.act](F, s), w2, b2))
            return x * s
        return se
    if isinstance(region, DwConvLNRegion):
        def dwln(x: Any, *params: Any) -> Any:
            w0, b0, w1, b1 = region.split_params(params)
            y = F.conv2d(x, w0, b0, region.stride, region.pad, 1, x.shape[1]).permute(0, 2, 3, 1)
            z = F.layer_norm(y, [y.shape[-1]], w1, b1, region.eps)
            return z.permute(0, 3, 1, 2) if region.closed else z
        return dwln
    assert isinstance(region, LiteMLARegion)
    d = region.dim

    def lite(*xs: Any) -> Any:
        qkv = torch.cat(list(xs), dim=1) if region.joined else xs[0]
        b, _, h, w = qkv.shape
        t = torch.reshape(qkv, (b, -1, 3 * d, h * w)).transpose(-1, -2)
        q, k, v = F.relu(t[..., :d]), F.relu(t[..., d:2 * d]), t[..., 2 * d:]
        v = F.pad(v, (0, 1), mode="constant", value=1.0)
        kv = torch.matmul(k.transpose(-1, -2), v)
        out = torch.matmul(q, kv)
        out = out[..., :-1] / (out[..., -1:] + region.eps)
        return torch.reshape(out.transpose(-1, -2), (b, -1, h, w))
    return lite


def verify_against_pt2(region: Region, module: Any, export_shapes: list[tuple[int, ...]], device: Any) -> None:
    """Run the .pt2 and :func:`torch_region` on the same random inputs; refuse if they differ."""
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(12345)
    ins = [torch.randn(s, generator=g, device=device) for s in export_shapes]
    prev = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            want = module(*ins)
            want = want[0] if isinstance(want, (tuple, list)) else want
            got = torch_region(region)(*ins)
    except Exception as e:
        raise UnsupportedRegion(f"the region's .pt2 does not run at its own export shapes: {type(e).__name__}: {e}") \
            from None
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev
    if tuple(want.shape) != tuple(got.shape):
        raise UnsupportedRegion(f"recognised as {region.describe()}, but the .pt2 returns shape {list(want.shape)} "
                                f"where that math gives {list(got.shape)}")
    scale = float(want.abs().max()) or 1.0
    err = float((want.float() - got.float()).abs().max())
    if not err <= 1e-4 * scale:
        raise UnsupportedRegion(f"recognised as {region.describe()}, but that math differs from the region's .pt2 "
                                f"by {err:.3g} (scale {scale:.3g}); not generating a kernel for it")
