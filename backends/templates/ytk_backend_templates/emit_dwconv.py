"""Depthwise k x k convolution + bias + activation (``cuda/dwconv.cuh``): its tuning points and their
instantiation.

A point is a frozen dataclass of one of three kinds, each a set of the template's stages:
:class:`Tiled` (``direct``, ``smem``, ``pipe``: a block per output tile, taps from L1, from a shared
memory tile, or from a cp.async ring of tiles in persistent blocks), :class:`Strip` (``strip``, k <= 5:
a thread walks down a strip of output rows, loading each input row once) and :class:`Ring` (``tma``,
``mma``, sm_90+: persistent blocks fed by the tensor-memory accelerator, taps in FFMA or on the tensor
cores). :func:`variant_space` lists the points legal for a region (on sm_90+ the ring first; the
ring and strip tables best first as measured on the worked example's shapes, docs/benchmarks.md);
:func:`emit` instantiates one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from .emit_common import ACTIVATION_CODE, Variant, instantiate, plain_launcher
from .regions import DwConvRegion

SMEM_LIMIT = 48 * 1024  # static shared memory; larger tiles would need an opt-in attribute
#: Dynamic shared memory one sm_90 block may opt in to.
TMA_SMEM_LIMIT = 227 * 1024
#: The first sm with the tensor-memory accelerator (cp.async.bulk.tensor).
TMA_MIN_SM = 90

#: YTK_DW_STAGE of each stage (the template's ``#if`` sections).
STAGES = {"direct": 0, "smem": 1, "pipe": 2, "strip": 3, "tma": 4, "mma": 5}


def _shape(p: Tiled | Strip | Ring) -> str:
    return f"v{p.vec}_cb{p.cb}_t{p.th}x{p.tw}_r{p.rpt}c{p.cpt}"


@dataclass(frozen=True, kw_only=True)
class Tiled:
    """Stages direct, smem and pipe: a block owns a ``th`` x ``tw`` output tile of ``cb`` channels, a
    thread ``rpt`` rows x ``cpt`` columns of ``vec`` channels; pipe keeps a ring of ``ns`` tiles."""

    stage: Literal["direct", "smem", "pipe"]
    vec: int
    cb: int
    th: int
    tw: int
    rpt: int
    cpt: int
    ns: int = 2
    mb: ClassVar[int] = 0  # the register cap (CAP) decides the resident blocks

    @property
    def threads(self) -> int:
        return (self.cb // self.vec) * (self.tw // self.cpt) * (self.th // self.rpt)

    @property
    def name(self) -> str:
        return f"{self.stage}{self.ns if self.ns != 2 else ''}_{_shape(self)}"

    @property
    def params(self) -> dict[str, int | str]:
        """As recorded in reports (``ns`` only when not 2)."""
        p: dict[str, int | str] = dict(stage=self.stage, vec=self.vec, cb=self.cb, tw=self.tw, th=self.th,
                                       rpt=self.rpt, cpt=self.cpt)
        if self.ns != 2:
            p["ns"] = self.ns
        return p


@dataclass(frozen=True, kw_only=True)
class Strip:
    """Stage strip (k <= 5): a thread owns ``vec`` channels x ``cpt`` columns x a strip of ``rows``
    output rows; weights ``wreg`` 0 read from shared memory where used (the compiler may keep them in
    registers), 1 held in registers, 2 re-read from shared memory per tap; ``pf`` input rows loaded
    ahead; ``mb`` minimum resident blocks per SM (0: the compiler chooses the registers)."""

    stage: ClassVar[str] = "strip"
    vec: int
    cb: int
    rows: int
    tw: int
    cpt: int
    wreg: int = 0
    pf: int = 1
    mb: int = 0

    @property
    def th(self) -> int:
        return self.rows

    @property
    def rpt(self) -> int:
        return self.rows

    @property
    def threads(self) -> int:
        return (self.cb // self.vec) * (self.tw // self.cpt)

    @property
    def name(self) -> str:
        mode = ("", "w", "s")[self.wreg] + f"p{self.pf}" + (f"m{self.mb}" if self.mb else "")
        return f"strip{mode}_{_shape(self)}"

    @property
    def params(self) -> dict[str, int | str]:
        return dict(stage="strip", vec=self.vec, cb=self.cb, tw=self.tw, th=self.rows, rpt=self.rows, cpt=self.cpt,
                    wreg=self.wreg, pf=self.pf, mb=self.mb)


@dataclass(frozen=True, kw_only=True)
class Ring:
    """Stages tma and mma (sm_90+): persistent blocks, each item's ``th`` x ``tw`` tile of ``cb``
    channels fetched by one TMA box copy into a ring of ``ns`` buffers; a thread walks the tile's rows
    (tma: ``vec`` channels x ``cpt`` columns; mma: a warp per 8 channels and ``cpt`` 16-pixel column
    segments, ``vec`` 8, ``cb`` 64, weights entering the tensor cores as ``fp16`` or as an exact fp16
    pair ``hilo``); ``ot``: the output tile stored through the TMA; ``mb`` as :class:`Strip`'s."""

    stage: Literal["tma", "mma"]
    vec: int
    cb: int
    th: int
    tw: int
    cpt: int
    ns: int = 3
    mb: int = 0
    ot: bool = False
    weights: Literal["", "fp16", "hilo"] = ""

    def __post_init__(self) -> None:
        if (self.stage == "mma") != (self.weights in ("fp16", "hilo")):
            raise ValueError(f"{self.stage} point with weights {self.weights!r} (mma: fp16 or hilo; tma: none)")

    @property
    def rpt(self) -> int:
        return self.th

    @property
    def threads(self) -> int:
        if self.stage == "mma":
            return 32 * (self.cb // 8) * (self.tw // (16 * self.cpt))
        return (self.cb // self.vec) * (self.tw // self.cpt)

    @property
    def name(self) -> str:
        ring = f"{self.ns}" + (f"m{self.mb}" if self.mb else "") + ("h" if self.weights == "hilo" else "")
        return f"{self.stage}{ring}{'o' if self.ot else ''}_{_shape(self)}"

    @property
    def params(self) -> dict[str, int | str]:
        p: dict[str, int | str] = dict(stage=self.stage, vec=self.vec, cb=self.cb, tw=self.tw, th=self.th,
                                       rpt=self.th, cpt=self.cpt, ns=self.ns, mb=self.mb)
        if self.stage == "mma":
            p["weights"] = self.weights
        p["ot"] = int(self.ot)
        return p


DwPoint = Tiled | Strip | Ring


def point(p: DwPoint | Mapping[str, Any]) -> DwPoint:
    """``p``, or the point a parameter dict (a report's ``params``, a developer tool's JSON) names;
    fields it leaves out take the template's defaults (an mma point's weights: fp16)."""
    if isinstance(p, (Tiled, Strip, Ring)):
        return p
    stage, get = p["stage"], p.get
    if stage == "strip":
        if int(get("rpt", p["th"])) != int(p["th"]):
            raise ValueError(f"a strip's rows are its tile: th {p['th']} != rpt {p['rpt']}")
        return Strip(vec=int(p["vec"]), cb=int(p["cb"]), rows=int(p["th"]), tw=int(p["tw"]), cpt=int(p["cpt"]),
                     wreg=int(get("wreg", 0)), pf=int(get("pf", 1)), mb=int(get("mb", 0)))
    if stage in ("tma", "mma"):
        if int(get("rpt", p["th"])) != int(p["th"]):
            raise ValueError(f"a ring thread walks the tile's rows: th {p['th']} != rpt {p['rpt']}")
        return Ring(stage=stage, vec=int(p["vec"]), cb=int(p["cb"]), th=int(p["th"]), tw=int(p["tw"]),
                    cpt=int(p["cpt"]), ns=int(get("ns", 3)), mb=int(get("mb", 0)), ot=bool(get("ot", 0)),
                    weights=str(get("weights", "fp16" if stage == "mma" else "")))  # type: ignore[arg-type]
    return Tiled(stage=stage, vec=int(p["vec"]), cb=int(p["cb"]), th=int(p["th"]), tw=int(p["tw"]),
                 rpt=int(p["rpt"]), cpt=int(p["cpt"]), ns=int(get("ns", 2)))


def smem_bytes(k: int, s: int, vec: int, cb: int, tw: int, th: int, stage: str, ns: int = 2) -> int:
    tile = ((th - 1) * s + k) * ((tw - 1) * s + k) * cb * 2
    weights = k * k * cb * 4 + cb * 4
    return {"direct": 16, "smem": tile, "pipe": ns * tile}[stage] + weights


def smem_limit(stage: str) -> int:
    """Static smem is capped at 48 KB; the pipelined kernel opts in to more (its ring of tiles), up to
    what two blocks of an sm_90 SM can share."""
    return 112 * 1024 if stage == "pipe" else SMEM_LIMIT


# A deliberate spread over staging, vector width, channels per block, tile shape and outputs per
# thread; each region keeps the points that are legal for it. Deeper rings (ns 3, 4) cover the DRAM
# latency a two-tile ring leaves uncovered.
_TILED_S1 = (
    Tiled(stage="pipe", vec=8, cb=32, th=8, tw=32, rpt=4, cpt=2),
    Tiled(stage="pipe", vec=8, cb=32, th=8, tw=32, rpt=4, cpt=1),
    Tiled(stage="pipe", vec=8, cb=16, th=16, tw=32, rpt=4, cpt=1),
    Tiled(stage="pipe", vec=8, cb=64, th=8, tw=16, rpt=4, cpt=1),
    Tiled(stage="pipe", vec=8, cb=32, th=16, tw=32, rpt=4, cpt=2),
    Tiled(stage="pipe", vec=8, cb=16, th=8, tw=32, rpt=2, cpt=1),
    Tiled(stage="pipe", vec=4, cb=16, th=8, tw=32, rpt=4, cpt=1),
    Tiled(stage="pipe", vec=8, cb=32, th=16, tw=32, rpt=8, cpt=1),
    Tiled(stage="smem", vec=8, cb=32, th=8, tw=32, rpt=4, cpt=2),
    Tiled(stage="smem", vec=8, cb=16, th=16, tw=32, rpt=4, cpt=1),
    Tiled(stage="smem", vec=8, cb=32, th=8, tw=32, rpt=4, cpt=1),
    Tiled(stage="smem", vec=8, cb=64, th=8, tw=16, rpt=4, cpt=1),
    Tiled(stage="smem", vec=8, cb=16, th=8, tw=32, rpt=2, cpt=1),
    Tiled(stage="smem", vec=4, cb=16, th=8, tw=32, rpt=4, cpt=1),
    Tiled(stage="smem", vec=8, cb=32, th=16, tw=32, rpt=4, cpt=2),
    Tiled(stage="direct", vec=8, cb=32, th=4, tw=32, rpt=4, cpt=1),
    Tiled(stage="pipe", vec=4, cb=32, th=16, tw=32, rpt=8, cpt=1),
    Tiled(stage="pipe", vec=4, cb=16, th=8, tw=32, rpt=4, cpt=2),
    Tiled(stage="pipe", vec=8, cb=64, th=8, tw=32, rpt=4, cpt=2),
    Tiled(stage="pipe", vec=8, cb=16, th=16, tw=32, rpt=4, cpt=1, ns=3),
    Tiled(stage="pipe", vec=8, cb=16, th=16, tw=32, rpt=4, cpt=1, ns=4),
    Tiled(stage="pipe", vec=8, cb=32, th=8, tw=32, rpt=4, cpt=1, ns=4),
    Tiled(stage="pipe", vec=8, cb=32, th=8, tw=32, rpt=4, cpt=2, ns=3),
    Tiled(stage="pipe", vec=8, cb=16, th=8, tw=32, rpt=2, cpt=1, ns=4),
)
_TILED_S2 = (
    Tiled(stage="pipe", vec=8, cb=64, th=8, tw=8, rpt=4, cpt=1),
    Tiled(stage="pipe", vec=8, cb=64, th=4, tw=16, rpt=4, cpt=1),
    Tiled(stage="pipe", vec=8, cb=32, th=8, tw=16, rpt=4, cpt=1),
    Tiled(stage="pipe", vec=8, cb=16, th=8, tw=32, rpt=4, cpt=1),
    Tiled(stage="pipe", vec=8, cb=32, th=4, tw=16, rpt=2, cpt=1),
    Tiled(stage="smem", vec=8, cb=64, th=8, tw=8, rpt=4, cpt=1),
    Tiled(stage="smem", vec=8, cb=64, th=4, tw=16, rpt=4, cpt=1),
    Tiled(stage="smem", vec=8, cb=32, th=8, tw=16, rpt=4, cpt=1),
    Tiled(stage="smem", vec=8, cb=16, th=8, tw=32, rpt=4, cpt=1),
    Tiled(stage="smem", vec=8, cb=32, th=8, tw=16, rpt=2, cpt=1),
    Tiled(stage="direct", vec=8, cb=32, th=8, tw=16, rpt=4, cpt=1),
    Tiled(stage="direct", vec=8, cb=16, th=8, tw=32, rpt=2, cpt=1),
    Tiled(stage="pipe", vec=8, cb=64, th=8, tw=8, rpt=4, cpt=1, ns=3),
    Tiled(stage="pipe", vec=8, cb=32, th=8, tw=16, rpt=4, cpt=1, ns=4),
)

_STRIP_S1 = (
    # 3x3
    Strip(vec=4, cb=128, rows=8, tw=16, cpt=4, wreg=0, pf=2, mb=0),
    Strip(vec=4, cb=64, rows=8, tw=32, cpt=4, wreg=0, pf=2, mb=4),
    Strip(vec=4, cb=64, rows=8, tw=32, cpt=4, wreg=0, pf=2, mb=0),
    Strip(vec=4, cb=64, rows=8, tw=32, cpt=4, wreg=0, pf=1, mb=0),
    Strip(vec=2, cb=64, rows=8, tw=64, cpt=8, wreg=1, pf=1, mb=0),
    Strip(vec=2, cb=64, rows=8, tw=32, cpt=4, wreg=1, pf=2, mb=0),
    Strip(vec=4, cb=64, rows=8, tw=16, cpt=2, wreg=0, pf=2, mb=0),
    Strip(vec=4, cb=64, rows=4, tw=32, cpt=4, wreg=0, pf=1, mb=0),
    Strip(vec=4, cb=128, rows=4, tw=16, cpt=4, wreg=0, pf=2, mb=0),
    Strip(vec=4, cb=16, rows=8, tw=128, cpt=4, wreg=0, pf=2, mb=0),
    Strip(vec=2, cb=16, rows=8, tw=64, cpt=4, wreg=0, pf=2, mb=0),
    # 5x5: half2 per thread keeps the 5 live accumulator rows small enough for 2 blocks of 256 per SM
    Strip(vec=2, cb=64, rows=8, tw=32, cpt=4, wreg=2, pf=2, mb=2),
    Strip(vec=2, cb=64, rows=4, tw=32, cpt=4, wreg=2, pf=2, mb=2),
    Strip(vec=2, cb=64, rows=8, tw=32, cpt=4, wreg=2, pf=1, mb=2),
    Strip(vec=2, cb=32, rows=8, tw=64, cpt=4, wreg=2, pf=2, mb=2),
    Strip(vec=4, cb=64, rows=8, tw=16, cpt=2, wreg=2, pf=2, mb=3),
)
_STRIP_S2 = (
    Strip(vec=4, cb=64, rows=8, tw=16, cpt=2, wreg=1, pf=1, mb=0),
    Strip(vec=4, cb=64, rows=4, tw=32, cpt=4, wreg=1, pf=1, mb=0),
    Strip(vec=8, cb=64, rows=8, tw=16, cpt=2, wreg=0, pf=1, mb=0),
    Strip(vec=4, cb=64, rows=8, tw=16, cpt=2, wreg=0, pf=2, mb=0),
)

# Every ring point stores its output through the TMA; _tma_space adds the twin without for 16-channel
# blocks (32-byte pixel rows, where the lanes' own stores measured faster).
_TMA_S1 = (
    Ring(stage="tma", vec=4, cb=32, th=4, tw=32, cpt=2, ns=3, ot=True),
    Ring(stage="tma", vec=4, cb=64, th=4, tw=32, cpt=2, ns=2, ot=True),
    Ring(stage="tma", vec=4, cb=32, th=8, tw=16, cpt=1, ns=3, ot=True),
    Ring(stage="tma", vec=8, cb=64, th=8, tw=16, cpt=1, ns=3, ot=True),
    Ring(stage="tma", vec=4, cb=32, th=8, tw=32, cpt=1, ns=3, ot=True),
    Ring(stage="tma", vec=4, cb=128, th=8, tw=16, cpt=2, ns=3, ot=True),
    Ring(stage="tma", vec=4, cb=64, th=8, tw=8, cpt=1, ns=3, ot=True),
    Ring(stage="tma", vec=4, cb=64, th=4, tw=32, cpt=2, ns=3, ot=True),
    # 16-channel blocks for the thin early stages
    Ring(stage="tma", vec=4, cb=16, th=8, tw=64, cpt=1, ns=3, ot=True),
    Ring(stage="tma", vec=4, cb=16, th=8, tw=128, cpt=2, ns=3, ot=True),
)
_TMA_S2 = (
    Ring(stage="tma", vec=8, cb=64, th=4, tw=16, cpt=1, ns=3, ot=True),
    Ring(stage="tma", vec=4, cb=32, th=4, tw=16, cpt=1, ns=3, ot=True),
    Ring(stage="tma", vec=4, cb=64, th=4, tw=8, cpt=1, ns=3, ot=True),
    Ring(stage="tma", vec=4, cb=32, th=8, tw=16, cpt=1, ns=3, ot=True),
)
_TMA_K5 = (
    Ring(stage="tma", vec=4, cb=32, th=8, tw=16, cpt=1, ns=3, ot=True),
    Ring(stage="tma", vec=2, cb=128, th=8, tw=8, cpt=2, ns=3, ot=True),
    Ring(stage="tma", vec=2, cb=32, th=8, tw=32, cpt=2, ns=3, ot=True),
    Ring(stage="tma", vec=2, cb=64, th=4, tw=16, cpt=2, ns=3, ot=True),
)
# Tensor-core taps (stride 1, 64 channels per block): first in the space for 5x5, after the FFMA ring
# for 3x3, where the two are on a par.
_MMA = (
    Ring(stage="mma", vec=8, cb=64, th=8, tw=16, cpt=1, ns=2, weights="fp16", mb=2, ot=True),
    Ring(stage="mma", vec=8, cb=64, th=5, tw=16, cpt=1, ns=2, weights="fp16", mb=3, ot=True),
    Ring(stage="mma", vec=8, cb=64, th=4, tw=16, cpt=1, ns=2, weights="fp16", mb=3, ot=True),
    Ring(stage="mma", vec=8, cb=64, th=4, tw=16, cpt=1, ns=3, weights="fp16", mb=4, ot=True),
    Ring(stage="mma", vec=8, cb=64, th=4, tw=16, cpt=1, ns=3, weights="fp16", mb=3, ot=True),
    Ring(stage="mma", vec=8, cb=64, th=4, tw=32, cpt=2, ns=2, weights="fp16", mb=3, ot=True),
    Ring(stage="mma", vec=8, cb=64, th=4, tw=16, cpt=1, ns=3, weights="hilo", mb=2, ot=True),
)


def tma_smem_bytes(k: int, s: int, cb: int, tw: int, th: int, ns: int, mma: bool = False, *, ot: bool) -> int:
    """The ring's dynamic shared memory: ``ns`` tiles, each rounded up to the TMA destination
    alignment (128 bytes; stage mma: 1024 for the 128-byte swizzle, its box 8-pixel wide multiples),
    plus the alignment slack; with ``ot`` two staged output tiles (1024-aligned). ``ot`` has no
    default: a caller that forgot the staging tiles would let a point past the opt-in limit."""
    iw, align = (tw - 1) * s + k, 1024 if mma else 128
    tile = ((th - 1) * s + k) * (-(-iw // 8) * 8 if mma else iw) * cb * 2
    out = ns * (-(-tile // align) * align) + align
    return out + (2 * (-(-(th * tw * cb * 2) // 1024) * 1024) if ot else 0)


def _mma_space(r: DwConvRegion) -> list[DwPoint]:
    """The tensor-core points legal for ``r``: stride 1, k 3 or 5, a constant C that 64 divides (or a
    runtime C), the ring and the staged output tiles (every point stores its output through the
    TMA) within the opt-in shared memory. Weights enter the mma as fp16 (``weights`` "fp16", scored
    with that rounding's budget) or as an exact fp16 pair ("hilo", the plain budget)."""
    if r.stride != 1 or r.k not in (3, 5) or (r.channels and r.channels % 64):
        return []
    return [p for p in _MMA if tma_smem_bytes(r.k, 1, p.cb, p.tw, p.th, p.ns, mma=True, ot=p.ot) <= TMA_SMEM_LIMIT]


def strip_registers(r: DwConvRegion, vec: int, cpt: int, wreg: int, pf: int) -> int:
    """fp32 registers a strip thread keeps live: weights (if held), the accumulators of the output
    rows one input row touches, the converted input row and the raw (fp16) rows in flight."""
    nic = (cpt - 1) * r.stride + r.k
    rows = -(-r.k // r.stride)
    return (r.k * r.k * vec if wreg != 2 else vec) + rows * cpt * vec + nic * vec + (pf + 1) * nic * vec // 2


def _block_fits(r: DwConvRegion, cb: int, threads: int) -> bool:
    """A block of 128, 256 or 512 threads whose channel block tiles a constant C."""
    return threads in (128, 256, 512) and not (r.channels and (cb > r.channels or r.channels % cb))


def _tma_space(r: DwConvRegion) -> list[DwPoint]:
    """The TMA-ring points legal for ``r``: a block of 128-512 threads, a constant C tiled by the
    channel block, the ring within the opt-in shared memory, and the thread's live fp32 registers
    (every weight of its channels, the accumulator rows one input row touches, that row) in budget."""
    table = _TMA_K5 if r.k == 5 else _TMA_S1 if r.stride == 1 else _TMA_S2
    if r.k not in (3, 5):
        return []
    out: list[DwPoint] = []
    for p in table:
        if not _block_fits(r, p.cb, p.threads) or (not r.channels and p.cb > 64):
            continue
        if tma_smem_bytes(r.k, r.stride, p.cb, p.tw, p.th, p.ns, ot=True) > TMA_SMEM_LIMIT:
            continue  # (the ot=0 twin of a 16-channel point needs less: it fits when this does)
        nic = (p.cpt - 1) * r.stride + r.k
        if r.k * r.k * p.vec + -(-r.k // r.stride) * p.cpt * p.vec + nic * p.vec > 200:
            continue
        out.append(p)
        if p.cb == 16:
            out.append(replace(p, ot=False))
    return out


def variant_space(r: DwConvRegion, wide: bool = False, sm: int = 0) -> list[DwPoint]:
    """The tuning points legal for ``r`` on sm ``sm`` (0: unknown, no sm-specific points): on sm_90
    and newer the TMA-ring points first (5x5: tensor-core taps, then FFMA; 3x3 the other way round);
    then channel blocking that tiles C, smem within the static
    limit, and a register estimate (fp32 accumulators + one input row) that leaves room to run;
    then the strips (k <= 5) whose live registers fit, under their minimum-blocks cap if any."""
    ring = _mma_space(r) + _tma_space(r) if r.k == 5 else _tma_space(r) + _mma_space(r)
    out: list[DwPoint] = ring if sm >= TMA_MIN_SM else []
    for t in _TILED_S1 if r.stride == 1 else _TILED_S2:
        if not _block_fits(r, t.cb, t.threads):
            continue
        if not r.channels and t.cb > 32:
            continue
        if smem_bytes(r.k, r.stride, t.vec, t.cb, t.tw, t.th, t.stage, t.ns) > smem_limit(t.stage):
            continue
        if not wide and t.rpt * t.cpt * t.vec + ((t.cpt - 1) * r.stride + r.k) * t.vec > 112:
            continue
        if not wide and r.k >= 5 and t.rpt >= 8 and t.vec == 8:  # 8 rows of 8 channels plus 5x5 weights: spills
            continue
        if t.threads == 512 and not register_cap(r, t):
            continue  # 512 threads cap registers at 128, below what this tile needs: it would spill
        out.append(t)
    for s in _STRIP_S1 if r.stride == 1 else _STRIP_S2:
        if not _block_fits(r, s.cb, s.threads) or r.k > 5:  # 7x7 strips (7 accumulator rows) are not tuned yet
            continue
        regs = strip_registers(r, s.vec, s.cpt, s.wreg, s.pf)
        if regs > (255 if wide else 200):
            continue
        if s.mb and regs + 8 > 65536 // (s.mb * s.threads):  # the cap would spill
            continue
        out.append(s)
    return out


def register_cap(r: DwConvRegion, p: DwPoint) -> bool:
    """Cap registers at 128 only where weights + accumulators + an input row fit (else it spills)."""
    nic = (p.cpt - 1) * r.stride + r.k
    return r.k * r.k * p.vec + p.rpt * p.cpt * p.vec + nic * p.vec <= 140


def variant_name(p: DwPoint | Mapping[str, Any]) -> str:
    return point(p).name


def emit(r: DwConvRegion, p: DwPoint | Mapping[str, Any], ns: str, launcher: str, *, trace: bool = False) -> Variant:
    """One variant's CUDA text (namespace ``ns``) with its extern "C" ``launcher``. ``trace`` (the
    developer timeline of benchmarks/dw_trace.py, ring stages only) adds cuda/dwconv_ring_trace.cuh."""
    p = point(p)
    params: dict[str, bool | int] = dict(
        K=r.k, S=r.stride, P=r.pad, VEC=p.vec, CB=p.cb, TW=p.tw, TH=p.th, RPT=p.rpt, CPT=p.cpt,
        CONST_C=r.channels or 0, HAS_BIAS=r.has_bias, RESIDUAL=r.residual,
        CAP=isinstance(p, Tiled) and register_cap(r, p),  # the others name their resident blocks (MB)
        MB=p.mb)
    if p.stage in ("pipe", "tma", "mma"):
        params["NSTAGE"] = p.ns
    if isinstance(p, Strip):
        params.update(WREG=p.wreg, PF=p.pf)
    if isinstance(p, Ring):
        params["OUT_TMA"] = p.ot
        if p.stage == "mma":
            params["HILO"] = p.weights == "hilo"
    if trace and not isinstance(p, Ring):
        raise ValueError(f"{p.name}: only the ring stages (tma, mma) have a developer timeline")
    # 7x7: weights read with pinned loads and the input-row loop left rolled (else they spill)
    macros = {"YTK_DW_STAGE": STAGES[p.stage], "YTK_DW_PINNED": int(r.k >= 7)}
    ring = isinstance(p, Ring)
    text = instantiate(ns, "dwconv.cuh", params, macros, act=ACTIVATION_CODE[r.act],
                       before=["dwconv_ring_trace.cuh"] if trace else [],
                       undef=["YTK_RING_TRACE_START", "YTK_RING_TRACE_ITEM", "YTK_RING_TRACE_END"] if ring else [])
    if ring:  # the tensor-map types and the driver entry point's signature (no libcuda link)
        text = "#include <cuda.h>\n#include <cudaTypedefs.h>\n" + text
    return Variant(name=p.name, params=p.params, body=text + plain_launcher(ns, launcher), launcher=launcher,
                   namespace=ns)
