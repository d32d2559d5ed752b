"""The kernel source bundle: one ``<Name>.module_source.py`` holding header, source and contract.

The file is plain Python with three string constants (``CUDA_HEADER``, ``CUDA_SOURCE``,
``PLUGIN_META_YAML``). ytk reads it with ``ast`` and never executes it, so a generated file from
a remote service cannot run code on your machine.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from .models.base import problem, write_text_atomic
from .models.kernel import PluginMeta

__all__ = ["SOURCE_SUFFIX", "BUILDER_INCLUDES", "launcher_header", "report_path", "KernelSourceError", "KernelSource"]


_FIELDS = ("CUDA_HEADER", "CUDA_SOURCE", "PLUGIN_META_YAML")


SOURCE_SUFFIX = ".module_source.py"

#: What a builder puts ahead of a bundle's header and source in the one translation unit it compiles (in this
#: order), so both may use ``cudaStream_t``, ``int64_t`` and ``size_t`` without including anything themselves.
#: A bundle may include more (``cuda_fp16.h``, ``mma.h``, ...): the CUDA toolkit's include path is on the
#: compile line; nothing else is.
BUILDER_INCLUDES = ("cuda_runtime.h", "cstdint", "cstddef")


def launcher_header(launcher: str, workspace: str | None = None) -> str:
    """A bundle's ``CUDA_HEADER``: the launcher ABI's prototypes (:mod:`ytk_hookspecs.models.kernel`) for
    ``launcher`` and, when the kernel needs scratch memory, its workspace-size function; include-guarded and
    self-contained (it includes :data:`BUILDER_INCLUDES` itself)."""
    ws = f'extern "C" size_t {workspace}(const int64_t* extents);\n' if workspace else ""
    guard = f"YTK_{launcher.upper()}_H"
    includes = "".join(f"#include <{h}>\n" for h in BUILDER_INCLUDES)
    return (f"#ifndef {guard}\n#define {guard}\n{includes}"
            f'extern "C" int {launcher}(const void* const* inputs, void* const* outputs, '
            "const int64_t* extents, void* workspace, cudaStream_t stream);\n" + ws + "#endif\n")


def report_path(source: Path) -> Path:
    """Where a kernel job's report goes: ``X.module_source.py`` -> ``X.report.json`` beside it (one report
    per source, several sources per folder). Every generator and the core follow this rule."""
    source = Path(source)
    name = source.name
    stem = name[: -len(SOURCE_SUFFIX)] if name.endswith(SOURCE_SUFFIX) else source.stem
    return source.with_name(f"{stem}.report.json")


class KernelSourceError(ValueError):
    """A kernel source bundle that cannot be read or parsed (the message names the file and what is wrong)."""
    pass


@dataclass
class KernelSource:
    """A kernel source bundle in memory: the CUDA header (:func:`launcher_header`), the CUDA source and the
    :class:`PluginMeta` contract, with the generator that wrote it; :meth:`read` / :meth:`write` for
    ``<Name>.module_source.py``."""
    header: str
    source: str
    meta: PluginMeta
    generator: str = "ytk"

    def compile_unit(self) -> str:
        """The kernel's part of the one translation unit a builder compiles: :data:`BUILDER_INCLUDES`, then the
        header and the source, each after a ``#line`` marker so that a compiler's messages name the bundle's own
        lines. A builder appends what it adds (its engine shim, its self-description) after it."""
        return "\n".join([*(f"#include <{h}>" for h in BUILDER_INCLUDES),
                          '#line 1 "CUDA_HEADER"', self.header, '#line 1 "CUDA_SOURCE"', self.source])

    # -- reading --------------------------------------------------------------------------------
    @classmethod
    def read(cls, path: str | Path) -> "KernelSource":
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as e:
            raise KernelSourceError(f"{p}: cannot read kernel source: {e.strerror}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise KernelSourceError(f"{p}: not a UTF-8 text file (byte 0x{data[e.start]:02x} at offset "
                                    f"{e.start}); a kernel source bundle is UTF-8 Python") from None
        return cls.parse(text, origin=str(p))

    @classmethod
    def parse(cls, text: str, origin: str = "<source>") -> "KernelSource":
        if not isinstance(text, str):
            raise KernelSourceError(f"{origin}: kernel source must be text, not {type(text).__name__}")
        try:
            tree = ast.parse(text)
        except SyntaxError as e:
            raise KernelSourceError(f"{origin}: not a Python file (line {e.lineno}): {e.msg}") from None
        except (ValueError, MemoryError, RecursionError) as e:
            # NUL bytes (ValueError), a megabyte-long expression (MemoryError) or deep nesting
            # (RecursionError): the parser gives up; say so instead of a traceback.
            raise KernelSourceError(f"{origin}: not a kernel source bundle: Python cannot parse it "
                                    f"({type(e).__name__}{': ' + str(e)[:200] if str(e) else ''}); a bundle "
                                    "is three plain string constants") from None
        found: dict[str, str] = {}
        generator = "unknown"
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                    if name in _FIELDS:
                        found[name] = node.value.value
                    elif name == "GENERATOR":
                        generator = node.value.value
        missing = [f for f in _FIELDS if f not in found]
        if missing:
            raise KernelSourceError(
                f"{origin}: not a kernel source bundle: missing {', '.join(missing)} "
                "(expected string constants CUDA_HEADER, CUDA_SOURCE and PLUGIN_META_YAML)")
        try:
            meta_raw = yaml.safe_load(found["PLUGIN_META_YAML"])
        except yaml.YAMLError as e:
            raise KernelSourceError(f"{origin}: plugin_meta.yaml block is not valid YAML: {e}") from None
        except (RecursionError, MemoryError) as e:
            raise KernelSourceError(f"{origin}: plugin_meta.yaml block is too deeply nested or too large "
                                    f"to read ({type(e).__name__})") from None
        except ValueError as e:  # a scalar YAML cannot convert: an integer of thousands of digits
            raise KernelSourceError(f"{origin}: plugin_meta.yaml block holds a value that cannot be read "
                                    f"({str(e).splitlines()[0][:200]})") from None
        if not isinstance(meta_raw, dict):
            raise KernelSourceError(f"{origin}: plugin_meta.yaml block must be a mapping")
        try:
            meta = PluginMeta.model_validate(meta_raw)
        except (RecursionError, MemoryError) as e:
            raise KernelSourceError(f"{origin}: plugin_meta.yaml is too deeply nested or too large to check "
                                    f"({type(e).__name__})") from None
        except ValidationError as e:
            raise KernelSourceError(f"{origin}: plugin_meta.yaml is not a valid contract ({problem(e)})") from None
        return cls(header=found["CUDA_HEADER"], source=found["CUDA_SOURCE"], meta=meta, generator=generator)

    # -- writing --------------------------------------------------------------------------------
    def meta_yaml(self) -> str:
        return yaml.safe_dump(self.meta.model_dump(mode="json", exclude_none=True), sort_keys=False)

    def render(self) -> str:
        def lit(s: str) -> str:
            # repr() always yields a valid, exact Python literal, whatever the CUDA text holds.
            return repr(s)

        return (
            f'"""Kernel source bundle for plugin {self.meta.plugin_name} '
            f'(namespace {self.meta.plugin_namespace!r}, version {self.meta.plugin_version}).\n\n'
            "Read by ytk with ast, never executed. Edit with `ytk embedded build-plugin --plugin-name`,\n"
            'which rewrites the name in a copy.\n"""\n\n'
            f"GENERATOR = {self.generator!r}\n\n"
            f"CUDA_HEADER = {lit(self.header)}\n\n"
            f"CUDA_SOURCE = {lit(self.source)}\n\n"
            f"PLUGIN_META_YAML = {lit(self.meta_yaml())}\n"
        )

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        write_text_atomic(p, self.render())
        return p

    def renamed(self, plugin_name: str, namespace: str | None = None) -> "KernelSource":
        """A copy whose contract reports ``plugin_name`` (the original is never modified)."""
        meta = self.meta.model_copy(update={"plugin_name": plugin_name,
                                            **({"plugin_namespace": namespace} if namespace is not None else {})})
        PluginMeta.model_validate(meta.model_dump())
        return KernelSource(header=self.header, source=self.source, meta=meta, generator=self.generator)
