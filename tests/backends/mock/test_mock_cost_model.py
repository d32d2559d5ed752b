"""The simulated Orin's cost model: what kind of layer runs near the roofline and what does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ytk_backend_mock.cost_model import KINDS, LAUNCH_MS, roofline_ms, target_gpu
from ytk_backend_mock.fusion import build_layers
from ytk_backend_mock.graph import load_graph
from ytk_hookspecs.models import GPU_PROPERTIES

ORIN = GPU_PROPERTIES[87]


def _conv_model(tmp_path: Path, c: int, hw: int, k: int, groups: int) -> Path:
    w = np.zeros((c, c // groups, k, k), np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", group=groups, kernel_shape=[k, k],
                            pads=[k // 2] * 4)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "w")])
    p = tmp_path / f"conv_{c}_{k}_{groups}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), p)
    return p


def _conv_layer(p: Path, c: int, hw: int, precision: str = "fp32"):  # type: ignore[no-untyped-def]
    g = load_graph(p, {"x": (1, c, hw, hw)}, {})
    (lay,) = [x for x in build_layers(g, precision, ORIN, {}) if x.kind.startswith("conv")]
    return lay


def test_memory_bound_time_is_bytes_over_bandwidth_at_the_stated_efficiency():
    nbytes = 64e6
    c = roofline_ms(nbytes, 0.0, KINDS["pointwise"], ORIN, "fp16")
    want = nbytes / (ORIN.mem_bandwidth_gbs * 1e9 * KINDS["pointwise"].bandwidth) * 1e3 + LAUNCH_MS
    assert c.ms == pytest.approx(want) and c.bound == "memory"
    big = roofline_ms(1e6, 5e12, KINDS["conv_dense"], ORIN, "fp16")
    assert big.bound == "compute"
    assert big.ms == pytest.approx(5e12 / (ORIN.fp16_tflops * 1e12 * KINDS["conv_dense"].compute) * 1e3 + LAUNCH_MS)
    assert roofline_ms(10, 10, KINDS["pointwise"], ORIN, "fp16").bound == "launch"


def test_1x1_conv_runs_near_the_roofline_and_depthwise_far_from_it(tmp_path):
    c, hw = 256, 128
    pw = _conv_layer(_conv_model(tmp_path, c, hw, 1, 1), c, hw, "fp16")
    dw = _conv_layer(_conv_model(tmp_path, c, hw, 3, c), c, hw, "fp16")
    assert (pw.kind, dw.kind) == ("conv_1x1", "conv_depthwise_3x3")

    def achieved(lay):  # type: ignore[no-untyped-def]
        """Fraction of the roofline (published bandwidth, fp16 peak of the units the layer runs on)."""
        peak = ORIN.fp16_tflops if KINDS[lay.kind].tensor_cores else 2 * ORIN.fp32_tflops
        floor = max(lay.cost.bytes / (ORIN.mem_bandwidth_gbs * 1e9), lay.cost.flops / (peak * 1e12))
        return floor * 1e3 / lay.ms

    assert achieved(pw) > 0.6, "dense 1x1 convs reach most of the roofline"
    assert achieved(dw) < 0.35, "depthwise convs do not"
    dw5 = _conv_layer(_conv_model(tmp_path, c, hw, 5, c), c, hw, "fp16")
    assert dw5.kind == "conv_depthwise_5x5" and dw5.ms > dw.ms


def test_fp16_halves_activation_bytes(tmp_path):
    c, hw = 64, 128
    p = _conv_model(tmp_path, c, hw, 3, c)
    fp32, fp16 = _conv_layer(p, c, hw, "fp32"), _conv_layer(p, c, hw, "fp16")
    assert fp16.cost.bytes == pytest.approx(fp32.cost.bytes / 2, rel=0.05)


def test_unknown_sm_prices_against_orin():
    assert target_gpu(87) is GPU_PROPERTIES[87]
    assert target_gpu(12) is GPU_PROPERTIES[87]
