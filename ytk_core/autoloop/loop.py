"""The autoloop driver: rounds of propose -> carve -> kernelgen -> build -> compile -> verify -> decide.

Each stage of a round is recorded in the state file before the next starts, and each costly job
as soon as it finishes, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import shutil
import statistics
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, NoReturn

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import ArchSpec, CandidatesFile
from ytk_hookspecs.models.base import sha256_file

from ..bundle import EngineBundle
from ..errors import BackendError, NumericsFailed, RegionRefused, UsageError, YtkError
from ..logs import get_logger
from ..runtime import runtime
from .control import Clock, checkpoint
from .isolate import describe, find_culprits, must_stop, named_selector
from .state import AutoloopState, BestEngine, CarveFailure, CompileRecord, DropStage, PluginRecord, RoundRecord
from .target import gpu_label


#: Re-optimize a kept plugin when its kernel declares less than this fraction of its memory floor.
REOPT_BELOW = 0.5
#: Re-optimizations per plugin over a whole loop (each costs a kernel generation job).
REOPT_ATTEMPTS = 1


class Autoloop:
    def __init__(self, state: AutoloopState, workdir: Path, clock: Clock, max_jobs: int) -> None:
        self.s = state
        self.w = Path(workdir)
        self.clock = clock
        self.max_jobs = max(1, max_jobs)
        self.rt = runtime()
        # bound now, not from the runtime's logger: that one was bound before -v set the level
        self.log = get_logger(component="autoloop")
        self._lock = threading.Lock()

    # -- bookkeeping ----------------------------------------------------------------------------
    def save(self) -> None:
        with self._lock:
            self.s.elapsed_s = self.clock.spent
            self.s.save(self.w)

    def rel(self, p: Path) -> str:
        return str(Path(p).resolve().relative_to(self.w.resolve()))

    def path(self, rel: str) -> Path:
        return self.w / rel

    def event(self, msg: str) -> None:
        self.s.history.append(msg)
        self.log.info(msg)

    @property
    def limits(self) -> dict[str, float]:
        return self.s.limits

    # -- round 0 ----------------------------------------------------------------------------------
    def baseline(self) -> None:
        if self.s.baseline is not None:
            return
        d = self.w / "round0"
        try:
            prep = self._prepare(d / "prepare", [])
        except Exception as e:
            self._stop_on(e, "the baseline cannot be prepared", UsageError)
        try:
            rec = self._compile(d / "base.tgz", [], round_index=0, prep=prep)
        except Exception as e:
            self._stop_on(e, "the baseline engine cannot be compiled", BackendError)
        if not rec.numerics_passed:
            raise NumericsFailed(f"the baseline engine itself fails numerics against torch ({rec.numerics_note}); "
                                 "autoloop has nothing trustworthy to improve on")
        self.s.baseline = BestEngine(round=0, bundle=rec.bundle, ms=rec.p50_ms, prepare_dir=self.rel(prep))
        self.s.best = self.s.baseline.model_copy(deep=True)
        self.event(f"round 0: baseline {rec.p50_ms:.3f} ms ({self.s.backends['engine']} engine)")
        self.save()
        checkpoint("baseline")

    # -- rounds -----------------------------------------------------------------------------------
    def run(self) -> None:
        self.baseline()
        while not self.s.finished:
            cur = self.s.rounds[-1] if self.s.rounds and self.s.rounds[-1].stage != "done" else None
            if cur is None:
                done = len(self.s.rounds)
                if done >= self.limits["max_rounds"]:
                    self._stop(f"reached --max-rounds {int(self.limits['max_rounds'])}")
                    break
                if self.clock.exhausted():
                    self._stop(f"time budget of {self.limits['time_budget_s']:.0f} s spent")
                    break
                cur = RoundRecord(index=done + 1)
                self.s.rounds.append(cur)
                self.save()
            self.step(cur)

    def _stop(self, why: str) -> None:
        self.s.finished = True
        self.s.stop_reason = why
        self.event(f"stopped: {why}")
        self.save()

    def step(self, r: RoundRecord) -> None:
        handlers = {"propose": self._propose, "prepare": self._prepare_round, "kernelgen": self._kernelgen,
                    "build": self._build, "compile": self._compile_round, "verify": self._verify_round,
                    "decide": self._decide}
        self.log.info(f"round {r.index}: {r.stage}", best_ms=round(self.s.best.ms, 3) if self.s.best else None)
        stage = r.stage
        try:
            handlers[stage](r)
        except Exception as e:
            # what one candidate does wrong is dropped inside the stage; what escapes stops every candidate
            self._stop_on(e, f"round {r.index} stopped in its {stage} stage on an internal error", YtkError,
                          exit_code=1, resume=True)
        checkpoint(f"{r.index}:{stage}")

    def _stop_on(self, err: Exception, what: str, kind: type[YtkError], exit_code: int | None = None,
                 resume: bool = False) -> NoReturn:
        """Stop the loop on ``err``, which no candidate can get past: a ytk error (already one clear
        paragraph) and a full disk go up as they are; anything else becomes one line of ``kind``, its
        traceback in the debug log only."""
        if isinstance(err, StageError) or must_stop(err):
            raise err
        self._debug_traceback(what, err)
        again = "; run the same command again to resume" if resume else ""
        raise kind(f"{what}: {describe(err)}{again} (-v logs the traceback)", exit_code=exit_code) from None

    def _debug_traceback(self, what: str, err: BaseException) -> None:
        self.log.debug(f"{what}: {type(err).__name__}", exc_info=err)

    def _advance(self, r: RoundRecord, stage: str) -> None:
        r.stage = stage  # type: ignore[assignment]
        self.save()

    # -- propose ----------------------------------------------------------------------------------
    def _propose(self, r: RoundRecord) -> None:
        from ..propose.api import propose
        from ..propose.models import ProposeOptions

        best = self.s.best
        assert best is not None
        prep = self.path(best.prepare_dir)
        pj = prep / "plugins.json"
        opts: dict[str, Any] = {"min_ms": self.limits["min_gain_ms"], "precision": self.s.precision}
        if "kernelgen" in ProposeOptions.model_fields:  # ask the loop's generator which regions it would take
            opts["kernelgen"] = self.s.backends["kernelgen"]
        report = propose(self.path(best.bundle), prep / "model.onnx", prep / "fx_nodes.json",
                         pj if pj.is_file() else None, ProposeOptions(**opts))
        dropped_before = {c.selector for rr in self.s.rounds[:-1] for c in rr.candidates if c.status == "dropped"}
        kept = {p.name for p in best.plugins}
        fresh = [p for p in report.candidates if p.selector and p.name not in kept and p.selector not in dropped_before]
        worth = [p for p in fresh if p.ms >= self.limits["min_gain_ms"]]
        refused = self._refused_by_propose(r, worth)
        worth = [p for p in worth if p.selector not in {c.selector for c in refused}]
        fresh = [p for p in fresh if p.selector not in {c.selector for c in refused}]
        reopt = self._reoptimizable(report.plugged)
        if not worth and not reopt:
            if fresh:
                top = max(p.ms for p in fresh)
                r.note = (f"best remaining candidate is worth {top:.3f} ms, under --min-gain-ms "
                          f"{self.limits['min_gain_ms']}")
            elif refused:
                r.note = "every candidate worth a job is one the carve or the kernel generators refuse"
            else:
                r.note = "no candidate left to try (every proposal is plugged already or was dropped earlier)"
            r.candidates = refused
            r.stage = "done"
            self._stop(r.note)
            return
        r.candidates = refused + [PluginRecord(name=p.name, selector=p.selector, origin_round=r.index, region_ms=p.ms,
                                               sites=len(p.sites)) for p in worth] + reopt
        parts = [f"{p.name} ({p.ms:.2f} ms)" for p in worth]
        parts += [f"re-optimize {c.name} ({c.region_ms:.2f} ms, {c.ms_to_beat:.3f} ms/site to beat)" for c in reopt]
        self.event(f"round {r.index}: proposing {', '.join(parts)}")
        self._advance(r, "prepare")

    def _refused_by_propose(self, r: RoundRecord, proposals: list[Any]) -> list[PluginRecord]:
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
            c = PluginRecord(name=p.name, selector=p.selector, origin_round=r.index, region_ms=p.ms, sites=len(p.sites))
            self._drop(c, "propose", f"propose: {' '.join(why.split())}")
            out.append(c)
        return out

    def _reoptimizable(self, proposals: list[Any]) -> list[PluginRecord]:
        """Plugged regions whose "ms/site to beat" leaves headroom: the kept kernel declares it reaches
        under REOPT_BELOW of its memory floor and closing that gap would be worth --min-gain-ms.
        Each plugin gets at most REOPT_ATTEMPTS re-optimizations (they cost real jobs)."""
        from ytk_hookspecs.kernel_source import KernelSource

        best = self.s.best
        assert best is not None
        kept = {p.name: p for p in best.plugins}
        tried = Counter(c.replaces for rr in self.s.rounds for c in rr.candidates if c.replaces)
        out = []
        for p in proposals:
            k = kept.get(p.name)
            if not p.already_plugged or k is None or tried[p.name] >= REOPT_ATTEMPTS or not k.source:
                continue
            try:
                perf = KernelSource.read(self.path(k.source)).meta.perf
            except Exception:  # a kept source that no longer reads is not worth a job
                continue
            frac = perf.achieved_bandwidth_fraction if perf else None
            if frac is None or frac >= REOPT_BELOW or p.ms * (1.0 - frac) < self.limits["min_gain_ms"]:
                continue
            out.append(PluginRecord(name=p.name, selector=k.selector, origin_round=len(self.s.rounds), region_ms=p.ms,
                                    sites=len(p.sites), replaces=p.name, ms_to_beat=p.ms_to_beat))
        return out

    # -- prepare ----------------------------------------------------------------------------------
    def _prepare(self, d: Path, selectors: list[str]) -> Path:
        from ..stages.prepare import do_prepare

        d.mkdir(parents=True, exist_ok=True)
        do_prepare(Path(self.s.model), d / "model.onnx", d / "model.npz", d / "model.reference.npz", selectors)
        return d

    def _active(self, r: RoundRecord) -> list[PluginRecord]:
        return [c for c in r.candidates if c.status != "dropped"]

    def _drop(self, c: PluginRecord, stage: DropStage, why: str) -> None:
        """Drop one candidate; the event names its selector, since two rounds' plugins may share a name."""
        c.status = "dropped"
        c.reason = why
        c.dropped_at = stage
        self.event(f"dropped {c.name} ({c.selector}): {why}")

    def _carve(self, r: RoundRecord, plugins: list[PluginRecord], probe: bool = False) -> Path | CarveFailure:
        """A prepare dir carved with exactly ``plugins`` (the ONNX holds a node for every plugin and no other),
        or why carving them fails. Both are recorded in the state, so a resumed run carves nothing twice.
        ``probe`` carves the best engine's own plugins afresh instead of reusing its prepare dir."""
        sels = [p.selector for p in plugins]
        key = "\n".join(sorted(sels))
        rel = r.prepares.get(key)
        if rel and (self.path(rel) / "prepare.json").is_file():
            return self.path(rel)
        if key in r.carve_failures:
            return r.carve_failures[key]
        best = self.s.best
        if not probe and best is not None and best.plugins and sorted(p.selector for p in best.plugins) == sorted(sels):
            return self.path(best.prepare_dir)  # only re-optimizations: the best engine's carve is this carve
        d = self._fresh_prepare_dir(r)
        try:
            prep = self._prepare(d, sels)
        except Exception as e:
            if must_stop(e):
                raise
            self._debug_traceback(f"round {r.index}: carving {len(sels)} selector(s) failed", e)
            shutil.rmtree(d, ignore_errors=True)  # a real model's export is large, and this one is of no use
            failure = CarveFailure(message=describe(e), selector=named_selector(e, sels))
            r.carve_failures[key] = failure
            self.save()
            checkpoint(f"{r.index}:carve")
            return failure
        r.prepares[key] = self.rel(prep)
        self.save()
        checkpoint(f"{r.index}:carve")
        return prep

    def _fresh_prepare_dir(self, r: RoundRecord) -> Path:
        taken = set(r.prepares.values())
        n = len(r.prepares) + len(r.carve_failures)
        while True:
            d = self.w / f"round{r.index}" / ("prepare" if n == 0 else f"prepare-{n}")
            if self.rel(d) not in taken:
                return d
            n += 1

    def _prep_for(self, r: RoundRecord, plugins: list[PluginRecord]) -> Path:
        """``_carve`` for callers that need the dir: a failure is raised."""
        out = self._carve(r, plugins)
        if isinstance(out, CarveFailure):
            if out.selector:
                raise RegionRefused(out.selector, "carve", out.message)
            raise UsageError(out.message)
        return out

    def _prepare_round(self, r: RoundRecord) -> None:
        """Carve the round's candidates (with the kept plugins). A failure naming a candidate drops it; one
        naming none is pinned on a candidate by carving parts of the round (``_isolate_carve``)."""
        stalled = False
        while self._active(r):
            plugins = self._round_plugins(r)
            out = self._carve(r, plugins)
            if not isinstance(out, CarveFailure):
                r.prepare_dir = self.rel(out)
                r.selectors = [p.selector for p in plugins]
                self._advance(r, "kernelgen")
                return
            named = next((c for c in self._active(r) if out.selector and c.selector == out.selector), None)
            if named is not None:
                self._drop(named, "carve", f"carve refused it: {out.message}")
                self.save()
            elif not self._isolate_carve(r, out):
                # every part carves and so did the whole, once: a carve that fails only sometimes
                if stalled:
                    for c in self._active(r):
                        self._drop(c, "carve", f"carve refused it: {out.message} (the candidates fail together, "
                                               "and no part of them fails alone)")
                    self.save()
                    break
                stalled = True
                r.carve_failures.pop("\n".join(sorted(p.selector for p in plugins)), None)
        r.note = "every candidate was refused by the carve"
        self._advance(r, "done")

    def _isolate_carve(self, r: RoundRecord, failure: CarveFailure) -> bool:
        """The round's carve failed naming no candidate: carve parts of the round until the failure is
        pinned on candidates, and drop those. Returns whether any was dropped."""
        cands = self._active(r)
        self._check_carve_works(r)
        self.event(f"round {r.index}: the carve of {len(cands)} candidate(s) failed naming none of them "
                   f"({failure.message}); carving them apart to find which")

        def carve(group: list[PluginRecord]) -> CarveFailure | None:
            out = self._carve(r, self._round_plugins(r, group))
            return out if isinstance(out, CarveFailure) else None

        culprits = find_culprits(cands, failure, carve, lambda c: c.selector)
        for cul in culprits:
            alongside = f" together with {', '.join(c.name for c in cul.alongside)}" if cul.alongside else ""
            self._drop(cul.candidate, "carve", f"carve refused it{alongside}: {cul.failure.message}")
        self.save()
        return bool(culprits)

    def _check_carve_works(self, r: RoundRecord) -> None:
        """Before blaming a candidate, carve the best engine's own plugins (none: a plain export): when that
        fails too no candidate can be carved, and the loop stops rather than drop them all."""
        kept = list(self.s.best.plugins) if self.s.best else []
        out = self._carve(r, kept, probe=True)
        if isinstance(out, CarveFailure):
            r.carve_failures.clear()  # carved while the carve itself is broken: none of them convicts a candidate
            self.save()
            raise UsageError(f"round {r.index}: the carve fails even with no new candidate (the best engine's "
                             f"{len(kept)} plugin(s) only): {out.message}. No candidate can be tried; fix that and "
                             "run the same command again to resume")

    # -- kernel generation (concurrent) -------------------------------------------------------------
    def _kernelgen(self, r: RoundRecord) -> None:
        from ..stages.kernelgen import run_kernelgen_compile

        prep = self.path(r.prepare_dir or "")
        cands = {c.name: c for c in CandidatesFile.read(prep / "candidates.json").candidates}
        todo = [c for c in self._active(r) if not (c.status in ("generated", "built") and
                                                    self._source_ok(c))]
        gpu = gpu_label(self.s.arch, self.s.backends["kernelgen"])
        src_dir = self.w / f"round{r.index}" / "sources"

        def job(c: PluginRecord) -> tuple[PluginRecord, Any, str | None]:
            cand = cands.get(c.name)
            if cand is None or not cand.files.pt2:
                return c, None, "the carve produced no kernel-generation input for it"
            try:
                refusal = None if c.replaces else self._generator_refuses(cand, prep)
                if refusal:
                    return c, None, refusal
                config = {"deployment_target": "tensorrt"}
                if c.replaces:  # a generator may search harder, and should fail when it cannot beat this
                    config.update(reoptimize="1", ms_to_beat=f"{c.ms_to_beat:.6f}")
                    old = next((p for p in (self.s.best.plugins if self.s.best else []) if p.name == c.replaces), None)
                    if old is not None and old.kernel_ms_per_site:
                        # the kept kernel's own measured time per site (the engine's layer time includes more)
                        config["kernel_ms_to_beat"] = f"{statistics.fmean(old.kernel_ms_per_site):.6f}"
                out = run_kernelgen_compile(prep / cand.files.pt2, gpu, src_dir / f"{c.name}.module_source.py",
                                            config, kernelgen=self.s.backends["kernelgen"],
                                            arch=self.s.arch, precision=self.s.precision,
                                            candidates=prep / "candidates.json")
                return c, out, None
            except Exception as e:
                if must_stop(e):
                    raise
                self._debug_traceback(f"kernel generation of {c.name} failed", e)
                return c, None, describe(e)

        with ThreadPoolExecutor(max_workers=self.max_jobs) as pool:
            futures = [pool.submit(job, c) for c in todo]
            self.log.info(f"round {r.index}: kernel generation", jobs_in_flight=min(len(todo), self.max_jobs),
                          jobs=len(todo))
            for fut in as_completed(futures):
                c, out, err = fut.result()
                with self._lock:
                    if err or out is None or out.result.status != "done":
                        self._drop(c, "kernelgen",
                                   f"kernel generation: {err or (out.result.message if out else 'no result')}")
                    else:
                        try:
                            self._record_kernel(c, out, src_dir)
                        except Exception as e:  # a result that does not hold together is that job's failure
                            if must_stop(e):
                                raise
                            self._debug_traceback(f"recording the kernel of {c.name} failed", e)
                            self._drop(c, "kernelgen", f"kernel generation: {describe(e)}")
                self.save()
                checkpoint(f"{r.index}:kernelgen-job")
        if not self._active(r):
            r.note = "no kernel could be generated"
            self._advance(r, "done")
            return
        self._advance(r, "build")

    def _generator_refuses(self, cand: Any, prep: Path) -> str | None:
        """Ask the generator about the carved region before paying for its job: a certain "no" is the drop
        reason (an answer that is not certain, or none, leaves it to the job)."""
        from ..stages.supports import check_support

        gen = self.s.backends["kernelgen"]
        ans = check_support(cand, prep, gen, ArchSpec.parse(self.s.arch), self.s.precision)  # type: ignore[arg-type]
        if ans.supported or not ans.certain:
            return None
        return f"{ans.backend or gen} refuses the carved region (no job was run): {' '.join(ans.why.split())}"

    def _record_kernel(self, c: PluginRecord, out: Any, src_dir: Path) -> None:
        src = Path(out.result.source or src_dir / f"{c.name}.module_source.py")
        source, source_sha256 = self.rel(src), sha256_file(src)
        kernel_ms: list[float] = []
        if out.report is not None and out.report.winner:
            win = next((x for x in out.report.candidates if x.variant == out.report.winner), None)
            kernel_ms = list(win.time_ms_per_site) if win else []
        c.status, c.job_id = "generated", out.result.job_id
        c.source, c.source_sha256 = source, source_sha256
        c.report = self.rel(Path(out.result.report)) if out.result.report else None
        c.kernel_ms_per_site = kernel_ms

    def _source_ok(self, c: PluginRecord) -> bool:
        from .state import file_ok

        return file_ok(self.w, c.source, c.source_sha256)

    # -- builds -----------------------------------------------------------------------------------
    def _build(self, r: RoundRecord) -> None:
        from ..stages.build_plugin import run_build_plugin
        from .state import file_ok

        prep = self.path(r.prepare_dir or "")
        for c in self._active(r):
            if c.status == "built" and file_ok(self.w, c.so, c.so_sha256):
                continue
            so = self.w / f"round{r.index}" / "plugins" / f"{c.name}.so"
            try:
                out = run_build_plugin(self.s.arch, c.name, self.path(c.source or ""), so,
                                       builder=self.s.backends["builder"], candidates=prep / "candidates.json",
                                       precision=self.s.precision)
                so_rel = self.rel(out.so_path)
            except Exception as e:
                if must_stop(e):
                    raise
                self._debug_traceback(f"building {c.name} failed", e)
                self._drop(c, "build", f"build: {describe(e)}")
                self.save()
                continue
            c.status, c.so, c.so_sha256 = "built", so_rel, out.sha256
            self.save()
            checkpoint(f"{r.index}:build-job")
        if not self._active(r):
            r.note = "no plugin could be built"
            self._advance(r, "done")
            return
        self._advance(r, "compile")

    # -- compile + verify ---------------------------------------------------------------------------
    def _compiles(self, round_index: int) -> list[CompileRecord]:
        return self.s.round0_compiles if round_index == 0 else self.s.rounds[round_index - 1].compiles

    def _compile(self, out: Path, plugins: list[PluginRecord], round_index: int,
                 prep: Path | None = None) -> CompileRecord:
        """Compile (or reuse a recorded compile of exactly these plugins) and score numerics."""
        from ..stages.compile import run_compile
        from ..stages.verify import run_verify

        if prep is None:
            prep = self._prep_for(self.s.rounds[round_index - 1], plugins)
        names = sorted(p.name for p in plugins)
        records = self._compiles(round_index)
        rec = next((old for old in records if old.plugins == names and self.path(old.bundle).is_file()
                    and sha256_file(self.path(old.bundle)) == old.sha256), None)
        if rec is None:
            res = run_compile(self.s.arch, self.s.precision, prep / "model.onnx", prep / "model.npz", out,
                              [self.path(p.so or "") for p in plugins], engine=self.s.backends["engine"])
            rec = CompileRecord(bundle=self.rel(out), prepare_dir=self.rel(prep), sha256=sha256_file(out), plugins=names,
                                p50_ms=statistics.median(res.benchmark.iterations_ms))
            records.append(rec)
            self.save()
            checkpoint(f"{round_index}:compile-job")
        if rec.numerics_passed is None:
            ver = run_verify(self.path(rec.prepare_dir) / "model.reference.npz", [self.path(rec.bundle)], no_host=True)
            rec.numerics_passed = ver.passed
            rec.numerics_note = "; ".join(f"{n.output}: {n.detail or 'out of tolerance'}" for n in ver.failures())[:500]
            self.save()
        return rec

    def _round_plugins(self, r: RoundRecord, only: list[PluginRecord] | None = None) -> list[PluginRecord]:
        """The kept plugins plus this round's (or ``only`` those); a re-optimization stands in for the
        plugin it would replace."""
        new = only if only is not None else self._active(r)
        replaced = {c.replaces for c in new if c.replaces}
        kept = [p for p in (self.s.best.plugins if self.s.best else []) if p.name not in replaced]
        return kept + list(new)

    def _try_compile(self, r: RoundRecord, name: str, plugins: list[PluginRecord]) -> CompileRecord | str:
        """``_compile`` into round ``r``'s dir; a failure (a ytk error, or a bug anywhere below) comes back as
        one line, its traceback in the debug log."""
        try:
            return self._compile(self.w / f"round{r.index}" / name, plugins, r.index)
        except Exception as e:
            if must_stop(e):
                raise
            self._debug_traceback(f"round {r.index}: compiling {name} failed", e)
            return describe(e)

    def _compile_round(self, r: RoundRecord) -> None:
        rec = self._try_compile(r, f"round{r.index}.tgz", self._round_plugins(r))
        if isinstance(rec, str):
            rec = self._isolate_compile(r, rec)
            if rec is None:
                r.note = "no new plugin compiled into the engine"
                self._advance(r, "done")
                return
        r.result_bundle, r.result_ms = rec.bundle, rec.p50_ms
        self._advance(r, "verify")

    def _isolate_compile(self, r: RoundRecord, why: str) -> CompileRecord | None:
        """The engine compile with every new plugin failed: compile each alone (on top of the kept plugins),
        drop those that fail, and compile the rest together. None when no plugin is left."""
        self._check_best_compiles(r)
        if len(self._active(r)) == 1:  # that compile was this plugin alone
            self._drop(self._active(r)[0], "compile", f"engine compile: {why}")
            self.save()
            return None
        self.event(f"round {r.index}: the engine compile with every new plugin failed ({why}); compiling them one "
                   "at a time")
        for c in list(self._active(r)):
            one = self._try_compile(r, f"check-{c.name}.tgz", self._round_plugins(r, [c]))
            if isinstance(one, str):
                self._drop(c, "compile", f"engine compile: {one}")
                self.save()
        if not self._active(r):
            return None
        rec = self._try_compile(r, f"round{r.index}-compiled.tgz", self._round_plugins(r))
        if isinstance(rec, str):
            for c in self._active(r):
                self._drop(c, "compile", f"engine compile: the plugins compile one at a time but not together: {rec}")
            self.save()
            return None
        return rec

    def _check_best_compiles(self, r: RoundRecord) -> None:
        """Before blaming a plugin, compile the best engine so far again (the baseline and the kept plugins):
        when that fails too, no candidate can be tried and the loop stops, its round left to resume."""
        from ..stages.compile import run_compile

        best = self.s.best
        assert best is not None
        prep = self.path(best.prepare_dir)
        out = self.w / f"round{r.index}" / "best-again.tgz"
        try:
            run_compile(self.s.arch, self.s.precision, prep / "model.onnx", prep / "model.npz", out,
                        [self.path(p.so or "") for p in best.plugins], engine=self.s.backends["engine"])
        except Exception as e:
            if must_stop(e):
                raise
            self._debug_traceback(f"round {r.index}: compiling the best engine again failed", e)
            raise BackendError(f"round {r.index}: the engine cannot compile even the best engine so far (the baseline "
                               f"and {len(best.plugins)} kept plugin(s)): {describe(e)}. No candidate can be tried; "
                               "run the same command again once the engine works") from None
        finally:
            out.unlink(missing_ok=True)

    def _verify_round(self, r: RoundRecord) -> None:
        """Numerics gate: a plugin whose engine fails verify never reaches the final engine."""
        rec = next(c for c in r.compiles if c.bundle == r.result_bundle)
        if not rec.numerics_passed:
            for c in list(self._active(r)):
                one = self._try_compile(r, f"check-{c.name}.tgz", self._round_plugins(r, [c]))
                if isinstance(one, str):
                    self._drop(c, "compile", f"engine compile: {one}")
                elif not one.numerics_passed:
                    self._drop(c, "numerics", f"numerics: {one.numerics_note or 'verify failed'}")
                self.save()
            if not self._active(r):
                r.note = "every new plugin failed numerics"
                self._advance(r, "done")
                return
            checked = self._try_compile(r, f"round{r.index}-checked.tgz", self._round_plugins(r))
            if isinstance(checked, str) or not checked.numerics_passed:
                why = (f"engine compile: the plugins compile one at a time but not together: {checked}"
                       if isinstance(checked, str) else "numerics: the plugins pass one at a time but not together")
                for c in self._active(r):
                    self._drop(c, "compile" if isinstance(checked, str) else "numerics", why)
                r.note = "combined engine failed numerics"
                self._advance(r, "done")
                return
            r.result_bundle, r.result_ms = checked.bundle, checked.p50_ms
        self._advance(r, "decide")

    # -- decide -------------------------------------------------------------------------------------
    def _decide(self, r: RoundRecord) -> None:
        from .gains import plugin_layer_ms

        best = self.s.best
        assert best is not None and r.result_bundle is not None
        result = next(c for c in r.compiles if c.bundle == r.result_bundle)
        bundle = EngineBundle.open(self.path(r.result_bundle))
        per = plugin_layer_ms(bundle, self.path(result.prepare_dir) / "candidates.json")
        losers = []
        for c in self._active(r):
            c.plugin_ms = per.get(c.name)
            # a re-optimization must beat the plugged kernel by --min-gain-ms to be worth swapping in
            bar = c.region_ms - (self.limits["min_gain_ms"] if c.replaces else 0.0)
            if c.plugin_ms is not None and c.plugin_ms >= bar:
                losers.append(c)
        for c in losers:
            if c.replaces:
                self._drop(c, "decide", f"re-optimization lost: its layers took {c.plugin_ms:.3f} ms, the plugged "
                                        f"kernel's {c.region_ms:.3f} ms (needs {self.limits['min_gain_ms']} ms less)")
            else:
                self._drop(c, "decide",
                           f"lost: its layers took {c.plugin_ms:.3f} ms where the region took {c.region_ms:.3f} ms")
        if losers and self._active(r):
            rec = self._try_compile(r, f"round{r.index}-winners.tgz", self._round_plugins(r))
            if isinstance(rec, str):
                for c in self._active(r):
                    self._drop(c, "compile", f"engine compile after dropping the losers: {rec}")
            elif not rec.numerics_passed:
                for c in self._active(r):
                    self._drop(c, "numerics", f"numerics after dropping losers: {rec.numerics_note}")
            else:
                r.result_bundle, r.result_ms = rec.bundle, rec.p50_ms
        winners = self._active(r)
        gain = best.ms - (r.result_ms or best.ms) if winners else 0.0
        r.gain_ms = gain
        if winners and gain > 0:
            for c in winners:
                c.status = "kept"
            final = next(c for c in r.compiles if c.bundle == r.result_bundle)
            before = {p.name: p for p in best.plugins}
            for c in winners:
                if c.replaces and c.replaces in before:
                    # the report's "region ms before" stays the region's cost before any plugin
                    c.reason = (f"re-optimized: its layers took {c.plugin_ms or 0:.3f} ms where the plugged kernel "
                                f"took {c.region_ms:.3f} ms")
                    c.region_ms = before[c.replaces].region_ms
            replaced = {c.replaces for c in winners if c.replaces}
            self.s.best = BestEngine(round=r.index, bundle=r.result_bundle, ms=r.result_ms or best.ms,
                                     prepare_dir=final.prepare_dir,
                                     plugins=[p for p in best.plugins if p.name not in replaced] + winners)
            self.event(f"round {r.index}: {best.ms:.3f} -> {self.s.best.ms:.3f} ms (-{gain:.3f} ms) with "
                       f"{', '.join(c.name for c in winners)}")
        else:
            for c in winners:
                self._drop(c, "decide", f"the engine did not get faster ({best.ms:.3f} -> {r.result_ms:.3f} ms)")
            self.event(f"round {r.index}: no gain; best stays {best.ms:.3f} ms")
        r.stage = "done"
        self.save()
        if gain < self.limits["min_gain_ms"]:
            self._stop(f"round {r.index} gained {max(gain, 0.0):.3f} ms, under --min-gain-ms "
                       f"{self.limits['min_gain_ms']}")


def resolve_backends(arch: str, flags: dict[str, str | None]) -> dict[str, str]:
    rt = runtime()
    spec = ArchSpec.parse(arch)
    out = {}
    for role in ("engine", "kernelgen", "builder"):
        sel = rt.select(role, flags.get(role), spec)
        out[role] = sel.name
        rt.log.info(f"autoloop {role}: {sel.name}", why=sel.reason)
    return out


def clean_stale(workdir: Path) -> None:
    """Remove temp files a killed run left behind (atomic writes never leave a half file in place)."""
    for p in Path(workdir).rglob(".*.tmp*"):
        if p.is_file():
            p.unlink(missing_ok=True)
    for p in Path(workdir).rglob(".*.build-*"):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
