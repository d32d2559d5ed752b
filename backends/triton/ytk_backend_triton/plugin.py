"""Registers the ``triton`` kernel generator: any carved region, compiled by inductor into Triton kernels.

Chosen by name only (``--kernelgen templates,triton``, ``YTK_KERNELGEN``, ``[backends] kernelgen``): it has
no automatic priority until its plugins have been measured on a GPU end to end (docs/benchmarks.md).
"""

from __future__ import annotations

from pathlib import Path

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.models import (ArchSpec, Availability, BackendInfo, KernelGenRequest, KernelGenResult,
                                  SupportAnswer, SupportRequest)

from . import __version__

NAME = "triton"


class TritonGenerator:
    """:class:`ytk_hookspecs.roles.KernelGenBackend`: inductor's Triton kernels replayed by a C launcher."""

    info = BackendInfo(name=NAME, roles=["kernelgen"], version=__version__,
                       description="any region compiled by torch inductor into Triton kernels (Triton-only GEMM/"
                                   "conv), cubins embedded in a C launcher; scored on the local GPU",
                       config_keys={"mode": "max-autotune (default) or default: inductor's search",
                                    "allow_slower": "1: keep the plan even when the region's torch ops are faster"})

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        """Available with a CUDA GPU (inductor compiles and scores there), Triton and nvcc."""
        from ytk_hookspecs.admission import local_cuda

        from ytk_backend_nvcc.toolchain import find_nvcc

        from .aot import triton_version

        if find_nvcc() is None:
            return Availability(available=False, reason="nvcc not found (it builds the launcher)")
        if not triton_version():
            return Availability(available=False, reason="Triton is not installed (pip install triton)")
        got = local_cuda()
        if isinstance(got, str):
            return Availability(available=False, reason=f"{got} (inductor compiles and scores on a local GPU)",
                                needs_gpu=True)
        return Availability(available=True, reason=f"compiles with inductor and Triton {triton_version()} on the "
                                                   f"local {got[1]}")

    def supports(self, request: SupportRequest, ctx: StageContext) -> SupportAnswer:
        # what inductor cannot do as Triton kernels shows only when it compiles the region (a GPU job)
        return SupportAnswer(supported=True, certain=False, backend=NAME,
                             why="inductor compiles any region; the job refuses one it cannot make all-Triton")

    def submit(self, request: KernelGenRequest, ctx: StageContext) -> KernelGenResult:
        from .generate import generate

        return generate(request, Path(ctx.workdir))

    def fetch(self, job_id: str, output: Path, ctx: StageContext) -> KernelGenResult | None:
        return None  # synchronous: a job is done or failed when submit returns


@hookimpl
def ytk_register_backends(register):  # type: ignore[no-untyped-def]
    register(TritonGenerator())
