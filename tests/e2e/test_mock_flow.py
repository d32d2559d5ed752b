"""The spec's flow, steps 1 and 3-7, through the CLI on a small EfficientViT-B1 with the mock backends.

Step 2 (propose) joins with its own issue; here the six selectors of the spec are given by hand.
Everything runs in one process (as `ytk` would, command after command) to keep CI fast.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.helpers import SPEC_SIX
from ytk_core.bundle import EngineBundle
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import CandidatesFile, KernelReport, PluginsFile
from ytk_hookspecs.plugin_info import read_plugin_description

ARCH = "arm64-sm87-dos6010-cu114-trt86"
MOCK = ("--engine", "mock")
NAMES = [s.split("::", 1)[1].split("=", 1)[0] for s in SPEC_SIX]

pytestmark = pytest.mark.slow


def test_spec_flow_on_the_mock_target(ytk, tmp_path, monkeypatch, evit_plain, evit_carved):
    monkeypatch.setenv("YTK_EXAMPLE_SIZE", "1x64x96")
    monkeypatch.setenv("YTK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    base, gaia = tmp_path / "base", tmp_path / "gaia"

    # Step 1: baseline. The prepare itself is the shared session fixture's (`ytk embedded prepare` through
    # the CLI, same size), copied here: every export costs ~20 s on CI's two cores.
    shutil.copytree(evit_plain[0], base)
    assert (base / "fx_nodes.json").is_file() and (base / "prepare.json").is_file()
    r = ytk("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", base / "model.onnx", "--npz",
            base / "model.npz", "-o", base / "base.tgz", *MOCK)
    assert r.code == 0, r.stderr
    assert "SIMULATED" in r.stdout
    base_bundle = EngineBundle.open(base / "base.tgz")
    assert base_bundle.manifest.simulated and base_bundle.manifest.label == "base"
    assert any(" + " in lay.name for lay in base_bundle.profile.layers), "TensorRT-style fused layer names"

    # Step 3: carve the six regions (the shared fixture ran prepare with exactly the spec's six selectors)
    shutil.copytree(evit_carved[0], gaia)
    assert "carve: 25 custom-op node(s)" in evit_carved[1].stdout
    plugins = PluginsFile.read(gaia / "plugins.json")
    assert sorted(p.name for p in plugins.plugins) == sorted(NAMES)
    cands = {c.name: c for c in CandidatesFile.read(gaia / "candidates.json").candidates}

    # Step 4: one kernelgen compile per candidate (refused first without deployment_target)
    pt2 = {n: gaia / cands[n].files.pt2 for n in NAMES}  # type: ignore[operator]
    r = ytk("kernelgen", "compile", "-r", pt2[NAMES[0]], "-g", "Orin", "-o", gaia / "sources" / "x.py",
            "--kernelgen", "mock")
    assert r.code != 0 and "deployment_target=tensorrt" in r.stderr
    for n in NAMES:
        src = gaia / "sources" / f"{n}.module_source.py"
        r = ytk("kernelgen", "compile", "-r", pt2[n], "-g", "Orin", "--config", "deployment_target=tensorrt",
                "-o", src, "--kernelgen", "mock", "--json")
        assert r.code == 0, f"{n}: {r.stderr}"
        data = r.json()
        assert data["status"] == "done" and data["contract"]["ok"], data
        meta = KernelSource.read(src).meta
        assert len(meta.inputs) == len(cands[n].input_roles), "arity includes lifted weights"
        assert KernelReport.read(data["report"]).simulated

    # Step 5: build the plugins, always with --plugin-name
    lines = []
    for n in NAMES:
        src = gaia / "sources" / f"{n}.module_source.py"
        before = src.read_bytes()
        r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", n, "-s", src, "-o",
                gaia / "plugins" / f"{n}.so", "--builder", "mock")
        assert r.code == 0, f"{n}: {r.stderr}"
        assert src.read_bytes() == before
        m = re.search(r"^--custom-plugin (\S+)$", r.stdout, re.M)
        assert m, r.stdout
        lines.append(m.group(1))
        assert read_plugin_description(m.group(1)).name == n

    # Step 6: a missing plugin is caught before building; then the full compile
    args = ["embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", gaia / "model.onnx", "--npz",
            gaia / "model.npz", "-o", gaia / "gaia.tgz", *MOCK]
    r = ytk(*args, *[x for p in lines[1:] for x in ("--custom-plugin", p)])
    assert r.code != 0 and f"plugin yasp::{NAMES[0]} v1" in r.stderr and "nothing was compiled" in r.stderr
    assert not (gaia / "gaia.tgz").exists()
    r = ytk(*args, *[x for p in lines for x in ("--custom-plugin", p)])
    assert r.code == 0, r.stderr
    assert "plugins  6 resolved" in r.stdout
    gaia_bundle = EngineBundle.open(gaia / "gaia.tgz")
    assert sorted(p.name for p in gaia_bundle.manifest.plugins) == sorted(NAMES)
    plugin_layers = [lay for lay in gaia_bundle.profile.layers if lay.type == "PluginV2"]
    assert len(plugin_layers) == sum(p.sites for p in plugins.plugins)

    # Step 7: measure
    r = ytk("embedded", "verify", base / "model.reference.npz", base / "base.tgz", gaia / "gaia.tgz",
            "--host-iterations", "2")
    assert r.code == 0, r.stdout + r.stderr
    for col in ("Implementation", "Iterations", "Min", "Mean", "p50", "p95", "p99", "Max"):
        assert col in r.stdout
    assert "torch host (cpu)" in r.stdout and "base (simulated)" in r.stdout and "gaia (simulated)" in r.stdout
    assert "FAIL" not in r.stdout and r.stdout.count("PASS") == 6
    r = ytk("embedded", "verify", base / "model.reference.npz", base / "base.tgz", gaia / "gaia.tgz", "--no-host",
            "--json")
    assert r.code == 0
    rep = json.loads(r.stdout)
    rows = {row["label"]: row for row in rep["rows"]}
    assert rows["gaia"]["p50_ms"] < rows["base"]["p50_ms"], "the plugged engine is faster in the simulation"
    assert rep["speedups"][0]["speedup"] > 1 and rep["speedups"][0]["simulated"] is True
    assert rep["passed"] is True
