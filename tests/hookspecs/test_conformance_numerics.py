"""The suite's numerics check (ytk_hookspecs.testing.kernels.run_numerics) on the CPU: stand-in kernels that
compute through the launcher ABI's raw pointers, against the suite's own region files."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from tests.trust.standin_kernels import StandIn
from ytk_backend_mock.kernelgen import make_meta
from ytk_hookspecs.testing.kernels import run_numerics
from ytk_hookspecs.testing.regions import REGIONS, write_regions

pytestmark = pytest.mark.slow

CPU = torch.device("cpu")
#: what each region computes, as a kernel of the region would
REGION_FNS = {
    "DwConv3x3C64": lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=64),
    "DwConv5x5s2C96HardSwish": lambda x, w, b: F.hardswish(F.conv2d(x, w, b, stride=2, padding=2, groups=96)),
}


@pytest.fixture(scope="module")
def regions(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The suite's own regions at a size the CPU runs quickly (batch 1, a quarter of the height and width)."""
    def small(shape: tuple[int, ...]) -> tuple[int, ...]:
        return (1, shape[1], shape[2] // 4, shape[3] // 4) if len(shape) == 4 and shape[2] > 8 else shape

    smaller = tuple(dataclasses.replace(r, site_shapes=tuple(tuple(small(s) for s in site) for site in r.site_shapes))
                    for r in REGIONS if r.name in REGION_FNS)
    return {w.candidate.name: w for w in write_regions(tmp_path_factory.mktemp("regions"), regions=smaller)}


@pytest.mark.parametrize("name", list(REGION_FNS))
def test_a_kernel_computing_its_region_passes_every_case(regions, name):
    region = regions[name]
    lib = StandIn(make_meta(region.candidate, "fp16", 90, 0.5), REGION_FNS[name])
    outcomes = run_numerics(lib, region, CPU)
    # each captured site (the depthwise region has two) and one drawn case
    assert [o.label.split("/")[0] for o in outcomes] == [f"site{k}" for k in range(len(region.candidate.sites))] \
        + ["site0"]
    assert all(o.ok for o in outcomes), [o.problems for o in outcomes]
    assert 0 < max(o.budget_used for o in outcomes) <= 1


@pytest.mark.parametrize("fault", ["wrong", "unwritten", "nondeterministic"])
def test_a_wrong_kernel_fails(regions, fault):
    region = regions["DwConv3x3C64"]
    lib = StandIn(make_meta(region.candidate, "fp16", 90, 0.5), REGION_FNS["DwConv3x3C64"], fault=fault)
    outcomes = run_numerics(lib, region, CPU)
    assert not any(o.ok for o in outcomes) and all(o.problems for o in outcomes)


def test_another_regions_kernel_fails(regions):
    """A kernel that ignores the activation after the conv is off by far more than the budget."""
    region = regions["DwConv5x5s2C96HardSwish"]
    lib = StandIn(make_meta(region.candidate, "fp16", 90, 0.5),
                  lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=2, groups=96))
    assert not any(o.ok for o in run_numerics(lib, region, CPU))
