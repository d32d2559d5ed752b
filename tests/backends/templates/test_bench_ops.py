"""The product benchmark's per-op summary (benchmarks/kernels_templates.py): an op's fraction of the
floor is its summed floor over its summed kernel time, every site counted."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import kernels_templates as kt  # noqa: E402


def test_ops_gather_the_names_of_one_op() -> None:
    rows = [{"region": n, "kernel_ms": [0.01], "torch_ms": [0.02], "floor_ms": [0.005]}
            for n in ("DwConv3x3s1Dyn", "DwConv3x3s1C256", "DwConv5x5s1C768", "LiteMLAC384", "DwConv3x3s2C64",
                      "Conv1x1s1C16to64", "Conv1x1s1Dyn", "Conv1x1s1HardSwishDyn", "GConv1x1s1G24C384to384")]
    assert {o["op"]: o["sites"] for o in kt.by_op(rows)} == {
        "DwConv3x3s1": 2, "DwConv5x5s1": 1, "LiteMLA": 1, "DwConv3x3s2": 1, "Conv1x1s1": 2, "Conv1x1s1HardSwish": 1,
        "GConv1x1s1": 1}


def test_op_table_sums_sites_and_skips_failed_regions() -> None:
    rows = [
        {"region": "DwConv5x5s1C384", "kernel_ms": [0.020] * 3, "torch_ms": [0.060] * 3, "floor_ms": [0.012] * 3},
        {"region": "DwConv5x5s1C768", "kernel_ms": [0.013] * 4, "torch_ms": [0.039] * 4, "floor_ms": [0.006] * 4},
        {"region": "DwConv3x3s1Dyn", "kernel_ms": [0.040, 0.010], "torch_ms": [0.2, 0.05], "floor_ms": [0.03, 0.008]},
        {"region": "LiteMLAC768", "kernel_ms": None, "status": "failed", "message": "no gpu"},
    ]
    lines = kt.op_table(rows).splitlines()
    by = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in lines[2:]}
    assert set(by) == {"DwConv5x5s1", "DwConv3x3s1"}
    # 5x5: 7 sites; kernel 3 * 20 + 4 * 13 = 112 us, floor 3 * 12 + 4 * 6 = 60 us -> 54%, torch 336 us -> 3.0x
    assert by["DwConv5x5s1"] == ["7", "112.0", "336.0", "60.0", "54%", "3.0x"]
    # 3x3: floor 38 / kernel 50 us -> 76% (not the mean of the sites' 75% and 80%)
    assert by["DwConv3x3s1"] == ["2", "50.0", "250.0", "38.0", "76%", "5.0x"]


def test_ops_json_matches_the_table() -> None:
    rows = [{"region": "DwConv5x5s1C768", "kernel_ms": [0.013] * 4, "torch_ms": [0.039] * 4, "floor_ms": [0.006] * 4}]
    (o,) = kt.by_op(rows)
    assert o["op"] == "DwConv5x5s1" and o["sites"] == 4
    assert abs(o["fraction_of_floor"] - 0.006 / 0.013) < 1e-12 and abs(o["x_torch"] - 3.0) < 1e-12  # type: ignore[operator]
    assert "| DwConv5x5s1 | 4 | 52.0 | 156.0 | 24.0 | 46% | 3.0x |" in kt.op_table(rows)
