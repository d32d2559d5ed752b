"""Engine compile and profiling (steps 1, 6, 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import Versioned
from .build import PluginDescription

Precision = Literal["fp16", "fp32"]


class PluginArtifact(BaseModel):
    """A plugin .so handed to a compile, with what it said about itself."""

    model_config = ConfigDict(extra="forbid")

    path: Path
    sha256: str
    description: PluginDescription


class CompileRequest(Versioned):
    onnx: Path
    npz: Path
    arch: str
    precision: Precision
    plugins: list[PluginArtifact] = Field(default_factory=list)
    workdir: Path
    options: dict[str, str] = Field(default_factory=dict)


class CompileResult(Versioned):
    """A built engine, ready to profile. ``layer_info`` is the engine's own raw layer dump."""

    engine: Path
    backend: str
    backend_version: str
    simulated: bool
    device: str
    layer_info: Path | None = None
    build_log: Path | None = None
    build_s: float = 0.0
    extra: dict[str, Any] = Field(default_factory=dict)


class LayerTime(BaseModel):
    """One engine layer as measured: TensorRT-style name, type, median ms per inference."""

    model_config = ConfigDict(extra="forbid")

    name: str
    type: str = ""
    median_ms: float
    average_ms: float | None = None
    onnx_nodes: list[str] = Field(default_factory=list)
    metadata: str | None = None


class ProfileRequest(Versioned):
    compile: CompileResult
    request: CompileRequest
    iterations: int = 10
    warmup: int = 3


class ProfileResult(Versioned):
    layers: list[LayerTime]
    iterations_ms: list[float]
    outputs: Path = Field(description="npz of the engine's outputs for model.npz, keyed by ONNX output")
    raw_profile: Path | None = None
    device: str
    simulated: bool
    alternatives: dict[str, list[float]] = Field(
        default_factory=dict, description="the same engine run another way, timed in the same process like "
                                          "iterations_ms (the torch engine in inductor mode: its op-by-op run), "
                                          "so a report can give the gain against both")
