"""The loop never dies on one candidate: a candidate refused at any stage is dropped with its stage and
reason, naming its selector, and the round goes on with the rest. Only what makes every candidate
impossible stops the loop, with one line and its exit code.

Each test plants one bad candidate (the stem conv of the tiny model, which would lose anyway) on the
mock backends and checks that the other (the depthwise conv) is still kept.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import simulated_plugin
from ytk_core.autoloop.state import BackendChoice
from ytk_core.errors import BackendError, RegionRefused, UsageError

pytestmark = pytest.mark.slow

MODEL = REPO / "tests" / "data" / "tiny_dw_model.py"
MIXED = REPO / "tests" / "data" / "tiny_mixed_model.py"
ORIN = "arm64-sm87-dos6010-cu114-trt86"
MOCK = {"engine": "mock", "kernelgen": "mock", "builder": "mock"}
GOOD, BAD = "DwConv3x3s1C64", "Conv3x3s2C3to16"
BAD_SEL = "yasp::Conv3x3s2C3to16=ConvNormAct@where=stem"


def cli(ytk, workdir: Path, model: Path = MODEL, **backends: str):  # type: ignore[no-untyped-def]
    """``ytk autoloop --json`` in-process, one round."""
    flags = [a for role, name in {**MOCK, **backends}.items() for a in (f"--{role}", name)]
    return ytk("autoloop", model, "-a", ORIN, "--workdir", workdir, "--max-rounds", "1", "--min-gain-ms", "0.001",
               *flags, "--json")


def check_dropped(r, workdir: Path, stage: str, reason_part: str, name: str = BAD, selector: str = BAD_SEL):  # type: ignore[no-untyped-def]
    """The loop ended normally, ``name`` was dropped at ``stage`` naming its selector, the rest was kept."""
    assert r.code == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    st = r.json()["state"]
    cands = {c["name"]: c for c in st["rounds"][0]["candidates"]}
    bad = cands[name]
    assert bad["status"] == "dropped" and bad["dropped_at"] == stage, bad
    assert reason_part in bad["reason"], bad["reason"]
    assert any(h.startswith(f"dropped {name} ({selector}): ") for h in st["history"]), st["history"]
    assert GOOD in {p["name"] for p in st["best"]["plugins"]}
    assert r.json()["final_ms"] < r.json()["baseline_ms"]
    md = (workdir / "report" / "autoloop_report.md").read_text()
    assert f"| 1 | {name} | {stage} | " in md and f"`{selector}`" in md and f"{name} ({stage})" in md
    return bad


def _prepare_calls(monkeypatch, plant=None):  # type: ignore[no-untyped-def]
    """Wrap the prepare the loop calls; ``plant(selectors)`` may raise. Returns the selector lists it got."""
    import ytk_core.stages.prepare as prepare_mod

    real, calls = prepare_mod.do_prepare, []

    def do_prepare(model, onnx, npz, ref, selectors, debug_taps=False):  # type: ignore[no-untyped-def]
        calls.append(sorted(selectors))
        if plant is not None:
            plant(selectors)
        return real(model, onnx, npz, ref, selectors, debug_taps=debug_taps)

    monkeypatch.setattr(prepare_mod, "do_prepare", do_prepare)
    return calls


# -- carve ---------------------------------------------------------------------------------------------


def test_carve_refusing_one_selector_drops_it(ytk, tmp_path, monkeypatch):
    def plant(selectors):  # type: ignore[no-untyped-def]
        if BAD_SEL in selectors:
            raise RegionRefused(BAD_SEL, "carve", "region stem contains 5 convolutions; fold_conv_bn lifts exactly "
                                                  "one (planted)")

    calls = _prepare_calls(monkeypatch, plant)
    r = cli(ytk, tmp_path / "w")
    check_dropped(r, tmp_path / "w", "carve", "carve refused it: region stem contains 5 convolutions")
    assert len(calls) == 3  # baseline, both (refused), the good one alone: no isolation needed


@pytest.mark.parametrize("phase", ["_plan_selector", "_carve_plugin"])
def test_a_carve_crash_on_one_selector_is_pinned_on_it_without_isolation(ytk, tmp_path, monkeypatch, phase):
    """A bug of the carve (a KeyError, not a refusal) in one selector's own work once named no selector,
    so the loop carved groups to find it (37 of 41 s in a trial). The carve now names it, says it is a
    bug, and the loop drops that one at once; the standalone prepare exits 1 with the selector."""
    import ytk_core.frontend.carve as carve_mod

    real = getattr(carve_mod, phase)

    def crash(first, *a, **kw):  # type: ignore[no-untyped-def]
        if (first if phase == "_plan_selector" else first.sel).text == BAD_SEL:
            raise KeyError("aten.convolution.default")
        return real(first, *a, **kw)

    monkeypatch.setattr(carve_mod, phase, crash)
    if phase == "_plan_selector":  # the loop once (the carve's naming is the same in both phases)
        calls = _prepare_calls(monkeypatch)
        r = cli(ytk, tmp_path / "w")
        check_dropped(r, tmp_path / "w", "carve", "carve refused it: internal carve error (a ytk bug; please report "
                      f"it) on '{BAD_SEL}': KeyError: 'aten.convolution.default'")
        assert len(calls) == 3  # baseline, both (the bad one named), the good one alone: no isolation carves
        assert "(-v shows its traceback)" in r.stderr
    out = tmp_path / "p"
    r = ytk("embedded", "prepare", MODEL, "--onnx-out", out / "m.onnx", "--npz-out", out / "m.npz", "--reference-out",
            out / "r.npz", "--plugin", BAD_SEL)
    assert r.code == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"internal carve error (a ytk bug; please report it) on '{BAD_SEL}': KeyError" in r.stderr
    monkeypatch.setenv("YTK_TRACEBACK", "1")  # as -vv: the bug's own traceback, then the one line
    r = ytk("embedded", "prepare", MODEL, "--onnx-out", out / "m.onnx", "--npz-out", out / "m.npz", "--reference-out",
            out / "r.npz", "--plugin", BAD_SEL)
    assert r.code == 1 and "Traceback" in r.stderr and ", in crash" in r.stderr, r.stderr[-2000:]


def test_carve_error_naming_nobody_is_isolated(ytk, tmp_path, monkeypatch):
    """The field's crash: a plain usage error that does not quote the selector. The loop checks the
    carve still works without new candidates, then carves them apart and drops only the bad one."""
    def plant(selectors):  # type: ignore[no-untyped-def]
        if BAD_SEL in selectors:
            raise UsageError("internal carve error: values of ['conv2d'] were not produced (planted)")

    calls = _prepare_calls(monkeypatch, plant)
    w = tmp_path / "w"
    r = cli(ytk, w)
    check_dropped(r, w, "carve", "carve refused it: internal carve error: values of ['conv2d'] were not produced")
    rnd = json.loads((w / "autoloop.json").read_text())["rounds"][0]
    good_sel = next(c["selector"] for c in rnd["candidates"] if c["name"] == GOOD)
    assert set(rnd["carve_failures"]) == {BAD_SEL, "\n".join(sorted([BAD_SEL, good_sel]))}
    assert set(rnd["prepares"]) == {"", good_sel}  # the no-candidate check, then the good one (reused as the round's)
    assert sum(1 for c in calls if c == [good_sel]) == 1


def test_unexpected_carve_error_pinned_on_the_right_candidate_and_resumed(tmp_path, monkeypatch):
    """Four candidates; a KeyError escapes the carve whenever one of them is in it. Killed after the first
    isolation carve, the resumed run carves none of the recorded ones again and drops only that one."""
    import ytk_core.autoloop.carving as carving_mod
    from ytk_core.autoloop.run import run_autoloop
    from ytk_core.autoloop.state import STATE_FILE, AutoloopState

    bad_sel = "yasp::DwConv7x7s1C32=ConvNormAct@where=*.2.depth_conv"

    def plant(selectors):  # type: ignore[no-untyped-def]
        if bad_sel in selectors:
            raise KeyError("aten.convolution.default")

    calls = _prepare_calls(monkeypatch, plant)

    class Killed(BaseException):
        pass

    real_checkpoint, seen = carving_mod.checkpoint, []

    def checkpoint(point: str) -> None:
        seen.append(point)
        if seen.count("1:carve") == 3:  # the full carve, the no-candidate check, one isolation carve
            raise Killed(point)
        real_checkpoint(point)

    monkeypatch.setattr(carving_mod, "checkpoint", checkpoint)
    w = tmp_path / "w"
    with pytest.raises(Killed):
        run_autoloop(MIXED, ORIN, "fp16", w, BackendChoice(**MOCK), 1, 0.001, 2, None)
    before = AutoloopState.read(w / STATE_FILE).rounds[0]
    recorded = set(before.prepares) | set(before.carve_failures)
    assert len(recorded) == 3
    monkeypatch.setattr(carving_mod, "checkpoint", real_checkpoint)
    calls.clear()
    rep = run_autoloop(MIXED, ORIN, "fp16", w, BackendChoice(**MOCK), 1, 0.001, 2, None)
    assert not recorded & {"\n".join(c) for c in calls}  # nothing recorded before the kill was carved again
    cands = {c.name: c for c in rep.state.rounds[0].candidates}
    bad = cands["DwConv7x7s1C32"]
    assert bad.status == "dropped" and bad.dropped_at == "carve" and bad.reason == \
        "carve refused it: internal carve error (a ytk bug; please report it): " \
        "KeyError: 'aten.convolution.default'"  # not passed off as an ordinary refusal
    assert all(c.status != "dropped" or c.dropped_at == "decide" for n, c in cands.items() if n != bad.name)
    assert {"DwConv5x5s1C64", "DwConv3x3s1C64"} <= {p.name for p in rep.state.best.plugins}
    assert len(rep.state.rounds[0].carve_failures) <= 4  # log2(4) levels, plus the four together


def test_carve_broken_for_everything_stops_the_loop(ytk, tmp_path, monkeypatch):
    """Once the baseline is done, every carve fails (even with no new candidate): nothing is dropped, the
    loop stops with one line and exit 2, and a run after the fix resumes the round."""
    broken = {"on": True}
    baseline_done = {"n": 0}

    def plant(selectors):  # type: ignore[no-untyped-def]
        baseline_done["n"] += 1
        if broken["on"] and baseline_done["n"] > 1:
            raise RuntimeError("the exporter lost its mind (planted)")

    _prepare_calls(monkeypatch, plant)
    w = tmp_path / "w"
    r = cli(ytk, w)
    assert r.code == 2, r.stderr[-2000:]
    assert "the carve fails even with no new candidate" in r.stderr and "RuntimeError: the exporter" in r.stderr
    assert "Traceback" not in r.stderr
    st = json.loads((w / "autoloop.json").read_text())
    assert st["rounds"][0]["stage"] == "prepare" and not st["rounds"][0]["carve_failures"]
    assert all(c["status"] != "dropped" for c in st["rounds"][0]["candidates"])
    broken["on"] = False
    r = cli(ytk, w)
    assert r.code == 0, r.stderr[-3000:]
    assert GOOD in {p["name"] for p in r.json()["state"]["best"]["plugins"]}


def test_a_disk_too_full_for_the_carve_stops_the_loop_and_blames_nobody(ytk, tmp_path, monkeypatch):
    """The carve's captures would not fit (a planted 0 bytes free once the baseline is done): the loop
    stops with the disk-full line and exit 1 before writing them, drops no candidate and leaves no
    half-carved dir; once there is room the same command resumes the round."""
    disk = {"full": True}

    def plant(selectors):  # type: ignore[no-untyped-def]
        if selectors and disk["full"]:
            monkeypatch.setenv("YTK_FREE_BYTES", "0")

    _prepare_calls(monkeypatch, plant)
    w = tmp_path / "w"
    r = cli(ytk, w)
    assert r.code == 1, r.stderr[-2000:]
    assert "no space left on the device writing" in r.stderr and "region(s) need ~" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    st = json.loads((w / "autoloop.json").read_text())
    rnd = st["rounds"][0]
    assert rnd["stage"] == "prepare" and not rnd["carve_failures"] and not rnd["prepares"]
    assert all(c["status"] != "dropped" for c in rnd["candidates"])
    assert not list((w / "round1").glob("prepare*")), "the carve that could not fit is not left behind"
    disk["full"] = False
    monkeypatch.delenv("YTK_FREE_BYTES")
    r = cli(ytk, w)
    assert r.code == 0, r.stderr[-3000:]
    assert GOOD in {p["name"] for p in r.json()["state"]["best"]["plugins"]}


# -- kernel generation and build -------------------------------------------------------------------------


def _install(**mods):  # type: ignore[no-untyped-def]
    """Make the next in-process ``ytk`` see the test backends ``mods`` beside the installed ones."""
    from ytk_core.logs import configure
    from ytk_core.plugins import BackendManager
    from ytk_core.runtime import reset_runtime, runtime

    configure(0, "auto")  # logs to stderr, as main() would, not to the stdout the test reads
    reset_runtime()
    runtime()._mgr = BackendManager(extra_plugins=mods)


def test_kernel_generation_job_raising_drops_only_it(ytk, tmp_path):
    from ytk_backend_mock.plugin import MockBackend

    def submit(request, ctx):  # type: ignore[no-untyped-def]
        if request.plugin_name == BAD:
            raise RuntimeError("the generator tripped over its own feet (planted)")
        return MockBackend().submit(request, ctx)

    _install(badgen=simulated_plugin("badgen", "kernelgen", submit=submit))
    w = tmp_path / "w"
    r = cli(ytk, w, kernelgen="badgen")
    check_dropped(r, w, "kernelgen",
                  "kernel generation: RuntimeError: the generator tripped over its own feet (planted)")
    # the round carved twice (with and without the dropped one); the finished round keeps the captures of
    # the best engine's carve only, and every carve's ONNX and JSON
    st = r.json()["state"]
    carves = sorted(st["rounds"][0]["prepares"].values())
    assert len(carves) == 2 and st["best"]["prepare_dir"] in carves
    for rel in carves:
        cdir = w / rel / "plugin_candidates"
        captures = [*cdir.glob("*.io.npz"), *cdir.glob("*.inputs.pt")]
        assert (w / rel / "model.onnx").is_file() and list(cdir.glob("*.pt2"))
        assert bool(captures) == (rel == st["best"]["prepare_dir"]), (rel, captures)


def test_a_failed_kernel_generation_job_is_said_once(ytk, tmp_path):
    """A job the generator reports failed: its drop reason names the job and the generator's words, and
    says "kernel generation" once (the report's why column and the event log read it as it is)."""
    from ytk_backend_mock.plugin import MockBackend
    from ytk_hookspecs.models import KernelGenResult

    def submit(request, ctx):  # type: ignore[no-untyped-def]
        if request.plugin_name == BAD:
            return KernelGenResult(job_id="failgen-7", status="failed", message="no variant beats torch (planted)")
        return MockBackend().submit(request, ctx)

    _install(failgen=simulated_plugin("failgen", "kernelgen", submit=submit))
    w = tmp_path / "w"
    reason = "kernel generation: job failgen-7 (backend failgen) failed: no variant beats torch (planted)"
    bad = check_dropped(cli(ytk, w, kernelgen="failgen"), w, "kernelgen", reason)
    assert bad["reason"] == reason
    assert f"| 1 | {BAD} | kernelgen | {reason} | `{BAD_SEL}` |" in (w / "report" / "autoloop_report.md").read_text()


def test_build_raising_drops_only_it(ytk, tmp_path):
    from ytk_backend_mock.plugin import MockBackend

    def build(request, ctx):  # type: ignore[no-untyped-def]
        if request.plugin_name == BAD:
            raise KeyError("sm_87")
        return MockBackend().build_plugin(request, ctx)

    _install(badbuild=simulated_plugin("badbuild", "builder", build_plugin=build))
    r = cli(ytk, tmp_path / "w", builder="badbuild")
    check_dropped(r, tmp_path / "w", "build", "build: KeyError: 'sm_87'")


# -- engine compile ----------------------------------------------------------------------------------------


def _compile_plant(monkeypatch, fail):  # type: ignore[no-untyped-def]
    """Wrap run_compile; ``fail(plugin_names, call_number)`` may raise."""
    import ytk_core.stages.compile as compile_mod

    real, calls = compile_mod.run_compile, []

    def run_compile(arch, precision, onnx, npz, output, custom_plugins=None, **kw):  # type: ignore[no-untyped-def]
        names = sorted(Path(p).stem for p in custom_plugins or [])
        calls.append(names)
        fail(names, len(calls))
        return real(arch, precision, onnx, npz, output, custom_plugins, **kw)

    monkeypatch.setattr(compile_mod, "run_compile", run_compile)
    return calls


@pytest.mark.parametrize("error", [BackendError("engine build failed: plugin layer rejected (planted)"),
                                   KeyError("plugin_field")], ids=["stage-error", "key-error"])
def test_engine_compile_failing_with_one_plugin_drops_only_it(ytk, tmp_path, monkeypatch, error):
    def fail(names, _):  # type: ignore[no-untyped-def]
        if BAD in names:
            raise error

    calls = _compile_plant(monkeypatch, fail)
    bad = check_dropped(cli(ytk, tmp_path / "w"), tmp_path / "w", "compile", "engine compile: ")
    assert (("planted" in bad["reason"]) if isinstance(error, BackendError)
            else "KeyError: 'plugin_field'" in bad["reason"])
    assert [] in calls[1:] and [BAD] in calls and [GOOD] in calls  # the best engine again, then each alone


def test_engine_broken_after_the_baseline_stops_the_loop(ytk, tmp_path, monkeypatch):
    """Every compile after the baseline fails, the best engine's too: no candidate is blamed, the loop
    stops with exit 3 and one line, and a run with a working engine resumes the round."""
    broken = {"on": True}

    def fail(names, n):  # type: ignore[no-untyped-def]
        if broken["on"] and n > 1:
            raise BackendError("the engine's worker is gone (planted)")

    _compile_plant(monkeypatch, fail)
    w = tmp_path / "w"
    r = cli(ytk, w)
    assert r.code == 3, r.stderr[-2000:]
    assert "cannot compile even the best engine so far" in r.stderr and "Traceback" not in r.stderr
    st = json.loads((w / "autoloop.json").read_text())
    assert st["rounds"][0]["stage"] == "compile"
    assert all(c["status"] == "built" for c in st["rounds"][0]["candidates"])
    broken["on"] = False
    r = cli(ytk, w)
    assert r.code == 0, r.stderr[-3000:]
    assert GOOD in {p["name"] for p in r.json()["state"]["best"]["plugins"]}


def test_baseline_that_cannot_compile_stops_with_one_line(ytk, tmp_path, monkeypatch):
    def fail(names, n):  # type: ignore[no-untyped-def]
        raise KeyError("input_0")

    _compile_plant(monkeypatch, fail)
    r = cli(ytk, tmp_path / "w")
    assert r.code == 3 and "Traceback" not in r.stderr
    assert "the baseline engine cannot be compiled: KeyError: 'input_0'" in r.stderr


def test_an_unavailable_engine_stops_before_any_work(ytk, tmp_path):
    from ytk_core.runtime import runtime

    unavailable = [b.info.name for b in runtime().manager.for_role("engine") if not b.availability().available]
    if not unavailable:
        pytest.skip("every installed engine backend is available here")
    r = cli(ytk, tmp_path / "w", engine=unavailable[0])
    assert r.code == 3 and "not available on this machine" in r.stderr and "Traceback" not in r.stderr


# -- propose -------------------------------------------------------------------------------------------


class _Flagged:
    """A proposal seen through a propose that marks what the carve or generators refuse."""

    def __init__(self, proposal, **flags):  # type: ignore[no-untyped-def]
        self._proposal = proposal
        self.__dict__.update(flags)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._proposal, name)


def _flag_proposals(monkeypatch, **flags):  # type: ignore[no-untyped-def]
    """propose as the loop sees it, with ``flags`` set on the bad candidate's proposal."""
    import ytk_core.propose.api as propose_api

    real = propose_api.propose

    def propose(*args, **kw):  # type: ignore[no-untyped-def]
        report = real(*args, **kw)
        return types.SimpleNamespace(candidates=[_Flagged(p, **flags) if p.name == BAD else p
                                                 for p in report.candidates], plugged=report.plugged,
                                     real_support=report.real_support)

    monkeypatch.setattr(propose_api, "propose", propose)


@pytest.mark.parametrize("flags, reason", [
    ({"refused": "region stem contains 5 convolutions; no lift describes it"},
     "propose: region stem contains 5 convolutions; no lift describes it"),
    ({"supported": False, "support_certain": True, "support_backend": "templates",
      "support_why": "a dense 3x3 conv: templates cover depthwise kxk and 1x1 convs"},
     "propose: templates refuses it: a dense 3x3 conv: templates cover depthwise kxk and 1x1 convs"),
], ids=["carve-refuses", "generator-refuses"])
def test_a_proposal_marked_refused_costs_no_carve_or_job(ytk, tmp_path, monkeypatch, flags, reason):
    _flag_proposals(monkeypatch, **flags)
    calls = _prepare_calls(monkeypatch)
    w = tmp_path / "w"
    bad = check_dropped(cli(ytk, w), w, "propose", reason)
    assert bad["reason"] == reason
    assert not any(BAD_SEL in c for c in calls)
    assert not (w / "round1" / "sources" / f"{BAD}.module_source.py").exists()


def test_an_uncertain_refusal_leaves_it_to_the_job(ytk, tmp_path, monkeypatch):
    """A "no" from the sketch alone that the generator marks not certain (or a supports hook that broke)
    does not drop a candidate: the carved program and the job decide."""
    _flag_proposals(monkeypatch, supported=False, support_certain=False, support_why="the carved program decides")
    r = cli(ytk, tmp_path / "w")
    assert r.code == 0, r.stderr[-3000:]
    bad = next(c for c in r.json()["state"]["rounds"][0]["candidates"] if c["name"] == BAD)
    assert bad["dropped_at"] != "propose" and bad["source"]  # it got its kernel generation job


def test_a_carved_region_the_generator_refuses_gets_no_job(ytk, tmp_path):
    """After the carve the loop asks the generator (its supports()) before each job: a certain
    "no" drops the candidate at kernelgen with the generator's reason, and no job is submitted for it."""
    from ytk_backend_mock.plugin import MockBackend
    from ytk_hookspecs.models import SupportAnswer

    submitted: list[str | None] = []

    def supports(request, ctx):  # type: ignore[no-untyped-def]
        if request.candidate is not None and request.candidate.name == BAD:
            return SupportAnswer(supported=False, certain=True, why="a dense 3x3 conv (planted)")
        return SupportAnswer(supported=True, certain=False, why="the job decides")

    def submit(request, ctx):  # type: ignore[no-untyped-def]
        submitted.append(request.plugin_name)
        return MockBackend().submit(request, ctx)

    _install(pickygen=simulated_plugin("pickygen", "kernelgen", supports=supports, submit=submit))
    r = cli(ytk, tmp_path / "w", kernelgen="pickygen")
    check_dropped(r, tmp_path / "w", "kernelgen",
                  "kernel generation: pickygen refuses the carved region (no job was run): a dense 3x3 conv (planted)")
    assert BAD not in submitted and GOOD in submitted


def test_limits_and_backends_of_an_older_state_file_read_as_models():
    """A state written when limits were floats with -1 for "not set" (and backends a dict) still resumes."""
    from ytk_core.autoloop.state import AutoloopLimits, AutoloopState

    old = {"model": "m.py", "model_sha256": "0" * 64, "arch": "Orin", "precision": "fp16",
           "backends": {"engine": "mock", "kernelgen": "mock", "builder": "mock"},
           "limits": {"max_rounds": 4.0, "min_gain_ms": -1.0, "min_gain_pct": 1.0, "time_budget_s": -1.0}}
    st = AutoloopState.model_validate(old)
    assert st.limits == AutoloopLimits(max_rounds=4, min_gain_pct=1.0)
    assert st.backends.roles() == old["backends"] and st.min_gain_label() == "1%"


@pytest.mark.parametrize("defect", ["shift", "overflow"])
def test_a_round_failing_numerics_drops_only_the_region_the_debug_taps_name(tmp_path, defect):
    """Four candidates, one kernel with a planted defect: the round's engine fails numerics, one tapped
    engine names that region, it alone is dropped with the tap figures, the rest are kept -- without
    compiling each new plugin on its own."""
    from tests.helpers import autoloop_with_generator
    from ytk_backend_mock.plugin import MockBackend

    bad = "DwConv5x5s1C64"

    def submit(request, ctx):  # type: ignore[no-untyped-def]
        cfg = dict(request.config)
        if request.plugin_name == bad or (request.candidate and request.candidate.name == bad):
            cfg["mock_defect"] = defect
        return MockBackend().submit(request.model_copy(update={"config": cfg}), ctx)

    rep = autoloop_with_generator(tmp_path / "w", "plantgen", submit, MIXED, rounds=1)
    cands = {c.name: c for c in rep.state.rounds[0].candidates}
    assert bad in cands, sorted(cands)
    assert cands[bad].status == "dropped" and cands[bad].dropped_at == "numerics", cands[bad]
    assert cands[bad].reason.startswith(f"numerics (debug taps): {bad} (node ")
    assert "while its input" in cands[bad].reason
    kept = [c.name for c in cands.values() if c.status == "kept"]
    assert kept and bad not in kept, [(c.name, c.status, c.reason) for c in cands.values()]
    rdir = tmp_path / "w" / "round1"
    assert not list(rdir.glob("check-*.tgz")), "no plugin was compiled on its own"
    assert not list(rdir.glob("taps-*")), "the tapped carve is removed once read"


def test_a_round_of_one_new_plugin_failing_numerics_gets_the_tap_figures_too(tmp_path):
    """With one new plugin the loop compiled it alone again and dropped it as 'numerics: verify failed': the
    taps, which say where and by how much, were only asked for rounds of several."""
    from tests.helpers import autoloop_with_generator
    from ytk_backend_mock.plugin import MockBackend
    from ytk_hookspecs.models import KernelGenResult

    bad = "DwConv5x5s1C64"

    def submit(request, ctx):  # type: ignore[no-untyped-def]
        name = request.candidate.name if request.candidate else request.plugin_name
        if name != bad:
            return KernelGenResult(job_id=f"x-{name}", status="failed", message="only the planted region")
        cfg = {**dict(request.config), "mock_defect": "shift"}
        return MockBackend().submit(request.model_copy(update={"config": cfg}), ctx)

    rep = autoloop_with_generator(tmp_path / "w", "plantone", submit, MIXED, rounds=1)
    cands = {c.name: c for c in rep.state.rounds[0].candidates}
    assert cands[bad].status == "dropped" and cands[bad].dropped_at == "numerics", cands[bad]
    assert cands[bad].reason.startswith(f"numerics (debug taps): {bad} (node "), cands[bad].reason
    assert not list((tmp_path / "w" / "round1").glob("check-*.tgz")), "no second compile of it alone"
