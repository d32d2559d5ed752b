"""Plugin building (step 5) and the self-description every plugin .so carries."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from .base import Versioned
from .kernel import KernelDtype, PluginMeta, TensorFormat

__all__ = ["EngineApi", "PluginDescription", "BuildRequest", "BuildResult"]


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

    def plugin_meta(self) -> PluginMeta:
        """``meta_yaml`` as the contract it is; ValueError (pydantic's, or YAML's) when it does not read as one."""
        import yaml

        try:
            raw = yaml.safe_load(self.meta_yaml or "")
            return PluginMeta.model_validate(raw)
        except yaml.YAMLError as e:
            raise ValueError(f"its plugin_meta is not YAML: {str(e).splitlines()[0]}") from None
        except (RecursionError, MemoryError) as e:
            raise ValueError(f"its plugin_meta is too deeply nested or too large to read ({type(e).__name__})") \
                from None


class BuildRequest(Versioned):
    """``ytk embedded build-plugin -a ARCH --plugin-name N -s src.py -o N.so``."""

    source: Path
    plugin_name: str
    arch: str
    output: Path
    engine_api: EngineApi | None = None


class BuildResult(Versioned):
    """What a builder returns: the plugin library it wrote, the self-description read back from it, the build log and
    its wall time."""
    so_path: Path
    description: PluginDescription
    log: str = ""
    wall_s: float = 0.0
