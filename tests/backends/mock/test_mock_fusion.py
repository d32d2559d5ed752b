"""TensorRT-style layers: fusion, names, formats and reformats around plugins."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from tests.stages.carved_fixture import PLUGIN, make_fixture
from ytk_backend_mock.builder import describe
from ytk_backend_mock.fusion import build_layers, layer_name, group_nodes
from ytk_backend_mock.graph import load_graph
from ytk_backend_mock.kernelgen import make_meta
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import ArchSpec, CandidatesFile, GPU_PROPERTIES

ORIN = GPU_PROPERTIES[87]
X = (1, 8, 6, 10)


@pytest.fixture(scope="module")
def fx(tmp_path_factory):  # type: ignore[no-untyped-def]
    return make_fixture(tmp_path_factory.mktemp("fusion") / "fx")


def _plugin(fx, fmt_hwc8: bool = True):  # type: ignore[no-untyped-def]
    cand = CandidatesFile.read(fx / "carved" / "candidates.json").candidates[0]
    meta = make_meta(cand, "fp16", 87, 0.7)
    if not fmt_hwc8:
        meta = meta.model_copy(update={
            "inputs": [t.model_copy(update={"format": "kLINEAR"}) for t in meta.inputs],
            "outputs": [t.model_copy(update={"format": "kLINEAR"}) for t in meta.outputs]})
    d = describe(KernelSource(header="", source="", meta=meta), ArchSpec.parse("arm64-sm87-dos6010-cu114-trt86"), "0")
    return {(d.namespace, d.name, d.version): d}, {(d.namespace, d.name, d.version): meta}


def test_conv_absorbs_its_pointwise_chain_with_trt_names(fx):
    g = load_graph(fx / "base" / "model.onnx", {"x": X}, {})
    names = [layer_name(grp, g) for grp in group_nodes(g)]
    assert "node_Conv_1 + PWN(n0)" in names
    assert "node_Conv_2 + PWN(node_relu, node_add)" in names
    assert "node_Conv_4 + PWN(node_add_1)" in names
    assert "node_transpose" in names and "PWN(node_mul)" in names


def test_relu_alone_is_a_native_fusion_and_long_chains_nest(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="/conv/Conv", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="/act/Relu"),
             helper.make_node("Transpose", ["r"], ["t"], name="/t/Transpose", perm=[0, 1, 3, 2]),
             helper.make_node("Sigmoid", ["t"], ["s"], name="/a/Sigmoid"),
             helper.make_node("Mul", ["s", "t"], ["m"], name="/a/Mul"),
             helper.make_node("Add", ["m", "t"], ["y"], name="/a/Add")]
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4, 1, 1], [0.0] * 16)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    p = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), p)
    gr = load_graph(p, {"x": (1, 4, 2, 3)}, {})
    assert [layer_name(grp, gr) for grp in group_nodes(gr)] == [
        "/conv/Conv + /act/Relu", "/t/Transpose", "PWN(PWN(/a/Sigmoid, /a/Mul), /a/Add)"]


def test_every_node_is_in_exactly_one_layer_and_reformats_cover_none(fx):
    g = load_graph(fx / "base" / "model.onnx", {"x": X}, {})
    layers = build_layers(g, "fp16", ORIN, {})
    covered = [n for lay in layers for n in lay.onnx_nodes]
    assert sorted(covered) == sorted(n.name for n in g.nodes)
    refs = [lay for lay in layers if lay.kind == "reformat"]
    assert refs and all(not lay.onnx_nodes for lay in refs)
    names = [lay.name for lay in refs]
    # fp32 network input -> fp16 channels-last conv; kHWC8 -> row-major transpose; fp16 output -> fp32
    assert "Reformatting CopyNode for Input Tensor 0 to node_Conv_1 + PWN(n0)" in names
    assert "Reformatting CopyNode for Input Tensor 0 to node_transpose" in names
    assert any(n.startswith("Reformatting CopyNode for Output Tensor") for n in names)
    assert not [lay for lay in build_layers(g, "fp32", ORIN, {}) if lay.kind == "reformat"], \
        "fp32 keeps everything row-major"


def test_plugin_formats_decide_the_reformats_around_it(fx):
    descs, metas = _plugin(fx, fmt_hwc8=True)
    g = load_graph(fx / "carved" / "model.onnx", {"x": X}, metas)
    layers = build_layers(g, "fp16", ORIN, descs)
    plug = [lay for lay in layers if lay.kind == "plugin"]
    assert [lay.name for lay in plug] == [f"{PLUGIN}_0", f"{PLUGIN}_1"]
    assert not any(PLUGIN in lay.name for lay in layers if lay.kind == "reformat"), "kHWC8 matches the convs"
    descs, metas = _plugin(fx, fmt_hwc8=False)
    layers = build_layers(load_graph(fx / "carved" / "model.onnx", {"x": X}, metas), "fp16", ORIN, descs)
    names = [lay.name for lay in layers if lay.kind == "reformat"]
    # NCHW plugin between channels-last convs: a reformat on every edge in and out of it
    assert f"Reformatting CopyNode for Input Tensor 0 to {PLUGIN}_0" in names
    assert "Reformatting CopyNode for Input Tensor 1 to PWN(node_relu, node_add)" in names
    assert "Reformatting CopyNode for Input Tensor 0 to node_Conv_3" in names


def test_custom_output_shapes_come_from_the_plugin_when_the_onnx_has_none(fx):
    from ytk_hookspecs.errors import StageError

    _, metas = _plugin(fx)
    g = load_graph(fx / "carved" / "model.noshapes.onnx", {"x": X}, metas)
    assert g.tensor("d").shape == (1, 16, 6, 10) and g.tensor("d2").shape == (1, 16, 6, 10)
    with pytest.raises(StageError, match="no plugin declares them"):
        load_graph(fx / "carved" / "model.noshapes.onnx", {"x": X}, {})
