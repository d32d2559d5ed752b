"""Entry point behind the CLI: start or resume an autoloop in a workdir, then report."""

from __future__ import annotations

import shutil
from pathlib import Path

from ytk_hookspecs.models import ArchSpec, ArtifactError
from ytk_hookspecs.models.base import sha256_file

from ..errors import UsageError
from ..frontend.loader import check_model_path
from ..runtime import runtime
from ..staging import PREFIX as STAGING_PREFIX
from ..staging import remove_stale
from ..thresholds import Threshold
from .control import LOCK_FILE, Clock, WorkdirLock, parse_duration
from .loop import Autoloop
from .report import REPORT_DIR, AutoloopReport, build_report
from .state import PREV_STATE_FILE, STATE_FILE, AutoloopBackends, AutoloopLimits, AutoloopState, BackendChoice


def _resolve_arch(arch: str) -> str:
    """``-a`` as a spec string; ``auto`` resolved (and logged) as every command resolves it."""
    from ..stages.inputs import parse_arch

    return parse_arch(arch).spec


def run_autoloop(model: Path, arch: str, precision: str, workdir: Path, flags: BackendChoice,
                 max_rounds: int, min_gain: str | float, max_jobs: int, time_budget: str | None,
                 on_change: str = "ask", worker: str | None = None, roofline: float = 0.5) -> AutoloopReport:
    """``min_gain``: milliseconds (``0.1``, ``"0.1ms"``) or a share of the baseline (``"1%"``).
    ``on_change``: what a workdir whose inputs or backend versions changed does: ``ask`` (stop and say
    so), ``resume`` (go on with the recorded results) or ``fresh`` (discard them and start over).
    ``flags``: the backends the user named per role. ``worker``: a Kronos worker's URL; every engine is
    compiled there, with its engine and (for ``-a auto``) its target."""
    if precision not in ("fp16", "fp32"):
        raise UsageError(f"-p {precision!r}: expected fp16 or fp32")
    for flag, value in (("--max-rounds", max_rounds), ("--max-jobs", max_jobs)):
        if value < 1:
            raise UsageError(f"{flag} must be at least 1, not {value}")
    if not 0 < roofline <= 1:
        raise UsageError(f"--roofline is a fraction of the roofline bound in (0, 1], not {roofline}")
    min_gain_t = Threshold.parse(min_gain, "--min-gain-ms")
    model = Path(model)
    check_model_path(model)
    budget = parse_duration(time_budget)
    workdir = Path(workdir)
    if workdir.exists() and not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is a file, not a directory: name a directory (it is created if "
                         "missing)")
    created = not workdir.exists()
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if worker is not None:
            arch, flags = _on_worker(worker, arch, flags)
        limits = AutoloopLimits(max_rounds=max_rounds, min_gain_ms=None if min_gain_t.relative else min_gain_t.value,
                                min_gain_pct=min_gain_t.value if min_gain_t.relative else None, time_budget_s=budget,
                                roofline=roofline)
        with WorkdirLock(workdir):
            clean_stale(workdir)
            if on_change == "fresh":
                discard_run(workdir)
            state = _load_or_start(model, arch, precision, workdir, flags, limits, min_gain_t, worker)
            stale = [] if on_change == "fresh" else _check_unchanged(state, model, workdir,
                                                                     resume=on_change == "resume")
            loop = Autoloop(state, workdir, Clock(spent_before=state.elapsed_s, budget_s=budget), max_jobs, worker)
            if not state.finished:
                loop.run()
            return build_report(state, workdir, simulated=loop.ws.simulated,
                                host_timing=state.backends.engine != "mock", stale=stale)
    except UsageError:
        # a run refused before it began (nothing but the lock file in a workdir it made) leaves no workdir behind
        if created and all(p.name == LOCK_FILE for p in workdir.iterdir()):
            shutil.rmtree(workdir, ignore_errors=True)
        raise


def _costly(st: AutoloopState) -> bool:
    """Whether ``st`` records work worth keeping: a candidate that went past its carve (a kernel generated, or
    a generator's answer on it)."""
    return any(c.status != "pending" and not (c.status == "dropped" and c.dropped_at in ("propose", "carve"))
               for r in st.rounds for c in r.candidates)


def limit_changes(before: AutoloopLimits, st: AutoloopState) -> list[str]:
    """``--flag old -> new`` for each limit a resume changed (``st`` holds the new limits, resolved)."""
    def gain(lim: AutoloopLimits) -> str:
        return f"{lim.min_gain_pct:g}%" if lim.min_gain_pct is not None else (
            f"{lim.min_gain_ms:g} ms" if lim.min_gain_ms is not None else "-")

    def budget(lim: AutoloopLimits) -> str:
        return f"{lim.time_budget_s:g} s" if lim.time_budget_s is not None else "none"

    new = st.limits
    pairs = [("--max-rounds", str(before.max_rounds), str(new.max_rounds)),
             ("--min-gain-ms", gain(before), gain(new)),
             ("--time-budget", budget(before), budget(new)),
             ("--roofline", f"{before.roofline:g}", f"{new.roofline:g}")]
    return [f"{flag} {a} -> {b}" for flag, a, b in pairs if a != b]


def _load_or_start(model: Path, arch: str, precision: str, workdir: Path, flags: BackendChoice,
                   limits: AutoloopLimits, min_gain: Threshold, worker: str | None) -> AutoloopState:
    sf = workdir / STATE_FILE
    if sf.is_file():
        st = _read_state(workdir)
        changed = Path(st.model) != model.resolve() or _code_changed(st, model)
        if changed and not _costly(st):
            # the guide's "fix the cause and run the same command again" after a model that failed to export, or
            # stopped before its first kernel: nothing worth keeping was recorded
            runtime().log.info(f"{workdir}: the model changed before any kernel was generated; starting over")
            discard_run(workdir)
            return _load_or_start(model, arch, precision, workdir, flags, limits, min_gain, worker)
        if Path(st.model) != model.resolve():
            # a model file that moved (or one that also changed: _check_unchanged asks about its content) is the
            # one later rounds carve
            runtime().log.info(f"{workdir}: the model is now {model} (the recorded run used {st.model})")
            st.model = str(model.resolve())
        if arch != "auto" and arch != st.arch:
            raise UsageError(f"{workdir} was started for -a {st.arch}, not {arch}; "
                             "start over with --fresh or use a new --workdir")
        if arch == "auto" and worker is None and (here := _resolve_arch(arch)) != st.arch:
            raise UsageError(f"{workdir} was started for -a {st.arch}; -a auto is {here} on this machine: resume "
                             f"with -a {st.arch} on a machine that serves it, or start over with --fresh (or a new "
                             "--workdir)")
        if precision != st.precision:
            raise UsageError(f"{workdir} was started with -p {st.precision}, not {precision}; "
                             "start over with --fresh or use a new --workdir")
        from ..plugins.selection import named_choice

        for role in ("engine", "kernelgen", "builder"):
            named = named_choice(role, getattr(flags, role), runtime().config)
            if named is not None and st.backends.roles()[role] != ",".join(named[0]):
                raise UsageError(f"{workdir} was started with {role} backend {st.backends.roles()[role]!r}, not "
                                 f"{','.join(named[0])!r} ({named[1]}): resume with the same backends, or start "
                                 "over with --fresh (or a new --workdir)")
        new_gain = min_gain.ms(st.baseline.ms) if st.baseline else None
        more_time = st.stop_kind == "time_budget" and (limits.time_budget_s is None
                                                        or limits.time_budget_s > st.elapsed_s)
        if st.finished and (limits.max_rounds > st.limits.max_rounds or limits.roofline > st.limits.roofline or
                            more_time or (new_gain is not None and st.limits.min_gain_ms is not None
                                          and new_gain < st.limits.min_gain_ms)):
            st.finished, st.stop_reason, st.stop_kind = False, "", None  # looser limits: go on from the best engine
        before = st.limits.model_copy()
        st.limits = limits
        st.worker = worker
        st.resolve_min_gain()
        runtime().log.info(f"resuming autoloop in {workdir}", rounds_done=len(st.rounds),
                           best_ms=round(st.best.ms, 3) if st.best else None)
        changes = limit_changes(before, st)
        if changes:
            line = f"limits changed since the last run: {', '.join(changes)}; they apply to the rounds that remain"
            runtime().log.warning(line)
            st.history.append(line)
        return st
    spec = _resolve_arch(arch)
    backends = resolve_backends(spec, flags, remote_engine=flags.engine if worker else None)
    versions = {f"{role}:{name}" if role == "kernelgen" else role: b.info.version for role, name in backends.named()
                if (b := runtime().manager.get(name))}
    st = AutoloopState(model=str(model.resolve()), model_sha256=sha256_file(model), model_code_sha256=code_sha(model),
                       arch=spec, precision=precision, backends=backends, backend_versions=versions, limits=limits,
                       worker=worker)
    st.save(workdir)
    return st


def _read_state(workdir: Path) -> AutoloopState:
    """The saved state, or the last good one (one save older) when the current file is damaged."""
    sf, prev = workdir / STATE_FILE, workdir / PREV_STATE_FILE
    try:
        return AutoloopState.read(sf)
    except ArtifactError as e:
        damaged = str(e)
    try:
        st = AutoloopState.read(prev)
    except ArtifactError:
        raise UsageError(f"{damaged}, and there is no good {PREV_STATE_FILE} beside it: run again with --fresh to "
                         "start over in this workdir (its rounds and report go), or use a new --workdir") from None
    runtime().log.warning(f"{damaged}; resuming from the last good state {PREV_STATE_FILE} (one save older: "
                          "at most one step runs again)")
    st.save(workdir)  # the damaged file is replaced at once (the good copy stays where it is)
    return st


def discard_run(workdir: Path) -> None:
    """``--fresh``: what an earlier autoloop wrote in ``workdir`` (its state, rounds and report) goes."""
    for name in (STATE_FILE, PREV_STATE_FILE):
        (workdir / name).unlink(missing_ok=True)
    for d in [*workdir.glob("round[0-9]*"), workdir / REPORT_DIR]:
        if d.is_dir():
            shutil.rmtree(d)


def code_sha(model: Path) -> str | None:
    """sha256 of the model file's syntax tree: comments, blank lines and layout left out, so an edit of those
    alone is no change. None for a file Python cannot parse (its bytes are compared instead)."""
    import ast
    import hashlib

    try:
        tree = ast.parse(model.read_bytes(), filename=str(model))
    except (SyntaxError, ValueError):
        return None
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()


def _code_changed(st: AutoloopState, model: Path) -> bool:
    """Whether the model file holds another program than the recorded run's (a state without the code's hash,
    or a file that does not parse: whether its bytes changed)."""
    if sha256_file(model) == st.model_sha256:
        return False
    return st.model_code_sha256 is None or code_sha(model) != st.model_code_sha256


def _check_unchanged(st: AutoloopState, model: Path, workdir: Path, resume: bool) -> list[str]:
    """A resumed workdir whose results depend on what changed since: say what, and let the user choose.
    Returns what changed when ``resume`` goes on anyway (for the report), else nothing."""
    from ..frontend.loader import input_shapes

    changes = []
    rt = runtime()
    now_sha = sha256_file(model)
    if _code_changed(st, model):
        changes.append(f"the model file's code changed (sha256 {now_sha[:12]}, the recorded run's "
                       f"{st.model_sha256[:12]})")
    elif now_sha != st.model_sha256:  # comments or layout only: the same program, the recorded results stand
        rt.log.info(f"{model}: only its comments or layout changed since the recorded run; going on")
        st.model_sha256 = now_sha
        st.save(workdir)
    for role, name in st.backends.named():
        b = rt.manager.get(name)
        was = st.backend_versions.get(f"{role}:{name}" if role == "kernelgen" else role) or \
            (st.backend_versions.get(role) if role == "kernelgen" else None)
        if b is not None and was and b.info.version != was:
            changes.append(f"{role} backend {name} is version {b.info.version}, was {was}")
    if st.input_shapes is not None:
        now = input_shapes(model)
        if now != st.input_shapes:
            changes.append(f"get_fwd_args() gives inputs {now}, the recorded run used {st.input_shapes}")
    if not changes:
        return []
    what = "; ".join(changes)
    if not resume:
        raise UsageError(f"{workdir} holds an autoloop whose results depend on what changed: {what}. Run again "
                         "with --fresh to discard it and start over, or --resume to go on with its results")
    rt.log.warning(f"--resume: going on with {workdir}'s recorded results although {what}")
    return changes


def _on_worker(worker: str, arch: str, flags: BackendChoice) -> tuple[str, BackendChoice]:
    """With a Kronos worker the engine is the worker's (``--engine`` must agree) and ``-a auto`` its target."""
    from ..kronos.remote_compile import worker_info

    info = worker_info(worker)
    if flags.engine and flags.engine != info.engine:
        raise UsageError(f"--engine {flags.engine}: the kronos worker at {worker} runs the {info.engine} engine")
    runtime().log.info(f"autoloop engine: {info.engine} on the kronos worker at {worker}", target=info.arch)
    return (info.arch if arch == "auto" else arch), flags.model_copy(update={"engine": info.engine})


def resolve_backends(arch: str, flags: BackendChoice, remote_engine: str | None = None) -> AutoloopBackends:
    """The engine, kernel generator and builder a new autoloop uses (a resumed one keeps its own). A
    ``remote_engine`` runs on a Kronos worker: it is not selected (or need not even be installed) here."""
    rt = runtime()
    out = {}
    for role, (name, why) in choose_backends(arch, flags, remote_engine).items():
        out[role] = name  # never None: choose_backends raises without keep_going
        rt.log.info(f"autoloop {role}: {name}", why=why)
    if remote_engine is None:  # a worker's engine is the worker's to check (it says which one it runs)
        _check_plugins_can_load(out["engine"], out["kernelgen"], ArchSpec.parse(arch))
    return AutoloopBackends(**out)


def _check_plugins_can_load(engine: str, kernelgens: str, spec: ArchSpec) -> None:
    """A real engine loads only plugins the admission gate admitted, and a simulated generator's plugins carry
    no GPU code to admit: with only simulated generators, every round would generate and build plugins that
    are all dropped at the gate, and the summary would show a loop that found nothing. Stop before it."""
    mgr = runtime().manager
    eng = mgr.get(engine)
    if eng is None or eng.info.simulated or not mgr.all_simulated(kernelgens.split(",")):
        return
    real = sorted((c for c in mgr.for_role("kernelgen") if not c.info.simulated), key=lambda c: c.name)
    ready = [c.name for c in real if c.availability(spec).available]
    head = (f"the engine {engine} is real and the kernel generator {kernelgens} is simulated: a real engine loads "
            "only plugins the admission gate has run on a GPU, so every candidate would be dropped. ")
    if ready:
        raise UsageError(head + f"Name a real generator available here (--kernelgen {ready[0]}"
                         + (f"; also {', '.join(ready[1:])}" if ready[1:] else "")
                         + "), or simulate the whole target with the mock engine (--engine mock).")
    why = "; ".join(f"{c.name}: {c.availability(spec).reason}" for c in real)
    raise UsageError(head + (f"No real generator can run here ({why}). " if why else "")
                     + "Run where one can (templates and triton need a CUDA GPU), or simulate the whole target "
                       "with the mock engine (--engine mock).")


def choose_backends(arch: str, flags: BackendChoice, remote_engine: str | None = None,
                    keep_going: bool = False) -> dict[str, tuple[str | None, str]]:
    """Per role, the backend an autoloop for ``arch`` would use and why: the one place that decides, so that
    ``ytk backends -a ARCH`` shows exactly the autoloop's choice. A role that nothing can fill raises its
    selection error, or with ``keep_going`` is ``(None, error)`` and the other roles are still chosen. A
    simulated generator or engine pairs with the simulated builder unless a builder is named."""
    from ..errors import YtkError

    spec = ArchSpec.parse(arch)
    out: dict[str, tuple[str | None, str]] = {}
    for role in ("engine", "kernelgen", "builder"):
        try:
            out[role] = _choose(role, spec, flags, remote_engine, out)
        except YtkError as e:
            if not keep_going:
                raise
            out[role] = (None, str(e))
    return out


def _choose(role: str, spec: ArchSpec, flags: BackendChoice, remote_engine: str | None,
            chosen: dict[str, tuple[str | None, str]]) -> tuple[str, str]:
    from ..errors import YtkError
    from ..plugins.selection import Selection, select_backend, select_chain

    rt = runtime()

    # not logged here: resolve_backends logs the outcome and `ytk backends` prints it
    def select(role: str, name: str | None) -> Selection:
        return select_backend(rt.manager, role, name, rt.config, spec)

    if role == "engine" and remote_engine:
        return remote_engine, "the kronos worker's engine"
    if role == "kernelgen":
        chain = select_chain(rt.manager, role, getattr(flags, role), rt.config, spec)
        why = "; ".join(f"{s.name}: {s.source}: {s.reason}" if len(chain) > 1 else f"{s.source}: {s.reason}"
                        for s in chain)
        return ",".join(s.name for s in chain), why
    gens = chosen.get("kernelgen", (None, ""))[0]
    if role == "builder" and not getattr(flags, role) and gens and rt.manager.all_simulated(gens.split(",")):
        # a simulated generator's placeholders are built by a simulated builder, never into real .so files
        gen = rt.manager.get(gens.split(",")[0])
        if gen is not None and role in gen.info.roles:
            paired = select(role, gen.name).name
            try:
                sel = select(role, None)
            except YtkError:
                sel = None
            if sel is not None and sel.name == paired:  # the settings chose it anyway: say how
                return sel.name, f"{sel.source}: {sel.reason}"
            return paired, f"paired: the kernel generator {gen.name} is simulated"
    sel = select(role, getattr(flags, role))
    engine = chosen.get("engine", (None, ""))[0]
    eng = rt.manager.get(engine) if role == "builder" and engine else None
    if (sel.source == "auto" and eng is not None and eng.info.simulated and role in eng.info.roles
            and not sel.backend.info.simulated):
        # a simulated engine's plugins are simulated ones: a real builder (a Gaia service's nvcc, chosen
        # because YTK_GAIA_URL is set) refuses a simulated generator's placeholder, and every region is dropped
        return select(role, eng.name).name, f"paired: the engine {eng.name} is simulated"
    return sel.name, f"{sel.source}: {sel.reason}"


def clean_stale(workdir: Path) -> None:
    """Remove temp files a killed run left behind (atomic writes never leave a half file in place)."""
    for p in Path(workdir).rglob(".*.tmp*"):
        if p.is_file():
            p.unlink(missing_ok=True)
    for p in Path(workdir).rglob(".*.build-*"):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
    for p in list(Path(workdir).rglob(f"{STAGING_PREFIX}*")):  # a prepare killed before it moved its files in
        remove_stale(p.parent)
