"""The self-description every ytk plugin .so carries, and how to read it without loading it.

A builder embeds :class:`PluginDescription` as JSON in an ELF section named ``.ytk_plugin_info``
and exports ``const char* ytk_plugin_info(void)`` returning the same text. ytk reads the section
straight from the file, so an aarch64 plugin cross-compiled for an Orin can be checked against its
ONNX node on an x86 host, before any engine build is paid for.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from pydantic import ValidationError

from .models.build import PluginDescription

__all__ = ["SECTION", "SYMBOL", "PluginInfoError", "c_string_literal", "c_snippet", "read_plugin_description"]


SECTION = ".ytk_plugin_info"
SYMBOL = "ytk_plugin_info"


class PluginInfoError(ValueError):
    """A plugin library whose self-description is missing or unreadable."""
    pass


def c_string_literal(text: str) -> str:
    """``text`` as a C/C++ string literal, quotes included, that cannot end early or inject code.

    Only printable ASCII other than ``"``, ``\\`` and ``?`` is written as itself; every other byte of
    the UTF-8 (newlines, NUL, non-ASCII, ``?`` that could start a trigraph such as ``??/``, a
    backslash or a quote) is a three-digit octal escape, which no following character can extend.
    """
    out = []
    for b in text.encode("utf-8"):
        c = chr(b)
        out.append(c if 0x20 <= b < 0x7F and c not in '"\\?' else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def c_snippet(desc: PluginDescription) -> str:
    """C/C++ source to compile into a plugin so that it describes itself."""
    lit = c_string_literal(desc.model_dump_json())
    return (
        "/* ytk plugin self-description (read from the ELF section without loading the .so) */\n"
        "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
        f'__attribute__((used, section("{SECTION}"), visibility("default")))\n'
        f'const char ytk_plugin_info_json[] = {lit};\n'
        f'__attribute__((visibility("default"))) const char* {SYMBOL}(void) {{ return ytk_plugin_info_json; }}\n'
        "#ifdef __cplusplus\n}\n#endif\n"
    )


def _elf_section(data: bytes, name: str, origin: str) -> bytes | None:
    if data[:4] != b"\x7fELF":
        raise PluginInfoError(f"{origin}: not an ELF shared object")
    cls, enc = data[4], data[5]
    if cls not in (1, 2) or enc not in (1, 2):
        raise PluginInfoError(f"{origin}: unsupported ELF class/encoding")
    e = "<" if enc == 1 else ">"
    try:
        if cls == 2:
            shoff, = struct.unpack_from(e + "Q", data, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x3A)
            sh_fmt, off_i, size_i = e + "IIQQQQIIQQ", 4, 5
        else:
            shoff, = struct.unpack_from(e + "I", data, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x2E)
            sh_fmt, off_i, size_i = e + "IIIIIIIIII", 4, 5
        headers = [struct.unpack_from(sh_fmt, data, shoff + i * shentsize) for i in range(shnum)]
        strtab = headers[shstrndx]
        stroff = strtab[off_i]
        for h in headers:
            nm_end = data.index(b"\0", stroff + h[0])
            if data[stroff + h[0]:nm_end].decode(errors="replace") == name:
                return data[h[off_i]:h[off_i] + h[size_i]]
    except (struct.error, IndexError, ValueError):
        raise PluginInfoError(f"{origin}: truncated or corrupt ELF file") from None
    return None


def read_plugin_description(path: str | Path) -> PluginDescription:
    """Read a plugin's self-description from its file (any CPU architecture)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise PluginInfoError(f"{p}: cannot read plugin: {e.strerror}") from None
    raw = _elf_section(data, SECTION, str(p))
    if raw is None:
        raise PluginInfoError(
            f"{p}: this .so carries no ytk self-description (section {SECTION}); it was not built by a "
            "ytk builder. Rebuild it with `ytk embedded build-plugin`.")
    text = raw.split(b"\0", 1)[0].decode(errors="replace")
    try:
        return PluginDescription.model_validate(json.loads(text))
    except (json.JSONDecodeError, ValidationError) as e:
        raise PluginInfoError(f"{p}: its self-description is unreadable: {e}") from None
