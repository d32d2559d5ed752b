"""`ytk embedded compile`: plugin checks before any build, the bundle it writes, its summary."""

from __future__ import annotations

import hashlib

import pytest

from tests.stages.carved_fixture import ARCH, PLUGIN
from tests.stages.conftest import build_mock_plugin
from ytk_core.bundle import (BENCHMARK, ENGINE, LAYER_INFO, OUTPUTS, PROFILE, RAW_PROFILE, EngineBundle)


def _compile(ytk, d, out, *plugins, extra=()):  # type: ignore[no-untyped-def]
    args = ["embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", d / "model.onnx", "--npz", d / "model.npz",
            "-o", out, "--engine", "mock", *extra]
    for p in plugins:
        args += ["--custom-plugin", p]
    return ytk(*args)


def test_base_compile_writes_a_complete_labelled_bundle(ytk, fixture_dir):
    d = fixture_dir / "base"
    r = _compile(ytk, d, fixture_dir / "out" / "base.tgz")
    assert r.code == 0, r.stderr
    assert "SIMULATED" in r.stdout and "DRIVE AGX Orin (simulated)" in r.stdout
    b = EngineBundle.open(fixture_dir / "out" / "base.tgz")
    m = b.manifest
    assert (m.arch, m.precision, m.engine_backend, m.simulated, m.label) == (ARCH, "fp16", "mock", True, "base")
    assert m.onnx_sha256 == hashlib.sha256((d / "model.onnx").read_bytes()).hexdigest()
    assert m.npz_sha256 == hashlib.sha256((d / "model.npz").read_bytes()).hexdigest()
    assert {ENGINE, PROFILE, LAYER_INFO, BENCHMARK, OUTPUTS, RAW_PROFILE} <= set(m.members)
    assert len(b.benchmark.iterations_ms) == 10 and b.profile.simulated
    assert set(b.outputs()) == {"y", "z"}
    # every ONNX compute node is covered by exactly one layer
    covered = [n for lay in b.profile.layers for n in lay.onnx_nodes]
    assert sorted(covered) == sorted(["node_Conv_1", "n0", "node_Conv_2", "node_relu", "node_add", "node_Conv_3",
                                      "node_Conv_4", "node_add_1", "node_transpose", "node_mul"])


def test_json_has_manifest_and_totals(ytk, fixture_dir):
    r = _compile(ytk, fixture_dir / "base", fixture_dir / "b.tgz", extra=("--json", "--iterations", "7"))
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["manifest"]["simulated"] is True and data["manifest"]["members"]
    t = data["totals"]
    assert t["iterations"] == 7 and t["min_ms"] <= t["median_ms"] <= t["max_ms"] and t["layers"] > 0


def test_carved_onnx_without_plugins_fails_before_building(ytk, fixture_dir):
    out = fixture_dir / "g.tgz"
    r = _compile(ytk, fixture_dir / "carved", out)
    assert r.code != 0
    assert f"2 nodes ({PLUGIN}_0, {PLUGIN}_1) need plugin yasp::{PLUGIN} v1" in r.stderr
    assert "nothing was compiled" in r.stderr
    assert not out.exists() and not list(fixture_dir.glob(".g.tgz*"))


def test_plugged_compile_resolves_nodes_and_records_plugins(ytk, fixture_dir, mock_plugin):
    out = fixture_dir / "gaia.tgz"
    r = _compile(ytk, fixture_dir / "carved", out, mock_plugin)
    assert r.code == 0, r.stderr
    assert f"{PLUGIN} x2" in r.stdout
    m = EngineBundle.open(out).manifest
    (p,) = m.plugins
    assert (p.name, p.namespace, p.version, p.engine_api) == (PLUGIN, "yasp", "1", "mock-cpu")
    assert p.sha256 == hashlib.sha256(mock_plugin.read_bytes()).hexdigest()
    layers = EngineBundle.open(out).profile.layers
    assert [lay.name for lay in layers if lay.type == "PluginV2"] == [f"{PLUGIN}_0", f"{PLUGIN}_1"]


def test_a_better_kernel_gives_a_faster_simulated_engine(ytk, fixture_dir):
    fast = build_mock_plugin(ytk, fixture_dir, "mock_bandwidth_fraction=0.9", name="DwConv3x3C16")
    fast_copy = fixture_dir / "fast.so"
    fast_copy.write_bytes(fast.read_bytes())
    slow = build_mock_plugin(ytk, fixture_dir, "mock_bandwidth_fraction=0.02", name="DwConv3x3C16")
    times = {}
    for tag, so in (("fast", fast_copy), ("slow", slow)):
        r = _compile(ytk, fixture_dir / "carved", fixture_dir / f"{tag}.tgz", so, extra=("--json",))
        assert r.code == 0, r.stderr
        plug = [lay.median_ms for lay in EngineBundle.open(fixture_dir / f"{tag}.tgz").profile.layers
                if lay.type == "PluginV2"]
        times[tag] = sum(plug)
    # Tensors this small are launch-bound; tests/backends/mock prices big ones in proportion.
    assert times["fast"] < times["slow"]


def _error_lines(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    return [line for line in lines[start:] if line.strip()]


def test_plugin_that_matches_no_node_is_an_error_unless_allowed(ytk, fixture_dir, mock_plugin):
    """A scripted flow must not ship the baseline engine under an optimised name."""
    out = fixture_dir / "b.tgz"
    r = _compile(ytk, fixture_dir / "base", out, mock_plugin)
    assert r.code == 2 and "Traceback" not in r.stderr
    (line,) = _error_lines(r.stderr)
    assert f"--custom-plugin yasp::{PLUGIN} v1 ({mock_plugin}) matches no custom-op node of" in line
    assert "it has no custom-op node at all" in line and "--allow-unused-plugin" in line
    assert not out.exists(), "nothing is compiled"
    r = _compile(ytk, fixture_dir / "base", out, mock_plugin, extra=("--allow-unused-plugin",))
    assert r.code == 0, r.stderr
    assert "matches no custom-op node" in r.stderr and "Traceback" not in r.stderr
    assert out.is_file()


def test_unused_plugin_beside_used_ones_is_named_with_the_nodes_the_onnx_has(ytk, fixture_dir, mock_plugin):
    other = build_mock_plugin(ytk, fixture_dir, name="Unrelated")
    out = fixture_dir / "c.tgz"
    r = _compile(ytk, fixture_dir / "carved", out, mock_plugin, other)
    assert r.code == 2 and "Traceback" not in r.stderr
    (line,) = _error_lines(r.stderr)
    assert f"yasp::Unrelated v1 ({other}) matches no custom-op node" in line
    assert f"its custom-op node(s) are yasp::{PLUGIN} v1: " in line and PLUGIN in line.split("are", 1)[1]
    assert f"({mock_plugin})" not in line, "the plugin that is used is not named"
    r = _compile(ytk, fixture_dir / "carved", out, mock_plugin, other, extra=("--allow-unused-plugin", "--json"))
    assert r.code == 0, r.stderr
    assert any("Unrelated" in w and "matches no custom-op node" in w for w in r.json()["warnings"])


def test_wrong_arity_plugin_is_refused_naming_node_and_plugin(ytk, fixture_dir, tmp_path):
    import yaml

    from ytk_hookspecs.kernel_source import KernelSource

    build_mock_plugin(ytk, fixture_dir)
    src = KernelSource.read(fixture_dir / "carved" / "sources" / f"{PLUGIN}.module_source.py")
    meta = src.meta.model_copy(update={"inputs": src.meta.inputs[:1]})
    bad = KernelSource(header=src.header, source=src.source, meta=meta).write(tmp_path / "bad.module_source.py")
    so = tmp_path / "bad.so"
    r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", PLUGIN, "-s", bad, "-o", so, "--builder", "mock")
    assert r.code == 0, r.stderr  # on its own the source is consistent
    assert yaml.safe_load(src.meta_yaml())["plugin_name"] == PLUGIN
    r = _compile(ytk, fixture_dir / "carved", fixture_dir / "g.tgz", so)
    assert r.code != 0
    assert f"node {PLUGIN}_0" in r.stderr and str(so) in r.stderr and "Error 9" in r.stderr
    assert not (fixture_dir / "g.tgz").exists()


@pytest.mark.parametrize("args, needle", [
    (("-a", "arm64-sm8x-dos6010-cu114-trt86"), "bad SM field 'sm8x'"),
    (("-a", "arm64-sm87-dos6010-cu114"), "expected 5 dash-separated fields"),
    (("-p", "int8"), "fp16 or fp32"),
])
def test_bad_arch_or_precision_names_the_field(ytk, fixture_dir, args, needle):
    d = fixture_dir / "base"
    base = {"-a": ARCH, "-p": "fp16"}
    base.update(dict([args]))
    r = ytk("embedded", "compile", "-a", base["-a"], "-p", base["-p"], "--onnx", d / "model.onnx", "--npz",
            d / "model.npz", "-o", fixture_dir / "x.tgz", "--engine", "mock")
    assert r.code == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_missing_inputs_are_clear_errors(ytk, fixture_dir):
    d = fixture_dir / "base"
    r = ytk("embedded", "compile", "-a", ARCH, "--onnx", d / "nope.onnx", "--npz", d / "model.npz", "-o",
            fixture_dir / "x.tgz", "--engine", "mock")
    assert r.code == 2 and "nope.onnx does not exist" in r.stderr
    (d / "other.npz").write_bytes((d / "model.npz").read_bytes().replace(b"x.npy", b"q.npy"))
    r = ytk("embedded", "compile", "-a", ARCH, "--onnx", d / "model.onnx", "--npz", d / "other.npz", "-o",
            fixture_dir / "x.tgz", "--engine", "mock")
    assert r.code == 2 and "lacks input(s) x" in r.stderr
    r = _compile(ytk, d, fixture_dir / "x.tgz", d / "model.npz")
    assert r.code == 2 and "not an ELF" in r.stderr
    r = _compile(ytk, d, fixture_dir)
    assert r.code == 2 and "is a folder" in r.stderr


@pytest.mark.parametrize("shape", [["in0[0]", "in0[1]", "in0[2] // 0", "in0[3]"], ["in0[0]", "in0[1]", "in0[2] - 99",
                                    "in0[3]"], ["in0[0]", "in0[1]", "in0[99999999999]", "in0[3]"]])
def test_a_plugin_built_without_candidates_is_checked_against_the_region_at_compile(ytk, fixture_dir, tmp_path,
                                                                                    shape):
    """A trust trial built plugins whose output shapes divide by zero, go negative or index past the inputs,
    without --candidates, and compile took them (rc 0): compile now makes build-plugin's region check."""
    from ytk_hookspecs.kernel_source import KernelSource

    build_mock_plugin(ytk, fixture_dir)
    src = KernelSource.read(fixture_dir / "carved" / "sources" / f"{PLUGIN}.module_source.py")
    out0 = src.meta.outputs[0].model_copy(update={"shape": shape})
    meta = src.meta.model_copy(update={"outputs": [out0, *src.meta.outputs[1:]]})
    bad = KernelSource(header=src.header, source=src.source, meta=meta).write(tmp_path / "bad.module_source.py")
    so = tmp_path / "bad.so"
    r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", PLUGIN, "-s", bad, "-o", so, "--builder", "mock")
    assert r.code == 0, r.stderr[-1500:]  # on its own the source is consistent: only its region tells
    r = _compile(ytk, fixture_dir / "carved", tmp_path / "g.tgz", so)
    assert r.code == 2 and f"plugin yasp::{PLUGIN}" in r.stderr and str(so) in r.stderr, r.stderr[-1500:]
    assert not (tmp_path / "g.tgz").exists()
