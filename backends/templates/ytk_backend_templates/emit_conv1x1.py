"""Pointwise (1x1) convolution + bias + activation on NHWC fp16, dense or grouped (``cuda/conv1x1.cuh``):
its tuning points and their instantiation.

Two kernels: SIMT tiles (:class:`Simt`: a block owns ``threads * ppt`` pixels x ``cob`` outputs,
weights staged through shared memory in chunks of ``ks`` input channels) and, dense only,
tensor-core tiles (:class:`Mma`: ``bm`` pixels x ``bn`` outputs per block in ``bk`` input-channel
steps, ``wm`` x ``wn`` warps, the fp32 weights split into an exact hi + lo pair of fp16 halves).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .emit_common import ACTIVATION_CODE, Variant, instantiate, plain_launcher
from .regions import Conv1x1Region


@dataclass(frozen=True, kw_only=True)
class Simt:
    """SIMT tile: ``threads`` per block, ``ppt`` pixels per thread, ``cob`` outputs per block, weights
    staged ``ks`` input channels at a time."""

    threads: int
    ppt: int
    cob: int
    ks: int

    @property
    def name(self) -> str:
        return f"simt_t{self.threads}_p{self.ppt}_o{self.cob}_k{self.ks}"

    @property
    def params(self) -> dict[str, int | str]:
        return dict(impl="simt", threads=self.threads, ppt=self.ppt, cob=self.cob, ks=self.ks)


@dataclass(frozen=True, kw_only=True)
class Mma:
    """Tensor-core tile (dense only): ``bm`` pixels x ``bn`` outputs per block, ``bk`` input channels
    per step, ``wm`` x ``wn`` warps."""

    bm: int
    bn: int
    bk: int
    wm: int
    wn: int

    @property
    def name(self) -> str:
        return f"mma_m{self.bm}n{self.bn}k{self.bk}_w{self.wm}x{self.wn}"

    @property
    def params(self) -> dict[str, int | str]:
        return dict(impl="mma", bm=self.bm, bn=self.bn, bk=self.bk, wm=self.wm, wn=self.wn)


PwPoint = Simt | Mma


def point(p: PwPoint | Mapping[str, Any]) -> PwPoint:
    """``p``, or the point its parameter dict (a report's ``params``) names."""
    if isinstance(p, (Simt, Mma)):
        return p
    keys = ("bm", "bn", "bk", "wm", "wn") if p["impl"] == "mma" else ("threads", "ppt", "cob", "ks")
    return (Mma if p["impl"] == "mma" else Simt)(**{k: int(p[k]) for k in keys})  # type: ignore[arg-type]


# SIMT tiles (the input chunk ks is chosen per region): a spread over register blocking (ppt x cob
# accumulators), weight reuse per broadcast load (ppt) and input re-reads (C / cob).
_SIMT = (
    dict(threads=256, ppt=2, cob=32), dict(threads=128, ppt=2, cob=32), dict(threads=256, ppt=1, cob=64),
    dict(threads=256, ppt=4, cob=16), dict(threads=128, ppt=4, cob=16), dict(threads=256, ppt=2, cob=16),
    dict(threads=256, ppt=1, cob=32), dict(threads=128, ppt=2, cob=64), dict(threads=256, ppt=4, cob=8),
    dict(threads=128, ppt=8, cob=8), dict(threads=256, ppt=2, cob=8), dict(threads=128, ppt=1, cob=16),
)

# Tensor-core tiles (the k step bk is chosen per region): warp tiles of 16..64 x 16..32.
_MMA = (
    dict(bm=128, bn=64, wm=4, wn=2), dict(bm=128, bn=128, wm=2, wn=4), dict(bm=64, bn=64, wm=2, wn=2),
    dict(bm=128, bn=32, wm=4, wn=1), dict(bm=64, bn=128, wm=1, wn=4), dict(bm=256, bn=64, wm=4, wn=2),
    dict(bm=128, bn=16, wm=8, wn=1), dict(bm=64, bn=32, wm=4, wn=1), dict(bm=64, bn=16, wm=4, wn=1),
)


def variant_space(r: Conv1x1Region, wide: bool = False) -> list[PwPoint]:
    """Tuning points legal for ``r``. SIMT: an output block inside one group (grouped) or not wider
    than the outputs, at most 64 fp32 accumulators per thread, weights chunk within 48 KB.
    Tensor cores (dense only): output tiles not wider than the outputs, k chunks of 16..64."""
    out: list[PwPoint] = []
    kin = r.group_in if r.grouped else r.cin
    for t in _SIMT:
        ppt, cob = t["ppt"], t["cob"]
        if ppt * cob > 64:
            continue
        if r.grouped and (cob > r.group_out or r.group_out % cob):
            continue
        if r.cout and (cob > r.cout or r.cout % cob):
            continue
        if not r.cout and not r.grouped and cob > 16:
            continue  # dynamic outputs: keep blocks small enough for every site's channel count
        ks = min(kin, 128) if kin else 64
        if ks * cob * 4 > 48 * 1024:
            continue
        out.append(Simt(**t, ks=ks))
    if not r.grouped:
        bks = [32, 64] if wide and not r.cin else [32 if not r.cin else min(64, -(-r.cin // 16) * 16)]
        for bk in bks:
            for m in _MMA:
                bm, bn = m["bm"], m["bn"]
                if r.cout and bn > max(16, r.cout):
                    continue
                if not r.cout and bn > (128 if wide else 64):
                    continue
                halves = max(bm * (bk + 8) + 2 * bn * (bk + 8), bm * (bn + 8))
                if halves * 2 > 48 * 1024:
                    continue
                out.append(Mma(**m, bk=bk))
    return out


def variant_name(p: PwPoint | Mapping[str, Any]) -> str:
    return point(p).name


def emit(r: Conv1x1Region, p: PwPoint | Mapping[str, Any], ns: str, launcher: str) -> Variant:
    """One variant's CUDA text (namespace ``ns``) with its extern "C" ``launcher``."""
    p = point(p)
    params: dict[str, bool | int] = dict(CONST_C=r.cin or 0, CONST_CO=r.cout or 0, GIN=r.group_in, GOUT=r.group_out,
                                         HAS_BIAS=r.has_bias)
    macros = {"YTK_PW_MMA": int(isinstance(p, Mma))}
    if isinstance(p, Mma):
        params.update(BM=p.bm, BN=p.bn, BK=p.bk, WM=p.wm, WN=p.wn)
    else:
        params.update(NTHREADS=p.threads, PPT=p.ppt, COB=p.cob, KS=p.ks)
        kin = r.group_in if r.grouped else r.cin
        macros["YTK_PW_ROLL4"] = int(not (kin and kin <= 128))  # a constant C up to 128 is unrolled whole
    text = instantiate(ns, "conv1x1.cuh", params, macros, act=ACTIVATION_CODE[r.act])
    return Variant(name=p.name, params=p.params, body=text + plain_launcher(ns, launcher), launcher=launcher,
                   namespace=ns)
