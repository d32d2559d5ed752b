"""The trtexec command lines and the raw input files, per TensorRT version."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ytk_backend_tensorrt.commands import (BuildPlan, MeasurePlan, build_command, load_inputs_spec, measure_command,
                                           shapes_spec)
from ytk_backend_tensorrt.io_files import graph_io, write_input_files, write_outputs_npz
from ytk_backend_tensorrt.versions import TrtVersion
from ytk_hookspecs.errors import StageError

V86, V10, V85 = TrtVersion(8, 6, 1), TrtVersion(10, 14, 1), TrtVersion(8, 5, 3)


def test_build_command_for_8_6_with_plugins() -> None:
    cmd = build_command(BuildPlan(trtexec="/usr/src/tensorrt/bin/trtexec", onnx=Path("/w/model.onnx"),
                                  engine="engine.plan", layer_info="layer_info.json", precision="fp16",
                                  plugins=[Path("/p/A.so"), Path("/p/B.so")], version=V86))
    assert cmd == ["/usr/src/tensorrt/bin/trtexec", "--onnx=/w/model.onnx", "--saveEngine=engine.plan", "--fp16",
                   "--dynamicPlugins=/p/A.so", "--dynamicPlugins=/p/B.so", "--profilingVerbosity=detailed",
                   "--exportLayerInfo=layer_info.json", "--skipInference"]


def test_build_command_variants() -> None:
    base = dict(trtexec="trtexec", onnx=Path("m.onnx"), engine="e.plan", layer_info="l.json", plugins=[Path("a.so")])
    fp32_85 = build_command(BuildPlan(**base, precision="fp32", version=V85))  # type: ignore[arg-type]
    assert "--fp16" not in fp32_85 and "--plugins=a.so" in fp32_85 and not any("dynamicPlugins" in a for a in fp32_85)
    assert "--noTF32" in fp32_85  # fp32 is held to fp32's tolerance: no TF32 tactics
    full = build_command(BuildPlan(**base, precision="fp16", version=V10, shapes="x:1x3x8x8", int8=True,  # type: ignore[arg-type]
                                   workspace_mib=2048, extra=("--builderOptimizationLevel=5",)))
    assert full[3:5] == ["--fp16", "--int8"] and "--dynamicPlugins=a.so" in full and "--noTF32" not in full
    assert full[-3:] == ["--shapes=x:1x3x8x8", "--memPoolSize=workspace:2048M", "--builderOptimizationLevel=5"]


def test_measure_command() -> None:
    cmd = measure_command(MeasurePlan(trtexec="trtexec", engine="engine.plan", plugins=[Path("/p/A.so")], version=V86,
                                      load_inputs="x:inputs/0.bin", iterations=13, warmup_ms=200, times="times.json",
                                      profile="profile.json", outputs="outputs.json", cuda_graph=True))
    assert cmd == ["trtexec", "--loadEngine=engine.plan", "--dynamicPlugins=/p/A.so", "--loadInputs=x:inputs/0.bin",
                   "--iterations=13", "--warmUp=200", "--duration=0", "--avgRuns=1", "--separateProfileRun",
                   "--exportTimes=times.json", "--exportProfile=profile.json", "--exportOutput=outputs.json",
                   "--useCudaGraph"]


def test_specs_quote_names_with_separators() -> None:
    assert (load_inputs_spec([("x", "inputs/0.bin"), ("input:0", "inputs/1.bin")])
            == "x:inputs/0.bin,'input:0':inputs/1.bin")
    assert shapes_spec([("a,b", (1, 3, 8)), ("y", (2,))]) == "'a,b':1x3x8,y:2"
    with pytest.raises(ValueError, match="single quote"):
        load_inputs_spec([("it's", "f")])


def _model(path: Path, dtype: int = TensorProto.FLOAT, shape: list[int | str] = [2, 3]) -> Path:  # noqa: B006
    x = helper.make_tensor_value_info("x", dtype, shape)
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [4])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["idx"], ["n"])],
                          "g", [x, idx], [y, n])
    onnx.save(helper.make_model(g), str(path))
    return path


def test_input_files_are_the_binding_bytes(tmp_path: Path) -> None:
    onnx_path = _model(tmp_path / "m.onnx")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    idx = np.array([0, 1, 2, 3], dtype=np.int64)
    np.savez(tmp_path / "in.npz", x=x, idx=idx)
    inputs, _ = graph_io(onnx_path)
    files = write_input_files(tmp_path / "in.npz", inputs, tmp_path / "i86", V86)
    assert [(n, f) for n, f, _ in files] == [("x", "0.bin"), ("idx", "1.bin")]
    assert (tmp_path / "i86" / "0.bin").read_bytes() == x.tobytes()
    # TensorRT 8.6 binds an INT64 input as INT32; 10 keeps INT64
    assert (tmp_path / "i86" / "1.bin").read_bytes() == idx.astype(np.int32).tobytes()
    write_input_files(tmp_path / "in.npz", inputs, tmp_path / "i10", V10)
    assert (tmp_path / "i10" / "1.bin").read_bytes() == idx.tobytes()


def test_input_files_refuse_what_trtexec_would(tmp_path: Path) -> None:
    onnx_path = _model(tmp_path / "m.onnx")
    inputs, _ = graph_io(onnx_path)
    np.savez(tmp_path / "shape.npz", x=np.zeros((3, 2), np.float32), idx=np.zeros(4, np.int64))
    with pytest.raises(StageError, match=r"shape \[3, 2\]"):
        write_input_files(tmp_path / "shape.npz", inputs, tmp_path / "a", V86)
    np.savez(tmp_path / "big.npz", x=np.zeros((2, 3), np.float32), idx=np.array([0, 1, 2, 2**40]))
    with pytest.raises(StageError, match="outside int32"):
        write_input_files(tmp_path / "big.npz", inputs, tmp_path / "b", V86)
    np.savez(tmp_path / "missing.npz", x=np.zeros((2, 3), np.float32))
    with pytest.raises(StageError, match="no array 'idx'"):
        write_input_files(tmp_path / "missing.npz", inputs, tmp_path / "c", V86)


def test_dynamic_input_takes_the_npz_shape(tmp_path: Path) -> None:
    onnx_path = _model(tmp_path / "m.onnx", shape=["N", 3])
    inputs, _ = graph_io(onnx_path)
    assert not inputs[0].static and inputs[0].shape == ("N", 3)
    np.savez(tmp_path / "in.npz", x=np.zeros((5, 3), np.float32), idx=np.zeros(4, np.int64))
    files = write_input_files(tmp_path / "in.npz", inputs, tmp_path / "d", V10)
    assert files[0][2] == (5, 3)


def test_outputs_npz_keeps_onnx_names_and_types(tmp_path: Path) -> None:
    _, outputs = graph_io(_model(tmp_path / "m.onnx"))
    path = write_outputs_npz({"y": np.ones((2, 3)), "n": np.array([0.0, 1.0, 2.0, 3.0])}, outputs, tmp_path / "o.npz",
                             "o.json")
    with np.load(path) as z:
        assert z["y"].dtype == np.float32 and z["n"].dtype == np.int64 and list(z["n"]) == [0, 1, 2, 3]
    with pytest.raises(StageError, match="no values for output 'n'"):
        write_outputs_npz({"y": np.ones((2, 3))}, outputs, tmp_path / "p.npz", "o.json")
