"""The torch engine's build, plan file, hooks and errors, on the CPU (fp32) so CI runs them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from onnx import TensorProto
from onnx import helper as h

from torch_engine_helpers import artifact, dw_meta, engine_run, make_model, ort_run, rand, save
from ytk_backend_torch import plugin as torch_plugin
from ytk_backend_torch.engine import build_plan
from ytk_backend_torch.ops import fp16_safe
from ytk_backend_torch.plan import load_plan, save_plan
from ytk_backend_torch.program import Program
from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import ContractViolation, StageError
from ytk_hookspecs.models import PLUGIN_DOMAIN, CompileRequest, ProfileRequest

F32 = TensorProto.FLOAT


def conv_model(tmp_path, name="conv.onnx"):  # type: ignore[no-untyped-def]
    inits = {"w": rand(8, 3, 3, 3, seed=1), "b": rand(8, seed=2), "shape": np.array([2, -1], np.int64)}
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], name="node_Conv_1", pads=[1, 1, 1, 1]),
             h.make_node("HardSwish", ["c"], ["a"], name="n0"),
             h.make_node("Reshape", ["a", "shape"], ["y"], name="node_view")]
    return save(make_model(nodes, {"x": ([2, 3, 8, 10], F32)}, ["y", "a"], inits), tmp_path / name)


# -- errors a user can cause ---------------------------------------------------------------------------
def test_unsupported_op_names_op_and_node(tmp_path):
    nodes = [h.make_node("Unique", ["x"], ["y"], name="node_unique_3")]
    p = save(make_model(nodes, {"x": ([2, 3], F32)}, ["y"]), tmp_path / "e.onnx")
    with pytest.raises(StageError, match=r"node 'node_unique_3' \(Unique\) is an op the torch engine does not"):
        build_plan(p, "fp32", [])


def test_einsum_attention_runs(tmp_path):
    """Attention written with torch.einsum exports as Einsum nodes (a new user's model stopped at compile)."""
    nodes = [h.make_node("Einsum", ["q", "k"], ["s"], name="node_einsum_1", equation="bhid,bhjd->bhij"),
             h.make_node("Softmax", ["s"], ["p"], name="node_softmax_2", axis=-1),
             h.make_node("Einsum", ["p", "k"], ["y"], name="node_einsum_3", equation="bhij,bhjd->bhid")]
    p = save(make_model(nodes, {"q": ([2, 2, 5, 4], F32), "k": ([2, 2, 5, 4], F32)}, ["y"]), tmp_path / "e.onnx")
    f = {"q": rand(2, 2, 5, 4, seed=1), "k": rand(2, 2, 5, 4, seed=2)}
    got, prog = engine_run(p, f)
    np.testing.assert_allclose(got[0], ort_run(p, f)[0], atol=1e-5, rtol=1e-4)
    assert [s.type for s in prog.steps].count("MatrixMultiply") == 2


def test_symbolic_input_dim_is_refused(tmp_path):
    nodes = [h.make_node("Relu", ["x"], ["y"], name="r")]
    p = save(make_model(nodes, {"x": (["batch", 3], F32)}, ["y"]), tmp_path / "s.onnx")
    with pytest.raises(StageError, match="symbolic"):
        build_plan(p, "fp32", [])


def test_missing_onnx_and_bad_npz(tmp_path):
    with pytest.raises(StageError, match="not found"):
        build_plan(tmp_path / "nope.onnx", "fp32", [])
    p = conv_model(tmp_path)
    np.savez(tmp_path / "bad.npz", input=np.zeros((2, 3, 8, 10), np.float32))
    req = CompileRequest(onnx=p, npz=tmp_path / "bad.npz", arch="x86_64-sm90-linux-cu130-trt10", precision="fp32",
                         workdir=tmp_path / "w", options={"device": "cpu"})
    with pytest.raises(StageError, match="no array 'x'"):
        torch_plugin.compile_engine(req, StageContext())


def test_cuda_device_without_gpu_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    p = conv_model(tmp_path)
    np.savez(tmp_path / "m.npz", x=rand(2, 3, 8, 10))
    req = CompileRequest(onnx=p, npz=tmp_path / "m.npz", arch="x86_64-sm90-linux-cu130-trt10", precision="fp16",
                         workdir=tmp_path / "w")
    with pytest.raises(StageError, match="needs a CUDA device"):
        torch_plugin.compile_engine(req, StageContext())


# -- plan file -----------------------------------------------------------------------------------------
def test_fp16_plan_stores_weights_in_fp16_and_shapes_exact(tmp_path):
    p = conv_model(tmp_path)
    plan, consts, bindings = build_plan(p, "fp16", [])
    assert consts["w"].dtype == torch.float16 and consts["b"].dtype == torch.float16
    assert consts["shape"].dtype == torch.int64
    path = save_plan(tmp_path / "e.plan", plan, consts, bindings)
    plan2, consts2, _ = load_plan(path)
    assert plan2 == plan and set(consts2) == set(consts)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(StageError, match="not a torch engine file"):
        load_plan(path)


def test_fp16_cast_keeps_tiny_and_huge_constants_meaningful():
    t = torch.tensor([1e-15, -1e-12, 0.0, 1e9, -1e9, 0.5])
    c = fp16_safe(t)
    assert c[0] > 0 and c[1] < 0 and c[2] == 0, "an eps guard must not flush to zero"
    assert torch.isfinite(c).all() and c[3] == 65504 and c[4] == -65504
    assert c[5] == 0.5


def test_program_reloaded_from_file_gives_identical_outputs(tmp_path):
    p = conv_model(tmp_path)
    x = rand(2, 3, 8, 10, seed=3)
    got, prog = engine_run(p, {"x": x})
    save_plan(tmp_path / "e.plan", prog.plan, *build_plan(p, "fp32", [])[1:])
    plan, consts, b = load_plan(tmp_path / "e.plan")
    again = Program(plan, consts, b, "cpu")
    with torch.inference_mode():
        out = again(again.prepare_inputs([x]))
    for a, o in zip(got, out):
        np.testing.assert_array_equal(a, o.numpy())


# -- hooks ---------------------------------------------------------------------------------------------
def test_compile_and_profile_hooks_on_cpu(tmp_path):
    p = conv_model(tmp_path, "model.onnx")
    x = rand(2, 3, 8, 10, seed=4)
    np.savez(tmp_path / "model.npz", x=x)
    req = CompileRequest(onnx=p, npz=tmp_path / "model.npz", arch="x86_64-sm90-linux-cu130-trt10", precision="fp32",
                         workdir=tmp_path / "work", options={"device": "cpu", "profile_iterations": "3"})
    res = torch_plugin.compile_engine(req, StageContext())
    assert res.backend == "torch" and res.backend_version == torch.__version__ and not res.simulated
    assert res.engine.is_file() and res.device.startswith("CPU") and res.build_s > 0
    info = json.loads(res.layer_info.read_text())
    names = [ly["Name"] for ly in info["Layers"]]
    assert names[0] == "Reformatting CopyNode for Input Tensor 0 to node_Conv_1"
    assert {"node_Conv_1", "n0", "node_view"} <= set(names)
    assert info["Bindings"] == ["x", "y", "a"]
    conv = next(ly for ly in info["Layers"] if ly["Name"] == "node_Conv_1")
    assert conv["LayerType"] == "Convolution" and conv["Metadata"] == "[ONNX Layer: node_Conv_1]"
    assert [t["Name"] for t in conv["Inputs"]] == ["x"], "weights are not layer inputs"

    prof = torch_plugin.profile_engine(ProfileRequest(compile=res, request=req, iterations=4, warmup=1),
                                           StageContext())
    assert len(prof.iterations_ms) == 4 and all(t > 0 for t in prof.iterations_ms)
    assert not prof.simulated and prof.device == res.device
    raw = json.loads(prof.raw_profile.read_text())
    assert raw[0] == {"count": 3} and len(raw) == len(prof.layers) + 1 and {"name", "medianMs"} <= set(raw[1])
    by_name = {ly.name: ly for ly in prof.layers}
    assert by_name["node_Conv_1"].onnx_nodes == ["node_Conv_1"] and by_name["node_Conv_1"].type == "Convolution"
    assert all(ly.median_ms >= 0 for ly in prof.layers)
    out = np.load(prof.outputs)
    ref = ort_run(p, {"x": x})
    assert sorted(out.files) == ["a", "y"]
    np.testing.assert_allclose(out["y"], ref[0], atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(out["a"], ref[1], atol=1e-5, rtol=1e-4)
    assert out["y"].dtype == np.float32


# -- probe and automatic selection ---------------------------------------------------------------------
def test_probe_without_cuda(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.chdir(tmp_path)
    av = torch_plugin._probe()
    assert not av.available and av.reason.startswith("no CUDA device") and 'device = "cpu"' in av.reason
    # asked for in ytk.toml, the CPU is the engine's device: available, and said to be the CPU
    (tmp_path / "ytk.toml").write_text('[backends.torch]\ndevice = "cpu"\n')
    av = torch_plugin._probe()
    assert av.available and av.reason.startswith("on this CPU") and av.details["device"] == "cpu"


def _fake_gpu(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA Test GPU")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))


def test_probe_with_cuda_and_auto_selection_prefers_torch_over_mock(monkeypatch):
    from ytk_core.plugins import BackendManager, select_backend
    from ytk_hookspecs.models import ArchSpec

    _fake_gpu(monkeypatch)
    monkeypatch.delenv("YTK_ENGINE", raising=False)
    av = torch_plugin._probe()
    assert av.available and av.reason == "CUDA device NVIDIA Test GPU (no TensorRT needed)"
    orin = torch_plugin._probe(arch=ArchSpec.parse("arm64-sm87-dos6010-cu114-trt86"))
    assert orin.available and "not the sm87 target" in orin.reason
    mgr = BackendManager()
    sel = select_backend(mgr, "engine")
    if "tensorrt" in mgr.backends and mgr.backends["tensorrt"].availability().available:
        pytest.skip("a usable tensorrt engine outranks torch here")
    assert sel.name == "torch" and sel.source == "auto"
    assert "no TensorRT needed" in sel.reason


# -- custom-op nodes: binding and contract checks (no GPU needed) ---------------------------------------
def carved_model(tmp_path, c=16, n_inputs=3, declared=None):  # type: ignore[no-untyped-def]
    inits = {"pw": rand(c, 4, 1, 1, seed=1), "dw.weight": rand(c, 1, 3, 3, seed=2), "dw.bias": rand(c, seed=3)}
    ins = ["p", "dw.weight", "dw.bias"][:n_inputs]
    nodes = [h.make_node("Conv", ["x", "pw"], ["p"], name="node_Conv_0"),
             h.make_node("DwTest", ins, ["d"], name="yasp_DwTest_0", domain=PLUGIN_DOMAIN,
                         plugin_namespace="yasp", plugin_version="1"),
             h.make_node("Add", ["d", "p"], ["y"], name="node_add")]
    m = make_model(nodes, {"x": ([2, 4, 6, 8], F32)}, ["y"], inits, value_info={"d": declared} if declared else None,
                   extra_opsets={PLUGIN_DOMAIN: 1})
    return save(m, tmp_path / "carved.onnx")


def test_custom_node_is_bound_and_folded_with_its_contract(tmp_path):
    plan, consts, bindings = build_plan(carved_model(tmp_path), "fp16", [artifact(dw_meta())])
    layer = next(ly for ly in plan.layers if ly.name == "yasp_DwTest_0")
    assert layer.kind == "plugin" and layer.onnx_nodes == ["yasp_DwTest_0"]
    assert bindings["yasp_DwTest_0"].name == "DwTest"
    assert plan.values["d"].shape == [2, 16, 6, 8]
    # A plugin's lifted weights stay exact in the plan; the plugin casts them to its declared dtypes.
    assert consts["dw.weight"].dtype == torch.float32 and consts["pw"].dtype == torch.float16


def test_plugin_for_the_mock_cpu_engine_is_refused(tmp_path):
    with pytest.raises(StageError, match="engine API 'mock-cpu'"):
        build_plan(carved_model(tmp_path), "fp16", [artifact(dw_meta(), engine_api="mock-cpu")])


def test_custom_node_without_its_plugin(tmp_path):
    with pytest.raises(StageError, match=r"yasp_DwTest_0.*yasp::DwTest version 1"):
        build_plan(carved_model(tmp_path), "fp16", [artifact(dw_meta(name="Other"))])


def test_custom_node_arity_mismatch(tmp_path):
    with pytest.raises(ContractViolation, match="2 input"):
        build_plan(carved_model(tmp_path, n_inputs=2), "fp16", [artifact(dw_meta())])


def test_khwc8_needs_channels_divisible_by_8(tmp_path):
    with pytest.raises(ContractViolation, match="divisible by 8"):
        build_plan(carved_model(tmp_path, c=12), "fp16", [artifact(dw_meta())])


def test_declared_output_shape_must_match_contract(tmp_path):
    with pytest.raises(StageError, match=r"declares \[2, 16, 3, 4\]"):
        build_plan(carved_model(tmp_path, declared=[2, 16, 3, 4]), "fp16", [artifact(dw_meta())])


def test_plugin_node_needs_a_cuda_device(tmp_path):
    plan, consts, bindings = build_plan(carved_model(tmp_path), "fp32", [artifact(dw_meta())])
    with pytest.raises(StageError, match="CUDA device"):
        Program(plan, consts, bindings, "cpu")


# -- through the core: `ytk embedded compile --engine torch` writes a real bundle ----------------------
def test_cli_compile_writes_a_bundle_with_the_torch_engine(tmp_path, monkeypatch, ytk):
    """On a machine without a GPU, via ytk.toml's [backends.torch] device = "cpu" (a new user found this path
    unreachable: the probe said "no CUDA device" whatever the config said); the bundle must carry measured,
    non-simulated figures."""
    from ytk_core.bundle import EngineBundle
    from ytk_core.runtime import reset_runtime

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    p = conv_model(tmp_path, "model.onnx")
    x = rand(2, 3, 8, 10, seed=5)
    np.savez(tmp_path / "model.npz", x=x)
    (tmp_path / "ytk.toml").write_text('[backends.torch]\ndevice = "cpu"\nprofile_iterations = 2\n')
    monkeypatch.chdir(tmp_path)
    reset_runtime()
    try:
        r = ytk("embedded", "compile", "-a", "x86_64-sm90-linux-cu130-trt10", "-p", "fp32", "--onnx", p,
                "--npz", tmp_path / "model.npz", "-o", tmp_path / "base.tgz", "--engine", "torch", "--iterations", "3")
        reset_runtime()
        j = ytk("embedded", "compile", "-a", "x86_64-sm90-linux-cu130-trt10", "-p", "fp32", "--onnx", p,
                "--npz", tmp_path / "model.npz", "-o", tmp_path / "again.tgz", "--engine", "torch", "--iterations",
                "3", "--json")
    finally:
        reset_runtime()
    assert r.code == 0, r.stderr
    # measured, yet not on the arch the bundle carries: said so (a new user read 18.7 ms as an Orin figure), by the
    # compile stage itself, so that --json and the autoloop's compiles carry it too
    assert "measured on this machine's CPU" in r.stderr and \
        "not on x86_64-sm90-linux-cu130-trt10's GPU" in r.stderr, r.stderr
    assert j.code == 0 and any("measured on this machine's CPU" in w for w in j.json()["warnings"]), j.stdout
    b = EngineBundle.open(tmp_path / "base.tgz")
    m = b.manifest
    assert m.engine_backend == "torch" and not m.simulated and m.device.startswith("CPU")
    assert len(b.benchmark.iterations_ms) == 3
    assert "node_Conv_1" in {ly.name for ly in b.profile.layers}
    assert b.layer_info()["Bindings"] == ["x", "y", "a"]
    np.testing.assert_allclose(b.outputs()["y"], ort_run(p, {"x": x})[0], atol=1e-5, rtol=1e-4)
    plan = b.read_bytes("engine.plan")
    (tmp_path / "e.plan").write_bytes(plan)
    assert load_plan(tmp_path / "e.plan")[0].precision == "fp32"


def test_the_engine_runs_fp32_layers_without_tf32_and_restores_the_flags():
    """cuDNN's default TF32 convolutions put an H100's fp32 engine at 1.8e-4 max rel error, over fp32's 1e-4."""
    import torch

    from ytk_backend_torch.engine import tuned_kernels

    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        with tuned_kernels(torch.device("cpu")):
            assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before
