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
