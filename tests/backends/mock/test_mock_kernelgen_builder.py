"""Mock kernel generation (contract from the region) and the mock builder (a real, self-describing .so)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from tests.stages.carved_fixture import ARCH, PLUGIN, make_fixture
from ytk_backend_mock import builder, kernelgen
from ytk_hookspecs import StageContext, shape_expr
from ytk_hookspecs.errors import BadConfig, StageError
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import (BuildRequest, CandidatesFile, KernelGenRequest, KernelReport, Reoptimization,
                                  SiteInfo, TensorInfo)
from ytk_hookspecs.plugin_info import read_plugin_description


@pytest.fixture(scope="module")
def cand(tmp_path_factory):  # type: ignore[no-untyped-def]
    fx = make_fixture(tmp_path_factory.mktemp("kg") / "fx")
    return CandidatesFile.read(fx / "carved" / "candidates.json").candidates[0]


def _site(i: int, c: int, h: int, w: int, oh: int | None = None, ow: int | None = None) -> SiteInfo:
    return SiteInfo(index=i, module_path=f"m.{i}", onnx_node=f"n{i}",
                    inputs=[TensorInfo(name="x", shape=[1, c, h, w], dtype="float32"),
                            TensorInfo(name="w", shape=[c, 1, 3, 3], dtype="float32"),
                            TensorInfo(name="b", shape=[c], dtype="float32")],
                    outputs=[TensorInfo(name="y", shape=[1, c, oh or h, ow or w], dtype="float32")],
                    replaced_onnx_nodes=[], fx_nodes=[])


def test_meta_matches_the_node_arity_and_shapes(cand):
    meta = kernelgen.make_meta(cand, "fp16", 87, 0.75)
    assert len(meta.inputs) == len(cand.input_roles) == 3
    assert [t.role for t in meta.inputs] == ["activation", "weight", "bias"]
    assert (meta.inputs[0].dtype, meta.inputs[0].format) == ("float16", "kHWC8")
    assert (meta.inputs[1].dtype, meta.inputs[1].format) == ("float32", "kLINEAR")
    assert meta.perf and meta.perf.achieved_bandwidth_fraction == 0.75 and "SIMULATED" in meta.perf.measured_on
    for site in cand.sites:
        shapes = [list(t.shape) for t in site.inputs]
        ext = shape_expr.evaluate_extents(meta.extents, shapes)
        got = [shape_expr.evaluate(e, shapes, ext) for e in meta.outputs[0].shape]
        assert got == list(site.outputs[0].shape)
    fp32 = kernelgen.make_meta(cand, "fp32", 87, 0.75)
    assert {t.format for t in fp32.inputs} == {"kLINEAR"} and fp32.outputs[0].dtype == "float32"


def test_dynamic_channels_use_input_dims(cand):
    dyn = cand.model_copy(update={"sites": [_site(0, 16, 6, 10), _site(1, 32, 6, 10)]})
    meta = kernelgen.make_meta(dyn, "fp16", 87, 0.75)
    assert meta.outputs[0].shape[1] == "in0[1]" and meta.inputs[0].shape[1] == "in0[1]"
    assert meta.inputs[0].shape[2] == "6"


def test_strided_and_weight_derived_extents_are_expressed(cand):
    # a stride-2 3x3 conv with padding 1 over odd and even sizes: (H - 1)//2 + 1
    strided = cand.model_copy(update={"sites": [_site(0, 16, 7, 10, 4, 5), _site(1, 32, 12, 21, 6, 11)]})
    meta = kernelgen.make_meta(strided, "fp16", 87, 0.75)
    for site in strided.sites:
        shapes = [list(t.shape) for t in site.inputs]
        ext = shape_expr.evaluate_extents(meta.extents, shapes)
        assert [shape_expr.evaluate(e, shapes, ext) for e in meta.outputs[0].shape] == list(site.outputs[0].shape)
    assert "//2 + 1" in meta.outputs[0].shape[2]
    # a 1x1 conv: output channels are the weight's dim 0, not any activation dim
    pw = [SiteInfo(index=i, module_path=f"m.{i}", onnx_node=f"n{i}",
                   inputs=[TensorInfo(name="x", shape=[1, c, 5, 6], dtype="float32"),
                           TensorInfo(name="w", shape=[co, c, 1, 1], dtype="float32"),
                           TensorInfo(name="b", shape=[co], dtype="float32")],
                   outputs=[TensorInfo(name="y", shape=[1, co, 5, 6], dtype="float32")],
                   replaced_onnx_nodes=[], fx_nodes=[]) for i, (c, co) in enumerate([(16, 64), (32, 24)])]
    meta = kernelgen.make_meta(cand.model_copy(update={"sites": pw}), "fp16", 87, 0.75)
    assert meta.outputs[0].shape[1] == "in1[0]"


def test_unexpressible_extent_fails_honestly(cand, tmp_path):
    odd = cand.model_copy(update={"sites": [_site(0, 16, 6, 10, 7, 5), _site(1, 16, 12, 20, 2, 10)]})
    with pytest.raises(ValueError, match="no input dim or constant expresses"):
        kernelgen.make_meta(odd, "fp16", 87, 0.75)
    req = KernelGenRequest(reference=Path("x.pt2"), gpu="Orin", config={"deployment_target": "tensorrt"},
                           output=tmp_path / "s.module_source.py", candidate=odd)
    res = kernelgen.submit(req, StageContext(workdir=tmp_path))
    assert res.status == "failed" and "cannot express" in res.message and not req.output.exists()
    res = kernelgen.submit(req.model_copy(update={"candidate": None}), StageContext(workdir=tmp_path))
    assert res.status == "failed" and "candidates.json" in res.message


def test_submit_writes_source_report_and_fetch_returns_it(cand, tmp_path):
    out = tmp_path / f"{PLUGIN}.module_source.py"
    req = KernelGenRequest(reference=Path("x.pt2"), gpu="Orin", config={"deployment_target": "tensorrt",
                                                                        "mock_bandwidth_fraction": "0.3"},
                           output=out, candidate=cand)
    ctx = StageContext(workdir=tmp_path / "w")
    res = kernelgen.submit(req, ctx)
    assert res.status == "done" and res.source == out
    src = KernelSource.read(out)
    assert src.meta.perf and src.meta.perf.achieved_bandwidth_fraction == 0.3
    rep = KernelReport.read(res.report)
    assert rep.simulated and rep.winner == "mock-placeholder" and res.report.name == f"{PLUGIN}.report.json"
    again = kernelgen.fetch(res.job_id, tmp_path / "again.module_source.py", ctx)
    assert again and again.status == "done" and (tmp_path / "again.module_source.py").read_text() == out.read_text()
    assert kernelgen.fetch("mock-unknown", tmp_path / "n.py", ctx) is None
    with pytest.raises(BadConfig, match=r"mock_bandwidth_fraction=2: .*\(0, 1\]"):
        kernelgen.submit(req.model_copy(update={"config": {"mock_bandwidth_fraction": "2"}}), ctx)


def test_builder_makes_a_self_describing_so(cand, tmp_path):
    meta = kernelgen.make_meta(cand, "fp16", 87, 0.75)
    header, source = kernelgen._cuda(meta)
    src = KernelSource(header=header, source=source, meta=meta).write(tmp_path / "s.module_source.py")
    so = tmp_path / "p.so"
    res = builder.build(BuildRequest(source=src, plugin_name=PLUGIN, arch=ARCH, output=so), StageContext())
    d = read_plugin_description(so)
    assert d == res.description
    assert (d.name, d.num_inputs, d.engine_api, d.builder, d.sm) == (PLUGIN, 3, "mock-cpu", "mock", 87)
    lib = ctypes.CDLL(str(so))
    assert getattr(lib, meta.launcher)(None, None, None, None, None) == 801
    assert getattr(lib, meta.workspace)(None) == 0
    with pytest.raises(StageError, match="only builds engine_api mock-cpu"):
        builder.build(BuildRequest(source=src, plugin_name=PLUGIN, arch=ARCH, output=so,
                                   engine_api="trt8-IPluginV2DynamicExt"), StageContext())
    with pytest.raises(StageError, match="not 'Other'"):
        builder.build(BuildRequest(source=src, plugin_name="Other", arch=ARCH, output=so), StageContext())


def test_reoptimization_that_cannot_beat_the_plugged_kernel_fails(cand, tmp_path):
    ctx = StageContext(workdir=tmp_path / "w")
    req = KernelGenRequest(reference=Path("x.pt2"), gpu="Orin", output=tmp_path / "r.module_source.py",
                           candidate=cand)
    per_site = kernelgen.make_meta(cand, "fp16", 87, 0.75).perf.time_ms_per_site
    mean = sum(per_site) / len(per_site)
    slow_bar = req.model_copy(update={"reoptimize": Reoptimization(ms_to_beat=1.0, kernel_ms_to_beat=mean * 1.01)})
    res = kernelgen.submit(slow_bar, ctx)
    assert res.status == "failed" and "not faster than the bar" in res.message
    fast_bar = req.model_copy(update={"reoptimize": Reoptimization(ms_to_beat=1.0, kernel_ms_to_beat=mean * 2)})
    assert kernelgen.submit(fast_bar, ctx).status == "done"


def test_a_fused_attention_op_is_priced_as_attention(cand):  # type: ignore[no-untyped-def]
    """A carved nn.MultiheadAttention holds aten.scaled_dot_product_attention and no matmul: the mock said it
    simulates "a region without convs or attention matmuls" and priced it as one, where propose calls it
    attention."""
    sdpa = cand.model_copy(update={"op_inventory": {"aten.view.default": 4,
                                                    "aten.scaled_dot_product_attention.default": 1}})
    assert kernelgen.region_kind(sdpa) == "attention"
    assert kernelgen.region_kind(cand.model_copy(update={"op_inventory": {"aten.add.Tensor": 1}})) == "other"
