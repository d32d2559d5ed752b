"""Registers the ``mock`` backend: a simulated DRIVE AGX Orin / TensorRT 8.6 for every role.

engine     a cost-model engine (``engine.py``): TensorRT-style fused layers priced from bytes and FLOPs
           at the real shapes, seeded noise, outputs computed for real on the CPU
kernelgen  contract-valid placeholder kernels (``kernelgen.py``), performance declared as SIMULATED
builder    real .so files from the system C compiler (``builder.py``), engine_api mock-cpu
"""

from __future__ import annotations

from pathlib import Path

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.models import (ArchSpec, Availability, BackendInfo, BuildRequest, BuildResult, CompileRequest,
                                  CompileResult, KernelGenRequest, KernelGenResult, ProfileRequest, ProfileResult,
                                  SupportAnswer, SupportRequest)

NAME = "mock"


class MockBackend:
    """One object serving the engine, kernelgen and builder roles (:mod:`ytk_hookspecs.roles`)."""

    info = BackendInfo(name=NAME, roles=["engine", "kernelgen", "builder"], version="0.1.0", simulated=True,
                       description="simulated DRIVE AGX Orin (TensorRT 8.6 cost model); every figure is "
                                   "labelled simulated",
                       auto_priority={"engine": 0, "kernelgen": 0, "builder": 0},
                       config_keys={"mock_bandwidth_fraction": "the fraction of the memory floor the simulated "
                                                               "kernel declares (default per region kind)",
                                    "mock_defect": "plant a wrong kernel the mock engine then computes with: shift "
                                                   "(off-by-one) or overflow (fp16); for testing what catches one"})

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        from .builder import compiler

        if compiler() is None:
            return Availability(available=False, reason="no C compiler (cc/gcc/clang) for the mock builder")
        if arch is None or arch.sm == 87:
            return Availability(available=True, reason="simulated DRIVE AGX Orin / TensorRT 8.6 (no hardware needed)")
        from .engine import device_name

        return Availability(available=True, reason=f"simulated {device_name(arch.sm).removesuffix(' (simulated)')}"
                                                   " with a TensorRT 8.6 cost model (no hardware needed)")

    # -- engine ---------------------------------------------------------------------------------
    def compile(self, request: CompileRequest, ctx: StageContext) -> CompileResult:
        from .engine import compile_engine

        return compile_engine(request, ctx)

    def profile(self, request: ProfileRequest, ctx: StageContext) -> ProfileResult:
        from .engine import profile_engine

        return profile_engine(request, ctx)

    # -- kernelgen ------------------------------------------------------------------------------
    def supports(self, request: SupportRequest, ctx: StageContext) -> SupportAnswer:
        from .kernelgen import supports

        return supports(request)

    def submit(self, request: KernelGenRequest, ctx: StageContext) -> KernelGenResult:
        from .kernelgen import submit

        return submit(request, ctx)

    def fetch(self, job_id: str, output: Path, ctx: StageContext) -> KernelGenResult | None:
        from .kernelgen import fetch

        return fetch(job_id, Path(output), ctx)

    # -- builder --------------------------------------------------------------------------------
    def build_plugin(self, request: BuildRequest, ctx: StageContext) -> BuildResult:
        from .builder import build

        return build(request, ctx)


@hookimpl
def ytk_register_backends(register):  # type: ignore[no-untyped-def]
    register(MockBackend())
