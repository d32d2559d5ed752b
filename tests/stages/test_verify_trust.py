"""`ytk embedded verify` gives no false green: a reference that cannot vouch for every output fails
with exit 5 and one line naming the outputs; the error percentiles sit beside the max."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests.stages.test_verify_stage import _bundle
from ytk_core.stages.numerics import compare, tolerance_for
from ytk_core.stages.verify import run_verify


@pytest.fixture
def outs():  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(1)
    return {"y": rng.standard_normal((1, 4, 3, 3)).astype(np.float32), "z": rng.standard_normal(5).astype(np.float32)}


def _verify(ytk, tmp_path, reference, *bundles, extra=()):  # type: ignore[no-untyped-def]
    np.savez(tmp_path / "model.reference.npz", **reference)
    r = ytk("embedded", "verify", tmp_path / "model.reference.npz", *bundles, "--no-host", *extra)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    return r


def _error_lines(stderr: str) -> list[str]:
    """The error message's lines (logs come before it on stderr)."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    return [line for line in lines[start:] if line.strip()]


def test_an_empty_reference_fails_naming_what_the_engine_produces(ytk, tmp_path, outs):
    b = _bundle(tmp_path / "base.tgz", outs, [1.0])
    r = _verify(ytk, tmp_path, {}, b)
    assert r.code == 5
    assert "holds no outputs, so nothing was compared (the engine produces y, z)" in r.stderr
    assert "PASS" not in r.stdout and "FAIL: not in the reference" in r.stdout
    r = _verify(ytk, tmp_path, {}, b, extra=("--json",))
    assert r.code == 5
    data = r.json()
    assert data["passed"] is False and len(data["problems"]) == 1
    assert {n["output"]: n["problem"] for n in data["numerics"]} == {"y": "unexpected", "z": "unexpected"}


def test_an_empty_reference_and_an_engine_with_no_outputs_still_fail(ytk, tmp_path):
    b = _bundle(tmp_path / "base.tgz", {}, [1.0])
    r = _verify(ytk, tmp_path, {}, b)
    assert r.code == 5 and "holds no outputs" in r.stderr and "(the engine produces none either)" in r.stderr


def test_a_reference_lacking_an_engine_output_fails_naming_it(ytk, tmp_path, outs):
    b = _bundle(tmp_path / "base.tgz", outs, [1.0])
    r = _verify(ytk, tmp_path, {"y": outs["y"]}, b)
    assert r.code == 5
    (line,) = _error_lines(r.stderr)
    assert "base (simulated): the reference lacks 1 output(s) the engine produces: z" in line
    assert "FAIL: not in the reference" in r.stdout


def test_the_inputs_npz_given_as_the_reference_is_bad_input_not_a_numerics_failure(ytk, tmp_path, outs):
    """model.npz in place of model.reference.npz (the bundle names its inputs' sha256): exit 2 saying so, not
    exit 5 (numerics failed) for outputs that were never the model's."""
    from ytk_hookspecs.models import sha256_file

    inputs = tmp_path / "model.npz"
    np.savez(inputs, x=np.zeros((1, 3, 4, 4), np.float32))
    b = _bundle(tmp_path / "base.tgz", outs, [1.0], npz_sha256=sha256_file(inputs))
    for extra in ((), ("--json",)):
        r = ytk("embedded", "verify", inputs, b, "--no-host", *extra)
        assert r.code == 2, r.stderr
        (line,) = _error_lines(r.stderr)
        assert f"reference {inputs} is the model's inputs" in line and "model.reference.npz" in line


def test_a_reference_output_the_engine_lacks_fails_naming_it(ytk, tmp_path, outs):
    b = _bundle(tmp_path / "base.tgz", {"y": outs["y"]}, [1.0])
    r = _verify(ytk, tmp_path, {**outs, "w": outs["z"]}, b)
    assert r.code == 5
    (line,) = _error_lines(r.stderr)
    assert "base (simulated): the engine does not produce 2 output(s) the reference holds: z, w" in line


def test_shape_and_dtype_mismatches_fail_naming_the_outputs(ytk, tmp_path, outs):
    got = {"y": outs["y"].reshape(4, 9), "z": np.round(outs["z"] * 10).astype(np.int64)}
    b = _bundle(tmp_path / "base.tgz", got, [1.0])
    r = _verify(ytk, tmp_path, outs, b)
    assert r.code == 5
    (line,) = _error_lines(r.stderr)
    assert "base (simulated): shape or dtype differs from the reference for 2 output(s)" in line
    assert "y (shape [4, 9] != reference [1, 4, 3, 3])" in line and "z (dtype int64 != reference float32)" in line


def test_each_case_is_its_own_line_across_bundles(ytk, tmp_path, outs):
    a = _bundle(tmp_path / "a.tgz", {"y": outs["y"]}, [1.0])
    bad = {"y": outs["y"] + 0.05 * np.abs(outs["y"]).max(), "z": outs["z"], "extra": outs["z"]}
    b = _bundle(tmp_path / "b.tgz", bad, [1.0], plugins=["DwConv"])
    r = _verify(ytk, tmp_path, outs, a, b)
    assert r.code == 5
    lines = _error_lines(r.stderr)
    assert len(lines) == 4, r.stderr
    assert "a (simulated): the engine does not produce 1 output(s) the reference holds: z" in lines[0]
    assert "b (simulated): the reference lacks 1 output(s) the engine produces: extra" in lines[1]
    assert "numerics failed for 1 output(s): b (simulated) y (max rel err over tolerance" in lines[2]
    assert "--debug-taps" in lines[3]  # how to find the region that drifts
    # a base engine (no plugin) that drifts has no region to find: no such hint
    b = _bundle(tmp_path / "b.tgz", bad, [1.0])
    r = _verify(ytk, tmp_path, outs, a, b)
    assert r.code == 5 and "--debug-taps" not in r.stderr and len(_error_lines(r.stderr)) == 3


def test_dtype_widths_and_whole_number_floats_are_not_mismatches(tmp_path, outs):
    y = outs["y"]
    assert compare("a", "y", y.astype(np.float16), y, tolerance_for("fp16")).passed
    idx = np.arange(6, dtype=np.int64)
    assert compare("a", "i", idx.astype(np.float32), idx, tolerance_for("fp32")).passed
    res = compare("a", "i", idx + np.float32(0.5), idx, tolerance_for("fp16"))
    assert not res.passed and res.problem == "dtype" and "holding fractions" in res.detail
    res = compare("a", "y", y.astype(np.int32), y, tolerance_for("fp16"))
    assert not res.passed and res.problem == "dtype"


def test_percentiles_tell_one_stray_element_from_spread_error(tmp_path):
    ref = np.linspace(-1.0, 1.0, 10_000).astype(np.float32)
    stray = ref.copy()
    stray[0] += 0.5
    res = compare("a", "y", stray, ref, tolerance_for("fp16"))
    assert res.max_rel_err == pytest.approx(0.5) and res.p99_rel_err == 0.0 and res.p999_rel_err == 0.0
    assert not res.passed, "the pass rule stays on the max"
    spread = ref + np.float32(1e-3)
    res = compare("a", "y", spread, ref, tolerance_for("fp16"))
    assert res.p99_rel_err == pytest.approx(1e-3, rel=1e-2) and res.passed
    assert res.p99_rel_err <= res.p999_rel_err <= res.max_rel_err


def test_percentiles_in_the_table_and_json(ytk, tmp_path, outs):
    b = _bundle(tmp_path / "base.tgz", outs, [1.0])
    r = _verify(ytk, tmp_path, outs, b)
    assert r.code == 0, r.stderr
    assert "p99.9 rel err" in r.stdout and "p99 rel err" in r.stdout
    r = _verify(ytk, tmp_path, outs, b, extra=("--json",))
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["passed"] is True and data["problems"] == []
    for n in data["numerics"]:
        assert n["p99_rel_err"] == 0.0 and n["p999_rel_err"] == 0.0 and n["problem"] == "" and n["dtype"] == "float32"


def test_run_verify_keeps_its_signature_and_failures_name_the_outputs(tmp_path, outs):
    """The autoloop calls run_verify(ref, bundles, no_host=True) and reads passed and failures()."""
    np.savez(tmp_path / "model.reference.npz", y=outs["y"])
    b = _bundle(tmp_path / "base.tgz", outs, [1.0])
    rep = run_verify(tmp_path / "model.reference.npz", [b], no_host=True)
    assert rep.passed is False
    assert [(n.output, n.detail) for n in rep.failures()] == [("z", "not in the reference")]


@pytest.mark.slow
def test_a_reference_of_another_input_size_is_bad_input_not_numerics(ytk, tmp_path):
    """A new user verified a 128x128 bundle against the reference of a 64x64 prepare: exit 5, 'numerics failed',
    where the input was wrong. With the reference's prepare beside it holding other inputs than the bundle
    ran, a bundle none of whose outputs has the reference's shape is now exit 2 naming both."""
    from tests.conftest import REPO
    from tests.helpers import prepare

    model = REPO / "tests" / "data" / "deconv_model.py"
    small, big = tmp_path / "small", tmp_path / "big"
    assert prepare(model, small, size="1x64x64").code == 0
    assert prepare(model, big, size="1x128x128").code == 0
    bundle = tmp_path / "big.tgz"
    r = ytk("embedded", "compile", "-a", "arm64-sm87-dos6010-cu114-trt86", "-p", "fp16", "--onnx",
            big / "model.onnx", "--npz", big / "model.npz", "-o", bundle, "--engine", "mock")
    assert r.code == 0, r.stderr[-1500:]
    r = ytk("embedded", "verify", small / "model.reference.npz", bundle, "--no-host")
    assert r.code == 2, r.stderr[-1500:]
    (line, *_) = _error_lines(r.stderr)
    assert "was computed by a prepare whose inputs" in line and "model.reference.npz of the prepare" in line
    assert ytk("embedded", "verify", big / "model.reference.npz", bundle, "--no-host").code == 0
    # inputs of the same shapes but other values (a new user's prepare with rand * 50): the shapes all agree,
    # and the comparison failed as numerics (exit 5), or passed by chance where the outputs barely move
    other = tmp_path / "other"
    shutil.copytree(big, other)
    with np.load(big / "model.npz") as z:
        np.savez(other / "model.npz", **{k: z[k] * 50 for k in z.files})
    r = ytk("embedded", "verify", other / "model.reference.npz", bundle, "--no-host")
    assert r.code == 2, r.stderr[-1500:]
    (line, *_) = _error_lines(r.stderr)
    assert "was computed by a prepare whose inputs" in line and f"--npz {other / 'model.npz'}" in line
