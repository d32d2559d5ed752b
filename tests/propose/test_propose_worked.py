"""propose() on the worked example (EfficientViT-B1, 4x1088x1920) profiled by the mock engine.

The mock's figures are SIMULATED (a cost model of a DRIVE AGX Orin), so exact milliseconds are not
asserted; the structure the spec shows is: LiteMLA regions per C, depthwise families, 1x1 GEMMs
at roofline, the glue bucket, and every millisecond accounted for.
"""

from __future__ import annotations

import json

import pytest

from ytk_core.propose import ProposeOptions, propose
from ytk_core.propose.given import _GraphView
from ytk_core.propose.modules import load_fx_nodes
from ytk_core.propose.onnx_graph import OnnxGraph

from .conftest import load_profile, make_bundle


@pytest.fixture(scope="module")
def report(worked):  # type: ignore[no-untyped-def]
    return propose(worked / "base.tgz", worked / "model.onnx", worked / "fx_nodes.json")


def _by_name(r):  # type: ignore[no-untyped-def]
    return {p.name: p for p in r.proposals}


def test_header_facts(report):
    assert report.simulated and report.engine == "mock" and report.arch == "arm64-sm87-dos6010-cu114-trt86"
    assert report.end_to_end_ms == pytest.approx(88.4)
    assert report.warnings == []


def test_every_millisecond_is_accounted_for(report):
    assert abs(report.attributed_ms + report.glue_ms - report.total_ms) < 0.1
    rows = sum(p.ms for p in report.proposals) + sum(r.ms for r in report.not_worth)
    assert abs(rows - report.total_ms) < 0.1


def test_attention_regions_per_channel_count(report):
    p = _by_name(report)
    assert p["LiteMLAC384"].selector == "yasp::LiteMLAC384=LiteMLA:around@where=*.2.blocks.*.context_module.main"
    assert p["LiteMLAC768"].selector == "yasp::LiteMLAC768=LiteMLA:around@where=*.3.blocks.*.context_module.main"
    assert len(p["LiteMLAC384"].sites) == 3 and len(p["LiteMLAC768"].sites) == 4
    assert p["LiteMLAC384"].label == "LiteMLA region (C=384)" and p["LiteMLAC384"].around


def test_depthwise_families(report):
    p = _by_name(report)
    assert p["DwConv5x5s1C384"].selector == \
        "yasp::DwConv5x5s1C384=Conv2d@where=*.2.blocks.*.context_module.main.aggreg.0.0"
    assert len(p["DwConv5x5s1C768"].sites) == 4
    assert p["DwConv3x3s1C256"].selector == \
        "yasp::DwConv3x3s1C256=ConvNormAct@where=*.1.blocks.1.main.depth_conv,*.2.main.depth_conv"
    # strided output extents are expressible in our kernel contract: strided depthwise is proposable
    assert p["DwConv3x3s2C64"].kind == "depthwise_conv" and p["DwConv3x3s2C64"].sites[0].module_path == \
        "m.stages.0.blocks.0.main.depth_conv"


def test_not_worth_plugging(report):
    rows = {r.label: r for r in report.not_worth}
    gemm = rows["1x1 / dense GEMMs"]
    assert gemm.category == "roofline" and gemm.sites >= 40 and "at roofline" in gemm.reason
    assert rows["unattributed glue"].ms == pytest.approx(report.glue_ms)
    assert "reformats" in rows["unattributed glue"].reason
    # what the time outside every region is spent on, by op type, heaviest first
    outside = rows["ops outside any region"]
    assert outside.reason == f"no heavy op to build a kernel around: Add {outside.ms:.2g} ms"  # the residual adds
    assert all(p.roofline is not None and p.roofline.fraction < 0.5 for p in report.candidates)


def test_summary_line(report):
    assert report.summary.startswith(f"{len(report.candidates)} candidates covering ")
    assert f"of the {report.total_ms:.1f} ms" in report.summary
    assert "SIMULATED" in report.summary  # the mock's figures are labelled wherever shown


def test_selectors_round_trip_through_the_carve(report, worked):
    """Every proposed selector parses with the carve's parser and selects exactly its sites."""
    from ytk_core.frontend.regions import GraphIndex, match_sites
    from ytk_core.frontend.selectors import parse_selector

    gi = GraphIndex(_GraphView(load_fx_nodes(worked / "fx_nodes.json")))
    for p in report.candidates:
        sel = parse_selector(p.selector)
        assert (sel.namespace, sel.name, sel.ops_name, sel.around) == ("yasp", p.name, p.ops_name, p.around)
        assert sorted(s.module_path for s in match_sites(sel, gi)) == sorted(s.module_path for s in p.sites), p.name


def test_merge_shape_families(worked):
    r = propose(worked / "base.tgz", worked / "model.onnx", worked / "fx_nodes.json",
                options=ProposeOptions(merge_shape_families=True))
    names = [p.name for p in r.candidates]
    assert "DwConv3x3s1Dyn" in names and "LiteMLADyn" not in names
    # attention blocks bake their head count: one program per width, never a dynamic remainder
    assert {"LiteMLAC384", "LiteMLAC768"} <= set(names)
    assert not any(n.startswith("DwConv3x3s1C") for n in names)
    assert len(_by_name(r)["DwConv3x3s1Dyn"].sites) == 11


def test_min_ms_moves_families_to_the_small_row(worked):
    r = propose(worked / "base.tgz", worked / "model.onnx", worked / "fx_nodes.json",
                options=ProposeOptions(min_ms=5.0))
    assert r.candidates and all(p.ms >= 5.0 for p in r.candidates)
    small = next(x for x in r.not_worth if x.category == "under_threshold")
    assert small.label == "families under 5 ms" and small.sites >= 1 and 0 < small.ms < 5.0


def _scaled(worked, tmp_path, pick, factor):  # type: ignore[no-untyped-def]
    g = OnnxGraph.load(worked / "model.onnx")
    prof = load_profile(worked)
    for ly in prof["layers"]:
        if any(pick(g.by_name[n]) for n in ly["onnx_nodes"] if n in g.by_name):
            ly["median_ms"] *= factor
    return make_bundle(worked, tmp_path / "scaled.tgz", prof)


def test_roofline_is_judged_from_measured_time_not_op_type(worked, tmp_path):
    def one_by_one(n):  # type: ignore[no-untyped-def]
        return n.op_type == "Conv" and list(n.attrs.get("kernel_shape", [])) == [1, 1] and n.attrs.get("group", 1) == 1

    slow = _scaled(worked, tmp_path, one_by_one, 10.0)
    r = propose(slow, worked / "model.onnx", worked / "fx_nodes.json")
    assert "1x1 / dense GEMMs" not in {x.label for x in r.not_worth}
    assert any(p.kind == "conv" and p.label.startswith("conv 1x1") for p in r.candidates)

    def depthwise(n):  # type: ignore[no-untyped-def]
        return n.op_type == "Conv" and n.attrs.get("group", 1) > 1 and list(n.attrs.get("kernel_shape")) == [5, 5]

    fast = _scaled(worked, tmp_path, depthwise, 0.2)
    r = propose(fast, worked / "model.onnx", worked / "fx_nodes.json")
    roof = [m for x in r.not_worth if x.category == "roofline" for m in x.members]
    assert "depthwise 5x5 s1  (C=384)" in roof and "DwConv5x5s1C384" not in _by_name(r)


def test_mismatched_files_are_warned_about(worked, tmp_path):
    fx = json.loads((worked / "fx_nodes.json").read_text())
    fx["onnx_sha256"] = "0" * 64
    (tmp_path / "fx_nodes.json").write_text(json.dumps(fx))
    r = propose(worked / "base.tgz", worked / "model.onnx", tmp_path / "fx_nodes.json")
    assert any("fx_nodes.json was written for a different ONNX" in w for w in r.warnings)


def test_report_is_a_versioned_artifact(report, tmp_path):
    from ytk_core.propose import ProposeReport

    p = report.write(tmp_path / "propose.json")
    back = ProposeReport.read(p)
    assert back.schema_version == 4 and back.proposals[0].name == report.proposals[0].name
    assert json.loads(p.read_text())["options"]["min_ms"] == 1.0


def test_a_profile_the_end_to_end_median_contradicts_is_flagged(worked, tmp_path):
    """Per-layer medians that sum to ten times the end-to-end median (layers timed on a busy host) rank
    regions by noise: the report says so. The worked bundle's own sum (within 2x) is not flagged above."""
    prof = load_profile(worked)
    for lay in prof["layers"]:
        lay["median_ms"] *= 10
        for k in ("average_ms", "mean_ms", "min_ms", "max_ms"):
            if k in lay:
                lay[k] *= 10
    d = tmp_path / "base"
    d.mkdir()
    for f in ("model.onnx", "fx_nodes.json", "bundle_manifest.json", "layer_info.json"):
        (d / f).symlink_to(worked / f)
    bundle = make_bundle(d, d / "busy.tgz", profile=prof)
    rep = propose(bundle, d / "model.onnx", d / "fx_nodes.json")
    flagged = [w for w in rep.warnings if "per-layer medians sum to" in w]
    assert len(flagged) == 1 and "x the end-to-end median (88.400 ms)" in flagged[0], rep.warnings


def test_a_profile_that_agrees_with_another_timed_run_is_not_flagged():
    """The torch engine's inductor mode times its compiled run end to end and its layers op by op; the layers
    agree with the op-by-op run it also records, so the pair is not flagged. Off by 2x from every run, it is."""
    from ytk_core.thresholds import profile_disagreement

    assert profile_disagreement(10.0, 4.0, [9.0]) is None
    assert profile_disagreement(10.0, 4.0) is not None and "2.5x the end-to-end median (4.000 ms)" in \
        profile_disagreement(10.0, 4.0)  # type: ignore[operator]
    assert profile_disagreement(1.0, 4.0, [3.0]) is not None  # under half of every run: timed wrong the other way
    assert profile_disagreement(5.0, 4.0) is None and profile_disagreement(5.0, None) is None
    assert "123x the end-to-end median" in profile_disagreement(123.0, 1.0)  # type: ignore[operator]
