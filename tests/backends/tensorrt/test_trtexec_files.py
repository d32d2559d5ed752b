"""The trtexec readers on real files of TensorRT 8.6 and 10.x (tests/data/trtexec/README.md names each source)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trt_helpers import SAMPLES
from ytk_backend_tensorrt.trtexec_files import (TrtexecFormatError, metadata_nodes, parse_average_lines,
                                                parse_layer_info, parse_outputs, parse_profile, parse_summary,
                                                parse_times, selected_device)
from ytk_backend_tensorrt.versions import TrtVersion


def read(rel: str) -> str:
    return (SAMPLES / rel).read_text()


# -- --exportProfile -------------------------------------------------------------------------------------------
def test_profile_of_tensorrt_8_6() -> None:
    p = parse_profile(read("8.6/profile.json"))
    assert p.count == 13009 and len(p.layers) == 26
    first = p.layers[0]
    assert first.name == "Reformatting CopyNode for Input Tensor 0 to /conv1/Conv + /relu/Relu"
    assert (first.time_ms, first.average_ms, first.median_ms, first.percentage) == (54.6227, 0.00419884, 0.004096,
                                                                                    1.89759)
    # timeMs is the total over the profiled runs: averageMs * count, to the printed precision
    assert all(abs(r.time_ms - r.average_ms * p.count) <= 1e-3 * max(1.0, r.time_ms) for r in p.layers)
    assert sum(r.percentage for r in p.layers) == pytest.approx(100.0, abs=0.01)
    assert p.layers[-1].name == "/Flatten" and p.layers[-1].median_ms == 0


@pytest.mark.parametrize("rel,count,n", [("10.1/profile_int8.json", 13629, 38), ("10.4/profile.json", 13897, 14)])
def test_profiles_of_tensorrt_10(rel: str, count: int, n: int) -> None:
    p = parse_profile(read(rel))
    assert p.count == count and len(p.layers) == n
    names = [r.name for r in p.layers]
    assert any(name.startswith("PWN(") for name in names) or any("_myl" in name for name in names)
    assert sum(r.percentage for r in p.layers) == pytest.approx(100.0, abs=0.01)


def test_profile_read_by_lines_when_a_name_breaks_the_json() -> None:
    """trtexec does not escape layer names: a quote in one leaves invalid JSON, each record still on its line."""
    text = read("8.6/profile.json").replace('"/maxpool/MaxPool"', '"/maxpool/Max"Pool\\x"')
    p = parse_profile(text)
    assert len(p.layers) == 26 and p.layers[2].name == '/maxpool/Max"Pool\\x' and p.count == 13009


def test_profile_with_bare_nan_and_inf() -> None:
    text = ('[\n  { "count" : 2 }\n, { "name" : "a", "timeMs" : nan, "averageMs" : inf, "medianMs" : -nan, '
            '"percentage" : 0 }\n]\n')
    r = parse_profile(text).layers[0]
    assert math.isnan(r.time_ms) and math.isinf(r.average_ms) and math.isnan(r.median_ms or 0.0)


def test_profile_before_8_4_has_no_median() -> None:
    text = '[\n  { "count" : 3 }\n, { "name" : "conv", "timeMs" : 3.0, "averageMs" : 1.0, "percentage" : 100 }\n]\n'
    assert parse_profile(text).layers[0].median_ms is None


@pytest.mark.parametrize("text", ['{"count": 1}', "[1, 2]", "not json at all\n{", '[{"neither": 1}]'])
def test_bad_profiles_are_errors(text: str) -> None:
    with pytest.raises(TrtexecFormatError):
        parse_profile(text, "x.json")


# -- --exportLayerInfo -----------------------------------------------------------------------------------------
def test_detailed_layer_info_of_tensorrt_10() -> None:
    info = parse_layer_info(read("10.4/layer_info.json"))
    assert info.detailed and info.bindings == ["input", "output"]
    by = info.by_name()
    reformat = by["Reformatting CopyNode for Input Tensor 0 to /features/features.0/Conv + /features/features.1/Relu"]
    assert reformat.layer_type == "Reformat" and reformat.inputs[0].dims == (1, 3, 224, 224)
    assert reformat.outputs[0].format == "Channel major FP16 format where channel % 4 == 0"
    conv = by["/features/features.0/Conv + /features/features.1/Relu"]
    assert conv.layer_type == "CaskConvolution" and conv.tactic.startswith("sm80_xmma_fprop")
    # the ONNX nodes a fused layer computes, joined by \x1e here and \x1f in the Myelin layers
    assert metadata_nodes(conv.metadata) == ["/features/features.0/Conv", "/features/features.1/Relu"]
    gemm = by["/classifier/classifier_1/Gemm_myl9_2"]
    assert metadata_nodes(gemm.metadata) == ["/classifier/classifier.1/Gemm", "/classifier/classifier.2/Relu"]
    assert len(gemm.inputs) == 5 and gemm.inputs[1].dims == (9216, 4096)
    assert by["dummy_shape_call__mye622_0_myl9_0"].metadata == "" and metadata_nodes("") == []


def test_names_only_layer_info_of_tensorrt_10_1() -> None:
    info = parse_layer_info(read("10.1/layer_info_names.json"))
    assert not info.detailed and len(info.layers) == 26 and info.bindings == ["input.1", "191"]
    assert info.layers[-1].name == "Reformatting CopyNode for Output Tensor 0 to /Flatten"
    assert all(r.layer_type == "" and r.metadata == "" for r in info.layers)


def test_metadata_with_function_stacks() -> None:
    assert metadata_nodes("[ONNX Layer: /a/Conv | /a(Conv)]\x1f[ONNX Layer: /a/Relu]\x1f[ONNX Layer: /a/Conv]") == [
        "/a/Conv", "/a/Relu"]


# -- --exportTimes ---------------------------------------------------------------------------------------------
def test_timing_trace_of_tensorrt_10() -> None:
    t = parse_times(read("10.4/times.json"))
    assert len(t) == 12
    assert (t[0].start_compute_ms, t[0].end_compute_ms, t[0].compute_ms) == (5000.23, 5000.73, 0.497559)
    assert all(r.start_compute_ms >= 5000 for r in t)  # --warmUp=5000: trtexec 10 leaves its warm-up out
    assert all(0.49 < r.compute_ms < 0.51 for r in t)


def test_timing_trace_without_compute_field() -> None:
    t = parse_times('[ { "startComputeMs" : 1.5, "endComputeMs" : 2.0 } ]')
    assert t[0].compute_ms == pytest.approx(0.5) and t[0].latency_ms == pytest.approx(0.5)
    with pytest.raises(TrtexecFormatError, match="startComputeMs"):
        parse_times('[ { "computeMs" : 1 } ]')


# -- --exportOutput --------------------------------------------------------------------------------------------
# Reconstructed from exportJSONOutput in NVIDIA/TensorRT samples/common/sampleReporting.cpp (README.md there)
OUTPUTS = """[
  { "name" : "probs"
  , "dimensions" : "1x5"
  , "values" : [ 0.0435101, 0.0340782, 0.0555826, 0.195444, 0.671385 ]
  }
, { "name" : "mask"
  , "dimensions" : "2x2"
  , "values" : [ nan, 1, -inf, 0 ]
  }
]
"""


def test_outputs_in_trtexec_form() -> None:
    out = parse_outputs(OUTPUTS)
    assert out["probs"].shape == (1, 5) and out["probs"][0, 4] == pytest.approx(0.671385)
    assert np.isnan(out["mask"][0, 0]) and np.isneginf(out["mask"][1, 0])
    with pytest.raises(TrtexecFormatError, match="1x6"):
        parse_outputs(OUTPUTS.replace('"1x5"', '"1x6"'))


# -- the log ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ver,gpu_median,walltime", [("8.6", 0.187378, 3.00049), ("10.1", 0.189453, 3.00068)])
def test_performance_summary(ver: str, gpu_median: float, walltime: float) -> None:
    log = read(f"{ver}/trtexec.log")
    s = parse_summary(log)
    assert s is not None
    assert set(s.metrics) == {"Latency", "Enqueue Time", "H2D Latency", "GPU Compute Time", "D2H Latency"}
    gpu = s.metrics["GPU Compute Time"]
    assert gpu.median == gpu_median and set(gpu.percentiles) == {90.0, 95.0, 99.0}
    assert gpu.min <= gpu.median <= gpu.max
    assert s.host_walltime_s == walltime and s.throughput_qps and s.gpu_compute_total_s
    assert selected_device(log) == "NVIDIA GeForce RTX 3090"
    avg = parse_average_lines(log)
    assert avg and all(a.runs == 10 and a.gpu_ms < a.host_ms for a in avg)


def test_versions_from_logs_and_banners() -> None:
    assert TrtVersion.from_log(read("8.6/trtexec.log")) == TrtVersion(8, 6, 3)
    assert TrtVersion.from_log(read("10.1/trtexec.log")) == TrtVersion(10, 1, 0)
    # the banner alone: NV_TENSORRT_VERSION, major*1000+minor*100+patch before 10, major*10000+... from 10
    assert TrtVersion.from_log("&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec") == TrtVersion(8, 6, 1)
    assert TrtVersion.from_log("&&&& PASSED TensorRT.trtexec [TensorRT v100100] # x") == TrtVersion(10, 1, 0)
    assert TrtVersion.from_number("101401") == TrtVersion(10, 14, 1)
    assert TrtVersion.from_log("no banner here") is None
    assert TrtVersion.parse("8.6.1.6") == TrtVersion(8, 6, 1) and str(TrtVersion.parse("10.4")) == "10.4.0"


def test_what_each_version_loads() -> None:
    v85, v86, v10 = TrtVersion(8, 5, 3), TrtVersion(8, 6, 1), TrtVersion(10, 14, 1)
    assert (v85.plugin_flag, v86.plugin_flag, v10.plugin_flag) == ("--plugins", "--dynamicPlugins", "--dynamicPlugins")
    assert v85.loadable_apis == () and v86.loadable_apis == ("trt8-IPluginV2DynamicExt",)
    assert v10.loadable_apis == ("trt8-IPluginV2DynamicExt", "trt10-IPluginV3")
    assert (v86.engine_api, v10.engine_api) == ("trt8-IPluginV2DynamicExt", "trt10-IPluginV3")
