"""The product benchmark's per-family summary (benchmarks/kernels_templates.py): a family's fraction
of the floor is its summed floor over its summed kernel time, every site counted."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import kernels_templates as kt  # noqa: E402


def test_family_strips_the_channel_suffix_only() -> None:
    assert kt.family("DwConv3x3s1Dyn") == "DwConv3x3s1"
    assert kt.family("DwConv5x5s1C768") == "DwConv5x5s1"
    assert kt.family("LiteMLAC384") == "LiteMLA"
    assert kt.family("DwConv3x3s2") == "DwConv3x3s2"
    assert kt.family("Conv1x1s1C16to64") == kt.family("Conv1x1s1Dyn") == "Conv1x1s1"
    assert kt.family("Conv1x1s1HardSwishDyn") == "Conv1x1s1HardSwish"


def test_family_table_sums_sites_and_skips_failed_regions() -> None:
    rows = [
        {"region": "DwConv5x5s1C384", "kernel_ms": [0.020] * 3, "torch_ms": [0.060] * 3, "floor_ms": [0.012] * 3},
        {"region": "DwConv5x5s1C768", "kernel_ms": [0.013] * 4, "torch_ms": [0.039] * 4, "floor_ms": [0.006] * 4},
        {"region": "DwConv3x3s1Dyn", "kernel_ms": [0.040, 0.010], "torch_ms": [0.2, 0.05], "floor_ms": [0.03, 0.008]},
        {"region": "LiteMLAC768", "kernel_ms": None, "status": "failed", "message": "no gpu"},
    ]
    lines = kt.family_table(rows).splitlines()
    by = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in lines[2:]}
    assert set(by) == {"DwConv5x5s1", "DwConv3x3s1"}
    # 5x5: 7 sites; kernel 3 * 20 + 4 * 13 = 112 us, floor 3 * 12 + 4 * 6 = 60 us -> 54%, torch 336 us -> 3.0x
    assert by["DwConv5x5s1"] == ["7", "112.0", "336.0", "60.0", "54%", "3.0x"]
    # 3x3: floor 38 / kernel 50 us -> 76% (not the mean of the sites' 75% and 80%)
    assert by["DwConv3x3s1"] == ["2", "50.0", "250.0", "38.0", "76%", "5.0x"]


def test_families_json_matches_the_table() -> None:
    rows = [{"region": "DwConv5x5s1C768", "kernel_ms": [0.013] * 4, "torch_ms": [0.039] * 4, "floor_ms": [0.006] * 4}]
    (f,) = kt.families(rows)
    assert f["family"] == "DwConv5x5s1" and f["sites"] == 4
    assert abs(f["fraction_of_floor"] - 0.006 / 0.013) < 1e-12 and abs(f["x_torch"] - 3.0) < 1e-12
    assert "| DwConv5x5s1 | 4 | 52.0 | 156.0 | 24.0 | 46% | 3.0x |" in kt.family_table(rows)
