"""Stage-level conformance: the roles' installed backends, each judged where it can run.

A backend that cannot run on this machine (no GPU, no toolchain) is skipped with its own reason,
so CI exercises the mock and a GPU machine exercises torch / templates / tensorrt with the same
tests.
"""

from __future__ import annotations

import pytest

from tests.stages.carved_fixture import ARCH, make_fixture
from ytk_core.plugins import BackendManager
from ytk_hookspecs.models import ArchSpec

#: Targets a backend is tried for, first available wins: the worked example's Orin, then this host.
TARGETS = (ARCH, "x86_64-sm90-linux-cu130-trt10", "x86_64-sm89-linux-cu124-trt10", "x86_64-sm86-linux-cu124-trt10")

_MGR = BackendManager()


def backends_for(role: str) -> list[str]:
    return [b.name for b in _MGR.for_role(role)]


def target_for(name: str) -> str:
    """The first target ``name`` can serve here; skips the test (with the backend's reason) if none."""
    b = _MGR.get(name)
    assert b is not None
    reasons = []
    for t in TARGETS:
        av = b.availability(ArchSpec.parse(t))
        if av.available:
            return t
        reasons.append(av.reason)
    pytest.skip(f"backend {name} cannot run here: {reasons[0]}")


def gpu_for(arch: str) -> str:
    """The ``-g`` GPU for ``arch``: Orin for the Orin target, else the GPU this host has (a scoring
    generator such as templates refuses kernels for a GPU it cannot run on)."""
    if ArchSpec.parse(arch).sm == 87:
        return "Orin"
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return "H200"


def is_simulated(name: str) -> bool:
    b = _MGR.get(name)
    return bool(b and b.info.simulated)


@pytest.fixture
def fixture_dir(tmp_path):  # type: ignore[no-untyped-def]
    return make_fixture(tmp_path / "fx")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("YTK_CACHE_DIR", str(tmp_path / "cache"))
