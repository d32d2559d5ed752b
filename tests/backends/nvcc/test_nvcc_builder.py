"""The nvcc plugin builder: real nvcc builds (compile only here), self-description, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import ArchSpec, BuildRequest, PluginMeta, TensorContract
from ytk_hookspecs.plugin_info import read_plugin_description

from ytk_backend_nvcc.plugin import NvccBuilder
from ytk_backend_nvcc.toolchain import find_nvcc

pytestmark = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")

X86_SM90 = "x86_64-sm90-linux-cu130-trt10"
X86_SM87 = "x86_64-sm87-linux-cu130-trt10"

COPY_CU = r'''
#include <cuda_fp16.h>
__global__ void ytk_copy_kernel(const __half* a, __half* b, long long n, float scale) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) b[i] = __float2half(__half2float(a[i]) * scale);
}
extern "C" int ytk_launch_Scale(const void* const* in, void* const* out, const int64_t* e, void* ws,
                                cudaStream_t s) {
  const long long n = e[0] * e[1] * e[2] * e[3];
  if (e[1] % 8) return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  ytk_copy_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((const __half*)in[0], (__half*)out[0], n, 2.0f);
  return (int)cudaGetLastError();
}
extern "C" size_t ytk_workspace_Scale(const int64_t* e) { return (size_t)(e[0] * 64); }
'''
HEADER = ('#include <cuda_runtime.h>\n#include <cstdint>\n'
          'extern "C" int ytk_launch_Scale(const void* const*, void* const*, const int64_t*, void*, cudaStream_t);\n'
          'extern "C" size_t ytk_workspace_Scale(const int64_t*);\n')

build_plugin = NvccBuilder().build_plugin


def scale_bundle(path: Path, source: str = COPY_CU, name: str = "Scale") -> Path:
    """A tiny bundle (y = 2x, fp16 kHWC8) honouring the launcher ABI, with a workspace function."""
    meta = PluginMeta(plugin_name=name, inputs=[TensorContract(name="x", dtype="float16", format="kHWC8",
                                                                shape=["N", "C", "H", "W"])],
                      outputs=[TensorContract(name="y", dtype="float16", format="kHWC8", shape=["N", "C", "H", "W"])],
                      extents={"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]"},
                      launcher="ytk_launch_Scale", workspace="ytk_workspace_Scale", constraints=["C % 8 == 0"])
    KernelSource(header=HEADER, source=source, meta=meta).write(path)
    return path


@pytest.mark.parametrize("arch", [X86_SM90, X86_SM87])
def test_build_embeds_a_readable_self_description(tmp_path: Path, arch: str) -> None:
    src = scale_bundle(tmp_path / "Scale.module_source.py")
    out = tmp_path / "plugins" / "Scale.so"
    res = build_plugin(BuildRequest(source=src, plugin_name="Scale", arch=arch, output=out), StageContext())
    assert out.is_file() and res.so_path == out
    desc = read_plugin_description(out)
    assert desc.name == "Scale" and desc.engine_api == "torch-launcher"
    assert desc.sm == ArchSpec.parse(arch).sm and desc.launcher == "ytk_launch_Scale"
    assert PluginMeta.model_validate(yaml.safe_load(desc.meta_yaml)).workspace == "ytk_workspace_Scale"
    assert Path(str(out) + ".build.log").is_file()
    # only the finished .so is left beside it: no temp files from the atomic write
    assert sorted(p.name for p in out.parent.iterdir()) == ["Scale.so", "Scale.so.build.log"]


def test_build_renames_to_the_requested_plugin(tmp_path: Path) -> None:
    src = scale_bundle(tmp_path / "Scale.module_source.py")
    out = tmp_path / "Renamed.so"
    build_plugin(BuildRequest(source=src, plugin_name="Renamed", arch=X86_SM90, output=out), StageContext())
    assert read_plugin_description(out).name == "Renamed"
    assert KernelSource.read(src).meta.plugin_name == "Scale"  # the source itself is never modified


@pytest.mark.parametrize("api", ["trt8-IPluginV2DynamicExt", "trt10-IPluginV3"])
def test_tensorrt_shims_need_the_targets_headers(tmp_path: Path, api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TensorRT shim is built against the target's headers (tests/backends/nvcc/test_trt_shims.py builds
    them for real); without headers the error names where it looked, and nothing is written."""
    from ytk_backend_nvcc import trt_shim

    monkeypatch.delenv(trt_shim.HOME_ENV, raising=False)
    monkeypatch.setenv(trt_shim.INCLUDE_ENV, str(tmp_path / "no-headers"))
    src = scale_bundle(tmp_path / "Scale.module_source.py")
    out = tmp_path / "Scale.so"
    with pytest.raises(StageError, match=trt_shim.INCLUDE_ENV):
        build_plugin(BuildRequest(source=src, plugin_name="Scale", arch=X86_SM90, output=out, engine_api=api),
                     StageContext())
    assert not out.exists()


def test_ipluginv3_is_refused_for_a_tensorrt_8_target(tmp_path: Path) -> None:
    src = scale_bundle(tmp_path / "Scale.module_source.py")
    out = tmp_path / "Scale.so"
    with pytest.raises(StageError, match="needs TensorRT 10 .* built as trt8-IPluginV2DynamicExt"):
        build_plugin(BuildRequest(source=src, plugin_name="Scale", arch="x86_64-sm87-linux-cu130-trt86", output=out,
                                  engine_api="trt10-IPluginV3"), StageContext())
    assert not out.exists()


def test_compile_error_is_a_stage_error_and_writes_nothing(tmp_path: Path) -> None:
    src = scale_bundle(tmp_path / "Scale.module_source.py", source=COPY_CU.replace("return 0;", "return 0"))
    out = tmp_path / "Scale.so"
    with pytest.raises(StageError, match="nvcc failed"):
        build_plugin(BuildRequest(source=src, plugin_name="Scale", arch=X86_SM90, output=out), StageContext())
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".Scale.so")]
    assert "error" in (tmp_path / "Scale.so.build.log").read_text()


def test_probe_answers_per_target() -> None:
    assert NvccBuilder().availability().available
    assert NvccBuilder().availability(ArchSpec.parse(X86_SM90)).available
    orin = NvccBuilder().availability(ArchSpec.parse("arm64-sm87-dos6010-cu114-trt86"))
    import shutil

    if shutil.which("aarch64-linux-gnu-g++") is None:
        assert not orin.available and "aarch64" in orin.reason
