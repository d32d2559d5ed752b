"""A round's candidates, from propose's report on the best engine so far: the fresh regions worth
--min-gain-ms, those propose already knows will be refused (dropped at once: no carve or job is spent
on them), and kept plugins whose kernel leaves headroom for a re-optimization."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .state import PluginRecord, RoundRecord
from .workspace import Workspace

#: Re-optimize a kept plugin when its kernel declares less than this fraction of its memory floor.
REOPT_BELOW = 0.5
#: Re-optimizations per plugin over a whole loop (each costs a kernel generation job).
REOPT_ATTEMPTS = 1


def propose_round(ws: Workspace, rnd: RoundRecord) -> None:
    """Choose the round's candidates; with none worth a job, the round is done and the loop stops."""
    report = _propose(ws)
    dropped_before = {c.selector for earlier in ws.state.rounds[:-1] for c in earlier.candidates
                      if c.status == "dropped"}
    kept = {p.name for p in ws.state.best.plugins} if ws.state.best else set()
    fresh = [p for p in report.candidates if p.selector and p.name not in kept and p.selector not in dropped_before]
    worth = [p for p in fresh if p.ms >= ws.limits.gain_ms()]
    rnd.real_support = report.real_support  # with a simulated generator: what the real ones would take
    refused = _refused_by_propose(ws, rnd, worth)
    refused_sels = {c.selector for c in refused}
    worth = [p for p in worth if p.selector not in refused_sels]
    fresh = [p for p in fresh if p.selector not in refused_sels]
    reopt = _reoptimizable(ws, report.plugged)
    if not worth and not reopt:
        rnd.note = _nothing_to_try(ws, fresh, refused, report)
        rnd.candidates = refused
        rnd.stage = "done"
        ws.stop(rnd.note, "nothing_left")
        return
    rnd.candidates = refused + [PluginRecord(name=p.name, selector=p.selector, origin_round=rnd.index, region_ms=p.ms,
                                             sites=len(p.sites)) for p in worth] + reopt
    parts = [f"{p.name} ({p.ms:.2f} ms)" for p in worth]
    parts += [f"re-optimize {c.name} ({c.region_ms:.2f} ms, {c.ms_to_beat:.3f} ms/site to beat)" for c in reopt]
    ws.event(f"round {rnd.index}: proposing {', '.join(parts)}")
    ws.advance(rnd, "prepare")


def _propose(ws: Workspace) -> Any:
    """``ytk embedded propose`` on the best engine so far, asking the loop's generator which regions it
    would take."""
    from ..propose.api import propose
    from ..propose.models import ProposeOptions

    best = ws.state.best
    assert best is not None
    prep = ws.path(best.prepare_dir)
    plugins_json = prep / "plugins.json"
    opts: dict[str, Any] = {"min_ms": ws.limits.gain_ms(), "precision": ws.state.precision,
                            "roofline_fraction": ws.limits.roofline}
    if "kernelgen" in ProposeOptions.model_fields:
        opts["kernelgen"] = ws.state.backends.kernelgen
    return propose(ws.path(best.bundle), prep / "model.onnx", prep / "fx_nodes.json",
                   plugins_json if plugins_json.is_file() else None, ProposeOptions(**opts))


def _nothing_to_try(ws: Workspace, fresh: list[Any], refused: list[PluginRecord], report: Any = None) -> str:
    """Why a round has no candidate: the note it ends with, and the loop's stop reason."""
    hidden = _roofline_takers(ws, report)
    if fresh:
        top = max(p.ms for p in fresh)
        return (f"best remaining candidate is worth {top:.3f} ms, under --min-gain-ms {ws.state.min_gain_label()}"
                + hidden)
    if refused:
        return "every candidate worth a job is one the carve or the kernel generators refuse" + hidden
    if getattr(report, "candidates", None) == [] and not ws.state.rounds[:-1]:
        under = next((w for w in getattr(report, "not_worth", []) or [] if w.category == "under_threshold"), None)
        why = "propose found no region worth a kernel in this model"
        rows = getattr(report, "not_worth", []) or []
        roof = [w for w in rows if w.category == "roofline"]
        said = []
        if under is not None:
            said.append(f"{len(under.members)} region families, {under.ms:.3f} ms in all, are under --min-gain-ms "
                        f"{ws.state.min_gain_label()}; `ytk embedded propose ... --min-ms 0` lists them")
        if roof:
            n = sum(len(w.members) or 1 for w in roof)
            said.append(f"{n} region famil{'ies' if n != 1 else 'y'}, {sum(w.ms for w in roof):.3f} ms in all, already "
                        f"reach --roofline {ws.limits.roofline:g} of their roofline bound, where a kernel has little "
                        "to win; a larger --roofline (at most 1) tries them")
        if said:
            why += f" ({'; '.join(said)})"
        return why + hidden
    left = "no candidate left to try (every proposal is plugged already or was dropped earlier)"
    under = next((w for w in getattr(report, "not_worth", []) or [] if w.category == "under_threshold"), None)
    if under is not None and under.sites:
        # what remains unplugged is small, not absent: say how small, and how to try it anyway
        one = under.sites == 1
        left += (f"; {under.sites} more site{'' if one else 's'} ({under.ms:.3f} ms) {'lies' if one else 'lie'} "
                 f"under --min-gain-ms {ws.state.min_gain_label()}")
    return left + hidden


def _roofline_takers(ws: Workspace, report: Any) -> str:
    """'' or what the generator would take that --roofline leaves out, when it refuses some of what propose
    lists (a generator of the user's own may serve only such families, and the user should hear which flag
    lets the loop try them; one that takes everything, such as the mock, needs no such line)."""
    rows = [r for r in getattr(report, "not_worth", []) or [] if getattr(r, "supported", None)]
    refuses = any(getattr(p, "supported", None) is False for p in getattr(report, "proposals", []) or [])
    # as propose: only a generator that refuses some of what propose lists may be one that serves only these
    if not rows or not refuses or ws.limits.roofline >= 1:
        return ""
    names = ", ".join(r.label for r in rows[:3]) + (f" and {len(rows) - 3} more" if len(rows) > 3 else "")
    return (f"; the kernel generator would take {names}, left out as at roofline by --roofline "
            f"{ws.limits.roofline:g}: --roofline 1 lets the loop try them")


def _refused_by_propose(ws: Workspace, rnd: RoundRecord, proposals: list[Any]) -> list[PluginRecord]:
    """Proposals that propose already knows will be refused, recorded as dropped so no carve or job is
    spent on them: ``refused`` (why the carve would refuse it), or the loop's generator answering
    ``supported`` False for certain (``support_certain``; an answer from the sketch alone that is not
    certain leaves it to the job). Read with getattr: older propose reports carry neither field."""
    out = []
    for p in proposals:
        why = getattr(p, "refused", None)
        if not (isinstance(why, str) and why.strip()):
            if getattr(p, "supported", None) is not False or getattr(p, "support_certain", True) is False:
                continue
            by = getattr(p, "support_backend", "") or "the kernel generator"
            why = f"{by} refuses it: {getattr(p, 'support_why', '') or 'the region is not supported'}"
        cand = PluginRecord(name=p.name, selector=p.selector, origin_round=rnd.index, region_ms=p.ms,
                            sites=len(p.sites))
        ws.drop(cand, "propose", f"propose: {' '.join(why.split())}")
        out.append(cand)
    return out


def _reoptimizable(ws: Workspace, proposals: list[Any]) -> list[PluginRecord]:
    """Plugged regions whose "ms/site to beat" leaves headroom: the kept kernel declares it reaches
    under REOPT_BELOW of its memory floor and closing that gap would be worth --min-gain-ms.
    Each plugin gets at most REOPT_ATTEMPTS re-optimizations (they cost real jobs)."""
    from ytk_hookspecs.kernel_source import KernelSource

    best = ws.state.best
    assert best is not None
    kept = {p.name: p for p in best.plugins}
    tried = Counter(c.replaces for rr in ws.state.rounds for c in rr.candidates if c.replaces)
    out = []
    for p in proposals:
        k = kept.get(p.name)
        if not p.already_plugged or k is None or tried[p.name] >= REOPT_ATTEMPTS or not k.source:
            continue
        try:
            perf = KernelSource.read(ws.path(k.source)).meta.perf
        except Exception:  # a kept source that no longer reads is not worth a job
            continue
        frac = perf.achieved_bandwidth_fraction if perf else None
        if frac is None or frac >= REOPT_BELOW or p.ms * (1.0 - frac) < ws.limits.gain_ms():
            continue
        out.append(PluginRecord(name=p.name, selector=k.selector, origin_round=len(ws.state.rounds), region_ms=p.ms,
                                sites=len(p.sites), replaces=p.name, ms_to_beat=p.ms_to_beat))
    return out
