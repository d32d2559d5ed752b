"""Engine layer -> ONNX nodes -> torch modules, on files in trtexec's real formats."""

from __future__ import annotations

import json

import pytest

from ytk_core.errors import UsageError
from ytk_core.propose.attribution import attribute
from ytk_core.propose.layer_map import resolve_layers
from ytk_core.propose.measurement import load_measurement
from ytk_core.propose.modules import ModuleIndex, load_fx_nodes
from ytk_core.propose.onnx_graph import OnnxGraph


@pytest.fixture(scope="module")
def graph(small):  # type: ignore[no-untyped-def]
    return OnnxGraph.load(small / "model.onnx")


@pytest.fixture(scope="module")
def mods(small):  # type: ignore[no-untyped-def]
    return ModuleIndex(load_fx_nodes(small / "fx_nodes.json"))


def _by_name(resolved):  # type: ignore[no-untyped-def]
    return {r.layer.name: r for r in resolved}


def test_trtexec_profile_and_names_only_layer_info(small, graph):
    m = load_measurement(small / "trt86_profile.json", small / "trt86_layers.json",
                         arch="arm64-sm87-dos6010-cu114-trt86")
    assert len(m.layers) == 18 and m.engine == "tensorrt" and not m.simulated
    assert m.layers[2].name == "node_Conv_1208 + PWN(n0)" and m.layers[2].median_ms == pytest.approx(0.05)
    r = _by_name(resolve_layers(m.layers, graph, m.layer_info))
    assert r["node_Conv_1208 + PWN(n0)"].nodes == ["node_Conv_1208", "n0"]
    assert r["node_Conv_1220 + PWN(PWN(n0_5))"].nodes == ["node_Conv_1220", "n0_5"]
    assert r["node_Conv_1222 || node_Conv_1224"].nodes == ["node_Conv_1222", "node_Conv_1224"]
    assert r["conv2d_28 copy"].nodes == ["node_cat_1"]           # the concat copying its input into place
    assert r["node_Conv_1253_myl0_3"].nodes == ["node_Conv_1253"]
    assert r["reshape_before_node_matmul_2"].nodes == ["node_matmul_2"]
    span = r["{ForeignNode[node_cat...node__unsafe_view]}"]
    assert span.resolved_by == "span" and span.nodes[0] == "node_cat" and span.nodes[-1] == "node__unsafe_view"
    assert len(span.nodes) == graph.by_name["node__unsafe_view"].index - graph.by_name["node_cat"].index + 1
    for glue in ("[HostToDeviceCopy 0]", "node_Conv_1216 input reformatter 0", "__myl_TranMulAdd_myl0_1",
                 "(Unnamed Layer* 57) [Shuffle]",
                 "Reformatting CopyNode for Output Tensor 0 to {ForeignNode[node_cat...node__unsafe_view]}"):
        assert r[glue].nodes == [], glue


def test_attributed_plus_glue_is_the_total(small, graph, mods):
    m = load_measurement(small / "trt86_profile.json", small / "trt86_layers.json")
    att = attribute(m.layers, graph, mods, set(), "fp16", m.layer_info)
    assert att.total_ms == pytest.approx(0.53)
    assert abs(att.attributed_ms + att.glue_ms - att.total_ms) < 1e-9
    glue = {c: v[0] for c, v in att.glue.items()}
    assert glue["reformat"] == pytest.approx(0.020 + 0.005 + 0.012)
    assert glue["engine-internal"] == pytest.approx(0.010 + 0.003 + 0.010)
    assert glue["unresolved-layer"] == pytest.approx(0.004)
    # the whole ForeignNode is the LiteMLA block's own ops
    lite = "m.stages.2.blocks.1.context_module.main"
    span = graph.span("node_cat", "node__unsafe_view")
    assert all(mods.owner_path(n) == lite for n in span)
    assert sum(att.node_ms[n] for n in span) == pytest.approx(0.200)
    # a residual add fused into its conv is charged the residual it reads, not half the layer
    conv, add = att.node_ms["node_Conv_1212"], att.node_ms["node_add"]
    assert conv + add == pytest.approx(0.030) and 0 < add < conv


def test_tensorrt10_metadata_and_layer_info_dataflow(small, graph):
    m = load_measurement(small / "trt10_profile.json", small / "trt10_layers.json")
    assert m.layers[1].metadata and m.layers[1].type == "CaskConvolution"
    r = _by_name(resolve_layers(m.layers, graph, m.layer_info))
    assert r["node_Conv_1252"].resolved_by == "metadata" and r["node_Conv_1252"].nodes == ["node_Conv_1252"]
    assert r["__mye101_myl0_0"].nodes == ["node_cat_1", "node_view_1", "node_transpose_3"]
    # a helper whose output is an ONNX tensor belongs to that tensor's producer ...
    assert r["(Unnamed Layer* 90) [Shuffle]"].nodes == ["node_transpose_4"]
    assert r["(Unnamed Layer* 90) [Shuffle]"].resolved_by == "layer-info"
    # ... otherwise to the named layer that consumes its output
    assert r["(Unnamed Layer* 81) [ElementWise]"].nodes == ["node_Conv_1254"]
    assert r["__myl_MatMulDiv_myl0_2"].kind == "engine"


def test_profile_without_median_uses_average(small):
    m = load_measurement(small / "trt_no_median_profile.json")
    assert [ly.median_ms for ly in m.layers] == pytest.approx([0.01, 0.02, 0.05, 0.04, 0.03])


def test_time_ms_over_count_when_nothing_else(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps([{"count": 4}, {"name": "a", "timeMs": 2.0, "percentage": 100}]))
    assert load_measurement(p).layers[0].median_ms == pytest.approx(0.5)


@pytest.mark.parametrize("content, words", [
    ('{"Layers": ["a"], "Bindings": []}', "layer-info file"),
    ("not json", "neither an engine bundle .* nor a JSON layer profile"),
    ('[{"count": 1}, {"timeMs": 1}]', 'no "name"'),
    ('{"x": 1}', "not a profile"),
    ("[]", "no layers"),
])
def test_bad_profiles_are_clear_errors(tmp_path, content, words):
    p = tmp_path / "p.json"
    p.write_text(content)
    with pytest.raises(UsageError, match=words):
        load_measurement(p)


def test_an_onnx_given_as_the_profile_asks_for_the_bundle(tmp_path):
    p = tmp_path / "model.onnx"
    p.write_bytes(b"\x08\x07\x12\x07pytorch\xea\x01")
    with pytest.raises(UsageError, match=r"--profile .*model.onnx: neither an engine bundle"):
        load_measurement(p)


def test_missing_profile(tmp_path):
    with pytest.raises(UsageError, match="not found"):
        load_measurement(tmp_path / "nope.tgz")


def test_worked_example_every_compute_layer_resolves(worked):
    from ytk_core.propose.measurement import load_measurement as lm

    m = lm(worked / "base.tgz")
    g = OnnxGraph.load(worked / "model.onnx")
    mods = ModuleIndex(load_fx_nodes(worked / "fx_nodes.json"))
    att = attribute(m.layers, g, mods, set(), m.precision, m.layer_info)
    assert abs(att.attributed_ms + att.glue_ms - m.total_ms) < 0.1
    unresolved = [ly.name for ly in att.layers if ly.kind == "compute" and not ly.onnx_nodes]
    assert unresolved == []
    assert set(att.glue) == {"reformat"}


def test_worked_example_raw_trtexec_pair_matches_the_bundle(worked):
    """The mock also writes trtexec's own files; reading those (names + metadata only) must agree."""
    bundle = load_measurement(worked / "base.tgz")
    raw = load_measurement(worked / "trtexec_profile.json", worked / "layer_info.json")
    g = OnnxGraph.load(worked / "model.onnx")
    mods = ModuleIndex(load_fx_nodes(worked / "fx_nodes.json"))
    a = attribute(bundle.layers, g, mods, set(), "fp16", bundle.layer_info)
    b = attribute(raw.layers, g, mods, set(), "fp16", raw.layer_info)
    assert b.total_ms == pytest.approx(a.total_ms, abs=0.01)
    assert b.glue_ms == pytest.approx(a.glue_ms, abs=0.01)
    for node, ms in a.node_ms.items():
        assert b.node_ms.get(node, 0.0) == pytest.approx(ms, abs=1e-3), node
