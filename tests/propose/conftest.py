"""Fixtures for the propose tests: the EfficientViT-B1 prepare outputs (small and worked-example size)
and engine bundles built from the mock engine's simulated profile of the worked example."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def unpack(name: str, dest: Path) -> Path:
    """Copy fixture directory ``name`` to ``dest``, un-gzipping ``*.gz`` files."""
    src = DATA / name
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix == ".gz":
            (dest / f.stem).write_bytes(gzip.decompress(f.read_bytes()))
        else:
            shutil.copy(f, dest / f.name)
    fx = dest / "fx_nodes.json"
    if fx.is_file():
        # The stored ONNX lost its weight values, so its hash changed; keep the pair consistent.
        from ytk_hookspecs.models.base import sha256_file

        data = json.loads(fx.read_text())
        data["onnx_sha256"] = sha256_file(dest / "model.onnx")
        fx.write_text(json.dumps(data))
    return dest


def make_bundle(prep: Path, out: Path, profile: dict | None = None) -> Path:
    """An engine bundle (the real writer) holding the fixture's simulated profile and layer info."""
    from ytk_core.bundle import BundleManifest, write_bundle
    from ytk_hookspecs.models.base import sha256_file

    man = json.loads((prep / "bundle_manifest.json").read_text())
    man["onnx_sha256"] = sha256_file(prep / "model.onnx")
    man.pop("members", None)
    members: dict[str, Path | bytes] = {
        "profile.json": json.dumps(profile).encode() if profile is not None else (prep / "profile.json").read_bytes(),
        "layer_info.json": (prep / "layer_info.json").read_bytes(),
        "benchmark.json": json.dumps({"schema_version": 1, "device": man["device"], "simulated": True, "warmup": 3,
                                      "iterations_ms": [88.4, 88.5, 88.3]}).encode(),
    }
    return write_bundle(out, BundleManifest.model_validate(man), members)


@pytest.fixture(scope="session")
def worked(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The worked example (4x1088x1920) prepare dir with base.tgz from the mock engine (SIMULATED)."""
    d = unpack("evit_4x1088x1920", tmp_path_factory.mktemp("worked") / "base")
    make_bundle(d, d / "base.tgz")
    return d


@pytest.fixture(scope="session")
def small(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """EfficientViT-B1 at 1x64x96: ONNX + fx_nodes.json, plus the TensorRT-format profile fixtures."""
    d = unpack("evit_1x64x96", tmp_path_factory.mktemp("small") / "base")
    for f in DATA.glob("trt*.json"):
        shutil.copy(f, d / f.name)
    return d


def load_profile(prep: Path) -> dict:
    return json.loads((prep / "profile.json").read_text())


@pytest.fixture(scope="session")
def small_base(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """EfficientViT-B1 at 1x64x96 with base.tgz from the mock engine (SIMULATED)."""
    d = unpack("evit_1x64x96", tmp_path_factory.mktemp("small_base") / "base")
    make_bundle(d, d / "base.tgz")
    return d


@pytest.fixture(scope="session")
def plugged(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The same model carved with LiteMLAC768, LiteMLAC384 and DwConv3x3s1Dyn, and gaia.tgz compiled with those
    plugins by the mock engine (SIMULATED): the spec's "then ask again" case."""
    d = unpack("evit_1x64x96_plugged", tmp_path_factory.mktemp("plugged") / "gaia")
    make_bundle(d, d / "gaia.tgz")
    return d
