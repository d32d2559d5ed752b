"""Kernel generation and builder conformance: contracts honoured, plugins that describe themselves."""

from __future__ import annotations

import pytest

from tests.conformance.conftest import backends_for, gpu_for, is_simulated, target_for
from tests.stages.carved_fixture import PLUGIN
from ytk_hookspecs.contract import check_meta_against_candidate, check_source
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import CandidatesFile, KernelReport, PluginMeta, TensorContract
from ytk_hookspecs.plugin_info import read_plugin_description


@pytest.mark.parametrize("name", backends_for("kernelgen"))
def test_kernelgen_result_honours_its_region(ytk, fixture_dir, name):
    arch = target_for(name)
    c = fixture_dir / "carved"
    out = c / "sources" / f"{PLUGIN}.module_source.py"
    r = ytk("kernelgen", "compile", "-r", c / "plugin_candidates" / f"{PLUGIN}.pt2", "-g", gpu_for(arch), "-a", arch,
            "--config", "deployment_target=tensorrt", "-o", out, "--kernelgen", name, "--json")
    if r.code != 0:
        # Failing is allowed (a region a generator does not handle), faking a kernel is not.
        assert "kernel generation failed" in r.stderr and not out.exists(), r.stderr
        return
    data = r.json()
    assert data["status"] in ("done", "running")
    if data["status"] == "running":
        return
    src = KernelSource.read(out)
    cand = CandidatesFile.read(c / "candidates.json").candidates[0]
    assert check_source(src).ok
    rep = check_meta_against_candidate(src.meta, cand, "fp16")
    assert rep.ok, rep.errors
    assert src.meta.deployment_target == "tensorrt"
    report = KernelReport.read(data["report"])
    assert report.plugin_name == PLUGIN and report.simulated == is_simulated(name)


def _relu_source(name: str) -> KernelSource:
    """A real fp16 ReLU kernel honouring the launcher ABI, so real builders can compile it."""
    meta = PluginMeta(
        plugin_name=name, plugin_namespace="yasp", plugin_version="1", deployment_target="tensorrt",
        inputs=[TensorContract(name="x", dtype="float16", format="kLINEAR", shape=["in0[0]", "in0[1]"])],
        outputs=[TensorContract(name="y", dtype="float16", format="kLINEAR", shape=["in0[0]", "in0[1]"])],
        extents={"M": "in0[0]", "N": "in0[1]"}, launcher=f"{name}_launch")
    source = (
        "#include <cuda_fp16.h>\n"
        "__global__ void relu_kernel(const __half* x, __half* y, long long n) {\n"
        "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
        "  if (i < n) { float v = __half2float(x[i]); y[i] = __float2half(v > 0.f ? v : 0.f); }\n}\n"
        f"extern \"C\" int {name}_launch(const void* const* inputs, void* const* outputs, const int64_t* extents,\n"
        "                              void* workspace, cudaStream_t stream) {\n"
        "  long long n = (long long)extents[0] * extents[1];\n"
        "  if (n == 0) return 0;\n"
        "  relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>((const __half*)inputs[0], (__half*)outputs[0], n);\n"
        "  return (int)cudaGetLastError();\n}\n")
    header = f"extern \"C\" int {name}_launch(const void* const*, void* const*, const int64_t*, void*, cudaStream_t);\n"
    return KernelSource(header=header, source=source, meta=meta, generator="conformance")


@pytest.mark.parametrize("name", backends_for("builder"))
def test_builder_output_describes_itself(ytk, tmp_path, name):
    arch = target_for(name)
    src = _relu_source("ConfRelu").write(tmp_path / "ConfRelu.module_source.py")
    before = src.read_bytes()
    so = tmp_path / "out" / "Renamed.so"
    r = ytk("embedded", "build-plugin", "-a", arch, "--plugin-name", "Renamed", "-s", src, "-o", so,
            "--builder", name, "--json")
    assert r.code == 0, r.stderr
    assert src.read_bytes() == before
    d = read_plugin_description(so)
    assert (d.name, d.namespace, d.version, d.num_inputs, d.num_outputs) == ("Renamed", "yasp", "1", 1, 1)
    assert (d.input_dtypes, d.output_dtypes, d.launcher) == (["float16"], ["float16"], "ConfRelu_launch")
    assert d.sm == int(arch.split("-")[1][2:])
    assert r.json()["custom_plugin"] == f"--custom-plugin {so.resolve()}"
    leftovers = [p.name for p in so.parent.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp")]
    assert leftovers == [], "no temporary files left behind"
