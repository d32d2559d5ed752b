"""``build_plugin`` for nvcc: a kernel source bundle becomes a self-describing plugin .so.

Engine APIs built (``BuildRequest.engine_api``):

``torch-launcher`` (the default, when the request names none)
    the bare extern "C" launcher the torch engine calls.
``trt8-IPluginV2DynamicExt`` / ``trt10-IPluginV3``
    the same launcher wrapped in a TensorRT plugin shim generated from the plugin_meta
    (:mod:`ytk_backend_nvcc.trt_shim`), compiled against the target's TensorRT headers
    (``$YTK_TENSORRT_INCLUDE``, ``$TENSORRT_HOME/include`` or the system locations) and linked
    without libnvinfer (``-z defs`` proves it). Which of the two a TensorRT engine needs follows the
    arch spec's ``trtNN`` (:func:`ytk_backend_nvcc.trt_shim.engine_api_for`); asking for one the
    target's TensorRT cannot load is an error.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.kernel_source import KernelSource, KernelSourceError
from ytk_hookspecs.models import ArchSpec, ArchSpecError, BuildRequest, BuildResult, PluginDescription
from ytk_hookspecs.plugin_info import c_snippet

from ytk_hookspecs.launcher import ERROR_STRING_SYMBOL
from .cross import check_output, cross_setup, setting
from .toolchain import NvccError, compile_shared, find_nvcc, host_arch, nvcc_version, target_problem
from .trt_shim import TRT_APIS, ShimError, api_problem, headers_for, shim_for

#: What this builder builds.
ENGINE_APIS = ("torch-launcher", *TRT_APIS)

_ERROR_STRING_C = (
    "/* lets ytk name a launcher's cudaError_t without linking the CUDA runtime itself */\n"
    f'extern "C" __attribute__((visibility("default"))) const char* {ERROR_STRING_SYMBOL}(int code) '
    "{ return cudaGetErrorString((cudaError_t)code); }\n")


def describe(src: KernelSource, arch: ArchSpec, source_sha256: str, builder: str,
             engine_api: str = "torch-launcher") -> PluginDescription:
    """The self-description compiled into a plugin built from ``src`` for ``arch``."""
    m = src.meta
    return PluginDescription(
        name=m.plugin_name, namespace=m.plugin_namespace, version=m.plugin_version,
        num_inputs=len(m.inputs), num_outputs=len(m.outputs),
        input_dtypes=[t.dtype for t in m.inputs], output_dtypes=[t.dtype for t in m.outputs],
        input_formats=[t.format for t in m.inputs], output_formats=[t.format for t in m.outputs],
        sm=arch.sm, cpu_arch=arch.cpu_arch, engine_api=engine_api, launcher=m.launcher, builder=builder,
        source_sha256=source_sha256, meta_yaml=src.meta_yaml())


def translation_unit(src: KernelSource, desc: PluginDescription, shim: str = "") -> str:
    """The one .cu nvcc compiles: header, source, the error-string helper, the engine shim (if any) and
    the self-description.

    Concatenated rather than ``#include``-d so that a bundle needs no file-name convention for its
    header; ``#line`` markers keep nvcc's messages pointing at the bundle's own lines.
    """
    parts = [src.compile_unit(), '#line 1 "ytk_builder"', _ERROR_STRING_C]
    if shim:
        parts += [f'#line 1 "ytk_{desc.engine_api.replace("-", "_")}_shim"', shim]
    return "\n".join([*parts, '#line 1 "ytk_plugin_info"', c_snippet(desc)])


def build(request: BuildRequest, ctx: StageContext) -> BuildResult:
    """Compile ``request.source`` for ``request.arch`` into ``request.output`` (atomically)."""
    api = request.engine_api or "torch-launcher"
    if api not in ENGINE_APIS:
        raise StageError(f"the nvcc builder cannot build engine API {api!r}; it builds {', '.join(ENGINE_APIS)}")
    try:
        arch = ArchSpec.parse(request.arch)
    except ArchSpecError as e:
        raise StageError(str(e)) from None
    if api in TRT_APIS and api_problem(api, arch):
        raise StageError(f"cannot build plugin {request.plugin_name!r}: {api_problem(api, arch)}")
    nvcc = find_nvcc()
    if nvcc is None:
        raise StageError("nvcc not found: install the CUDA toolkit, put nvcc on PATH or set YTK_NVCC")
    problem = target_problem(arch, nvcc, ctx.config)
    trt_headers = None
    if api in TRT_APIS:
        sysroot = setting("target_sysroot", ctx.config) if arch.cpu_arch != host_arch() else ""
        try:
            trt_headers = headers_for(arch, Path(sysroot) if sysroot else None)
        except StageError as e:
            if not problem:
                raise
            problem += f"; and the TensorRT {arch.tensorrt} headers: {e}"  # every missing piece in one line
    if problem:
        raise StageError(f"cannot build plugin {request.plugin_name!r} for {arch.spec} here: {problem}")
    cross = cross_setup(arch, nvcc, ctx.config, nvcc_version(nvcc)) if arch.cpu_arch != host_arch() else None
    try:
        src = KernelSource.read(request.source)
    except KernelSourceError as e:
        raise StageError(str(e)) from None
    if src.meta.plugin_name != request.plugin_name:
        try:
            src = src.renamed(request.plugin_name)
        except ValueError as e:  # pydantic's ValidationError: the name is no C identifier
            raise StageError(f"plugin name {request.plugin_name!r} is not a valid plugin name (a C identifier): "
                             f"{str(e).splitlines()[0]}") from None
    shim, flags, builder = "", (), f"ytk-backend-nvcc (nvcc {nvcc_version(nvcc)})"
    if api in TRT_APIS:
        assert trt_headers is not None
        include, version = trt_headers
        try:
            shim = shim_for(src.meta, api, arch)
        except ShimError as e:
            raise StageError(f"cannot wrap plugin {request.plugin_name!r} as {api}: {e}") from None
        # -z defs: every symbol resolved at link time, so the shim provably needs nothing from libnvinfer
        flags = ("-I", str(include), "-Xlinker", "-z,defs")
        builder = (f"ytk-backend-nvcc (nvcc {nvcc_version(nvcc)}, TensorRT {'.'.join(map(str, version))} "
                   "headers)")
    sha = hashlib.sha256(Path(request.source).read_bytes()).hexdigest()
    desc = describe(src, arch, sha, builder=builder, engine_api=api)
    t0 = time.perf_counter()
    log_path = Path(request.output).with_suffix(Path(request.output).suffix + ".build.log")
    with ctx.progress(f"nvcc: building {request.plugin_name} for sm_{arch.sm}", total=1) as task:
        try:
            res = compile_shared(translation_unit(src, desc, shim), request.output, arch, extra_flags=flags,
                                 ptxas_verbose=True, cross=cross)
        except NvccError as e:
            # Keep the whole compiler output: the message carries only its tail.
            _write_log(log_path, e.log)
            raise StageError(f"{e}\n(full build log: {log_path})") from None
        task.advance()
    log = " ".join(res.cmd) + "\n" + res.log
    if cross is not None:
        # what loads on the target is checked here, on the host: its CPU and the C/C++ runtime it needs
        try:
            facts = check_output(Path(request.output), arch, cross)
        except StageError as e:
            Path(request.output).unlink(missing_ok=True)
            _write_log(log_path, f"{log}\n{e}\n")
            raise StageError(f"{e} (build log: {log_path})") from None
        log += f"\ncross build for {arch.cpu_arch}: {facts.summary()}\n"
        ctx.log.info("cross build checked", plugin=request.plugin_name, elf=facts.summary())
    _write_log(log_path, log)
    ctx.log.info("plugin built", plugin=request.plugin_name, so=str(request.output), sm=arch.sm, engine_api=api,
                 wall_s=round(res.wall_s, 2), log=str(log_path))
    return BuildResult(so_path=Path(request.output), description=desc, log=log, wall_s=time.perf_counter() - t0)


def _write_log(path: Path, text: str) -> None:
    from ytk_hookspecs.models import write_text_atomic

    write_text_atomic(path, text)
