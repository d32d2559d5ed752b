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

from templates_fixtures import dw_fixture, litemla_fixture, pw_fixture  # noqa: E402

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

# 1x1 convs: name, activation, channels per group in/out (0: dense), [(N, C, H, W, CO) per site]
PW_REGIONS = [
    ("Conv1x1s1C16to64", "hardswish", 0, 0, [(4, 16, 544, 960, 64)]),
    ("Conv1x1s1C32to128", "hardswish", 0, 0, [(4, 32, 272, 480, 128)] * 2),
    ("Conv1x1s1HardSwishDyn", "hardswish", 0, 0,
     [(4, 64, 136, 240, 256)] * 3 + [(4, 128, 68, 120, 512)] * 4 + [(4, 256, 34, 60, 1024)] * 4),
    ("Conv1x1s1Dyn", "none", 0, 0,
     [(4, 16, 544, 960, 16), (4, 64, 272, 480, 32), (4, 128, 272, 480, 32), (4, 128, 136, 240, 64)]
     + [(4, 256, 136, 240, 64)] * 2 + [(4, 256, 68, 120, 128)] * 4 + [(4, 128, 68, 120, 384)] * 3
     + [(4, 512, 68, 120, 128)] * 3 + [(4, 512, 34, 60, 256)] * 5 + [(4, 256, 34, 60, 768)] * 4
     + [(4, 1024, 34, 60, 256)] * 4),
    ("GConv1x1s1Dyn", "none", 16, 16, [(4, 384, 68, 120, 384)] * 3 + [(4, 768, 34, 60, 768)] * 4),
]


def make_region(root: Path, name: str):  # type: ignore[no-untyped-def]
    """(pt2, candidate) of one worked-example region, written under ``root``."""
    for n, k, s, act, _c, shapes in DW_REGIONS:
        if n == name:
            return dw_fixture(root, n, k, s, act, shapes)
    for n, shapes in LITEMLA_REGIONS:
        if n == name:
            return litemla_fixture(root, n, shapes)
    for n, act, gin, gout, shapes in PW_REGIONS:
        if n == name:
            return pw_fixture(root, n, act, shapes, group_in=gin, group_out=gout)
    raise KeyError(name)


def all_names() -> list[str]:
    return [r[0] for r in DW_REGIONS] + [r[0] for r in LITEMLA_REGIONS] + [r[0] for r in PW_REGIONS]
