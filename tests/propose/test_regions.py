"""Region discovery on a hand-built graph: climbing to the module around one heavy op, attention blocks,
containers, and what the kernel contract cannot express."""

from __future__ import annotations

import pytest

from ytk_core.propose.modules import ModuleIndex
from ytk_core.propose.onnx_graph import OnnxGraph
from ytk_core.propose.regions import discover_regions
from ytk_hookspecs.models import FxNode, FxNodesFile, ModuleFrame


def _graph():  # type: ignore[no-untyped-def]
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    w = numpy_helper.from_array(np.zeros((8, 8, 1, 1), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1"], name="conv_a", kernel_shape=[1, 1]),     # blk.proj (ConvAct)
        helper.make_node("Relu", ["c1"], ["r1"], name="relu_a"),                               # blk.proj.act
        helper.make_node("Reshape", ["r1", "shp"], ["t"], name="reshape"),                     # blk (Attn)
        helper.make_node("Transpose", ["t"], ["tt"], name="transpose", perm=[0, 2, 1]),        # blk
        helper.make_node("MatMul", ["t", "tt"], ["s"], name="qk"),                             # blk
        helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),                    # blk.sm (Softmax)
        helper.make_node("MatMul", ["p", "t"], ["o"], name="av"),                              # blk
        helper.make_node("Reshape", ["o", "shp2"], ["o4"], name="back"),                       # blk
        helper.make_node("Add", ["o4", "x"], ["res"], name="residual"),                        # root
        helper.make_node("Conv", ["res", "w"], ["c2"], name="conv_b", kernel_shape=[1, 1]),    # head.seq.0 (Conv2d)
        helper.make_node("ArgMax", ["c2"], ["idx"], name="argmax", axis=1),                    # head.seq.1
        helper.make_node("Conv", ["res", "w"], ["c3"], name="conv_c", kernel_shape=[1, 1]),    # root
    ]
    g = helper.make_graph(
        nodes, "t", [vi("x", f, [1, 8, 4, 4])], [vi("idx", TensorProto.INT64, [1, 1, 4, 4]), vi("c3", f, [1, 8, 4, 4])],
        initializer=[w, numpy_helper.from_array(np.array([1, 8, 16], np.int64), "shp"),
                     numpy_helper.from_array(np.array([1, 8, 4, 4], np.int64), "shp2")],
        value_info=[vi(n, f, s) for n, s in [("c1", [1, 8, 4, 4]), ("r1", [1, 8, 4, 4]), ("t", [1, 8, 16]),
                                             ("tt", [1, 16, 8]), ("s", [1, 8, 8]), ("p", [1, 8, 8]), ("o", [1, 8, 16]),
                                             ("o4", [1, 8, 4, 4]), ("res", [1, 8, 4, 4]), ("c2", [1, 8, 4, 4])]])
    return OnnxGraph(helper.make_model(g))


def _fx() -> FxNodesFile:
    def st(*frames: tuple[str, str]) -> list[ModuleFrame]:
        return [ModuleFrame(path="", cls="Net")] + [ModuleFrame(path=p, cls=c) for p, c in frames]

    blk = ("blk", "Attn")
    owners = {
        "conv_a": st(blk, ("blk.proj", "ConvAct"), ("blk.proj.conv", "Conv2d")),
        "relu_a": st(blk, ("blk.proj", "ConvAct"), ("blk.proj.act", "ReLU")),
        "reshape": st(blk), "transpose": st(blk), "qk": st(blk), "av": st(blk), "back": st(blk),
        "softmax": st(blk, ("blk.sm", "Softmax")),
        "residual": st(),
        "conv_b": st(("head", "Head"), ("head.seq", "Sequential"), ("head.seq.0", "Conv2d")),
        "argmax": st(("head", "Head"), ("head.seq", "Sequential"), ("head.seq.1", "Pick")),
        "conv_c": st(),
    }
    # the traced ops and their dataflow, as the carve's :around growth reads them
    ops = {"conv_a": ("conv2d", ["x", "p_w"]), "relu_a": ("relu", ["fx_conv_a"]), "reshape": ("view", ["fx_relu_a"]),
           "transpose": ("transpose", ["fx_reshape"]), "qk": ("matmul", ["fx_reshape", "fx_transpose"]),
           "softmax": ("softmax", ["fx_qk"]), "av": ("matmul", ["fx_softmax", "fx_reshape"]),
           "back": ("view", ["fx_av"]), "residual": ("add", ["fx_back", "x"]),
           "conv_b": ("conv2d", ["fx_residual", "p_w"]),
           "argmax": ("argmax", ["fx_conv_b"]), "conv_c": ("conv2d", ["fx_residual", "p_w"])}
    nodes = [FxNode(name=n, op="placeholder", target=n, module_path="", module_class="") for n in ("x", "p_w")]
    nodes += [FxNode(name=f"fx_{o}", op="call_function", target=f"aten.{ops[o][0]}.default", args=ops[o][1],
                     module_path=fr[-1].path, module_class=fr[-1].cls, module_stack=fr, onnx_nodes=[o])
              for o, fr in owners.items()]
    return FxNodesFile(model="m.py", onnx="m.onnx", onnx_sha256="", torch_version="x", nodes=nodes,
                       onnx_compute_nodes=len(nodes), onnx_mapped_nodes=len(nodes))


@pytest.fixture(scope="module")
def found():  # type: ignore[no-untyped-def]
    g = _graph()
    mods = ModuleIndex(_fx(), present=set(g.by_name))
    regions, outside = discover_regions(g, mods, {n: 1.0 for n in g.by_name})
    return {r.path: r for r in regions}, outside


def test_attention_block_takes_its_own_ops_not_its_weighted_children(found):
    regions, _ = found
    att = regions["blk"]
    assert att.kind == "attention" and att.around and att.cls == "Attn"
    assert att.nodes == ["reshape", "transpose", "qk", "softmax", "av", "back"]
    assert att.sig["C"] == 8 and att.cannot is None


def test_weighted_op_climbs_to_the_module_holding_only_it(found):
    regions, _ = found
    proj = regions["blk.proj"]
    assert proj.cls == "ConvAct" and proj.nodes == ["conv_a", "relu_a"] and proj.kind == "conv"
    assert proj.sig["k"] == [1, 1] and proj.sig["C"] == 8 and proj.sig["ops"] == (("Conv", 1), ("Relu", 1))


def test_cannot_express(found):
    regions, outside = found
    head = regions["head"]     # the Sequential is skipped in favour of the real module around the conv
    assert head.cls == "Head" and head.nodes == ["conv_b", "argmax"]
    assert "int64 output" in head.cannot
    assert "model root" in regions[""].cannot
    assert outside == ["residual"]


def test_a_region_sharing_a_fused_onnx_node_with_an_earlier_one_is_not_proposed():
    """LeViT: the exporter merges a LinearNorm's closing reshape and the attention's own view into one
    Reshape. The :around region takes that node whole, so a selector for the LinearNorm would claim
    FX nodes the attention's claims too, which the carve refuses; it is reported instead."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("Reshape", ["c", "shp"], ["t"], name="rs"),
             helper.make_node("Transpose", ["t"], ["tt"], name="tr", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "tt"], ["s"], name="qk"),
             helper.make_node("Softmax", ["s"], ["p"], name="sm", axis=-1),
             helper.make_node("MatMul", ["p", "t"], ["o"], name="av")]
    g = OnnxGraph(helper.make_model(helper.make_graph(
        nodes, "t", [vi("x", f, [1, 8, 4, 4])], [vi("o", f, [1, 8, 16])],
        initializer=[numpy_helper.from_array(np.zeros((8, 8, 1, 1), np.float32), "w"),
                     numpy_helper.from_array(np.array([1, 8, 16], np.int64), "shp")])))
    root, blk, proj = ModuleFrame(path="", cls="Net"), ModuleFrame(path="blk", cls="Attn"), \
        ModuleFrame(path="blk.proj", cls="ConvView")
    spec = [("fx_conv", "conv2d", ["x", "p_w"], [root, blk, proj], ["conv"]),
            ("fx_rs1", "view", ["fx_conv"], [root, blk, proj], ["rs"]),       # the child's own reshape ...
            ("fx_rs2", "view", ["fx_rs1"], [root, blk], ["rs"]),              # ... merged with the block's
            ("fx_tr", "transpose", ["fx_rs2"], [root, blk], ["tr"]),
            ("fx_qk", "matmul", ["fx_rs2", "fx_tr"], [root, blk], ["qk"]),
            ("fx_sm", "softmax", ["fx_qk"], [root, blk], ["sm"]),
            ("fx_av", "matmul", ["fx_sm", "fx_rs2"], [root, blk], ["av"])]
    fx_nodes = [FxNode(name=n, op="placeholder", target=n, module_path="", module_class="") for n in ("x", "p_w")]
    fx_nodes += [FxNode(name=n, op="call_function", target=f"aten.{op}.default", args=args, module_path=st[-1].path,
                        module_class=st[-1].cls, module_stack=st, onnx_nodes=on) for n, op, args, st, on in spec]
    fx = FxNodesFile(model="m.py", onnx="m.onnx", onnx_sha256="", torch_version="x", nodes=fx_nodes,
                     onnx_compute_nodes=6, onnx_mapped_nodes=6)
    regions, _ = discover_regions(g, ModuleIndex(fx, present=set(g.by_name)), {n: 1.0 for n in g.by_name})
    by_path = {r.path: r for r in regions}
    assert by_path["blk"].nodes == ["rs", "tr", "qk", "sm", "av"] and by_path["blk"].cannot is None
    assert by_path["blk.proj"].nodes == ["conv"]
    assert "shares ONNX node rs with another region" in by_path["blk.proj"].cannot
