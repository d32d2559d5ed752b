"""The torch engine on a real GPU: fp16 numerics against torch fp32, the hooks end to end (CUDA
graph benchmark, per-layer profile), and a custom-op node executed by a plugin built with nvcc."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto
from onnx import helper as h

from tests.conftest import REPO
from torch_engine_helpers import cosine, dw_meta, engine_run, make_model, ort_run, rand, save
from ytk_backend_torch import plugin as torch_plugin
from ytk_hookspecs import StageContext
from ytk_hookspecs.models import PLUGIN_DOMAIN, CompileRequest, PluginArtifact, ProfileRequest

pytestmark = pytest.mark.gpu

SIZE = "2x128x192"


def _example():  # type: ignore[no-untyped-def]
    old = os.environ.get("YTK_EXAMPLE_SIZE")
    os.environ["YTK_EXAMPLE_SIZE"] = SIZE
    try:
        spec = importlib.util.spec_from_file_location("evit_gpu", REPO / "contrib/models/efficientvit_b1/model.py")
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        return mod.Model(), mod.get_fwd_args()
    finally:
        if old is None:
            os.environ.pop("YTK_EXAMPLE_SIZE", None)
        else:
            os.environ["YTK_EXAMPLE_SIZE"] = old


@pytest.fixture(scope="module")
def example(tmp_path_factory):  # type: ignore[no-untyped-def]
    from ytk_core.frontend.export import exact_constant_matching, quiet_exporter

    model, args = _example()
    d = tmp_path_factory.mktemp("evit_gpu")
    with quiet_exporter(), exact_constant_matching(), torch.no_grad():
        torch.onnx.export(model, args, dynamo=True, optimize=True, verbose=False, report=False).save(
            str(d / "model.onnx"))
    np.savez(d / "model.npz", x=args[0].numpy())
    with torch.no_grad():
        ref = [t.float().cpu().numpy() for t in model.cuda()(args[0].cuda())]
    return d, args[0].numpy(), ref


def test_fp16_engine_end_to_end_on_gpu(example):
    d, x, ref = example
    req = CompileRequest(onnx=d / "model.onnx", npz=d / "model.npz", arch="x86_64-sm90-linux-cu130-trt10",
                         precision="fp16", workdir=d / "fp16", options={"profile_iterations": "10"})
    res = torch_plugin.compile_engine(req, StageContext())
    assert res.device == torch.cuda.get_device_name() and not res.simulated
    prof = torch_plugin.profile_engine(ProfileRequest(compile=res, request=req, iterations=20, warmup=3),
                                           StageContext())
    assert len(prof.iterations_ms) == 20 and min(prof.iterations_ms) > 0
    convs = [ly for ly in prof.layers if ly.type == "Convolution"]
    assert convs and all(ly.median_ms > 0 for ly in convs)
    out = np.load(prof.outputs)
    names = [o.name for o in onnx.load(str(d / "model.onnx")).graph.output]
    assert out.files == names
    for name, r in zip(names, ref):
        g = out[name]
        assert np.isfinite(g).all(), name
        assert cosine(g, r) > 0.999, name


def test_fp32_engine_on_gpu_matches_onnxruntime(example):
    d, x, _ = example
    got, prog = engine_run(d / "model.onnx", {"x": x}, "fp32", "cuda")
    for g, r in zip(got, ort_run(d / "model.onnx", {"x": x})):
        assert cosine(g, r) > 0.99999
        np.testing.assert_allclose(g, r, atol=5e-2, rtol=5e-2)  # cuDNN may use TF32 for fp32 convs


DW_SOURCE = r"""
#include <cuda_fp16.h>
// depthwise 3x3, stride 1, pad 1, + bias + hardswish; x, y NHWC fp16; w [C,1,3,3] fp16; b [C] fp32
__global__ void dw3x3_hswish(const __half* x, const __half* w, const float* b, __half* y,
                             int N, int C, int H, int W) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  long total = (long)N * H * W * C;
  if (i >= total) return;
  int c = i % C; long p = i / C; int xw = p % W; p /= W; int yh = p % H; int n = p / H;
  float acc = b[c];
  for (int dy = -1; dy <= 1; ++dy)
    for (int dx = -1; dx <= 1; ++dx) {
      int yy = yh + dy, xx = xw + dx;
      if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
      acc += __half2float(x[(((long)n * H + yy) * W + xx) * C + c]) * __half2float(w[c * 9 + (dy + 1) * 3 + dx + 1]);
    }
  y[i] = __float2half(acc * fminf(fmaxf(acc + 3.f, 0.f), 6.f) / 6.f);
}
extern "C" int dw_launch(const void* const* in, void* const* out, const int64_t* ext, void* ws, cudaStream_t s) {
  int N = ext[0], C = ext[1], H = ext[2], W = ext[3];
  long total = (long)N * C * H * W;
  dw3x3_hswish<<<(unsigned)((total + 255) / 256), 256, 0, s>>>((const __half*)in[0], (const __half*)in[1],
      (const float*)in[2], (__half*)out[0], N, C, H, W);
  return (int)cudaGetLastError();
}
"""


def _build_plugin(tmp_path) -> PluginArtifact:  # type: ignore[no-untyped-def]
    from ytk_backend_nvcc.builder import build
    from ytk_hookspecs.kernel_source import KernelSource
    from ytk_hookspecs.models import BuildRequest, sha256_file

    major, minor = torch.cuda.get_device_capability()
    src = KernelSource(header="", source=DW_SOURCE, meta=dw_meta()).write(tmp_path / "DwTest.module_source.py")
    res = build(BuildRequest(source=src, plugin_name="DwTest", arch=f"x86_64-sm{major}{minor}-linux-cu130-trt10",
                             output=tmp_path / "DwTest.so"), StageContext())
    return PluginArtifact(path=res.so_path, sha256=sha256_file(res.so_path), description=res.description)


def test_custom_op_node_runs_through_its_plugin(tmp_path):
    c = 32
    inits = {"pw": rand(c, 8, 1, 1, seed=1, scale=0.3), "dw.weight": rand(c, 1, 3, 3, seed=2, scale=0.3),
             "dw.bias": rand(c, seed=3, scale=0.1)}
    tail = [h.make_node("Add", ["d", "p"], ["y"], name="node_add")]
    head = [h.make_node("Conv", ["x", "pw"], ["p"], name="node_Conv_0")]
    carved = head + [h.make_node("DwTest", ["p", "dw.weight", "dw.bias"], ["d"], name="yasp_DwTest_0",
                                 domain=PLUGIN_DOMAIN, plugin_namespace="yasp", plugin_version="1")] + tail
    plain = head + [h.make_node("Conv", ["p", "dw.weight", "dw.bias"], ["dc"], name="dw", group=c, pads=[1, 1, 1, 1]),
                    h.make_node("HardSwish", ["dc"], ["d"], name="hs")] + tail
    shape = ([2, 8, 24, 40], TensorProto.FLOAT)
    pc = save(make_model(carved, {"x": shape}, ["y"], inits, extra_opsets={PLUGIN_DOMAIN: 1}), tmp_path / "carved.onnx")
    pp = save(make_model(plain, {"x": shape}, ["y"], inits), tmp_path / "plain.onnx")
    art = _build_plugin(tmp_path)
    x = rand(2, 8, 24, 40, seed=4)
    want = ort_run(pp, {"x": x})[0]
    got, prog = engine_run(pc, {"x": x}, "fp16", "cuda", [art])
    assert any(s.type == "PluginV2" and s.name == "yasp_DwTest_0" for s in prog.steps)
    np.testing.assert_allclose(got[0], want, atol=3e-2, rtol=3e-2)
    assert cosine(got[0], want) > 0.9999
    # Through the hooks: the CUDA graph captures the plugin launch and the profile names its layer.
    np.savez(tmp_path / "model.npz", x=x)
    req = CompileRequest(onnx=pc, npz=tmp_path / "model.npz", arch="x86_64-sm90-linux-cu130-trt10",
                         precision="fp16", workdir=tmp_path / "work", plugins=[art],
                         options={"profile_iterations": "5"})
    res = torch_plugin.compile_engine(req, StageContext())
    prof = torch_plugin.profile_engine(ProfileRequest(compile=res, request=req, iterations=10, warmup=2),
                                           StageContext())
    layer = next(ly for ly in prof.layers if ly.name == "yasp_DwTest_0")
    assert layer.onnx_nodes == ["yasp_DwTest_0"] and layer.median_ms > 0
    np.testing.assert_allclose(np.load(prof.outputs)["y"], want, atol=3e-2, rtol=3e-2)


def test_inductor_mode_on_gpu_fuses_the_graph_and_keeps_numerics(example):
    # The worked example in inductor mode: one compiled piece (no plugins), captured in the benchmark's CUDA
    # graph, with the op-by-op per-layer profile beside it and the same outputs as the eager engine.
    d, x, ref = example
    req = CompileRequest(onnx=d / "model.onnx", npz=d / "model.npz", arch="x86_64-sm90-linux-cu130-trt10",
                         precision="fp16", workdir=d / "inductor", options={"profile_iterations": "5",
                                                                            "mode": "inductor"})
    res = torch_plugin.compile_engine(req, StageContext())
    assert res.backend_version.endswith("(inductor)")
    prof = torch_plugin.profile_engine(ProfileRequest(compile=res, request=req, iterations=20, warmup=3),
                                       StageContext())
    assert len(prof.iterations_ms) == 20 and min(prof.iterations_ms) > 0
    assert any(ly.type == "Convolution" and ly.median_ms > 0 for ly in prof.layers)
    out = np.load(prof.outputs)
    for name, r in zip(out.files, ref):
        assert cosine(out[name], r) > 0.999, name


def test_inductor_mode_cuts_the_graph_at_a_plugin_on_gpu(tmp_path):
    c = 32
    inits = {"pw": rand(c, 8, 1, 1, seed=1, scale=0.3), "dw.weight": rand(c, 1, 3, 3, seed=2, scale=0.3),
             "dw.bias": rand(c, seed=3, scale=0.1)}
    nodes = [h.make_node("Conv", ["x", "pw"], ["p"], name="node_Conv_0"),
             h.make_node("DwTest", ["p", "dw.weight", "dw.bias"], ["d"], name="yasp_DwTest_0", domain=PLUGIN_DOMAIN,
                         plugin_namespace="yasp", plugin_version="1"),
             h.make_node("Add", ["d", "p"], ["s"], name="node_add"), h.make_node("Sigmoid", ["s"], ["y"], name="sig")]
    pc = save(make_model(nodes, {"x": ([2, 8, 24, 40], TensorProto.FLOAT)}, ["y"], inits,
                         extra_opsets={PLUGIN_DOMAIN: 1}), tmp_path / "carved.onnx")
    art = _build_plugin(tmp_path)
    x = rand(2, 8, 24, 40, seed=4)
    np.savez(tmp_path / "model.npz", x=x)
    outs = {}
    for mode in ("eager", "inductor"):
        req = CompileRequest(onnx=pc, npz=tmp_path / "model.npz", arch="x86_64-sm90-linux-cu130-trt10",
                             precision="fp16", workdir=tmp_path / mode, plugins=[art],
                             options={"profile_iterations": "3", "mode": mode})
        res = torch_plugin.compile_engine(req, StageContext())
        prof = torch_plugin.profile_engine(ProfileRequest(compile=res, request=req, iterations=5, warmup=2),
                                           StageContext())
        outs[mode] = np.load(prof.outputs)["y"]
    np.testing.assert_allclose(outs["inductor"], outs["eager"], atol=2e-3, rtol=2e-3)
