"""Scoring every built variant of a region on the local GPU and picking the winner."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ytk_hookspecs.launcher import LauncherLibrary
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import CandidateScore

from .build import BuildOutcome
from .cases import Case, timing_inputs
from .contract import bytes_moved
from .dispatch import dispatch_parts
from .emit_common import Variant, rounds_weights_to_fp16
from .harness import check_case, time_kernel, time_torch
from .regions import Region, SiteShape
from .timing import time_copy


@dataclass
class Scored:
    variant: Variant
    score: CandidateScore
    total_ms: float | None = None      # sum over sites (each shape times its site count)
    shape_ms: list[float] = field(default_factory=list)
    lib: Any = None                    # its loaded library while scoring


def score_variants(variants: list[Variant], built: BuildOutcome, region: Region, shapes: list[SiteShape],
                   cases: list[Case], device: Any, copy_gbs: float, l2_bytes: int, site_index: list[int],
                   progress: Any = None, log: Any = None) -> list[Scored]:
    """Screen every variant on one case per shape and time those that pass; then check the fastest on every
    other case, in order of time, until one passes all of them. That one is the winner (a faster one failed,
    a slower one cannot win), so the variants slower than it are not checked further: they keep
    ``correct=None`` and their times, with a note; except, with several site shapes, the fastest on each
    shape when a per-shape dispatch of them would pay (its parts). Checking every variant on every case cost
    most of a cold kernel generation (several seconds a variant at full size)."""
    screen = {id(c) for c in _first_case_per_shape(cases)}
    out: list[Scored] = []
    for v in variants:
        item = _screen_and_time(v, built, region, shapes, [c for c in cases if id(c) in screen], device, copy_gbs,
                                l2_bytes, site_index, log)
        out.append(item)
        _advance(progress)
    rest = [c for c in cases if id(c) not in screen]
    won = False
    for item in sorted((s for s in out if s.total_ms is not None), key=lambda s: s.total_ms):  # type: ignore[arg-type, return-value]
        if won:
            item.score.note = f"checked on {len(cases) - len(rest)} of {len(cases)} cases: slower than the winner"
            continue
        won = _check_rest(item, rest, device)
    # a per-shape dispatch (see .dispatch) is built from each shape's fastest variant when that pays: those are
    # checked on every case too, so a dispatch is never built on a variant that fails one (it would then fail
    # as a whole)
    while len(shapes) > 1:
        parts = dispatch_parts(out, [s.count for s in shapes])
        pending = {id(b): b for b in (parts[0] if parts else []) if b.score.correct is None}
        if not pending:
            break
        for item in pending.values():
            item.score.note = None
            _check_rest(item, rest, device)
    for item in out:
        item.lib = None
    return out


def _check_rest(item: Scored, rest: list[Case], device: Any) -> bool:
    """Check a screened, timed variant on the cases it was not screened on; a failure rejects it."""
    sc = item.score
    problems, max_abs, max_rel = _check(item.lib, item.variant, rest, device)
    sc.max_abs_err, sc.max_rel_err = max(sc.max_abs_err or 0.0, max_abs), max(sc.max_rel_err or 0.0, max_rel)
    sc.correct = not problems
    if problems:
        sc.rejected = _problems_line(problems)
        item.total_ms = None
    return sc.correct


def _first_case_per_shape(cases: list[Case]) -> list[Case]:
    seen: dict[int, Case] = {}
    for c in cases:
        seen.setdefault(c.shape_index, c)
    return list(seen.values())


def _check(lib: LauncherLibrary, v: Variant, cases: list[Case], device: Any) -> tuple[list[str], float, float]:
    problems: list[str] = []
    max_abs = max_rel = 0.0
    try:
        for case in cases:
            r = check_case(lib, case, device, fp16_weights=rounds_weights_to_fp16(v.params))
            max_abs, max_rel = max(max_abs, r.max_abs_err), max(max_rel, r.max_rel_err)
            problems += r.problems
    except StageError as e:
        problems.append(str(e))
    return problems, max_abs, max_rel


def _problems_line(problems: list[str]) -> str:
    return "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")


def _screen_and_time(v: Variant, built: BuildOutcome, region: Region, shapes: list[SiteShape], screen: list[Case],
                     device: Any, copy_gbs: float, l2_bytes: int, site_index: list[int], log: Any) -> Scored:
    sc = CandidateScore(variant=v.name, params=dict(v.params))
    item = Scored(v, sc)
    lib_info = built.library_of(v)
    if lib_info is None:
        sc.compiled, sc.rejected = False, f"did not compile: {built.error_of(v)[:400]}"
        return item
    try:
        lib = LauncherLibrary(lib_info.path, launcher=v.launcher, workspace=v.workspace)
    except StageError as e:
        sc.compiled, sc.rejected = False, f"does not load: {e}"
        return item
    problems, sc.max_abs_err, sc.max_rel_err = _check(lib, v, screen, device)
    if problems:
        sc.correct, sc.rejected = False, _problems_line(problems)
        return item
    item.lib = lib
    floors, times, spreads = [], [], []
    for site in shapes:
        t = time_kernel(lib, region, site, lambda i, s=site: timing_inputs(region, s, i, device), device,
                        copy_gbs, l2_bytes)
        times.append(t.median_ms)
        spreads.append(t.spread_ms)
        floors.append(t.floor_ms)
        if t.median_ms < t.floor_ms:
            sc.rejected = (f"measured {t.median_ms * 1e3:.2f} us at {list(site.inputs[0])}, under the physical "
                           f"floor {t.floor_ms * 1e3:.2f} us (bytes / measured copy bandwidth): a measurement bug, "
                           "not a win")
    item.shape_ms = times
    sc.time_ms_per_site = [times[i] for i in site_index]
    sc.spread_ms_per_site = [spreads[i] for i in site_index]
    sc.floor_ms_per_site = [floors[i] for i in site_index]
    total_t = sum(sc.time_ms_per_site)
    sc.fraction_of_floor = sum(sc.floor_ms_per_site) / total_t if total_t > 0 else None
    if sc.rejected is None:
        item.total_ms = total_t
    if log is not None:
        log.info("variant scored", variant=v.name, ms=[round(x, 4) for x in times],
                 fraction_of_floor=round(sc.fraction_of_floor or 0, 3))
    return item


def pick_winner(scored: list[Scored]) -> Scored | None:
    """The fastest variant checked on every case (score_variants leaves the slower ones unchecked)."""
    ok = [s for s in scored if s.total_ms is not None and s.score.correct]
    return min(ok, key=lambda s: s.total_ms) if ok else None  # type: ignore[arg-type, return-value]


def torch_times(module: Any, region: Region, shapes: list[SiteShape], device: Any, l2_bytes: int) -> list[float]:
    return [time_torch(module, region, s, lambda i, s=s: timing_inputs(region, s, i, device), device, l2_bytes)
            for s in shapes]


def copy_times(region: Region, shapes: list[SiteShape], device: Any, l2_bytes: int) -> list[float]:
    """Per shape: a plain memory pass over the kernel's bytes (see :func:`.timing.time_copy`)."""
    return [time_copy(bytes_moved(region, s), device, l2_bytes) for s in shapes]


def _advance(progress: Any) -> None:
    if progress is not None:
        progress.advance()
