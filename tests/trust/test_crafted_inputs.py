"""Issue 29, item 5: crafted npz inputs and engine bundles are one clear line and exit 2, never a
traceback. A bundle's members are hash-checked against its manifest; these ones pass that check
(the manifest is rewritten to match) and are wrong in content."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import numpy as np
import pytest

from tests.helpers import ytk_inproc
from tests.stages.carved_fixture import ARCH, make_fixture
from tests.trust.test_no_traceback import one_line_error

MOCK = {"YTK_ENGINE": "mock", "YTK_KERNELGEN": "mock", "YTK_BUILDER": "mock"}


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    d = make_fixture(tmp_path_factory.mktemp("fx") / "fx")
    r = ytk_inproc("embedded", "compile", "-a", ARCH, "--onnx", d / "base" / "model.onnx", "--npz",
                   d / "base" / "model.npz", "-o", d / "base.tgz", "--iterations", "2", "--warmup", "0", **MOCK)
    assert r.code == 0, r.stderr
    return d


def compile_with(fx, npz):
    return ytk_inproc("embedded", "compile", "-a", ARCH, "--onnx", fx / "base" / "model.onnx", "--npz", npz,
                      "-o", npz.parent / "out.tgz", "--iterations", "2", "--warmup", "0", **MOCK)


def warnings_ignored():  # zipfile warns about the duplicate name it is told to write
    import contextlib
    import warnings

    @contextlib.contextmanager
    def cm():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield

    return cm()


def _arrays(fx):
    with np.load(fx / "base" / "model.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("kind, says", [
    ("extra_key", "no input"),
    ("flipped_byte", "not a readable .npz"),
    ("object_array", "object array"),
    ("int64", "int64"),
    ("wrong_shape", "shape"),
    ("plain_text", "not an .npz (a zip archive of .npy arrays)"),  # was "it holds an object array"
    ("twice", "appear twice in it"),  # numpy kept the last copy without a word
    ("twice_by_suffix", "appear twice in it"),  # "x" and "x.npy" are both x to numpy
    ("raw_member", "are no .npy arrays"),  # came back as bytes: an internal error
])
def test_crafted_npz_is_usage_error(fx, tmp_path, kind, says):
    a = _arrays(fx)
    npz = tmp_path / "x.npz"
    if kind == "extra_key":
        np.savez(npz, **a, junk=np.zeros(3, np.float32))
    elif kind == "flipped_byte":
        np.savez(npz, **a)
        b = bytearray(npz.read_bytes())
        b[len(b) // 2] ^= 0xFF
        npz.write_bytes(bytes(b))
    elif kind == "object_array":
        np.savez(npz, **{k: np.array([object()] * 2, dtype=object) for k in a})
    elif kind == "int64":
        np.savez(npz, **{k: v.astype(np.int64) for k, v in a.items()})
    elif kind == "plain_text":
        npz.write_text("these are not the inputs\n")
    elif kind in ("twice_by_suffix", "raw_member"):
        import zipfile

        np.savez(npz, **a)
        with zipfile.ZipFile(npz, "a") as z:
            k = next(iter(a))
            z.writestr(k if kind == "twice_by_suffix" else "extra.bin", b"not an array")
    elif kind == "twice":
        import zipfile

        np.savez(npz, **a)
        with zipfile.ZipFile(npz, "a") as z, warnings_ignored():
            k = next(iter(a))
            z.writestr(f"{k}.npy", z.read(f"{k}.npy"))
    else:
        np.savez(npz, **{k: v[..., :1] for k, v in a.items()})
    line = one_line_error(compile_with(fx, npz), 2)
    assert says in line, line


def _recraft(src, dst, replace: dict[str, bytes]):
    """Copy bundle ``src`` with members replaced, and a manifest whose hashes match the new members."""
    with tarfile.open(src, "r:gz") as tf:
        members = {m.name: tf.extractfile(m).read() for m in tf}
    members.update(replace)
    man = json.loads(members["manifest.json"])
    for name in list(man["members"]):
        man["members"][name] = hashlib.sha256(members[name]).hexdigest()
    members["manifest.json"] = json.dumps(man).encode()
    with tarfile.open(dst, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return dst


def _object_npz() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, out=np.array([object()], dtype=object))
    return buf.getvalue()


def _crafted(fx, tmp_path, kind):
    src = fx / "base.tgz"
    if kind == "object_outputs":
        with tarfile.open(src, "r:gz") as tf:
            outs = [m.name for m in tf if m.name.endswith(".npz")]
        return _recraft(src, tmp_path / "b.tgz", {outs[0]: _object_npz()})
    if kind == "layers_nope":
        with tarfile.open(src, "r:gz") as tf:
            prof = json.loads(tf.extractfile("profile.json").read())
        prof["layers"] = "nope"
        return _recraft(src, tmp_path / "b.tgz", {"profile.json": json.dumps(prof).encode()})
    if kind == "profile_not_utf8":
        return _recraft(src, tmp_path / "b.tgz", {"profile.json": b"\xff\xfe{"})
    if kind.startswith("latency_"):  # a forged benchmark: verify printed "-0.73x", NaN (invalid JSON), or died
        with tarfile.open(src, "r:gz") as tf:
            bench = json.loads(tf.extractfile("benchmark.json").read())
        value = {"latency_negative": -1.0, "latency_zero": 0.0, "latency_nan": float("nan"),
                 "latency_inf": float("inf")}[kind]
        bench["iterations_ms"] = [value] * len(bench["iterations_ms"])
        return _recraft(src, tmp_path / "b.tgz", {"benchmark.json": json.dumps(bench).encode()})
    if kind == "layer_nan":
        with tarfile.open(src, "r:gz") as tf:
            prof = json.loads(tf.extractfile("profile.json").read())
        prof["layers"][0]["median_ms"] = float("nan")
        return _recraft(src, tmp_path / "b.tgz", {"profile.json": json.dumps(prof).encode()})
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["object_outputs", "layers_nope", "profile_not_utf8", "latency_negative",
                                  "latency_zero", "latency_nan", "latency_inf", "layer_nan"])
def test_crafted_bundle_in_verify(fx, tmp_path, kind):
    b = _crafted(fx, tmp_path, kind)
    r = ytk_inproc("embedded", "verify", fx / "base" / "model.reference.npz", b, "--no-host", **MOCK)
    one_line_error(r, 2)


@pytest.mark.parametrize("kind", ["layers_nope", "profile_not_utf8", "layer_nan"])
def test_crafted_bundle_in_propose(fx, tmp_path, kind):
    """propose reads the bundle (before --fx-nodes, absent here) with its own streaming reader."""
    b = _crafted(fx, tmp_path, kind)
    r = ytk_inproc("embedded", "propose", "--profile", b, "--onnx", fx / "base" / "model.onnx", "--fx-nodes",
                   fx / "base" / "fx_nodes.json", **MOCK)
    one_line_error(r, 2)


def test_an_output_that_is_a_fifo_is_refused_not_replaced(fx, tmp_path):
    """-o naming a device or FIFO would be replaced by a regular file (as root: /dev/null): exit 2, untouched."""
    import os
    import stat

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    r = ytk_inproc("embedded", "compile", "-a", ARCH, "--onnx", fx / "base" / "model.onnx", "--npz",
                   fx / "base" / "model.npz", "-o", fifo, "--iterations", "2", "--warmup", "0", **MOCK)
    assert "not a regular file" in one_line_error(r, 2)
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_the_atomic_writers_never_replace_a_fifo(tmp_path):
    import os
    import stat

    from ytk_hookspecs.models import ArtifactError, write_text_atomic

    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    with pytest.raises(ArtifactError, match="not a regular file"):
        write_text_atomic(fifo, "{}")
    assert stat.S_ISFIFO(fifo.stat().st_mode) and [p.name for p in tmp_path.iterdir()] == ["x.json"]


@pytest.mark.parametrize("flag, value, says", [("--warmup", "-1", "--warmup -1: must be 0 or more"),
                                               ("--warmup", "-20", "--warmup -20: must be 0 or more"),
                                               ("--iterations", "0", "--iterations 0: must be at least 1")])
def test_counts_out_of_range_are_usage_errors(fx, tmp_path, flag, value, says):
    """A negative --warmup was blamed on the backend (exit 3, 'a bug in that backend')."""
    args = {"--iterations": "2", "--warmup": "0", flag: value}
    r = ytk_inproc("embedded", "compile", "-a", ARCH, "--onnx", fx / "base" / "model.onnx", "--npz",
                   fx / "base" / "model.npz", "-o", tmp_path / "o.tgz", *[a for kv in args.items() for a in kv], **MOCK)
    assert says in one_line_error(r, 2)
