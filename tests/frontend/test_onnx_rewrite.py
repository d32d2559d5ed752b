"""Region surgery on small hand-made ONNX graphs: boundaries, convexity, the plugin node."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from ytk_core.errors import UsageError
from ytk_core.frontend.onnx_rewrite import OnnxGraph, finalize, replace_with_plugin
from ytk_hookspecs.models import PLUGIN_DOMAIN


def _graph():
    # x -> a(Relu) -> b(Neg) -> c(Add a,b) -> y ; a also feeds d(Abs) -> y2
    nodes = [helper.make_node("Relu", ["x"], ["ta"], name="a"), helper.make_node("Neg", ["ta"], ["tb"], name="b"),
             helper.make_node("Add", ["ta", "tb"], ["y"], name="c"), helper.make_node("Abs", ["ta"], ["y2"], name="d")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_non_convex_region_is_refused_naming_the_edge():
    og = OnnxGraph(_graph())
    with pytest.raises(UsageError, match="not convex: ONNX node b .* feeds c"):
        og.check_convex(["a", "c"], "region r")  # a -> b (outside) -> c: leaves and re-enters


def test_boundary_and_plugin_node():
    og = OnnxGraph(_graph())
    og.check_convex(["b", "c"], "r")
    b = og.boundary(["b", "c"])
    assert b.inputs == ["ta"] and b.outputs == ["y"]
    node = replace_with_plugin(og, b, "P_0", "P", "yasp", "1", [])
    finalize(og, {"y": (TensorProto.FLOAT, [2])})
    assert node.domain == PLUGIN_DOMAIN and [n.name for n in og.proto.graph.node] == ["a", "P_0", "d"]
    attrs = {a.name: a.s.decode() for a in node.attribute}
    assert attrs == {"plugin_namespace": "yasp", "plugin_version": "1"}
    assert og.boundary(["a"]).outputs == ["ta"]  # consumed by the plugin node and by d
