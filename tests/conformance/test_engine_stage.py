"""Engine conformance: every engine backend builds a bundle that is honest, complete and correct."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.conformance.conftest import backends_for, is_simulated, target_for
from tests.stages.carved_fixture import PLUGIN
from tests.stages.conftest import build_mock_plugin
from ytk_core.bundle import EngineBundle
from ytk_core.stages.numerics import compare, tolerance_for


def _compile(ytk, d, out, arch, name, precision="fp16", plugins=()):  # type: ignore[no-untyped-def]
    args = ["embedded", "compile", "-a", arch, "-p", precision, "--onnx", d / "model.onnx", "--npz", d / "model.npz",
            "-o", out, "--engine", name, "--iterations", "5", "--json"]
    for p in plugins:
        args += ["--custom-plugin", p]
    return ytk(*args)


@pytest.mark.parametrize("name", backends_for("engine"))
@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_bundle_is_honest_complete_and_correct(ytk, fixture_dir, name, precision):
    arch = target_for(name)
    d = fixture_dir / "base"
    out = fixture_dir / f"{name}.tgz"
    r = _compile(ytk, d, out, arch, name, precision)
    assert r.code == 0, r.stderr
    b = EngineBundle.open(out)
    m = b.manifest
    assert m.simulated == is_simulated(name), "a simulated backend must label its figures simulated, a real one not"
    assert m.simulated == b.profile.simulated == b.benchmark.simulated
    assert (m.precision, m.arch, m.engine_backend) == (precision, arch, name)
    it = b.benchmark.iterations_ms
    assert len(it) == 5 and all(t > 0 for t in it)
    layers = b.profile.layers
    assert layers and all(lay.median_ms >= 0 for lay in layers)
    names = {n.name for n in onnx.load(str(d / "model.onnx")).graph.node}
    for lay in layers:
        assert set(lay.onnx_nodes) <= names, f"layer {lay.name} names ONNX nodes that do not exist"
    assert b.profile.total_ms <= 1.5 * float(np.median(it)), "per-layer medians cannot exceed the latency by far"
    ref = dict(np.load(d / "model.reference.npz"))
    outs = b.outputs()
    tol = tolerance_for(precision)
    for k, v in ref.items():
        res = compare(name, k, outs.get(k), v, tol)
        assert res.passed, res


@pytest.mark.parametrize("name", [n for n in backends_for("engine") if is_simulated(n)])
def test_simulated_engines_run_mock_plugins(ytk, fixture_dir, name):
    arch = target_for(name)
    so = build_mock_plugin(ytk, fixture_dir)
    out = fixture_dir / "plugged.tgz"
    r = _compile(ytk, fixture_dir / "carved", out, arch, name, plugins=[so])
    assert r.code == 0, r.stderr
    b = EngineBundle.open(out)
    assert [p.name for p in b.manifest.plugins] == [PLUGIN]
    ref = dict(np.load(fixture_dir / "carved" / "model.reference.npz"))
    for k, v in ref.items():
        assert compare(name, k, b.outputs().get(k), v, tolerance_for("fp16")).passed
