"""TensorRT layer names as real engines print them, taken apart."""

from __future__ import annotations

import pytest

from ytk_core.propose.trt_names import metadata_nodes, parse_layer_name, split_top, undecorate


def test_vertical_fusion_and_pwn():
    p = parse_layer_name("node_Conv_1208 + PWN(n0)")
    assert p.kind == "compute" and p.atoms == ["node_Conv_1208", "n0"]
    p = parse_layer_name("/conv/Conv + PWN(PWN(/act/Sigmoid), /act/Mul)")
    assert p.atoms == ["/conv/Conv", "/act/Sigmoid", "/act/Mul"]


def test_horizontal_fusion():
    p = parse_layer_name("/a/Conv || /b/Conv + /b/Relu")
    assert p.atoms == ["/a/Conv", "/b/Conv", "/b/Relu"]


def test_unnamed_helper_layers_are_kept_whole():
    p = parse_layer_name("/net/net.0/Gemm + (Unnamed Layer* 4) [ElementWise] + /net/net.1/Relu")
    assert p.atoms == ["/net/net.0/Gemm", "(Unnamed Layer* 4) [ElementWise]", "/net/net.1/Relu"]


def test_foreign_node_span():
    p = parse_layer_name("{ForeignNode[/m/Reshape.../m/Transpose_2]}")
    assert p.spans == [("/m/Reshape", "/m/Transpose_2")] and p.atoms == []
    # an end that is itself a helper-layer name, brackets and all
    p = parse_layer_name("{ForeignNode[318...(Unnamed Layer* 4183) [Shuffle]]}")
    assert p.spans == [("318", "(Unnamed Layer* 4183) [Shuffle]")]


@pytest.mark.parametrize("name, direction, target_atoms", [
    ("Reformatting CopyNode for Input Tensor 0 to node_Conv_1208 + PWN(n0)", "input", ["node_Conv_1208", "n0"]),
    ("Reformatting CopyNode for Output Tensor 1 to /x/MatMul_1", "output", ["/x/MatMul_1"]),
    ("/conv1/Conv input reformatter 0", "input", ["/conv1/Conv"]),
    ("/conv1/Conv output reformatter 0", "output", ["/conv1/Conv"]),
])
def test_reformat_layers(name, direction, target_atoms):
    p = parse_layer_name(name)
    assert p.kind == "reformat" and p.direction == direction
    assert p.target is not None and p.target.atoms == target_atoms


def test_reformat_into_a_foreign_node():
    p = parse_layer_name("Reformatting CopyNode for Input Tensor 0 to {ForeignNode[conv1/7x7_s2...loss3/classifier]}")
    assert p.kind == "reformat" and p.target.spans == [("conv1/7x7_s2", "loss3/classifier")]


@pytest.mark.parametrize("name", ["[HostToDeviceCopy 0]", "[DeviceToHostCopy 2]", "[trainStation1]",
                                  "__mye165_0_myl9_0", "__myl_TranMulAddResMovAdd_myl0_5"])
def test_engine_internal(name):
    assert parse_layer_name(name).kind == "engine"


def test_metadata_forms():
    assert metadata_nodes("[ONNX Layer: /conv1/Conv]") == ["/conv1/Conv"]
    assert metadata_nodes("[ONNX Layer: node_conv2d]\x1f[ONNX Layer: node_relu]") == ["node_conv2d", "node_relu"]
    assert metadata_nodes("[ONNX Layer: a]\x1e[ONNX Layer: b]") == ["a", "b"]
    assert metadata_nodes("[ONNX Layer: qkv_proj | attn (Attention) | blk (Block)]") == ["qkv_proj"]
    assert metadata_nodes("") == [] and metadata_nodes(None) == []


def test_split_top_respects_brackets():
    assert split_top("PWN(a + b) + c", " + ") == ["PWN(a + b)", "c"]


def test_undecorate_strips_what_tensorrt_adds():
    assert "/stem/Conv_output_0" in undecorate("/stem/Conv_output_0 copy")
    assert "/classifier/classifier.2/Gemm" in undecorate("/classifier/classifier.2/Gemm_myl9_1")
    assert "/net/net.0/Gemm" in undecorate("reshape_before_/net/net.0/Gemm")
    assert "/Tanh" in undecorate("squeeze_after_/Tanh")
    assert "/stem/Conv" in undecorate("/stem/Conv_output_0")
