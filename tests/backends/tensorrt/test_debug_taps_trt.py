"""Debug taps on the tensorrt engine: network outputs on 8.6, debug tensors on a TensorRT 10 that marks and
saves them, network outputs and a note on one that does not.

What runs for real here: the command lines, the ONNX built without the taps (the onnx package), the raw
debug-tensor files read back, the pointer handling of the Python runner's listener, and the whole compile and
verify through the stand-in trtexec (fake_trtexec.py), which takes --markDebug/--saveDebugTensors as the
TensorRT 10 trtexec does and writes raw files. What does not: TensorRT itself (docs/tensorrt.md).
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.stages.carved_fixture import ARCH
from trt_helpers import build_described_so, describe, tap_carved_fixture
from ytk_backend_tensorrt import debug_taps
from ytk_backend_tensorrt.commands import BuildPlan, CapturePlan, build_command, capture_command
from ytk_backend_tensorrt.debug_taps import (derive_onnx, host_copy, mark_debug_tensors, plan_python, plan_trtexec,
                                             pointer, read_raw)
from ytk_backend_tensorrt.io_files import GraphTensor
from ytk_backend_tensorrt.probe import TrtexecTool, help_flags
from ytk_backend_tensorrt.versions import TrtVersion
from ytk_core.bundle import EngineBundle
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import DEBUG_TENSORS, NETWORK_OUTPUTS, ArchSpec

pytestmark = pytest.mark.usefixtures("_isolated_cache")
ARCH10 = "x86_64-sm90-linux-cu130-trt10"
V86, V10 = TrtVersion(8, 6, 1), TrtVersion(10, 14, 1)
TAPS = ["h", "d", "c3", "d2"]
BOTH = frozenset({"--onnx", "--markDebug", "--saveDebugTensors"})

# Lines of a public TensorRT 10.5.0 `trtexec --help` capture (banner [TensorRT v100500]), and two option lines
# in the shape 8.x prints them (neither debug flag).
HELP_10_5 = "\n".join((
    "&&&& RUNNING TensorRT.trtexec [TensorRT v100500] [b18] # trtexec --help",
    "=== Build Options ===",
    "  --allowWeightStreaming             Enable a weight streaming engine. Must be specified with --stronglyTyped.",
    "  --markDebug                        Specify list of names of tensors to be marked as debug tensors. "
    "Separate names with a comma",
    "=== Inference Options ===",
    "  --saveDebugTensors          Specify list of names of tensors to turn on the debug state",
    "                              and filename to save raw outputs to.",
    "                              These tensors must be specified as debug tensors during build time."))
HELP_8_6 = """&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec --help
  --versionCompatible, --vc   Mark the engine as version compatible.
  --exportOutput=<file>       Write the output tensors to a json file (default = disabled)
"""



# -- which way, per TensorRT -------------------------------------------------------------------------------------
def test_the_help_says_which_flags_a_trtexec_takes() -> None:
    flags = help_flags(HELP_10_5)
    assert {"--markDebug", "--saveDebugTensors", "--allowWeightStreaming"} <= flags
    assert "--stronglyTyped" not in flags  # named inside a description, not listed
    assert TrtexecTool("t", V10, flags=flags).takes("--markDebug", "--saveDebugTensors")
    old = help_flags(HELP_8_6)
    assert old == {"--versionCompatible", "--exportOutput"}
    assert not TrtexecTool("t", V86, flags=old).takes("--markDebug")


def test_tensorrt_8_6_keeps_the_taps_as_network_outputs(fx: Path) -> None:
    onnx_path = fx / "carved" / "model.onnx"
    p = plan_trtexec(TAPS, V86, TrtexecTool("t", V86, flags=BOTH), [], onnx_path)
    assert (p.exposed_as, p.debug_tensors, p.note) == (NETWORK_OUTPUTS, (), "")
    assert plan_trtexec([], V10, TrtexecTool("t", V10, flags=BOTH), [], onnx_path).exposed_as is None


def test_tensorrt_10_marks_them_as_debug_tensors_where_trtexec_can(tmp_path: Path, fx: Path) -> None:
    tap_carved_fixture(fx)
    onnx_path = fx / "carved" / "model.onnx"
    p = plan_trtexec(TAPS, V10, TrtexecTool("t", V10, flags=BOTH), ["--builderOptimizationLevel=5"], onnx_path)
    assert (p.exposed_as, p.debug_tensors, p.note) == (DEBUG_TENSORS, tuple(TAPS), "")
    without = plan_trtexec(TAPS, V10, TrtexecTool("/x/trtexec", V10, flags=frozenset({"--onnx", "--markDebug"})), [],
                           onnx_path)
    assert without.exposed_as == NETWORK_OUTPUTS and without.debug_tensors == ()
    assert "TensorRT 10.14.1 (/x/trtexec) cannot mark and save debug tensors (its --help lists no " \
           "--saveDebugTensors)" in without.note
    unread = plan_trtexec(TAPS, V10, TrtexecTool("t", V10), [], onnx_path)
    assert unread.exposed_as == NETWORK_OUTPUTS and "its --help could not be read" in unread.note
    for flags, what in ((["--int8"], "--int8"), (["--best"], "--best"), (["--bf16"], "--bf16")):
        p = plan_trtexec(TAPS, V10, TrtexecTool("t", V10, flags=BOTH), flags, onnx_path)
        assert p.exposed_as == NETWORK_OUTPUTS and what in p.note and "raw bytes" in p.note
    p = plan_trtexec(["a,b"], V10, TrtexecTool("t", V10, flags=BOTH), [], onnx_path)
    assert p.exposed_as == NETWORK_OUTPUTS and "a,b hold a comma" in p.note


def test_a_tap_of_dynamic_shape_stays_an_output(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 4])])
    onnx.save(helper.make_model(g), str(tmp_path / "m.onnx"))
    p = plan_trtexec(["r"], V10, TrtexecTool("t", V10, flags=BOTH), [], tmp_path / "m.onnx")
    assert p.exposed_as == NETWORK_OUTPUTS and "r have a dynamic shape" in p.note


def test_the_python_runner_needs_the_debug_api() -> None:
    class Has:
        mark_debug = set_debug_listener = set_tensor_debug_state = object()

    full = SimpleNamespace(INetworkDefinition=Has, IExecutionContext=Has, IDebugListener=object)
    assert plan_python(TAPS, V10, full, []).exposed_as == DEBUG_TENSORS
    assert plan_python(TAPS, V86, full, []).exposed_as == NETWORK_OUTPUTS
    bare = SimpleNamespace(INetworkDefinition=object, IExecutionContext=Has)
    p = plan_python(TAPS, V10, bare, [])
    assert p.exposed_as == NETWORK_OUTPUTS
    assert "has no INetworkDefinition.mark_debug, IDebugListener" in p.note
    assert plan_python(TAPS, V10, full, ["--int8"]).exposed_as == NETWORK_OUTPUTS


# -- the command lines -------------------------------------------------------------------------------------------
def test_the_build_marks_the_taps_and_a_run_of_its_own_saves_them() -> None:
    base = dict(trtexec="trtexec", onnx=Path("/w/tensorrt/model.debug_taps.onnx"), engine="engine.plan",
                layer_info="layer_info.json", precision="fp16", plugins=[Path("/p/A.so")])
    cmd = build_command(BuildPlan(**base, version=V10, debug_tensors=TAPS))  # type: ignore[arg-type]
    assert cmd[1] == "--onnx=/w/tensorrt/model.debug_taps.onnx" and cmd[-1] == "--markDebug=h,d,c3,d2"
    plain = build_command(BuildPlan(**base, version=V86))  # type: ignore[arg-type]
    assert not any(a.startswith("--markDebug") for a in plain)
    cap = capture_command(CapturePlan(trtexec="trtexec", engine="engine.plan", plugins=[Path("/p/A.so")],
                                      version=V10, load_inputs="x:inputs/0.bin",
                                      files=debug_taps.capture_files(["h", "a:b"])))
    assert cap == ["trtexec", "--loadEngine=engine.plan", "--dynamicPlugins=/p/A.so", "--loadInputs=x:inputs/0.bin",
                   "--iterations=1", "--warmUp=0", "--duration=0",
                   "--saveDebugTensors=h:debug/0.bin,a:b:debug/1.bin"]  # trtexec splits name from file on the last :


# -- the ONNX built without the taps -----------------------------------------------------------------------------
def test_the_derived_onnx_has_only_the_models_outputs_and_keeps_the_tap_tensors(fx: Path, tmp_path: Path) -> None:
    tap_carved_fixture(fx)
    src = fx / "carved" / "model.onnx"
    before = src.read_bytes()
    out = derive_onnx(src, TAPS, tmp_path / "run" / "model.debug_taps.onnx")
    assert src.read_bytes() == before  # the prepare's ONNX is left as it was
    m = onnx.load(str(out))
    onnx.checker.check_model(m)
    assert [o.name for o in m.graph.output] == ["y", "z"]
    computed = {o for n in m.graph.node for o in n.output}
    assert set(TAPS) <= computed
    typed = {v.name: v for v in m.graph.value_info}
    assert all(list(d.dim_value for d in typed[t].type.tensor_type.shape.dim) == [1, 16, 6, 10] for t in TAPS)
    assert len(m.graph.node) == len(onnx.load(str(src)).graph.node)
    with pytest.raises(StageError, match="'q' is not an output of"):
        derive_onnx(src, ["q"], tmp_path / "q.onnx")
    with pytest.raises(StageError, match="every output is a debug tap"):
        derive_onnx(src, ["y", "z", *TAPS], tmp_path / "all.onnx")


def test_a_tap_no_node_computes_cannot_be_marked(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]), x])
    onnx.save(helper.make_model(g), str(tmp_path / "m.onnx"))
    with pytest.raises(StageError, match="'x' of .* is computed by no node"):
        derive_onnx(tmp_path / "m.onnx", ["x"], tmp_path / "d.onnx")


def test_external_weights_are_found_beside_the_derived_onnx(tmp_path: Path) -> None:
    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                          "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
                                     helper.make_tensor_value_info("m", TensorProto.FLOAT, [1, 4])],
                          [numpy_helper.from_array(w, "w")])
    src = tmp_path / "prep" / "m.onnx"
    src.parent.mkdir()
    onnx.save(helper.make_model(g), str(src), save_as_external_data=True, location="weights.bin", size_threshold=0)
    out = derive_onnx(src, ["m"], tmp_path / "run" / "d.onnx")
    assert (tmp_path / "run" / "weights.bin").read_bytes() == (src.parent / "weights.bin").read_bytes()
    np.testing.assert_array_equal(numpy_helper.to_array(onnx.load(str(out)).graph.initializer[0]), w)


# -- the raw files ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [np.float16, np.float32])
def test_a_raw_debug_tensor_file_reads_back_in_its_shape(tmp_path: Path, raw: type) -> None:
    shape = (1, 16, 6, 10)
    v = np.random.default_rng(0).standard_normal(shape).astype(raw)
    (tmp_path / "t.bin").write_bytes(v.tobytes())  # what DebugTensorWriter writes: the bytes, no header
    got = read_raw(tmp_path / "t.bin", GraphTensor("d", np.dtype(np.float32), shape))
    assert got.dtype == raw and got.shape == shape
    np.testing.assert_array_equal(got, v)


def test_a_raw_file_of_no_readable_size_is_one_clear_line(tmp_path: Path) -> None:
    t = GraphTensor("d", np.dtype(np.float32), (2, 3))
    (tmp_path / "odd.bin").write_bytes(b"\0" * 13)
    with pytest.raises(StageError, match="13 bytes, not a whole number of elements for its shape \\[2, 3\\]"):
        read_raw(tmp_path / "odd.bin", t)
    (tmp_path / "int8.bin").write_bytes(b"\0" * 6)  # one byte an element: INT8, which a float tap cannot be read as
    with pytest.raises(StageError, match="1 byte\\(s\\) per element.*fp32 or fp16"):
        read_raw(tmp_path / "int8.bin", t)
    (tmp_path / "i.bin").write_bytes(np.arange(6, dtype=np.int32).tobytes())
    got = read_raw(tmp_path / "i.bin", GraphTensor("n", np.dtype(np.int64), (2, 3)))
    assert got.dtype == np.int32 and got.tolist() == [[0, 1, 2], [3, 4, 5]]


# -- the Python runner's listener, short of TensorRT -------------------------------------------------------------
def test_the_listeners_address_is_an_int_or_a_capsule_and_host_memory_is_copied() -> None:
    v = np.arange(12, dtype=np.float16).reshape(3, 4)
    addr = v.ctypes.data
    new = ctypes.pythonapi.PyCapsule_New
    new.argtypes, new.restype = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p], ctypes.py_object
    assert pointer(addr) == addr and pointer(new(addr, None, None)) == addr
    copy = host_copy(addr, np.dtype(np.float16), (3, 4))
    v[0, 0] = 99  # a copy: the buffer is valid only during the callback
    assert copy[0, 0] == 0 and copy.tolist()[2] == [8, 9, 10, 11]
    with pytest.raises(StageError, match="an address ytk cannot read \\(str\\)"):
        pointer("0x10")


def test_marking_finds_each_tap_by_its_tensor_name() -> None:
    marked: list[str] = []

    def layer(*names: str) -> SimpleNamespace:
        outs = [SimpleNamespace(name=n) for n in names]
        return SimpleNamespace(num_outputs=len(outs), get_output=lambda j: outs[j])

    layers = [layer("c1"), layer("h"), layer("d"), layer("y")]
    net = SimpleNamespace(num_layers=len(layers), get_layer=lambda i: layers[i],
                          mark_debug=lambda t: marked.append(t.name) or True)
    assert mark_debug_tensors(net, ["h", "d", "gone"]) == ["gone"]
    assert marked == ["h", "d"]


# -- end to end through the stand-in trtexec ---------------------------------------------------------------------
def _compile(ytk, fx: Path, tmp_path: Path, fake_trtexec, banner: str, arch: str, api: str,  # type: ignore[no-untyped-def]
             monkeypatch) -> tuple[EngineBundle, dict[str, np.ndarray], object]:
    fake_trtexec.version(banner)
    values = tap_carved_fixture(fx)
    np.savez(tmp_path / "engine-values.npz", **values)  # what the stand-in engine computes
    monkeypatch.setenv("FAKE_TRTEXEC_OUTPUTS", str(tmp_path / "engine-values.npz"))
    so = build_described_so(tmp_path / "DwConv3x3C16.so", describe(engine_api=api, sm=ArchSpec.parse(arch).sm)).path
    carved = fx / "carved"
    r = ytk("embedded", "compile", "-a", arch, "-p", "fp16", "--onnx", carved / "model.onnx", "--npz",
            carved / "model.npz", "-o", fx / "tapped.tgz", "--engine", "tensorrt", "--iterations", "3",
            "--custom-plugin", so, "--allow-unverified")
    assert r.code == 0, r.stderr[-3000:]
    return EngineBundle.open(fx / "tapped.tgz"), values, r


def test_tensorrt_10_reads_the_taps_as_debug_tensors_end_to_end(ytk, fx: Path, tmp_path: Path, fake_trtexec,
                                                               no_tensorrt_python, monkeypatch) -> None:
    b, values, _ = _compile(ytk, fx, tmp_path, fake_trtexec, "101401", ARCH10, "trt10-IPluginV3", monkeypatch)
    assert (b.manifest.taps_exposed_as, b.manifest.taps_note) == (DEBUG_TENSORS, "")
    build, timed, capture = (c["argv"] for c in fake_trtexec.calls() if c["argv"] != ["--help"])
    assert build[0].startswith("--onnx=") and build[0].endswith("/tensorrt/model.debug_taps.onnx")
    assert "--markDebug=h,d,c3,d2" in build
    plan = json.loads(b.read_bytes("engine.plan"))  # the stand-in's engine: its bindings and debug tensors
    assert [o["name"] for o in plan["outputs"]] == ["y", "z"] and [t["name"] for t in plan["debug"]] == TAPS
    assert not any(a.startswith("--saveDebugTensors") for a in timed)  # the timed run copies no tensor out
    assert capture[-4:] == ["--iterations=1", "--warmUp=0", "--duration=0",
                            "--saveDebugTensors=h:debug/0.bin,d:debug/1.bin,c3:debug/2.bin,d2:debug/3.bin"]
    outs = b.outputs()
    for name in TAPS:  # the stand-in wrote FP16 raw bytes (an --fp16 build); read back, shaped, as float32
        assert outs[name].dtype == np.float32 and outs[name].shape == values[name].shape
        np.testing.assert_array_equal(outs[name], values[name].astype(np.float16).astype(np.float32))
    log = b.read_bytes("build.log").decode()
    assert "4 debug tap(s) exposed as TensorRT debug tensors" in log
    r = ytk("embedded", "verify", fx / "carved" / "model.reference.npz", fx / "tapped.tgz", "--no-host", "--json")
    assert r.code == 0, r.stderr[-2000:]
    (v,) = json.loads(r.stdout)["taps"]
    assert v["exposed_as"] == DEBUG_TENSORS and v["plugin"] is None and len(v["numerics"]) == 4
    r = ytk("embedded", "verify", fx / "carved" / "model.reference.npz", fx / "tapped.tgz", "--no-host")
    assert "taps exposed as TensorRT debug tensors" in r.stdout and "markDebug keeps the tensor unfused" in r.stdout


def test_tensorrt_8_6_keeps_them_as_network_outputs_end_to_end(ytk, fx: Path, tmp_path: Path, fake_trtexec,
                                                              no_tensorrt_python, monkeypatch) -> None:
    b, values, r = _compile(ytk, fx, tmp_path, fake_trtexec, "8601", ARCH, "trt8-IPluginV2DynamicExt", monkeypatch)
    assert (b.manifest.taps_exposed_as, b.manifest.taps_note) == (NETWORK_OUTPUTS, "")
    build, timed = (c["argv"] for c in fake_trtexec.calls() if c["argv"] != ["--help"])
    assert build[0] == f"--onnx={(fx / 'carved' / 'model.onnx').resolve()}"
    assert not any(a.startswith(("--markDebug", "--saveDebugTensors")) for a in build + timed)
    assert [o["name"] for o in json.loads(b.read_bytes("engine.plan"))["outputs"]] == ["y", "z", *TAPS]
    for name in TAPS:  # --exportOutput's 6 significant digits
        np.testing.assert_allclose(b.outputs()[name], values[name], rtol=1e-5, atol=1e-6)
    assert "debug taps exposed as" not in r.stderr


def test_a_tensorrt_10_trtexec_without_the_flags_falls_back_and_says_so(ytk, fx: Path, tmp_path: Path, fake_trtexec,
                                                                        no_tensorrt_python, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_TRTEXEC_NO_DEBUG_FLAGS", "1")
    b, values, r = _compile(ytk, fx, tmp_path, fake_trtexec, "100001", ARCH10, "trt10-IPluginV3", monkeypatch)
    assert b.manifest.taps_exposed_as == NETWORK_OUTPUTS
    assert "cannot mark and save debug tensors (its --help lists no --markDebug and no --saveDebugTensors)" in \
        b.manifest.taps_note
    assert b.manifest.taps_note in r.stderr  # said when it happens, not only in the bundle
    build, timed = (c["argv"] for c in fake_trtexec.calls() if c["argv"] != ["--help"])
    assert not any(a.startswith("--markDebug") for a in build)
    np.testing.assert_allclose(b.outputs()["d2"], values["d2"], rtol=1e-5, atol=1e-6)
    r = ytk("embedded", "verify", fx / "carved" / "model.reference.npz", fx / "tapped.tgz", "--no-host")
    assert f"taps exposed as network outputs: {b.manifest.taps_note}" in r.stdout


def test_a_debug_tensor_trtexec_did_not_write_is_one_clear_line(ytk, fx: Path, tmp_path: Path, fake_trtexec,
                                                               no_tensorrt_python, monkeypatch) -> None:
    """The capture run exits 0 but writes no file for one tap: the error names it and the log, no traceback."""
    monkeypatch.setenv("FAKE_TRTEXEC_SKIP_DEBUG", "d2")
    fake_trtexec.version("101401")
    tap_carved_fixture(fx)
    so = build_described_so(tmp_path / "P.so", describe(engine_api="trt10-IPluginV3", sm=90)).path
    carved = fx / "carved"
    r = ytk("embedded", "compile", "-a", ARCH10, "--onnx", carved / "model.onnx", "--npz", carved / "model.npz",
            "-o", fx / "t.tgz", "--engine", "tensorrt", "--iterations", "2", "--custom-plugin", so,
            "--allow-unverified")
    assert r.code != 0 and "Traceback" not in r.stderr
    assert "trtexec wrote no debug/3.bin for debug tensor 'd2' (--saveDebugTensors)" in r.stderr and "log: " in r.stderr
    assert not (fx / "t.tgz").exists()
