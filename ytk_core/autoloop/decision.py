"""The round's decision: each new plugin must beat the region it replaces inside the engine, and the
round's engine must beat the best engine so far; the winners become the new best engine."""

from __future__ import annotations

from ..bundle import EngineBundle
from .engines import EngineCompiler
from .gains import plugin_layer_ms
from .state import BestEngine, PluginRecord, RoundRecord
from .workspace import Workspace


def decide_round(ws: Workspace, engines: EngineCompiler, rnd: RoundRecord) -> None:
    """Drop the plugins that lose, keep the rest when the engine got faster by at least --min-gain-ms
    (a smaller gain is not shipped), and stop the loop when the round gained less than that."""
    best = ws.state.best
    assert best is not None and rnd.result_bundle is not None
    if _drop_losers(ws, rnd) and ws.active(rnd):
        _compile_without_losers(ws, engines, rnd)
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
    rnd.stage = "done"
    ws.save()
    if gain < min_gain:
        ws.stop(f"round {rnd.index} gained {max(gain, 0.0):.3f} ms, under --min-gain-ms {ws.state.min_gain_label()}")


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
    for c in losers:
        if c.replaces:
            ws.drop(c, "decide", f"re-optimization lost: its layers took {c.plugin_ms:.3f} ms, the plugged "
                                 f"kernel's {c.region_ms:.3f} ms (needs {min_gain:.3g} ms less)")
        else:
            ws.drop(c, "decide",
                    f"lost: its layers took {c.plugin_ms:.3f} ms where the region took {c.region_ms:.3f} ms")
    return bool(losers)


def _compile_without_losers(ws: Workspace, engines: EngineCompiler, rnd: RoundRecord) -> None:
    """The round's engine again with the winners only; it becomes the round's result, or the winners are
    dropped with why it failed."""
    rec = engines.try_compile(rnd, f"round{rnd.index}-winners.tgz", ws.round_plugins(rnd))
    if isinstance(rec, str):
        for c in ws.active(rnd):
            ws.drop(c, "compile", f"engine compile after dropping the losers: {rec}")
    elif not rec.numerics_passed:
        for c in ws.active(rnd):
            ws.drop(c, "numerics", f"numerics after dropping losers: {rec.numerics_note}")
    else:
        rnd.result_bundle, rnd.result_ms = rec.bundle, rec.p50_ms


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
