"""The model zoo table: the early flow on every corpus model (contrib/zoo), one row each, one table.

    .venv/bin/pip install -r requirements/zoo.txt          # once: timm and torchvision
    .venv/bin/python benchmarks/zoo.py --jobs 2            # every model at its small size
    .venv/bin/python benchmarks/zoo.py --subset ci --json  # what CI runs
    .venv/bin/python benchmarks/zoo.py --models convnext_atto,deit_tiny_sdpa --workdir runs/zoo

Per model, in a subprocess of its own (``zoo_flow.py``) with a timeout, on the mock backends (a
simulated DRIVE AGX Orin; ``--arch``): prepare (trace + export) -> compile the baseline -> propose
(``--min-ms 0 --launch-ms 0``) -> carve each proposal on its own, then all accepted ones together -> the selected kernel
generator's support answer and the templates recogniser for each carved region. A model that crashes
or hangs costs its own row only. Results go to stdout, progress to stderr; the exit status is 0 whenever
the table was produced (failing models are the table's data) and 2 for bad usage. Each model's
directory (artifacts, ``result.json``, ``log.txt``) is kept under ``--workdir``, and the whole result
under ``--workdir``/zoo_report.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "contrib" / "zoo")]

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from ytk_hookspecs.models.base import ArtifactError  # noqa: E402
from zoo_registry import SUBSETS, ZOO, ZooEntry  # noqa: E402
from zoo_results import NO_SUPPORTS_HOOK, Miss, ModelRun, ZooReport, one_line, reason_pattern  # noqa: E402

ARCH = "arm64-sm87-dos6010-cu114-trt86"
BACKENDS = {"engine": "mock", "kernelgen": "mock", "builder": "mock"}
FLOW = REPO / "benchmarks" / "zoo_flow.py"
EXTRA_HINT = "the zoo needs timm and torchvision: .venv/bin/pip install -r requirements/zoo.txt"


class Usage(Exception):
    """Bad usage: one line to stderr, exit status 2."""


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    pick = ap.add_mutually_exclusive_group()
    pick.add_argument("--models", help="comma-separated zoo names (default: every model)")
    pick.add_argument("--subset", choices=sorted(SUBSETS), help="a named subset (ci: a fast one for CI)")
    ap.add_argument("--jobs", type=int, default=1, help="models run at once (default 1)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one model may take (default 900)")
    ap.add_argument("--workdir", type=Path, help="where per-model directories are kept (default: a new temp dir)")
    ap.add_argument("--size", default="small",
                    help="small (each model's CI size, the default), default (each model's large size) or BxHxW")
    ap.add_argument("--arch", default=ARCH, help=f"target arch spec (default {ARCH}, a simulated Orin)")
    ap.add_argument("--min-ms", type=float, default=0.0,
                    help="propose: families under this total are not worth a kernel (default 0: small sizes propose)")
    ap.add_argument("--launch-ms", type=float, default=0.0,
                    help="propose: kernel-launch floor per site in the roofline bound (default 0; propose's own "
                         "default, 0.002, makes every family of a small model look at roofline, so nothing is carved)")
    ap.add_argument("--engine", default="mock",
                    help="the engine that measures each model (default mock, SIMULATED; torch on a CUDA machine)")
    ap.add_argument("--stop-after", choices=("propose", "carve"), default="carve",
                    help="propose: measure and propose only, no carves (for --families at full size on a GPU)")
    ap.add_argument("--families", action="store_true",
                    help="also print where the corpus's time goes: per op family, its share of each model's "
                         "profile, and whether the real kernel generators take it")
    ap.add_argument("--json", action="store_true", help="print the whole result as JSON instead of the tables")
    ap.add_argument("--render", type=Path, metavar="ZOO_REPORT_JSON",
                    help="run nothing: print the tables (or --json) of an earlier run's zoo_report.json")
    return ap.parse_args(argv)


def _engine_names() -> list[str]:
    """The installed backends that serve the engine role."""
    from ytk_core.runtime import runtime

    return [b.name for b in runtime().manager.for_role("engine")]


def select_models(models: str | None, subset: str | None) -> list[ZooEntry]:
    by_name = {e.name: e for e in ZOO}
    if subset:
        return [by_name[n] for n in SUBSETS[subset]]
    if not models:
        return list(ZOO)
    wanted = [m.strip() for m in models.split(",") if m.strip()]
    unknown = [m for m in wanted if m not in by_name]
    if unknown or not wanted:
        raise Usage(f"--models: unknown zoo model(s) {', '.join(unknown) or '(none given)'}; known: "
                    f"{', '.join(sorted(by_name))}")
    return [by_name[m] for m in dict.fromkeys(wanted)]


def _size_of(zoo: ZooEntry, size: str) -> str:
    if size == "small":
        return "x".join(map(str, zoo.small_size))
    if size == "default":
        return "x".join(map(str, zoo.default_size))
    parts = size.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise Usage(f"--size {size!r}: expected small, default or BxHxW (e.g. 1x64x96)")
    return size.lower()


class Runner:
    """Runs each model's subprocess with a timeout and collects its ModelRun."""

    def __init__(self, workdir: Path, arch: str, size: str, timeout: float, jobs: int, err: Console,
                 propose: dict[str, float], backends: dict[str, str] | None = None,
                 stop_after: str = "carve") -> None:
        self.workdir, self.arch, self.size, self.timeout, self.jobs, self.err = workdir, arch, size, timeout, jobs, err
        self.propose, self.backends, self.stop_after = propose, backends or dict(BACKENDS), stop_after
        self.lock = threading.Lock()
        self.done = 0
        self.total = 0
        self.live: set[subprocess.Popen] = set()  # type: ignore[type-arg]
        self.stopping = False

    def run_all(self, models: list[ZooEntry]) -> list[ModelRun]:
        self.total = len(models)
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = [pool.submit(self.run_one, m) for m in models]
            try:
                return [f.result() for f in futures]
            except KeyboardInterrupt:
                # The models run in sessions of their own (so a timeout can kill all of a model's
                # processes): Ctrl-C does not reach them, so stop them here before the pool waits.
                self.stopping = True
                for f in futures:
                    f.cancel()
                with self.lock:
                    for proc in self.live:
                        _kill_group(proc)
                raise

    def _env(self, zoo: ZooEntry) -> dict[str, str]:
        env = dict(os.environ)
        env.update({f"YTK_{role.upper()}": name for role, name in self.backends.items()})
        env["YTK_EXAMPLE_SIZE"] = _size_of(zoo, self.size)
        # N models at once on C cores: C / N threads each, or they trample on one another.
        threads = str(max(1, (os.cpu_count() or 1) // self.jobs))
        env.setdefault("OMP_NUM_THREADS", threads)
        env.pop("YTK_DISABLE_PLUGIN_AUTOLOAD", None)
        return env

    def run_one(self, zoo: ZooEntry) -> ModelRun:
        d = self.workdir / zoo.name
        d.mkdir(parents=True, exist_ok=True)
        (d / "result.json").unlink(missing_ok=True)
        t0 = time.perf_counter()
        self.err.print(f"zoo: start {zoo.name}", highlight=False)
        with open(d / "log.txt", "wb") as log, self.lock:  # the child keeps its own copy of the file
            if self.stopping:
                raise KeyboardInterrupt
            cmd = [sys.executable, str(FLOW), zoo.name, "--workdir", str(d), "--arch", self.arch,
                   "--min-ms", str(self.propose["min_ms"]), "--launch-ms", str(self.propose["launch_ms"]),
                   "--stop-after", self.stop_after]
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self._env(zoo), cwd=str(d), start_new_session=True)
            self.live.add(proc)
        timed_out = False
        try:
            code = proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            code = proc.wait()
        with self.lock:
            self.live.discard(proc)
        run = _collect(zoo, d, code, timed_out, self.timeout, _size_of(zoo, self.size))
        run.wall_s = round(time.perf_counter() - t0, 1)
        with self.lock:
            self.done += 1
            self.err.print(f"zoo: [{self.done}/{self.total}] {zoo.name}: {_progress_line(run)}", highlight=False,
                           markup=False)
        return run


def _kill_group(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """The model's process and anything it started (its own session): nothing of it may outlive the timeout."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _collect(zoo: ZooEntry, d: Path, code: int, timed_out: bool, timeout: float, size: str) -> ModelRun:
    """The subprocess's result.json, completed with how the process ended."""
    path = d / "result.json"
    try:
        run = ModelRun.model_validate_json(path.read_text())
    except (OSError, ValueError):
        run = ModelRun(name=zoo.name, source=zoo.source, family=zoo.family, depthwise=zoo.depthwise,
                       attention=zoo.attention, size=size, workdir=str(d))
    if timed_out:
        run.status = "timeout"
        run.miss("timeout", f"no result after {timeout:.0f} s (was in stage {run.stage}); see {d / 'log.txt'}")
    elif run.status == "running":
        run.status = "crashed"
        run.miss("crash", f"the model's process ended with status {_exit_text(code)} in stage {run.stage}; "
                          f"see {d / 'log.txt'}")
    return run


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return str(code)


def _progress_line(run: ModelRun) -> str:
    if run.status != "done":
        first = run.misses[0] if run.misses else None
        why = f": {one_line(first.reason, 100)}" if first else ""
        return f"{run.status} at {run.stage} ({run.wall_s:.0f} s){why}"
    return f"done ({run.wall_s:.0f} s): {run.proposals} proposal(s), {_n(run, 'carved')} carved"


def _n(run: ModelRun, attr: str) -> str:
    """``ok/of``: of the proposals (carved), else of the carved ones (supported, recognised)."""
    if run.proposals is None:
        return "-"
    if run.candidates and all(c.carved is None for c in run.candidates):
        return "-"  # not tried: --stop-after propose, or an earlier stage stopped the model
    if attr == "carved":
        return f"{sum(1 for c in run.candidates if c.carved)}/{run.proposals}"
    carved = [c for c in run.candidates if c.carved]
    if attr == "supported" and run.supports_hook is False:
        return NO_SUPPORTS_HOOK
    return f"{sum(1 for c in carved if getattr(c, attr))}/{len(carved)}"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(report: ZooReport, out: Console) -> None:
    """The table, then every miss with its reason."""
    sim = any(r.simulated for r in report.models)
    gens = sorted({r.kernelgen for r in report.models if r.kernelgen}) or [report.backends["kernelgen"]]
    opts = ", ".join(f"{k} {v:g}" for k, v in report.propose.items())
    t = Table(title=f"zoo: {len(report.models)} models, {report.size_kind} size, {report.arch}, "
                    f"{'/'.join(sorted(set(report.backends.values())))} backends, propose {opts}", title_justify="left")
    for col, just in (("model", "left"), ("size", "left"), ("ONNX nodes", "right"), ("coverage", "right"),
                      ("base ms" + (" (SIMULATED)" if sim else ""), "right"), ("proposals", "right"),
                      ("carved", "right"), ("together", "left"), (f"supported ({'/'.join(gens)})", "right"),
                      ("templates", "right")):
        t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    t.add_column("first failure", no_wrap=True, overflow="ellipsis", max_width=60)
    for r in report.models:
        first = r.misses[0] if r.misses else None
        together = {True: "yes", False: "no", None: "-"}[r.carved_together]
        t.add_row(r.name, r.size, _fmt(r.onnx_nodes, "d"),
                  "-" if r.coverage is None else f"{100 * r.coverage:.1f}%", _fmt(r.baseline_ms, ".3f"),
                  _fmt(r.proposals, "d"), _n(r, "carved"), together, _n(r, "supported"), _n(r, "recognised"),
                  f"{first.stage}: {one_line(first.reason, 60)}" if first else "")
    out.print(t)
    misses = sorted(report.misses, key=lambda m: (m.stage, m.reason, m.model))
    if misses:
        mt = Table(title=f"misses ({len(misses)}), by stage and reason", title_justify="left")
        for col in ("stage", "model", "selector", "reason"):
            mt.add_column(col, overflow="fold")
        for m in misses:
            mt.add_row(m.stage, m.model, m.selector or "-", m.reason)
        out.print(mt)
        render_causes(misses, out)
    ok = sum(1 for r in report.models if r.flow_ok)
    props = sum(r.proposals or 0 for r in report.models)
    carved = sum(1 for r in report.models for c in r.candidates if c.carved)
    out.print(f"{ok}/{len(report.models)} models through prepare, compile and propose; {carved}/{props} proposals "
              f"carved; {len(misses)} misses; {report.wall_s:.0f} s with --jobs {report.jobs}"
              + ("; latencies SIMULATED by the mock engine's cost model" if sim else ""), highlight=False)


def _emit(report: ZooReport, as_json: bool, families: bool = False) -> None:
    if as_json:
        print(report.model_dump_json(indent=2))
        return
    out = Console(soft_wrap=True)
    if not out.is_terminal:
        out = Console(soft_wrap=True, width=max(out.width, 220))
    render(report, out)
    if families:
        render_families(report, out)


@dataclass
class FamilyShare:
    """One row of the families table."""

    family: str
    where: str
    models: int = 0
    sites: int = 0
    share: float = 0.0
    share_dw: float = 0.0
    taken: bool | None = None
    why: str = ""


def family_shares(report: ZooReport) -> list[FamilyShare]:
    """Per (where, family): in how many models it shows, its sites, and its mean share of a model's profile
    over all measured models and over the depthwise-heavy ones (each model weighs the same, whatever its size)."""
    measured = [r for r in report.models if r.profile_ms and r.time_by_family]
    n_dw = sum(1 for r in measured if r.depthwise)
    rows: dict[tuple[str, str], FamilyShare] = {}
    for r in measured:
        for f in r.time_by_family:
            row = rows.setdefault((f.where, f.family), FamilyShare(f.family, f.where))
            share = f.ms / (r.profile_ms or 1.0)
            row.models += 1
            row.sites += f.sites
            row.share += share / len(measured)
            if r.depthwise:
                row.share_dw += share / n_dw
            if f.taken is not None:
                row.taken = bool(row.taken) or f.taken
            row.why = row.why or f.why
    return sorted(rows.values(), key=lambda row: -row.share)


def render_families(report: ZooReport, out: Console) -> None:
    """Where the corpus's measured time goes, by op family: the table the kernel families are chosen from."""
    measured = [r for r in report.models if r.profile_ms and r.time_by_family]
    if not measured:
        out.print("families: no model of this report has per-family times (a report older than schema 2, or "
                  "none got through propose)", highlight=False)
        return
    sim = any(r.simulated for r in measured)
    dw = sum(1 for r in measured if r.depthwise)
    mixed = 0 < dw < len(measured)  # else the depthwise-heavy share is the same column again
    chains = sorted({r.real_chain for r in measured if r.real_chain}) or ["?"]
    t = Table(title=f"where the time goes: {len(measured)} models ({dw} depthwise-heavy: the registry's tag for "
                    f"models whose time is mostly depthwise convs), mean share of each model's profile"
                    f"{' (SIMULATED)' if sim else ''}, engine {report.backends.get('engine', '?')}",
              title_justify="left")
    cols = [("family", "left"), ("where", "left"), ("models", "right"), ("sites", "right"), ("share", "right")]
    cols += [("share, depthwise-heavy", "right")] if mixed else []
    cols += [(f"taken by {' / '.join(chains)}", "left")]
    for col, just in cols:
        t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    t.add_column("why not", overflow="ellipsis", max_width=70, no_wrap=True)
    for row in family_shares(report):
        cells = [row.family, row.where, str(row.models), str(row.sites), f"{100 * row.share:.1f}%"]
        cells += [f"{100 * row.share_dw:.1f}%"] if mixed else []
        t.add_row(*cells, {True: "yes", False: "no", None: "-"}[row.taken], "" if row.taken else row.why)
    out.print(t)
    out.print("where: proposed (a WHAT TO PLUG row of propose), not worth (a conv, GEMM or attention propose left out: "
              "at roofline or under --min-ms), outside regions (compute with no heavy op to build a kernel around), "
              "glue (reformats, engine-internal layers)", highlight=False)


def render_causes(misses: list[Miss], out: Console) -> None:
    """The misses grouped by stage and cause (the reason with names and numbers masked), most frequent first."""
    groups: dict[tuple[str, str], list[Miss]] = {}
    for m in misses:
        groups.setdefault((m.stage, reason_pattern(m.reason)), []).append(m)
    t = Table(title=f"misses by cause ({len(groups)} causes)", title_justify="left")
    t.add_column("stage")
    t.add_column("misses", justify="right")
    t.add_column("models", overflow="fold")
    t.add_column("example reason", overflow="fold")
    for (stage, _), group in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        models = sorted({m.model for m in group})
        t.add_row(stage, str(len(group)), ", ".join(models), group[0].reason)
    out.print(t)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    err = Console(stderr=True, soft_wrap=True)
    if args.render is not None:
        try:
            report = ZooReport.read(args.render)
        except ArtifactError as e:
            err.print(f"error: --render: {e}", highlight=False, markup=False)
            return 2
        _emit(report, args.json, args.families)
        return 0
    try:
        models = select_models(args.models, args.subset)
        if args.jobs < 1 or not args.timeout > 0:
            raise Usage("--jobs must be at least 1 and --timeout more than 0")
        if args.min_ms < 0 or args.launch_ms < 0:
            raise Usage("--min-ms and --launch-ms must be zero or more")
        for zoo in models:
            _size_of(zoo, args.size)
        engines = _engine_names()
        if args.engine not in engines:
            raise Usage(f"--engine {args.engine}: no installed engine backend of that name (installed: "
                        f"{', '.join(engines)})")
        missing = [m for m in ("timm", "torchvision") if importlib.util.find_spec(m) is None]
        if missing:
            raise Usage(f"{' and '.join(missing)} not installed; {EXTRA_HINT}")
    except Usage as e:
        err.print(f"error: {e}", highlight=False, markup=False)
        return 2
    try:
        workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="ytk-zoo-"))).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        err.print(f"error: cannot use --workdir {args.workdir}: {e.strerror}", highlight=False, markup=False)
        return 2
    err.print(f"zoo: {len(models)} model(s), --jobs {args.jobs}, timeout {args.timeout:.0f} s, workdir {workdir}",
              highlight=False)
    t0 = time.perf_counter()
    propose = {"min_ms": args.min_ms, "launch_ms": args.launch_ms}
    backends = {**BACKENDS, "engine": args.engine}
    try:
        runs = Runner(workdir, args.arch, args.size, args.timeout, args.jobs, err, propose, backends,
                      args.stop_after).run_all(models)
    except BaseException:
        if args.workdir is None:  # a temporary workdir is tens of GB: never left behind
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    report = ZooReport(arch=args.arch, precision="fp16", backends=backends,
                       size_kind=args.size if args.size in ("small", "default") else "override", jobs=args.jobs,
                       timeout_s=args.timeout, propose=propose, workdir=str(workdir),
                       wall_s=round(time.perf_counter() - t0, 1),
                       models=runs)
    report.write(workdir / "zoo_report.json")
    _emit(report, args.json, args.families)
    if args.workdir is None:  # the corpus's carves are tens of GB; a temporary workdir goes once reported
        shutil.rmtree(workdir, ignore_errors=True)
        err.print("zoo: removed its temporary workdir (pass --workdir DIR to keep the per-model directories "
                  "and zoo_report.json)", highlight=False)
    else:
        err.print(f"zoo: per-model directories and zoo_report.json in {workdir}", highlight=False)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("zoo: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # a bug of this harness: one line, never a traceback
        print(f"zoo: internal error: {type(exc).__name__}: {one_line(str(exc))}", file=sys.stderr)
        sys.exit(1)
