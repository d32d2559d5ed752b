"""Shape families: regions that one specialised kernel can serve.

A family shares op kind, torch class, kernel size, stride, dilation, the constant channel count(s)
and the spatial size, because a kernel specialised on constant shapes measurably beats a general
one on fixed-shape engines. Per op (kind, class, kernel, stride), families too small for a kernel
of their own fold into one dynamic remainder; ``merge`` folds them all.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .naming import family_label, family_name, remainder_label, remainder_name, tag_words
from .regions import Region


def _t(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def family_key(r: Region) -> tuple[Any, ...]:
    s = r.sig
    if r.kind == "attention":
        return (*op_key(r), s.get("C"), _t(s.get("spatial")))
    if r.kind == "gemm":
        return (*op_key(r), s.get("K"), s.get("N"), _t(s.get("spatial")))
    if r.kind == "squeeze_excite":
        return (*op_key(r), s.get("C"), s.get("CR"), _t(s.get("spatial")))
    return (*op_key(r), s.get("groups"), s.get("C"), s.get("Cout"), _t(s.get("spatial")))


def op_key(r: Region) -> tuple[Any, ...]:
    """What one kernel (even a dynamic one) cannot vary: the op, its geometry and the ops around it.

    A region whose program keeps weights baked (``Region.baked``, the carve's rule: a GEMM's weights,
    an attention block's bias table, anything but a lifted conv's weights and its folded BatchNorm)
    is one program per site: one family per site, never a selector the carve would refuse for baking
    different weights at its sites. (Sites whose baked values happen to be equal could share one; propose
    does not read weight values, so it never counts on that.)"""
    s = r.sig
    site = (r.path,) if r.kind == "gemm" or r.baked else ()
    ops = (s.get("ops"), s.get("taps"))
    if r.kind == "gemm":
        return (r.kind, r.cls, *ops, *site)
    if r.kind == "attention":
        return (r.kind, r.cls, *ops, r.part, *site)
    if r.kind == "squeeze_excite":
        return (r.kind, r.cls, *ops, r.epilogue, *site)
    return (r.kind, r.cls, _t(s.get("k")), _t(s.get("stride")), _t(s.get("dilation")), _t(s.get("pads")),
            s.get("transpose"), *ops, r.epilogue, r.branches, *site)


@dataclass
class Family:
    """Regions sharing one family key (or, for a remainder, one op key)."""

    kind: str
    cls: str
    around: bool
    regions: list[Region]
    members: list["Family"] = field(default_factory=list)  # for a dynamic remainder: the families folded in
    tagged: bool = False  # name the ops around the anchor too (two families differ only in those)

    @property
    def tag(self) -> str:
        return "".join(tag_words(self.sig.get("extra_ops"))) if self.tagged else ""

    @property
    def ms(self) -> float:
        return float(sum(r.ms for r in self.regions))

    @property
    def sig(self) -> dict[str, Any]:
        return self.regions[0].sig

    @property
    def dynamic(self) -> bool:
        return len(self.members) > 1

    @property
    def label(self) -> str:
        if self.dynamic:
            return remainder_label(self.kind, self.cls, [m.sig for m in self.members], self.tag)
        return family_label(self.kind, self.cls, self.sig, self.tag)

    @property
    def default_name(self) -> str:
        if self.dynamic:
            return remainder_name(self.kind, self.cls, self.sig, self.tag)
        return family_name(self.kind, self.cls, self.sig, self.tag)


def tag_ambiguous(families: list[Family]) -> None:
    """Where two families would get one name but compute different ops, name the ops around the anchor."""
    by_name: dict[str, list[Family]] = defaultdict(list)
    for f in families:
        by_name[f.default_name].append(f)
    for fs in by_name.values():
        if len({f.sig.get("ops") for f in fs}) > 1:
            for f in fs:
                f.tagged = True


def group_families(regions: list[Region]) -> list[Family]:
    """One Family per family key, in the order their first site appears."""
    by_key: dict[tuple[Any, ...], list[Region]] = defaultdict(list)
    for r in regions:
        by_key[family_key(r)].append(r)
    return [Family(kind=rs[0].kind, cls=rs[0].cls, around=rs[0].around, regions=rs) for rs in by_key.values()]


def fold(families: list[Family], *, own_kernel_ms: float, min_ms: float, merge: bool) -> tuple[list[Family],
                                                                                              list[Family]]:
    """(kernels worth generating, families under the threshold).

    Per op: a family of at least ``own_kernel_ms`` keeps its own kernel (unless ``merge``); the rest
    fold into one dynamic remainder. Attention families never fold (see below). A remainder (or a lone leftover
    family) under ``min_ms`` is not
    worth a kernelgen run.
    """
    by_op: dict[tuple[Any, ...], list[Family]] = defaultdict(list)
    for f in families:
        by_op[op_key(f.regions[0])].append(f)
    worth: list[Family] = []
    small: list[Family] = []
    for fams in by_op.values():
        if fams[0].kind == "attention":
            # an attention block's reshapes bake its head count and width: one program per channel
            # count (a dynamic one exports with guards that fail at the other sites)
            for f in fams:
                (worth if f.ms >= min_ms else small).append(f)
            continue
        fams = _join_calls(fams)
        own = [] if merge else [f for f in fams if f.ms >= own_kernel_ms and f.ms >= min_ms]
        worth += own
        by_ones: dict[tuple[bool, ...], list[Family]] = defaultdict(list)
        for f in fams:
            if f not in own:
                by_ones[_unit_dims(f)].append(f)
        for rest in by_ones.values():
            if len(rest) >= 2:
                members = [m for f in rest for m in (f.members or [f])]
                rem = Family(kind=rest[0].kind, cls=rest[0].cls, around=rest[0].around,
                             regions=[r for f in rest for r in f.regions], members=members)
                (worth if rem.ms >= min_ms else small).append(rem)
            else:
                (worth if rest[0].ms >= min_ms else small).append(rest[0])
    return worth, small


def _unit_dims(f: Family) -> tuple[bool, ...]:
    """Which of a family's channel and spatial extents are 1. torch.export specialises a dimension of size 1
    (its 0/1 rule), so one dynamic program cannot serve a 1x1 pooled vector and a feature map: the carve
    refuses such a selector ("its sites need programs of their own"). A remainder folds only families alike
    here. A family already joined from calls of one module keeps its first member's answer."""
    s = (f.members[0] if f.members else f).sig
    dims = [s.get("C"), s.get("Cout"), *(s.get("spatial") or ())]
    return tuple(isinstance(d, int) and d == 1 for d in dims)


def _join_calls(fams: list[Family]) -> list[Family]:
    """Families holding calls of one module (a head shared by two pyramid levels, at two sizes) become one
    dynamic family: a selector names modules, so no two selectors can split a module's calls between them."""
    group = list(range(len(fams)))

    def root(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    first: dict[str, int] = {}
    for i, f in enumerate(fams):
        for r in f.regions:
            if r.path in first:
                group[root(i)] = root(first[r.path])
            first.setdefault(r.path, i)
    joined: dict[int, list[Family]] = defaultdict(list)
    for i, f in enumerate(fams):
        joined[root(i)].append(f)
    out = []
    for fs in joined.values():
        if len(fs) == 1:
            out.append(fs[0])
            continue
        members = [m for f in fs for m in (f.members or [f])]
        out.append(Family(kind=fs[0].kind, cls=fs[0].cls, around=fs[0].around,
                          regions=[r for f in fs for r in f.regions], members=members))
    return out
