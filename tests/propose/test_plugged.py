"""Then ask again: plugins already in the engine, and --plugin onto a carve you ship."""

from __future__ import annotations

import pytest

from ytk_core.errors import UsageError
from ytk_core.propose import ProposeOptions, propose

SELECTORS = [
    "yasp::LiteMLAC768=LiteMLA:around@where=*.3.blocks.*.context_module.main",
    "yasp::LiteMLAC384=LiteMLA:around@where=*.2.blocks.*.context_module.main",
    "yasp::DwConv3x3s1Dyn=ConvNormAct@where=*.res0.main.depth_conv,*.1.main.depth_conv,*.2.main.depth_conv,"
    "*.local_module.main.depth_conv",
]


def _run(d, bundle, **kw):  # type: ignore[no-untyped-def]
    return propose(d / bundle, d / "model.onnx", d / "fx_nodes.json", options=ProposeOptions(**kw))


@pytest.fixture(scope="module")
def again(plugged):  # type: ignore[no-untyped-def]
    return _run(plugged, "gaia.tgz", min_ms=0.03, family_min_ms=0.1)


def test_plugged_regions_are_recognised(again, plugged):
    rows = {p.name: p for p in again.plugged}
    assert sorted(rows) == ["DwConv3x3s1Dyn", "LiteMLAC384", "LiteMLAC768"]
    lite = rows["LiteMLAC384"]
    assert lite.label == "LiteMLAC384 (already plugged)" and len(lite.sites) == 3
    assert lite.selector == SELECTORS[1]
    assert [s.module_path for s in lite.sites] == [f"m.stages.2.blocks.{i}.context_module.main" for i in (1, 2, 3)]
    assert lite.ms == pytest.approx(sum(lite.ms_per_site)) and lite.ms > 0
    assert lite.ms_to_beat == pytest.approx(lite.ms / 3)
    assert lite.kernelgen_input.endswith("plugin_candidates/LiteMLAC384.pt2")
    assert len(rows["DwConv3x3s1Dyn"].sites) == 11
    assert again.proposals[:3] == again.plugged  # plugged rows first, as in the spec


def test_glue_shrinks_once_regions_are_plugged(again, small_base):
    base = _run(small_base, "base.tgz", min_ms=0.03, family_min_ms=0.1)
    assert again.glue_ms < base.glue_ms
    assert abs(again.attributed_ms + again.glue_ms - again.total_ms) < 0.1
    rows = sum(p.ms for p in again.proposals) + sum(r.ms for r in again.not_worth)
    assert abs(rows - again.total_ms) < 0.1
    # what the base run proposed is now plugged, so it is not proposed again
    assert {p.name for p in base.candidates} <= {p.name for p in again.plugged}
    assert not {p.name for p in again.candidates} & {p.name for p in again.plugged}


def test_without_plugins_json_rows_fall_back_to_op_types(plugged, tmp_path):
    import shutil

    for f in ("model.onnx", "fx_nodes.json", "gaia.tgz"):
        shutil.copy(plugged / f, tmp_path / f)
    r = _run(tmp_path, "gaia.tgz")
    assert r.plugins_file is None
    assert sorted(p.name for p in r.plugged) == ["DwConv3x3s1Dyn", "LiteMLAC384", "LiteMLAC768"]
    assert all(p.selector == "" and p.kernelgen_input is None for p in r.plugged)


def test_given_carve_reports_exactly_those(small_base):
    r = _run(small_base, "base.tgz", plugins=SELECTORS)
    assert [p.name for p in r.proposals] == ["LiteMLAC768", "LiteMLAC384", "DwConv3x3s1Dyn"]
    assert [len(p.sites) for p in r.proposals] == [4, 3, 11]
    assert [p.selector for p in r.proposals] == SELECTORS
    assert all(p.ms > 0 and not p.already_plugged for p in r.proposals)
    cats = [row.category for row in r.not_worth]
    assert cats == ["outside_carve", "glue"]
    rows = sum(p.ms for p in r.proposals) + sum(row.ms for row in r.not_worth)
    assert abs(rows - r.total_ms) < 1e-6


def test_given_carve_agrees_with_the_automatic_attribution(small_base):
    auto = _run(small_base, "base.tgz", min_ms=0.03, family_min_ms=0.1)
    given = _run(small_base, "base.tgz", plugins=SELECTORS[:2])
    a = {p.name: p.ms for p in auto.candidates}
    g = {p.name: p.ms for p in given.proposals}
    assert g["LiteMLAC768"] == pytest.approx(a["LiteMLAC768"], rel=1e-6)
    assert g["LiteMLAC384"] == pytest.approx(a["LiteMLAC384"], rel=1e-6)


def test_given_selector_of_a_shipped_plugin_reports_its_measured_time(plugged, again):
    r = _run(plugged, "gaia.tgz", plugins=[SELECTORS[1]])
    assert len(r.proposals) == 1 and r.proposals[0].already_plugged
    assert r.proposals[0].ms == pytest.approx({p.name: p.ms for p in again.plugged}["LiteMLAC384"])


@pytest.mark.parametrize("sel, words", [
    ("yasp::X=", "column"),
    ("yasp::X=NoSuchClass", "no module of class"),
    ("yasp::X=LiteMLA@where=*.nowhere", "none matches"),
])
def test_bad_given_selectors_are_clear_errors(small_base, sel, words):
    with pytest.raises(UsageError, match=words):
        _run(small_base, "base.tgz", plugins=[sel])
