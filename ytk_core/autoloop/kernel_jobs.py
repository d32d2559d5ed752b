"""A round's costly jobs: one kernel generation job per candidate (several in flight at once), then a
plugin build for each kernel.

Each job is recorded in the state as soon as it finishes, with the hash of what it produced, and a
resumed run trusts a record only while that file is intact. A job that fails, or a generator that
says for certain it would refuse the carved region, drops that candidate alone.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ytk_hookspecs.models import ArchSpec, CandidatesFile, Reoptimization
from ytk_hookspecs.models.base import sha256_file

from ..errors import KernelJobFailed
from ..stages.admission import AdmissionRefused, gate_session
from .control import checkpoint
from .isolate import describe, must_stop, one_line
from .state import PluginRecord, RoundRecord, file_ok
from ..target import gpu_label
from .workspace import Workspace


@dataclass(frozen=True)
class RoundJobs:
    """What every kernel generation job of one round shares."""

    prep: Path  # the round's prepare dir (its candidates.json and plugin_candidates/*.pt2)
    src_dir: Path  # where the generated sources go
    gpu: str  # ``kernelgen compile -g``


def job_failure(err: BaseException) -> str:
    """Why a kernel generation job failed, in one line. A failed job reads ``job ID (backend B) failed:
    ...``: the drop reason already starts with "kernel generation:", so the stage's own "kernel
    generation failed" is not said twice."""
    if isinstance(err, KernelJobFailed):
        return one_line(f"job {err.job_id} (backend {err.backend}) failed: {err.detail}")
    return describe(err)


class KernelJobs:
    def __init__(self, ws: Workspace, max_jobs: int) -> None:
        self.ws = ws
        self.max_jobs = max(1, max_jobs)

    # -- kernel generation (concurrent) -------------------------------------------------------------
    def generate_round(self, rnd: RoundRecord) -> None:
        ws = self.ws
        prep = ws.path(rnd.prepare_dir or "")
        regions = {c.name: c for c in CandidatesFile.read(prep / "candidates.json").candidates}
        todo = [c for c in ws.active(rnd) if not (c.status in ("generated", "built") and self._source_ok(c))]
        jobs = RoundJobs(prep=prep, src_dir=ws.round_dir(rnd.index) / "sources",
                         gpu=gpu_label(ws.state.arch, ws.state.backends.kernelgen))
        self._real_support_after_carve(rnd, [regions[c.name] for c in todo if c.name in regions], prep)
        with ThreadPoolExecutor(max_workers=self.max_jobs) as pool:
            futures = [pool.submit(self._generate, c, regions.get(c.name), jobs) for c in todo]
            ws.log.info(f"round {rnd.index}: kernel generation", jobs_in_flight=min(len(todo), self.max_jobs),
                        jobs=len(todo))
            for fut in as_completed(futures):
                cand, out, err = fut.result()
                with ws.lock:
                    self._record_outcome(cand, out, err, jobs.src_dir)
                ws.save()
                checkpoint(f"{rnd.index}:kernelgen-job")
        if not ws.active(rnd):
            rnd.note = "no kernel could be generated"
            ws.advance(rnd, "done")
            return
        ws.advance(rnd, "build")

    def _generate(self, cand: PluginRecord, region: Any, jobs: RoundJobs) -> tuple[PluginRecord, Any, str | None]:
        """One candidate's kernel generation job, on a worker thread: its outcome, or why it has none."""
        from ..stages.kernelgen import run_kernelgen_compile

        ws = self.ws
        if region is None or not region.files.pt2:
            return cand, None, "the carve produced no kernel-generation input for it"
        try:
            refusal = None if cand.replaces else self._generator_refuses(region, jobs.prep)
            if refusal:
                return cand, None, refusal
            out = run_kernelgen_compile(jobs.prep / region.files.pt2, jobs.gpu,
                                        jobs.src_dir / f"{cand.name}.module_source.py",
                                        {"deployment_target": "tensorrt"},
                                        kernelgen=ws.state.backends.kernelgen, arch=ws.state.arch,
                                        precision=ws.state.precision, candidates=jobs.prep / "candidates.json",
                                        reoptimize=self._reoptimization(cand))
            return cand, out, None
        except Exception as e:
            if must_stop(e):
                raise
            ws.debug_traceback(f"kernel generation of {cand.name} failed", e)
            return cand, None, job_failure(e)

    def _reoptimization(self, cand: PluginRecord) -> Reoptimization | None:
        """What a re-optimisation job must beat (a generator may search harder, and should fail when it
        cannot); None for a region that is not plugged yet."""
        if not cand.replaces or not cand.ms_to_beat:
            return None
        best = self.ws.state.best
        old = next((p for p in (best.plugins if best else []) if p.name == cand.replaces), None)
        # the kept kernel's own measured time per site (the engine's layer time includes more)
        kernel = statistics.fmean(old.kernel_ms_per_site) if old is not None and old.kernel_ms_per_site else None
        return Reoptimization(ms_to_beat=cand.ms_to_beat, kernel_ms_to_beat=kernel or None)

    def _generator_refuses(self, region: Any, prep: Path) -> str | None:
        """Ask the generator about the carved region before paying for its job: a certain "no" is the drop
        reason (an answer that is not certain, or none, leaves it to the job)."""
        from ..stages.supports import check_support

        state = self.ws.state
        gen = state.backends.kernelgen
        ans = check_support(region, prep, gen, ArchSpec.parse(state.arch), state.precision)  # type: ignore[arg-type]
        if ans.supported or not ans.certain:
            return None
        return f"{ans.backend or gen} refuses the carved region (no job was run): {' '.join(ans.why.split())}"

    def _real_support_after_carve(self, rnd: RoundRecord, regions: list[Any], prep: Path) -> None:
        """With a simulated generator, what the real ones would take was asked of propose's sketches; the
        carved programs now answer it for certain (a region propose called likely may be refused)."""
        from ..plugins.selection import real_auto_chain
        from ..runtime import runtime
        from ..stages.supports import check_support

        real = rnd.real_support
        chain = real_auto_chain(runtime().manager, "kernelgen") if real is not None and real.chain else []
        if real is None or not chain:
            return
        state = self.ws.state
        for region in regions:
            try:
                ans = check_support(region, prep, None, ArchSpec.parse(state.arch), state.precision, selection=chain)
            except Exception as e:  # an answer that cannot be had leaves propose's
                if must_stop(e):
                    raise
                continue
            if ans.supported:
                real.refuses.pop(region.name, None)
                if region.name not in real.takes:
                    real.takes.append(region.name)
            else:
                real.takes = [n for n in real.takes if n != region.name]
                real.refuses[region.name] = " ".join(ans.why.split())

    def _record_outcome(self, cand: PluginRecord, out: Any, err: str | None, src_dir: Path) -> None:
        """Keep a finished job's kernel in the candidate's record, or drop the candidate with why it has none."""
        if err or out is None or out.result.status != "done":
            self.ws.drop(cand, "kernelgen",
                         f"kernel generation: {err or (out.result.message if out else 'no result')}")
            return
        try:
            self._record_kernel(cand, out, src_dir)
        except Exception as e:  # a result that does not hold together is that job's failure
            if must_stop(e):
                raise
            self.ws.debug_traceback(f"recording the kernel of {cand.name} failed", e)
            self.ws.drop(cand, "kernelgen", f"kernel generation: {describe(e)}")

    def _record_kernel(self, cand: PluginRecord, out: Any, src_dir: Path) -> None:
        ws = self.ws
        src = Path(out.result.source or src_dir / f"{cand.name}.module_source.py")
        source, source_sha256 = ws.rel(src), sha256_file(src)
        kernel_ms: list[float] = []
        if out.report is not None and out.report.winner:
            win = next((x for x in out.report.candidates if x.variant == out.report.winner), None)
            kernel_ms = list(win.time_ms_per_site) if win else []
        cand.status, cand.job_id = "generated", out.result.job_id
        cand.generator, cand.generator_notes = out.generator or None, list(out.tried)
        cand.source, cand.source_sha256 = source, source_sha256
        cand.report = ws.rel(Path(out.result.report)) if out.result.report else None
        cand.kernel_ms_per_site = kernel_ms

    def _source_ok(self, cand: PluginRecord) -> bool:
        return file_ok(self.ws.workdir, cand.source, cand.source_sha256)

    # -- builds -------------------------------------------------------------------------------------
    def _not_admitted(self, rec: Any) -> str | None:
        """Why a built plugin may not go on to a real engine (it was not admitted), or None."""
        if self.ws.state.backends.engine == "mock" or (rec is not None and rec.status == "admitted"):
            return None
        return (f"admission: unverified ({rec.reason if rec else 'no verdict'}); "
                "a real engine loads only admitted plugins")

    def build_round(self, rnd: RoundRecord) -> None:
        ws = self.ws
        prep = ws.path(rnd.prepare_dir or "")
        with gate_session() as gate:  # one gate process for the round's plugins, not one per plugin
            try:
                self._build_each(rnd, prep)
            finally:
                rnd.admission_s = round(rnd.admission_s + gate.seconds, 2)
        if not ws.active(rnd):
            rnd.note = "no plugin could be built"
            ws.advance(rnd, "done")
            return
        ws.advance(rnd, "compile")

    def _build_each(self, rnd: RoundRecord, prep: Path) -> None:
        from ..stages.build_plugin import run_build_plugin

        ws, state = self.ws, self.ws.state
        for c in ws.active(rnd):
            if c.status == "built" and file_ok(ws.workdir, c.so, c.so_sha256):
                continue
            so = ws.round_dir(rnd.index) / "plugins" / f"{c.name}.so"
            try:
                out = run_build_plugin(state.arch, c.name, ws.path(c.source or ""), so,
                                       builder=state.backends.builder, candidates=prep / "candidates.json",
                                       precision=state.precision, engine=state.backends.engine)
                so_rel = ws.rel(out.so_path)
                refused = self._not_admitted(out.admission)
            except AdmissionRefused as e:
                ws.drop(c, "build", f"admission: {describe(e)}")
                ws.save()
                continue
            except Exception as e:
                if must_stop(e):
                    raise
                ws.debug_traceback(f"building {c.name} failed", e)
                ws.drop(c, "build", f"build: {describe(e)}")
                ws.save()
                continue
            if refused:
                ws.drop(c, "build", refused)
                ws.save()
                continue
            c.status, c.so, c.so_sha256 = "built", so_rel, out.sha256
            ws.save()
            checkpoint(f"{rnd.index}:build-job")
