"""Simulated engines run plugins from the simulated builder (the mock's own flow, through the CLI)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.stages.carved_fixture import ARCH, PLUGIN
from tests.stages.conftest import build_mock_plugin
from ytk_core.bundle import EngineBundle
from ytk_core.plugins import BackendManager
from ytk_core.stages.numerics import compare, tolerance_for

SIMULATED_ENGINES = [b.name for b in BackendManager().for_role("engine") if b.info.simulated]


@pytest.mark.parametrize("name", SIMULATED_ENGINES)
def test_simulated_engines_run_mock_plugins(ytk, fixture_dir, name):
    so = build_mock_plugin(ytk, fixture_dir)
    out = fixture_dir / "plugged.tgz"
    d = fixture_dir / "carved"
    r = ytk("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", d / "model.onnx", "--npz", d / "model.npz",
            "-o", out, "--engine", name, "--iterations", "5", "--json", "--custom-plugin", so)
    assert r.code == 0, r.stderr
    b = EngineBundle.open(out)
    assert [p.name for p in b.manifest.plugins] == [PLUGIN]
    ref = dict(np.load(d / "model.reference.npz"))
    for k, v in ref.items():
        assert compare(name, k, b.outputs().get(k), v, tolerance_for("fp16")).passed
