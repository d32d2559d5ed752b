"""The model zoo (contrib/zoo) and its table (benchmarks/zoo.py).

The registry tests need torch only; the ones that build models or run the table need timm and
torchvision (requirements/zoo.txt, which ``make test`` installs) and are skipped, saying so, without.
The CI-subset run asserts what must hold today (every model prepares and compiles; every miss has a
reason), not that carves or generators succeed: those misses are the table's data.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ZOO_DIR = REPO / "contrib" / "zoo"
BENCH = REPO / "benchmarks" / "zoo.py"
if str(ZOO_DIR) not in sys.path:
    sys.path.append(str(ZOO_DIR))  # appended: the zoo's module names must not shadow anything else

from zoo_registry import DEPLOYED, SUBSETS, ZOO, entry  # noqa: E402

_MISSING = [m for m in ("timm", "torchvision") if importlib.util.find_spec(m) is None]
needs_zoo_extra = pytest.mark.skipif(
    bool(_MISSING), reason=f"{' and '.join(_MISSING)} not installed: the zoo's extra is "
                           "`.venv/bin/pip install -r requirements/zoo.txt` (make test installs it)")

#: The families the corpus must span (issue 22).
FAMILIES = {"MobileNetV2", "MobileNetV3", "EfficientNet", "EfficientNetV2", "MnasNet", "GhostNet", "RegNet", "ResNeXt",
            "ConvNeXt", "MobileViT", "MobileViTV2", "FastViT", "RepViT", "EdgeNeXt", "EfficientFormer", "PoolFormer",
            "DeiT", "Swin"}


# -- the registry -----------------------------------------------------------------------------------------
def test_registry_has_at_least_25_unique_entries() -> None:
    names = [e.name for e in ZOO]
    assert len(names) >= 25
    assert len(set(names)) == len(names)


def test_registry_spans_the_families() -> None:
    families = {e.family for e in ZOO}
    assert FAMILIES <= families, f"missing families: {sorted(FAMILIES - families)}"
    constructors = {e.constructor for e in ZOO}
    assert any(c.startswith("efficientvit_b") for c in constructors)
    assert any(c.startswith(("efficientvit_m", "efficientvit_l")) for c in constructors)
    assert {e.source for e in ZOO} == {"timm", "torchvision"}


def test_registry_tags() -> None:
    kinds = {e.attention for e in ZOO}
    assert {"none", "sdpa", "matmul-softmax", "linear"} <= kinds
    assert any(e.depthwise for e in ZOO) and any(not e.depthwise for e in ZOO)
    # the same ViT through both attention paths
    sdpa, matmul = entry("deit_tiny_sdpa"), entry("deit_tiny_matmul")
    assert sdpa.constructor == matmul.constructor
    assert (sdpa.attention, sdpa.fused_attn) == ("sdpa", True)
    assert (matmul.attention, matmul.fused_attn) == ("matmul-softmax", False)
    for e in ZOO:
        assert e.fused_attn is None or e.attention in ("sdpa", "matmul-softmax"), e.name
        assert len(e.default_size) == 3 and len(e.small_size) == 3, e.name
        if e.fixed_hw is not None:
            assert e.default_size[1:] == e.fixed_hw == e.small_size[1:], e.name
        else:
            assert all(v % e.multiple == 0 for v in e.small_size[1:] + e.default_size[1:]), e.name


def test_every_entry_has_a_model_file_defining_model_and_get_fwd_args() -> None:
    for e in ZOO:
        assert e.path.is_file(), f"{e.name}: {e.path} missing"
        tree = ast.parse(e.path.read_text())
        defined = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for target in node.targets
                   for t in (target.elts if isinstance(target, ast.Tuple) else [target]) if isinstance(t, ast.Name)}
        defined |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert {"Model", "get_fwd_args"} <= defined, e.name
        assert f'zoo_model("{e.name}")' in e.path.read_text(), e.name


def test_subsets_name_registry_entries() -> None:
    names = {e.name for e in ZOO}
    for subset, members in SUBSETS.items():
        assert set(members) <= names, subset
    assert 3 <= len(SUBSETS["ci"]) <= 5


def test_readme_lists_every_model() -> None:
    text = (ZOO_DIR / "README.md").read_text()
    table = text[text.index("## The models"):]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    listed = [row.split("`")[1] for row in rows]
    assert listed == [e.name for e in ZOO]
    for e in ZOO:
        sizes = ["x".join(map(str, s)) for s in (e.default_size, e.small_size)]
        assert all(s in rows[listed.index(e.name)] for s in sizes), e.name
    assert ", ".join(f"`{n}`" for n in SUBSETS["ci"]) in text.replace("\n", " ")


# -- the size rule ------------------------------------------------------------------------------------------
def test_input_size_rule(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from zoo_common import input_size

    cnn, fixed = entry("mobilenetv2_050"), entry("efficientformer_l1")
    monkeypatch.delenv("YTK_EXAMPLE_SIZE", raising=False)
    assert input_size(cnn) == (4, 1088, 1920)
    monkeypatch.setenv("YTK_EXAMPLE_SIZE", "2x64x96")
    assert input_size(cnn) == (2, 64, 96)
    assert input_size(fixed) == (2, 224, 224)  # its own resolution, the override's batch
    assert "only takes 224x224" in capsys.readouterr().err
    for bad in ("64x96", "1x65x96", "axbxc"):
        monkeypatch.setenv("YTK_EXAMPLE_SIZE", bad)
        with pytest.raises(ValueError, match="YTK_EXAMPLE_SIZE"):
            input_size(cnn)


# -- building models (timm, torchvision) --------------------------------------------------------------------
@needs_zoo_extra
def test_torchvision_and_timm_import_on_this_torch() -> None:
    code = ("import zoo_common; zoo_common.ensure_torchvision_importable(); import torchvision, timm; "
            "print(torchvision.models.get_model('mnasnet0_5', weights=None).__class__.__name__)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ZOO_DIR, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "MNASNet"


@needs_zoo_extra
def test_deit_attention_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two DeiT entries are one network (same seed) computing attention two ways."""
    import torch
    from zoo_common import build, zoo_model

    monkeypatch.setenv("YTK_EXAMPLE_SIZE", "1x32x48")
    outs = []
    for name, fused in (("deit_tiny_sdpa", True), ("deit_tiny_matmul", False)):
        model_fn, args_fn = zoo_model(name)
        model = model_fn()
        assert not model.training
        flags = {m.fused_attn for m in model.modules() if hasattr(m, "fused_attn")}
        assert flags == {fused}
        with torch.no_grad():
            outs.append(model(*args_fn()))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="fused_attn"):  # a wrong registry flag is caught, not ignored
        build(dataclasses.replace(entry("mobilenetv2_050"), fused_attn=True), (1, 64, 96))


@needs_zoo_extra
def test_a_deploy_entry_is_its_model_re_parameterised(monkeypatch: pytest.MonkeyPatch) -> None:
    """``<name>_deploy`` is the same network (same seed, same function) in the inference form it is shipped
    in: timm's re-parameterisation merged its branches and folded its BatchNorms."""
    import torch
    from torch import nn
    from zoo_common import zoo_model

    monkeypatch.setenv("YTK_EXAMPLE_SIZE", "1x64x96")
    deployed = [e for e in ZOO if e.deploy]
    assert {e.name for e in deployed} == {f"{n}_deploy" for n in DEPLOYED} and len(deployed) >= 5

    def norms(m: nn.Module) -> int:
        return sum(isinstance(q, nn.modules.batchnorm._BatchNorm) for q in m.modules())

    for name in ("repvit_m0_9", "levit_128s"):  # a conv net and a Linear+BN transformer
        outs, counts = [], []
        for variant in (name, f"{name}_deploy"):
            model_fn, args_fn = zoo_model(variant)
            model = model_fn()
            assert not model.training
            counts.append(norms(model))
            with torch.no_grad():
                outs.append(model(*args_fn()))
        assert counts[0] > 0 and counts[1] == 0, (name, counts)
        torch.testing.assert_close(outs[1], outs[0], rtol=1e-4, atol=1e-4 * float(outs[0].abs().max()))


@needs_zoo_extra
def test_mobileone_activations_stay_in_fp16_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """With made-up BatchNorm statistics MobileOne's summed branches reach 2e16 at the small size; its entry
    calibrates them on a seeded pass, and nothing is a no-op for it."""
    import dataclasses

    import torch
    from zoo_common import build, input_size

    monkeypatch.setenv("YTK_EXAMPLE_SIZE", "1x64x96")
    zoo = entry("mobileone_s0")
    assert zoo.calibrate_norms and entry("mobileone_s0_deploy").calibrate_norms
    peaks = []
    for e in (zoo, dataclasses.replace(zoo, calibrate_norms=False)):
        model, peak = build(e, input_size(e)), [0.0]

        def hook(_m, _i, out, peak=peak):  # type: ignore[no-untyped-def]
            if isinstance(out, torch.Tensor):
                peak[0] = max(peak[0], float(out.abs().max()))

        for m in model.modules():
            m.register_forward_hook(hook)
        with torch.no_grad():
            model(torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(2)))
        peaks.append(peak[0])
    assert peaks[0] < 1000 < 65504 < peaks[1], peaks
    bn = next(m for m in build(zoo, (1, 64, 96)).modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))


# -- the table ----------------------------------------------------------------------------------------------
def _bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("YTK_")}
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_bad_usage_is_one_line_and_status_2() -> None:
    p = _bench("--models", "no_such_model")
    assert p.returncode == 2
    assert "unknown zoo model(s) no_such_model" in p.stderr and "Traceback" not in p.stderr
    p = _bench("--size", "huge", "--models", "mobilenetv2_050")
    assert p.returncode == 2 and "--size" in p.stderr and "Traceback" not in p.stderr
    p = _bench("--engine", "nosuch", "--models", "mobilenetv2_050")
    assert p.returncode == 2 and "--engine nosuch: no installed engine backend" in p.stderr and "mock" in p.stderr


@needs_zoo_extra
def test_a_model_past_its_timeout_is_a_row_with_a_reason(tmp_path: Path) -> None:
    p = _bench("--models", "mobilenetv2_050", "--timeout", "1", "--workdir", str(tmp_path), "--json")
    assert p.returncode == 0, p.stderr
    (run,) = json.loads(p.stdout)["models"]
    assert run["status"] == "timeout"
    assert [m["stage"] for m in run["misses"]] == ["timeout"]


@needs_zoo_extra
@pytest.mark.slow
def test_ci_subset_table(tmp_path: Path) -> None:
    p = _bench("--subset", "ci", "--jobs", "2", "--json", "--workdir", str(tmp_path), "--timeout", "420", timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stdout + p.stderr
    report = json.loads(p.stdout)
    assert report["schema_version"] == 2
    runs = {r["name"]: r for r in report["models"]}
    assert list(runs) == SUBSETS["ci"]
    for name, run in runs.items():
        why = "; ".join(m["reason"] for m in run["misses"])
        assert run["onnx_nodes"] and run["coverage"] is not None, f"{name}: prepare failed: {why}"
        assert run["baseline_ms"] and run["simulated"] is True, f"{name}: compile failed: {why}"
        assert (tmp_path / name / "result.json").is_file()
        _every_miss_has_a_reason(run)
        # where the time went: every layer counted once, the proposals' ops among it
        fams = run["time_by_family"]
        assert abs(sum(f["ms"] for f in fams) - run["profile_ms"]) < 1e-3 * run["profile_ms"], name
        assert {f["where"] for f in fams} >= {"proposed"} and all(f["ms"] >= 0 for f in fams)
    # the human table renders from the same file
    assert (tmp_path / "zoo_report.json").is_file()


def _every_miss_has_a_reason(run: dict) -> None:
    misses = {(m["stage"], m["selector"]) for m in run["misses"]}
    assert all(m["reason"].strip() for m in run["misses"]), run["name"]
    if run["status"] != "done":
        assert run["misses"], f"{run['name']} stopped at {run['stage']} without a recorded reason"
    for c in run["candidates"]:
        if c["carved"] is False:
            assert ("carve", c["selector"]) in misses, c
        if c["supported"] is False:
            assert ("support", c["selector"]) in misses, c
        if c["recognised"] is False:
            assert ("templates", c["selector"]) in misses, c
    if run["carved_together"] is False:
        assert any(s == "carve-together" for s, _ in misses), run["name"]


def test_render_groups_misses_by_cause(tmp_path: Path) -> None:
    """--render prints an earlier run's tables: every miss, then the misses grouped by cause."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from zoo_results import CandidateRun, ModelRun, ZooReport
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    run = ModelRun(name="m", source="timm", family="F", depthwise=True, attention="none", size="1x64x96",
                   workdir=str(tmp_path), status="done", onnx_nodes=10, coverage=1.0, baseline_ms=0.5, simulated=True,
                   proposals=2, supports_hook=True, kernelgen="mock", carved_together=True)
    for i, channels in enumerate((672, 120)):
        sel = f"yasp::C{i}=Conv2d@where=*.{i}"
        run.candidates.append(CandidateRun(name=f"C{i}", selector=sel, carved=True, supported=True, recognised=False))
        run.miss("templates", f"channels {channels} -> 28: templates need multiples of 8", sel)
    report = ZooReport(arch="a", precision="fp16", backends={"engine": "mock"}, size_kind="small", jobs=1,
                       timeout_s=1, propose={"min_ms": 0, "launch_ms": 0}, workdir=str(tmp_path), wall_s=1,
                       models=[run])
    report.write(tmp_path / "zoo_report.json")
    p = _bench("--render", str(tmp_path / "zoo_report.json"))
    assert p.returncode == 0, p.stderr
    assert "2/2" in p.stdout and "0/2" in p.stdout  # carved, recognised
    assert "misses by cause (1 causes)" in p.stdout and "channels 672 -> 28" in p.stdout


def test_families_table_weighs_each_model_the_same(tmp_path: Path) -> None:
    """--families: per op family, its mean share of each model's profile (a small model counts as much as a large
    one), over every model and over the depthwise-heavy ones, and whether the real generators take it."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from zoo import family_shares
        from zoo_results import FamilyTime, ModelRun, ZooReport
    finally:
        sys.path.remove(str(REPO / "benchmarks"))

    def model(name: str, dw: bool, total: float, fams: list[FamilyTime]) -> ModelRun:
        return ModelRun(name=name, source="timm", family="F", depthwise=dw, attention="none", size="1x64x96",
                        workdir=str(tmp_path), status="done", proposals=1, profile_ms=total, time_by_family=fams)

    runs = [model("big", True, 10.0, [FamilyTime(family="DwConv7x7s1", where="proposed", ms=5.0, sites=3, taken=True),
                                       FamilyTime(family="Transpose", where="outside regions", ms=5.0, sites=4)]),
            model("small", False, 1.0, [FamilyTime(family="Gemm", where="proposed", ms=0.75, sites=2, taken=False,
                                                   why="no template for a gemm region"),
                                        FamilyTime(family="Transpose", where="outside regions", ms=0.25, sites=1)])]
    report = ZooReport(arch="a", precision="fp16", backends={"engine": "torch", "kernelgen": "mock", "builder": "mock"},
                       size_kind="small", jobs=1,
                       timeout_s=1, propose={"min_ms": 0, "launch_ms": 0}, workdir=str(tmp_path), wall_s=1,
                       models=runs)
    rows = {(r.where, r.family): r for r in family_shares(report)}
    assert rows[("outside regions", "Transpose")].share == pytest.approx((0.5 + 0.25) / 2)
    assert rows[("outside regions", "Transpose")].share_dw == pytest.approx(0.5)
    assert (rows[("outside regions", "Transpose")].models, rows[("outside regions", "Transpose")].sites) == (2, 5)
    assert rows[("proposed", "Gemm")].share == pytest.approx(0.375) and rows[("proposed", "Gemm")].share_dw == 0
    assert rows[("proposed", "Gemm")].taken is False and "gemm" in rows[("proposed", "Gemm")].why
    assert [r.family for r in family_shares(report)][0] == "Transpose"  # largest mean share first
    report.write(tmp_path / "zoo_report.json")
    p = _bench("--render", str(tmp_path / "zoo_report.json"), "--families")
    assert p.returncode == 0, p.stderr
    assert "where the time goes: 2 models (1 depthwise-heavy:" in p.stdout and "37.5%" in p.stdout
    assert "share, depthwise-heavy" in p.stdout and "outside regions" in p.stdout


def test_family_times_file_every_layer_once(tmp_path: Path) -> None:
    """Each layer of a profile goes to one family: a proposal's op, a heavy op no proposal holds (not worth), other
    compute (outside regions), glue, or a plugin already in the engine; the families sum to the profile."""
    from types import SimpleNamespace as NS

    import onnx
    from onnx import helper

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from zoo_flow import family_times
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="c1"),
             helper.make_node("Conv", ["a", "w"], ["b"], name="c2"),
             helper.make_node("LayerNormalization", ["b", "s"], ["y"], name="ln")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g), str(tmp_path / "m.onnx"))
    prop = NS(name="DwConv3x3s1C16", sites=[NS(onnx_nodes=["c1"])], supported=False, support_why="why")
    layers = [NS(kind="compute", onnx_nodes=["c1"], ms=1.0), NS(kind="compute", onnx_nodes=["c2"], ms=2.0),
              NS(kind="compute", onnx_nodes=["ln"], ms=3.0), NS(kind="reformat", onnx_nodes=[], ms=0.5),
              NS(kind="plugin", onnx_nodes=["yasp_X"], ms=0.25)]
    fams = family_times(NS(proposals=[prop], layers=layers, real_support=None), tmp_path / "m.onnx")
    got = {(f.where, f.family): f.ms for f in fams}
    assert got == {("proposed", "DwConv3x3s1"): 1.0, ("not worth", "Conv"): 2.0,
                   ("outside regions", "LayerNormalization"): 3.0, ("glue", "glue"): 0.5,
                   ("proposed", "plugged already"): 0.25}
    assert next(f for f in fams if f.family == "DwConv3x3s1").taken is False


def test_compare_names_what_changed_between_two_runs(tmp_path: Path) -> None:
    """benchmarks/zoo_compare.py: a proposal that stops carving, a new miss and a reworded reason are each named;
    two runs that differ in wall time only compare equal (exit 0)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from zoo_results import CandidateRun, ModelRun, ZooReport
    finally:
        sys.path.remove(str(REPO / "benchmarks"))

    def report(carved: bool, reason: str, wall: float, model_misses: int = 0) -> Path:
        run = ModelRun(name="m", source="timm", family="F", depthwise=True, attention="none", size="1x64x96",
                       workdir=str(tmp_path), status="done", proposals=1, wall_s=wall)
        for k in range(model_misses):  # model-level misses have no selector: several share one key
            run.miss("compile", f"warning {k}")
        run.candidates.append(CandidateRun(name="C", selector="yasp::C=Conv2d@where=a", carved=carved))
        run.miss("templates", reason, "yasp::C=Conv2d@where=a")
        if not carved:
            run.miss("carve", "not convex", "yasp::C=Conv2d@where=a")
        path = tmp_path / f"r{carved}{len(reason)}{wall}{model_misses}.json"
        ZooReport(arch="a", precision="fp16", backends={}, size_kind="small", jobs=1, timeout_s=1, propose={},
                  workdir=str(tmp_path), wall_s=wall, models=[run]).write(path)
        return path

    same = subprocess.run([sys.executable, str(REPO / "benchmarks" / "zoo_compare.py"), str(report(True, "r1", 1)),
                           str(report(True, "r1", 9))], capture_output=True, text=True)
    assert same.returncode == 0 and "0 difference(s)" in same.stdout, same.stdout + same.stderr
    diff = subprocess.run([sys.executable, str(REPO / "benchmarks" / "zoo_compare.py"), str(report(True, "r1", 1)),
                           str(report(False, "r22", 1)), "--reasons"], capture_output=True, text=True)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "m: yasp::C=Conv2d@where=a: carved True -> False" in diff.stdout
    assert "m: miss new: carve yasp::C=Conv2d@where=a: not convex" in diff.stdout
    assert "reworded: templates yasp::C=Conv2d@where=a: 'r1' -> 'r22'" in diff.stdout
    fewer = subprocess.run([sys.executable, str(REPO / "benchmarks" / "zoo_compare.py"),
                            str(report(True, "r1", 1, model_misses=2)), str(report(True, "r1", 1, model_misses=1))],
                           capture_output=True, text=True)
    assert fewer.returncode == 1 and "miss gone: compile (model) #2: warning 1" in fewer.stdout, fewer.stdout
