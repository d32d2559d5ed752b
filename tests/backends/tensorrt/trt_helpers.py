"""Helpers of the TensorRT engine's tests: plugin .so files that describe themselves, and the sample files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ytk_hookspecs.models import PluginArtifact, PluginDescription, sha256_file
from ytk_hookspecs.plugin_info import c_snippet

SAMPLES = Path(__file__).parents[2] / "data" / "trtexec"


def describe(name: str = "DwConv3x3C16", *, namespace: str = "yasp", version: str = "1", num_inputs: int = 3,
             input_dtypes: list[str] | None = None, input_formats: list[str] | None = None,
             engine_api: str = "trt8-IPluginV2DynamicExt", sm: int = 87,
             cpu_arch: str = "aarch64") -> PluginDescription:
    dts = input_dtypes or (["float16"] + ["float32"] * (num_inputs - 1))
    return PluginDescription(name=name, namespace=namespace, version=version, num_inputs=num_inputs, num_outputs=1,
                             input_dtypes=dts, output_dtypes=["float16"],
                             input_formats=input_formats or ["kLINEAR"] * num_inputs, output_formats=["kLINEAR"],
                             sm=sm, cpu_arch=cpu_arch, engine_api=engine_api, launcher=f"ytk_launch_{name}",
                             builder="tests (self-description only)", source_sha256="0" * 64)


def build_described_so(path: Path, desc: PluginDescription) -> PluginArtifact:
    """A shared object that carries ``desc`` as its ytk self-description (no plugin code: the stand-in
    trtexec reads the description, as the real one would call the entry points)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build a test plugin .so")
    src = path.with_suffix(".c")
    src.write_text(c_snippet(desc))
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(path), str(src)], check=True, capture_output=True)
    return PluginArtifact(path=path, sha256=sha256_file(path), description=desc)
