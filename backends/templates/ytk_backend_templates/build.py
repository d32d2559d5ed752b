"""Building variants: scoring libraries of several variants each, compiled in parallel with nvcc.

Variants of one region are grouped about four per translation unit, cut where the variants' names
say: not per CPU count, so a build cache made on one machine is hit on another, and not by position,
so a variant added to a space leaves most libraries' text (and cached builds) as they were (see
``library_groups``). Each library also carries the plugin self-description, so the scoring harness
loads it with the same ``LauncherLibrary`` the engine uses, binding each variant's launcher symbol.
A library that fails to compile is split and its variants built one by one, so one bad variant
costs only itself.

The cache (``$YTK_TEMPLATES_CACHE`` or ``<workdir>/templates/nvcc-cache``) is keyed by nvcc
version, arch, flags and the full source text; it is a build cache, never a result cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ytk_backend_nvcc.builder import describe
from ytk_backend_nvcc.toolchain import BASE_FLAGS, NvccError, compile_shared, find_nvcc, nvcc_version
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import ArchSpec, PluginMeta
from ytk_hookspecs.plugin_info import c_snippet

from .emit_common import PRELUDE, Variant

VARIANTS_PER_LIBRARY = 4


def library_groups(variants: list[Variant], size: int = VARIANTS_PER_LIBRARY) -> list[list[Variant]]:
    """``variants`` in order, in libraries of about ``size`` (``size // 2`` to ``size + size // 2``)
    cut where the variants' names say: a library ends before a variant whose name hashes to 0 mod
    ``size - 1`` once it holds ``size // 2``, or when full. A cut follows the variants, not their
    positions, so adding or removing one variant changes the library it falls in and at most the
    few after it up to the next cut (on the spaces here 1.7 libraries on average), not every one."""
    lo, hi = size // 2, size + size // 2
    groups: list[list[Variant]] = []
    for v in variants:
        cut = hashlib.sha256(v.name.encode()).digest()[0] % max(1, size - 1) == 0
        if not groups or len(groups[-1]) >= hi or (cut and len(groups[-1]) >= lo):
            groups.append([])
        groups[-1].append(v)
    return groups


@dataclass
class BuiltLibrary:
    path: Path | None
    variants: list[Variant]
    log: str = ""
    error: str = ""
    cached: bool = False


@dataclass
class BuildOutcome:
    libraries: list[BuiltLibrary] = field(default_factory=list)

    def library_of(self, v: Variant) -> BuiltLibrary | None:
        for lib in self.libraries:
            if lib.path is not None and any(x.launcher == v.launcher for x in lib.variants):
                return lib
        return None

    def error_of(self, v: Variant) -> str:
        for lib in self.libraries:
            if any(x.launcher == v.launcher for x in lib.variants) and lib.path is None:
                return lib.error
        return ""


def translation_unit(variants: list[Variant], meta: PluginMeta, arch: ArchSpec) -> str:
    """Prelude, each variant in its namespace, and a self-description naming the first variant."""
    bench_meta = meta.model_copy(update={"launcher": variants[0].launcher, "workspace": variants[0].workspace})
    src = KernelSource(header="", source="", meta=bench_meta, generator="ytk-templates")
    body = PRELUDE + "\n".join(v.body for v in variants)
    sha = hashlib.sha256(body.encode()).hexdigest()
    desc = describe(src, arch, sha, builder="ytk-backend-templates (scoring library)", engine_api="torch-launcher")
    return body + "\n" + c_snippet(desc) + _ERROR_HELPER


_ERROR_HELPER = ('extern "C" __attribute__((visibility("default"))) const char* ytk_cuda_error_string(int code) '
                 "{ return cudaGetErrorString((cudaError_t)code); }\n")


def cache_dir(workdir: Path | None) -> Path | None:
    env = os.environ.get("YTK_TEMPLATES_CACHE")
    if env:
        return Path(env)
    return Path(workdir) / "templates" / "nvcc-cache" if workdir else None


def _cache_key(text: str, arch: ArchSpec, flags: tuple[str, ...]) -> str:
    nvcc = find_nvcc() or ""
    blob = "\0".join([nvcc_version(nvcc) if nvcc else "", arch.spec, *BASE_FLAGS, *flags, text])
    return hashlib.sha256(blob.encode()).hexdigest()[:40]


def compile_cached(text: str, output: Path, arch: ArchSpec, cache: Path | None,
                   flags: tuple[str, ...] = ()) -> tuple[str, bool]:
    """Compile ``text`` into ``output`` (ptxas resource report kept); returns (log, cache hit)."""
    key = _cache_key(text, arch, flags)
    if cache is not None:
        hit = cache / f"{key}.so"
        if hit.is_file():
            shutil.copyfile(hit, output)
            os.chmod(output, 0o755)
            log = cache / f"{key}.log"
            return (log.read_text() if log.is_file() else ""), True
    res = compile_shared(text, output, arch, extra_flags=flags, ptxas_verbose=True)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, suffix=".tmp")
        os.close(fd)
        shutil.copyfile(output, tmp)
        os.replace(tmp, cache / f"{key}.so")
        (cache / f"{key}.log").write_text(res.log)
    return res.log, False


def build_variants(variants: list[Variant], meta: PluginMeta, arch: ArchSpec, out_dir: Path,
                   cache: Path | None = None, jobs: int | None = None, progress=None) -> BuildOutcome:  # type: ignore[no-untyped-def]
    """Compile every variant (grouped into libraries) for ``arch``; failures are recorded, not raised."""
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = library_groups(variants)
    jobs = jobs or max(1, min(len(groups), os.cpu_count() or 1))

    def one(idx_group: tuple[int, list[Variant]]) -> list[BuiltLibrary]:
        idx, group = idx_group
        path = out_dir / f"variants_{idx:03d}.so"
        try:
            log, cached = compile_cached(translation_unit(group, meta, arch), path, arch, cache)
            return [BuiltLibrary(path, group, log, cached=cached)]
        except NvccError as e:
            if len(group) == 1:
                return [BuiltLibrary(None, group, e.log, error=str(e))]
        out = []
        for j, v in enumerate(group):
            p = out_dir / f"variants_{idx:03d}_{j}.so"
            try:
                log, cached = compile_cached(translation_unit([v], meta, arch), p, arch, cache)
                out.append(BuiltLibrary(p, [v], log, cached=cached))
            except NvccError as e:
                out.append(BuiltLibrary(None, [v], e.log, error=str(e)))
        return out

    outcome = BuildOutcome()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for libs in pool.map(one, enumerate(groups)):
            outcome.libraries.extend(libs)
            if progress is not None:
                progress.advance(sum(len(lib.variants) for lib in libs))
    if not any(lib.path for lib in outcome.libraries):
        first = next((lib.error for lib in outcome.libraries if lib.error), "no variants")
        raise StageError(f"no kernel variant compiled for {arch.spec}: {first}")
    return outcome


def winner_source(variant: Variant, meta: PluginMeta) -> tuple[str, str]:
    """(header, source) of a bundle holding only the winning variant, launcher renamed to the contract's."""
    from ytk_hookspecs.kernel_source import launcher_header

    body = variant.body.replace(variant.launcher, meta.launcher)
    if variant.workspace and meta.workspace:
        body = body.replace(variant.workspace, meta.workspace)
    return launcher_header(meta.launcher, meta.workspace), PRELUDE + body
