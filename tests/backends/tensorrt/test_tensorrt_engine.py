"""The tensorrt engine end to end on this CPU machine, against a stand-in trtexec (fake_trtexec.py).

What runs for real: availability, the command lines, the raw input files, every reader, the bundle
written by `ytk embedded compile --engine tensorrt`, the layer -> ONNX node mapping propose uses, and each
known failure explained. What does not: TensorRT itself (none here; docs/tensorrt.md lists it).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.stages.carved_fixture import ARCH
from trt_helpers import build_described_so, describe
from ytk_backend_tensorrt.plugin import TensorRTEngine
from ytk_core.bundle import EngineBundle
from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import ArchSpec, CompileRequest, ProfileRequest

pytestmark = pytest.mark.usefixtures("_isolated_cache")
ARCH10 = "x86_64-sm90-linux-cu130-trt10"


# -- availability ----------------------------------------------------------------------------------------------
def test_not_available_without_trtexec_or_the_package(no_tensorrt: None) -> None:
    av = TensorRTEngine().availability(ArchSpec.parse(ARCH))
    assert not av.available
    assert "no trtexec on PATH" in av.reason and "no tensorrt Python package" in av.reason


def test_available_with_trtexec_says_which_and_which_version(fake_trtexec, no_tensorrt_python) -> None:
    av = TensorRTEngine().availability(ArchSpec.parse(ARCH))
    assert av.available and av.reason.startswith(f"trtexec 8.6.1 at {fake_trtexec.path}")
    assert av.details == {"trtexec": str(fake_trtexec.path), "trtexec_version": "8.6.1"}
    other = TensorRTEngine().availability(ArchSpec.parse(ARCH10))
    assert other.available and "it is TensorRT 8.6.1, not the target's 10" in other.reason
    assert fake_trtexec.calls()[0]["argv"] == ["--help"]


def test_a_configured_trtexec_that_is_missing_is_said(monkeypatch: pytest.MonkeyPatch, no_tensorrt: None) -> None:
    monkeypatch.setenv("YTK_TRTEXEC", "/nowhere/trtexec")
    av = TensorRTEngine().availability()
    assert not av.available and "$YTK_TRTEXEC=/nowhere/trtexec is not an executable file" in av.reason


# -- compile + profile through the core ------------------------------------------------------------------------
def test_compile_writes_the_bundle(ytk, fx: Path, fake_trtexec, no_tensorrt_python, monkeypatch) -> None:
    base = fx / "base"
    monkeypatch.setenv("FAKE_TRTEXEC_OUTPUTS", str(base / "model.reference.npz"))
    out = fx / "trt.tgz"
    r = ytk("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", base / "model.onnx", "--npz", base / "model.npz",
            "-o", out, "--engine", "tensorrt", "--iterations", "5", "--warmup", "2", "--json")
    assert r.code == 0, r.stderr
    b = EngineBundle.open(out)
    m = b.manifest
    assert (m.engine_backend, m.engine_version, m.simulated, m.device) == ("tensorrt", "8.6.1", False,
                                                                         "Fake GPU (ytk tests)")
    # trtexec's own warm-up (compute before --warmUp=200 ms) and ytk's 2 warm-up iterations are left out
    assert b.benchmark.iterations_ms == pytest.approx([1.02, 1.03, 1.04, 1.05, 1.06])
    names = [la.name for la in b.profile.layers]
    assert names[0] == "Reformatting CopyNode for Input Tensor 0 to node_Conv_1 + n0"
    assert "node_Conv_2 + node_relu" in names and "node_transpose" in names
    conv = next(la for la in b.profile.layers if la.name == "node_Conv_1 + n0")
    assert conv.type == "CaskConvolution" and conv.onnx_nodes == ["node_Conv_1", "n0"] and conv.median_ms > 0
    ref = dict(np.load(base / "model.reference.npz"))
    for k, v in b.outputs().items():
        np.testing.assert_allclose(v, ref[k], rtol=1e-5, atol=1e-6)  # trtexec prints 6 significant digits
    assert b.has("layer_info.json") and b.has("raw_profile.json") and b.has("build.log")
    log = b.read_bytes("build.log").decode()
    assert "--exportLayerInfo=layer_info.json" in log and "--exportProfile=profile.json" in log
    build, run = (c["argv"] for c in fake_trtexec.calls() if c["argv"] != ["--help"])
    assert build[:4] == [f"--onnx={(base / 'model.onnx').resolve()}", "--saveEngine=engine.plan", "--fp16",
                         "--profilingVerbosity=detailed"]
    assert run == ["--loadEngine=engine.plan", "--loadInputs=x:inputs/0.bin", "--iterations=7", "--warmUp=200",
                   "--duration=0", "--avgRuns=1", "--separateProfileRun", "--exportTimes=times.json",
                   "--exportProfile=profile.json", "--exportOutput=outputs.json"]


def test_every_layer_maps_back_to_onnx_nodes(ytk, fx: Path, fake_trtexec, no_tensorrt_python) -> None:
    """propose attributes each layer's time to ONNX nodes: from the Metadata the detailed layer info carries."""
    from ytk_core.propose.layer_map import resolve_layers
    from ytk_core.propose.onnx_graph import OnnxGraph

    base = fx / "base"
    out = fx / "trt.tgz"
    r = ytk("embedded", "compile", "-a", ARCH, "--onnx", base / "model.onnx", "--npz", base / "model.npz", "-o", out,
            "--engine", "tensorrt", "--iterations", "3")
    assert r.code == 0, r.stderr
    resolved = resolve_layers(EngineBundle.open(out).profile.layers, OnnxGraph.load(base / "model.onnx"))
    compute = [x for x in resolved if x.kind == "compute"]
    assert compute and all(x.nodes for x in compute), [(x.layer.name, x.nodes) for x in compute if not x.nodes]
    covered = {n for x in compute for n in x.nodes}
    assert covered == {"node_Conv_1", "n0", "node_Conv_2", "node_relu", "node_add", "node_Conv_3", "node_Conv_4",
                       "node_add_1", "node_transpose", "node_mul"}


@pytest.mark.parametrize("banner,arch,api", [("8601", ARCH, "trt8-IPluginV2DynamicExt"),
                                             ("101401", ARCH10, "trt10-IPluginV3")])
def test_compile_with_plugins_loads_them_as_dynamic_plugins(ytk, fx: Path, tmp_path: Path, fake_trtexec,
                                                            no_tensorrt_python, banner: str, arch: str,
                                                            api: str) -> None:
    fake_trtexec.version(banner)
    sm = ArchSpec.parse(arch).sm
    so = build_described_so(tmp_path / "DwConv3x3C16.so", describe(engine_api=api, sm=sm)).path
    carved = fx / "carved"
    r = ytk("embedded", "compile", "-a", arch, "--onnx", carved / "model.onnx", "--npz", carved / "model.npz",
            "-o", fx / "p.tgz", "--engine", "tensorrt", "--iterations", "3", "--custom-plugin", so,
            "--allow-unverified")
    assert r.code == 0, r.stderr
    b = EngineBundle.open(fx / "p.tgz")
    assert [p.engine_api for p in b.manifest.plugins] == [api]
    plugin_layers = [la for la in b.profile.layers if la.type.startswith("PluginV")]
    assert [la.onnx_nodes for la in plugin_layers] == [["DwConv3x3C16_0"], ["DwConv3x3C16_1"]]
    build, run = (c["argv"] for c in fake_trtexec.calls() if c["argv"] != ["--help"])
    assert f"--dynamicPlugins={so.resolve()}" in build and f"--dynamicPlugins={so.resolve()}" in run


def test_a_tensorrt_before_8_6_is_refused_with_plugins(ytk, fx: Path, tmp_path: Path, fake_trtexec,
                                                       no_tensorrt_python) -> None:
    fake_trtexec.version("8503")
    so = build_described_so(tmp_path / "DwConv3x3C16.so", describe()).path
    carved = fx / "carved"
    r = ytk("embedded", "compile", "-a", ARCH, "--onnx", carved / "model.onnx", "--npz", carved / "model.npz",
            "-o", fx / "p.tgz", "--engine", "tensorrt", "--custom-plugin", so, "--allow-unverified")
    assert r.code != 0 and "TensorRT 8.5.3 loads plugin libraries only with --plugins" in r.stderr


def test_iterations_from_the_log_when_no_times_file(ytk, fx: Path, fake_trtexec, no_tensorrt_python,
                                                   monkeypatch) -> None:
    monkeypatch.setenv("FAKE_TRTEXEC_NO_TIMES", "1")
    base = fx / "base"
    r = ytk("embedded", "compile", "-a", ARCH, "--onnx", base / "model.onnx", "--npz", base / "model.npz", "-o",
            fx / "t.tgz", "--engine", "tensorrt", "--iterations", "4", "--warmup", "1")
    assert r.code == 0, r.stderr
    assert EngineBundle.open(fx / "t.tgz").benchmark.iterations_ms == pytest.approx([1.01, 1.02, 1.03, 1.04])


# -- known failures, straight through the engine (the core's own checks would stop most of them first) ---------
def _request(fx: Path, tmp_path: Path, plugins: list, precision: str = "fp16", arch: str = ARCH) -> CompileRequest:  # type: ignore[type-arg]
    carved = fx / "carved"
    return CompileRequest(onnx=carved / "model.onnx", npz=carved / "model.npz", arch=arch, precision=precision,  # type: ignore[arg-type]
                          plugins=plugins, workdir=tmp_path / "work")


def test_plugin_not_found_is_one_line(fx: Path, tmp_path: Path, fake_trtexec, no_tensorrt_python) -> None:
    p = build_described_so(tmp_path / "DwConv3x3C16.so", describe(version="2"))
    with pytest.raises(StageError) as e:
        TensorRTEngine().compile(_request(fx, tmp_path, [p]), StageContext())
    msg = str(e.value)
    assert msg.startswith("trtexec could not build the engine: TensorRT found no plugin yasp::DwConv3x3C16 v1 for node "
                          "DwConv3x3C16_0: DwConv3x3C16.so registers yasp::DwConv3x3C16 v2 and ::DwConv3x3C16 v2; "
                          "DwConv3x3C16.so has version '2' where the node asks '1'")
    assert "(log: " in msg and "\n" not in msg


def test_plugin_not_found_tensorrt_10(fx: Path, tmp_path: Path, fake_trtexec, no_tensorrt_python) -> None:
    fake_trtexec.version("101401")
    with pytest.raises(StageError, match=r"found no plugin yasp::DwConv3x3C16 v1 for node DwConv3x3C16_0: no plugin "
                                         r"library was supplied; none registers DwConv3x3C16"):
        TensorRTEngine().compile(_request(fx, tmp_path, [], arch=ARCH10), StageContext())


def test_error9_is_one_line(fx: Path, tmp_path: Path, fake_trtexec, no_tensorrt_python) -> None:
    p = build_described_so(tmp_path / "DwConv3x3C16.so", describe())
    with pytest.raises(StageError) as e:
        TensorRTEngine().compile(_request(fx, tmp_path, [p], precision="fp32"), StageContext())
    assert str(e.value).startswith("trtexec could not build the engine: TensorRT Error 9 at plugin yasp::DwConv3x3C16 "
                                   "v1 (DwConv3x3C16.so), node DwConv3x3C16_0: input 0 (h) is declared float16 but the "
                                   "engine is built fp32")
    p1 = build_described_so(tmp_path / "One.so", describe(num_inputs=1))
    with pytest.raises(StageError, match="has 3 inputs .* declares 1 input"):
        TensorRTEngine().compile(_request(fx, tmp_path, [p1]), StageContext())


def test_engine_loaded_without_its_plugins(fx: Path, tmp_path: Path, fake_trtexec, no_tensorrt_python) -> None:
    p = build_described_so(tmp_path / "DwConv3x3C16.so", describe())
    req = _request(fx, tmp_path, [p])
    cres = TensorRTEngine().compile(req, StageContext())
    without = req.model_copy(update={"plugins": []})
    with pytest.raises(StageError, match="could not run the engine: TensorRT could not deserialize the engine: it "
                                         "holds plugin layers but no creator .*no plugin library was supplied"):
        TensorRTEngine().profile(ProfileRequest(compile=cres, request=without, iterations=3, warmup=1), StageContext())


def test_a_plugin_this_tensorrt_cannot_load_is_refused_before_building(fx: Path, tmp_path: Path, fake_trtexec,
                                                                       no_tensorrt_python) -> None:
    p = build_described_so(tmp_path / "DwConv3x3C16.so", describe(engine_api="trt10-IPluginV3"))
    with pytest.raises(StageError, match=r"DwConv3x3C16.so \(yasp::DwConv3x3C16\) is trt10-IPluginV3; TensorRT 8.6.1 "
                                         r"loads trt8-IPluginV2DynamicExt"):
        TensorRTEngine().compile(_request(fx, tmp_path, [p]), StageContext())
    assert [c["argv"] for c in fake_trtexec.calls()] == [["--help"]]  # nothing was built


def test_unknown_engine_options_are_named(fx: Path, tmp_path: Path, fake_trtexec, no_tensorrt_python) -> None:
    req = _request(fx, tmp_path, []).model_copy(update={"options": {"warmup": "3"}})
    with pytest.raises(StageError, match="unknown tensorrt engine option.*warmup; known: .*warmup_ms"):
        TensorRTEngine().compile(req, StageContext())


# -- which plugin interface the builder is asked for --------------------------------------------------------------
def test_plugin_interface_follows_the_target(no_tensorrt: None) -> None:
    eng = TensorRTEngine()
    assert eng.plugin_engine_api(ArchSpec.parse(ARCH)) == "trt8-IPluginV2DynamicExt"
    assert eng.plugin_engine_api(ArchSpec.parse(ARCH10)) == "trt10-IPluginV3"


def test_plugin_interface_is_one_the_local_tensorrt_loads(fake_trtexec, no_tensorrt_python) -> None:
    # a TensorRT 8.6 machine building for a TensorRT 10 target: IPluginV2DynamicExt, which both load
    assert TensorRTEngine().plugin_engine_api(ArchSpec.parse(ARCH10)) == "trt8-IPluginV2DynamicExt"


def test_core_asks_the_engine_for_the_interface(no_tensorrt: None) -> None:
    from ytk_core.stages.build_plugin import engine_api_for

    assert engine_api_for("tensorrt", ArchSpec.parse(ARCH10)) == "trt10-IPluginV3"
    assert engine_api_for("mock", ArchSpec.parse(ARCH)) is None  # an engine that does not say: the builder's default


def test_build_plugin_for_the_tensorrt_engine(ytk, tmp_path: Path, no_tensorrt_python, monkeypatch) -> None:
    """`build-plugin --engine tensorrt` builds the TensorRT shim of the target's TensorRT (nvcc + real headers)."""
    import sys

    from ytk_backend_nvcc import trt_shim
    from ytk_backend_nvcc.toolchain import find_nvcc
    from ytk_backend_tensorrt import plugin
    from ytk_hookspecs.plugin_info import read_plugin_description

    headers = Path(__file__).parents[2] / "data" / "tensorrt" / "10.14" / "include"
    if find_nvcc() is None or not (headers / "NvInferRuntime.h").is_file():
        pytest.skip("needs nvcc and the TensorRT 10.14 headers (tests/data/tensorrt/fetch_headers.py)")
    monkeypatch.setattr(plugin, "find_trtexec", lambda configured=None: (None, "none in this test"))
    monkeypatch.setenv(trt_shim.INCLUDE_ENV, str(headers))
    sys.path.insert(0, str(Path(__file__).parents[1] / "nvcc"))
    from test_nvcc_builder import scale_bundle

    src = scale_bundle(tmp_path / "Scale.module_source.py")
    so = tmp_path / "Scale.so"
    r = ytk("embedded", "build-plugin", "-a", ARCH10, "--plugin-name", "Scale", "-s", src, "-o", so,
            "--builder", "nvcc", "--engine", "tensorrt", "--json")
    assert r.code == 0, r.stderr
    assert read_plugin_description(so).engine_api == "trt10-IPluginV3"
    assert json.loads(r.stdout)["description"]["engine_api"] == "trt10-IPluginV3"
