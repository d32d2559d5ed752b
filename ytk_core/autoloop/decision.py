"""The round's decision: each new plugin must beat the region it replaces inside the engine, and the
round's engine must beat the best engine so far; the winners become the new best engine."""

from __future__ import annotations

from ..bundle import EngineBundle
from .control import checkpoint
from .engines import EngineCompiler
from .gains import plugin_layer_ms
from .state import BestEngine, PluginRecord, RoundRecord
from .workspace import Workspace


def decide_round(ws: Workspace, engines: EngineCompiler, rnd: RoundRecord) -> None:
    """Drop the plugins that lose, keep the rest when the engine got faster by at least --min-gain-ms
    (a smaller gain is not shipped), and stop the loop when the round gained less than that. The engine
    without the losers is adopted only when it is faster end to end than the one with them."""
    best = ws.state.best
    assert best is not None and rnd.result_bundle is not None
    if rnd.losers_engine is None and _drop_losers(ws, rnd):
        rnd.losers_engine, rnd.losers_ms = rnd.result_bundle, rnd.result_ms
        ws.save()  # a resume compares the same two engines, never judges the winners' engine again
        checkpoint(f"{rnd.index}:decide-losers")
    if rnd.losers_engine is not None and rnd.result_bundle == rnd.losers_engine:
        _without_losers(ws, engines, rnd)
    winners = ws.active(rnd)
    gain = best.ms - (rnd.result_ms or best.ms) if winners else 0.0
    rnd.gain_ms = gain
    min_gain = ws.limits.gain_ms()
    if winners and gain > 0 and gain >= min_gain:
        _keep(ws, rnd, winners, gain)
    else:
        for c in winners:
            ws.drop(c, "decide", f"the engine did not get faster ({best.ms:.3f} -> {rnd.result_ms:.3f} ms)"
                    if gain <= 0 else f"the round's engine gained {gain:.3f} ms ({best.ms:.3f} -> "
                    f"{rnd.result_ms:.3f} ms), under --min-gain-ms {ws.state.min_gain_label()}: not worth shipping")
        ws.event(f"round {rnd.index}: " + ("no gain" if gain <= 0 else f"{gain:.3f} ms is under --min-gain-ms")
                 + f"; best stays {best.ms:.3f} ms")
        if winners and not rnd.note:  # the rounds table's p50 is this round's engine, which is not shipped
            rnd.note = ("nothing kept: no gain" if gain <= 0 else
                        f"nothing kept: the gain is under --min-gain-ms {ws.state.min_gain_label()}") \
                + f"; best stays {best.ms:.3f} ms"
    rnd.stage = "done"
    ws.save()
    if gain < min_gain:
        ws.stop(f"round {rnd.index} gained {max(gain, 0.0):.3f} ms, under --min-gain-ms {ws.state.min_gain_label()}",
                "min_gain")


def _drop_losers(ws: Workspace, rnd: RoundRecord) -> bool:
    """Time each new plugin's layers in the round's engine and drop those no faster than their region
    (a re-optimization: than the plugged kernel, by --min-gain-ms). Returns whether any was dropped."""
    assert rnd.result_bundle is not None
    result = next(c for c in rnd.compiles if c.bundle == rnd.result_bundle)
    bundle = EngineBundle.open(ws.path(rnd.result_bundle))
    per = plugin_layer_ms(bundle, ws.path(result.prepare_dir) / "candidates.json")
    min_gain = ws.limits.gain_ms()
    losers = []
    for c in ws.active(rnd):
        c.plugin_ms = per.get(c.name)
        # a re-optimization must beat the plugged kernel by --min-gain-ms to be worth swapping in
        bar = c.region_ms - (min_gain if c.replaces else 0.0)
        if c.plugin_ms is not None and c.plugin_ms >= bar:
            losers.append(c)
    winners = [c for c in ws.active(rnd) if c not in losers]
    then = ("a drop that may be undone: the engine without it is compiled next, and if that one is slower by "
            "--min-gain-ms or more it is kept after all" if winners else
            "a drop that may be undone: it is kept after all if the engine with it is still faster than the best "
            "one so far")
    for c in losers:
        mine, theirs = ms_pair(c.plugin_ms or 0.0, c.region_ms)
        if c.replaces:
            ws.drop(c, "decide", f"re-optimization lost: the new plugin's layers took {mine} ms, the plugged "
                                 f"kernel's {theirs} ms (needs {min_gain:.3g} ms less)", then)
        else:
            ws.drop(c, "decide", f"lost: the plugin's layers took {mine} ms in the engine, where the region's own "
                                 f"layers had taken {theirs} ms", then)
    return bool(losers)


def ms_pair(a: float, b: float) -> tuple[str, str]:
    """Two times with enough decimals to tell them apart ("0.032 where 0.032" read as a tie that lost)."""
    for d in range(3, 7):
        x, y = f"{a:.{d}f}", f"{b:.{d}f}"
        if x != y:
            return x, y
    return x, y


def _without_losers(ws: Workspace, engines: EngineCompiler, rnd: RoundRecord) -> None:
    """Compile the round's engine with the winners only. It becomes the round's result when it compiles,
    passes numerics and the engine with the losers is not faster end to end by at least --min-gain-ms;
    otherwise the losers are taken back and the round keeps the engine it verified (a layer's time is an
    attribution; the engine's latency is what ships, and a tie does not earn a plugin its place)."""
    assert rnd.losers_ms is not None
    best = ws.state.best
    assert best is not None
    losers = [c for c in rnd.candidates if c.status == "dropped" and c.dropped_at == "decide"]
    if not losers:  # a resume after they were taken back
        return
    winners = ws.active(rnd)
    if winners:
        rec = engines.try_compile(rnd, f"round{rnd.index}-winners.tgz", ws.round_plugins(rnd))
        if isinstance(rec, str):
            why = f"the engine without {_names(losers)} did not compile ({rec})"
        elif not rec.numerics_passed:
            why = f"the engine without {_names(losers)} failed numerics ({rec.numerics_note})"
        elif rec.p50_ms - rnd.losers_ms >= ws.limits.gain_ms():
            # kept only for a gain worth shipping: a plugin that loses on its layers and is a tie end to end (a
            # new user saw one kept at 0.006 vs 0.006 ms) is a kernel shipped for nothing
            why = (f"without {_names(losers)} the engine took {rec.p50_ms:.3f} ms, with "
                   f"{'it' if len(losers) == 1 else 'them'} {rnd.losers_ms:.3f} ms (at least --min-gain-ms "
                   f"{ws.state.min_gain_label()} faster)")
        else:
            rnd.result_bundle, rnd.result_ms = rec.bundle, rec.p50_ms
            return
    elif rnd.losers_ms < best.ms:  # every new plugin lost on its layers, yet the engine with them is faster
        why = f"without them the engine is the best one so far, {best.ms:.3f} ms; with them {rnd.losers_ms:.3f} ms"
    else:
        return
    for c in losers:
        c.status, c.dropped_at = "built", None
        other = "the plugged kernel" if c.replaces else "the region"
        mine, theirs = ms_pair(c.plugin_ms or 0.0, c.region_ms)
        c.reason = f"kept although the plugin's layers took {mine} ms where {other} took {theirs} ms: {why}"
    ws.event(f"round {rnd.index}: kept {_names(losers)} after all: {why}")


def _names(cands: list[PluginRecord]) -> str:
    return ", ".join(c.name for c in cands)


def _keep(ws: Workspace, rnd: RoundRecord, winners: list[PluginRecord], gain: float) -> None:
    """The round's engine is the new best: its plugins are kept, a re-optimization in place of the one it
    replaces."""
    best = ws.state.best
    assert best is not None and rnd.result_bundle is not None
    for c in winners:
        c.status = "kept"
    final = next(c for c in rnd.compiles if c.bundle == rnd.result_bundle)
    before = {p.name: p for p in best.plugins}
    for c in winners:
        if c.replaces and c.replaces in before:
            # the report's "region ms before" stays the region's cost before any plugin
            c.reason = (f"re-optimized: its layers took {c.plugin_ms or 0:.3f} ms where the plugged kernel "
                        f"took {c.region_ms:.3f} ms")
            c.region_ms = before[c.replaces].region_ms
    replaced = {c.replaces for c in winners if c.replaces}
    ws.state.best = BestEngine(round=rnd.index, bundle=rnd.result_bundle, ms=rnd.result_ms or best.ms,
                               prepare_dir=final.prepare_dir,
                               plugins=[p for p in best.plugins if p.name not in replaced] + winners)
    ws.event(f"round {rnd.index}: {best.ms:.3f} -> {ws.state.best.ms:.3f} ms (-{gain:.3f} ms) with "
             f"{', '.join(c.name for c in winners)}")
