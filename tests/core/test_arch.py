import pytest

from ytk_hookspecs.models import ArchSpec, ArchSpecError


def test_orin_spec_fields():
    a = ArchSpec.parse("arm64-sm87-dos6010-cu114-trt86")
    assert (a.cpu_arch, a.sm, a.os, a.os_version, a.cuda, a.tensorrt) == (
        "aarch64", 87, "drive-os", "6.0.10", "11.4", "8.6")
    assert a.trt_major == 8
    assert a.gpu is not None and a.gpu.mem_bandwidth_gbs == pytest.approx(204.8)
    assert "-gencode=arch=compute_87,code=sm_87" in a.nvcc_arch_flags()


def test_x86_spec_fields():
    a = ArchSpec.parse("x86_64-sm90-linux-cu130-trt10")
    assert (a.cpu_arch, a.sm, a.os, a.cuda, a.tensorrt, a.trt_major) == ("x86_64", 90, "linux", "13.0", "10", 10)
    assert ArchSpec.parse("x86_64-sm90-linux-cu130-trt105").tensorrt == "10.5"


@pytest.mark.parametrize("spec, field", [
    ("arm64-sm87-dos6010-cu114", "expected 5"),
    ("sparc-sm87-dos6010-cu114-trt86", "CPU arch"),
    ("arm64-smX-dos6010-cu114-trt86", "SM field"),
    ("arm64-sm87-windos-cu114-trt86", "OS field"),
    ("arm64-sm87-dos6010-cuda114-trt86", "CUDA field"),
    ("arm64-sm87-dos6010-cu114-trt7", "TensorRT field"),
    ("x86_64-sm90-dos6010-cu130-trt10", "CPU arch"),
    # well formed, but no such GPU or TensorRT (a new user's typos were accepted and simulated)
    ("arm64-sm999-dos6010-cu114-trt86", "SM field 'sm999'; expected a GPU's compute capability"),
    ("arm64-sm85-dos6010-cu114-trt86", "SM field"),
    ("arm64-sm87-dos6010-cu114-trt99", "TensorRT field 'trt99'; expected a TensorRT release"),
    ("arm64-sm87-dos6010-cu114-trt87", "TensorRT field"),
    ("x86_64-sm90-linux-cu130-trt11", "TensorRT field"),
])
def test_malformed_specs_name_the_field(spec, field):
    with pytest.raises(ArchSpecError, match=field):
        ArchSpec.parse(spec)


def test_a_cpu_measurement_for_a_gpu_target_is_said_to_be_the_cpus():
    from ytk_core.target import off_target_note

    orin = "arm64-sm87-dos6010-cu114-trt86"
    note = off_target_note("CPU (x86_64)", orin)
    assert note is not None and note.startswith(f"measured on this machine's CPU (x86_64), not on {orin}'s GPU")
    assert "not on the target GPU" in (off_target_note("CPU (x86_64)", None) or "")
    assert off_target_note("NVIDIA H100 80GB HBM3", orin) is None  # a GPU's figures: no caveat here
    assert off_target_note("CPU (x86_64)", orin, simulated=True) is None  # SIMULATED says it already
