"""The simulated engine end to end: seeded noise, trtexec-shaped dumps, outputs computed for real."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.stages.carved_fixture import ARCH, PLUGIN, make_fixture
from ytk_backend_mock.builder import describe
from ytk_backend_mock.engine import ENQUEUE_MS, compile_engine, engine_version, profile_engine
from ytk_backend_mock.kernelgen import make_meta
from ytk_hookspecs import StageContext
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import (ArchSpec, CandidatesFile, CompileRequest, PluginArtifact, ProfileRequest)


@pytest.fixture(scope="module")
def fx(tmp_path_factory):  # type: ignore[no-untyped-def]
    return make_fixture(tmp_path_factory.mktemp("engine") / "fx")


def _run(d: Path, work: Path, plugins=(), iterations=10, precision="fp16"):  # type: ignore[no-untyped-def]
    req = CompileRequest(onnx=d / "model.onnx", npz=d / "model.npz", arch=ARCH, precision=precision,
                         plugins=list(plugins), workdir=work)
    cres = compile_engine(req, StageContext())
    return cres, profile_engine(ProfileRequest(compile=cres, request=req, iterations=iterations), StageContext())


def _artifact(fx: Path, fraction: float = 0.7) -> PluginArtifact:
    cand = CandidatesFile.read(fx / "carved" / "candidates.json").candidates[0]
    meta = make_meta(cand, "fp16", 87, fraction)
    d = describe(KernelSource(header="", source="", meta=meta), ArchSpec.parse(ARCH), "0")
    return PluginArtifact(path=Path(f"/x/{PLUGIN}.so"), sha256="0" * 64, description=d)


def test_everything_is_labelled_simulated_and_dumps_look_like_trtexec(fx, tmp_path):
    cres, pres = _run(fx / "base", tmp_path)
    assert cres.simulated and pres.simulated and pres.device == "DRIVE AGX Orin (simulated)"
    assert "simulated" in cres.backend_version
    info = json.loads(Path(cres.layer_info).read_text())
    assert set(info) == {"Layers", "Bindings"} and info["Bindings"] == ["x", "y", "z"]
    assert {"Name", "LayerType", "Inputs", "Outputs", "Metadata"} <= set(info["Layers"][0])
    raw = json.loads(Path(pres.raw_profile).read_text())
    assert raw[0] == {"count": 10}
    assert {"name", "timeMs", "averageMs", "medianMs", "percentage"} <= set(raw[1])
    assert sum(r["percentage"] for r in raw[1:]) == pytest.approx(100, abs=0.01)
    assert json.loads(Path(cres.engine).read_text())["simulated"] is True


@pytest.mark.parametrize("arch, version", [("arm64-sm87-dos6010-cu114-trt86", "8.6 (simulated)"),
                                           ("x86_64-sm90-linux-cu130-trt10",
                                            "10 (simulated with the TensorRT 8.6 cost model)")])
def test_the_engine_names_the_targets_tensorrt_and_its_cost_model(arch, version):  # type: ignore[no-untyped-def]
    """A trt10 target is not said to run TensorRT 8.6: the version is the target's, the cost model named."""
    assert engine_version(ArchSpec.parse(arch)) == version


def test_noise_is_seeded(fx, tmp_path, monkeypatch):
    _, a = _run(fx / "base", tmp_path / "a")
    _, b = _run(fx / "base", tmp_path / "b")
    assert a.iterations_ms == b.iterations_ms and [x.median_ms for x in a.layers] == [x.median_ms for x in b.layers]
    assert len(set(a.iterations_ms)) > 1, "iterations differ run to run"
    monkeypatch.setenv("YTK_MOCK_SEED", "7")
    _, c = _run(fx / "base", tmp_path / "c")
    assert c.iterations_ms != a.iterations_ms
    assert np.median(c.iterations_ms) == pytest.approx(np.median(a.iterations_ms), rel=0.05)


def test_layer_medians_add_up_to_the_latency(fx, tmp_path):
    _, p = _run(fx / "base", tmp_path, iterations=21)
    assert len(p.iterations_ms) == 21
    total = sum(x.median_ms for x in p.layers) + ENQUEUE_MS
    assert total == pytest.approx(np.median(p.iterations_ms), rel=0.05)
    assert all(x.onnx_nodes or x.name.startswith("Reformatting") for x in p.layers)


def test_outputs_are_computed_for_real(fx, tmp_path):
    ref = dict(np.load(fx / "base" / "model.reference.npz"))
    for sub, plugins in (("base", ()), ("carved", (_artifact(fx),))):
        _, p = _run(fx / sub, tmp_path / sub, plugins)
        out = dict(np.load(p.outputs))
        for k, v in ref.items():
            np.testing.assert_allclose(out[k], v, rtol=1e-4, atol=1e-5)


def test_plugin_time_follows_its_declared_bandwidth(fx, tmp_path):
    def plug_ms(frac: float) -> float:
        _, p = _run(fx / "carved", tmp_path / str(frac), (_artifact(fx, frac),))
        return sum(x.median_ms for x in p.layers if x.type == "PluginV2")

    assert plug_ms(0.9) < plug_ms(0.05)


def test_missing_plugin_is_a_stage_error(fx, tmp_path):
    from ytk_hookspecs.errors import StageError

    with pytest.raises(StageError, match=f"needs plugin yasp::{PLUGIN} v1"):
        _run(fx / "carved", tmp_path)
