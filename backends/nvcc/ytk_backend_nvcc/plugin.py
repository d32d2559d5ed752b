"""Registers the ``nvcc`` builder backend (role builder, automatic priority 20)."""

from __future__ import annotations

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.models import ArchSpec, Availability, BackendInfo, BuildRequest, BuildResult

from ytk_hookspecs.project_config import backend_table

from .toolchain import find_nvcc, host_arch, nvcc_version, target_problem

NAME = "nvcc"


class NvccBuilder:
    """:class:`ytk_hookspecs.roles.BuilderBackend`: a kernel source bundle becomes a launcher ``.so``."""

    info = BackendInfo(name=NAME, roles=["builder"], version="0.1.0",
                       description="local nvcc builder: kernel source bundle -> plugin .so (the bare launcher "
                                   "for the torch engine, or a TensorRT 8.6 / 10 plugin shim around it)",
                       auto_priority={"builder": 20})

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        """Available when nvcc is found and, for ``arch``, when this host can build a plugin that loads there
        (for a target of another CPU: the cross compiler and the target's CUDA runtime, from the environment
        or ``[backends.nvcc]`` in ytk.toml, as ``build_plugin`` reads them)."""
        nvcc = find_nvcc()
        if nvcc is None:
            return Availability(available=False, reason="nvcc not found (PATH, $YTK_NVCC, $CUDA_HOME/bin)")
        details = {"nvcc": nvcc, "cuda": nvcc_version(nvcc), "host": host_arch()}
        if arch is not None:
            problem = target_problem(arch, nvcc, backend_table(NAME))
            if problem:
                return Availability(available=False, reason=problem, details=details)
            return Availability(available=True, reason=f"nvcc {details['cuda']} builds for {arch.spec}",
                                details=details)
        return Availability(available=True, reason=f"nvcc {details['cuda']} at {nvcc} ({details['host']} host)",
                            details=details)

    def build_plugin(self, request: BuildRequest, ctx: StageContext) -> BuildResult:
        from .builder import build

        return build(request, ctx)


@hookimpl
def ytk_register_backends(register):  # type: ignore[no-untyped-def]
    register(NvccBuilder())
