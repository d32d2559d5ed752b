"""Depthwise conv + LayerNorm over the channels on NHWC fp16 (``cuda/dwln.cuh``): its tuning points and
their instantiation.

A point (:class:`Point`) chooses the block's output pixels (``p``, one row segment, all channels: its
fp32 conv results fill ``p * C * 4`` bytes of shared memory), the pixels of one conv item (``q``: the
weights a thread loads for a kernel row serve that many pixels), the block's threads (``t``) and the
lanes that normalise one pixel (``lg``: a warp for wide channels, fewer for ConvNeXt-atto's 40 or
EdgeNeXt's 24, whose 8-channel vectors would leave most of a warp idle).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from itertools import product
from typing import Any

from .emit_common import Variant, instantiate, plain_launcher
from .regions import DwConvLNRegion

#: shared memory a block may hold: what a block gets without opting in, and the opt-in (sm_80+: 163 KB
#: on the A100 and Orin, 227 KB on the H100)
SMEM_DEFAULT = 48 * 1024
SMEM_OPT_IN = 160 * 1024
#: fp32 registers of a conv item: Q x 8 accumulators, the kernel row's K x 8 weights, one input vector
MAX_ITEM_REGS = 120


@dataclass(frozen=True, kw_only=True)
class Point:
    p: int
    q: int
    t: int
    lg: int

    @property
    def name(self) -> str:
        return f"p{self.p}_q{self.q}_t{self.t}_lg{self.lg}"

    @property
    def params(self) -> dict[str, int | str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def point(p: Point | Mapping[str, Any]) -> Point:
    """``p``, or the point its parameter dict (a report's ``params``) names."""
    return p if isinstance(p, Point) else Point(**{f.name: int(p[f.name]) for f in fields(Point)})


def _lanes(c: int) -> int:
    """Lanes per pixel for ``c`` channels: the fewest (4..32, a power of two) that take its 8-channel vectors."""
    lg = 4
    while lg < 32 and lg < c // 8:
        lg *= 2
    return lg


#: runtime C: the points scored on every width (ConvNeXt's 96..768, EdgeNeXt's 24..168)
_DYNAMIC = (Point(p=16, q=4, t=128, lg=32), Point(p=32, q=4, t=256, lg=32), Point(p=32, q=2, t=256, lg=8),
            Point(p=16, q=2, t=128, lg=8), Point(p=8, q=4, t=128, lg=32), Point(p=64, q=4, t=256, lg=16))


def variant_space(r: DwConvLNRegion) -> list[Point]:
    """The points legal for ``r``: the conv item's registers in budget; a constant C: the block's tile
    within the opt-in shared memory, and best first by a rough fit (about two conv items per thread,
    tiles that need no opt-in ahead of those that do); a runtime C: a fixed spread (the launcher refuses a
    tile past the device's shared memory)."""
    def regs(q: int) -> int:
        return q * 8 + r.k * 8 + 8

    if not r.channels:
        return [pt for pt in _DYNAMIC if regs(pt.q) <= MAX_ITEM_REGS]
    c = r.channels
    lg = _lanes(c)
    out = []
    for p, q, t in product((8, 16, 32, 64), (2, 4, 8), (128, 256)):
        if p % q or regs(q) > MAX_ITEM_REGS or p * c * 4 > SMEM_OPT_IN:
            continue
        out.append(Point(p=p, q=q, t=t, lg=lg))
    if not out:  # a very wide C: the smallest tile, the device decides
        out = [Point(p=8, q=2, t=128, lg=lg)]

    def fit(pt: Point) -> tuple[bool, float, int]:
        per_thread = (c // 8) * (pt.p // pt.q) / pt.t
        return pt.p * c * 4 > SMEM_DEFAULT, abs(per_thread - 2.0), -pt.q

    return sorted(out, key=fit)[:12]


def variant_name(p: Point | Mapping[str, Any]) -> str:
    return point(p).name


def emit(r: DwConvLNRegion, p: Point | Mapping[str, Any], ns: str, launcher: str) -> Variant:
    """One variant's CUDA text (namespace ``ns``) with its extern "C" ``launcher``."""
    p = point(p)
    params: dict[str, bool | int | float] = dict(K=r.k, S=r.stride, PAD=r.pad, P=p.p, Q=p.q, NTHREADS=p.t, LG=p.lg,
                                                 CONST_C=r.channels or 0, HAS_BIAS=r.has_bias, EPS=float(r.eps))
    text = instantiate(ns, "dwln.cuh", params) + plain_launcher(ns, launcher)
    return Variant(name=p.name, params=p.params, body=text, launcher=launcher, namespace=ns)
