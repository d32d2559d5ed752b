"""The worked example's regions (EfficientViT-B1, batch 4, 1088x1920) for the kernel benchmarks.

Each entry is a plugin name, its region parameters and its sites' logical NCHW input shapes, as
the spec's carve produces them; the .pt2 and candidates.json entry are made with the same fixture
builders the tests use, so names (and so the generated sources) are identical.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "backends" / "templates"))

from templates_fixtures import dw_fixture, litemla_fixture  # noqa: E402

# name, k, stride, activation, channels (None = dynamic), [(N, C, H, W) per site]
DW_REGIONS = [
    ("DwConv3x3s1C256", 3, 1, "hardswish", 256, [(4, 256, 136, 240)] * 2),
    ("DwConv5x5s1C384", 5, 1, "none", 384, [(4, 384, 68, 120)] * 3),
    ("DwConv5x5s1C768", 5, 1, "none", 768, [(4, 768, 34, 60)] * 4),
    ("DwConv3x3s2C64", 3, 2, "hardswish", 64, [(4, 64, 544, 960)]),
    ("DwConv3x3s2C128", 3, 2, "hardswish", 128, [(4, 128, 272, 480)]),
    ("DwConv3x3s2C256", 3, 2, "hardswish", 256, [(4, 256, 136, 240)]),
    ("DwConv3x3s2C512", 3, 2, "hardswish", 512, [(4, 512, 68, 120)]),
    ("DwConv3x3s1Dyn", 3, 1, "hardswish", None,
     [(4, 16, 544, 960), (4, 128, 272, 480)] + [(4, 512, 68, 120)] * 3 + [(4, 1024, 34, 60)] * 4),
]
# name, [(N, 3C, H, W) per site] (qkv and agg have the same shape)
LITEMLA_REGIONS = [
    ("LiteMLAC384", [(4, 384, 68, 120)] * 3),
    ("LiteMLAC768", [(4, 768, 34, 60)] * 4),
]


def make_region(root: Path, name: str):  # type: ignore[no-untyped-def]
    """(pt2, candidate) of one worked-example region, written under ``root``."""
    for n, k, s, act, _c, shapes in DW_REGIONS:
        if n == name:
            return dw_fixture(root, n, k, s, act, shapes)
    for n, shapes in LITEMLA_REGIONS:
        if n == name:
            return litemla_fixture(root, n, shapes)
    raise KeyError(name)


def all_names() -> list[str]:
    return [r[0] for r in DW_REGIONS] + [r[0] for r in LITEMLA_REGIONS]
