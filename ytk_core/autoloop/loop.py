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
from typing import Any

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import ArchSpec, CandidatesFile
from ytk_hookspecs.models.base import sha256_file

from ..bundle import EngineBundle
from ..errors import UsageError, YtkError
from ..runtime import runtime
from .control import Clock, checkpoint
from .state import AutoloopState, BestEngine, CompileRecord, PluginRecord, RoundRecord
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
        self.log = self.rt.log.bind(component="autoloop")
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
        prep = self._prepare(d / "prepare", [])
        rec = self._compile(d / "base.tgz", [], round_index=0, prep=prep)
        if not rec.numerics_passed:
            raise YtkError(f"the baseline engine itself fails numerics against torch ({rec.numerics_note}); "
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
        handlers[r.stage](r)
        checkpoint(f"{r.index}:{r.stage}")

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
        report = propose(self.path(best.bundle), prep / "model.onnx", prep / "fx_nodes.json",
                         pj if pj.is_file() else None,
                         ProposeOptions(min_ms=self.limits["min_gain_ms"], precision=self.s.precision))  # type: ignore[arg-type]
        dropped_before = {c.selector for rr in self.s.rounds[:-1] for c in rr.candidates if c.status == "dropped"}
        kept = {p.name for p in best.plugins}
        fresh = [p for p in report.candidates if p.selector and p.name not in kept and p.selector not in dropped_before]
        worth = [p for p in fresh if p.ms >= self.limits["min_gain_ms"]]
        reopt = self._reoptimizable(report.plugged)
        if not worth and not reopt:
            if fresh:
                top = max(p.ms for p in fresh)
                r.note = (f"best remaining candidate is worth {top:.3f} ms, under --min-gain-ms "
                          f"{self.limits['min_gain_ms']}")
            else:
                r.note = "no candidate left to try (every proposal is plugged already or was dropped earlier)"
            r.stage = "done"
            self._stop(r.note)
            return
        r.candidates = [PluginRecord(name=p.name, selector=p.selector, origin_round=r.index, region_ms=p.ms,
                                     sites=len(p.sites)) for p in worth] + reopt
        parts = [f"{p.name} ({p.ms:.2f} ms)" for p in worth]
        parts += [f"re-optimize {c.name} ({c.region_ms:.2f} ms, {c.ms_to_beat:.3f} ms/site to beat)" for c in reopt]
        self.event(f"round {r.index}: proposing {', '.join(parts)}")
        self._advance(r, "prepare")

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

    def _drop(self, c: PluginRecord, why: str) -> None:
        c.status = "dropped"
        c.reason = why
        self.event(f"dropped {c.name}: {why}")

    def _prep_for(self, r: RoundRecord, plugins: list[PluginRecord]) -> Path:
        """A prepare dir carved with exactly ``plugins`` (the ONNX must hold a node for every plugin and no other)."""
        sels = [p.selector for p in plugins]
        key = "\n".join(sorted(sels))
        rel = r.prepares.get(key)
        if rel and (self.path(rel) / "prepare.json").is_file():
            return self.path(rel)
        best = self.s.best
        if best is not None and sorted(p.selector for p in best.plugins) == sorted(sels) and best.plugins:
            return self.path(best.prepare_dir)  # only re-optimizations: the best engine's carve is this carve
        name = "prepare" if not r.prepares else f"prepare-{len(r.prepares)}"
        prep = self._prepare(self.w / f"round{r.index}" / name, sels)
        r.prepares[key] = self.rel(prep)
        self.save()
        return prep

    def _prepare_round(self, r: RoundRecord) -> None:
        while True:
            try:
                prep = self._prep_for(r, self._round_plugins(r))
                break
            except UsageError as e:
                culprit = next((c for c in self._active(r) if c.selector in str(e)), None)
                if culprit is None:
                    raise
                self._drop(culprit, f"carve refused it: {str(e).splitlines()[0]}")
                if not self._active(r):
                    r.note = "every candidate was refused by the carve"
                    self._advance(r, "done")
                    return
        r.prepare_dir = self.rel(prep)
        r.selectors = [p.selector for p in self._round_plugins(r)]
        self._advance(r, "kernelgen")

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
            except StageError as e:
                return c, None, str(e).splitlines()[0]

        with ThreadPoolExecutor(max_workers=self.max_jobs) as pool:
            futures = [pool.submit(job, c) for c in todo]
            self.log.info(f"round {r.index}: kernel generation", jobs_in_flight=min(len(todo), self.max_jobs),
                          jobs=len(todo))
            for fut in as_completed(futures):
                c, out, err = fut.result()
                with self._lock:
                    if err or out is None or out.result.status != "done":
                        self._drop(c, f"kernel generation: {err or (out.result.message if out else 'no result')}")
                    else:
                        src = Path(out.result.source or src_dir / f"{c.name}.module_source.py")
                        c.status = "generated"
                        c.job_id = out.result.job_id
                        c.source, c.source_sha256 = self.rel(src), sha256_file(src)
                        c.report = self.rel(Path(out.result.report)) if out.result.report else None
                        if out.report is not None and out.report.winner:
                            win = next((x for x in out.report.candidates if x.variant == out.report.winner), None)
                            c.kernel_ms_per_site = list(win.time_ms_per_site) if win else []
                self.save()
                checkpoint(f"{r.index}:kernelgen-job")
        if not self._active(r):
            r.note = "no kernel could be generated"
            self._advance(r, "done")
            return
        self._advance(r, "build")

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
            except StageError as e:
                self._drop(c, f"build: {str(e).splitlines()[0]}")
                self.save()
                continue
            c.status, c.so, c.so_sha256 = "built", self.rel(out.so_path), out.sha256
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

    def _compile_round(self, r: RoundRecord) -> None:
        d = self.w / f"round{r.index}"
        try:
            rec = self._compile(d / f"round{r.index}.tgz", self._round_plugins(r), r.index)
        except StageError as e:
            for c in self._active(r):
                self._drop(c, f"engine compile with it failed: {str(e).splitlines()[0]}")
            r.note = "compile failed"
            self._advance(r, "done")
            return
        r.result_bundle, r.result_ms = rec.bundle, rec.p50_ms
        self._advance(r, "verify")

    def _verify_round(self, r: RoundRecord) -> None:
        """Numerics gate: a plugin whose engine fails verify never reaches the final engine."""
        rec = next(c for c in r.compiles if c.bundle == r.result_bundle)
        if not rec.numerics_passed:
            for c in list(self._active(r)):
                one = self._compile(self.w / f"round{r.index}" / f"check-{c.name}.tgz",
                                    self._round_plugins(r, [c]), r.index)
                if not one.numerics_passed:
                    self._drop(c, f"numerics: {one.numerics_note or 'verify failed'}")
                    self.save()
            if not self._active(r):
                r.note = "every new plugin failed numerics"
                self._advance(r, "done")
                return
            rec = self._compile(self.w / f"round{r.index}" / f"round{r.index}-checked.tgz", self._round_plugins(r),
                                r.index)
            if not rec.numerics_passed:
                for c in self._active(r):
                    self._drop(c, "numerics: the plugins pass one at a time but not together")
                r.note = "combined engine failed numerics"
                self._advance(r, "done")
                return
            r.result_bundle, r.result_ms = rec.bundle, rec.p50_ms
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
                self._drop(c, f"re-optimization lost: its layers took {c.plugin_ms:.3f} ms, the plugged kernel's "
                              f"{c.region_ms:.3f} ms (needs {self.limits['min_gain_ms']} ms less)")
            else:
                self._drop(c, f"lost: its layers took {c.plugin_ms:.3f} ms where the region took {c.region_ms:.3f} ms")
        if losers and self._active(r):
            rec = self._compile(self.w / f"round{r.index}" / f"round{r.index}-winners.tgz", self._round_plugins(r), r.index)
            if not rec.numerics_passed:
                for c in self._active(r):
                    self._drop(c, f"numerics after dropping losers: {rec.numerics_note}")
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
                self._drop(c, f"the engine did not get faster ({best.ms:.3f} -> {r.result_ms:.3f} ms)")
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
