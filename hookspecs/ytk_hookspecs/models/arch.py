"""Target architecture specs such as ``arm64-sm87-dos6010-cu114-trt86``.

Five dash-separated fields: CPU arch, SM, OS, CUDA, TensorRT. Every figure a backend derives from
the target (nvcc flags, roofline, cost model) comes from here, so a typo is caught up front with
an error that names the field.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["CpuArch", "ArchSpecError", "GpuProperties", "GPU_NAMES", "gpu_sm", "GPU_PROPERTIES", "KNOWN_SM", "ArchSpec"]


CpuArch = Literal["aarch64", "x86_64"]

_CPU_ALIASES = {"arm64": "aarch64", "aarch64": "aarch64", "x86_64": "x86_64", "amd64": "x86_64", "x64": "x86_64"}


class ArchSpecError(ValueError):
    """A malformed arch spec; the message names the bad field and what was expected."""


class GpuProperties(BaseModel):
    """Published (or, where stated, measured) limits of a GPU, used for rooflines and cost models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    sm_count: int
    mem_bandwidth_gbs: float
    fp16_tflops: float
    fp32_tflops: float
    source: str


# Keyed by SM version. Orin figures: Jetson AGX Orin 64GB data sheet (LPDDR5 256-bit 204.8 GB/s;
# GPU 170 sparse INT8 TOPS -> ~42.5 dense fp16 tensor TFLOPS; 5.3 fp32 TFLOPS). H100/H200: the
# device machine's measured copy bandwidth (shared/device/README.md) and the data-sheet dense fp16.
#: GPU names ``-g`` accepts (lower case, spaces and dashes dropped; matched as a substring, so "NVIDIA
#: H200" and "Jetson AGX Orin" resolve) -> their SM.
GPU_NAMES: dict[str, int] = {
    "orin": 87, "h100": 90, "h200": 90, "gh200": 90, "a100": 80, "a30": 80, "a10": 86, "a40": 86, "a6000": 86,
    "rtx3090": 86, "3090": 86, "rtx4090": 89, "4090": 89, "l4": 89, "l40": 89, "b200": 100, "b100": 100,
    "ga10b": 87, "ga10x": 86, "ad10x": 89,
}


def gpu_sm(name: str) -> int | None:
    """The SM of a GPU named as a user or ``torch.cuda.get_device_name`` writes it, or None if unknown."""
    key = name.lower().replace(" ", "").replace("-", "").replace("_", "")
    m = re.fullmatch(r"sm(\d{2,3})", key)
    if m:
        return int(m.group(1))
    hits = [(len(k), sm) for k, sm in GPU_NAMES.items() if k in key]
    return max(hits)[1] if hits else None


GPU_PROPERTIES: dict[int, GpuProperties] = {
    87: GpuProperties(name="DRIVE AGX Orin (GA10B)", sm_count=16, mem_bandwidth_gbs=204.8,
                      fp16_tflops=42.5, fp32_tflops=5.3, source="Orin data sheet"),
    86: GpuProperties(name="Ampere GA10x", sm_count=84, mem_bandwidth_gbs=936.0,
                      fp16_tflops=142.0, fp32_tflops=35.6, source="RTX 3090 data sheet"),
    89: GpuProperties(name="Ada AD10x", sm_count=128, mem_bandwidth_gbs=1008.0,
                      fp16_tflops=330.0, fp32_tflops=82.6, source="RTX 4090 data sheet"),
    80: GpuProperties(name="A100", sm_count=108, mem_bandwidth_gbs=2039.0,
                      fp16_tflops=312.0, fp32_tflops=19.5, source="A100 80GB data sheet"),
    90: GpuProperties(name="H100/H200", sm_count=132, mem_bandwidth_gbs=4200.0,
                      fp16_tflops=989.0, fp32_tflops=67.0,
                      source="H200 measured copy bandwidth (device README); dense fp16 from data sheet"),
}


#: Every CUDA compute capability of a released GPU (``sm_NN`` in nvcc's list), and the TensorRT releases
#: (major -> its last minor; 10 and later take any minor).
KNOWN_SM = (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121)
_TRT_LAST_MINOR = {8: 6, 9: 3}


def _num(digits: str, major_digits: int) -> tuple[int, int]:
    return int(digits[:major_digits]), int(digits[major_digits:] or 0)


class ArchSpec(BaseModel):
    """A parsed target: ``<cpu>-sm<NN>-<os>-cu<ver>-trt<ver>``.

    Examples: ``arm64-sm87-dos6010-cu114-trt86`` (DRIVE AGX Orin, DRIVE OS 6.0.10, CUDA 11.4,
    TensorRT 8.6) and ``x86_64-sm90-linux-cu130-trt10`` (H100/H200, CUDA 13.0, TensorRT 10).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: str
    cpu_arch: CpuArch
    sm: int
    os: str
    os_version: str | None = None
    cuda: str
    tensorrt: str

    @classmethod
    def parse(cls, spec: str) -> "ArchSpec":
        text = spec.strip()
        parts = text.split("-")
        names = ["CPU arch", "SM", "OS", "CUDA", "TensorRT"]
        if len(parts) != 5:
            raise ArchSpecError(
                f"arch spec {spec!r} has {len(parts)} field(s); expected 5 dash-separated fields "
                "<cpu>-sm<NN>-<os>-cu<ver>-trt<ver>, e.g. arm64-sm87-dos6010-cu114-trt86"
            )
        cpu, sm, os_, cu, trt = parts

        def bad(i: int, want: str) -> ArchSpecError:
            return ArchSpecError(f"arch spec {spec!r}: bad {names[i]} field {parts[i]!r}; expected {want}")

        if cpu.lower() not in _CPU_ALIASES:
            raise bad(0, "one of arm64, aarch64, x86_64")
        m = re.fullmatch(r"sm(\d{2,3})", sm)
        if not m:
            raise bad(1, "sm followed by the compute capability digits, e.g. sm87 or sm90")
        sm_v = int(m.group(1))
        if sm_v not in KNOWN_SM:
            raise bad(1, f"a GPU's compute capability: one of {', '.join(f'sm{v}' for v in KNOWN_SM)} (sm87 is "
                         "DRIVE AGX Orin and Jetson Orin, sm90 H100/H200)")
        os_version = None
        if m2 := re.fullmatch(r"dos(\d)(\d)(\d+)", os_):
            os_version = f"{m2.group(1)}.{m2.group(2)}.{int(m2.group(3))}"
            os_name = "drive-os"
        elif m2 := re.fullmatch(r"(?:l4t|jp)(\d+)", os_):
            os_name, os_version = "jetpack", m2.group(1)
        elif os_ in ("linux", "windows", "qnx"):
            os_name = os_
        else:
            raise bad(2, "dos<digits> (DRIVE OS, e.g. dos6010 = 6.0.10), jp<digits>, linux, windows or qnx")
        m = re.fullmatch(r"cu(\d{3,4})", cu)
        if not m:
            raise bad(3, "cu followed by the CUDA version digits, e.g. cu114 (11.4) or cu130 (13.0)")
        cmaj, cmin = _num(m.group(1), 2)
        m = re.fullmatch(r"trt(\d{1,4})", trt)
        if not m:
            raise bad(4, "trt followed by the TensorRT version digits, e.g. trt86 (8.6) or trt10 (10.x)")
        d = m.group(1)
        tmaj, tmin = _num(d, 2 if d.startswith("1") and len(d) >= 2 else 1)
        tensorrt = f"{tmaj}.{tmin}" if len(d) > (2 if tmaj >= 10 else 1) else f"{tmaj}"
        if tmaj < 8:
            raise bad(4, "TensorRT 8 or newer (trt8x, trt10, ...)")
        if tmaj > 10 or tmin > _TRT_LAST_MINOR.get(tmaj, 99):
            raise bad(4, "a TensorRT release: trt80..trt86 (8.0-8.6), trt90..trt93 or trt10/trt10N (10.x)")
        cpu_arch = _CPU_ALIASES[cpu.lower()]
        if os_name == "drive-os" and cpu_arch != "aarch64":
            raise bad(0, "arm64/aarch64 for a DRIVE OS target")
        return cls(spec=text, cpu_arch=cpu_arch, sm=sm_v, os=os_name, os_version=os_version,
                   cuda=f"{cmaj}.{cmin}", tensorrt=tensorrt)

    # -- derived facts --------------------------------------------------------------------------
    @property
    def trt_major(self) -> int:
        return int(self.tensorrt.split(".")[0])

    @property
    def compute_capability(self) -> str:
        return f"{self.sm // 10}.{self.sm % 10}"

    @property
    def gpu(self) -> GpuProperties | None:
        return GPU_PROPERTIES.get(self.sm)

    def nvcc_arch_flags(self) -> list[str]:
        """The ``-gencode`` flags that build SASS for exactly this SM plus PTX for it."""
        return [f"-gencode=arch=compute_{self.sm},code=sm_{self.sm}",
                f"-gencode=arch=compute_{self.sm},code=compute_{self.sm}"]

    def __str__(self) -> str:
        return self.spec
