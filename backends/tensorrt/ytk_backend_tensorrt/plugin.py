"""Registers the ``tensorrt`` engine: real TensorRT engines built and measured on this machine's GPU.

Available when ``trtexec`` or the ``tensorrt`` Python package is found (:mod:`.probe` says which, and
which version). ``compile`` builds the engine from the ONNX with the precision flags, loading every
``--custom-plugin`` as a dynamic plugin library; ``profile`` times it on model.npz's inputs, profiles
its layers and keeps its outputs. A known TensorRT failure (Error 9, a plugin not found, an entry point
missing) is one line naming the plugin, the node and what the ``.so`` registers (:mod:`.explain`).

Plugins must be TensorRT plugins: this engine asks the builder for them with :meth:`TensorRTEngine.plugin_engine_api`
(``trt8-IPluginV2DynamicExt`` for TensorRT 8.6, ``trt10-IPluginV3`` from 10).
"""

from __future__ import annotations

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import (ArchSpec, Availability, BackendInfo, CompileRequest, CompileResult, ProfileRequest,
                                  ProfileResult)

from . import __version__
from .options import EngineOptions, engine_options
from .probe import availability, find_trtexec, python_tensorrt, trtexec_tool
from .versions import V2_API, V3_API, TrtVersion

NAME = "tensorrt"


def _runner(opts: EngineOptions) -> tuple[str, object]:
    """("trtexec", TrtexecTool) or ("python", TrtVersion), as the options and this machine allow."""
    if opts.runner in ("auto", "trtexec"):
        path, why = find_trtexec(opts.trtexec)
        if path is not None:
            return "trtexec", trtexec_tool(path)
        if opts.runner == "trtexec":
            raise StageError(f"tensorrt engine: runner=trtexec but {why}")
    version, why_py = python_tensorrt()
    if version is not None:
        return "python", version
    raise StageError(f"tensorrt engine: TensorRT is not usable here ({why_py}; and no trtexec). Install TensorRT, or "
                     "point $YTK_TRTEXEC at its trtexec.")


class TensorRTEngine:
    """:class:`ytk_hookspecs.roles.EngineBackend` on TensorRT (trtexec, or the tensorrt Python package)."""

    info = BackendInfo(name=NAME, roles=["engine"], version=__version__,
                       description="TensorRT engine on this machine's GPU (trtexec or the tensorrt package): fp16/"
                                   "int8 builds, plugins as dynamic plugin libraries, per-layer profile",
                       auto_priority={"engine": 30})

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        return availability(arch)

    def plugin_engine_api(self, arch: ArchSpec) -> str:
        """The plugin interface this engine loads for ``arch``: what the target's TensorRT takes, unless the
        TensorRT here cannot load that one (an 8.6 machine and a TensorRT 10 target: IPluginV2DynamicExt,
        which TensorRT 10 loads too)."""
        want = V3_API if arch.trt_major >= 10 else V2_API
        path, _ = find_trtexec()
        local: TrtVersion | None = trtexec_tool(path).version if path else python_tensorrt()[0]
        if local is not None and want not in local.loadable_apis and V2_API in local.loadable_apis:
            return V2_API
        return want

    def compile(self, request: CompileRequest, ctx: StageContext) -> CompileResult:
        opts = engine_options(ctx.config, request.options)
        kind, found = _runner(opts)
        arch = ArchSpec.parse(request.arch)
        if kind == "trtexec":
            from .trtexec_runner import compile_engine, target_for

            return compile_engine(request, ctx, target_for(found, arch), opts)  # type: ignore[arg-type]
        from .pyapi import compile_engine as py_compile

        return py_compile(request, ctx, found, opts)  # type: ignore[arg-type]

    def profile(self, request: ProfileRequest, ctx: StageContext) -> ProfileResult:
        opts = engine_options(ctx.config, request.request.options)
        runner = request.compile.extra.get("runner", "trtexec")
        arch = ArchSpec.parse(request.request.arch)
        if runner == "trtexec":
            from .trtexec_runner import profile_engine, target_for

            path = str(request.compile.extra.get("trtexec") or "") or find_trtexec(opts.trtexec)[0]
            if not path:
                raise StageError("tensorrt engine: the engine was built with trtexec, which is not found any more")
            return profile_engine(request, ctx, target_for(trtexec_tool(path), arch), opts)
        from .pyapi import profile_engine as py_profile

        version = TrtVersion.parse(str(request.compile.extra.get("tensorrt", request.compile.backend_version)))
        return py_profile(request, ctx, version, opts)


@hookimpl
def ytk_register_backends(register):  # type: ignore[no-untyped-def]
    register(TensorRTEngine())
