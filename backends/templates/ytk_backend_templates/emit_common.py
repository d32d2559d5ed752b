"""What every template shares: its CUDA files, their instantiation per variant, the variant record.

The CUDA lives in ``cuda/*.cuh`` (package data). A variant is one instantiation of a template: its
own C++ namespace (named after the variant, see :func:`variant_namespace`) holding the variant's
parameters as ``constexpr`` values and the template's text, with the template's ``#if`` sections
selected by a few macros defined just before and undefined just after. So a scoring library can
hold several variants of a region in one translation unit (one nvcc run), and the winner is emitted
alone unchanged.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources


@functools.cache
def cuda_text(name: str) -> str:
    """The text of ``cuda/<name>`` (package data)."""
    return (resources.files(__package__) / "cuda" / name).read_text(encoding="utf-8")


#: Includes and the ``ytk_tpl`` helpers, once at the top of every translation unit.
PRELUDE = cuda_text("prelude.cuh")

#: Device code of each activation on a float ``v`` (fp32, matching torch's definitions).
ACTIVATION_CODE = {
    "none": "return v;",
    "relu": "return fmaxf(v, 0.f);",
    "relu6": "return fminf(fmaxf(v, 0.f), 6.f);",
    # v * relu6(v + 3) / 6 as v * saturate(v / 6 + 1/2): one FFMA.SAT and one FMUL instead of five
    "hardswish": "return v * __saturatef(fmaf(v, 1.f / 6.f, 0.5f));",
    "silu": "return v / (1.f + __expf(-v));",
    "gelu": "return 0.5f * v * (1.f + erff(v * 0.70710678118654752f));",
    "gelu_tanh": "return 0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)));",
    # the gates of squeeze-excite blocks (MobileNetV3: hardsigmoid = relu6(v + 3) / 6; EfficientNet: sigmoid)
    "hardsigmoid": "return __saturatef(fmaf(v, 1.f / 6.f, 0.5f));",
    "sigmoid": "return 1.f / (1.f + __expf(-v));",
    "tanh": "return tanhf(v);",
}

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def variant_namespace(name: str) -> str:
    """The C++ namespace of the variant called ``name``: ``ytk_<name>``. A variant's name spells out
    every one of its parameters, so the namespace follows the variant, not its place in the list:
    adding a variant to a space leaves every other variant's text (and cached build) as it was."""
    ns = f"ytk_{name}"
    if not _IDENT.fullmatch(ns):
        raise ValueError(f"variant name {name!r} does not make a C++ identifier")
    return ns


def _literal(value: bool | int | float) -> tuple[str, str]:
    if isinstance(value, bool):
        return "bool", "true" if value else "false"
    if isinstance(value, int):
        return "int", str(value)
    return "float", float_literal(value)


def instantiate(ns: str, template: str, params: Mapping[str, bool | int | float], macros: Mapping[str, int] = {},
                act: str | None = None, before: Sequence[str] = (), undef: Sequence[str] = (),
                gate: str | None = None) -> str:
    """``cuda/<template>`` instantiated in namespace ``ns``: ``macros`` defined around it (they select
    the template's ``#if`` sections), ``params`` as ``constexpr`` values (bool, int, float) and, with
    ``act``, the activation ``float act(float v)`` at the top of the namespace (with ``gate``, a
    second one, ``float gate(float v)``), then the texts of the
    ``before`` files (developer-only includes) and the template; after it ``macros`` and the
    template's own macros named in ``undef`` are undefined, so the next variant starts clean."""
    out = [f"#define {k} {v}" for k, v in macros.items()]
    out.append(f"namespace {ns} {{")
    for k, v in params.items():
        ctype, text = _literal(v)
        out.append(f"constexpr {ctype} {k} = {text};")
    if act is not None:
        out.append(f"__device__ __forceinline__ float act(float v) {{ {act} }}")
    if gate is not None:
        out.append(f"__device__ __forceinline__ float gate(float v) {{ {gate} }}")
    out += [cuda_text(f) for f in before]
    out += [cuda_text(template) + f"}}  // namespace {ns}"]
    out += [f"#undef {k}" for k in [*macros, *undef]]
    return "\n".join(out) + "\n"


def plain_launcher(ns: str, symbol: str) -> str:
    """The extern "C" launcher ``symbol`` of a kernel without workspace: forwards to ``ns::launch``."""
    return (f'\nextern "C" int {symbol}(const void* const* inputs, void* const* outputs, const int64_t* extents,\n'
            f"                     void* workspace, cudaStream_t stream) {{\n"
            f"  (void)workspace;\n  return {ns}::launch(inputs, outputs, extents, stream);\n}}\n")


def workspace_launcher(ns: str, symbol: str, workspace: str) -> str:
    """The extern "C" launcher ``symbol`` of a kernel with a workspace, and its ``workspace`` size query:
    both forward to ``ns::launch`` and ``ns::workspace_bytes``."""
    return (f'\nextern "C" int {symbol}(const void* const* inputs, void* const* outputs, const int64_t* extents,\n'
            f"                     void* workspace, cudaStream_t stream) {{\n"
            f"  return {ns}::launch(inputs, outputs, extents, workspace, stream);\n}}\n"
            f'extern "C" size_t {workspace}(const int64_t* extents) {{ return {ns}::workspace_bytes(extents); }}\n')


@dataclass(frozen=True)
class Variant:
    """One emitted kernel variant: its name, tuning parameters and CUDA text (in ``namespace``)."""

    name: str
    params: dict[str, int | str] = field(hash=False)
    body: str = field(hash=False, repr=False)
    launcher: str = ""
    workspace: str | None = None
    namespace: str = ""


def rounds_weights_to_fp16(params: Mapping[str, int | str]) -> bool:
    """Whether a variant with these parameters holds its weights in fp16 (``weights: fp16``, the
    depthwise tensor-core taps): scored against the budget plus that rounding's bound, and kept out
    of the search by ``--config fp16_weights=0``."""
    return params.get("weights") == "fp16"


def float_literal(x: float) -> str:
    """An exact C float literal for ``x`` (repr round-trips the double; the f suffix rounds once)."""
    return f"{float(x)!r}f"
