"""Where the measured per-layer times come from: an engine bundle, or the files trtexec writes.

Users who profile on the device themselves have ``trtexec --exportProfile=profile.json`` (an array
led by ``{"count": N}``, then one ``{"name", "timeMs", "averageMs", "medianMs", "percentage"}`` per
layer) and ``--exportLayerInfo=layers.json`` (``{"Layers": [...], "Bindings": [...]}``, layers as
plain names or, at ``--profilingVerbosity=detailed``, objects with ``Name``, ``LayerType``,
``Inputs``, ``Outputs`` and, on TensorRT 10, ``Metadata``). Both are read here into the same
:class:`Measurement` a bundle gives.
"""

from __future__ import annotations

import json
import statistics
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ytk_hookspecs.models import ArtifactError, LayerTime
from ytk_hookspecs.models.base import problem

from ..errors import UsageError


@dataclass
class Measurement:
    """Per-layer times plus what is known about the engine and target that produced them."""

    layers: list[LayerTime]
    source: Path
    label: str
    engine: str
    simulated: bool
    engine_version: str = ""
    device: str = ""
    arch: str | None = None
    precision: str = "fp16"
    end_to_end_ms: float | None = None
    #: the medians of the same engine timed another way (the bundle benchmark's alternatives)
    other_runs_ms: tuple[float, ...] = ()
    onnx_sha256: str | None = None
    #: layer name -> its detailed layer-info object (empty for names-only layer info)
    layer_info: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        return float(sum(layer.median_ms for layer in self.layers))


def load_measurement(profile: str | Path, layer_info: str | Path | None = None, *, arch: str | None = None,
                     precision: str | None = None) -> Measurement:
    """Read a bundle (``.tgz``) or a trtexec profile JSON (plus optional layer info) into a Measurement."""
    p = Path(profile)
    if not p.is_file():
        raise UsageError(f"{p}: profile not found; pass an engine bundle (.tgz from `ytk embedded compile`) or a "
                         "trtexec --exportProfile JSON (--profile)")
    if tarfile.is_tarfile(p):
        m = _from_bundle(p)
    else:
        try:
            data = _read_json(p, "profile")
        except UsageError:
            if not p.is_file():
                raise
            raise UsageError(f"--profile {p}: neither an engine bundle (the .tgz `ytk embedded compile` writes) nor "
                             "a JSON layer profile (a trtexec --exportProfile file); pass the bundle of the engine "
                             "to attribute") from None
        m = _from_json(p, data)
    if layer_info is not None:
        m.layer_info = _layer_info_index(_read_json(Path(layer_info), "layer info"), Path(layer_info))
    _merge_layer_info(m)
    if arch:
        m.arch = arch
    if precision:
        m.precision = precision
    if not m.layers:
        raise UsageError(f"{p}: the profile has no layers; nothing to attribute")
    return m


def _read_json(p: Path, what: str) -> Any:
    if not p.is_file():
        raise UsageError(f"{p}: {what} file not found")
    try:
        return json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{p}: not a readable JSON {what} file ({e})") from None


def _from_bundle(p: Path) -> Measurement:
    """Read only the members propose needs, stopping as soon as it has them.

    A bundle also holds the engine and the outputs for model.npz (tens of MB on the worked
    example); streaming past them instead of opening the whole bundle keeps propose fast. Each
    member read is still checked against the manifest's sha256.
    """
    from ..bundle import BENCHMARK, LAYER_INFO, MANIFEST, PROFILE, BenchmarkRecord, BundleManifest, LayerProfile

    got = _stream_members(p, {MANIFEST, PROFILE, BENCHMARK, LAYER_INFO}, _needs_layer_info)
    if MANIFEST not in got:
        raise UsageError(f"{p}: not an engine bundle (no {MANIFEST})")
    try:
        man = BundleManifest.model_validate_json(got[MANIFEST])
        if PROFILE not in got:
            raise UsageError(f"{p}: the bundle has no {PROFILE}; it was not profiled")
        prof = LayerProfile.model_validate_json(got[PROFILE])
        e2e, others = None, ()
        if BENCHMARK in got:
            bench = BenchmarkRecord.model_validate_json(got[BENCHMARK])
            e2e = float(statistics.median(bench.iterations_ms)) if bench.iterations_ms else None
            others = tuple(float(statistics.median(v)) for v in bench.alternatives.values() if v)
        info = json.loads(got[LAYER_INFO]) if LAYER_INFO in got else None
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"{p}: a bundle member is invalid ({problem(e)})") from None
    m = Measurement(layers=list(prof.layers), source=p, label=p.name, engine=man.engine_backend,
                    engine_version=man.engine_version, simulated=bool(man.simulated or prof.simulated),
                    device=man.device or prof.device, arch=man.arch, precision=man.precision, end_to_end_ms=e2e,
                    other_runs_ms=others, onnx_sha256=man.onnx_sha256 or None)
    if info is not None:
        m.layer_info = _layer_info_index(info, p)
    return m


def _needs_layer_info(profile_json: bytes) -> bool:
    """Layer info only helps layers that name no ONNX node themselves."""
    from .trt_names import parse_layer_name

    try:
        data = json.loads(profile_json)
    except (ValueError, UnicodeDecodeError):
        return False  # LayerProfile's validation below says what is wrong with it
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        return False
    return any(isinstance(ly, dict) and not ly.get("onnx_nodes") and not ly.get("metadata") and
               parse_layer_name(str(ly.get("name", ""))).kind == "compute" for ly in layers)


def _stream_members(p: Path, wanted: set[str], needs_info) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    import hashlib

    from ..bundle import LAYER_INFO, MANIFEST, PROFILE, check_member, read_manifest

    got: dict[str, bytes] = {}
    digests: dict[str, str] = {}
    want = set(wanted)
    try:
        with tarfile.open(p, "r|gz") as tf:
            total = 0
            seen: set[str] = set()
            # every header is read (an unwanted member's bytes are skipped, not kept): a member that any
            # reader of bundles refuses makes this one refuse the bundle too
            for mem in tf:
                name = mem.name
                try:
                    total = check_member(p, mem, total, seen)  # the same rules as every other reader of bundles
                except ArtifactError as e:
                    raise UsageError(str(e)) from None
                if name not in want:
                    continue
                f = tf.extractfile(mem)
                data = f.read() if f is not None else b""
                if name == MANIFEST:
                    try:
                        digests = read_manifest(p, data).members
                    except ArtifactError as e:
                        raise UsageError(str(e)) from None
                    want = {w for w in want if w == MANIFEST or w in digests}
                elif digests.get(name) != hashlib.sha256(data).hexdigest():
                    raise UsageError(f"{p}: member {name} does not match its sha256 in the manifest (the bundle "
                                     "was modified or damaged)")
                got[name] = data
                if name == PROFILE and not needs_info(data):
                    want.discard(LAYER_INFO)
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        raise UsageError(f"{p}: not a readable engine bundle (corrupt or truncated .tgz: {e})") from None
    extra = seen - set(digests) - {MANIFEST}
    if digests and extra:
        raise UsageError(f"{p}: members not covered by the manifest: {sorted(extra)}")
    return got


def _from_json(p: Path, data: Any) -> Measurement:
    if isinstance(data, list):
        return Measurement(layers=parse_trtexec_profile(data, p), source=p, label=p.name, engine="tensorrt",
                           simulated=False, device="(trtexec profile)")
    if isinstance(data, dict) and "Layers" in data:
        raise UsageError(f"{p}: this is a layer-info file (trtexec --exportLayerInfo); pass it with --layer-info "
                         "and the --exportProfile JSON with --profile")
    if isinstance(data, dict) and "layers" in data and "schema_version" in data:
        from ..bundle import LayerProfile

        try:
            prof = LayerProfile.model_validate(data)
        except Exception as e:
            raise UsageError(f"{p}: not a valid profile.json ({str(e).splitlines()[0]})") from None
        return Measurement(layers=list(prof.layers), source=p, label=p.name, engine="unknown",
                           simulated=prof.simulated, device=prof.device)
    raise UsageError(f"{p}: not a profile this version understands: expected an engine bundle (.tgz), a trtexec "
                     "--exportProfile JSON array, or a ytk profile.json")


def parse_trtexec_profile(data: list[Any], p: Path) -> list[LayerTime]:
    """``trtexec --exportProfile``: ``[{"count": N}, {"name", "timeMs", "averageMs", "medianMs", ...}, ...]``."""
    count = None
    layers: list[LayerTime] = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise UsageError(f"{p}: entry {i} of the profile is not an object")
        if "count" in entry and "name" not in entry:
            count = entry["count"]
            continue
        if "name" not in entry:
            raise UsageError(f"{p}: entry {i} of the profile has no \"name\"")
        med = entry.get("medianMs")
        avg = entry.get("averageMs")
        if med is None and avg is None and entry.get("timeMs") is not None and count:
            avg = float(entry["timeMs"]) / float(count)
        ms = med if med is not None else avg
        if ms is None:
            raise UsageError(f"{p}: layer {entry['name']!r} has neither medianMs nor averageMs")
        layers.append(LayerTime(name=str(entry["name"]), median_ms=float(ms),
                                average_ms=float(avg) if avg is not None else None))
    return layers


def _layer_info_index(data: Any, p: Path) -> dict[str, dict[str, Any]]:
    """Detailed layer objects by name; names-only layer info carries nothing beyond the profile."""
    if isinstance(data, dict) and "Layers" in data:
        layers = data["Layers"]
    elif isinstance(data, list):
        layers = data
    else:
        raise UsageError(f"{p}: not a layer-info file (expected {{\"Layers\": [...], \"Bindings\": [...]}} as "
                         "trtexec --exportLayerInfo writes it)")
    out: dict[str, dict[str, Any]] = {}
    for item in layers:
        if isinstance(item, dict) and "Name" in item:
            out[str(item["Name"])] = item
    return out


def _merge_layer_info(m: Measurement) -> None:
    """Fill type and metadata the profile lacks from the detailed layer info."""
    if not m.layer_info:
        return
    for i, layer in enumerate(m.layers):
        info = m.layer_info.get(layer.name)
        if info is None:
            continue
        upd: dict[str, Any] = {}
        if not layer.type and info.get("LayerType"):
            upd["type"] = str(info["LayerType"])
        if not layer.metadata and info.get("Metadata"):
            upd["metadata"] = str(info["Metadata"])
        if upd:
            m.layers[i] = layer.model_copy(update=upd)
