"""A custom-op node with several outputs (an attention block that hands on its output and its
weights): bound, shaped from the contract per output, and on a GPU launched with every output."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto
from onnx import helper as h

from torch_engine_helpers import artifact, engine_run, make_model, rand, save
from ytk_backend_torch.engine import build_plan
from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import ContractViolation
from ytk_hookspecs.models import PLUGIN_DOMAIN, PluginArtifact, PluginMeta

F32 = TensorProto.FLOAT

TWO_SOURCE = r"""
#include <cuda_fp16.h>
// y0 = 2 x (same shape), y1 = row sums of x ([R, 1]); x, y0, y1 row-major fp16
__global__ void two_outputs(const __half* x, __half* y0, __half* y1, int R, int C) {
  int r = blockIdx.x;
  if (r >= R) return;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    y0[(long)r * C + c] = __float2half(2.f * __half2float(x[(long)r * C + c]));
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int c = 0; c < C; ++c) s += __half2float(x[(long)r * C + c]);
    y1[r] = __float2half(s);
  }
}
extern "C" int two_launch(const void* const* in, void* const* out, const int64_t* ext, void* ws, cudaStream_t s) {
  int R = ext[0], C = ext[1];
  two_outputs<<<R, 64, 0, s>>>((const __half*)in[0], (__half*)out[0], (__half*)out[1], R, C);
  return (int)cudaGetLastError();
}
"""


def two_meta(name: str = "TwoOut") -> PluginMeta:
    return PluginMeta(
        plugin_name=name, plugin_namespace="yasp", deployment_target="torch",
        inputs=[{"name": "x", "dtype": "float16", "format": "kLINEAR", "shape": ["in0[0]", "in0[1]"]}],
        outputs=[{"name": "y0", "dtype": "float16", "format": "kLINEAR", "shape": ["in0[0]", "in0[1]"]},
                 {"name": "y1", "dtype": "float16", "format": "kLINEAR", "shape": ["in0[0]", "1"]}],
        extents={"R": "in0[0]", "C": "in0[1]"}, launcher="two_launch")


def carved_two(tmp_path, outputs=("y0", "y1")):  # type: ignore[no-untyped-def]
    """x -> Relu -> TwoOut -> (y0, y1); both outputs read downstream (one by an Add, one a graph output)."""
    nodes = [h.make_node("Relu", ["x"], ["r"], name="node_relu"),
             h.make_node("TwoOut", ["r"], list(outputs), name="TwoOut_0", domain=PLUGIN_DOMAIN,
                         plugin_namespace="yasp", plugin_version="1"),
             h.make_node("Add", ["y0", "x"], ["z"], name="node_add")]
    m = make_model(nodes, {"x": ([6, 40], F32)}, ["z", *outputs[1:]], extra_opsets={PLUGIN_DOMAIN: 1})
    return save(m, tmp_path / "two.onnx")


def test_every_output_is_shaped_from_its_contract(tmp_path):
    plan, _, bindings = build_plan(carved_two(tmp_path), "fp16", [artifact(two_meta())])
    layer = next(ly for ly in plan.layers if ly.name == "TwoOut_0")
    assert layer.kind == "plugin" and bindings["TwoOut_0"].name == "TwoOut"
    assert plan.values["y0"].shape == [6, 40] and plan.values["y1"].shape == [6, 1]
    assert [o.name for o in plan.outputs] == ["z", "y1"]


def test_output_count_must_match_the_contract(tmp_path):
    with pytest.raises(ContractViolation, match="1 input.* and 1 output"):
        build_plan(carved_two(tmp_path, outputs=("y0",)), "fp16", [artifact(two_meta())])


@pytest.mark.gpu
def test_multi_output_plugin_runs_on_gpu(tmp_path):
    from ytk_backend_nvcc.builder import build
    from ytk_hookspecs.kernel_source import KernelSource
    from ytk_hookspecs.models import BuildRequest, sha256_file

    major, minor = torch.cuda.get_device_capability()
    src = KernelSource(header="", source=TWO_SOURCE, meta=two_meta()).write(tmp_path / "TwoOut.module_source.py")
    res = build(BuildRequest(source=src, plugin_name="TwoOut", arch=f"x86_64-sm{major}{minor}-linux-cu130-trt10",
                             output=tmp_path / "TwoOut.so"), StageContext())
    art = PluginArtifact(path=res.so_path, sha256=sha256_file(res.so_path), description=res.description)
    x = rand(6, 40, seed=3)
    (z, y1), prog = engine_run(carved_two(tmp_path), {"x": x}, "fp16", "cuda", [art])
    assert any(s.type == "PluginV2" and s.name == "TwoOut_0" for s in prog.steps)
    r = np.maximum(x, 0)
    np.testing.assert_allclose(z, 2 * r + x, atol=2e-2, rtol=2e-2)
    np.testing.assert_allclose(y1, r.sum(axis=1, keepdims=True), atol=5e-2, rtol=2e-2)
