"""`ytk embedded verify`: benchmark rows from bundles, the torch host row, numerics per precision."""

from __future__ import annotations

import io

import numpy as np
import pytest

from ytk_core.bundle import (BENCHMARK, ENGINE, OUTPUTS, PROFILE, BenchmarkRecord, BundleManifest, LayerProfile,
                             write_bundle)
from ytk_core.stages.numerics import compare, tolerance_for
from ytk_hookspecs.models import LayerTime
from ytk_hookspecs.models.base import sha256_file


def _bundle(path, outputs, times, precision="fp16", simulated=True, label=None,  # type: ignore[no-untyped-def]
            alternatives=None, npz_sha256="0" * 64, plugins=()):
    from ytk_core.bundle import BundlePlugin

    buf = io.BytesIO()
    np.savez(buf, **outputs)
    m = BundleManifest(arch="arm64-sm87-dos6010-cu114-trt86", precision=precision, engine_backend="test",
                       engine_version="1", device="dev (simulated)" if simulated else "dev", simulated=simulated,
                       onnx="model.onnx", onnx_sha256="0" * 64, npz_sha256=npz_sha256, label=label or path.stem,
                       plugins=[BundlePlugin(name=n, namespace="yasp", version="1", sha256="0" * 64, file=f"{n}.so",
                                             engine_api="mock-cpu") for n in plugins])
    prof = LayerProfile(device="dev", simulated=simulated, iterations=len(times),
                        layers=[LayerTime(name="/a/Conv + PWN(/a/Relu)", type="CaskConvolution", median_ms=0.7),
                                LayerTime(name="Reformatting CopyNode for Input Tensor 0 to x", median_ms=0.1)])
    bench = BenchmarkRecord(device="dev", simulated=simulated, warmup=1, iterations_ms=list(times),
                            alternatives=alternatives or {})
    return write_bundle(path, m, {ENGINE: b"e", PROFILE: prof.model_dump_json().encode(),
                                  BENCHMARK: bench.model_dump_json().encode(), OUTPUTS: buf.getvalue()})


@pytest.fixture
def ref(tmp_path):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    r = {"y": rng.standard_normal((1, 4, 3, 3)).astype(np.float32), "z": rng.standard_normal(5).astype(np.float32)}
    np.savez(tmp_path / "model.reference.npz", **r)
    return r


def test_rows_percentiles_speedup_and_json(ytk, tmp_path, ref):
    base = _bundle(tmp_path / "base.tgz", ref, [10.0, 11.0, 12.0, 13.0, 14.0])
    gaia = _bundle(tmp_path / "gaia.tgz", ref, [5.0, 5.5, 6.0, 6.5, 100.0])
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", base, gaia, "--no-host", "--json")
    assert r.code == 0, r.stderr
    data = r.json()
    rows = {row["label"]: row for row in data["rows"]}
    assert rows["base"]["implementation"] == "base (simulated)"
    b = rows["base"]
    assert (b["iterations"], b["min_ms"], b["mean_ms"], b["p50_ms"], b["max_ms"]) == (5, 10.0, 12.0, 12.0, 14.0)
    assert b["p95_ms"] == pytest.approx(np.percentile([10, 11, 12, 13, 14], 95))
    (s,) = data["speedups"]
    assert s["speedup"] == pytest.approx(2.0) and s["simulated"] is True
    assert data["passed"] is True and len(data["numerics"]) == 4


def test_an_engine_measured_two_ways_gives_the_gain_against_both(ytk, tmp_path, ref):
    # the torch engine in inductor mode times its op-by-op run beside the compiled one (a bundle alternative)
    base = _bundle(tmp_path / "base.tgz", ref, [4.0, 4.0, 4.0], simulated=False,
                   alternatives={"eager (op by op)": [10.0, 10.0, 10.0]})
    plugged = _bundle(tmp_path / "plugged.tgz", ref, [2.0, 2.0, 2.0], simulated=False,
                      alternatives={"eager (op by op)": [3.0, 3.0, 3.0]})
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", base, plugged, "--no-host", "--json")
    assert r.code == 0, r.stderr
    data = r.json()
    kinds = {row["implementation"]: row["kind"] for row in data["rows"]}
    assert kinds == {"base": "bundle", "plugged": "bundle", "base [eager (op by op)]": "bundle-alternative",
                     "plugged [eager (op by op)]": "bundle-alternative"}
    gains = {(s["baseline"], s["implementation"]): s["speedup"] for s in data["speedups"]}
    assert gains == {("base", "plugged"): pytest.approx(2.0),
                     ("base [eager (op by op)]", "plugged"): pytest.approx(5.0)}
    table = ytk("embedded", "verify", tmp_path / "model.reference.npz", base, plugged, "--no-host")
    assert "base [eager (op by op)]" in table.stdout


def test_table_output_names_columns_and_marks_simulated(ytk, tmp_path, ref):
    base = _bundle(tmp_path / "base.tgz", ref, [10.0, 11.0])
    real = _bundle(tmp_path / "trt.tgz", ref, [9.0, 9.5], simulated=False)
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", base, real, "--no-host")
    assert r.code == 0, r.stderr
    for col in ("Implementation", "Iterations", "Min", "Mean", "p50", "p95", "p99", "Max"):
        assert col in r.stdout
    assert "base (simulated)" in r.stdout and "SIMULATED" in r.stdout
    assert "│ trt " in r.stdout, "real bundles are not marked"
    assert "numerics vs torch reference" in r.stdout and "rel<=0.01, cos>=0.999 (fp16)" in r.stdout
    assert "Reformatting CopyNode" in r.stdout, "per-layer table is shown"
    # a simulated Orin against a real machine is no speedup (a new user read "0.01x" as one): said so
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("base (simulated) -> trt:"))
    assert "(not a speedup:" in line and "two machines" in line, line
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", base, base, "--no-host", "--json")
    assert [sp["other_device"] for sp in r.json()["speedups"]] == [""]


def test_numerics_failure_exits_non_zero_with_the_output_named(ytk, tmp_path, ref):
    bad = dict(ref)
    bad["y"] = ref["y"] + 0.05 * np.abs(ref["y"]).max()
    b = _bundle(tmp_path / "bad.tgz", bad, [1.0])
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", b, "--no-host")
    assert r.code == 5
    assert "FAIL" in r.stdout and "bad (simulated) y" in r.stderr
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", b, "--no-host", "--max-rel-err", "0.1",
            "--min-cosine", "0.9")
    assert r.code == 0, "the tolerance can be overridden"
    missing = _bundle(tmp_path / "missing.tgz", {"y": ref["y"]}, [1.0])
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", missing, "--no-host", "--json")
    assert r.code == 5 and "no such output" in r.stdout


def test_tolerance_is_per_precision(tmp_path, ref):
    y = ref["y"]
    noisy = y + 1e-3 * np.abs(y).max() * np.sign(y)
    assert compare("a", "y", noisy, y, tolerance_for("fp16")).passed
    assert not compare("a", "y", noisy, y, tolerance_for("fp32")).passed
    nan = y.copy()
    nan.flat[0] = np.nan
    res = compare("a", "y", nan, y, tolerance_for("fp16"))
    assert not res.passed and "non-finite" in res.detail
    assert not compare("a", "y", -y, y, tolerance_for("fp16")).passed
    assert compare("a", "y", y.reshape(-1), y, tolerance_for("fp16")).detail.startswith("shape")
    zero = np.zeros(3, np.float32)
    assert compare("a", "o", zero, zero, tolerance_for("fp32")).passed


def test_torch_host_row_times_the_prepared_model(ytk, fixture_dir):
    ref = dict(np.load(fixture_dir / "base" / "model.reference.npz"))
    b = _bundle(fixture_dir / "base.tgz", ref, [1.0, 1.1], npz_sha256=sha256_file(fixture_dir / "base" / "model.npz"))
    r = ytk("embedded", "verify", fixture_dir / "base" / "model.reference.npz", b, "--host-iterations", "3", "--json")
    assert r.code == 0, r.stderr
    host = r.json()["rows"][0]
    assert host["implementation"] == "torch host (cpu)" and host["iterations"] == 3 and host["min_ms"] > 0
    assert host["simulated"] is False


def test_bad_inputs_are_clear(ytk, tmp_path, ref):
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", tmp_path / "nope.tgz", "--no-host")
    assert r.code == 2 and "engine bundle not found" in r.stderr
    (tmp_path / "junk.tgz").write_bytes(b"junk")
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", tmp_path / "junk.tgz", "--no-host")
    assert r.code == 2 and "not a readable engine bundle" in r.stderr
    b = _bundle(tmp_path / "b.tgz", ref, [1.0])
    r = ytk("embedded", "verify", tmp_path / "missing.npz", b)
    assert r.code == 2 and "does not exist" in r.stderr
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", b)
    assert r.code == 0 and "torch host row was skipped" in r.stdout


def test_torch_host_row_stops_at_its_time_budget(ytk, fixture_dir):
    ref = dict(np.load(fixture_dir / "base" / "model.reference.npz"))
    b = _bundle(fixture_dir / "base.tgz", ref, [1.0], npz_sha256=sha256_file(fixture_dir / "base" / "model.npz"))
    r = ytk("embedded", "verify", fixture_dir / "base" / "model.reference.npz", b, "--host-iterations", "50",
            "--host-budget", "0", "--json")
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["rows"][0]["iterations"] == 1
    assert "stopped after 1 of 50 iterations" in data["host_note"]


def test_a_moved_model_skips_the_torch_host_row_not_verify(ytk, fixture_dir, tmp_path):
    """model.py moved since prepare: the engine rows and numerics need no model, so verify goes on."""
    import shutil

    prep = tmp_path / "base"
    shutil.copytree(fixture_dir / "base", prep)
    pm = (prep / "prepare.json").read_text()
    import json

    data = json.loads(pm)
    data["model"] = str(tmp_path / "moved-away" / "model.py")
    (prep / "prepare.json").write_text(json.dumps(data))
    ref = dict(np.load(prep / "model.reference.npz"))
    b = _bundle(tmp_path / "base.tgz", ref, [1.0], npz_sha256=sha256_file(prep / "model.npz"))
    r = ytk("embedded", "verify", prep / "model.reference.npz", b, "--json")
    assert r.code == 0, r.stderr
    out = r.json()
    assert "moved-away" in out["host_note"] and "skipped" in out["host_note"]
    assert [row["kind"] for row in out["rows"]] == ["bundle"]


def test_arguments_swapped_say_which_comes_first(ytk, tmp_path, ref):
    b = _bundle(tmp_path / "b.tgz", ref, [1.0])
    r = ytk("embedded", "verify", b, tmp_path / "model.reference.npz", "--no-host")
    assert r.code == 2 and "is an engine bundle: verify takes the model.reference.npz first" in r.stderr


DICT_MODEL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.seg = nn.Conv2d(8, 4, 1)
        self.depth = nn.Conv2d(8, 1, 1)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        return {OUT}


def get_fwd_args():
    torch.manual_seed(1)
    return (torch.randn(1, 3, 16, 16),)
'''


@pytest.mark.parametrize("out, labels", [('{"seg": self.seg(h), "depth": self.depth(h)}', ["['seg']", "['depth']"]),
                                         ("self.seg(h), self.depth(h)", [])])
def test_outputs_a_model_names_are_shown_by_its_names(ytk, tmp_path, out, labels):
    """A model returning a dict: the ONNX outputs are named after the exporter's nodes (conv2d_1), which says
    nothing of which head is which. prepare records the dict's keys and prints them; verify's table and its
    failures name each output by them. A tuple has no names to add."""
    import json

    model = tmp_path / "model.py"
    model.write_text(DICT_MODEL.replace("{OUT}", out))
    p = tmp_path / "p"
    r = ytk("embedded", "prepare", model, "--onnx-out", p / "model.onnx", "--npz-out", p / "model.npz",
            "--reference-out", p / "model.reference.npz")
    assert r.code == 0, r.stderr
    got = json.loads((p / "prepare.json").read_text())["output_labels"]
    assert sorted(got.values()) == sorted(labels)
    with np.load(p / "model.reference.npz") as z:
        ref = {k: z[k] for k in z.files}
    assert set(got) <= set(ref)
    for onnx_name, label in got.items():
        assert f"{label} = {onnx_name}" in r.stdout
    bad = {k: v + (0.5 * np.abs(v).max() if got.get(k) == "['seg']" else 0) for k, v in ref.items()}
    b = _bundle(tmp_path / "b.tgz", bad, [1.0], npz_sha256=sha256_file(p / "model.npz"))
    r = ytk("embedded", "verify", p / "model.reference.npz", b, "--no-host")
    if labels:
        seg, depth = (next(k for k, v in got.items() if v == f"['{key}']") for key in ("seg", "depth"))
        assert r.code == 5 and f"['seg'] ({seg})" in r.stdout and f"b (simulated) ['seg'] ({seg})" in r.stderr
        assert f"['depth'] ({depth})" in r.stdout
    else:
        assert r.code == 0 and "['" not in r.stdout
    js = ytk("embedded", "verify", p / "model.reference.npz", b, "--no-host", "--json")
    assert js.json()["output_labels"] == got
