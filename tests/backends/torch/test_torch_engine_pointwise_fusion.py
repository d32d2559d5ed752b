"""The torch engine runs the spellings of GELU and SiLU an ONNX exporter writes as one layer each, as TensorRT
fuses a pointwise chain; on the CPU (fp32) against onnxruntime."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto
from onnx import helper as h

from torch_engine_helpers import engine_run, make_model, ort_run, rand, save

F32 = TensorProto.FLOAT


def gelu(order: str, pre: str = "div", half: float = 0.5, leak: bool = False):  # type: ignore[no-untyped-def]
    """x [2, 8, 5, 3] -> a Conv-free GELU in one of the exporters' orders:
    'half_first' 0.5 * (1 + erf) then * x (torch's dynamo exporter), 'x_first' x * (1 + erf) then * 0.5,
    'x_half' (x * 0.5) * (1 + erf); ``pre`` divides by sqrt(2) or multiplies by 1/sqrt(2); ``leak`` also
    returns erf's output."""
    inits = {"r2": np.array(math.sqrt(2.0) if pre == "div" else 1 / math.sqrt(2.0), np.float32),
             "one": np.array(1.0, np.float32), "half": np.array(half, np.float32)}
    nodes = [h.make_node("Relu", ["x"], ["x1"], name="node_relu_0"),
             h.make_node("Div" if pre == "div" else "Mul", ["x1", "r2"], ["s"], name="node_Div_1"),
             h.make_node("Erf", ["s"], ["e"], name="node_Erf_2"),
             h.make_node("Add", ["e", "one"], ["a"], name="node_Add_3")]
    if order == "half_first":
        nodes += [h.make_node("Mul", ["half", "a"], ["m"], name="node_Mul_4"),
                  h.make_node("Mul", ["x1", "m"], ["y"], name="node_gelu")]
    elif order == "x_first":
        nodes += [h.make_node("Mul", ["x1", "a"], ["m"], name="node_Mul_4"),
                  h.make_node("Mul", ["m", "half"], ["y"], name="node_gelu")]
    else:
        nodes += [h.make_node("Mul", ["x1", "half"], ["m"], name="node_Mul_4"),
                  h.make_node("Mul", ["m", "a"], ["y"], name="node_gelu")]
    return make_model(nodes, {"x": ([2, 8, 5, 3], F32)}, ["y"] + (["e"] if leak else []), inits)


@pytest.mark.parametrize("order,pre", [("half_first", "div"), ("x_first", "div"), ("x_half", "mul"),
                                       ("half_first", "mul")])
def test_the_erf_spelling_of_gelu_runs_as_one_layer(tmp_path, order, pre):  # type: ignore[no-untyped-def]
    m = gelu(order, pre)
    p = save(m, tmp_path / "g.onnx")
    f = {"x": rand(2, 8, 5, 3, seed=1, scale=2.0)}
    got, prog = engine_run(p, f)
    np.testing.assert_allclose(got[0], ort_run(p, f)[0], atol=1e-6, rtol=1e-5)
    layers = [s for s in prog.steps if s.type != "Reformat"]
    assert [s.type for s in layers] == ["PointWise", "PointWise"] and prog.plan.stats["gelu_fused"] == 1
    assert set(layers[1].onnx_nodes) == {n.name for n in m.graph.node} - {"node_relu_0"}


@pytest.mark.parametrize("why", ["not_half", "leak"])
def test_a_chain_that_is_not_exactly_gelu_runs_op_by_op(tmp_path, why):  # type: ignore[no-untyped-def]
    m = gelu("half_first", half=0.6) if why == "not_half" else gelu("half_first", leak=True)
    p = save(m, tmp_path / "g.onnx")
    f = {"x": rand(2, 8, 5, 3, seed=1, scale=2.0)}
    got, prog = engine_run(p, f)
    for g, r in zip(got, ort_run(p, f)):
        np.testing.assert_allclose(g, r, atol=1e-6, rtol=1e-5)
    assert prog.plan.stats["gelu_fused"] == 0


@pytest.mark.parametrize("spelling", ["x_sig", "sig_x", "gate"])
def test_x_times_its_sigmoid_runs_as_one_silu(tmp_path, spelling):  # type: ignore[no-untyped-def]
    # x * sigmoid(x) in either operand order is SiLU; sigmoid(x) gating another tensor (squeeze-excite) is not
    nodes = [h.make_node("Relu", ["x"], ["x1"], name="node_relu_0"),
             h.make_node("Sigmoid", ["x1"], ["s"], name="node_Sigmoid_1"),
             h.make_node("Mul", {"x_sig": ["x1", "s"], "sig_x": ["s", "x1"], "gate": ["x", "s"]}[spelling], ["y"],
                         name="node_silu")]
    m = make_model(nodes, {"x": ([2, 8, 5, 3], F32)}, ["y"])
    p = save(m, tmp_path / "s.onnx")
    f = {"x": rand(2, 8, 5, 3, seed=1, scale=2.0)}
    got, prog = engine_run(p, f)
    np.testing.assert_allclose(got[0], ort_run(p, f)[0], atol=1e-6, rtol=1e-5)
    assert prog.plan.stats["silu_fused"] == (0 if spelling == "gate" else 1)
    if spelling != "gate":
        assert [s.onnx_nodes for s in prog.steps if s.type != "Reformat"][-1] == ["node_Sigmoid_1", "node_silu"]
