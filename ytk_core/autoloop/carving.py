"""Carving: the model exported with a custom-op node for each of a set of plugins.

Each carve (a prepare dir, or why the carve fails) is recorded in the round under its selectors, so a
resumed run carves nothing twice. The round's carve stage drops a candidate whose selector the carve
refuses; a failure that names no candidate is pinned on the ones to blame by carving parts of the
round (``isolate.find_culprits``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import INTERNAL_CARVE_ERROR, RegionRefused, UsageError, YtkError
from .control import checkpoint
from .isolate import describe, find_culprits, must_stop, named_selector
from .state import CarveFailure, PluginRecord, RoundRecord
from .workspace import Workspace


class Carver:
    def __init__(self, ws: Workspace) -> None:
        self.ws = ws

    def prepare(self, out_dir: Path, selectors: list[str], debug_taps: bool = False) -> Path:
        """``ytk embedded prepare`` of the loop's model into ``out_dir``, with a node for each selector
        (and, with ``debug_taps``, every plugin boundary a graph output)."""
        from ..stages.prepare import do_prepare

        out_dir.mkdir(parents=True, exist_ok=True)
        do_prepare(Path(self.ws.state.model), out_dir / "model.onnx", out_dir / "model.npz",
                   out_dir / "model.reference.npz", selectors, debug_taps=debug_taps)
        base = self.ws.state.round0_prepare
        if base and self.ws.path(base).resolve() != out_dir.resolve():
            same_model_each_time(self.ws.path(base), out_dir, Path(self.ws.state.model))
        return out_dir

    def carve(self, rnd: RoundRecord, plugins: list[PluginRecord], probe: bool = False) -> Path | CarveFailure:
        """A prepare dir carved with exactly ``plugins`` (the ONNX holds a node for every plugin and no other),
        or why carving them fails. Both are recorded in the state, so a resumed run carves nothing twice.
        ``probe`` carves the best engine's own plugins afresh instead of reusing its prepare dir."""
        ws = self.ws
        sels = [p.selector for p in plugins]
        key = "\n".join(sorted(sels))
        rel = rnd.prepares.get(key)
        if rel and (ws.path(rel) / "prepare.json").is_file():
            return ws.path(rel)
        if key in rnd.carve_failures:
            return rnd.carve_failures[key]
        best = ws.state.best
        if not probe and best is not None and best.plugins and sorted(p.selector for p in best.plugins) == sorted(sels):
            return ws.path(best.prepare_dir)  # only re-optimizations: the best engine's carve is this carve
        out_dir = self._fresh_prepare_dir(rnd)
        try:
            prep = self.prepare(out_dir, sels)
        except Exception as e:
            shutil.rmtree(out_dir, ignore_errors=True)  # a real model's export is large, and this one is of no use
            if must_stop(e):
                raise
            ws.debug_traceback(f"round {rnd.index}: carving {len(sels)} selector(s) failed", e)
            message = describe(e)
            internal = not isinstance(e, YtkError) or getattr(e, "internal", False)
            if not isinstance(e, YtkError):  # not a refusal: the carve itself broke on these selectors
                message = f"{INTERNAL_CARVE_ERROR}: {message}"
            if internal:  # here, or pinned on its selector by the carve
                ws.log.warning(f"round {rnd.index}: {message} (-v shows its traceback)")
            failure = CarveFailure(message=message, selector=named_selector(e, sels))
            rnd.carve_failures[key] = failure
            ws.save()
            checkpoint(f"{rnd.index}:carve")
            return failure
        rnd.prepares[key] = ws.rel(prep)
        ws.save()
        checkpoint(f"{rnd.index}:carve")
        return prep

    def _fresh_prepare_dir(self, rnd: RoundRecord) -> Path:
        taken = set(rnd.prepares.values())
        n = len(rnd.prepares) + len(rnd.carve_failures)
        while True:
            out_dir = self.ws.round_dir(rnd.index) / ("prepare" if n == 0 else f"prepare-{n}")
            if self.ws.rel(out_dir) not in taken:
                return out_dir
            n += 1

    def prepare_dir_for(self, rnd: RoundRecord, plugins: list[PluginRecord]) -> Path:
        """``carve`` for callers that need the dir: a failure is raised."""
        out = self.carve(rnd, plugins)
        if isinstance(out, CarveFailure):
            if out.selector:
                raise RegionRefused(out.selector, "carve", out.message)
            raise UsageError(out.message)
        return out

    # -- the round's carve stage --------------------------------------------------------------------
    def carve_round(self, rnd: RoundRecord) -> None:
        """Carve the round's candidates (with the kept plugins). A failure naming a candidate drops it; one
        naming none is pinned on a candidate by carving parts of the round (``_isolate``)."""
        ws = self.ws
        stalled = False
        while ws.active(rnd):
            plugins = ws.round_plugins(rnd)
            out = self.carve(rnd, plugins)
            if not isinstance(out, CarveFailure):
                rnd.prepare_dir = ws.rel(out)
                rnd.selectors = [p.selector for p in plugins]
                ws.advance(rnd, "kernelgen")
                return
            named = next((c for c in ws.active(rnd) if out.selector and c.selector == out.selector), None)
            if named is not None:
                ws.drop(named, "carve", f"carve refused it: {out.message}")
                ws.save()
            elif not self._isolate(rnd, out):
                # every part carves and so did the whole, once: a carve that fails only sometimes
                if stalled:
                    for c in ws.active(rnd):
                        ws.drop(c, "carve", f"carve refused it: {out.message} (the candidates fail together, "
                                            "and no part of them fails alone)")
                    ws.save()
                    break
                stalled = True
                rnd.carve_failures.pop("\n".join(sorted(p.selector for p in plugins)), None)
        rnd.note = "every candidate was refused by the carve"
        ws.advance(rnd, "done")

    def _isolate(self, rnd: RoundRecord, failure: CarveFailure) -> bool:
        """The round's carve failed naming no candidate: carve parts of the round until the failure is
        pinned on candidates, and drop those. Returns whether any was dropped."""
        ws = self.ws
        cands = ws.active(rnd)
        self._check_carve_works(rnd)
        ws.event(f"round {rnd.index}: the carve of {len(cands)} candidate(s) failed naming none of them "
                 f"({failure.message}); carving them apart to find which")

        def carve(group: list[PluginRecord]) -> CarveFailure | None:
            out = self.carve(rnd, ws.round_plugins(rnd, group))
            return out if isinstance(out, CarveFailure) else None

        culprits = find_culprits(cands, failure, carve, lambda c: c.selector)
        for cul in culprits:
            alongside = f" together with {', '.join(c.name for c in cul.alongside)}" if cul.alongside else ""
            ws.drop(cul.candidate, "carve", f"carve refused it{alongside}: {cul.failure.message}")
        ws.save()
        return bool(culprits)

    def _check_carve_works(self, rnd: RoundRecord) -> None:
        """Before blaming a candidate, carve the best engine's own plugins (none: a plain export): when that
        fails too no candidate can be carved, and the loop stops rather than drop them all."""
        ws = self.ws
        kept = list(ws.state.best.plugins) if ws.state.best else []
        out = self.carve(rnd, kept, probe=True)
        if isinstance(out, CarveFailure):
            rnd.carve_failures.clear()  # carved while the carve itself is broken: none of them convicts a candidate
            ws.save()
            raise UsageError(f"round {rnd.index}: the carve fails even with no new candidate (the best engine's "
                             f"{len(kept)} plugin(s) only): {out.message}. No candidate can be tried; fix that and "
                             "run the same command again to resume")


class ModelNotDeterministic(UsageError):
    """model.py gave other inputs or outputs when prepared again: nothing measured against it holds."""

    stops_the_loop = True  # every candidate would be judged against a moving reference


def same_model_each_time(base: Path, again: Path, model: Path) -> None:
    """Every round re-prepares the model and checks its engines against that prepare's reference; a
    model file whose ``Model()`` or ``get_fwd_args()`` draws unseeded random numbers gives another
    reference each time, and an engine that passed in its round fails against round 0's. ``model`` is
    the user's file, named as they named it (it need not be called model.py)."""
    import numpy as np

    for name, what in (("model.npz", "inputs (get_fwd_args())"), ("model.reference.npz", "outputs (Model())")):
        with np.load(base / name) as a, np.load(again / name) as b:
            if sorted(a.files) != sorted(b.files) or any(
                    a[k].shape != b[k].shape or not np.allclose(a[k], b[k], rtol=1e-4, atol=1e-5) for k in a.files):
                raise ModelNotDeterministic(
                    f"{model.name} gives other {what} each time it is prepared ({base / name} vs {again / name}): "
                    "seed every random number it draws (torch.manual_seed in Model() and get_fwd_args(), or load "
                    "real weights); a kernel checked against one draw is wrong against the next")
