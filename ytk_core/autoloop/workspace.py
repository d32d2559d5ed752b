"""The autoloop's workdir and state, as every stage of a round uses them.

A stage records what it did in the state and saves it at once, so a killed run resumes where it
stopped. It lets a candidate go through ``drop`` and ends the loop through ``stop``; both are written
to the state's event log as well as the log.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from .control import Clock
from .state import AutoloopLimits, AutoloopState, DropStage, PluginRecord, RoundRecord, RoundStage, StopKind


class Workspace:
    """The state of one autoloop, the workdir its paths are relative to, its clock and its logger."""

    def __init__(self, state: AutoloopState, workdir: Path, clock: Clock, log: Any) -> None:
        self.state = state
        self.workdir = Path(workdir)
        self.clock = clock
        self.log = log
        # kernel generation jobs finish on worker threads: one at a time records its result or saves
        self.lock = threading.Lock()
        self.save_s = 0.0  # wall seconds spent saving the state (bookkeeping, with the bundle writes)
        self._simulated: bool | None = None

    # -- the state file ---------------------------------------------------------------------------
    def save(self) -> None:
        with self.lock:
            t0 = time.monotonic()
            self.state.elapsed_s = self.clock.spent
            self.state.save(self.workdir)
            self.save_s += time.monotonic() - t0

    def bookkeeping_s(self) -> float:
        """Wall seconds spent so far writing engine bundles and saving the state (a clock to take differences
        of: :func:`ytk_core.bundle.bundle_write_seconds` counts the whole process)."""
        from ..bundle import bundle_write_seconds

        return bundle_write_seconds() + self.save_s

    def advance(self, rnd: RoundRecord, stage: RoundStage) -> None:
        from ..interrupts import check

        rnd.stage = stage
        self.save()
        check()  # saved first: a Ctrl-C something swallowed stops here, and the rerun resumes at this stage

    def prune_captures(self, rnd: RoundRecord) -> int:
        """A finished round's carves, except the best engine's, lose their captured region inputs and
        outputs (``*.io.npz``, ``*.inputs.pt``: GBs each at full size, and only the round's own kernel jobs
        read them); their ONNX, JSON, programs and sources stay for the record. Returns the bytes freed."""
        from ..frontend.carve import CANDIDATES_DIR

        keep = {self.state.best.prepare_dir} if self.state.best else set()
        dirs = set(rnd.prepares.values()) | ({rnd.prepare_dir} if rnd.prepare_dir else set())
        freed = 0
        for rel in sorted(dirs - keep):
            cdir = self.path(rel) / CANDIDATES_DIR
            for f in [*cdir.glob("*.io.npz"), *cdir.glob("*.inputs.pt")]:
                freed += f.stat().st_size
                f.unlink(missing_ok=True)
        return freed

    @property
    def limits(self) -> AutoloopLimits:
        return self.state.limits

    # -- paths ------------------------------------------------------------------------------------
    def rel(self, path: Path) -> str:
        """``path`` as the state records it: relative to the workdir, so the workdir can move."""
        return str(Path(path).resolve().relative_to(self.workdir.resolve()))

    def path(self, rel: str) -> Path:
        return self.workdir / rel

    def round_dir(self, index: int) -> Path:
        return self.workdir / f"round{index}"

    # -- events -----------------------------------------------------------------------------------
    def event(self, msg: str) -> None:
        """A line of the loop's history (kept in the state and the report) and of its log; a figure from a
        simulated engine says so on the line, as everywhere else it is printed."""
        if self.simulated and " ms" in msg:
            msg += " (SIMULATED)"
        self.state.history.append(msg)
        self.log.info(msg, **({"simulated": True} if self.simulated else {}))

    @property
    def simulated(self) -> bool:
        """Whether this loop's engine is a simulator (its latencies are a cost model's, not measurements)."""
        if self._simulated is None:
            from ..runtime import runtime

            engine = self.state.backends.engine
            self._simulated = bool(engine) and runtime().manager.all_simulated([engine])
        return self._simulated

    def debug_traceback(self, what: str, err: BaseException) -> None:
        """An error that became one line of a drop reason or a stop message keeps its traceback here (-v)."""
        self.log.debug(f"{what}: {type(err).__name__}", exc_info=err)

    def stop(self, why: str, kind: StopKind | None = None) -> None:
        """End the loop normally: no further round starts, and a rerun only reports (unless it loosens the
        limit ``kind`` names)."""
        self.state.finished = True
        self.state.stop_reason = why
        self.state.stop_kind = kind
        self.event(f"stopped: {why}")
        self.save()

    # -- candidates -------------------------------------------------------------------------------
    @staticmethod
    def active(rnd: RoundRecord) -> list[PluginRecord]:
        """The round's candidates still in it."""
        return [c for c in rnd.candidates if c.status != "dropped"]

    def drop(self, cand: PluginRecord, stage: DropStage, why: str, then: str = "") -> None:
        """Drop one candidate; the event names its selector, since two rounds' plugins may share a name, and
        ``then`` what may still follow (decide's losers are taken back when the engine without them is slower)."""
        cand.status = "dropped"
        cand.reason = why
        cand.dropped_at = stage
        self.event(f"dropped {cand.name} ({cand.selector}): {why}{f'; {then}' if then else ''}")

    def round_plugins(self, rnd: RoundRecord, only: list[PluginRecord] | None = None) -> list[PluginRecord]:
        """The kept plugins plus this round's (or ``only`` those); a re-optimization stands in for the
        plugin it would replace."""
        new = only if only is not None else self.active(rnd)
        replaced = {c.replaces for c in new if c.replaces}
        best = self.state.best
        kept = [p for p in (best.plugins if best else []) if p.name not in replaced]
        return kept + list(new)
