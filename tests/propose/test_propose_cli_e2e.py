"""The spec's seven steps through the CLI with step 2 from propose itself, then "ask again".

A small EfficientViT-B1 (1x64x96) on the mock backends (a SIMULATED DRIVE AGX Orin). At that size
only the LiteMLA regions are worth a kernel (everything else costs little more than its launch), so
propose runs with thresholds scaled to the model; its emitted run_prepare.sh is executed as a real
script (a subprocess calling the installed ``ytk``), and the rebuilt engine is asked again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import EVIT
from ytk_core.propose import ProposeReport
from ytk_hookspecs.models import PluginsFile

ARCH = "arm64-sm87-dos6010-cu114-trt86"
MOCK = ("--engine", "mock")
SMALL = ("--min-ms", "0.05", "--family-min-ms", "0.1")

pytestmark = pytest.mark.slow


def _ok(r):  # type: ignore[no-untyped-def]
    assert r.code == 0, r.stderr
    return r


def test_seven_steps_with_propose_then_ask_again(ytk, tmp_path, monkeypatch, evit_plain):
    monkeypatch.setenv("YTK_EXAMPLE_SIZE", "1x64x96")
    monkeypatch.setenv("YTK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    base, gaia = tmp_path / "base", tmp_path / "gaia"

    # Step 1: baseline (the shared session fixture ran this prepare through the CLI at the same size)
    shutil.copytree(evit_plain[0], base)
    _ok(ytk("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", base / "model.onnx", "--npz",
            base / "model.npz", "-o", base / "base.tgz", *MOCK))

    # Step 2: ask where to plug, and have the prepare script written
    r = _ok(ytk("embedded", "propose", "--profile", base / "base.tgz", "--onnx", base / "model.onnx",
                "--fx-nodes", base / "fx_nodes.json", "--model", EVIT, "--emit-prepare", "run_prepare.sh", *SMALL,
                "--json"))
    first = ProposeReport.model_validate_json(r.stdout)
    names = [p.name for p in first.candidates]
    assert sorted(names) == ["LiteMLAC384", "LiteMLAC768"], first.summary
    assert abs(first.attributed_ms + first.glue_ms - first.total_ms) < 0.1

    # Step 3: run the emitted script as a user would
    ytk_exe = shutil.which("ytk", path=str(Path(sys.executable).parent))
    env = {**os.environ, "YTK": ytk_exe or "ytk"}
    env.pop("YTK_EXAMPLE_SIZE")  # the script must bring back the size the profile was measured at
    p = subprocess.run(["./run_prepare.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    carve = PluginsFile.read(gaia / "plugins.json")
    assert sorted(e.name for e in carve.plugins) == sorted(names)
    assert [e.selector for e in carve.plugins] == [c.selector for c in first.candidates]

    # Steps 4-6: a kernel and a plugin per candidate, then the rebuilt engine
    sos = []
    for name in names:
        src = gaia / "sources" / f"{name}.module_source.py"
        _ok(ytk("kernelgen", "compile", "-r", gaia / "plugin_candidates" / f"{name}.pt2", "-g", "Orin", "--config",
                "deployment_target=tensorrt", "-o", src, "--kernelgen", "mock"))
        so = gaia / "plugins" / f"{name}.so"
        _ok(ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", name, "-s", src, "-o", so,
                "--builder", "mock"))
        sos += ["--custom-plugin", so]
    _ok(ytk("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", gaia / "model.onnx", "--npz",
            gaia / "model.npz", "-o", gaia / "gaia.tgz", *sos, *MOCK))

    # Step 7: measure
    _ok(ytk("embedded", "verify", base / "model.reference.npz", base / "base.tgz", gaia / "gaia.tgz", "--no-host"))

    # Then ask again: the plugged regions come back with a time to beat, and the glue has shrunk
    r = _ok(ytk("embedded", "propose", "--profile", gaia / "gaia.tgz", "--onnx", gaia / "model.onnx",
                "--fx-nodes", gaia / "fx_nodes.json", *SMALL, "--verbose"))
    for name in names:
        row = next(line for line in r.stdout.splitlines() if line.startswith(f"{name} (already plugged)"))
        assert "ms/site to beat" in row
        assert f"plugin_candidates/{name}.pt2" in r.stdout
    r = _ok(ytk("embedded", "propose", "--profile", gaia / "gaia.tgz", "--onnx", gaia / "model.onnx",
                "--fx-nodes", gaia / "fx_nodes.json", *SMALL, "--json"))
    again = ProposeReport.model_validate_json(r.stdout)
    assert sorted(p.name for p in again.plugged) == sorted(names)
    assert again.glue_ms < first.glue_ms
    assert again.total_ms < first.total_ms
    assert abs(again.attributed_ms + again.glue_ms - again.total_ms) < 0.1
