"""Mock plugin builder: a real shared object, built with the system C compiler, with no GPU code.

The .so embeds the plugin's self-description (so ``compile`` checks it exactly as it checks a real
plugin) and exports the launcher and workspace symbols of the contract. The launcher returns
``cudaErrorNotSupported``: there is no kernel, and its engine_api ``mock-cpu`` tells any real engine
to refuse it. Only the mock engine accepts it, and prices it from its declared characteristics.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ytk_hookspecs.models.base import replace_file
from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.kernel_source import KernelSource, KernelSourceError
from ytk_hookspecs.models import ArchSpec, ArchSpecError, BuildRequest, BuildResult, PluginDescription
from ytk_hookspecs.models.kernel import C_IDENTIFIER
from ytk_hookspecs.plugin_info import c_snippet

_MACHINE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def describe(src: KernelSource, arch: ArchSpec, source_sha256: str) -> PluginDescription:
    m = src.meta
    return PluginDescription(
        name=m.plugin_name, namespace=m.plugin_namespace, version=m.plugin_version, num_inputs=len(m.inputs),
        num_outputs=len(m.outputs), input_dtypes=[t.dtype for t in m.inputs],
        output_dtypes=[t.dtype for t in m.outputs], input_formats=[t.format for t in m.inputs],
        output_formats=[t.format for t in m.outputs], sm=arch.sm,
        cpu_arch=_MACHINE.get(platform.machine().lower(), platform.machine()), engine_api="mock-cpu",
        launcher=m.launcher, builder="mock", source_sha256=source_sha256, meta_yaml=src.meta_yaml())


def _ident(value: str, field: str) -> str:
    """A contract field pasted into the C file as a name: a C identifier, or the build stops."""
    if not re.fullmatch(C_IDENTIFIER, value or ""):
        raise StageError(f"plugin_meta {field} {value!r} is not a C identifier; refusing to paste it into C")
    return value


def _c_file(src: KernelSource, desc: PluginDescription) -> str:
    m = src.meta
    _ident(m.launcher, "launcher")
    if m.workspace:
        _ident(m.workspace, "workspace")
    lines = [
        "/* ytk mock plugin: self-description + contract symbols, no GPU code (SIMULATED target). */",
        "#include <stddef.h>", "#include <stdint.h>", "", c_snippet(desc), "",
        f"int {m.launcher}(const void* const* inputs, void* const* outputs, const int64_t* extents,",
        "                 void* workspace, void* stream) {",
        "    (void)inputs; (void)outputs; (void)extents; (void)workspace; (void)stream;",
        "    return 801; /* cudaErrorNotSupported: a mock plugin has no kernel */", "}",
    ]
    if m.workspace:
        lines += ["", f"size_t {m.workspace}(const int64_t* extents) {{ (void)extents; return 0; }}"]
    return "\n".join(lines) + "\n"


def build(request: BuildRequest, ctx: StageContext) -> BuildResult:
    t0 = time.perf_counter()
    if request.engine_api not in (None, "mock-cpu"):
        raise StageError(f"the mock builder only builds engine_api mock-cpu plugins (no GPU code), not "
                         f"{request.engine_api}; use a real builder (--builder nvcc or gaia)")
    try:
        arch = ArchSpec.parse(request.arch)
    except ArchSpecError as e:
        raise StageError(str(e)) from None
    try:
        src = KernelSource.read(request.source)
    except KernelSourceError as e:
        raise StageError(str(e)) from None
    if src.meta.plugin_name != request.plugin_name:
        raise StageError(f"{request.source} reports plugin {src.meta.plugin_name!r}, not {request.plugin_name!r}; "
                         "the core renames the source before building")
    cc = compiler()
    if cc is None:
        raise StageError("the mock builder needs a C compiler (cc, gcc or clang) on PATH")
    desc = describe(src, arch, hashlib.sha256(Path(request.source).read_bytes()).hexdigest())
    out = Path(request.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ytk-mock-build-") as td, \
            ctx.progress(f"mock build {request.plugin_name} ({cc})"):
        c = Path(td) / f"{request.plugin_name}.c"
        c.write_text(_c_file(src, desc))
        tmp_so = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        cmd = [cc, "-shared", "-fPIC", "-O1", "-o", str(tmp_so), str(c)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            tmp_so.unlink(missing_ok=True)
            raise StageError(f"the mock builder's C compile failed ({' '.join(cmd)}):\n{p.stderr.strip()[-2000:]}")
        replace_file(tmp_so, out)
    log = f"$ {' '.join(cmd)}\n{p.stdout}{p.stderr}"
    return BuildResult(so_path=out, description=desc, log=log, wall_s=round(time.perf_counter() - t0, 3))
