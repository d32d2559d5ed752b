"""The engine bundle: one ``.tgz`` holding everything a compile measured on the target.

Members (fixed names):

==================  ===================================================================
manifest.json       :class:`BundleManifest` (arch, precision, engine backend, simulated?,
                    ONNX hash, plugins with hashes, sha256 of every other member)
engine.plan         the engine as the backend serialised it
profile.json        :class:`LayerProfile`: per-layer median ms, ONNX nodes covered
layer_info.json     the engine's own raw layer dump (e.g. trtexec --exportLayerInfo)
benchmark.json      :class:`BenchmarkRecord`: end-to-end latency per iteration
outputs.npz         engine outputs for model.npz, keyed by ONNX output name
raw_profile.json    optional: the engine's own per-layer timing dump (e.g. trtexec --exportProfile)
build.log           optional
==================  ===================================================================

Reading is safe against absolute paths, ``..``, links, non-files and oversized members, and
every member is checked against the manifest's sha256, so a truncated or edited bundle is a
clear error rather than wrong numbers.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import tarfile
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ytk_hookspecs.models import ArtifactError, LayerTime, Versioned
from ytk_hookspecs.models.base import file_mode, problem, replace_file, sha256_file
from ytk_hookspecs.models.engine import LatencyMs

from . import __version__

MANIFEST = "manifest.json"
ENGINE = "engine.plan"
PROFILE = "profile.json"
LAYER_INFO = "layer_info.json"
BENCHMARK = "benchmark.json"
OUTPUTS = "outputs.npz"
BUILD_LOG = "build.log"
RAW_PROFILE = "raw_profile.json"
#: A bundle compiled from an ONNX prepared with --debug-taps carries its taps and their fp32 reference.
TAPS = "taps.json"
TAPS_REFERENCE = "taps.reference.npz"
KNOWN_MEMBERS = (MANIFEST, ENGINE, PROFILE, LAYER_INFO, BENCHMARK, OUTPUTS, BUILD_LOG, RAW_PROFILE, TAPS,
                 TAPS_REFERENCE)

#: Largest member ytk will read from a bundle (engines of big models run to a few hundred MB); None: the
#: environment's YTK_BUNDLE_MAX_MEMBER_BYTES, else 8 GiB.
MAX_MEMBER_BYTES: int | None = None
#: Largest JSON or log member (a manifest, a profile of tens of thousands of layers is a few MB): a
#: gzip bomb posing as one is refused from its header, before it is inflated. None: the environment's
#: YTK_BUNDLE_MAX_TEXT_MEMBER_BYTES, else 256 MiB.
MAX_TEXT_MEMBER_BYTES: int | None = None
#: Largest sum of a bundle's members; None: the environment's YTK_BUNDLE_MAX_TOTAL_BYTES, else 16 GiB.
MAX_TOTAL_BYTES: int | None = None
#: A member larger than this waits in a temp file once its bundle is opened, not in memory.
SPOOL_BYTES = 32 << 20
_DEFAULT_LIMITS = {"YTK_BUNDLE_MAX_MEMBER_BYTES": 8 << 30, "YTK_BUNDLE_MAX_TEXT_MEMBER_BYTES": 256 << 20,
                   "YTK_BUNDLE_MAX_TOTAL_BYTES": 16 << 30}


def _limit(value: int | None, env: str) -> int:
    """A bundle size limit: set in code (tests), else from ``env``, else its default."""
    if value is not None:
        return value
    from .config import env_bytes

    got = env_bytes(env, minimum=1, default=str(_DEFAULT_LIMITS[env]))
    return _DEFAULT_LIMITS[env] if got is None else got


_BINARY_MEMBERS = (ENGINE, OUTPUTS, TAPS_REFERENCE)
#: gzip level of a bundle. Engines and outputs are weights and activations that barely compress at any
#: level; level 9 (tarfile's default) spent a minute per full-size bundle for a few percent
#: (benchmarks/bundle_write.py).
COMPRESS_LEVEL = 1


class BundlePlugin(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    namespace: str
    version: str
    sha256: str
    file: str
    engine_api: str
    admission: str = Field("unverified", description="the admission gate's verdict when the engine was compiled: "
                           "admitted, or unverified (a simulated engine, or --allow-unverified)")


class BundleManifest(Versioned):
    """``manifest.json``. Schema 2 added ``taps_exposed_as`` and ``taps_note`` (manifests of schema 1 still read,
    with neither said)."""

    SCHEMA_VERSION: ClassVar[int] = 2

    created: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    ytk_version: str = __version__
    arch: str
    precision: str
    engine_backend: str
    engine_version: str
    device: str
    simulated: bool
    onnx: str
    onnx_sha256: str
    npz_sha256: str
    plugins: list[BundlePlugin] = Field(default_factory=list)
    members: dict[str, str] = Field(default_factory=dict, description="member name -> sha256")
    label: str = ""
    taps_exposed_as: str | None = Field(None, description="a bundle compiled with debug taps: how its engine exposed "
                                                          "them (network outputs, or TensorRT debug tensors)")
    taps_note: str = Field("", description="why the taps were exposed that way, when not the engine's first choice")

    @property
    def display_name(self) -> str:
        return self.label or "bundle"


class LayerProfile(Versioned):
    """Per-layer times as measured on the target (``profile.json``)."""

    device: str
    simulated: bool
    iterations: int
    layers: list[LayerTime]

    @property
    def total_ms(self) -> float:
        return float(sum(layer.median_ms for layer in self.layers))


class BenchmarkRecord(Versioned):
    """``benchmark.json``. Schema 2 added ``alternatives`` (the engine's :class:`ProfileResult` ones)."""

    SCHEMA_VERSION: ClassVar[int] = 2

    device: str
    simulated: bool
    warmup: int
    iterations_ms: list[LatencyMs] = Field(min_length=1)
    alternatives: dict[str, list[LatencyMs]] = Field(default_factory=dict)


_WRITE_S = [0.0]
_WRITE_LOCK = threading.Lock()


def bundle_write_seconds() -> float:
    """Wall seconds this process has spent in :func:`write_bundle` so far (what the autoloop reports as its
    bookkeeping, beside the state saves)."""
    with _WRITE_LOCK:
        return _WRITE_S[0]


def write_bundle(out: Path, manifest: BundleManifest, members: dict[str, Path | bytes]) -> Path:
    """Write the bundle atomically; ``members`` maps fixed member names to files or bytes."""
    t0 = time.monotonic()
    try:
        return _write_bundle(out, manifest, members)
    finally:
        with _WRITE_LOCK:
            _WRITE_S[0] += time.monotonic() - t0


def _write_bundle(out: Path, manifest: BundleManifest, members: dict[str, Path | bytes]) -> Path:
    unknown = set(members) - set(KNOWN_MEMBERS)
    if unknown:
        raise ValueError(f"unknown bundle members: {sorted(unknown)}")
    hashes: dict[str, str] = {}
    blobs: dict[str, Path | bytes] = {}
    for name, src in members.items():
        if name == MANIFEST:
            continue
        if isinstance(src, bytes):
            import hashlib

            hashes[name] = hashlib.sha256(src).hexdigest()
        else:
            hashes[name] = sha256_file(src)
        blobs[name] = src
    manifest = manifest.model_copy(update={"members": hashes})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=COMPRESS_LEVEL) as tf:
            _add_bytes(tf, MANIFEST, manifest.model_dump_json(indent=2).encode())
            for name, src in blobs.items():
                if isinstance(src, bytes):
                    _add_bytes(tf, name, src)
                else:
                    tf.add(str(src), arcname=name, recursive=False)
        os.chmod(tmp, file_mode())  # mkstemp creates 0600; a bundle is an ordinary user file
        replace_file(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def _add_bytes(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(datetime.now(timezone.utc).timestamp())
    tf.addfile(info, io.BytesIO(data))


class EngineBundle:
    """A bundle opened for reading. Members are validated when read."""

    def __init__(self, path: Path, members: dict[str, Any], manifest: BundleManifest) -> None:
        self.path = path
        self._members = members  # name -> a spooled temp file: small ones in memory, large ones on disk
        self.manifest = manifest
        self._lock = threading.Lock()  # one reader at a time moves a member's file position

    def close(self) -> None:
        """Let the members' temp files go now (they go when the object does, too)."""
        for spool in self._members.values():
            spool.close()

    def __enter__(self) -> "EngineBundle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def open(cls, path: str | Path) -> "EngineBundle":
        """Read and check every member against the manifest. Members larger than
        :data:`SPOOL_BYTES` wait on disk until read (an engine plan verify never reads, a crafted bundle
        inflating to gigabytes), so opening a bundle never holds more than that in memory per member."""
        import hashlib

        p = Path(path)
        if not p.is_file():
            raise ArtifactError(f"{p}: engine bundle not found")
        members: dict[str, Any] = {}
        digests: dict[str, str] = {}
        try:
            with tarfile.open(p, "r:gz") as tf:
                total, seen = 0, set()
                for m in tf:
                    total = check_member(p, m, total, seen)
                    f = tf.extractfile(m)
                    assert f is not None
                    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
                    h = hashlib.sha256()
                    while chunk := f.read(1 << 20):
                        h.update(chunk)
                        spool.write(chunk)
                    members[m.name], digests[m.name] = spool, h.hexdigest()
        except (tarfile.TarError, EOFError, OSError, ValueError) as e:
            for spool in members.values():
                spool.close()
            if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise  # the temp dir is full: a disk-full error, not a damaged bundle
            raise ArtifactError(f"{p}: not a readable engine bundle (corrupt or truncated .tgz: {e})") from None
        bundle = cls(p, members, BundleManifest.model_construct())
        try:
            bundle.manifest = _checked_manifest(p, members, digests)
        except ArtifactError:
            bundle.close()
            raise
        return bundle

    # -- members --------------------------------------------------------------------------------
    def has(self, name: str) -> bool:
        return name in self._members

    def read_bytes(self, name: str) -> bytes:
        if name not in self._members:
            raise ArtifactError(f"{self.path}: bundle has no {name}")
        spool = self._members[name]
        with self._lock:
            spool.seek(0)
            return bytes(spool.read())

    @property
    def profile(self) -> LayerProfile:
        return _model(self, PROFILE, LayerProfile)

    @property
    def benchmark(self) -> BenchmarkRecord:
        return _model(self, BENCHMARK, BenchmarkRecord)

    def layer_info(self) -> Any:
        return self._json(LAYER_INFO)

    def raw_profile(self) -> Any:
        """The engine's own per-layer timing dump, when the engine wrote one."""
        return self._json(RAW_PROFILE)

    def _json(self, name: str) -> Any:
        import json

        if not self.has(name):
            return None
        try:
            return json.loads(self.read_bytes(name))
        except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise ArtifactError(f"{self.path}: its {name} is not valid JSON ({type(e).__name__}: "
                                f"{str(e)[:200]})") from None

    def outputs(self) -> dict[str, np.ndarray]:
        """The engine's outputs: numeric arrays only (an object array or a damaged npz is an ArtifactError)."""
        from .npz import NpzError, read_npz

        try:
            out = read_npz(self.read_bytes(OUTPUTS))
        except NpzError as e:
            raise ArtifactError(f"{self.path}: its {OUTPUTS} is not a readable npz of numeric arrays ({e})") from None
        bad = [k for k, a in out.items() if a.dtype.kind not in "biuf"]
        if bad:
            raise ArtifactError(f"{self.path}: its {OUTPUTS} holds non-numeric arrays {sorted(bad)[:5]} "
                                f"(dtype {out[sorted(bad)[0]].dtype})")
        return out

    def taps(self) -> tuple[Any, dict[str, np.ndarray]] | None:
        """The bundle's debug taps (a ``TapsFile``) and their fp32 reference; None for an untapped bundle."""
        if not self.has(TAPS):
            return None
        from .stages.taps import TapsFile

        tf = _model(self, TAPS, TapsFile)
        from .npz import NpzError, read_npz

        try:
            ref = read_npz(self.read_bytes(TAPS_REFERENCE))
        except NpzError as e:
            raise ArtifactError(f"{self.path}: its {TAPS_REFERENCE} is not a readable npz ({e})") from None
        return tf, ref

    def extract(self, name: str, dest: Path) -> Path:
        """Copy one member to ``dest`` (streamed: an engine plan is not read into memory)."""
        if name not in self._members:
            raise ArtifactError(f"{self.path}: bundle has no {name}")
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        spool = self._members[name]
        with self._lock, open(dest, "wb") as out:
            spool.seek(0)
            shutil.copyfileobj(spool, out, 1 << 20)
        return dest


def _checked_manifest(p: Path, members: dict[str, Any], digests: dict[str, str]) -> BundleManifest:
    """The manifest of an opened bundle, after every member was checked against it."""
    if MANIFEST not in members:
        raise ArtifactError(f"{p}: not an engine bundle (no {MANIFEST})")
    members[MANIFEST].seek(0)
    manifest = read_manifest(p, members[MANIFEST].read())
    for name, digest in manifest.members.items():
        if name not in members:
            raise ArtifactError(f"{p}: member {name} listed in the manifest is missing")
        if digests[name] != digest:
            raise ArtifactError(f"{p}: member {name} does not match its sha256 in the manifest "
                                "(the bundle was modified or damaged)")
    extra = set(members) - set(manifest.members) - {MANIFEST}
    if extra:
        raise ArtifactError(f"{p}: members not covered by the manifest: {sorted(extra)}")
    return manifest


def read_manifest(path: Path, data: bytes) -> BundleManifest:
    """Parse a bundle's manifest.json; anything wrong with it is an :class:`ArtifactError`."""
    try:
        return BundleManifest.model_validate_json(data)
    except Exception as e:  # noqa: BLE001  -- pydantic, a decode error, a too-deep document
        raise ArtifactError(f"{path}: its {MANIFEST} is invalid: {problem(e)}") from None


def _model(b: EngineBundle, name: str, cls: type[Versioned]) -> Any:
    try:
        return cls.model_validate_json(b.read_bytes(name))
    except ArtifactError:
        raise
    except Exception as e:
        raise ArtifactError(f"{b.path}: its {name} is invalid: {problem(e)}") from None


def check_member(bundle: Path, m: tarfile.TarInfo, total: int = 0, seen: set[str] | None = None) -> int:
    """Refuse a member no bundle has (paths, links, sizes over the limits, a name seen before in ``seen``)
    from its header, before a byte of it is read; returns the running total with it. Every reader of
    bundles calls this."""
    name = m.name
    if seen is not None:
        if name in seen:  # readers would disagree on which copy counts
            raise ArtifactError(f"{bundle}: member {name!r} appears twice; the bundle was modified")
        seen.add(name)
    pp = PurePosixPath(name)
    if name.startswith("/") or pp.is_absolute() or ".." in pp.parts or "\\" in name:
        raise ArtifactError(f"{bundle}: refusing member {name!r} (absolute path or '..')")
    if not m.isfile():
        raise ArtifactError(f"{bundle}: refusing member {name!r} (links and special files are not allowed)")
    if len(pp.parts) != 1:
        raise ArtifactError(f"{bundle}: refusing member {name!r} (bundles are flat)")
    limit, env = ((MAX_MEMBER_BYTES, "YTK_BUNDLE_MAX_MEMBER_BYTES") if name in _BINARY_MEMBERS
                  else (MAX_TEXT_MEMBER_BYTES, "YTK_BUNDLE_MAX_TEXT_MEMBER_BYTES"))
    limit = _limit(limit, env)
    if m.size > limit:
        raise ArtifactError(f"{bundle}: member {name!r} is {m.size} bytes, over the {limit}-byte limit "
                            f"(set {env} to raise it)")
    total += m.size
    cap = _limit(MAX_TOTAL_BYTES, "YTK_BUNDLE_MAX_TOTAL_BYTES")
    if total > cap:
        raise ArtifactError(f"{bundle}: its members add up to more than the {cap}-byte limit "
                            "(set YTK_BUNDLE_MAX_TOTAL_BYTES to raise it)")
    return total
