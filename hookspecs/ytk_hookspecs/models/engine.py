"""Engine compile and profiling (steps 1, 6, 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import Versioned
from .build import PluginDescription

__all__ = ["Precision", "NETWORK_OUTPUTS", "DEBUG_TENSORS", "TapExposure", "PluginArtifact", "CompileRequest",
           "CompileResult", "LatencyMs", "LayerMs", "LayerTime", "ProfileRequest", "ProfileResult"]


Precision = Literal["fp16", "fp32"]
#: How an engine exposed the debug taps it was asked for (:attr:`CompileRequest.debug_outputs`).
NETWORK_OUTPUTS = "network outputs"
DEBUG_TENSORS = "TensorRT debug tensors"
TapExposure = Literal["network outputs", "TensorRT debug tensors"]


class PluginArtifact(BaseModel):
    """A plugin .so handed to a compile, with what it said about itself."""

    model_config = ConfigDict(extra="forbid")

    path: Path
    sha256: str
    description: PluginDescription


class CompileRequest(Versioned):
    """What to build. Schema 2 added ``debug_outputs`` (requests of schema 1 still read, with it empty)."""

    SCHEMA_VERSION: ClassVar[int] = 2

    onnx: Path
    npz: Path
    arch: str
    precision: Precision
    plugins: list[PluginArtifact] = Field(default_factory=list)
    workdir: Path
    options: dict[str, str] = Field(default_factory=dict)
    debug_outputs: list[str] = Field(
        default_factory=list,
        description="graph outputs of ``onnx`` that are debug taps (``ytk embedded prepare --debug-taps``: plugin "
                    "boundaries made outputs), not outputs of the model. An engine may expose them another way than "
                    "as outputs (TensorRT 10: debug tensors) but returns their values in ProfileResult.outputs under "
                    "these names all the same, and says how in CompileResult.debug_outputs_as")


class CompileResult(Versioned):
    """A built engine, ready to profile. ``layer_info`` is the engine's own raw layer dump.

    Schema 2 added ``debug_outputs_as`` and ``debug_outputs_note`` (results of schema 1 still read, with
    neither said)."""

    SCHEMA_VERSION: ClassVar[int] = 2

    engine: Path
    backend: str
    backend_version: str
    simulated: bool
    device: str
    layer_info: Path | None = None
    build_log: Path | None = None
    build_s: float = 0.0
    extra: dict[str, Any] = Field(default_factory=dict)
    debug_outputs_as: TapExposure | None = Field(
        None, description="how the request's debug_outputs were exposed: as network outputs (extra bindings, as the "
                          "ONNX has them) or as TensorRT debug tensors (no binding; read through a debug listener); "
                          "None when the request had none, or the engine did not say (then they are outputs)")
    debug_outputs_note: str = Field("", description="why the debug outputs were exposed that way when the engine "
                                                    "would rather have done otherwise (one line)")


#: a latency: positive and finite (a negative, zero, NaN or infinite one is a broken or forged record)
LatencyMs = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: one layer's share: finite and not negative (a layer may round to zero)
LayerMs = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class LayerTime(BaseModel):
    """One engine layer as measured: TensorRT-style name, type, median ms per inference."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: str = ""
    median_ms: LayerMs
    average_ms: LayerMs | None = None
    onnx_nodes: list[str] = Field(default_factory=list)
    metadata: str | None = None


class ProfileRequest(Versioned):
    """Profile a compiled engine: per-layer times and end-to-end iterations after warm-up."""
    compile: CompileResult
    request: CompileRequest
    iterations: int = 10
    warmup: int = 3


class ProfileResult(Versioned):
    """An engine's profile: per-layer times, each timed iteration, the outputs on ``model.npz`` and the engine's raw
    profile where it has one."""
    layers: list[LayerTime]
    iterations_ms: list[LatencyMs] = Field(min_length=1)
    outputs: Path = Field(description="npz of the engine's outputs for model.npz, keyed by ONNX output")
    raw_profile: Path | None = None
    device: str
    simulated: bool
    alternatives: dict[str, list[LatencyMs]] = Field(
        default_factory=dict, description="the same engine run another way, timed in the same process like "
                                          "iterations_ms (the torch engine in inductor mode: its op-by-op run), "
                                          "so a report can give the gain against both")
