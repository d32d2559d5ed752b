"""``-a auto``: the local GPU when there is one, else the spec's worked-example target (DRIVE AGX Orin)."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess

WORKED_EXAMPLE_ARCH = "arm64-sm87-dos6010-cu114-trt86"


def detect_arch() -> tuple[str, str]:
    """(arch spec, why)."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            cuda = torch.version.cuda or _nvcc_version() or "12.0"
            cmaj, cmin = (cuda.split(".") + ["0"])[:2]
            cpu = "x86_64" if platform.machine() in ("x86_64", "AMD64") else "aarch64"
            trt = _trt_version()
            spec = f"{cpu}-sm{major}{minor}-linux-cu{int(cmaj)}{int(cmin)}-trt{trt}"
            return spec, f"the local {torch.cuda.get_device_name(0)}"
    except Exception:
        pass
    return WORKED_EXAMPLE_ARCH, "no local CUDA GPU: the worked example's DRIVE AGX Orin target"


def _nvcc_version() -> str | None:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def _trt_version() -> str:
    try:
        import tensorrt  # type: ignore[import-not-found]

        major, minor = tensorrt.__version__.split(".")[:2]
        return f"{major}{minor}" if int(major) < 10 else major
    except Exception:
        return "10"  # the x86 deployments this targets run TensorRT 10; a torch engine ignores it


def local_gpu_name() -> str | None:
    """This machine's CUDA GPU as torch names it, or None."""
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        return None


def gpu_label(arch_spec: str, kernelgen: str) -> str:
    """What to pass as ``kernelgen compile -g``: the local GPU for local scorers, else the target's GPU."""
    from ytk_hookspecs.models import ArchSpec

    spec = ArchSpec.parse(arch_spec)
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            if major * 10 + minor == spec.sm:
                return torch.cuda.get_device_name(0)
    except Exception:
        pass
    return "Orin" if spec.sm == 87 else (spec.gpu.name if spec.gpu else f"sm{spec.sm}")


def off_target_note(device: str, arch: str | None, simulated: bool = False) -> str | None:
    """The caveat of a real measurement taken on a CPU (the torch engine with ``device = "cpu"``) for a GPU
    target: the bundle carries the target's arch spec, and its figures read like the target's. None when the
    measurement is simulated or on a GPU."""
    if simulated or not device.startswith("CPU"):
        return None  # every arch spec names a GPU (sm): a CPU measurement is never the target's
    return (f"measured on this machine's {device}, not on {f'{arch}' + chr(39) + 's' if arch else 'the target'} "
            "GPU: these timings are the CPU's, good for checking numerics, not for judging what to plug")
