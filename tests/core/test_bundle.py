"""Engine bundles: round trip, and refusal of unsafe or damaged archives."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest

from ytk_core.errors import UsageError
from ytk_core.bundle import (BENCHMARK, ENGINE, MANIFEST, OUTPUTS, PROFILE, BenchmarkRecord, BundleManifest,
                             EngineBundle, LayerProfile, write_bundle)
from ytk_hookspecs.models import ArtifactError, LayerTime


def _manifest():
    return BundleManifest(arch="arm64-sm87-dos6010-cu114-trt86", precision="fp16", engine_backend="mock",
                          engine_version="8.6-sim", device="sim", simulated=True, onnx="model.onnx",
                          onnx_sha256="a" * 64, npz_sha256="b" * 64)


def _write(tmp_path):
    buf = io.BytesIO()
    np.savez(buf, out=np.arange(4, dtype=np.float32))
    prof = LayerProfile(device="sim", simulated=True, iterations=3,
                        layers=[LayerTime(name="/conv/Conv + PWN(/act/HardSwish)", median_ms=1.5,
                                          onnx_nodes=["node_Conv_1", "n0"])])
    bench = BenchmarkRecord(device="sim", simulated=True, warmup=1, iterations_ms=[1.0, 1.1])
    return write_bundle(tmp_path / "b.tgz", _manifest(), {
        ENGINE: b"engine", PROFILE: prof.model_dump_json().encode(), BENCHMARK: bench.model_dump_json().encode(),
        OUTPUTS: buf.getvalue()})


def test_roundtrip(tmp_path):
    b = EngineBundle.open(_write(tmp_path))
    assert b.manifest.simulated and set(b.manifest.members) == {ENGINE, PROFILE, BENCHMARK, OUTPUTS}
    assert b.profile.total_ms == pytest.approx(1.5)
    assert b.benchmark.iterations_ms == [1.0, 1.1]
    np.testing.assert_array_equal(b.outputs()["out"], np.arange(4, dtype=np.float32))


def _evil(tmp_path, add):
    p = tmp_path / "evil.tgz"
    with tarfile.open(p, "w:gz") as tf:
        data = _manifest().model_dump_json().encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        add(tf)
    return p


@pytest.mark.parametrize("kind", ["abs", "dotdot", "symlink", "nested"])
def test_unsafe_members_are_refused(tmp_path, kind):
    def add(tf):
        if kind == "symlink":
            info = tarfile.TarInfo("engine.plan")
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tf.addfile(info)
            return
        name = {"abs": "/tmp/x", "dotdot": "../x", "nested": "a/b"}[kind]
        info = tarfile.TarInfo(name)
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))

    with pytest.raises(ArtifactError, match="refusing member"):
        EngineBundle.open(_evil(tmp_path, add))


def test_oversized_member_is_refused(tmp_path, monkeypatch):
    import ytk_core.bundle as bundle_mod

    p = _write(tmp_path)
    monkeypatch.setattr(bundle_mod, "MAX_MEMBER_BYTES", 3)
    with pytest.raises(ArtifactError, match="over the 3-byte limit"):
        EngineBundle.open(p)


def test_a_text_member_bomb_and_a_total_over_the_limit_are_refused_from_their_headers(tmp_path, monkeypatch):
    """A profile.json that inflates to more than any profile is refused before it is read; so is a bundle
    whose members add up past the total. propose's streaming reader applies the same rules."""
    import ytk_core.bundle as bundle_mod
    from ytk_core.errors import UsageError
    from ytk_core.propose.measurement import _stream_members

    p = _write(tmp_path)
    monkeypatch.setattr(bundle_mod, "MAX_TEXT_MEMBER_BYTES", 20)
    with pytest.raises(ArtifactError, match="member 'manifest.json' is .* over the 20-byte limit.*TEXT_MEMBER"):
        EngineBundle.open(p)
    with pytest.raises(UsageError, match="over the 20-byte limit"):
        _stream_members(p, {"manifest.json", "profile.json"}, lambda _: False)
    monkeypatch.setattr(bundle_mod, "MAX_TEXT_MEMBER_BYTES", 256 << 20)
    size = sum(m.size for m in tarfile.open(p, "r:gz"))
    monkeypatch.setattr(bundle_mod, "MAX_TOTAL_BYTES", size - 1)
    with pytest.raises(ArtifactError, match="add up to more than"):
        EngineBundle.open(p)
    monkeypatch.setattr(bundle_mod, "MAX_TOTAL_BYTES", size)
    EngineBundle.open(p)


@pytest.mark.parametrize("name", ["../x", "a/../x", "/x", "a/b"])
def test_propose_reader_refuses_what_every_reader_refuses(tmp_path, name):
    from ytk_core.errors import UsageError
    from ytk_core.propose.measurement import _stream_members

    def add(tf):
        info = tarfile.TarInfo(name)
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))

    with pytest.raises(UsageError, match="refusing member"):
        _stream_members(_evil(tmp_path, add), {"manifest.json"}, lambda _: False)


def test_truncated_and_tampered(tmp_path):
    p = _write(tmp_path)
    data = p.read_bytes()
    (tmp_path / "t.tgz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError, match="corrupt or truncated"):
        EngineBundle.open(tmp_path / "t.tgz")
    # same manifest, different engine bytes
    src = EngineBundle.open(p)

    def add(tf):
        for name in (ENGINE, PROFILE, BENCHMARK, OUTPUTS):
            blob = b"tampered" if name == ENGINE else src.read_bytes(name)
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tf.addfile(info, io.BytesIO(blob))

    q = tmp_path / "q.tgz"
    with tarfile.open(q, "w:gz") as tf:
        blob = src.read_bytes(MANIFEST)
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(blob)
        tf.addfile(info, io.BytesIO(blob))
        add(tf)
    with pytest.raises(ArtifactError, match="does not match its sha256"):
        EngineBundle.open(q)


def _with_members(tmp_path, members: list[tuple[str, bytes]], name: str = "dup.tgz"):
    p = tmp_path / name
    with tarfile.open(p, "w:gz") as tf:
        for n, data in members:
            info = tarfile.TarInfo(n)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return p


def test_a_member_twice_is_refused_by_every_reader(tmp_path):
    """verify took the last copy of a twice-present profile.json, propose the first: both refuse now."""
    from ytk_core.errors import UsageError
    from ytk_core.propose.measurement import _stream_members

    good = _write(tmp_path)
    with tarfile.open(good, "r:gz") as tf:
        members = [(m.name, tf.extractfile(m).read()) for m in tf]
    prof = next(d for n, d in members if n == PROFILE)
    p = _with_members(tmp_path, [*members, (PROFILE, prof)])
    with pytest.raises(ArtifactError, match="'profile.json' appears twice"):
        EngineBundle.open(p)
    with pytest.raises(UsageError, match="'profile.json' appears twice"):
        _stream_members(p, {MANIFEST, PROFILE}, lambda _: False)


@pytest.mark.parametrize("manifest", [b"[]", b'{"members": []}', b"[" * 100000 + b"]" * 100000])
def test_propose_reader_refuses_a_malformed_manifest_in_one_line(tmp_path, manifest):
    from ytk_core.errors import UsageError
    from ytk_core.propose.measurement import _stream_members

    p = _with_members(tmp_path, [(MANIFEST, manifest)])
    with pytest.raises(UsageError, match="manifest.json is invalid") as e:
        _stream_members(p, {MANIFEST, PROFILE}, lambda _: False)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("value", ["abc", "1e3", "-5", "0", "\u00b2"])
def test_a_size_limit_from_the_environment_that_is_no_number_is_one_line(tmp_path, monkeypatch, value):
    p = _write(tmp_path)
    monkeypatch.setenv("YTK_BUNDLE_MAX_MEMBER_BYTES", value)
    with pytest.raises(UsageError, match="YTK_BUNDLE_MAX_MEMBER_BYTES=.*expected a positive whole number"):
        EngineBundle.open(p)
    monkeypatch.setenv("YTK_BUNDLE_MAX_MEMBER_BYTES", "5")
    with pytest.raises(ArtifactError, match="over the 5-byte limit"):
        EngineBundle.open(p)


def test_a_large_member_waits_on_disk_and_reads_back_whole(tmp_path, monkeypatch):
    import ytk_core.bundle as bundle_mod

    monkeypatch.setattr(bundle_mod, "SPOOL_BYTES", 4)  # every member over 4 bytes goes to a temp file
    b = EngineBundle.open(_write(tmp_path))
    assert b.read_bytes(ENGINE) == b"engine" and b.benchmark.iterations_ms == [1.0, 1.1]
    assert b.extract(ENGINE, tmp_path / "x" / "engine.plan").read_bytes() == b"engine"


def test_a_full_temp_dir_is_a_disk_full_error_not_a_damaged_bundle(tmp_path, monkeypatch):
    import errno

    import ytk_core.bundle as bundle_mod

    p = _write(tmp_path)

    class Full(io.BytesIO):
        def __init__(self, *a, **k):  # type: ignore[no-untyped-def]
            super().__init__()

        def write(self, data):  # type: ignore[no-untyped-def]
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(bundle_mod.tempfile, "SpooledTemporaryFile", Full)
    with pytest.raises(OSError) as e:
        EngineBundle.open(p)
    assert e.value.errno == errno.ENOSPC and not isinstance(e.value, ArtifactError)
