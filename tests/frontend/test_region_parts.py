"""The convexity and part rules propose and the carve share (region_rules), on hand-built graphs."""

from __future__ import annotations

import pytest

from ytk_core.frontend.region_rules import (FactGraph, NodeFacts, baked_weights, convex_parts,
                                            convexity_witness)
from ytk_core.frontend.selectors import SelectorError, parse_selector


def _facts(spec: list[tuple[str, str, list[str], list[str]]], weights: tuple[str, ...] = ()) -> FactGraph:
    """(name, aten op, inputs, ONNX nodes) per call node; graph inputs and weights are placeholders."""
    names = {n for n, *_ in spec}
    leaves = sorted({i for _, _, ins, _ in spec for i in ins if i not in names})
    nodes = [NodeFacts(name=n, op="placeholder", target=n, inputs=(), modules=(), onnx=()) for n in leaves]
    nodes += [NodeFacts(name=n, op="call_function", target=f"aten.{op}.default", inputs=tuple(ins), modules=("",),
                        onnx=tuple(on)) for n, op, ins, on in spec]
    return FactGraph(nodes, weights)


def _succ(g: FactGraph) -> dict[str, list[str]]:
    """ONNX consumers, read off the FX dataflow (one ONNX node per FX node in these graphs)."""
    out: dict[str, list[str]] = {o: [] for n in g.nodes.values() for o in n.onnx}
    for n in g.nodes.values():
        for i in n.inputs:
            for a in g.nodes[i].onnx:
                out[a] += [o for o in n.onnx if o != a]
    return out


# x -> view -> q.k -> conv (outside) -> softmax -> attn.v ; the view also feeds attn.v; a bias computed from
# weights alone (folded: no ONNX node) feeds q.k and attn.v
ATTN = [("view", "view", ["x"], ["V"]), ("bias", "index", ["p_table", "b_idx"], []),
        ("qk", "matmul", ["view", "bias"], ["QK"]), ("th", "conv2d", ["qk", "p_w"], ["TH"]),
        ("sm", "softmax", ["th"], ["SM"]), ("av", "matmul", ["sm", "view", "bias"], ["AV"])]


def test_a_conv_between_two_attention_products_is_named_and_cut_around():
    g = _facts(ATTN, weights=("p_table", "b_idx", "p_w"))
    succ = _succ(g)
    region = ["view", "bias", "qk", "sm", "av"]
    assert convexity_witness({"V", "QK", "SM", "AV"}, succ) == ("TH", "SM")
    assert convexity_witness({"SM", "AV"}, succ) is None
    # the cut: before the conv (with the view that feeds it) and after it; the folded bias goes with both
    assert convex_parts(region, g, succ) == [["view", "bias", "qk"], ["bias", "sm", "av"]]
    assert baked_weights(["bias", "qk"], g) == ["p_table", "b_idx"]


def test_no_cut_when_an_outside_path_returns_into_the_same_op():
    # one FX op became two ONNX nodes, and an outside node runs between them: no cut at FX granularity
    g = _facts([("a", "relu", ["x"], ["A"]), ("u", "linear", ["a", "y"], ["U1", "U2"]), ("y", "neg", ["a"], ["Y"])])
    succ = {"A": ["U1", "Y"], "U1": ["Y"], "Y": ["U2"], "U2": []}
    assert convexity_witness({"A", "U1", "U2"}, succ) == ("Y", "U2")
    assert convex_parts(["a", "u"], g, succ) is None


def test_baked_weights_leave_out_what_the_carve_lifts():
    g = _facts([("conv", "conv2d", ["x", "p_w", "p_b"], ["C"]),
                ("bn", "_native_batch_norm_legit_no_training", ["conv", "p_g", "p_beta", "b_mean", "b_var"], ["C"]),
                ("scale", "mul", ["bn", "p_gamma"], ["M"]), ("fc", "linear", ["scale", "p_fc"], ["L"])],
               weights=("p_w", "p_b", "p_g", "p_beta", "b_mean", "b_var", "p_gamma", "p_fc"))
    assert baked_weights(["conv", "bn", "scale"], g) == ["p_gamma"]
    assert baked_weights(["conv", "bn"], g, lift=False) == ["p_w", "p_b", "p_g", "p_beta", "b_mean", "b_var"]
    assert baked_weights(["fc"], g) == ["p_fc"]


def test_part_selector():
    s = parse_selector("yasp::A=Attention2d:around@where=*.2.*@part=1")
    assert (s.around, s.part, s.where) == (True, 1, ("*.2.*",))
    assert parse_selector("A=Attention2d:around").part is None
    with pytest.raises(SelectorError, match="only together with :around"):
        parse_selector("A=Attention2d@part=1")
    with pytest.raises(SelectorError, match="a part number"):
        parse_selector("A=Attention2d:around@part=x")
    with pytest.raises(SelectorError, match="@part only once"):
        parse_selector("A=Attention2d:around@part=1@part=2")


# -- a channel LayerNorm in a conv's epilogue (ConvNeXt) -----------------------------------------------------
def _ln_graph(back: bool = True, to_nhwc=(1, 16, 24, 32), weight=(32,), native: bool = False,
              extra_user: bool = False) -> FactGraph:
    """x -> conv (NCHW [1, 32, 16, 24]) -> permute -> layer_norm(w, b) [-> getitem] [-> permute back] -> out."""
    shp = {"x": (1, 32, 16, 24), "p_w": (32, 1, 7, 7), "p_b": (32,), "p_g": weight, "p_beta": (32,)}
    nodes = [NodeFacts(name=n, op="placeholder", target=n, inputs=(), modules=(), onnx=(), shapes=(s,))
             for n, s in shp.items()]

    def call(name, op, ins, out):
        nodes.append(NodeFacts(name=name, op="call_function", target=f"aten.{op}.default", inputs=tuple(ins),
                               modules=("",), onnx=(name.upper(),), shapes=(out,)))

    call("conv", "conv2d", ["x", "p_w", "p_b"], (1, 32, 16, 24))
    call("nhwc", "permute", ["conv"], to_nhwc)
    last = "ln"
    call("ln", "native_layer_norm" if native else "layer_norm", ["nhwc", "p_g", "p_beta"], to_nhwc)
    if native:
        call("ln0", "getitem", ["ln"], to_nhwc)
        last = "ln0"
    if back:
        call("nchw", "permute", [last], (1, 32, 16, 24))
        last = "nchw"
    call("after", "relu", [last], (1, 32, 16, 24) if back else to_nhwc)
    if extra_user:
        call("peek", "relu", ["nhwc"], to_nhwc)
    return FactGraph(nodes, ("p_w", "p_b", "p_g", "p_beta"))


@pytest.mark.parametrize("kw, taken", [
    ({}, {"nhwc", "ln", "nchw", "after"}),                       # LayerNorm2d, and the ReLU after it too
    ({"back": False}, {"nhwc", "ln", "after"}),                   # the NHWC view goes on (to a Linear in timm)
    ({"native": True}, {"nhwc", "ln", "ln0", "nchw", "after"}),
    ({"to_nhwc": (1, 24, 16, 32)}, set()),                        # not the channels-last permute
    ({"weight": (24,)}, set()),                                   # a norm over another dim
    ({"extra_user": True}, set()),                                # the NHWC view is read elsewhere too
])
def test_a_channel_layernorm_joins_an_epilogue(kw, taken):
    from ytk_core.frontend.region_rules import grow_epilogue

    g = _ln_graph(**kw)
    region = grow_epilogue({"conv"}, g)
    assert region - {"conv"} == taken
    read = {i for n in region for i in g.nodes[n].inputs if i in g.weights}
    assert read == ({"p_w", "p_b", "p_g", "p_beta"} if taken else {"p_w", "p_b"})
    assert baked_weights(region, g) == []                       # the conv's pair and the norm's pair are lifted
    assert set(baked_weights(region, g, lift=False)) == read    # @lift=none bakes them all


# -- a layer scale folded into a conv (FastViT) --------------------------------------------------------------
def _scale_graph(between: str = "", gamma=(32, 1, 1), other_user: bool = False) -> FactGraph:
    """x -> conv [1, 32, 8, 8] -> [BN -> getitem | dropout | relu] -> mul(p_gamma) -> out."""
    shp = {"x": (1, 16, 8, 8), "p_w": (32, 16, 1, 1), "p_b": (32,), "p_gamma": gamma, "b_m": (32,), "b_v": (32,)}
    nodes = [NodeFacts(name=n, op="placeholder", target=n, inputs=(), modules=(), onnx=(), shapes=(s,))
             for n, s in shp.items()]
    y = (1, 32, 8, 8)

    def call(name, op, ins):
        nodes.append(NodeFacts(name=name, op="call_function", target=f"aten.{op}.default", inputs=tuple(ins),
                               modules=("",), onnx=(name.upper(),), shapes=(y,)))

    call("conv", "conv2d", ["x", "p_w", "p_b"])
    last = "conv"
    if between == "bn":
        call("bn", "_native_batch_norm_legit_no_training", ["conv", "b_m", "b_v"])
        call("bn0", "getitem", ["bn"])
        last = "bn0"
    elif between:
        call("mid", between, ["conv"])
        last = "mid"
    call("scaled", "mul", [last, "p_gamma"])
    if other_user:
        call("peek", "relu", [last])
    return FactGraph(nodes, ("p_w", "p_b", "p_gamma", "b_m", "b_v"))


@pytest.mark.parametrize("kw, folded", [
    ({}, True), ({"between": "bn"}, True), ({"between": "dropout"}, True), ({"gamma": (1, 32, 1, 1)}, True),
    ({"between": "relu"}, False),          # not linear in between: the scale cannot move into the weights
    ({"gamma": (32,)}, False),              # broadcasts over W, not the channels
    ({"other_user": True}, False),          # the unscaled value is read too
])
def test_a_layer_scale_folds_into_the_conv_before_it(kw, folded):
    from ytk_core.frontend.region_rules import folded_scale

    g = _scale_graph(**kw)
    region = {n.name for n in g.calls()}
    assert (folded_scale("conv", region, g) == ("scaled", "p_gamma")) is folded
    assert ("p_gamma" in baked_weights(region, g)) is not folded
