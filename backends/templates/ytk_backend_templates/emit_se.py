"""Squeeze-excite on NHWC fp16 (``cuda/se.cuh``): its tuning points and their instantiation.

A point (:class:`Point`) chooses the pool's block shape (``cv`` 16-byte channel vectors per row, so
``256 / cv`` pixel lanes), its loads in flight per thread (``u``), and the apply pass's vectors per
thread (``vpt``). The squeeze and excite kernels between them are the same in every variant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from itertools import product
from typing import Any

from .emit_common import ACTIVATION_CODE, Variant, instantiate, workspace_launcher
from .regions import SERegion


@dataclass(frozen=True, kw_only=True)
class Point:
    cv: int
    u: int
    vpt: int

    @property
    def name(self) -> str:
        return f"cv{self.cv}_u{self.u}_vpt{self.vpt}"

    @property
    def params(self) -> dict[str, int | str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def point(p: Point | Mapping[str, Any]) -> Point:
    """``p``, or the point its parameter dict (a report's ``params``) names."""
    return p if isinstance(p, Point) else Point(**{f.name: int(p[f.name]) for f in fields(Point)})


def variant_space(r: SERegion) -> list[Point]:
    """Pool rows of 4 or 8 channel vectors (64 or 32 pixel lanes) x 2 or 4 loads in flight x apply
    threads of 1 or 4 vectors; channel counts that fill fewer than 8 vectors take the narrow rows first."""
    rows = (4, 8) if (r.channels or 64) < 64 else (8, 4)
    return [Point(cv=cv, u=u, vpt=vpt) for cv, u, vpt in product(rows, (4, 2), (4, 1))]


def emit(r: SERegion, p: Point | Mapping[str, Any], ns: str, launcher: str, workspace: str) -> Variant:
    """One variant's CUDA text (namespace ``ns``) with its extern "C" ``launcher`` and ``workspace`` query."""
    p = point(p)
    params = dict(CV=p.cv, U=p.u, VPT=p.vpt, HAS_B1=r.has_bias1, HAS_B2=r.has_bias2)
    text = instantiate(ns, "se.cuh", params, act=ACTIVATION_CODE[r.act], gate=ACTIVATION_CODE[r.gate])
    text += workspace_launcher(ns, launcher, workspace)
    return Variant(name=p.name, params=p.params, body=text, launcher=launcher, workspace=workspace, namespace=ns)
