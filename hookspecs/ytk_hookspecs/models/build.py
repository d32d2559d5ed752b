"""Plugin building (step 5) and the self-description every plugin .so carries."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from .base import Versioned
from .kernel import KernelDtype, TensorFormat

EngineApi = Literal["trt8-IPluginV2DynamicExt", "trt10-IPluginV3", "torch-launcher", "mock-cpu"]


class PluginDescription(Versioned):
    """What a built plugin says about itself (embedded in the .so; see ``plugin_info``)."""

    name: str
    namespace: str
    version: str
    num_inputs: int
    num_outputs: int
    input_dtypes: list[KernelDtype]
    output_dtypes: list[KernelDtype]
    input_formats: list[TensorFormat]
    output_formats: list[TensorFormat]
    sm: int
    cpu_arch: str
    engine_api: EngineApi
    launcher: str
    builder: str
    source_sha256: str
    meta_yaml: str = Field(default="", description="the full plugin_meta the plugin was built from")


class BuildRequest(Versioned):
    """``ytk embedded build-plugin -a ARCH --plugin-name N -s src.py -o N.so``."""

    source: Path
    plugin_name: str
    arch: str
    output: Path
    engine_api: EngineApi | None = None


class BuildResult(Versioned):
    so_path: Path
    description: PluginDescription
    log: str = ""
    wall_s: float = 0.0
