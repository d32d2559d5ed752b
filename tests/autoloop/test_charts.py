"""The report's charts: labelled axes, a round that built no engine has no bar and is named, the
figures' source (SIMULATED) on every chart, an SVG and a PNG each."""

from __future__ import annotations

from pathlib import Path

from ytk_core.autoloop.charts import RoundPoint, latency_by_round, regions_before_after


def test_latency_chart_labels_axes_and_names_a_round_without_an_engine(tmp_path: Path) -> None:
    pts = [RoundPoint("base", 7.5, 7.5), RoundPoint("round 1", 3.2, 3.2), RoundPoint("round 2", None, 3.2)]
    files = latency_by_round(pts, "SIMULATED figures (mock target)", tmp_path / "latency.svg")
    assert [f.name for f in files] == ["latency.svg", "latency.png"]
    svg = (tmp_path / "latency.svg").read_text()
    assert "autoloop round" in svg and "end-to-end latency, p50 (ms)" in svg
    assert "no engine built in round 2" in svg and "SIMULATED" in svg
    assert "7.500" in svg and "3.200" in svg
    assert latency_by_round(pts, "SIMULATED figures (mock target)", tmp_path / "again.svg")
    assert (tmp_path / "again.svg").read_text() == svg  # the same report draws the same file


def test_region_chart_with_and_without_plugins(tmp_path: Path) -> None:
    rows = [("DwConv3x3s1C256", 0.8, 0.3), ("LiteMLAC384", 1.2, None)]
    regions_before_after(rows, "measured on the torch engine", tmp_path / "regions.svg")
    svg = (tmp_path / "regions.svg").read_text()
    assert "DwConv3x3s1C256" in svg and "time per inference, all sites of the region (ms)" in svg
    assert "0.300" in svg and "1.200" in svg and "measured on the torch engine" in svg
    assert (tmp_path / "regions.png").stat().st_size > 1000
    regions_before_after([], "SIMULATED", tmp_path / "none.svg")
    assert "no plugin in the final engine" in (tmp_path / "none.svg").read_text()
