"""Readers for what trtexec writes: its four export files and the performance summary of its log.

The formats, as trtexec 8.6 and 10.x write them (samples in ``tests/data/trtexec/``, each with its
public source):

``--exportProfile``  ``[ { "count" : N }, { "name" : "...", "timeMs" : t, "averageMs" : a, "medianMs" : m,
                     "percentage" : p }, ... ]``, one record per line (``samples/common/sampleReporting.cpp``,
                     ``Profiler::exportJSONProfile``). ``timeMs`` is the layer's total over the ``count`` profiled
                     runs; ``medianMs`` is absent before TensorRT 8.4.
``--exportLayerInfo`` ``{"Layers": [...], "Bindings": [...]}`` from ``IEngineInspector``: plain layer names
                     unless the engine was built with ``--profilingVerbosity=detailed``, then objects with
                     ``Name``, ``LayerType``, ``Inputs``/``Outputs`` (``Name``, ``Location``, ``Dimensions``,
                     ``Format/Datatype``), ``TacticName``/``TacticValue`` and ``Metadata`` (``[ONNX Layer: n]``
                     once per ONNX node, joined by ``\\x1e`` or ``\\x1f``).
``--exportTimes``    ``[ { "startEnqMs" : .., "endEnqMs" : .., "startH2dMs" : .., ..., "h2dMs" : .., "computeMs" :
                     .., "d2hMs" : .., "latencyMs" : .. }, ... ]``, one record per timed inference.
``--exportOutput``   ``[ { "name" : "out", "dimensions" : "1x5", "values" : [ 0.04, ... ] }, ... ]``.
stdout               ``=== Performance summary ===`` then ``Latency: min = .. ms, max = .. ms, mean = .. ms,
                     median = .. ms, percentile(90%) = .. ms, ...`` for Latency, Enqueue Time, H2D Latency,
                     GPU Compute Time, D2H Latency; ``Average on N runs - GPU latency: .. ms - Host latency: ..
                     ms (enqueue .. ms)`` per ``--avgRuns`` group.

trtexec writes these with C++ streams, not a JSON library: names are not escaped and a float can come out
as ``nan`` or ``inf``. The readers accept both (a profile falls back to its one-record-per-line layout).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class TrtexecFormatError(ValueError):
    """A trtexec file that does not have the shape trtexec writes (the message names the file)."""


# -- lenient JSON ----------------------------------------------------------------------------------------
_BARE_FLOATS = re.compile(r"(?<=[\s:\[,])(-?)(nan|inf)(?=[\s,\]}])", re.IGNORECASE)


def _loads(text: str, origin: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass

    def fix(m: re.Match[str]) -> str:
        if m.group(2).lower() == "nan":
            return "NaN"
        return "-Infinity" if m.group(1) else "Infinity"

    try:
        return json.loads(_BARE_FLOATS.sub(fix, text))
    except ValueError as e:
        raise TrtexecFormatError(f"{origin}: not readable as JSON ({e})") from None


def _num(value: Any, what: str, origin: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TrtexecFormatError(f"{origin}: {what} is {value!r}, not a number")
    return float(value)


# -- --exportProfile ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProfileRecord:
    name: str
    time_ms: float          # total over all profiled runs
    average_ms: float
    median_ms: float | None  # absent before TensorRT 8.4
    percentage: float


@dataclass
class ExportedProfile:
    count: int | None
    layers: list[ProfileRecord]


_PROFILE_LINE = re.compile(
    r'^\s*[\[,]?\s*\{\s*"name"\s*:\s*"(?P<name>.*)"\s*,\s*"timeMs"\s*:\s*(?P<t>[^,\s]+)\s*,\s*"averageMs"\s*:\s*'
    r'(?P<a>[^,\s]+)\s*(?:,\s*"medianMs"\s*:\s*(?P<m>[^,\s]+)\s*)?,\s*"percentage"\s*:\s*(?P<p>[^,\s}]+)\s*\}\s*$')
_COUNT_LINE = re.compile(r'^\s*\[?\s*\{\s*"count"\s*:\s*(\d+)\s*\}\s*$')


def _float_token(tok: str) -> float:
    t = tok.strip().lower()
    if t in ("nan", "-nan"):
        return math.nan
    if t in ("inf", "-inf"):
        return -math.inf if t.startswith("-") else math.inf
    return float(t)


def parse_profile(text: str, origin: str = "profile") -> ExportedProfile:
    """``trtexec --exportProfile``. Layer names are written unescaped, so a name holding a quote or a
    backslash makes the file invalid JSON; then its one-record-per-line layout is read instead."""
    try:
        data = _loads(text, origin)
    except TrtexecFormatError:
        return _profile_by_lines(text, origin)
    if not isinstance(data, list):
        raise TrtexecFormatError(f"{origin}: a trtexec profile is a JSON array led by {{\"count\": N}}")
    count: int | None = None
    layers: list[ProfileRecord] = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise TrtexecFormatError(f"{origin}: entry {i} is not an object")
        if "name" not in entry:
            if "count" in entry:
                count = int(_num(entry["count"], "count", origin))
                continue
            raise TrtexecFormatError(f"{origin}: entry {i} has neither a name nor a count")
        name = str(entry["name"])
        med = entry.get("medianMs")
        layers.append(ProfileRecord(
            name=name, time_ms=_num(entry.get("timeMs", 0.0), f"timeMs of {name!r}", origin),
            average_ms=_num(entry.get("averageMs", 0.0), f"averageMs of {name!r}", origin),
            median_ms=None if med is None else _num(med, f"medianMs of {name!r}", origin),
            percentage=_num(entry.get("percentage", 0.0), f"percentage of {name!r}", origin)))
    return ExportedProfile(count=count, layers=layers)


def _profile_by_lines(text: str, origin: str) -> ExportedProfile:
    count: int | None = None
    layers: list[ProfileRecord] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.strip() in ("[", "]"):
            continue
        m = _COUNT_LINE.match(line)
        if m:
            count = int(m.group(1))
            continue
        m = _PROFILE_LINE.match(line)
        if not m:
            raise TrtexecFormatError(f"{origin}: line {n} is not a trtexec profile record: {line[:120]!r}")
        layers.append(ProfileRecord(name=m.group("name"), time_ms=_float_token(m.group("t")),
                                    average_ms=_float_token(m.group("a")),
                                    median_ms=_float_token(m.group("m")) if m.group("m") else None,
                                    percentage=_float_token(m.group("p"))))
    if not layers and count is None:
        raise TrtexecFormatError(f"{origin}: not a trtexec profile")
    return ExportedProfile(count=count, layers=layers)


# -- --exportLayerInfo -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]
    format: str  # "Format/Datatype", e.g. "Channel major FP16 format where channel % 8 == 0" or "Half"


@dataclass
class LayerRecord:
    name: str
    layer_type: str = ""
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    tactic: str = ""
    metadata: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class LayerInfo:
    layers: list[LayerRecord]
    bindings: list[str]
    detailed: bool  # built with --profilingVerbosity=detailed (records are objects, not bare names)

    def by_name(self) -> dict[str, LayerRecord]:
        return {r.name: r for r in self.layers}


def _tensors(items: Any, origin: str, layer: str) -> list[TensorInfo]:
    if not isinstance(items, list):
        return []
    out = []
    for t in items:
        if not isinstance(t, dict):
            raise TrtexecFormatError(f"{origin}: layer {layer!r} has a tensor that is not an object")
        dims = t.get("Dimensions") or []
        out.append(TensorInfo(name=str(t.get("Name", "")),
                              dims=tuple(int(d) for d in dims if isinstance(d, (int, float))),
                              format=str(t.get("Format/Datatype", ""))))
    return out


def parse_layer_info(text: str, origin: str = "layer info") -> LayerInfo:
    """``trtexec --exportLayerInfo``, names-only or detailed."""
    data = _loads(text, origin)
    if not isinstance(data, dict) or not isinstance(data.get("Layers"), list):
        raise TrtexecFormatError(f"{origin}: trtexec layer info is an object with a \"Layers\" array")
    layers: list[LayerRecord] = []
    detailed = False
    for i, entry in enumerate(data["Layers"]):
        if isinstance(entry, str):
            layers.append(LayerRecord(name=entry))
            continue
        if not isinstance(entry, dict) or "Name" not in entry:
            raise TrtexecFormatError(f"{origin}: layer {i} is neither a name nor an object with a Name")
        detailed = True
        name = str(entry["Name"])
        layers.append(LayerRecord(name=name, layer_type=str(entry.get("LayerType", "")),
                                  inputs=_tensors(entry.get("Inputs"), origin, name),
                                  outputs=_tensors(entry.get("Outputs"), origin, name),
                                  tactic=str(entry.get("TacticName", "")), metadata=str(entry.get("Metadata", "")),
                                  raw=entry))
    bindings = [str(b) for b in data.get("Bindings", []) if isinstance(b, (str, int))]
    return LayerInfo(layers=layers, bindings=bindings, detailed=detailed)


_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]|\x1e\x1f]+?)\s*(?:\|[^\]]*)?\]")


def metadata_nodes(metadata: str | None) -> list[str]:
    """ONNX node names in a layer's ``Metadata`` (``[ONNX Layer: n]`` per node the layer computes)."""
    seen: list[str] = []
    for m in _ONNX_LAYER.finditer(metadata or ""):
        name = m.group(1).strip()
        if name and name not in seen:
            seen.append(name)
    return seen


# -- --exportTimes -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimingRecord:
    start_compute_ms: float
    end_compute_ms: float
    compute_ms: float      # GPU compute time of this inference
    latency_ms: float      # H2D + compute + D2H


def parse_times(text: str, origin: str = "times") -> list[TimingRecord]:
    """``trtexec --exportTimes``: one record per timed inference, in order."""
    data = _loads(text, origin)
    if not isinstance(data, list):
        raise TrtexecFormatError(f"{origin}: a trtexec timing trace is a JSON array")
    out = []
    for i, e in enumerate(data):
        if not isinstance(e, dict) or "startComputeMs" not in e or "endComputeMs" not in e:
            raise TrtexecFormatError(f"{origin}: record {i} has no startComputeMs/endComputeMs")
        start = _num(e["startComputeMs"], "startComputeMs", origin)
        end = _num(e["endComputeMs"], "endComputeMs", origin)
        compute = _num(e["computeMs"], "computeMs", origin) if "computeMs" in e else end - start
        latency = _num(e["latencyMs"], "latencyMs", origin) if "latencyMs" in e else compute
        out.append(TimingRecord(start, end, compute, latency))
    return out


# -- --exportOutput ----------------------------------------------------------------------------------------
def parse_outputs(text: str, origin: str = "outputs") -> dict[str, np.ndarray]:
    """``trtexec --exportOutput``: every output binding, shaped by its ``dimensions`` (``1x3x8x8``)."""
    data = _loads(text, origin)
    if not isinstance(data, list):
        raise TrtexecFormatError(f"{origin}: trtexec outputs are a JSON array of {{name, dimensions, values}}")
    out: dict[str, np.ndarray] = {}
    for i, e in enumerate(data):
        if not isinstance(e, dict) or "name" not in e or "values" not in e:
            raise TrtexecFormatError(f"{origin}: entry {i} lacks a name or values")
        name = str(e["name"])
        dims_text = str(e.get("dimensions", "")).strip()
        try:
            dims = [int(d) for d in dims_text.split("x")] if dims_text else []
        except ValueError:
            raise TrtexecFormatError(f"{origin}: output {name!r} has dimensions {dims_text!r}") from None
        values = np.asarray(e["values"], dtype=np.float64).reshape(-1)
        want = int(np.prod(dims)) if dims else 1
        if values.size != want:
            raise TrtexecFormatError(f"{origin}: output {name!r} is {dims_text or 'a scalar'} ({want} values) but "
                                     f"{values.size} values were written")
        out[name] = values.reshape(dims)
    return out


# -- the log ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricStats:
    min: float
    max: float
    mean: float
    median: float
    percentiles: dict[float, float]


@dataclass
class PerformanceSummary:
    throughput_qps: float | None
    metrics: dict[str, MetricStats]           # "Latency", "GPU Compute Time", "Enqueue Time", ...
    host_walltime_s: float | None
    gpu_compute_total_s: float | None


_METRIC = re.compile(r"\] (?P<metric>[A-Za-z0-9 -]+?): min = (?P<min>\S+) ms, max = (?P<max>\S+) ms, mean = "
                     r"(?P<mean>\S+) ms, median = (?P<median>\S+) ms(?P<rest>.*)$")
_PERCENTILE = re.compile(r"percentile\((?P<p>[\d.]+)%\) = (?P<v>\S+) ms")
_AVERAGE = re.compile(r"Average on (?P<runs>\d+) runs - GPU latency: (?P<gpu>\S+) ms - Host latency: (?P<host>\S+) ms "
                      r"\((?:end to end \S+ ms, )?enqueue (?P<enq>\S+) ms\)")


def parse_summary(log: str) -> PerformanceSummary | None:
    """The ``=== Performance summary ===`` block of a trtexec log (the last one), or None."""
    start = log.rfind("=== Performance summary ===")
    if start < 0:
        return None
    block = log[start:].splitlines()[1:]
    metrics: dict[str, MetricStats] = {}
    qps = wall = gpu_total = None
    for line in block:
        if "Explanations of the performance metrics" in line or line.startswith("&&&&"):
            break
        m = _METRIC.search(line)
        if m:
            pct = {float(p.group("p")): _float_token(p.group("v")) for p in _PERCENTILE.finditer(m.group("rest"))}
            metrics[m.group("metric").strip()] = MetricStats(
                min=_float_token(m.group("min")), max=_float_token(m.group("max")), mean=_float_token(m.group("mean")),
                median=_float_token(m.group("median")), percentiles=pct)
            continue
        if (t := re.search(r"Throughput: (\S+) qps", line)):
            qps = _float_token(t.group(1))
        elif (t := re.search(r"Total Host Walltime: (\S+) s", line)):
            wall = _float_token(t.group(1))
        elif (t := re.search(r"Total GPU Compute Time: (\S+) s", line)):
            gpu_total = _float_token(t.group(1))
    return PerformanceSummary(throughput_qps=qps, metrics=metrics, host_walltime_s=wall, gpu_compute_total_s=gpu_total)


@dataclass(frozen=True)
class AverageLine:
    runs: int
    gpu_ms: float
    host_ms: float
    enqueue_ms: float


def parse_average_lines(log: str) -> list[AverageLine]:
    """``Average on N runs - GPU latency: ..`` lines of the benchmark (per inference with ``--avgRuns=1``)."""
    return [AverageLine(int(m.group("runs")), _float_token(m.group("gpu")), _float_token(m.group("host")),
                        _float_token(m.group("enq"))) for m in _AVERAGE.finditer(log)]


def selected_device(log: str) -> str | None:
    """``[I] Selected Device: NVIDIA GeForce RTX 3090`` (trtexec 8.6 and 10.x)."""
    m = re.search(r"Selected Device: (.+?)\s*$", log, re.M)
    return m.group(1) if m else None
