"""The round's engines: compile the kept plugins with the new ones, score their numerics against torch,
and find the plugin to blame when an engine will not compile or fails numerics.

Each compile is recorded in its round with the bundle's sha256 and reused while the bundle is intact,
so a resumed run compiles nothing twice.
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

from ytk_hookspecs.models.base import sha256_file

from ..errors import BackendError
from .carving import Carver
from .control import checkpoint
from .isolate import describe, must_stop
from .state import CompileRecord, PluginRecord, RoundRecord
from .workspace import Workspace


class EngineCompiler:
    def __init__(self, ws: Workspace, carver: Carver, worker: str | None = None) -> None:
        self.ws = ws
        self.carver = carver
        self.worker = worker  # a Kronos worker's URL: every compile runs there

    def records(self, round_index: int) -> list[CompileRecord]:
        """The compiles recorded for a round (round 0: the baseline's)."""
        state = self.ws.state
        return state.round0_compiles if round_index == 0 else state.rounds[round_index - 1].compiles

    def compile(self, out: Path, plugins: list[PluginRecord], round_index: int,
                prep: Path | None = None) -> CompileRecord:
        """Compile (or reuse a recorded compile of exactly these plugins) and score numerics."""
        from ..stages.compile import run_compile
        from ..stages.verify import run_verify

        ws, state = self.ws, self.ws.state
        if prep is None:
            prep = self.carver.prepare_dir_for(state.rounds[round_index - 1], plugins)
        names = sorted(p.name for p in plugins)
        shas = sorted(p.so_sha256 or "" for p in plugins)
        records = self.records(round_index)
        rec = next((old for old in records if old.plugins == names and old.plugin_sha256s == shas
                    and ws.path(old.bundle).is_file() and sha256_file(ws.path(old.bundle)) == old.sha256), None)
        if rec is None:
            res = run_compile(state.arch, state.precision, prep / "model.onnx", prep / "model.npz", out,
                              [ws.path(p.so or "") for p in plugins], engine=state.backends.engine,
                              worker=self.worker)
            rec = CompileRecord(bundle=ws.rel(out), prepare_dir=ws.rel(prep), sha256=sha256_file(out), plugins=names,
                                plugin_sha256s=shas, p50_ms=statistics.median(res.benchmark.iterations_ms))
            records.append(rec)
            ws.save()
            checkpoint(f"{round_index}:compile-job")
        if rec.numerics_passed is None:
            ver = run_verify(ws.path(rec.prepare_dir) / "model.reference.npz", [ws.path(rec.bundle)], no_host=True)
            rec.numerics_passed = ver.passed
            rec.numerics_note = "; ".join(f"{ver.output_text(n.output)}: {n.detail or 'out of tolerance'}"
                                          for n in ver.failures())[:500]
            ws.save()
        return rec

    def try_compile(self, rnd: RoundRecord, name: str, plugins: list[PluginRecord]) -> CompileRecord | str:
        """``compile`` into round ``rnd``'s dir; a failure (a ytk error, or a bug anywhere below) comes back as
        one line, its traceback in the debug log."""
        try:
            return self.compile(self.ws.round_dir(rnd.index) / name, plugins, rnd.index)
        except Exception as e:
            if must_stop(e):
                raise
            self.ws.debug_traceback(f"round {rnd.index}: compiling {name} failed", e)
            return describe(e)

    def _try_each_alone(self, rnd: RoundRecord, plugin: PluginRecord) -> CompileRecord | str:
        """One new plugin compiled on top of the kept plugins."""
        return self.try_compile(rnd, f"check-{plugin.name}.tgz", self.ws.round_plugins(rnd, [plugin]))

    # -- the round's compile stage ------------------------------------------------------------------
    def compile_round(self, rnd: RoundRecord) -> None:
        rec = self.try_compile(rnd, f"round{rnd.index}.tgz", self.ws.round_plugins(rnd))
        if isinstance(rec, str):
            rec = self._isolate_compile(rnd, rec)
            if rec is None:
                rnd.note = "no new plugin compiled into the engine"
                self.ws.advance(rnd, "done")
                return
        rnd.result_bundle, rnd.result_ms = rec.bundle, rec.p50_ms
        self.ws.advance(rnd, "verify")

    def _isolate_compile(self, rnd: RoundRecord, why: str) -> CompileRecord | None:
        """The engine compile with every new plugin failed: compile each alone (on top of the kept plugins),
        drop those that fail, and compile the rest together. None when no plugin is left."""
        ws = self.ws
        self._check_best_compiles(rnd)
        if len(ws.active(rnd)) == 1:  # that compile was this plugin alone
            ws.drop(ws.active(rnd)[0], "compile", f"engine compile: {why}")
            ws.save()
            return None
        ws.event(f"round {rnd.index}: the engine compile with every new plugin failed ({why}); compiling them one "
                 "at a time")
        for c in list(ws.active(rnd)):
            one = self._try_each_alone(rnd, c)
            if isinstance(one, str):
                ws.drop(c, "compile", f"engine compile: {one}")
                ws.save()
        if not ws.active(rnd):
            return None
        rec = self.try_compile(rnd, f"round{rnd.index}-compiled.tgz", ws.round_plugins(rnd))
        if isinstance(rec, str):
            for c in ws.active(rnd):
                ws.drop(c, "compile", f"engine compile: the plugins compile one at a time but not together: {rec}")
            ws.save()
            return None
        return rec

    def _check_best_compiles(self, rnd: RoundRecord) -> None:
        """Before blaming a plugin, compile the best engine so far again (the baseline and the kept plugins):
        when that fails too, no candidate can be tried and the loop stops, its round left to resume."""
        from ..stages.compile import run_compile

        ws, state = self.ws, self.ws.state
        best = state.best
        assert best is not None
        prep = ws.path(best.prepare_dir)
        out = ws.round_dir(rnd.index) / "best-again.tgz"
        try:
            run_compile(state.arch, state.precision, prep / "model.onnx", prep / "model.npz", out,
                        [ws.path(p.so or "") for p in best.plugins], engine=state.backends.engine,
                        worker=self.worker)
        except Exception as e:
            if must_stop(e):
                raise
            ws.debug_traceback(f"round {rnd.index}: compiling the best engine again failed", e)
            raise BackendError(f"round {rnd.index}: the engine cannot compile even the best engine so far (the "
                               f"baseline and {len(best.plugins)} kept plugin(s)): {describe(e)}. No candidate can be "
                               "tried; run the same command again once the engine works") from None
        finally:
            out.unlink(missing_ok=True)

    # -- the round's numerics gate ------------------------------------------------------------------
    def verify_round(self, rnd: RoundRecord) -> None:
        """Numerics gate: a plugin whose engine fails verify never reaches the final engine."""
        rec = next(c for c in rnd.compiles if c.bundle == rnd.result_bundle)
        if not rec.numerics_passed:
            checked = self._isolate_numerics(rnd)
            if checked is None:
                self.ws.advance(rnd, "done")
                return
            rnd.result_bundle, rnd.result_ms = checked.bundle, checked.p50_ms
        self.ws.advance(rnd, "decide")

    def _blame_by_taps(self, rnd: RoundRecord) -> bool:
        """Carve the round's plugins again with debug taps, compile and verify that engine, and drop the new
        plugin whose region drifts first in graph order, the tap figures as the reason. False when the taps
        name no new plugin (none drifts, the drift is in the engine's own layers or in a kept plugin) or the
        tapped engine cannot be built: the loop then checks the plugins one at a time."""
        from ..stages.compile import run_compile
        from ..stages.verify import run_verify

        ws, state = self.ws, self.ws.state
        plugins = ws.round_plugins(rnd)
        new = {c.name: c for c in ws.active(rnd)}
        n = sum(1 for p in ws.round_dir(rnd.index).glob("taps-*") if p.is_dir())
        prep = ws.round_dir(rnd.index) / f"taps-{n}"
        try:
            self.carver.prepare(prep, [p.selector for p in plugins], debug_taps=True)
            bundle = run_compile(state.arch, state.precision, prep / "model.onnx", prep / "model.npz",
                                 prep / "tapped.tgz", [ws.path(p.so or "") for p in plugins],
                                 engine=state.backends.engine, worker=self.worker)
            rep = run_verify(prep / "model.reference.npz", [bundle.bundle], no_host=True)
        except Exception as e:
            if must_stop(e):
                raise
            ws.debug_traceback(f"round {rnd.index}: the debug-tap engine failed", e)
            ws.event(f"round {rnd.index}: no debug taps ({describe(e)}); checking the new plugins one at a time")
            return False
        finally:
            shutil.rmtree(prep, ignore_errors=True)  # a second carve of the model: large, and read once
        taps = getattr(rep, "taps", None) or []
        verdict = taps[0] if taps else None
        if verdict is None or verdict.plugin not in new:
            ws.event(f"round {rnd.index}: debug taps name no new plugin ({verdict.reason if verdict else 'no taps'})"
                     "; checking the new plugins one at a time")
            return False
        ws.drop(new[verdict.plugin], "numerics", f"numerics (debug taps): {verdict.reason}")
        ws.save()
        return True

    def _isolate_numerics(self, rnd: RoundRecord) -> CompileRecord | None:
        """The round's engine fails numerics: debug taps name the region that drifts first (one tapped
        engine per culprit) and the rest are checked together; when the taps name none, or the rest still
        fail, check each new plugin alone (on top of the kept plugins), drop those whose engine fails, and
        check the rest together. None, with the round's note, when no plugin
        is left or the rest fail together."""
        ws = self.ws
        tapped = 0
        while ws.active(rnd) and self._blame_by_taps(rnd):
            tapped += 1  # one region named and dropped per tapped engine
        if tapped and ws.active(rnd):
            rest = self.try_compile(rnd, f"round{rnd.index}-after-taps.tgz", ws.round_plugins(rnd))
            if not isinstance(rest, str) and rest.numerics_passed:
                return rest
        for c in list(ws.active(rnd)):
            one = self._try_each_alone(rnd, c)
            if isinstance(one, str):
                ws.drop(c, "compile", f"engine compile: {one}")
            elif not one.numerics_passed:
                ws.drop(c, "numerics", f"numerics: {one.numerics_note or 'verify failed'}")
            ws.save()
        if not ws.active(rnd):
            rnd.note = "every new plugin failed numerics"
            return None
        checked = self.try_compile(rnd, f"round{rnd.index}-checked.tgz", ws.round_plugins(rnd))
        if isinstance(checked, str) or not checked.numerics_passed:
            why = (f"engine compile: the plugins compile one at a time but not together: {checked}"
                   if isinstance(checked, str) else "numerics: the plugins pass one at a time but not together")
            for c in ws.active(rnd):
                ws.drop(c, "compile" if isinstance(checked, str) else "numerics", why)
            rnd.note = "combined engine failed numerics"
            return None
        return checked
