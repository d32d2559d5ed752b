"""ytk autoloop on the mock target: end to end, killed and resumed, every candidate losing, locking."""

from __future__ import annotations

import json
import re
import os
import types
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers import autoloop_with_generator, ytk_inproc
from ytk_core.autoloop.state import BackendChoice
from ytk_core.autoloop.control import WorkdirLock, parse_duration
from ytk_core.autoloop.state import STATE_FILE, AutoloopState
from ytk_core.errors import UsageError

MODEL = REPO / "tests" / "data" / "tiny_dw_model.py"
ORIN = "arm64-sm87-dos6010-cu114-trt86"
MOCK = ["--engine", "mock", "--kernelgen", "mock", "--builder", "mock"]


def cli(*args, **env: str):  # type: ignore[no-untyped-def]
    """``ytk ARGS`` in-process (as test_drops.py runs the loop), never at a kill point: a process of its own
    adds nothing to what these tests check but about 6 s of imports and torch warm-up per run. What needs a
    process (a kill point, Ctrl-C, another process's lock, a rebuild from another directory) uses run_cli."""
    return ytk_inproc(*args, **{"YTK_AUTOLOOP_CRASH_AT": "", **env})


def autoloop(workdir: Path, *extra: str, crash_at: str | None = None):
    args = ("autoloop", MODEL, "-a", ORIN, "--workdir", workdir, "--max-rounds", "3", "--min-gain-ms", "0.001", *MOCK,
            *extra)
    if crash_at:  # the loop SIGKILLs itself there: the console script, in a process of its own
        return run_cli(*args, env={"YTK_AUTOLOOP_CRASH_AT": crash_at})
    return cli(*args)


def state(workdir: Path) -> AutoloopState:
    return AutoloopState.read(workdir / STATE_FILE)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    w = tmp_path_factory.mktemp("al")
    r = autoloop(w, "--json")
    assert r.code == 0, r.stderr[-3000:]
    return w, r


def test_end_to_end(finished):
    w, r = finished
    rep = r.json()
    assert rep["simulated"] is True and rep["state"]["finished"] is True and rep["state"]["stop_reason"]
    assert rep["final_ms"] < rep["baseline_ms"]
    kept = rep["state"]["best"]["plugins"]
    assert kept and all(p["status"] == "kept" for p in kept)
    assert rep["verify"]["passed"] is True and len(rep["verify"]["rows"]) == 2
    for f in ("autoloop_report.md", "latency.svg", "latency.png", "regions.svg", "regions.png", "verify.json"):
        assert (w / "report" / f).is_file()
    md = (w / "report" / "autoloop_report.md").read_text()
    assert "SIMULATED" in md and "## Rounds" in md and "| Implementation |" in md
    # the result line is quoted on its own (a new user read it without the banner above it)
    result = md.split("## Result")[1].split("\n## ")[0]
    assert "x)** (SIMULATED) with " in result, result
    assert "![latency by round](latency.svg) ([PNG](latency.png))" in md
    svg = (w / "report" / "latency.svg").read_text()
    assert "<svg" in svg and "end-to-end latency, p50 (ms)" in svg and "SIMULATED" in svg
    assert (w / "report" / "regions.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_edited_model_file_asks_and_resume_goes_on(finished, tmp_path):
    """The model file's content is a key of the recorded results like the inputs (it used to be refused even
    with --resume): without a flag the run stops and names both choices; --resume goes on with the recorded
    results and the summary says they predate the edit; a model file that only moved goes on unasked, and later
    rounds carve the file named now."""
    import shutil

    w, _ = finished
    work = tmp_path / "w"
    shutil.copytree(w, work)
    moved = tmp_path / "elsewhere" / MODEL.name
    moved.parent.mkdir()
    shutil.copy(MODEL, moved)
    r = cli("autoloop", moved, "-a", ORIN, "--workdir", work, *MOCK)
    assert r.code == 0 and "the model is now" in r.stderr, r.stderr[-2000:]
    assert state(work).model == str(moved.resolve()) and "note: resumed although" not in r.stdout
    # comments and layout only: the same program, nothing to ask (the recorded file's hash follows the edit)
    moved.write_text("# a comment first\n" + MODEL.read_text().replace("\n\n\n", "\n\n\n\n") + "\n# edited\n")
    r = cli("autoloop", moved, "-a", ORIN, "--workdir", work, *MOCK)
    assert r.code == 0 and "only its comments or layout changed" in r.stderr, r.stderr[-2000:]
    assert "note: resumed although" not in r.stdout and state(work).model_sha256 != state(w).model_sha256
    edited = state(work).model_sha256
    moved.write_text(MODEL.read_text() + "\nEDITED = 1\n")
    r = cli("autoloop", moved, "-a", ORIN, "--workdir", work, *MOCK)
    assert r.code == 2, r.stderr
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("error:"))
    assert "model file's code changed" in line and "--fresh" in line and "--resume" in line
    r = cli("autoloop", moved, "-a", ORIN, "--workdir", work, "--resume", *MOCK)
    assert r.code == 0 and "note: resumed although the model file's code changed" in r.stdout, r.stderr[-2000:]
    assert state(work).model_sha256 == edited  # still the recorded run's: every resume says so


def test_every_latency_the_loop_logs_from_the_simulator_says_so(finished):
    """The summary, the report and --json said SIMULATED; the history and log lines ("round 0: baseline 0.458 ms
    (mock engine)", "round 1: ... -> ... ms") did not."""
    w, r = finished
    lines = [h for h in state(w).history if " ms" in h]
    assert lines and all(h.endswith("(SIMULATED)") for h in lines), lines
    logged = [ln for ln in r.stderr.splitlines() if "round 0: baseline" in ln]
    assert logged and all("(SIMULATED)" in ln for ln in logged)


def test_rerun_of_a_finished_loop_does_no_work(finished):
    w, _ = finished
    before = state(w)
    r = autoloop(w)
    assert r.code == 0, r.stderr[-2000:]
    after = state(w)
    assert [len(x.compiles) for x in after.rounds] == [len(x.compiles) for x in before.rounds]
    # the verdict too, saying what a pass of the simulated plugins checks, and what a GPU's generator would take
    assert "->" in r.stdout and "(SIMULATED), numerics pass (of the carve and plumbing: " in r.stdout, r.stdout
    assert "; stopped: " in r.stdout
    dropped = sum(1 for x in after.rounds for c in x.candidates if c.status == "dropped")
    # the table's "(decide)" says where, the report why: the summary points there (the worked example drops some)
    assert dropped and f"dropped: {dropped} candidate(s), each with its reason in the report's \"Dropped " \
        "candidates\"" in r.stdout, r.stdout
    note = next(ln for ln in r.stdout.splitlines() if ln.startswith("note: the simulated generator plugged"))
    assert "on a GPU the automatic kernel generator (templates) would take " in note, note
    st = state(w)
    asked = next(x.real_support for x in st.rounds if x.real_support)
    assert asked.chain == "templates" and asked.takes


def _generated(st: AutoloopState) -> dict[str, tuple[str | None, str | None]]:
    return {c.name: (c.job_id, c.source_sha256) for r in st.rounds for c in r.candidates if c.job_id}


def test_kill_and_resume_at_several_points(tmp_path):
    w = tmp_path / "crashy"
    r = autoloop(w, crash_at="baseline")
    assert r.code == -9  # SIGKILL: no clean-up ran
    assert state(w).baseline is not None and not state(w).rounds
    r = autoloop(w, crash_at="1:kernelgen-job")
    assert r.code == -9
    jobs = _generated(state(w))
    assert len(jobs) == 1  # killed right after the first job was recorded
    r = autoloop(w, crash_at="1:build-job")
    assert r.code == -9
    st = state(w)
    assert all(_generated(st)[k] == v for k, v in jobs.items())  # the finished job was not run again
    built = {c.name: c.so_sha256 for c in st.rounds[0].candidates if c.status == "built"}
    assert built
    r = autoloop(w, crash_at="1:compile-job")
    assert r.code == -9
    st = state(w)
    assert {c.name: c.so_sha256 for c in st.rounds[0].candidates if c.name in built} == built
    compiles = [(c.bundle, c.sha256) for c in st.rounds[0].compiles]
    assert len(compiles) == 1
    r = autoloop(w)
    assert r.code == 0, r.stderr[-3000:]
    st = state(w)
    assert st.finished and st.best and st.best.ms < st.baseline.ms
    assert [(c.bundle, c.sha256) for c in st.rounds[0].compiles][:1] == compiles
    assert all(_generated(st)[k] == v for k, v in jobs.items())
    assert not list(w.rglob(".*.tmp*"))


def test_every_candidate_loses_keeps_the_baseline(tmp_path, monkeypatch):
    """A generator whose kernels are slow: the loop must drop them all, stop at once and keep the baseline."""
    from ytk_backend_mock.plugin import MockBackend
    from ytk_hookspecs.kernel_source import KernelSource

    def submit(request, ctx):  # type: ignore[no-untyped-def]
        res = MockBackend().submit(request, ctx)
        src = KernelSource.read(res.source)
        perf = src.meta.perf.model_copy(update={"achieved_bandwidth_fraction": 0.0005})  # declared 1000x slow
        KernelSource(header=src.header, source=src.source, meta=src.meta.model_copy(update={"perf": perf}),
                     generator="slowgen").write(res.source)
        return res

    rep = _autoloop_with_generator(tmp_path, "slowgen", submit)
    st = rep.state
    assert st.finished and len(st.rounds) == 1
    assert st.best.bundle == st.baseline.bundle and rep.final_ms == rep.baseline_ms
    cands = st.rounds[0].candidates
    assert cands and all(c.status == "dropped" for c in cands)
    assert any("lost" in c.reason or "did not get faster" in c.reason for c in cands)


def test_two_autoloops_refuse_to_share_a_workdir(tmp_path):
    w = tmp_path / "locked"
    with WorkdirLock(w):
        r = autoloop(w)
    assert r.code != 0 and "another ytk autoloop" in r.stderr
    with WorkdirLock(w), pytest.raises(UsageError, match="another ytk autoloop"):
        with WorkdirLock(w):
            pass


def test_resume_refuses_a_changed_setup(finished, tmp_path):
    w, _ = finished
    r = cli("autoloop", MODEL, "-a", "x86_64-sm90-linux-cu130-trt10", "--workdir", w, *MOCK)
    assert r.code != 0 and "was started for -a" in r.stderr
    # -a auto is resolved and compared too (here, with no GPU, it is the Orin the loop was started for)
    r = cli("autoloop", MODEL, "-a", "auto", "--workdir", w, "--max-rounds", "3", "--min-gain-ms", "0.001",
            *MOCK)
    assert r.code == 0, r.stderr[-1500:]
    # a backend named in the environment (or ytk.toml) counts as a flag does: it used to be ignored silently
    r = cli("autoloop", MODEL, "-a", ORIN, "--workdir", w, "--engine", "mock", "--builder", "mock",
            YTK_KERNELGEN="templates")
    assert r.code == 2 and "kernelgen backend 'mock', not 'templates' ($YTK_KERNELGEN)" in r.stderr, r.stderr[-1500:]
    r = cli("autoloop", MODEL, "-a", ORIN, "--workdir", w, "--max-rounds", "3", "--min-gain-ms", "0.001",
            "--engine", "mock", "--builder", "mock", YTK_KERNELGEN="mock")
    assert r.code == 0, r.stderr[-1500:]


@pytest.mark.parametrize("text, seconds", [("45m", 2700), ("2h", 7200), ("1h30m", 5400), ("90s", 90), ("12s", 12)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration():
    with pytest.raises(UsageError, match="time-budget"):
        parse_duration("soon")
    with pytest.raises(UsageError, match="give a unit, e.g. 45s or 45m"):  # 45 was read as seconds silently
        parse_duration("45")


def test_json_state_is_versioned(finished):
    data = json.loads((finished[0] / STATE_FILE).read_text())
    assert data["schema_version"] == 4 and os.path.isabs(data["model"]) and len(data["model_code_sha256"]) == 64
    # schema 2 lacked a round's real_support, schema 3 the code's hash: both read, as the current schema
    data["schema_version"] = 2
    data.pop("model_code_sha256")
    for r in data["rounds"]:
        r.pop("real_support", None)
    (finished[0] / "s2.json").write_text(json.dumps(data))
    st = AutoloopState.read(finished[0] / "s2.json")
    assert st.schema_version == 4 and all(r.real_support is None for r in st.rounds) and st.model_code_sha256 is None


def test_a_schema1_state_is_read_or_refused_by_what_it_can_say(finished, tmp_path):
    """Schema 1 had no stop_kind (so a larger limit could not go on) and decided in one step (so a state
    killed mid-decide cannot say which engine holds the dropped plugins)."""
    from ytk_hookspecs.models import ArtifactError

    data = json.loads((finished[0] / STATE_FILE).read_text())
    data["schema_version"] = 1
    data.pop("stop_kind", None)
    for r in data["rounds"]:
        r.pop("losers_engine", None), r.pop("losers_ms", None), r.pop("real_support", None)
    for reason, kind in [("reached --max-rounds 2", "max_rounds"), ("round 1 gained 0.000 ms, under --min-gain-ms "
                         "0.1 ms", "min_gain"), ("time budget of 60 s spent", "time_budget"), ("no candidate left",
                                                                                             "nothing_left")]:
        (tmp_path / "s.json").write_text(json.dumps({**data, "finished": True, "stop_reason": reason}))
        st = AutoloopState.read(tmp_path / "s.json")
        assert st.stop_kind == kind and st.schema_version == 4
    rnd = next(r for r in data["rounds"] if r["candidates"] and r["result_bundle"])
    rnd["stage"] = "decide"
    for c in rnd["candidates"]:
        if c["dropped_at"] == "decide":
            c.update(status="built", dropped_at=None)
    (tmp_path / "s.json").write_text(json.dumps(data))
    # nothing dropped yet: resumable
    assert AutoloopState.read(tmp_path / "s.json").rounds[rnd["index"] - 1].stage == "decide"
    rnd["candidates"][0].update(status="dropped", dropped_at="decide", reason="lost")
    rnd["losers_engine"], rnd["losers_ms"] = rnd["result_bundle"], rnd["result_ms"]
    (tmp_path / "s.json").write_text(json.dumps(data))
    assert AutoloopState.read(tmp_path / "s.json").rounds[rnd["index"] - 1].losers_engine  # two-step: resumable
    rnd["losers_engine"] = rnd["losers_ms"] = None  # the one-step decide's kill point: which engine is which?
    (tmp_path / "s.json").write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="stopped mid-decide by an older ytk"):
        AutoloopState.read(tmp_path / "s.json")


def test_a_plugin_failing_numerics_never_reaches_the_final_engine(tmp_path, monkeypatch):
    """The first plugin seen in a compiled engine is made to fail verify: the loop must find it by
    checking plugins one at a time, drop it with the numerics error, and keep the others."""
    import ytk_core.stages.verify as verify_mod
    from ytk_core.autoloop.run import run_autoloop
    from ytk_core.bundle import EngineBundle

    real = verify_mod.run_verify  # the loop imports it per call; the final report keeps the real one
    poisoned: dict[str, str] = {}

    def verify(ref, bundles, **kw):  # type: ignore[no-untyped-def]
        names = {p.name for p in EngineBundle.open(Path(bundles[0])).manifest.plugins}
        if names and not poisoned:
            poisoned["name"] = sorted(names)[0]
        if poisoned.get("name") in names:
            bad = types.SimpleNamespace(output="y", detail="max rel err 0.5 > 0.01 (injected)")
            return types.SimpleNamespace(passed=False, failures=lambda: [bad], output_text=lambda name: name)
        return real(ref, bundles, **kw)

    monkeypatch.setattr(verify_mod, "run_verify", verify)
    rep = run_autoloop(MODEL, ORIN, "fp16", tmp_path / "w",
                       BackendChoice(engine="mock", kernelgen="mock", builder="mock"), 1, 0.001, 2, None)
    st = rep.state
    name = poisoned["name"]
    dropped = {c.name: c for c in st.rounds[0].candidates if c.status == "dropped"}
    assert name in dropped and dropped[name].reason.startswith("numerics:") and "injected" in dropped[name].reason
    assert dropped[name].dropped_at == "numerics"
    assert any(h.startswith(f"dropped {name} ({dropped[name].selector}): numerics:") for h in st.history)
    assert any(c.status == "kept" for c in st.rounds[0].candidates)  # the round went on with the others
    assert name not in {p.name for p in st.best.plugins}
    final = EngineBundle.open(tmp_path / "w" / st.best.bundle).manifest
    assert name not in {p.name for p in final.plugins}


def _autoloop_with_generator(tmp_path: Path, name: str, submit):  # type: ignore[no-untyped-def]
    """run_autoloop on the mock engine and builder with a test generator ``name`` (3 rounds, 0.001 ms)."""
    return autoloop_with_generator(tmp_path / "w", name, submit, MODEL)


def test_reoptimization_swaps_in_a_better_kernel_for_a_kept_plugin(tmp_path):
    """A generator whose first kernels reach 45% of the floor and whose re-optimizations reach the
    mock's usual figure: round 1 keeps the slow kernels, a later round re-optimizes them (their
    "ms/site to beat" leaves headroom) and swaps the faster ones in, under the same plugin names."""
    from ytk_backend_mock.plugin import MockBackend

    seen: list = []

    def submit(request, ctx):  # type: ignore[no-untyped-def]
        cfg = dict(request.config)
        seen.append(request.reoptimize)
        if request.reoptimize is None:
            cfg["mock_bandwidth_fraction"] = "0.45"
        return MockBackend().submit(request.model_copy(update={"config": cfg}), ctx)

    rep = _autoloop_with_generator(tmp_path, "stepgen", submit)
    st = rep.state
    first = {c.name for c in st.rounds[0].candidates if c.status == "kept"}
    reopt = [c for rr in st.rounds[1:] for c in rr.candidates if c.replaces]
    assert first and reopt, [(rr.index, [(c.name, c.status, c.reason) for c in rr.candidates]) for rr in st.rounds]
    assert {c.replaces for c in reopt} <= first and all(c.name == c.replaces for c in reopt)
    assert all(c.ms_to_beat and c.ms_to_beat > 0 for c in reopt)
    assert any(r is not None and r.ms_to_beat > 0 for r in seen)
    swapped = [c for c in reopt if c.status == "kept"]
    assert swapped, [(c.name, c.status, c.reason) for c in reopt]
    names = [p.name for p in st.best.plugins]
    assert len(names) == len(set(names))  # the re-optimized kernel replaced the old one, same name
    for c in swapped:
        assert next(p for p in st.best.plugins if p.name == c.name).replaces == c.name
    assert st.best.ms < next(rr.result_ms for rr in st.rounds if rr.index == 1)
    # each plugin is re-optimized at most once
    assert len({c.replaces for c in reopt}) == len(reopt)


def test_a_damaged_state_resumes_from_the_last_good_one(finished, tmp_path):
    """autoloop.json damaged at rest (a truncated copy, a bad edit): the resume takes autoloop.prev.json,
    one save older, says so, and keeps that good copy while the damaged file is replaced."""
    import shutil

    w = tmp_path / "damaged"
    shutil.copytree(finished[0], w)
    prev = w / "autoloop.prev.json"
    assert prev.is_file() and AutoloopState.read(prev).finished is not None
    good = state(w)
    (w / STATE_FILE).write_bytes((w / STATE_FILE).read_bytes()[:200])  # truncated
    r = autoloop(w, "--json")
    assert r.code == 0, r.stderr[-2000:]
    assert "resuming from the last good state autoloop.prev.json" in r.stderr and "Traceback" not in r.stderr
    st = state(w)
    assert st.finished and st.best.bundle == good.best.bundle
    # both damaged: one clear line, exit 2
    for f in (w / STATE_FILE, prev):
        f.write_text("{not json")
    r = autoloop(w)
    assert r.code == 2 and "no good autoloop.prev.json" in r.stderr and "Traceback" not in r.stderr
    assert "run again with --fresh" in r.stderr  # the way out it names works
    r = autoloop(w, "--fresh", "--max-rounds", "1")
    assert r.code == 0 and state(w).finished, r.stderr[-1500:]


def test_round0_prepare_is_recorded_and_not_traced_again(tmp_path):
    w = tmp_path / "r0"
    r = autoloop(w, crash_at="0:prepare")
    assert r.code == -9
    st = state(w)
    assert st.round0_prepare == "round0/prepare" and st.baseline is None
    onnx = w / "round0" / "prepare" / "model.onnx"
    stamp = onnx.stat().st_mtime_ns
    r = autoloop(w, "--max-rounds", "1")
    assert r.code == 0, r.stderr[-2000:]
    assert onnx.stat().st_mtime_ns == stamp  # the resumed run compiled the baseline from the recorded prepare
    assert state(w).baseline is not None


def test_a_killed_prepare_leaves_no_staging_directory_behind(tmp_path):
    """A staging directory of a process that is gone (a kill mid-prepare) is removed on the next run."""
    w = tmp_path / "stale"
    stale = w / "round1" / "prepare" / ".ytk-staging-999999999-0badc0de"
    stale.mkdir(parents=True)
    (stale / "model.onnx").write_bytes(b"half")
    r = autoloop(w, "--max-rounds", "1")
    assert r.code == 0, r.stderr[-2000:]
    assert not list(w.rglob(".ytk-staging-*"))


def test_what_to_ship_is_named_exported_and_rebuilds(finished, tmp_path):
    """The summary and report name the final bundle, the .so files and their selectors; --export copies
    exactly those; the one-line command rebuilds the final engine from them."""
    import shlex

    w, _ = finished
    dest = tmp_path / "ship"
    r = autoloop(w, "--export", dest)
    assert r.code == 0, r.stderr[-2000:]
    assert "ship (SIMULATED): " in r.stdout and "rebuild: ytk embedded compile" in r.stdout
    assert f"to {dest} (SIMULATED: a simulated engine's bundle and placeholder plugins" in r.stdout
    assert json.loads((dest / "ship.json").read_text())["simulated"] is True
    from ytk_core.autoloop.state import AutoloopState

    best = AutoloopState.read(w / "autoloop.json").best
    assert best.plugins and all(f".so  ({p.selector})" in r.stdout for p in best.plugins), r.stdout
    md = (w / "report" / "autoloop_report.md").read_text()
    assert "## What to ship" in md and "--custom-plugin" in md
    from ytk_core.autoloop.report import ShipList

    ship = ShipList.read(dest / "ship.json")
    kept = state(w).best.plugins
    assert sorted(p.name for p in ship.plugins) == sorted(p.name for p in kept) and kept
    assert all((dest / p.so).is_file() and p.so == f"plugins/{p.name}.so" for p in ship.plugins)
    assert (dest / ship.engine_bundle).is_file() and ship.onnx == "model.onnx" and (dest / ship.onnx).is_file()
    files = sorted(p.name for p in dest.rglob("*") if p.is_file())
    assert files == sorted(
        [Path(ship.engine_bundle).name, "model.onnx", "model.npz", "plugins.json", "ship.json"]
        + [f"{p.name}.so" for p in ship.plugins] + [f"{p.name}.so.admission.json" for p in ship.plugins]
        + [f"{p.name}.pt2" for p in ship.plugins])
    assert f"exported {len(files)} file(s) to {dest}" in r.stdout  # the count is what landed there
    # the exported ship.json's command rebuilds from the copies alone, wherever the folder is moved to
    assert str(w) not in ship.reproduce and str(tmp_path) not in ship.reproduce
    moved = tmp_path / "elsewhere" / "sh ip"
    moved.parent.mkdir()
    dest.rename(moved)
    rb = run_cli(*shlex.split(ship.reproduce)[1:], cwd=moved)
    assert rb.code == 0, rb.stderr[-2000:]
    moved.rename(dest)
    # the rebuild command, as printed, builds the final engine again
    args = shlex.split(r.stdout.split("rebuild: ", 1)[1].splitlines()[0])
    assert args[:3] == ["ytk", "embedded", "compile"]
    rb = run_cli(*args[1:], cwd=tmp_path)
    assert rb.code == 0, rb.stderr[-2000:]
    assert (tmp_path / "final.tgz").is_file()


def test_export_refuses_what_it_would_overwrite_or_ship_wrongly(finished, tmp_path):
    """--export never overwrites a user's files, never exports into the workdir, re-exports over an earlier
    export (whose stale files go), and never ships a file changed since the autoloop recorded its hash."""
    import shutil

    w0, _ = finished
    w = tmp_path / "w"
    shutil.copytree(w0, w, symlinks=True)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "model.onnx").write_text("my own file")
    for dest, says in ((mine, "holds no earlier export"), (w, "lies in the workdir"),
                       (w / "round1" / "plugins", "lies in the workdir"), (mine / "model.onnx", "is a file")):
        r = autoloop(w, "--export", dest)
        assert r.code == 2 and says in r.stderr, (dest, r.stderr[-1500:])
        assert "Traceback" not in r.stderr and r.stdout == ""  # refused before the loop ran
    assert (mine / "model.onnx").read_text() == "my own file"
    dest = tmp_path / "ship"
    assert autoloop(w, "--export", dest).code == 0
    (dest / "plugins" / "Stale.so").write_bytes(b"x")  # not named by the old ship.json: a user's file, stays
    old = next((dest / "plugins").glob("DwConv*.so"))
    old.rename(dest / "plugins" / "Gone.so")  # pretend the earlier export shipped another plugin
    ship = (dest / "ship.json").read_text().replace(old.name, "Gone.so")
    (dest / "ship.json").write_text(ship)
    assert autoloop(w, "--export", dest).code == 0
    assert not (dest / "plugins" / "Gone.so").exists() and old.is_file() and (dest / "plugins" / "Stale.so").exists()
    so = next(Path(p.so) for p in state(w).best.plugins if p.so)
    so = w / so if not so.is_absolute() else so
    so.write_bytes(so.read_bytes() + b"\0")  # changed after its admission
    r = autoloop(w, "--export", tmp_path / "ship2")
    assert r.code == 2 and "changed since the autoloop recorded it" in r.stderr, r.stderr[-1500:]
    assert not (tmp_path / "ship2" / "ship.json").exists()


def test_a_larger_time_budget_goes_on_where_the_spent_one_stopped(tmp_path):
    """A loop stopped by --time-budget 1s reprinted 'time budget of 1 s spent' for any later budget."""
    w = tmp_path / "tb"
    r = autoloop(w, "--time-budget", "1s")
    assert r.code == 0, r.stderr[-2000:]
    st = state(w)
    assert st.stop_kind == "time_budget" and not st.rounds and "a larger --time-budget" in st.stop_reason
    r = autoloop(w, "--time-budget", "1s")  # the same budget: nothing more to do
    assert r.code == 0 and not state(w).rounds
    r = autoloop(w, "--time-budget", "30m", "--max-rounds", "1")
    assert r.code == 0, r.stderr[-2000:]
    st = state(w)
    assert st.rounds and st.stop_kind != "time_budget" and st.best.ms < st.baseline.ms


def test_fixing_the_model_after_it_failed_runs_again_in_the_same_workdir(tmp_path):
    """The guide says: fix the cause and run the same command again. After a model that failed before any
    kernel was generated, that was refused as "holds an autoloop of ... differs" until --fresh; an edit after kernels
    were made asks (--resume or --fresh)."""
    model = tmp_path / "model.py"
    good = MODEL.read_text()
    model.write_text(good.replace("def forward(self, x):", "def forward(self, x):\n        raise ValueError('oops')",
                                  1))
    w = tmp_path / "w"
    r = ytk_inproc("autoloop", model, "-a", ORIN, "--workdir", w, "--max-rounds", "1", *MOCK)
    assert r.code == 2 and "oops" in r.stderr, r.stderr[-2000:]
    model.write_text(good)
    r = ytk_inproc("autoloop", model, "-a", ORIN, "--workdir", w, "--max-rounds", "1", *MOCK)
    assert r.code == 0 and "starting over" in r.stderr, r.stderr[-2000:]
    assert state(w).baseline is not None
    model.write_text(good + "\nAN_EDIT_AFTER_KERNELS_WERE_MADE = 1\n")  # now there is something to keep: asked
    r = ytk_inproc("autoloop", model, "-a", ORIN, "--workdir", w, "--max-rounds", "1", *MOCK)
    assert r.code == 2 and "code changed" in r.stderr and "--fresh" in r.stderr, r.stderr[-2000:]


def test_a_model_with_nothing_to_plug_says_so(tmp_path):
    """The stop reason said 'every proposal is plugged already or was dropped earlier' when propose had
    proposed nothing at all."""
    model = tmp_path / "model.py"
    model.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                     "        return x + 1\n\n\ndef get_fwd_args():\n    torch.manual_seed(0)\n"
                     "    return (torch.randn(1, 8, 4, 4),)\n")
    r = cli("autoloop", model, "-a", ORIN, "--workdir", tmp_path / "w", *MOCK)
    assert r.code == 0, r.stderr[-2000:]
    st = state(tmp_path / "w")
    assert st.stop_kind == "nothing_left"
    assert st.stop_reason.startswith("propose found no region worth a kernel in this model"), st.stop_reason


def test_a_loop_that_finds_everything_at_roofline_says_so(tmp_path):
    """--roofline 0.05 on a trial's U-Net: 1.00x with 'propose found no region worth a kernel' and no why."""
    r = autoloop(tmp_path / "w", "--roofline", "0.01")
    assert r.code == 0, r.stderr[-2000:]
    st = state(tmp_path / "w")
    assert st.stop_kind == "nothing_left" and "already reach --roofline 0.01 of their roofline bound" in \
        st.stop_reason and "a larger --roofline (at most 1) tries them" in st.stop_reason, st.stop_reason


def test_min_gain_as_a_share_of_the_baseline(tmp_path):
    """--min-gain-ms 5%: resolved against the measured baseline, shown as the user wrote it."""
    w = tmp_path / "pct"
    r = cli("autoloop", MODEL, "-a", ORIN, "--workdir", w, "--max-rounds", "2", "--min-gain-ms", "5%", *MOCK)
    assert r.code == 0, r.stderr[-2000:]
    st = state(w)
    assert st.limits.min_gain_pct == 5 and st.limits.gain_ms() == pytest.approx(0.05 * st.baseline.ms)
    r = cli("autoloop", MODEL, "-a", ORIN, "--workdir", tmp_path / "bad", "--min-gain-ms", "lots", *MOCK)
    assert r.code == 2 and "--min-gain-ms 'lots'" in r.stderr and "Traceback" not in r.stderr
    # a resume with other limits says which changed (it used to say only "resuming"); the report keeps the line
    r = cli("autoloop", MODEL, "-a", ORIN, "--workdir", w, "--max-rounds", "3", "--min-gain-ms", "0.2ms", *MOCK)
    assert r.code == 0, r.stderr[-2000:]
    line = "limits changed since the last run: --max-rounds 2 -> 3, --min-gain-ms 5% -> 0.2 ms"
    assert line in r.stderr, r.stderr[-2000:]
    assert line in (w / "report" / "autoloop_report.md").read_text()
    r = cli("autoloop", MODEL, "-a", ORIN, "--workdir", w, "--max-rounds", "3", "--min-gain-ms", "0.2ms", *MOCK)
    assert r.code == 0, r.stderr[-2000:]  # a resume that failed would say nothing of limits either
    assert "limits changed" not in r.stderr


def test_the_report_says_where_the_time_went(finished):
    w, _ = finished
    st = state(w)
    assert set(st.round0_s) == {"prepare", "compile"} and all(v >= 0 for v in st.round0_s.values())
    assert {"propose", "kernelgen", "build", "compile"} <= set(st.rounds[0].stage_s)
    md = (w / "report" / "autoloop_report.md").read_text()
    table = md.split("## Time per stage (s)")[1].split("\n## ")[0]
    assert "| round | propose | carve | kernelgen | build | compile | verify | decide | bookkeeping | total |" in table
    # bundle writes and state saves, measured: some time, and no more than the stages that contain them
    assert 0 < st.round0_bookkeeping_s <= sum(st.round0_s.values())
    assert all(0 <= r.bookkeeping_s <= sum(r.stage_s.values()) + 0.02 for r in st.rounds if r.stage_s)
    assert st.rounds[0].bookkeeping_s > 0  # round 1 wrote its engine bundle
    assert re.search(r"\| 1 \|.*\| \d+\.\d \(\d+%\) \| [\d.]+ \|", table), table
    assert table.count("\n| 0 |") == 1 and "\n| 1 |" in table


def test_the_time_table_shows_the_gates_share_of_build():
    from types import SimpleNamespace

    from ytk_core.autoloop.report import _time_table
    from ytk_core.autoloop.state import RoundRecord

    rnd = RoundRecord(index=1, stage_s={"propose": 1.0, "build": 92.7, "compile": 10.0}, admission_s=55.04)
    table = "\n".join(_time_table(SimpleNamespace(round0_s={}, rounds=[rnd])))  # type: ignore[arg-type]
    assert "| 1 | 1.0 | - | - | 92.7 (55.0) | 10.0 | - | - | 0.0 (0%) | 103.7 |" in table
    assert "admission gate" in table


def test_resume_with_changed_inputs_asks_and_the_user_chooses(tmp_path):
    """A new input size must not reprint the old result: the resume says what changed; --resume goes on with
    the recorded results, --fresh starts over."""
    src = MODEL.read_text().replace("torch.randn(1, 3, 256, 256,", "torch.randn(1, 3, SIZE, SIZE,")
    src = src.replace("import torch\n",
                      "import os\n\nimport torch\n\nSIZE = int(os.environ.get('TINY_SIZE', '64'))\n", 1)
    model = tmp_path / "model.py"
    model.write_text(src)
    w = tmp_path / "w"

    def run(*extra, size="64"):  # type: ignore[no-untyped-def]
        return cli("autoloop", model, "-a", ORIN, "--workdir", w, "--max-rounds", "1", "--min-gain-ms", "1%",
                   *MOCK, *extra, TINY_SIZE=size)

    r = run()
    assert r.code == 0, r.stderr[-2000:]
    assert state(w).input_shapes == [[1, 3, 64, 64]]
    r = run(size="96")
    assert r.code == 2 and "[[1, 3, 96, 96]]" in r.stderr and "--fresh" in r.stderr and "--resume" in r.stderr
    r = run("--resume", size="96")
    assert r.code == 0 and "going on with" in r.stderr
    assert state(w).input_shapes == [[1, 3, 64, 64]]
    # the summary and the report, not only a stderr warning, say the figures predate the change
    assert "note: resumed although get_fwd_args() gives inputs [[1, 3, 96, 96]]" in r.stdout, r.stdout
    assert "Resumed with `--resume` although" in (w / "report" / "autoloop_report.md").read_text()
    js = run("--resume", "--json", size="96")
    assert js.code == 0 and "[[1, 3, 96, 96]]" in json.loads(js.stdout)["stale"][0]
    r = run("--fresh", size="96")
    assert r.code == 0, r.stderr[-2000:]
    assert state(w).input_shapes == [[1, 3, 96, 96]]
    r = run("--fresh", "--resume")
    assert r.code == 2 and "contradict" in r.stderr


def test_a_model_that_is_not_the_same_each_time_stops_the_loop(tmp_path):
    """Unseeded weights: each round's prepare gives another reference, so an engine that passes in its round
    fails against round 0's. The loop must stop and say why, never ship it with exit 0."""
    src = MODEL.read_text().replace("        torch.manual_seed(0)\n", "")
    src = src.replace("m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)",
                      "m.running_var.copy_(torch.rand(m.num_features) + 0.5)")
    assert "manual_seed(0)" not in src
    model = tmp_path / "model.py"
    model.write_text(src)
    r = cli("autoloop", model, "-a", ORIN, "--workdir", tmp_path / "w", "--max-rounds", "1", *MOCK)
    assert r.code == 2, (r.code, r.stderr[-2000:])
    assert "model.py gives other outputs (Model()) each time it is prepared" in r.stderr and "seed" in r.stderr
    assert "Traceback" not in r.stderr


def test_an_unseeded_model_is_named_by_its_own_file(tmp_path):
    """The user's file is rarely called model.py: the error names the file they passed, not ytk's default."""
    import numpy as np

    from ytk_core.autoloop.carving import ModelNotDeterministic, same_model_each_time

    for d, seed in (("r0", 0), ("r1", 1)):
        (tmp_path / d).mkdir()
        x = np.random.default_rng(seed).standard_normal((1, 3, 4, 4)).astype("float32")
        np.savez(tmp_path / d / "model.npz", x=x)
        np.savez(tmp_path / d / "model.reference.npz", y=x)
    with pytest.raises(ModelNotDeterministic) as e:
        same_model_each_time(tmp_path / "r0", tmp_path / "r1", tmp_path / "mynet.py")
    assert str(e.value).startswith("mynet.py gives other inputs") and "model.py" not in str(e.value).split("(")[0]


def test_a_final_engine_that_fails_verify_exits_5(finished, tmp_path, monkeypatch):
    """Whatever let it through, a final verify that fails is exit 5 with the reason, not a quiet 0."""
    import shutil

    import numpy as np

    w = tmp_path / "w"
    shutil.copytree(finished[0], w)
    st = state(w)
    ref = w / st.baseline.prepare_dir / "model.reference.npz"
    data = {k: -v for k, v in np.load(ref).items()}  # a reference the engines cannot match
    np.savez(ref, **data)
    r = autoloop(w)
    assert r.code == 5, (r.code, r.stderr[-2000:])
    assert "the final engines fail numerics" in r.stderr and "do not ship them" in r.stderr
    r = autoloop(w, "--json")
    assert r.code == 5 and r.json()["verify"]["passed"] is False  # one JSON document: the report


def test_ctrl_c_says_how_to_resume(tmp_path):
    """A Ctrl-C ends the loop with exit 130 and one line saying the same command resumes it."""
    import shutil
    import signal
    import subprocess
    import sys
    import time

    exe = shutil.which("ytk", path=str(Path(sys.executable).parent)) or "ytk"
    env = {**os.environ, "YTK_AUTOLOOP_CRASH_AT": ""}
    p = subprocess.Popen([exe, "autoloop", str(MODEL), "-a", ORIN, "--workdir", str(tmp_path / "w"), *MOCK],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while not (tmp_path / "w" / STATE_FILE).is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    if p.returncode == 0:  # only a loop that really finished first may exit 0 (a swallowed Ctrl-C did once)
        assert state(tmp_path / "w").finished, "exit 0 after a Ctrl-C with the loop unfinished"
        pytest.skip("the loop finished before the interrupt landed")
    assert p.returncode == 130, err[-2000:]
    assert "interrupted; run the same command again to resume" in err and "Traceback" not in err


def test_a_workdir_that_is_a_file_is_named_as_such(tmp_path):
    f = tmp_path / "model.py"
    f.write_text("x")
    r = cli("autoloop", MODEL, "-a", ORIN, "--workdir", f, *MOCK)
    assert r.code == 2 and "is a file, not a directory" in r.stderr


def test_a_kernelgen_chain_tries_the_next_generator_and_says_who_made_each(tmp_path):
    """--kernelgen failgen,mock: every region's job fails on the first generator and the mock makes the
    kernel; each plugin records that, with why the first gave none."""
    from ytk_hookspecs.models import KernelGenResult

    def submit(request, ctx):  # type: ignore[no-untyped-def]
        return KernelGenResult(job_id="failgen-1", status="failed", message="no variant beat the region's ops")

    rep = autoloop_with_generator(tmp_path / "w", "failgen", submit, MODEL, rounds=1, kernelgen="failgen,mock")
    assert rep.state.backends.kernelgen == "failgen,mock"
    assert {"kernelgen:failgen", "kernelgen:mock"} <= set(rep.state.backend_versions)
    kept = [c for c in rep.state.rounds[0].candidates if c.status == "kept"]
    assert kept, [(c.name, c.status, c.reason) for c in rep.state.rounds[0].candidates]
    assert all(c.generator == "mock" and c.generator_notes and "no variant beat" in c.generator_notes[0]
               for c in kept)


def test_a_round_under_the_minimum_gain_is_not_shipped(tmp_path):
    """A round that made the engine faster, but by less than --min-gain-ms, keeps nothing: the engine to
    ship stays the baseline, and the drop reasons say why. The bar is set between the round's gain and its
    largest region (so that region is still proposed, and the round gains at most what it gained before)."""
    first = tmp_path / "first"
    r = cli("autoloop", MODEL, "-a", ORIN, "--workdir", first, "--max-rounds", "1", "--min-gain-ms", "0.001",
            *MOCK)
    assert r.code == 0, r.stderr[-2000:]
    st = state(first)
    gain, largest = st.rounds[0].gain_ms, max(c.region_ms for c in st.rounds[0].candidates)
    assert gain is not None and 0 < gain < largest, (gain, largest)
    w = tmp_path / "high"
    r = cli("autoloop", MODEL, "-a", ORIN, "--workdir", w, "--max-rounds", "1", "--min-gain-ms",
            f"{(gain + largest) / 2:.6f}ms", *MOCK)
    assert r.code == 0, r.stderr[-2000:]
    st = state(w)
    rnd = st.rounds[0]
    assert rnd.gain_ms is not None and 0 < rnd.gain_ms < st.limits.gain_ms(), (rnd.gain_ms, st.limits)
    assert not [c for c in rnd.candidates if c.status == "kept"]
    assert any("not worth shipping" in c.reason for c in rnd.candidates if c.dropped_at == "decide")
    assert st.best.round == 0 and not st.best.plugins
    # the rounds table shows this round's (faster, unshipped) p50: its note says nothing was kept
    assert rnd.note.startswith("nothing kept: the gain is under --min-gain-ms") and "best stays" in rnd.note
    assert "nothing kept: the gain is under --min-gain-ms" in (w / "report" / "autoloop_report.md").read_text()


def test_the_report_names_the_simulated_device_of_the_asked_target(tmp_path):
    """autoloop_report.md said 'simulated DRIVE AGX Orin' for every target, an H100/H200 one too."""
    r = cli("autoloop", MODEL, "-a", "x86_64-sm90-linux-cu130-trt10", "--workdir", tmp_path / "w",
            "--max-rounds", "1", *MOCK)
    assert r.code == 0, r.stderr[-2000:]
    md = (tmp_path / "w" / "report" / "autoloop_report.md").read_text()
    line = next(ln for ln in md.splitlines() if "comes from the mock backend's simulated" in ln)
    assert "H100/H200" in line and "Orin" not in line, line


@pytest.mark.parametrize("args, says", [
    (["--max-rounds", "0"], "--max-rounds must be at least 1, not 0"),
    (["--max-jobs", "0"], "--max-jobs must be at least 1, not 0"),
])
def test_a_bad_count_names_its_own_flag(tmp_path, args, says):
    r = ytk_inproc("autoloop", MODEL, "-a", ORIN, "--workdir", tmp_path / "w", *args, *MOCK)
    assert r.code == 2 and says in r.stderr, r.stderr[-1000:]


def test_a_run_refused_before_it_began_leaves_no_workdir_it_made(tmp_path):
    """A bad --kernelgen is found after the workdir exists: the empty workdir it made goes again, and a
    workdir the user had is kept."""
    r = ytk_inproc("autoloop", MODEL, "-a", ORIN, "--workdir", tmp_path / "w", "--engine", "mock", "--builder", "mock",
                   "--kernelgen", "nosuchgen")
    assert r.code == 2 and "unknown kernelgen backend 'nosuchgen'" in r.stderr, r.stderr[-1000:]
    assert not (tmp_path / "w").exists()
    (tmp_path / "mine").mkdir()
    r = ytk_inproc("autoloop", MODEL, "-a", ORIN, "--workdir", tmp_path / "mine", "--engine", "mock", "--builder",
                   "mock", "--kernelgen", "nosuchgen")
    assert r.code == 2 and (tmp_path / "mine").is_dir()


def test_a_directory_given_as_the_model_is_called_one(tmp_path):
    r = ytk_inproc("autoloop", tmp_path, "-a", ORIN, "--workdir", tmp_path / "w", *MOCK)
    assert r.code == 2 and "is a directory: pass the model.py file in it" in r.stderr, r.stderr[-1000:]


def test_the_real_generators_line_counts_the_plugged_regions_and_groups_the_refusals(finished):
    """The line a simulated run ends with: how many of the plugged regions the real chain takes, the commonest
    refusals (with their counts), and none when no round asked (a real generator in the loop)."""
    from ytk_core.autoloop.report import real_gpu_line
    from ytk_core.autoloop.state import PluginRecord, RealSupport

    w, _ = finished
    st = state(w)
    kept = [PluginRecord(name=n, selector=f"yasp::{n}=X", origin_round=1, region_ms=1.0, sites=1)
            for n in ("A", "B", "C", "D")]
    for r in st.rounds:  # every round records what propose asked; this test puts its own answer in round 1
        r.real_support = None
    st.rounds[0].real_support = RealSupport(chain="templates", takes=["A"],
                                            refuses={"B": "no template for a gemm region",
                                                     "C": "no template for a gemm region", "D": "softmax attention"})
    line = real_gpu_line(st, kept)
    assert line.startswith("on a GPU the automatic kernel generator (templates) would take 1 of the 4 plugged "
                           "regions; not the rest: no template for a gemm region (2: B, C); softmax attention "
                           "(1: D)"), line
    # five reasons: the line names three and counts the rest (it used to drop them without a word)
    kept6 = kept + [PluginRecord(name=n, selector=f"yasp::{n}=X", origin_round=1, region_ms=1.0, sites=1)
                    for n in ("E", "F")]
    st.rounds[0].real_support = RealSupport(chain="templates", takes=["A"],
                                            refuses={"B": "r1", "C": "r1", "D": "r2", "E": "r3", "F": "r4"})
    assert real_gpu_line(st, kept6).startswith("on a GPU the automatic kernel generator (templates) would take 1 "
                                               "of the 6 plugged regions; not the rest: r1 (2: B, C); r2 (1: D); "
                                               "r3 (1: E); 1 other reason(s) for 1 more (F, ...)")
    st.rounds[0].real_support = RealSupport(chain="", refuses={n: "no real kernel generator is installed"
                                                               for n in "ABCD"})
    assert real_gpu_line(st, kept).startswith("no real kernel generator is installed: on a GPU none of the 4 ")
    for r in st.rounds:
        r.real_support = None
    assert real_gpu_line(st, kept) is None


def test_a_resume_with_a_auto_that_resolves_elsewhere_is_refused(finished, monkeypatch):
    """-a auto on another machine (here: one whose GPU makes it an sm_90 host) used to go on with the workdir's
    Orin results as if nothing had changed."""
    import ytk_core.autoloop.run as run_mod
    from ytk_core.autoloop.run import run_autoloop

    w, _ = finished
    monkeypatch.setattr(run_mod, "_resolve_arch", lambda arch: "x86_64-sm90-linux-cu130-trt10")
    with pytest.raises(UsageError, match="-a auto is x86_64-sm90-linux-cu130-trt10 on this machine"):
        run_autoloop(MODEL, "auto", "fp16", w, BackendChoice(engine="mock", kernelgen="mock", builder="mock"), 3,
                     0.001, 2, None)


def test_a_missing_model_says_what_a_model_file_is(tmp_path):
    r = ytk_inproc("autoloop", tmp_path / "nope.py", "-a", ORIN, "--workdir", tmp_path / "w", *MOCK)
    assert r.code == 2 and "nope.py does not exist. Pass the path of a model.py that defines a Model class" in r.stderr
    assert not (tmp_path / "w").exists()


_RELU_GATED_SE = '''
import torch
from torch import nn


class Gate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        return x * torch.relu(self.expand(torch.relu(self.reduce(x.mean((2, 3), keepdim=True)))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.dw, self.gate = nn.Conv2d(32, 32, 3, 1, 1, groups=32), Gate(32)

    def forward(self, x):
        return self.gate(torch.relu(self.dw(x)))


def get_fwd_args():
    return (torch.randn(1, 32, 32, 32),)
'''


def test_what_a_gpu_would_plug_is_judged_on_the_carved_programs(tmp_path):
    """A squeeze-excite gated by a ReLU looks like one to propose (its sketch: likely), but the templates
    gate with sigmoid or hardsigmoid only: the simulated run's closing line counts it with the carved
    program's answer, not the sketch's."""
    model = tmp_path / "model.py"
    model.write_text(_RELU_GATED_SE)
    r = ytk_inproc("autoloop", model, "-a", ORIN, "--workdir", tmp_path / "w", "--min-gain-ms", "0", *MOCK,
                   YTK_EXAMPLE_SIZE="1x32x32")
    assert r.code == 0, r.stderr[-2000:]
    real = [rd.real_support for rd in state(tmp_path / "w").rounds if rd.real_support is not None][0]
    se = [n for n in [*real.takes, *real.refuses] if n.startswith("SE")]
    assert se and all(n in real.refuses and "gate relu" in real.refuses[n] for n in se), real
    assert re.search(r"would take 0 of the 1 plugged regions; not the rest: squeeze-excite gate relu", r.stdout), \
        r.stdout[-1500:]


def test_the_report_names_outputs_as_the_model_returns_them(tmp_path):
    """A model returning a dict: verify shows ``['cls_p1'] (conv2d_5)``, the autoloop report's numerics table
    showed only the exporter's node names (a new user's trial)."""
    r = cli("autoloop", REPO / "tests" / "data" / "shared_head_model.py", "-a", ORIN, "--workdir", tmp_path / "w",
            "--max-rounds", "1", *MOCK, YTK_EXAMPLE_SIZE="1x32x48")
    assert r.code == 0, r.stderr[-2000:]
    md = (tmp_path / "w" / "report" / "autoloop_report.md").read_text()
    table = md.split("## Numerics against torch", 1)[1].split("## Rounds", 1)[0]
    assert all(f"['{k}'] (" in table for k in ("cls_p1", "reg_p1", "cls_p2", "reg_p2")), table


def test_a_real_engine_with_only_simulated_generators_stops_before_round_one(tmp_path):
    """A new user's torch engine on CPU with the automatic (simulated) generator: the loop generated and built
    17 plugins, dropped every one at the admission gate (a real engine loads only admitted plugins) and then
    said "numerics pass". Every candidate is impossible there, so it stops first, in one line, exit 2."""
    cfg = tmp_path / "ytk.toml"
    cfg.write_text('[backends.torch]\ndevice = "cpu"\n')
    w = tmp_path / "al"
    r = cli("autoloop", MODEL, "-a", ORIN, "--workdir", w, "--engine", "torch", "--kernelgen", "mock",
            "--builder", "mock", YTK_CONFIG=str(cfg))
    assert r.code == 2, r.stderr[-2000:]
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert line and "the engine torch is real and the kernel generator mock is simulated" in line[0], r.stderr[-2000:]
    assert "No real generator can run here (" in line[0] and "--engine mock" in line[0]
    assert "Traceback" not in r.stderr and not (w / "round0").exists()


def test_with_a_real_generator_available_the_stop_names_it():
    """Naming the simulated generator where a real one is available: the line says which to name instead, not
    'run where a real generator is available'."""
    from tests.helpers import backend_object, backend_plugin
    from ytk_core.autoloop.run import _check_plugins_can_load
    from ytk_core.plugins import BackendManager
    from ytk_core.runtime import reset_runtime, runtime
    from ytk_hookspecs.models import ArchSpec

    engine = backend_object("realeng", ["engine"], compile=lambda r, c: None, profile=lambda r, c: None)
    gen_methods = dict(submit=lambda r, c: None, fetch=lambda j, o, c: None, supports=lambda r, c: None)
    gen = backend_object("realgen", ["kernelgen"], **gen_methods)
    sim = backend_object("simgen", ["kernelgen"], simulated=True, **gen_methods)
    reset_runtime()
    runtime()._mgr = BackendManager(autoload=False, extra_plugins={"p": backend_plugin(engine, gen, sim)})
    try:
        with pytest.raises(UsageError) as e:
            _check_plugins_can_load("realeng", "simgen", ArchSpec.parse(ORIN))
        _check_plugins_can_load("realeng", "simgen,realgen", ArchSpec.parse(ORIN))  # a real one in the chain
    finally:
        reset_runtime()
    assert "Name a real generator available here (--kernelgen realgen)" in str(e.value)
