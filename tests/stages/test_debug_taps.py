"""Debug taps (issue: name the plugged region where numerics drift): a wrong kernel planted in one
region of a three-region model is named by verify, with its figures and the input that was still good;
an untapped prepare, and a tapped engine with correct kernels, say nothing is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

MODEL = REPO / "tests" / "data" / "tiny_mixed_model.py"
ORIN = "arm64-sm87-dos6010-cu114-trt86"
REGIONS = {"Dw3": "blocks.0.depth_conv", "Dw5": "blocks.1.depth_conv", "Dw7": "blocks.2.depth_conv"}


def _prepare(ytk, prep: Path, *extra: str):  # type: ignore[no-untyped-def]
    sels = [a for name, where in REGIONS.items() for a in ("--plugin", f"yasp::{name}=ConvNormAct@where={where}")]
    r = ytk("embedded", "prepare", MODEL, "--onnx-out", prep / "model.onnx", "--npz-out", prep / "model.npz",
            "--reference-out", prep / "model.reference.npz", *sels, *extra)
    assert r.code == 0, r.stderr[-2000:]


def _engine(ytk, prep: Path, out: Path, defects: dict[str, str]):  # type: ignore[no-untyped-def]
    sos = []
    for name in REGIONS:
        src = prep / f"{name}.module_source.py"
        cfg = ["--config", f"mock_defect={defects[name]}"] if name in defects else []
        r = ytk("kernelgen", "compile", "-r", prep / "plugin_candidates" / f"{name}.pt2", "-g", "Orin", "--config",
                "deployment_target=tensorrt", *cfg, "-o", src, "--kernelgen", "mock")
        assert r.code == 0, r.stderr[-2000:]
        so = prep / f"{name}.so"
        r = ytk("embedded", "build-plugin", "-a", ORIN, "--plugin-name", name, "-s", src, "-o", so, "--builder", "mock")
        assert r.code == 0, r.stderr[-2000:]
        sos += ["--custom-plugin", so]
    r = ytk("embedded", "compile", "-a", ORIN, "-p", "fp16", "--onnx", prep / "model.onnx", "--npz",
            prep / "model.npz", "-o", out, *sos, "--engine", "mock")
    assert r.code == 0, r.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def tapped(tmp_path_factory):  # type: ignore[no-untyped-def]
    from tests.helpers import ytk_inproc

    prep = tmp_path_factory.mktemp("taps") / "prep"
    _prepare(lambda *a: ytk_inproc(*a), prep, "--debug-taps")
    return prep


def test_prepare_exposes_every_plugin_boundary_with_its_fp32_reference(tapped):
    import onnx

    from ytk_core.artifacts import PrepareManifest
    from ytk_core.stages.taps import TAPS_REFERENCE, TapsFile

    taps = TapsFile.read(tapped / "taps.json")
    assert PrepareManifest.read(tapped / "prepare.json").taps == "taps.json"
    assert [t.plugin for t in taps.taps if t.io == "output"] == list(REGIONS)  # graph order
    outs = {o.name for o in onnx.load(str(tapped / "model.onnx")).graph.output}
    assert {t.tensor for t in taps.taps} <= outs
    with np.load(tapped / TAPS_REFERENCE) as z:
        assert set(z.files) == {t.tensor for t in taps.taps}
        assert all(z[k].dtype == np.float32 and np.isfinite(z[k]).all() for k in z.files)


@pytest.mark.parametrize("bad, defect", [("Dw5", "shift"), ("Dw7", "overflow")])
def test_verify_names_the_region_with_the_planted_wrong_kernel(ytk, tapped, tmp_path, bad, defect):
    bundle = _engine(ytk, tapped, tmp_path / "tapped.tgz", {bad: defect})
    r = ytk("embedded", "verify", tapped / "model.reference.npz", bundle, "--no-host", "--json")
    assert r.code == 5, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    (v,) = rep["taps"]
    assert v["plugin"] == bad, v["reason"]
    assert v["failing"]["output"] in {t["tensor"] for t in json.loads((tapped / "taps.json").read_text())["taps"]
                                      if t["plugin"] == bad and t["io"] == "output"}
    assert v["good_input"] and not any(n["output"] == v["good_input"] and not n["passed"] for n in v["numerics"])
    upstream = [n for n in v["numerics"] if n["output"] != v["failing"]["output"]][:1]
    assert upstream and upstream[0]["passed"], "what comes before the planted region is within tolerance"
    assert "debug taps: " in r.stderr and bad in r.stderr and "Traceback" not in r.stderr
    r = ytk("embedded", "verify", tapped / "model.reference.npz", bundle, "--no-host")  # the table a user reads
    assert f"DRIFT: {bad}" in r.stdout and "debug taps:" in r.stdout


def test_correct_kernels_pass_and_an_untapped_prepare_has_no_taps(ytk, tapped, tmp_path):
    bundle = _engine(ytk, tapped, tmp_path / "good.tgz", {})
    r = ytk("embedded", "verify", tapped / "model.reference.npz", bundle, "--no-host", "--json")
    assert r.code == 0, r.stderr[-2000:]
    (v,) = json.loads(r.stdout)["taps"]
    assert v["plugin"] is None and "within tolerance" in v["reason"] and all(n["passed"] for n in v["numerics"])
    plain = tmp_path / "plain"
    _prepare(ytk, plain)
    assert not (plain / "taps.json").exists()
    r = ytk("embedded", "prepare", MODEL, "--onnx-out", tmp_path / "x" / "m.onnx", "--npz-out",
            tmp_path / "x" / "m.npz", "--reference-out", tmp_path / "x" / "r.npz", "--debug-taps")
    assert r.code == 2 and "pass --plugin selectors too" in r.stderr


#: Edits planted in the naive-dw kernel's CUDA on the GPU: (what it finds, what it becomes)
GPU_DEFECTS = {
    "offset": ("float v = b[c];", "float v = b[c] + 0.25f;"),
    "off_by_one_tap": ("x_ = ow * S - P + kx;", "x_ = ow * S - P + kx + 1;"),
    "fp16_overflow": ("y[i] = __float2half(ACT);", "y[i] = __float2half((ACT) * 70000.f);"),
}


class _GpuTaps:
    """What the GPU plants share: naive-dw installed, the tapped prepare, the three kernels generated and the two
    correct ones built with nvcc (their gate verdicts are written beside them by the first compile)."""

    def __init__(self, root: Path) -> None:
        import os
        import subprocess
        import sys

        import torch

        sys.path.insert(0, str(REPO / "benchmarks"))
        import admission_suite

        site = root / "site"
        p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "--target", str(site), str(REPO / "contrib" / "backend-naive-dw")],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
        self.ytk = str(Path(sys.executable).with_name("ytk"))
        self.prep = prep = root / "prep"
        sels = [a for name, where in REGIONS.items() for a in ("--plugin", f"yasp::{name}=ConvNormAct@where={where}")]
        self.run("embedded", "prepare", MODEL, "--onnx-out", prep / "model.onnx", "--npz-out", prep / "model.npz",
                 "--reference-out", prep / "model.reference.npz", *sels, "--debug-taps")
        self.arch, gpu = admission_suite.local_arch(), torch.cuda.get_device_name(0)
        for name in REGIONS:
            self.run("kernelgen", "compile", "-r", prep / "plugin_candidates" / f"{name}.pt2", "-g", gpu, "-a",
                     self.arch, "--config", "deployment_target=tensorrt", "-o", prep / f"{name}.module_source.py",
                     "--kernelgen", "naive-dw")
            if name != "Dw5":
                self.build(prep / f"{name}.module_source.py", name, prep / f"{name}.so")

    def run(self, *args: object, code: int = 0):  # type: ignore[no-untyped-def]
        import subprocess

        r = subprocess.run([self.ytk, *map(str, args)], capture_output=True, text=True, env=self.env)
        assert r.returncode == code, r.stderr[-3000:]
        return r

    def build(self, src: Path, name: str, so: Path) -> None:
        self.run("embedded", "build-plugin", "-a", self.arch, "--plugin-name", name, "-s", src, "-o", so,
                 "--builder", "nvcc")


@pytest.fixture(scope="module")
def gpu_taps(tmp_path_factory):  # type: ignore[no-untyped-def]
    return _GpuTaps(tmp_path_factory.mktemp("gputaps"))


@pytest.mark.gpu
@pytest.mark.parametrize("defect", list(GPU_DEFECTS))
def test_taps_name_the_drifting_region_on_the_torch_engine(gpu_taps, tmp_path, defect):
    """On a GPU with the torch engine and real kernels (the example naive-dw generator, built with nvcc):
    one kernel is edited (a constant added, a tap shifted by one column, an output scaled past fp16's range)
    and its verdict file says admitted -- standing for a drift the gate's cases missed (the verdict file is
    the user's record, not a signature); the others pass the real gate. The tapped engine's extra outputs
    come back from the torch engine and verify names that region."""
    from ytk_core.stages.admission import region_digest
    from ytk_hookspecs.models import AdmissionRecord, CandidatesFile
    from ytk_hookspecs.models.base import sha256_file

    g, prep = gpu_taps, gpu_taps.prep
    text, (find, planted) = (prep / "Dw5.module_source.py").read_text(), GPU_DEFECTS[defect]
    assert text.count(find) == 1, find
    src, so = tmp_path / "Dw5.module_source.py", tmp_path / "Dw5.so"
    src.write_text(text.replace(find, planted))
    g.build(src, "Dw5", so)
    cand = next(c for c in CandidatesFile.read(prep / "candidates.json").candidates if c.name == "Dw5")
    AdmissionRecord(plugin_name="Dw5", so_sha256=sha256_file(so), status="admitted", region=region_digest(cand),
                    precision="fp16").write(AdmissionRecord.path_for(so))
    sos = [a for name in REGIONS for a in ("--custom-plugin", so if name == "Dw5" else prep / f"{name}.so")]
    g.run("embedded", "compile", "-a", g.arch, "-p", "fp16", "--onnx", prep / "model.onnx", "--npz",
          prep / "model.npz", "-o", tmp_path / "tapped.tgz", *sos, "--engine", "torch")
    r = g.run("embedded", "verify", prep / "model.reference.npz", tmp_path / "tapped.tgz", "--no-host", "--json",
              code=5)
    (v,) = json.loads(r.stdout)["taps"]
    assert v["plugin"] == "Dw5", v["reason"]
    assert all(n["passed"] for n, b in zip(v["numerics"], v["boundaries"]) if b.startswith("Dw3"))


def test_the_taps_reference_is_not_the_model_reference_and_must_match_it(ytk, tapped, tmp_path):
    bundle = _engine(ytk, tapped, tmp_path / "good.tgz", {})
    r = ytk("embedded", "verify", tapped / "model.taps.npz", bundle, "--no-host")
    assert r.code == 2 and "pass the model.reference.npz beside it" in r.stderr
    other = tmp_path / "other.reference.npz"
    with np.load(tapped / "model.reference.npz") as z:
        np.savez(other, **{k: z[k] for k in z.files}, extra_marker=np.zeros(1, np.float32))
    r = ytk("embedded", "verify", other, bundle, "--no-host")
    assert r.code == 5 and "captured by another prepare" in r.stderr


# -- how the engine is told of the taps, and how it exposed them -------------------------------------------------
def _record_requests(monkeypatch) -> list:  # type: ignore[no-untyped-def]
    """Every CompileRequest the mock engine is handed."""
    from ytk_backend_mock import engine

    seen: list = []
    real = engine.compile_engine

    def spy(request, ctx):  # type: ignore[no-untyped-def]
        seen.append(request)
        return real(request, ctx)

    monkeypatch.setattr(engine, "compile_engine", spy)
    return seen


def test_the_engine_is_told_which_outputs_are_taps(ytk, tapped, tmp_path, monkeypatch):
    """CompileRequest.debug_outputs: the taps.json tensors the ONNX has as outputs only for the taps (not the
    model's own outputs, not a model input), in graph-output order; the mock engine keeps them as outputs and the
    bundle says so."""
    import onnx

    from ytk_core.bundle import EngineBundle
    from ytk_core.stages.taps import TapsFile

    seen = _record_requests(monkeypatch)
    bundle = EngineBundle.open(_engine(ytk, tapped, tmp_path / "tapped.tgz", {}))
    (req,) = seen
    taps = TapsFile.read(tapped / "taps.json")
    with np.load(tapped / "model.reference.npz") as z:
        own = set(z.files)
    graph_outputs = [o.name for o in onnx.load(str(tapped / "model.onnx")).graph.output]
    assert taps.model_outputs is not None and set(taps.model_outputs) == own
    assert req.debug_outputs and req.debug_outputs == [o for o in graph_outputs if o not in own]
    assert set(req.debug_outputs) == {t.tensor for t in taps.taps if not t.graph_input} - own
    assert bundle.manifest.taps_exposed_as == "network outputs" and bundle.manifest.taps_note == ""
    assert set(req.debug_outputs) <= set(bundle.outputs())  # still returned under their names


def test_an_untapped_compile_tells_the_engine_of_no_taps(ytk, tapped, tmp_path, monkeypatch):
    import onnx

    from ytk_core.bundle import EngineBundle

    plain = _untapped_copy(tapped, tmp_path / "plain")
    seen = _record_requests(monkeypatch)
    sos = [a for n in REGIONS for a in ("--custom-plugin", tapped / f"{n}.so")]
    _engine(ytk, tapped, tmp_path / "tapped.tgz", {})  # builds the .so files
    seen.clear()
    r = ytk("embedded", "compile", "-a", ORIN, "-p", "fp16", "--onnx", plain / "model.onnx", "--npz",
            plain / "model.npz", "-o", tmp_path / "plain.tgz", *sos, "--engine", "mock")
    assert r.code == 0, r.stderr[-2000:]
    (req,) = seen
    assert req.debug_outputs == []
    m = EngineBundle.open(tmp_path / "plain.tgz").manifest
    with np.load(tapped / "model.reference.npz") as z:
        own = set(z.files)
    assert m.taps_exposed_as is None and {o.name for o in onnx.load(str(plain / "model.onnx")).graph.output} == own


def _untapped_copy(tapped: Path, dst: Path) -> Path:
    """The same carve without the taps: the tapped ONNX with only the model's own outputs, no taps.json."""
    import onnx

    from ytk_core.stages.taps import TapsFile

    import shutil

    shutil.copytree(tapped, dst, ignore=shutil.ignore_patterns("taps.json", "model.taps.npz", "*.tgz"))
    model = onnx.load(str(tapped / "model.onnx"))
    own = set(TapsFile.read(tapped / "taps.json").model_outputs or [])
    kept = [o for o in model.graph.output if o.name in own]
    del model.graph.output[:]
    model.graph.output.extend(kept)
    onnx.save(model, str(dst / "model.onnx"))
    return dst


def test_a_taps_file_of_schema_1_still_compiles_with_its_taps_as_outputs(ytk, tapped, tmp_path, monkeypatch):
    """A taps.json written before it named the model's outputs: read, its taps compiled as plain outputs (the
    engine is told of none), with a warning saying to prepare again."""
    import json as json_
    import shutil

    from ytk_core.bundle import EngineBundle
    from ytk_core.stages.taps import TapsFile

    _engine(ytk, tapped, tmp_path / "first.tgz", {})  # builds the .so files
    old = tmp_path / "old"
    shutil.copytree(tapped, old)
    data = json_.loads((tapped / "taps.json").read_text())
    data.pop("model_outputs")
    data["schema_version"] = 1
    (old / "taps.json").write_text(json_.dumps(data))
    assert TapsFile.read(old / "taps.json").model_outputs is None
    seen = _record_requests(monkeypatch)
    sos = [a for n in REGIONS for a in ("--custom-plugin", tapped / f"{n}.so")]
    r = ytk("embedded", "compile", "-a", ORIN, "-p", "fp16", "--onnx", old / "model.onnx", "--npz", old / "model.npz",
            "-o", tmp_path / "old.tgz", *sos, "--engine", "mock")
    assert r.code == 0, r.stderr[-2000:]
    assert seen[0].debug_outputs == [] and "written by an older ytk" in r.stderr
    b = EngineBundle.open(tmp_path / "old.tgz")
    assert b.taps() is not None and b.manifest.taps_exposed_as == "network outputs"


def test_verify_sets_the_tapped_latency_beside_the_untapped_one(ytk, tapped, tmp_path):
    """With the untapped engine of the same plugins among the bundles, verify gives what the taps cost; without
    it, the note says to compile one."""
    tapped_tgz = _engine(ytk, tapped, tmp_path / "tapped.tgz", {})
    plain = _untapped_copy(tapped, tmp_path / "plain")
    sos = [a for n in REGIONS for a in ("--custom-plugin", tapped / f"{n}.so")]
    r = ytk("embedded", "compile", "-a", ORIN, "-p", "fp16", "--onnx", plain / "model.onnx", "--npz",
            plain / "model.npz", "-o", tmp_path / "plain.tgz", *sos, "--engine", "mock")
    assert r.code == 0, r.stderr[-2000:]
    r = ytk("embedded", "verify", tapped / "model.reference.npz", tmp_path / "plain.tgz", tapped_tgz, "--no-host",
            "--json")
    assert r.code == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    (v,) = rep["taps"]
    rows = {row["implementation"]: row for row in rep["rows"]}
    u = v["untapped"]
    assert v["exposed_as"] == "network outputs" and u["untapped"] != v["implementation"]
    assert u["untapped_p50_ms"] == rows[u["untapped"]]["p50_ms"] and u["tapped_p50_ms"] == rows[v["implementation"]][
        "p50_ms"]
    assert u["ratio"] == pytest.approx(u["tapped_p50_ms"] / u["untapped_p50_ms"])
    assert "can change what it fuses" in v["fusion_note"] and "verify both bundles together" not in v["fusion_note"]
    r = ytk("embedded", "verify", tapped / "model.reference.npz", tapped_tgz, "--no-host", "--json")
    assert "verify both bundles together" in json.loads(r.stdout)["taps"][0]["fusion_note"]
    r = ytk("embedded", "verify", tapped / "model.reference.npz", tmp_path / "plain.tgz", tapped_tgz, "--no-host")
    assert "taps exposed as network outputs" in r.stdout and "tapped vs untapped:" in r.stdout
    assert "as an extra output" in r.stdout and "verify both bundles together" not in r.stdout
    r = ytk("embedded", "verify", tapped / "model.reference.npz", tapped_tgz, "--no-host")
    assert "tapped vs untapped:" not in r.stdout and "verify both bundles together" in r.stdout


# -- adjacent regions: one plugin's output is the next one's input -------------------------------------------
CHAIN = {"Ex5": "blocks.1.expand", "Dw5": "blocks.1.depth_conv"}


@pytest.fixture(scope="module")
def chained(tmp_path_factory):  # type: ignore[no-untyped-def]
    from tests.helpers import ytk_inproc

    prep = tmp_path_factory.mktemp("chain") / "prep"
    sels = [a for name, where in CHAIN.items() for a in ("--plugin", f"yasp::{name}=ConvNormAct@where={where}")]
    r = ytk_inproc("embedded", "prepare", MODEL, "--onnx-out", prep / "model.onnx", "--npz-out", prep / "model.npz",
                   "--reference-out", prep / "model.reference.npz", *sels, "--debug-taps")
    assert r.code == 0, r.stderr[-2000:]
    return prep


@pytest.mark.parametrize("bad", list(CHAIN))
def test_a_drift_between_adjacent_regions_is_blamed_on_the_region_that_made_it(ytk, chained, tmp_path, bad):
    """The audit found Dw5 blamed, and its input called 'none tapped', when the tensor between two plugins
    was tapped only as the first one's output: a correct plugin would have been dropped."""
    from ytk_core.stages.taps import TapsFile

    taps = TapsFile.read(chained / "taps.json")
    between = [t.tensor for t in taps.taps if t.plugin == "Ex5" and t.io == "output"]
    assert between and any(t.plugin == "Dw5" and t.io == "input" and t.tensor == between[0] for t in taps.taps)
    sos = []
    for name in CHAIN:
        src, so = chained / f"{name}.{bad}.module_source.py", chained / f"{name}.{bad}.so"
        cfg = ["--config", "mock_defect=shift"] if name == bad else []
        assert ytk("kernelgen", "compile", "-r", chained / "plugin_candidates" / f"{name}.pt2", "-g", "Orin",
                   "--config", "deployment_target=tensorrt", *cfg, "-o", src, "--kernelgen", "mock").code == 0
        assert ytk("embedded", "build-plugin", "-a", ORIN, "--plugin-name", name, "-s", src, "-o", so,
                   "--builder", "mock").code == 0
        sos += ["--custom-plugin", so]
    bundle = tmp_path / "chain.tgz"
    r = ytk("embedded", "compile", "-a", ORIN, "-p", "fp16", "--onnx", chained / "model.onnx", "--npz",
            chained / "model.npz", "-o", bundle, *sos, "--engine", "mock")
    assert r.code == 0, r.stderr[-2000:]
    r = ytk("embedded", "verify", chained / "model.reference.npz", bundle, "--no-host", "--json")
    assert r.code == 5, r.stderr[-2000:]
    (v,) = json.loads(r.stdout)["taps"]
    assert v["plugin"] == bad, v["reason"]
    assert v["good_input"] and "(none tapped)" not in v["reason"]
    if bad == "Dw5":  # the input that was still good is Ex5's output, tapped once, scored once
        assert v["good_input"] == between[0]
        assert [n["output"] for n in v["numerics"]].count(between[0]) == 1
