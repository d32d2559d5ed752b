"""Registers the ``mock`` backend: a simulated target for the engine, kernelgen and builder roles."""

from __future__ import annotations

import shutil

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import (Availability, BackendInfo, BuildRequest, BuildResult, CompileRequest,
                                  CompileResult, KernelGenRequest, KernelGenResult, ProfileRequest,
                                  ProfileResult)

NAME = "mock"


def _probe() -> Availability:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return Availability(available=False, reason="no C compiler (cc/gcc) for the mock builder")
    return Availability(available=True, reason="simulated DRIVE AGX Orin / TensorRT 8.6 (no hardware needed)")


@hookimpl
def ytk_register_backend(register):  # type: ignore[no-untyped-def]
    register(BackendInfo(name=NAME, roles=["engine", "kernelgen", "builder"], version="0.1.0", simulated=True,
                         description="simulated DRIVE AGX Orin (TensorRT 8.6 cost model); every figure is "
                                     "labelled simulated",
                         auto_priority={"engine": 0, "kernelgen": 0, "builder": 0}), _probe)


def _not_yet(stage: str) -> StageError:
    return StageError(f"the mock backend's {stage} stage lands with issue #5; nothing was run")


@hookimpl
def ytk_engine_compile(request: CompileRequest, ctx: StageContext) -> CompileResult:
    raise _not_yet("compile")


@hookimpl
def ytk_engine_profile(request: ProfileRequest, ctx: StageContext) -> ProfileResult:
    raise _not_yet("profile")


@hookimpl
def ytk_kernelgen_submit(request: KernelGenRequest, ctx: StageContext) -> KernelGenResult:
    raise _not_yet("kernelgen")


@hookimpl
def ytk_kernelgen_fetch(job_id: str, output, ctx: StageContext):  # type: ignore[no-untyped-def]
    return None


@hookimpl
def ytk_build_plugin(request: BuildRequest, ctx: StageContext) -> BuildResult:
    raise _not_yet("build_plugin")
