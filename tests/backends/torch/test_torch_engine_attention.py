"""The torch engine fuses the attention chain an ONNX exporter writes (MatMul -> scale -> [mask] -> Softmax ->
MatMul) into one layer, as TensorRT does; on the CPU (fp32) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto
from onnx import helper as h

from torch_engine_helpers import engine_run, make_model, ort_run, rand, save
from ytk_backend_torch.engine import build_plan
from ytk_backend_torch.plan import load_plan, save_plan
from ytk_backend_torch.program import Program

F32 = TensorProto.FLOAT


def chain(rank: int, scale: str, mask: str, probs_out: bool = False):  # type: ignore[no-untyped-def]
    """q [.., L, d], kt [.., d, S], v [.., S, dv]; scores scaled after the MatMul (mul / div / none) and masked
    (none / const: a constant bias broadcast over the batch / input: a runtime mask)."""
    lead = [2, 3][: rank - 2]
    L, S, d, dv = 5, 7, 4, 6
    inputs = {"q": (lead + [L, d], F32), "kt": (lead + [d, S], F32), "v": (lead + [S, dv], F32)}
    inits: dict[str, np.ndarray] = {}
    nodes = [h.make_node("MatMul", ["q", "kt"], ["s0"], name="node_MatMul_1")]
    cur = "s0"
    if scale != "none":
        inits["c"] = np.array(0.5 if scale == "mul" else 2.0, np.float32)
        nodes.append(h.make_node("Mul" if scale == "mul" else "Div", [cur, "c"], ["s1"], name="node_scale_2"))
        cur = "s1"
    if mask == "const":
        inits["bias"] = rand(*([1] * (rank - 3) + [lead[-1], L, S]), seed=9)
        nodes.append(h.make_node("Add", ["bias", cur], ["s2"], name="node_Add_3"))
        cur = "s2"
    elif mask == "input":
        inputs["m"] = ([L, S], F32)
        nodes.append(h.make_node("Add", [cur, "m"], ["s2"], name="node_Add_3"))
        cur = "s2"
    nodes += [h.make_node("Softmax", [cur], ["p"], name="node_Softmax_4", axis=-1),
              h.make_node("MatMul", ["p", "v"], ["y"], name="node_MatMul_5")]
    return make_model(nodes, inputs, ["y"] + (["p"] if probs_out else []), inits)


def feeds(model) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    out = {}
    for k, i in enumerate(model.graph.input):
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rand(*shape, seed=k + 1)
    return out


def fused_and_reloaded(m, p, f, tmp_path):  # type: ignore[no-untyped-def]
    """The engine runs ONNX model ``m`` (saved at ``p``) on feeds ``f`` as one Attention layer that keeps every
    ONNX node's name, matches onnxruntime, and computes the same from a saved and reloaded plan (the fused op's
    attributes are part of the plan file)."""
    got, prog = engine_run(p, f)
    np.testing.assert_allclose(got[0], ort_run(p, f)[0], atol=1e-5, rtol=1e-4)
    assert prog.plan.stats["attention_fused"] == 1
    assert [s.type for s in prog.steps if s.type not in ("Reformat",)] == ["Attention"]
    fused = next(s for s in prog.steps if s.type == "Attention")
    # every ONNX node of the chain is still named (per-layer time maps back to the model through them)
    assert set(fused.onnx_nodes) == {n.name for n in m.graph.node}
    save_plan(tmp_path / "e.plan", prog.plan, *build_plan(p, "fp32", [])[1:])
    again = Program(*load_plan(tmp_path / "e.plan"), "cpu")
    with torch.inference_mode():
        out = again(again.prepare_inputs([f[t.name] for t in again.plan.inputs]))
    np.testing.assert_array_equal(got[0], out[0].numpy())


def fused_on_the_gpu_in_fp16(p, f):  # type: ignore[no-untyped-def]
    """The engine on the GPU at fp16 runs the chain saved at ``p`` as one fused layer, within fp16's error of
    onnxruntime's fp32 on feeds ``f``."""
    got, prog = engine_run(p, f, "fp16", "cuda")
    ref = ort_run(p, f)[0]
    assert prog.plan.stats["attention_fused"] == 1
    assert "Attention" in {s.type for s in prog.steps}
    assert np.abs(got[0] - ref).max() <= 2e-3 * max(1.0, float(np.abs(ref).max()))


def left_op_by_op(p, f):  # type: ignore[no-untyped-def]
    """The engine leaves the chain saved at ``p`` unfused, and matches onnxruntime on feeds ``f``."""
    got, prog = engine_run(p, f)
    np.testing.assert_allclose(got[0], ort_run(p, f)[0], atol=1e-5, rtol=1e-4)
    assert prog.plan.stats["attention_fused"] == 0


@pytest.mark.parametrize("rank,scale,mask", [(4, "mul", "const"), (3, "div", "none"), (4, "none", "input"),
                                             (3, "mul", "input"), (4, "div", "none")])
def test_the_attention_chain_runs_as_one_layer(tmp_path, rank, scale, mask):  # type: ignore[no-untyped-def]
    m = chain(rank, scale, mask)
    p = save(m, tmp_path / "a.onnx")
    fused_and_reloaded(m, p, feeds(m), tmp_path)


def test_attention_whose_probabilities_are_read_elsewhere_runs_op_by_op(tmp_path):  # type: ignore[no-untyped-def]
    m = chain(4, "mul", "none", probs_out=True)
    p = save(m, tmp_path / "a.onnx")
    f = feeds(m)
    got, prog = engine_run(p, f)
    for g, r in zip(got, ort_run(p, f)):
        np.testing.assert_allclose(g, r, atol=1e-5, rtol=1e-4)
    assert "Attention" not in {s.type for s in prog.steps} and prog.plan.stats["attention_fused"] == 0


def test_a_scale_that_is_not_a_constant_scalar_is_not_fused(tmp_path):  # type: ignore[no-untyped-def]
    # a per-column scale [S] after the scores is no attention scale: softmax(s * c) != sdpa(scale=c)
    m = chain(3, "mul", "none")
    m.graph.initializer[0].CopyFrom(h.make_tensor("c", F32, [7], [0.5, 1, 2, 0.1, 3, 1, 1]))
    p = save(m, tmp_path / "a.onnx")
    f = feeds(m)
    got, prog = engine_run(p, f)
    np.testing.assert_allclose(got[0], ort_run(p, f)[0], atol=1e-5, rtol=1e-4)
    assert "Attention" not in {s.type for s in prog.steps}


@pytest.mark.gpu
@pytest.mark.parametrize("rank,scale,mask", [(4, "mul", "const"), (4, "none", "none"), (3, "div", "input")])
def test_the_fused_attention_on_the_gpu_in_fp16(tmp_path, rank, scale, mask):  # type: ignore[no-untyped-def]
    m = chain(rank, scale, mask)
    fused_on_the_gpu_in_fp16(save(m, tmp_path / "a.onnx"), feeds(m))


def where_chain(fill: float, keep_side: bool, runtime_cond: bool):  # type: ignore[no-untyped-def]
    """Attention masked the way masked_fill exports it: Where(cond, fill, scores) (or Where(cond, scores, fill)
    with ``keep_side``), cond a constant causal triangle or a runtime boolean input."""
    B, H, L, d = 2, 3, 6, 4
    inputs = {"q": ([B, H, L, d], F32), "kt": ([B, H, d, L], F32), "v": ([B, H, L, d], F32)}
    inits: dict[str, np.ndarray] = {"c": np.array(0.5, np.float32), "fill": np.array(fill, np.float32)}
    causal = np.triu(np.ones((L, L), bool), 1)  # True above the diagonal: the future, filled
    if runtime_cond:
        inputs["cond"] = ([B, 1, L, L], TensorProto.BOOL)
    else:
        inits["cond"] = ~causal if keep_side else causal
    scores_fill = ["cond", "s1", "fill"] if keep_side else ["cond", "fill", "s1"]
    nodes = [h.make_node("MatMul", ["q", "kt"], ["s0"], name="node_MatMul_1"),
             h.make_node("Mul", ["s0", "c"], ["s1"], name="node_Mul_2"),
             h.make_node("Where", scores_fill, ["s2"], name="node_Where_3"),
             h.make_node("Softmax", ["s2"], ["p"], name="node_Softmax_4", axis=-1),
             h.make_node("MatMul", ["p", "v"], ["y"], name="node_MatMul_5")]
    return make_model(nodes, inputs, ["y"], inits)


@pytest.mark.parametrize("keep_side,runtime_cond", [(False, False), (True, False), (False, True), (True, True)])
def test_a_masked_fill_with_minus_infinity_is_fused_as_a_boolean_mask(tmp_path, keep_side, runtime_cond):  # type: ignore[no-untyped-def]
    """Causal and padding masks as masked_fill(cond, -inf) writes them (an ONNX Where) ran op by op: the
    scores tensor written and read three times. Fused now, either side of the Where, constant or runtime cond;
    against onnxruntime."""
    m = where_chain(-np.inf, keep_side, runtime_cond)
    p = save(m, tmp_path / "w.onnx")
    f = {k: v for k, v in feeds(m).items() if k != "cond"}
    if runtime_cond:
        rng = np.random.default_rng(3)
        cond = rng.random((2, 1, 6, 6)) < 0.4
        cond[..., 0] = keep_side  # every row keeps one key: a row masked whole is NaN in both
        f["cond"] = cond
    fused_and_reloaded(m, p, f, tmp_path)  # the mask's mode is in the plan


def test_a_masked_fill_with_a_finite_value_stays_op_by_op(tmp_path):  # type: ignore[no-untyped-def]
    """A finite fill is no mask: a row it fills whole softmaxes to a uniform row. Left op by op, exact."""
    m = where_chain(-1e4, False, False)
    left_op_by_op(save(m, tmp_path / "w.onnx"), feeds(m))


@pytest.mark.gpu
@pytest.mark.parametrize("keep_side", [False, True])
def test_the_masked_fill_attention_on_the_gpu_in_fp16(tmp_path, keep_side):  # type: ignore[no-untyped-def]
    m = where_chain(-np.inf, keep_side, False)
    fused_on_the_gpu_in_fp16(save(m, tmp_path / "w.onnx"), feeds(m))


def window_chain(bias: str, per_group: bool):  # type: ignore[no-untyped-def]
    """Swin's shifted-window attention as timm writes it (fused_attn off) and the exporter spells it: the scores
    of [groups * windows, heads, L, L], plus a relative-position bias (``bias``: const [1, H, L, L], none), viewed
    [groups, windows, heads, L, L] to add the per-window mask ([1, windows, 1, L, L]; ``per_group``: a runtime
    [groups, windows, 1, L, L] one), viewed back, softmax, times v."""
    G, W, H, L, d = 2, 3, 2, 5, 4
    inputs = {"q": ([G * W, H, L, d], F32), "kt": ([G * W, H, d, L], F32), "v": ([G * W, H, L, d], F32)}
    inits: dict[str, np.ndarray] = {"c": np.array(0.5, np.float32),
                                    "to5": np.array([-1, W, H, L, L], np.int64),
                                    "to4": np.array([-1, H, L, L], np.int64)}
    rng = np.random.default_rng(5)
    wmask = np.where(rng.random((1, W, 1, L, L)) < 0.3, -100.0, 0.0).astype(np.float32)
    if per_group:
        inputs["wm"] = ([G, W, 1, L, L], F32)
    else:
        inits["wm"] = wmask
    nodes = [h.make_node("MatMul", ["q", "kt"], ["s0"], name="node_MatMul_1"),
             h.make_node("Mul", ["s0", "c"], ["s1"], name="node_Mul_2")]
    cur = "s1"
    if bias == "const":
        inits["bias"] = rand(1, H, L, L, seed=11)
        nodes.append(h.make_node("Add", [cur, "bias"], ["s2"], name="node_Add_3"))
        cur = "s2"
    nodes += [h.make_node("Reshape", [cur, "to5"], ["s5"], name="node_view_4"),
              h.make_node("Add", ["s5", "wm"], ["s6"], name="node_Add_5"),
              h.make_node("Reshape", ["s6", "to4"], ["s7"], name="node_view_6"),
              h.make_node("Softmax", ["s7"], ["p"], name="node_Softmax_7", axis=-1),
              h.make_node("MatMul", ["p", "v"], ["y"], name="node_MatMul_8")]
    return make_model(nodes, inputs, ["y"], inits)


@pytest.mark.parametrize("bias,per_group", [("const", False), ("none", False), ("const", True)])
def test_a_shifted_window_mask_between_two_views_is_fused(tmp_path, bias, per_group):  # type: ignore[no-untyped-def]
    """Swin's shifted windows add their mask to the scores viewed [groups, windows, heads, L, L]: the two Reshapes
    kept every such block's attention op by op. Fused now, with or without the relative-position bias, the mask
    shared by every group or given per group; against onnxruntime, and through a saved plan."""
    m = window_chain(bias, per_group)
    p = save(m, tmp_path / "sw.onnx")
    f = feeds(m)
    if per_group:
        f["wm"] = np.where(np.random.default_rng(6).random((2, 3, 1, 5, 5)) < 0.3, -100.0, 0.0).astype(np.float32)
    fused_and_reloaded(m, p, f, tmp_path)


def test_a_view_that_does_not_split_the_rows_into_windows_stays_op_by_op(tmp_path):  # type: ignore[no-untyped-def]
    """A 5-D view that splits the heads, not the rows, is no window mask: left op by op, exact."""
    m = window_chain("none", False)
    for t in m.graph.initializer:
        if t.name == "to5":
            t.CopyFrom(h.make_tensor("to5", TensorProto.INT64, [5], [6, 2, 1, 5, 5]))
        if t.name == "wm":
            t.CopyFrom(h.make_tensor("wm", F32, [1, 2, 1, 5, 5], rand(1, 2, 1, 5, 5, seed=4).ravel().tolist()))
    left_op_by_op(save(m, tmp_path / "sw.onnx"), feeds(m))


@pytest.mark.gpu
@pytest.mark.parametrize("bias", ["const", "none"])
def test_the_shifted_window_attention_on_the_gpu_in_fp16(tmp_path, bias):  # type: ignore[no-untyped-def]
    m = window_chain(bias, False)
    fused_on_the_gpu_in_fp16(save(m, tmp_path / "sw.onnx"), feeds(m))
