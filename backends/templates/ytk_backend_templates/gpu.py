"""The local GPU the templates generator scores on, and matching it to the user's ``-g``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import ArchSpec, ArchSpecError

from ytk_backend_nvcc.toolchain import find_nvcc, host_arch, nvcc_version


@dataclass
class LocalGpu:
    name: str
    sm: int
    l2_bytes: int
    sm_count: int
    index: int = 0

    def arch(self) -> ArchSpec:
        """An arch spec for building scoring libraries for this GPU on this host."""
        nvcc = find_nvcc()
        ver = (nvcc_version(nvcc) if nvcc else "") or "12.0"
        major, minor = (ver.split(".") + ["0"])[:2]
        return ArchSpec.parse(f"{host_arch()}-sm{self.sm}-linux-cu{int(major)}{int(minor)}-trt10")


def local_gpu() -> LocalGpu | None:
    """The first CUDA device torch sees, or None (no torch, no CUDA)."""
    try:
        import torch
    except ImportError:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        p = torch.cuda.get_device_properties(0)
    except Exception:
        return None
    return LocalGpu(name=p.name, sm=p.major * 10 + p.minor, l2_bytes=int(getattr(p, "L2_cache_size", 50 << 20)),
                    sm_count=p.multi_processor_count)


def _tokens(s: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", s.lower()) if t and t not in ("nvidia", "geforce", "tesla", "gpu")}


def gpu_matches(requested: str, actual: str) -> bool:
    """``-g H200`` matches "NVIDIA H200"; ``-g Orin`` does not match an H200."""
    want = _tokens(requested)
    return bool(want) and want <= _tokens(actual)


def sm_mismatch(gpu: LocalGpu, spec: ArchSpec) -> str | None:
    """Why ``gpu`` cannot score kernels for target ``spec`` (another sm), or None when it can."""
    if spec.sm == gpu.sm:
        return None
    return (f"target {spec.spec} is sm_{spec.sm} but the local {gpu.name} is sm_{gpu.sm}: kernels are scored on "
            "the GPU that runs them; generate on a GPU of the target's kind")


def require_gpu(requested: str, arch: str | None) -> LocalGpu:
    """The local GPU, checked against ``-g`` and the target arch; a clear StageError otherwise."""
    gpu = local_gpu()
    if gpu is None:
        raise StageError(
            f"the templates kernel generator scores every kernel on a local CUDA GPU, and this machine has none "
            f"(or torch cannot see it). Run kernelgen on a machine with a {requested} GPU, or pick another "
            "kernelgen backend.")
    if not gpu_matches(requested, gpu.name):
        raise StageError(
            f"-g {requested} asks for kernels scored on a {requested}, but the local GPU is a {gpu.name}. The "
            "templates generator scores kernels on the GPU that runs them, because the fastest variant on one GPU "
            f"is not the fastest on another; run it where a {requested} is, or pass -g '{gpu.name}'.")
    if arch:
        try:
            spec = ArchSpec.parse(arch)
        except ArchSpecError as e:
            raise StageError(str(e)) from None
        why = sm_mismatch(gpu, spec)
        if why:
            raise StageError(why + ".")
    return gpu
