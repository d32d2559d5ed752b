"""Registers the ``templates`` backend: local kernel generation, scored on the local GPU."""

from __future__ import annotations

from pathlib import Path

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.models import (ArchSpec, Availability, BackendInfo, KernelGenRequest, KernelGenResult,
                                  SupportAnswer, SupportRequest)

from . import __version__

NAME = "templates"


class TemplatesGenerator:
    """:class:`ytk_hookspecs.roles.KernelGenBackend`: recognised regions become autotuned CUDA templates."""

    info = BackendInfo(name=NAME, roles=["kernelgen"], version=__version__,
                       description="CUDA templates for recognised regions (depthwise conv, LiteMLA), autotuned "
                                   "and checked on the local GPU",
                       auto_priority={"kernelgen": 20},
                       config_keys={
                           "max_variants": "score only the first N variants of the region's space (0: all)",
                           "fp16_weights": "1 (default): variants holding the weights in fp16 may win; 0: only "
                                           "fp32-exact weights",
                           "allow_slower": "1: keep the best variant even when the region's torch ops are faster",
                           "check_build": "0: skip the final nvcc build of the winner's bundle",
                       })

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        """Available with a CUDA GPU to score on and nvcc to build with, for targets of that GPU's sm."""
        from ytk_backend_nvcc.toolchain import find_nvcc

        from .gpu import local_gpu, sm_mismatch

        if find_nvcc() is None:
            return Availability(available=False, reason="nvcc not found (needed to build kernel variants)")
        gpu = local_gpu()
        if gpu is None:
            return Availability(available=False, reason="no CUDA device to score kernels on", needs_gpu=True)
        why = sm_mismatch(gpu, arch) if arch is not None else None
        if why:
            return Availability(available=False, reason=why, needs_gpu=True)
        return Availability(available=True, reason=f"scores kernels on the local {gpu.name} (sm_{gpu.sm})",
                            details={"gpu": gpu.name, "sm": str(gpu.sm)})

    def supports(self, request: SupportRequest, ctx: StageContext) -> SupportAnswer:
        from .supports import supports

        return supports(request)

    def submit(self, request: KernelGenRequest, ctx: StageContext) -> KernelGenResult:
        from .generate import generate

        return generate(request, ctx)

    def fetch(self, job_id: str, output: Path, ctx: StageContext) -> KernelGenResult | None:
        if not str(job_id).startswith(f"{NAME}-"):
            return None
        from .generate import fetch

        return fetch(job_id, Path(output) if output else None, ctx)


@hookimpl
def ytk_register_backends(register):  # type: ignore[no-untyped-def]
    register(TemplatesGenerator())
