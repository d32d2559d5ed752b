"""Test cases for scoring: inputs per site shape and distribution, fp32 references, error budgets.

Every case draws fresh inputs from a seeded generator (never zeros, which hide unwritten outputs),
quantises activations to fp16 exactly as the engine will feed them, and computes the reference by
running the region's own ``.pt2`` in fp32 on those same values with TF32 off. The per-element
tolerance is

    |out - ref| <= 2^-10 * |ref|  +  2^-15 * L * S  +  2^-24

where S bounds the magnitude of the terms summed for that element (depthwise: sum |w||x| + |b|;
LiteMLA: the attention-weighted mean of |v|), and L bounds the activation's slope. The first term
is two fp16 roundings of the output, the second covers fp32 accumulation in a different order than
the reference (kernel and reference both), the third fp16 subnormals. A wrong tap, weight, channel
or group shows up as an error of the order of S itself, thousands of times over budget.

A depthwise conv + LayerNorm (``dwconv_ln``) carries the conv's bound through the norm of each pixel.
With y the conv's output, m and v its mean and variance over the pixel's C channels, r = 1/sqrt(v +
eps), u = (y - m) r and an error e_c <= E_c = 2^-15 Sc in y_c (Sc = sum |w||x| + |b|, the depthwise
S), to first order the normalised value moves by r (e_c - mean e) + u_c dr/r, and |dr/r| = |dv| r^2 / 2
<= r mean(|u_i| |e_i - mean e|); so

    |du_c| <= r (E_c + mean E + |u_c| mean(|u_i| (E_i + mean E)))

and the output gamma_c u_c + beta_c by |gamma_c| times that. The fp32 sums of the mean and the
variance (a lane's C/32 values and a warp's shuffle tree, exact two passes) stay far inside the
2^-15 of E (relative errors near 2^-18); 2^-16 |gamma u| covers the variance's, the reciprocal
square root's and the affine's own roundings, 2^-20 |beta| the last addition; the fp16 output is the
2^-10 |ref| term as everywhere.

A variant that declares ``weights="fp16"`` (the depthwise tensor-core taps: the mma's B operand is
fp16, as in TensorRT's own fp16 kernels) adds the bound of its weights' rounding, 2^-11 * L * Sw
with Sw = sum |w||x|: still hundreds of times below the error of a wrong tap or channel.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .regions import (ACT_LIPSCHITZ, Conv1x1Region, DwConvLNRegion, DwConvRegion, LiteMLARegion, Region, SERegion,
                      SiteShape, is_weight)

ERROR_BUDGET = ("per element |out - ref| <= 2^-10*|ref| + 2^-15*L*S + 2^-24, ref = the region's .pt2 in fp32 "
                "(TF32 off) on the same fp16-quantised inputs, S = sum of |terms| accumulated into that element "
                "(depthwise: sum|w||x| + |b|; LiteMLA: attention-weighted mean of |v|; squeeze-excite: |x| times the "
                "gate's slope bound times the |terms| of its pre-activation; depthwise + LayerNorm: the conv's "
                "bound Sc = sum|w||x| + |b| carried through the norm of its pixel, |gamma| r (Sc + mean Sc + |u| "
                "mean(|u| (Sc + mean Sc))) + 2^-1 |gamma u| + 2^-5 |beta|, u the normalised value, r = 1/sqrt(var + "
                "eps)), L = activation slope bound; "
                "outputs must also be finite and fully written; variants with fp16 weights (params weights=fp16) "
                "add 2^-11*L*Sw, Sw = sum|w||x|, the bound of the weights' rounding")

DISTRIBUTIONS = (("normal", 0), ("normal", 1), ("large", 2), ("offset", 3))


@dataclass
class Case:
    shape_index: int
    dist: str
    seed: int
    kernel_inputs: list[Any]   # torch tensors in the kernel's layout (fp16 channels_last / fp32 contiguous)
    ref: Any                   # fp32 NCHW reference output
    tol: Any                   # fp32 per-element tolerance
    tol_w16: Any = None        # added for variants with fp16 weights (depthwise only)

    @property
    def label(self) -> str:
        return f"shape{self.shape_index}/{self.dist}/seed{self.seed}"


def _gen(seed: int, device: Any):  # type: ignore[no-untyped-def]
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(1_000_003 * seed + 17)
    return g


def logical_inputs(region: Region, site: SiteShape, dist: str, seed: int, device: Any = "cpu") -> list[Any]:
    """fp32 logical (NCHW) inputs for one case, made on ``device``, activations fp16-representable."""
    import torch

    g = _gen(seed, device)

    def randn(shape: tuple[int, ...]) -> Any:
        return torch.randn(shape, generator=g, device=device)

    def activation(shape: tuple[int, ...]) -> Any:
        """x of the draw, rounded to fp16: normal, ``large`` (300x) or ``offset`` (half-scale around 3)."""
        x = randn(shape)
        if dist == "large":
            x = x * 300.0
        elif dist == "offset":
            x = x * 0.5 + 3.0
        return x.half().float()

    shapes = site.inputs
    if isinstance(region, (DwConvRegion, Conv1x1Region)):
        # weights scaled by 1/sqrt(fan-in) (k for a k x k depthwise tap set), so outputs stay O(|x|)
        fan = region.k if isinstance(region, DwConvRegion) else float(shapes[1][1]) ** 0.5
        ins = [activation(shapes[0]), randn(shapes[1]) / fan]
        if region.has_bias:
            ins.append(randn(shapes[2]))
        return ins
    if isinstance(region, DwConvLNRegion):
        w0, *rest = shapes[1:]
        # the conv's taps scaled by 1/k (outputs O(|x|)); bias, the norm's gamma and beta as drawn
        x = activation(shapes[0])
        return [x, randn(w0) / region.k] + [randn(shp) for shp in rest]
    if isinstance(region, SERegion):
        ins = [activation(shapes[0])]
        for shp in shapes[1:]:  # weights scaled by 1/sqrt(fan-in), biases as drawn
            ins.append(randn(shp) / float(shp[1]) ** 0.5 if len(shp) == 4 else randn(shp))
        return ins
    assert isinstance(region, LiteMLARegion)
    ins = []
    for shp in shapes:
        t = randn(shp)
        if dist == "large":
            t = t * 100.0
        elif dist == "offset":
            # Half of the pixels get an all-negative q (ReLU makes it zero): out must be exactly 0 there.
            t = t + 0.5
            d = region.dim
            n, c, h, w = t.shape
            grp = t.view(n, c // (3 * d), 3 * d, h * w)
            mask = torch.rand((n, 1, 1, h * w), generator=g, device=device) < 0.5
            grp[:, :, :d, :] = torch.where(mask, -grp[:, :, :d, :].abs() - 0.1, grp[:, :, :d, :])
        ins.append(t.half().float())
    return ins


def reference_and_tolerance(region: Region, module: Any, inputs: list[Any],
                            device: Any) -> tuple[Any, Any, Any]:
    """fp32 reference output, the per-element tolerance and the addition for fp16 weights (depthwise;
    else None), all on device.

    ``module`` is the region's torch rendering (:func:`.reference.torch_region`), already checked
    against the region's .pt2.
    """
    import torch
    import torch.nn.functional as F

    prev = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            dev_in = [t.to(device) for t in inputs]
            ref = _first(module(*dev_in)).float()
            tol_w16 = None
            if isinstance(region, DwConvRegion):
                sw = F.conv2d(dev_in[0].abs(), dev_in[1].abs(), None, region.stride, region.pad, 1,
                              dev_in[0].shape[1])
                s = sw + dev_in[2].abs().view(1, -1, 1, 1) if region.has_bias else sw
                lip = ACT_LIPSCHITZ[region.act]
                tol_w16 = sw * (lip * 2.0 ** -11)
            elif isinstance(region, Conv1x1Region):
                b = dev_in[2].abs() if region.has_bias else None
                s = F.conv2d(dev_in[0].abs(), dev_in[1].abs(), b, 1, 0, 1, dev_in[0].shape[1] // dev_in[1].shape[1])
                lip = ACT_LIPSCHITZ[region.act]
            elif isinstance(region, SERegion):
                x, params = dev_in[0], dev_in[1:]
                w1, b1, w2, b2 = region.split_params([p.abs() for p in params])
                pre = F.conv2d(x.abs().mean((2, 3), keepdim=True), w1, b1) * ACT_LIPSCHITZ[region.act]
                s = x.abs() * F.conv2d(pre, w2, b2)  # |x| times the |terms| of the gate's pre-activation
                lip = ACT_LIPSCHITZ[region.gate]
            elif isinstance(region, DwConvLNRegion):
                s = _dwln_terms(region, dev_in)
                lip = 1.0
            else:
                abs_in = [_abs_v(t, region.dim) for t in dev_in]
                s = _first(module(*abs_in)).float()
                lip = 1.0
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev
    tol = ref.abs() * 2.0 ** -10 + s * (lip * 2.0 ** -15) + 2.0 ** -24
    return ref, tol, tol_w16


def _dwln_terms(region: DwConvLNRegion, dev_in: list[Any]) -> Any:
    """S of a depthwise conv + LayerNorm (see the module doc), in the output's layout: times 2^-15 it bounds
    the conv's accumulation error carried through the pixel's norm, plus the norm's own roundings."""
    import torch.nn.functional as F

    x, params = dev_in[0], dev_in[1:]
    w0, b0, w1, b1 = region.split_params(params)
    c = x.shape[1]
    y = F.conv2d(x, w0, b0, region.stride, region.pad, 1, c)
    sc = F.conv2d(x.abs(), w0.abs(), b0.abs() if b0 is not None else None, region.stride, region.pad, 1, c)
    m = y.mean(1, keepdim=True)
    r = (y.var(1, unbiased=False, keepdim=True) + region.eps).rsqrt()
    u = ((y - m) * r).abs()
    s_mean = sc.mean(1, keepdim=True)
    gamma, beta = w1.abs().view(1, -1, 1, 1), b1.abs().view(1, -1, 1, 1)
    s = gamma * r * (sc + s_mean + u * (u * (sc + s_mean)).mean(1, keepdim=True)) + 0.5 * gamma * u + beta / 32.0
    return s if region.closed else s.permute(0, 2, 3, 1)


def _abs_v(t: Any, d: int) -> Any:
    n, c, h, w = t.shape
    out = t.clone()
    grp = out.view(n, c // (3 * d), 3 * d, h, w)
    grp[:, :, 2 * d:] = grp[:, :, 2 * d:].abs()
    return out


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


def to_kernel_layout(region: Region, inputs: list[Any], device: Any) -> list[Any]:
    """Inputs as the engine feeds them: activations fp16 channels_last, weights/bias fp32 contiguous."""
    import torch

    out = []
    for i, t in enumerate(inputs):
        if is_weight(region, i):
            out.append(t.to(device=device, dtype=torch.float32).contiguous())
        else:
            out.append(t.to(device=device, dtype=torch.float16).contiguous(memory_format=torch.channels_last))
    return out


def captured_inputs(io_npz: Path | None, site_shapes: list[SiteShape]) -> dict[int, list[Any]]:
    """Inputs captured at the real sites (``siteK.inJ`` in ``<Name>.io.npz``), fp32, by shape index."""
    from ytk_hookspecs.candidates import captured_site_inputs

    out: dict[int, list[Any]] = {}
    for ins in captured_site_inputs(io_npz):
        key = tuple(tuple(t.shape) for t in ins)
        for idx, sh in enumerate(site_shapes):
            if sh.inputs == key and idx not in out:
                out[idx] = [t.float() for t in ins]
    return out


def build_cases(region: Region, module: Any, shapes: list[SiteShape], device: Any,
                io_npz: Path | None = None) -> list[Case]:
    """Every (shape, distribution, seed) case, plus one on captured site inputs where available."""
    cases: list[Case] = []
    captured = captured_inputs(io_npz, shapes)
    for si, site in enumerate(shapes):
        plans: list[tuple[str, int, list[Any]]] = [(d, s, logical_inputs(region, site, d, s, device))
                                                   for d, s in DISTRIBUTIONS]
        if si in captured:
            act = [t.half().float() if not is_weight(region, i) else t
                   for i, t in enumerate(captured[si])]
            plans.append(("captured", -1, act))
        for dist, seed, ins in plans:
            ref, tol, tol_w16 = reference_and_tolerance(region, module, ins, device)
            cases.append(Case(si, dist, seed, to_kernel_layout(region, ins, device), ref, tol, tol_w16))
    return cases


def timing_inputs(region: Region, site: SiteShape, index: int, device: Any) -> list[Any]:
    """Random inputs in kernel layout, made on the device (one rotation set of a timing run)."""
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(7919 * index + 5)
    out = []
    for i, shp in enumerate(site.inputs):
        if is_weight(region, i):
            out.append(torch.randn(shp, generator=g, device=device, dtype=torch.float32))
        else:
            t = torch.randn(shp, generator=g, device=device, dtype=torch.float16)
            out.append(t.contiguous(memory_format=torch.channels_last))
    return out
