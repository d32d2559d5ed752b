"""EfficientViT's LiteMLA ReLU linear attention on NHWC fp16 (``cuda/litemla.cuh``): its tuning points
and their instantiation.

A point (:class:`Point`) chooses pass 1's chunking (``nchunk`` pixel chunks per (batch, group),
``p1_warps`` warps per block, ``u1`` pixels per lane per step) and pass 2's blocks (``p2_threads``
threads, ``ppt`` pixels per thread, ``p2_pix`` pixels per block); the space pairs every pass-1 choice
with every pass-2 one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from itertools import product
from typing import Any

from .emit_common import Variant, instantiate, workspace_launcher
from .regions import LiteMLARegion


@dataclass(frozen=True, kw_only=True)
class Point:
    nchunk: int
    p1_warps: int
    u1: int
    p2_threads: int
    ppt: int
    p2_pix: int

    @property
    def name(self) -> str:
        return f"ch{self.nchunk}_w{self.p1_warps}_u{self.u1}_t{self.p2_threads}_ppt{self.ppt}_px{self.p2_pix}"

    @property
    def params(self) -> dict[str, int | str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def point(p: Point | Mapping[str, Any]) -> Point:
    """``p``, or the point its parameter dict (a report's ``params``) names."""
    return p if isinstance(p, Point) else Point(**{f.name: int(p[f.name]) for f in fields(Point)})


_PASS1 = (dict(nchunk=32, p1_warps=4, u1=2), dict(nchunk=64, p1_warps=4, u1=2), dict(nchunk=32, p1_warps=8, u1=4),
          dict(nchunk=64, p1_warps=8, u1=4), dict(nchunk=16, p1_warps=8, u1=4))
_PASS2 = (dict(p2_threads=128, ppt=1, p2_pix=128), dict(p2_threads=256, ppt=1, p2_pix=512),
          dict(p2_threads=128, ppt=2, p2_pix=512))


def variant_space(r: LiteMLARegion) -> list[Point]:
    """Pass-1 chunking, block size and pixels per step x pass-2 block size and pixels per thread."""
    return [Point(**a, **b) for a, b in product(_PASS1, _PASS2)]


def variant_name(p: Point | Mapping[str, Any]) -> str:
    return point(p).name


def emit(r: LiteMLARegion, p: Point | Mapping[str, Any], ns: str, launcher: str, workspace: str) -> Variant:
    """One variant's CUDA text (namespace ``ns``) with its extern "C" ``launcher`` and ``workspace`` query."""
    if r.dim % 8 or r.dim % 4:
        raise ValueError(f"head dim {r.dim} is not a multiple of 8")
    p = point(p)
    params = dict(D=r.dim, P1_WARPS=p.p1_warps, NCHUNK=p.nchunk, U1=p.u1, P2_THREADS=p.p2_threads, PPT=p.ppt,
                  P2_PIX=p.p2_pix, JOINED=r.joined, EPS=float(r.eps))
    text = instantiate(ns, "litemla.cuh", params)
    text += workspace_launcher(ns, launcher, workspace)
    return Variant(name=p.name, params=p.params, body=text, launcher=launcher, workspace=workspace, namespace=ns)
