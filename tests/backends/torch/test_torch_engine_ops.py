"""The torch engine's ONNX executor against onnxruntime (CPU, fp32): op by op, on small graphs."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as h

from torch_engine_helpers import engine_run, make_model, ort_run, rand, save

F32 = TensorProto.FLOAT


def check(tmp_path, nodes, inputs, outputs, inits=None, opset=20, atol=1e-5, rtol=1e-4, name="m"):  # type: ignore[no-untyped-def]
    feeds = {k: (rand(*s, seed=i) if et == F32 else np.arange(int(np.prod(s))).reshape(s).astype(np.int64))
             for i, (k, (s, et)) in enumerate(inputs.items())}
    p = save(make_model(nodes, inputs, outputs, inits, opset), tmp_path / f"{name}.onnx")
    ref = ort_run(p, feeds)
    got, prog = engine_run(p, feeds)
    assert len(got) == len(ref)
    for g, r, o in zip(got, ref, outputs):
        assert g.shape == r.shape, o
        np.testing.assert_allclose(g, r.astype(np.float32), atol=atol, rtol=rtol, err_msg=o)
    return prog


def test_conv_bn_act_block_and_batchnorm_folding(tmp_path):
    c = 8
    inits = {"w": rand(c, 4, 3, 3, seed=1), "b": rand(c, seed=2), "dw": rand(c, 1, 3, 3, seed=3),
             "g": np.abs(rand(c, seed=4)) + 0.5, "beta": rand(c, seed=5), "mu": rand(c, seed=6) * 0.1,
             "var": np.abs(rand(c, seed=7)) + 0.5, "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    nodes = [
        h.make_node("Conv", ["x", "w", "b"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("BatchNormalization", ["c1", "g", "beta", "mu", "var"], ["bn1"], name="bn1", epsilon=1e-3),
        h.make_node("HardSwish", ["bn1"], ["a1"], name="act1"),
        h.make_node("Conv", ["a1", "dw"], ["c2"], name="dwconv", group=c, pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c2"], ["r2"], name="relu"),
        h.make_node("Add", ["r2", "a1"], ["s"], name="residual"),
        h.make_node("Clip", ["s", "lo", "hi"], ["y"], name="relu6"),
    ]
    prog = check(tmp_path, nodes, {"x": ([2, 4, 16, 20], F32)}, ["y"], inits)
    names = [s.name for s in prog.steps]
    assert "conv1 + bn1" in names and "bn1" not in names
    fused = next(s for s in prog.steps if s.name == "conv1 + bn1")
    assert fused.onnx_nodes == ["conv1", "bn1"] and fused.type == "Convolution"
    assert prog.plan.stats["batchnorm_folded"] == 1


def test_conv_padding_modes(tmp_path):
    inits = {"w": rand(6, 3, 3, 2, seed=1), "w2": rand(6, 6, 3, 3, seed=2)}
    nodes = [
        h.make_node("Conv", ["x", "w"], ["a"], name="asym", pads=[0, 1, 2, 0], dilations=[1, 2]),
        h.make_node("Conv", ["a", "w2"], ["y"], name="same", auto_pad="SAME_UPPER", strides=[2, 2]),
    ]
    check(tmp_path, nodes, {"x": ([1, 3, 11, 13], F32)}, ["y"], inits)


def test_transformer_block_ops(tmp_path):
    d, t = 16, 6
    inits = {"ln_w": rand(d, seed=1), "ln_b": rand(d, seed=2), "wq": rand(d, d, seed=3, scale=0.3),
             "wk": rand(d, d, seed=4, scale=0.3), "fc_w": rand(2 * d, d, seed=5, scale=0.3),
             "fc_b": rand(2 * d, seed=6),
             "scale": np.array(4.0, np.float32), "two": np.array(2.0, np.float32), "half": np.array(0.5, np.float32)}
    nodes = [
        h.make_node("LayerNormalization", ["x", "ln_w", "ln_b"], ["n"], name="ln", axis=-1, epsilon=1e-5),
        h.make_node("MatMul", ["n", "wq"], ["q"], name="q"),
        h.make_node("MatMul", ["n", "wk"], ["k"], name="k"),
        h.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        h.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
        h.make_node("Sqrt", ["scale"], ["sq"], name="sqrt"),
        h.make_node("Div", ["s", "sq"], ["s2"], name="div"),
        h.make_node("Softmax", ["s2"], ["p"], name="softmax", axis=-1),
        h.make_node("MatMul", ["p", "n"], ["o"], name="pv"),
        h.make_node("Reshape", ["o", "shape2d"], ["o2"], name="flat"),
        h.make_node("Gemm", ["o2", "fc_w", "fc_b"], ["f"], name="fc", transB=1, alpha=0.5),
        h.make_node("Gelu", ["f"], ["g1"], name="gelu"),
        h.make_node("Gelu", ["f"], ["g2"], name="gelu_tanh", approximate="tanh"),
        h.make_node("Erf", ["g1"], ["e"], name="erf"),
        h.make_node("Tanh", ["g2"], ["th"], name="tanh"),
        h.make_node("Sigmoid", ["th"], ["sg"], name="sigmoid"),
        h.make_node("Pow", ["sg", "two"], ["pw"], name="pow"),
        h.make_node("Sub", ["pw", "half"], ["sb"], name="sub"),
        h.make_node("Mul", ["sb", "e"], ["y"], name="mul"),
    ]
    inits["shape2d"] = np.array([-1, d], np.int64)
    check(tmp_path, nodes, {"x": ([2, t, d], F32)}, ["y", "p"], inits)


def test_shape_arithmetic_folds_to_constants(tmp_path):
    nodes = [
        h.make_node("Shape", ["x"], ["s"], name="shape"),
        h.make_node("Gather", ["s", "i0"], ["b"], name="gather_b", axis=0),
        h.make_node("Gather", ["s", "i1"], ["c"], name="gather_c", axis=0),
        h.make_node("Unsqueeze", ["b", "ax0"], ["b1"], name="unsq_b"),
        h.make_node("Unsqueeze", ["c", "ax0"], ["c1"], name="unsq_c"),
        h.make_node("Concat", ["b1", "c1", "m1"], ["target"], name="cat_shape", axis=0),
        h.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
        h.make_node("Transpose", ["r"], ["y"], name="tr", perm=[0, 2, 1]),
    ]
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "ax0": np.array([0], np.int64),
             "m1": np.array([-1], np.int64)}
    prog = check(tmp_path, nodes, {"x": ([2, 3, 4, 5], F32)}, ["y"], inits)
    kinds = {s.name for s in prog.steps}
    assert {"shape", "gather_b", "cat_shape"}.isdisjoint(kinds)
    assert {"reshape", "tr"} <= kinds
    assert prog.plan.stats["folded_nodes"] == 6


def test_slicing_and_data_movement(tmp_path):
    nodes = [
        h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s1"], name="slice_rev"),
        h.make_node("Split", ["s1", "split"], ["p0", "p1"], name="split", axis=1),
        h.make_node("Split", ["x"], ["q0", "q1"], name="split_even", axis=3, num_outputs=2),
        h.make_node("Pad", ["p0", "pads", "pv"], ["pd"], name="pad_c", mode="constant"),
        h.make_node("Pad", ["p1", "pads2"], ["pr"], name="pad_r", mode="reflect"),
        h.make_node("Pad", ["p1", "pads2"], ["pe"], name="pad_e", mode="edge"),
        h.make_node("Concat", ["q0", "q1"], ["cq"], name="cat", axis=1),
        h.make_node("Unsqueeze", ["cq", "ax0"], ["u"], name="unsq"),
        h.make_node("Squeeze", ["u", "ax0"], ["sq"], name="sq"),
        h.make_node("Flatten", ["sq"], ["fl"], name="flatten", axis=2),
        h.make_node("Gather", ["fl", "idx"], ["ga"], name="gather_vec", axis=1),
        h.make_node("Gather", ["x", "i_neg"], ["gs"], name="gather_scalar", axis=1),
        h.make_node("Expand", ["col", "eshape"], ["ex"], name="expand"),
        h.make_node("Less", ["gs", "zero"], ["mask"], name="less"),
        h.make_node("Where", ["mask", "gs", "ex"], ["w"], name="where"),
        h.make_node("Cast", ["mask"], ["mf"], name="cast", to=TensorProto.FLOAT),
        h.make_node("Identity", ["mf"], ["mi"], name="ident"),
        h.make_node("ConstantOfShape", ["cshape"], ["ones"], name="cos",
                    value=h.make_tensor("v", TensorProto.FLOAT, [1], [1.5])),
        h.make_node("Add", ["mi", "ones"], ["y"], name="add"),
    ]
    inits = {"st": np.array([-1, 0], np.int64), "en": np.array([-100, 6], np.int64), "ax": np.array([3, 1], np.int64),
             "sp": np.array([-2, 2], np.int64), "split": np.array([1, 2], np.int64),
             "pads": np.array([0, 0, 1, 0, 0, 0, 2, 1], np.int64), "pv": np.array(1.0, np.float32),
             "pads2": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "ax0": np.array([0], np.int64),
             "idx": np.array([[0, 3], [2, -1]], np.int64), "i_neg": np.array(-1, np.int64),
             "col": rand(1, 7, 1, seed=9), "eshape": np.array([2, 7, 8], np.int64),
             "zero": np.array(0.0, np.float32), "cshape": np.array([2, 7, 8], np.int64)}
    check(tmp_path, nodes, {"x": ([2, 6, 7, 8], F32)}, ["pd", "pr", "pe", "ga", "w", "y"], inits)


def test_pooling_and_reductions(tmp_path):
    nodes = [
        h.make_node("MaxPool", ["x"], ["mp"], name="maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                    ceil_mode=1),
        h.make_node("AveragePool", ["x"], ["ap"], name="avgpool", kernel_shape=[3, 3], strides=[2, 2],
                    pads=[1, 1, 1, 1], count_include_pad=0),
        h.make_node("AveragePool", ["x"], ["ap2"], name="avgpool_inc", kernel_shape=[2, 3], strides=[1, 2],
                    pads=[0, 1, 1, 0], count_include_pad=1),
        h.make_node("GlobalAveragePool", ["x"], ["gap"], name="gap"),
        h.make_node("ReduceMean", ["x", "axes"], ["rm"], name="rmean", keepdims=1),
        h.make_node("ReduceSum", ["x", "axes"], ["rs"], name="rsum", keepdims=0),
        h.make_node("ReduceMax", ["x"], ["rx"], name="rmax", keepdims=0),
    ]
    inits = {"axes": np.array([1, -1], np.int64)}
    check(tmp_path, nodes, {"x": ([2, 4, 9, 10], F32)}, ["mp", "ap", "ap2", "gap", "rm", "rs", "rx"], inits)


def test_resize_modes(tmp_path):
    nodes = [
        h.make_node("Resize", ["x", "", "sc"], ["n"], name="nearest", mode="nearest",
                    coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        h.make_node("Resize", ["x", "", "", "sz"], ["l"], name="linear", mode="linear",
                    coordinate_transformation_mode="half_pixel"),
        h.make_node("Resize", ["x", "", "", "sz"], ["a"], name="align", mode="linear",
                    coordinate_transformation_mode="align_corners"),
    ]
    inits = {"sc": np.array([1, 1, 2, 2], np.float32), "sz": np.array([1, 3, 11, 7], np.int64)}
    check(tmp_path, nodes, {"x": ([1, 3, 5, 6], F32)}, ["n", "l", "a"], inits)


def test_activations(tmp_path):
    inits = {"slope": rand(3, 1, 1, seed=2)}
    nodes = [
        h.make_node("HardSigmoid", ["x"], ["hs"], name="hsig", alpha=0.3, beta=0.4),
        h.make_node("LeakyRelu", ["hs"], ["lr"], name="leaky", alpha=0.2),
        h.make_node("PRelu", ["x", "slope"], ["pr"], name="prelu"),
        h.make_node("Softmax", ["pr"], ["sm"], name="softmax1", axis=1),
        h.make_node("Elu", ["x"], ["el"], name="elu"),
        h.make_node("Neg", ["el"], ["ng"], name="neg"),
        h.make_node("Exp", ["ng"], ["ex"], name="exp"),
        h.make_node("Max", ["ex", "lr", "sm"], ["y"], name="max3"),
    ]
    check(tmp_path, nodes, {"x": ([2, 3, 4, 5], F32)}, ["y"], inits)


def test_opset11_style_attributes(tmp_path):
    """Older exporters put axes / split in attributes and use the opset-11 Softmax."""
    nodes = [
        h.make_node("Unsqueeze", ["x"], ["u"], name="unsq", axes=[0]),
        h.make_node("Squeeze", ["u"], ["s"], name="sq", axes=[0]),
        h.make_node("ReduceMean", ["s"], ["m"], name="rmean", axes=[2], keepdims=1),
        h.make_node("Split", ["s"], ["a", "b"], name="split", axis=2, split=[3, 1]),
        h.make_node("Softmax", ["a"], ["sm"], name="softmax", axis=1),
        h.make_node("Sub", ["sm", "m"], ["y"], name="sub"),
    ]
    check(tmp_path, nodes, {"x": ([2, 3, 4], F32)}, ["y", "b"], opset=11)


def test_cumsum_every_mode(tmp_path):
    """EdgeNeXt's position encoding builds coordinates with CumSum; each of its attribute modes."""
    nodes = [h.make_node("CumSum", ["x", f"ax{a}"], [f"c{a}{e}{r}"], name=f"cumsum{a}{e}{r}", exclusive=e, reverse=r)
             for a in (1, 3) for e in (0, 1) for r in (0, 1)]
    inits = {"ax1": np.array(1, np.int64), "ax3": np.array(-1, np.int64)}
    outs = [n.output[0] for n in nodes]
    check(tmp_path, nodes, {"x": ([2, 5, 3, 7], F32)}, outs, inits)


def test_transposed_convolutions(tmp_path):
    """ConvTranspose as decoders write it: even pads (torch's own call), uneven pads, output_padding, a bias
    past the full output, auto_pad SAME_UPPER / SAME_LOWER, output_shape, groups and dilation."""
    inits = {"w": rand(4, 6, 3, 3, seed=1), "b": rand(6, seed=2), "wg": rand(6, 2, 2, 2, seed=3),
             "bg": rand(6, seed=4), "w4": rand(6, 3, 4, 4, seed=5)}
    nodes = [
        h.make_node("ConvTranspose", ["x", "w", "b"], ["a"], name="even", strides=[2, 2], pads=[1, 1, 1, 1],
                    output_padding=[1, 1]),
        h.make_node("ConvTranspose", ["a", "wg", "bg"], ["g"], name="grouped", group=3, strides=[2, 2],
                    dilations=[2, 1]),
        h.make_node("ConvTranspose", ["a", "w4"], ["u"], name="uneven", strides=[2, 2], pads=[0, 1, 2, 0]),
        h.make_node("ConvTranspose", ["a", "w4", "b3"], ["ug"], name="uneven_grown", strides=[2, 2],
                    pads=[0, 1, 1, 0], output_padding=[1, 1]),
        h.make_node("ConvTranspose", ["a", "w4", "b3"], ["s"], name="same_upper", strides=[2, 2],
                    auto_pad="SAME_UPPER"),
        h.make_node("ConvTranspose", ["a", "w4", "b3"], ["sl"], name="same_lower", strides=[2, 2],
                    auto_pad="SAME_LOWER"),
        h.make_node("ConvTranspose", ["a", "w4", "b3"], ["o"], name="output_shape", strides=[2, 2],
                    output_shape=[21, 25]),
        h.make_node("ConvTranspose", ["a", "w4", "b3"], ["p"], name="bias_past_full", strides=[3, 3],
                    output_padding=[2, 1], pads=[0, 0, 0, 0]),
    ]
    inits["b3"] = rand(3, seed=6)
    # odd total paddings, where SAME_UPPER and SAME_LOWER differ (k=3, stride 2: one row to crop), and a 'same'
    # that asks for more than the full output (k=1, stride 2: no padding at all)
    inits["w3"], inits["w1"] = rand(6, 3, 3, 3, seed=7), rand(6, 3, 1, 1, seed=8)
    nodes += [
        h.make_node("ConvTranspose", ["a", "w3", "b3"], ["so"], name="same_upper_odd", strides=[2, 2],
                    auto_pad="SAME_UPPER"),
        h.make_node("ConvTranspose", ["a", "w3", "b3"], ["slo"], name="same_lower_odd", strides=[2, 2],
                    auto_pad="SAME_LOWER"),
        h.make_node("ConvTranspose", ["a", "w3"], ["oo"], name="output_shape_odd", strides=[2, 2],
                    output_shape=[20, 24]),
        h.make_node("ConvTranspose", ["a", "w1"], ["s1"], name="same_k1", strides=[2, 2], auto_pad="SAME_UPPER"),
    ]
    check(tmp_path, nodes, {"x": ([1, 4, 5, 6], F32)},
          ["g", "u", "ug", "s", "sl", "o", "p", "so", "slo", "oo", "s1"], inits)


def test_depth_to_space_both_modes_and_space_to_depth(tmp_path):
    """PixelShuffle (CRD, what torch exports), DCR (ONNX's default, what TensorFlow converters write) and
    SpaceToDepth: a segmentation head's upsampling."""
    nodes = [
        h.make_node("DepthToSpace", ["x"], ["crd"], name="crd", blocksize=2, mode="CRD"),
        h.make_node("DepthToSpace", ["x"], ["dcr"], name="dcr", blocksize=2),
        h.make_node("SpaceToDepth", ["dcr"], ["back"], name="s2d", blocksize=2),
    ]
    check(tmp_path, nodes, {"x": ([2, 8, 3, 5], F32)}, ["crd", "dcr", "back"], opset=13)
