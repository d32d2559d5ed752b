"""The autoloop driver: rounds of propose -> carve -> kernelgen -> build -> compile -> verify -> decide.

Each stage of a round is recorded in the state file before the next starts, and each costly job
as soon as it finishes, so a killed run resumes where it stopped. The stages live in their own
modules (``proposals``, ``carving``, ``kernel_jobs``, ``engines``, ``decision``); this one runs them
in order and decides what stops the loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from ytk_hookspecs.errors import StageError

from ..artifacts import PREPARE_MANIFEST
from ..errors import BackendError, NumericsFailed, UsageError, YtkError
from ..logs import get_logger
from .carving import Carver
from .control import Clock, checkpoint
from .decision import decide_round
from .engines import EngineCompiler
from .isolate import describe, must_stop
from .kernel_jobs import KernelJobs
from .proposals import propose_round
from .state import AutoloopState, BestEngine, RoundRecord, RoundStage
from .workspace import Workspace


class Autoloop:
    """Runs an autoloop's rounds from ``state`` (new or resumed) in ``workdir`` until it stops."""

    def __init__(self, state: AutoloopState, workdir: Path, clock: Clock, max_jobs: int,
                 worker: str | None = None) -> None:
        self.ws = Workspace(state, workdir, clock, get_logger(component="autoloop"))
        self.state = state
        self.clock = clock
        self.log = self.ws.log
        self.carver = Carver(self.ws)
        self.engines = EngineCompiler(self.ws, self.carver, worker)
        self.jobs = KernelJobs(self.ws, max_jobs)
        self.stages: dict[RoundStage, Callable[[RoundRecord], None]] = {
            "propose": lambda rnd: propose_round(self.ws, rnd),
            "prepare": self.carver.carve_round,
            "kernelgen": self.jobs.generate_round,
            "build": self.jobs.build_round,
            "compile": self.engines.compile_round,
            "verify": self.engines.verify_round,
            "decide": lambda rnd: decide_round(self.ws, self.engines, rnd),
        }

    # -- round 0 ----------------------------------------------------------------------------------
    def baseline(self) -> None:
        """Prepare and compile the model with no plugin; its numerics must pass, or nothing can be trusted."""
        state = self.state
        if state.baseline is not None:
            return
        round_dir = self.ws.round_dir(0)
        rel = state.round0_prepare
        if rel and (self.ws.path(rel) / PREPARE_MANIFEST).is_file():
            prep = self.ws.path(rel)  # a resumed run: the model was traced already (and has not changed)
        else:
            t0 = time.monotonic()
            try:
                prep = self.carver.prepare(round_dir / "prepare", [])
            except Exception as e:
                self._stop_on(e, "the baseline cannot be prepared", UsageError)
            state.round0_prepare = self.ws.rel(prep)
            state.round0_s["prepare"] = round(time.monotonic() - t0, 2)
            state.input_shapes = _npz_shapes(prep / "model.npz")
            self.ws.save()
            checkpoint("0:prepare")
        t0, b0 = time.monotonic(), self.ws.bookkeeping_s()
        try:
            rec = self.engines.compile(round_dir / "base.tgz", [], round_index=0, prep=prep)
        except Exception as e:
            self._stop_on(e, "the baseline engine cannot be compiled", BackendError)
        state.round0_s["compile"] = round(time.monotonic() - t0, 2)
        state.round0_bookkeeping_s = round(self.ws.bookkeeping_s() - b0, 2)
        if not rec.numerics_passed:
            raise NumericsFailed(f"the baseline engine itself fails numerics against torch ({rec.numerics_note}); "
                                 "autoloop has nothing trustworthy to improve on")
        state.baseline = BestEngine(round=0, bundle=rec.bundle, ms=rec.p50_ms, prepare_dir=self.ws.rel(prep))
        state.best = state.baseline.model_copy(deep=True)
        state.resolve_min_gain()
        self.ws.event(f"round 0: baseline {rec.p50_ms:.3f} ms ({state.backends.engine} engine)")
        self.ws.save()
        checkpoint("baseline")

    # -- rounds -----------------------------------------------------------------------------------
    def run(self) -> None:
        self.baseline()
        while not self.state.finished:
            rnd = self._current_round()
            if rnd is not None:
                self.step(rnd)

    def _current_round(self) -> RoundRecord | None:
        """The round to go on with: the unfinished one, else a new one. None when the limits stop the loop."""
        state, limits = self.state, self.ws.limits
        if state.rounds and state.rounds[-1].stage != "done":
            return state.rounds[-1]
        done = len(state.rounds)
        if done >= limits.max_rounds:
            self.ws.stop(f"reached --max-rounds {limits.max_rounds}", "max_rounds")
            return None
        if self.clock.exhausted():
            self.ws.stop(f"time budget of {limits.time_budget_s or 0:.0f} s spent (a larger --time-budget, or none, "
                         "goes on from here)", "time_budget")
            return None
        rnd = RoundRecord(index=done + 1)
        state.rounds.append(rnd)
        self.ws.save()
        return rnd

    def step(self, rnd: RoundRecord) -> None:
        """Run the round's current stage; it records itself and advances the round."""
        self.log.info(f"round {rnd.index}: {rnd.stage}",
                      best_ms=round(self.state.best.ms, 3) if self.state.best else None)
        stage = rnd.stage
        t0, b0 = time.monotonic(), self.ws.bookkeeping_s()
        try:
            self.stages[stage](rnd)
            rnd.stage_s[stage] = round(rnd.stage_s.get(stage, 0.0) + time.monotonic() - t0, 2)
            rnd.bookkeeping_s = round(rnd.bookkeeping_s + self.ws.bookkeeping_s() - b0, 2)
            self.ws.save()
        except Exception as e:
            # what one candidate does wrong is dropped inside the stage; what escapes stops every candidate
            self._stop_on(e, f"round {rnd.index} stopped in its {stage} stage on an internal error", YtkError,
                          exit_code=1, resume=True)
        if rnd.stage == "done":
            freed = self.ws.prune_captures(rnd)
            if freed:
                self.log.info(f"round {rnd.index}: freed {freed / 1e9:.1f} GB of region captures no later round reads")
        checkpoint(f"{rnd.index}:{stage}")

    def _stop_on(self, err: Exception, what: str, kind: type[YtkError], exit_code: int | None = None,
                 resume: bool = False) -> NoReturn:
        """Stop the loop on ``err``, which no candidate can get past: a ytk error (already one clear
        paragraph) and a full disk go up as they are; anything else becomes one line of ``kind``, its
        traceback in the debug log only."""
        if isinstance(err, StageError) or must_stop(err):
            raise err
        self.ws.debug_traceback(what, err)
        again = "; run the same command again to resume" if resume else ""
        raise kind(f"{what}: {describe(err)}{again} (-v logs the traceback)", exit_code=exit_code) from None


def _npz_shapes(npz: Path) -> list[list[int]] | None:
    import numpy as np

    try:
        with np.load(npz) as z:
            return [list(z[k].shape) for k in z.files]
    except (OSError, ValueError):
        return None
