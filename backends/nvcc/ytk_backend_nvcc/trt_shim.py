"""TensorRT plugin shims around a kernel's extern "C" launcher, generated from its plugin_meta.

Two engine APIs, chosen by the target's TensorRT (the arch spec's ``trtNN``, see :func:`engine_api_for`):

``trt8-IPluginV2DynamicExt``  TensorRT 8.6: ``IPluginV2DynamicExt`` + ``IPluginCreator``; the library exports
                              ``getPluginCreators`` and ``setLoggerFinder`` (what ``--dynamicPlugins`` and
                              ``IPluginRegistry::loadLibrary`` look for).
``trt10-IPluginV3``           TensorRT 10+: ``IPluginV3`` (OneCore/OneBuild/OneRuntime) + ``IPluginCreatorV3One``;
                              the library exports ``getCreators`` and ``setLoggerFinder``.

Both register one creator under the selector's namespace and one under the empty namespace (TensorRT's
ONNX parser looks a plugin up by name, version and the node's ``plugin_namespace``, empty when absent);
``supportsFormatCombination`` accepts exactly the declared type and format at each position; output dims
are built with ``IExprBuilder`` from the contract's shape expressions (:class:`ExprBuilderTranslator`,
constants folded); attributes given to the creator are kept, serialised into the engine and restored,
with a fingerprint of the plugin_meta that refuses an engine built against another contract; one
global logger comes from ``setLoggerFinder``.

The C++ lives in ``shims/*.inc.cpp`` (real files, readable as C++); this module only fills in the
contract. Every string that reaches the C++ is either checked to be an identifier (names pasted as
code: launcher, workspace, extents) or written as an escaped C string literal (names, namespace,
version, tensor names); shape expressions are parsed by :mod:`ytk_hookspecs.shape_expr` and lowered
node by node, never pasted.

Linking: nothing generated calls into libnvinfer (TensorRT resolves the exported entry points itself),
so the library needs no ``-lnvinfer``; the builder links with ``-z defs`` so that a reference to a
TensorRT symbol would fail the build rather than the engine load.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ytk_hookspecs import shape_expr
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import ArchSpec, PluginMeta
from ytk_hookspecs.models.kernel import C_IDENTIFIER
from ytk_hookspecs.plugin_info import c_string_literal

#: engine API -> (template file, the exported entry points TensorRT looks for)
TRT_APIS: dict[str, tuple[str, tuple[str, ...]]] = {
    "trt8-IPluginV2DynamicExt": ("v2_dynamic_ext.inc.cpp", ("getPluginCreators", "setLoggerFinder")),
    "trt10-IPluginV3": ("v3_one.inc.cpp", ("getCreators", "setLoggerFinder")),
}
SHIM_DIR = Path(__file__).parent / "shims"

INCLUDE_ENV = "YTK_TENSORRT_INCLUDE"
HOME_ENV = "TENSORRT_HOME"
STANDARD_INCLUDES = ("/usr/include/x86_64-linux-gnu", "/usr/include/aarch64-linux-gnu")

_DTYPES = {"float16": "kHALF", "float32": "kFLOAT", "int32": "kINT32", "int8": "kINT8"}
_NAMESPACE = re.compile(r"^[A-Za-z0-9_]*$")
_VERSION = re.compile(r"^[A-Za-z0-9_.]{1,32}$")
_IDENT = re.compile(C_IDENTIFIER)
_INT32 = (-(2**31), 2**31 - 1)
MAX_DIMS = 8  # nvinfer1::Dims::MAX_DIMS


class ShimError(ValueError):
    """The contract cannot be turned into a shim (the message says which field and why)."""


# -- which interface -------------------------------------------------------------------------------------------
def engine_api_for(arch: ArchSpec) -> str:
    """The TensorRT plugin interface a plugin for ``arch`` is built with: IPluginV3 from TensorRT 10 on,
    IPluginV2DynamicExt for 8.x (the first with dynamic plugin libraries is 8.6)."""
    return "trt10-IPluginV3" if arch.trt_major >= 10 else "trt8-IPluginV2DynamicExt"


def api_problem(api: str, arch: ArchSpec) -> str:
    """Why ``api`` cannot be loaded by the TensorRT of ``arch`` ('' when it can)."""
    if api == "trt10-IPluginV3" and arch.trt_major < 10:
        return (f"engine API {api} needs TensorRT 10 or newer but target {arch.spec} runs TensorRT {arch.tensorrt}; "
                f"its plugins are built as {engine_api_for(arch)}")
    if api == "trt8-IPluginV2DynamicExt" and (arch.trt_major, _minor(arch)) < (8, 6):
        return (f"engine API {api} needs TensorRT 8.6 or newer (dynamic plugin libraries) but target {arch.spec} "
                f"runs TensorRT {arch.tensorrt}")
    return ""


def _minor(arch: ArchSpec) -> int:
    parts = arch.tensorrt.split(".")
    return int(parts[1]) if len(parts) > 1 else 0


def _expected_minor(arch: ArchSpec) -> int:
    """The minor version the headers must have: the arch's when it names one (trt86), else any (-1)."""
    return int(arch.tensorrt.split(".")[1]) if "." in arch.tensorrt else -1


# -- the headers -----------------------------------------------------------------------------------------------
def _has_headers(d: Path) -> bool:
    return (d / "NvInferRuntime.h").is_file() and (d / "NvInferVersion.h").is_file()


def find_tensorrt_include(sysroot: Path | None = None) -> Path:
    """The directory holding ``NvInferRuntime.h``: ``$YTK_TENSORRT_INCLUDE``, else ``$TENSORRT_HOME/include``,
    else the Debian/Ubuntu package locations -- inside the target's ``sysroot`` for a cross build. A
    variable that is set but points at no headers is an error (never silently replaced by another TensorRT)."""
    env = os.environ.get(INCLUDE_ENV)
    if env:
        if _has_headers(Path(env)):
            return Path(env)
        raise StageError(f"${INCLUDE_ENV}={env} holds no NvInferRuntime.h/NvInferVersion.h; point it at the "
                         "directory with the TensorRT headers of the target")
    home = os.environ.get(HOME_ENV)
    if home:
        if _has_headers(Path(home) / "include"):
            return Path(home) / "include"
        raise StageError(f"${HOME_ENV}={home} has no include/NvInferRuntime.h; point it at a TensorRT install "
                         f"(the directory holding include/ and lib/) or set {INCLUDE_ENV}")
    places = [Path(str(sysroot) + d) for d in STANDARD_INCLUDES] if sysroot else [Path(d) for d in STANDARD_INCLUDES]
    for d in places:
        if _has_headers(d):
            return d
    raise StageError(
        f"TensorRT headers not found: set {INCLUDE_ENV} to the directory holding NvInferRuntime.h, or {HOME_ENV} "
        f"to a TensorRT install (its include/); looked in {', '.join(map(str, places))}. The TensorRT Python "
        "wheels ship no headers; the target's TensorRT SDK (or DRIVE OS / JetPack sysroot) does.")


def header_version(include: Path) -> tuple[int, int, int]:
    """(major, minor, patch) of the headers in ``include``; both the plain ``#define NV_TENSORRT_MAJOR 8`` and
    the indirect ``#define NV_TENSORRT_MAJOR TRT_MAJOR_ENTERPRISE`` forms are read."""
    text = (include / "NvInferVersion.h").read_text(errors="replace")
    defines = dict(re.findall(r"^\s*#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)[ \t]+([^\s/]+)", text, re.M))

    def value(name: str) -> int:
        v = defines.get(name, "")
        for _ in range(4):
            if v.isdigit():
                return int(v)
            v = defines.get(v, "")
        raise StageError(f"{include / 'NvInferVersion.h'}: cannot read {name}")

    return value("NV_TENSORRT_MAJOR"), value("NV_TENSORRT_MINOR"), value("NV_TENSORRT_PATCH")


def headers_for(arch: ArchSpec, sysroot: Path | None = None) -> tuple[Path, tuple[int, int, int]]:
    """The TensorRT headers to build a plugin for ``arch`` with, checked to be its version."""
    inc = find_tensorrt_include(sysroot)
    ver = header_version(inc)
    want_minor = _expected_minor(arch)
    if ver[0] != arch.trt_major or (want_minor >= 0 and ver[1] != want_minor):
        raise StageError(
            f"the TensorRT headers in {inc} are {'.'.join(map(str, ver))} but target {arch.spec} runs TensorRT "
            f"{arch.tensorrt}; a plugin must be compiled against its engine's TensorRT. Point {INCLUDE_ENV} (or "
            f"{HOME_ENV}) at the TensorRT {arch.tensorrt} headers.")
    return inc, ver


# -- shape expressions -> nodes ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Const:
    value: int


@dataclass(frozen=True)
class InDim:
    tensor: int
    axis: int


@dataclass(frozen=True)
class OutDim:
    tensor: int
    axis: int


@dataclass(frozen=True)
class ExtentRef:
    index: int


@dataclass(frozen=True)
class Op:
    op: str  # a DimensionOperation: kSUM kSUB kPROD kFLOOR_DIV kCEIL_DIV kMAX kMIN
    a: "Node"
    b: "Node"


Node = Const | InDim | OutDim | ExtentRef | Op

_BINOPS = {ast.Add: "kSUM", ast.Sub: "kSUB", ast.Mult: "kPROD", ast.FloorDiv: "kFLOOR_DIV"}
_CALLS = {"cdiv": "kCEIL_DIV", "max": "kMAX", "min": "kMIN"}


def _apply(op: str, a: int, b: int, where: str) -> int:
    if op in ("kFLOOR_DIV", "kCEIL_DIV") and b == 0:
        raise ShimError(f"{where}: division by zero")
    return {"kSUM": lambda: a + b, "kSUB": lambda: a - b, "kPROD": lambda: a * b, "kFLOOR_DIV": lambda: a // b,
            "kCEIL_DIV": lambda: -(-a // b), "kMAX": lambda: max(a, b), "kMIN": lambda: min(a, b)}[op]()


def fold(op: str, a: Node, b: Node, where: str = "shape expression") -> Node:
    """``a op b`` with constants folded and the identities x+0, x-0, x*1, x*0, x//1, cdiv(x,1), max/min(x,x)."""
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(_apply(op, a.value, b.value, where))
    zero, one = Const(0), Const(1)
    if op == "kSUM" and zero in (a, b):
        return b if a == zero else a
    if op == "kSUB" and b == zero:
        return a
    if op in ("kSUM", "kSUB") and isinstance(b, Const) and isinstance(a, Op) and a.op in ("kSUM", "kSUB") \
            and isinstance(a.b, Const):
        # (x + c1) - c2 -> x + (c1 - c2): one operation instead of two
        c = (a.b.value if a.op == "kSUM" else -a.b.value) + (b.value if op == "kSUM" else -b.value)
        return a.a if c == 0 else Op("kSUM" if c > 0 else "kSUB", a.a, Const(abs(c)))
    if op == "kPROD":
        if zero in (a, b):
            return zero
        if one in (a, b):
            return b if a == one else a
    if op in ("kFLOOR_DIV", "kCEIL_DIV"):
        if b == zero:
            raise ShimError(f"{where}: division by zero")
        if b == one:
            return a
    if op in ("kMAX", "kMIN") and a == b:
        return a
    return Op(op, a, b)


class Lowering:
    """Lowers parsed shape expressions to :data:`Node` trees for a contract with ``in_ranks`` input ranks.

    ``names`` maps an extent name to what it stands for: its own lowered tree (inlined, so constants fold
    across extents, for IExprBuilder) or an :class:`ExtentRef` (for the run-time code, which keeps ``e[i]``).
    ``out_known`` maps an already-lowered output dim ``(k, axis)`` to its tree, for ``outK[axis]`` references.
    """

    def __init__(self, in_ranks: list[int], out_ranks: list[int] | None = None) -> None:
        self.in_ranks = in_ranks
        self.out_ranks = out_ranks or []
        self.names: dict[str, Node] = {}
        self.out_known: dict[tuple[int, int], Node] | None = None  # None: outK[...] refers to the actual dims

    def lower(self, expr: str, where: str) -> Node:
        try:
            tree = shape_expr.parse(expr)
        except shape_expr.ShapeExprError as e:
            raise ShimError(f"{where}: {e}") from None
        try:
            return self._node(tree, f"{where} ({expr!r})")
        except RecursionError:
            raise ShimError(f"{where}: expression too deeply nested") from None

    def _node(self, n: ast.AST, where: str) -> Node:
        if isinstance(n, ast.Constant):
            return Const(int(n.value))
        if isinstance(n, ast.Name):
            if n.id not in self.names:
                raise ShimError(f"{where}: unknown name {n.id!r} (not an extent declared before it)")
            return self.names[n.id]
        if isinstance(n, ast.Subscript):
            assert isinstance(n.value, ast.Name) and isinstance(n.slice, ast.Constant)
            m = re.fullmatch(r"(in|out)([0-9]{1,3})", n.value.id)
            if not m:
                raise ShimError(f"{where}: {n.value.id!r} is neither inK nor outK")
            k, axis = int(m.group(2)), int(n.slice.value)
            if m.group(1) == "in":
                if k >= len(self.in_ranks):
                    raise ShimError(f"{where}: no input {k} (the contract has {len(self.in_ranks)})")
                if not 0 <= axis < self.in_ranks[k]:
                    raise ShimError(f"{where}: input {k} has rank {self.in_ranks[k]}, no axis {axis}")
                return InDim(k, axis)
            if self.out_known is not None:
                if (k, axis) not in self.out_known:
                    raise ShimError(f"{where}: out{k}[{axis}] is not an output dim computed before this one")
                return self.out_known[(k, axis)]
            if k >= len(self.out_ranks) or not 0 <= axis < self.out_ranks[k]:
                raise ShimError(f"{where}: no output dim out{k}[{axis}]")
            return OutDim(k, axis)
        if isinstance(n, ast.UnaryOp):
            return fold("kSUB", Const(0), self._node(n.operand, where), where)
        if isinstance(n, ast.BinOp):
            return fold(_BINOPS[type(n.op)], self._node(n.left, where), self._node(n.right, where), where)
        if isinstance(n, ast.Call):
            a, b = (self._node(x, where) for x in n.args)
            return fold(_CALLS[n.func.id], a, b, where)  # type: ignore[attr-defined]
        raise ShimError(f"{where}: unsupported expression")


class ExprBuilderTranslator:
    """Emits C++ statements that build :data:`Node` trees with ``nvinfer1::IExprBuilder``.

    Each operation becomes one named temporary (``t0``, ``t1``, ...) checked for null; a subtree used twice
    is built once. Input dims are ``inputs[k].d[axis]``; constants ``exprBuilder.constant(v)``.
    """

    def __init__(self, builder: str = "exprBuilder", inputs: str = "inputs") -> None:
        self.builder = builder
        self.inputs = inputs
        self.lines: list[str] = []
        self._memo: dict[Node, str] = {}

    def emit(self, node: Node) -> str:
        """A C++ expression of type ``nvinfer1::IDimensionExpr const*`` for ``node``."""
        if node in self._memo:
            return self._memo[node]
        if isinstance(node, Const):
            if not _INT32[0] <= node.value <= _INT32[1]:
                raise ShimError(f"constant {node.value} does not fit IExprBuilder::constant (int32 in TensorRT 8.6)")
            name = self._temp(f"{self.builder}.constant({node.value})")
        elif isinstance(node, InDim):
            return f"{self.inputs}[{node.tensor}].d[{node.axis}]"
        elif isinstance(node, Op):
            a, b = self.emit(node.a), self.emit(node.b)
            name = self._temp(f"{self.builder}.operation(nvinfer1::DimensionOperation::{node.op}, *{a}, *{b})")
        else:
            raise ShimError(f"cannot build {node} with IExprBuilder")
        self._memo[node] = name
        return name

    def _temp(self, expr: str) -> str:
        name = f"t{len(self._memo)}"
        self.lines.append(f"nvinfer1::IDimensionExpr const* {name} = {expr};")
        self.lines.append(f"if ({name} == nullptr) {{ return false; }}")
        return name


def runtime_cpp(node: Node) -> str:
    """``node`` as an int64 C++ expression over ``in``/``out`` dims and the extents ``e`` (Python semantics:
    floor division; ``ok`` is cleared on a division by zero or a missing axis)."""
    if isinstance(node, Const):
        return f"INT64_C({node.value})"
    if isinstance(node, InDim):
        return f"dimOf(in, kNbInputs, {node.tensor}, {node.axis}, ok)"
    if isinstance(node, OutDim):
        return f"dimOf(out, kNbOutputs, {node.tensor}, {node.axis}, ok)"
    if isinstance(node, ExtentRef):
        return f"e[{node.index}]"
    a, b = runtime_cpp(node.a), runtime_cpp(node.b)
    return {"kSUM": f"({a} + {b})", "kSUB": f"({a} - {b})", "kPROD": f"({a} * {b})",
            "kFLOOR_DIV": f"floorDiv({a}, {b}, ok)", "kCEIL_DIV": f"ceilDiv({a}, {b}, ok)",
            "kMAX": f"std::max<int64_t>({a}, {b})", "kMIN": f"std::min<int64_t>({a}, {b})"}[node.op]


# -- the contract block ------------------------------------------------------------------------------------------
def check_strings(meta: PluginMeta) -> None:
    """Refuse a contract whose strings could not be pasted into C++ safely (even one built without validation)."""
    for field, value, rule, ok in (
            ("plugin_name", meta.plugin_name, "a C identifier", _IDENT),
            ("plugin_namespace", meta.plugin_namespace, "letters, digits and _ (or empty)", _NAMESPACE),
            ("plugin_version", meta.plugin_version, "1 to 32 letters, digits, _ or .", _VERSION),
            ("launcher", meta.launcher, "a C identifier", _IDENT),
            ("workspace", meta.workspace or "x", "a C identifier", _IDENT)):
        if not isinstance(value, str) or not ok.fullmatch(value):
            raise ShimError(f"plugin_meta {field} {value!r} is not {rule}; it cannot name a TensorRT plugin")
    if not meta.inputs or not meta.outputs:
        raise ShimError("a TensorRT plugin layer needs at least one input and one output")
    for name in meta.extents:
        if not isinstance(name, str) or not _IDENT.fullmatch(name):
            raise ShimError(f"plugin_meta extent name {name!r} is not a C identifier")
    for kind, ts in (("input", meta.inputs), ("output", meta.outputs)):
        for i, t in enumerate(ts):
            if t.dtype not in _DTYPES:
                raise ShimError(f"{kind} {i} ({t.name}): dtype {t.dtype!r} has no TensorRT DataType here")
            if not re.fullmatch(r"k[A-Z0-9]+", str(t.format)):
                raise ShimError(f"{kind} {i} ({t.name}): format {t.format!r} is not a TensorFormat")
            if not 0 < len(t.shape) <= MAX_DIMS:
                raise ShimError(f"{kind} {i} ({t.name}): rank {len(t.shape)}; TensorRT tensors have 1 to {MAX_DIMS}")


def format_table(meta: PluginMeta) -> list[tuple[int, str, str]]:
    """What ``supportsFormatCombination`` accepts: per position (inputs, then outputs), the one DataType and
    TensorFormat declared."""
    return [(pos, _DTYPES[t.dtype], str(t.format)) for pos, t in enumerate([*meta.inputs, *meta.outputs])]


def fingerprint(meta: PluginMeta) -> str:
    """What ties an engine to the contract its plugin layers were built against."""
    return hashlib.sha256(meta.model_dump_json().encode()).hexdigest()


def _tensor_labels(meta: PluginMeta) -> list[str]:
    return [f"{kind} {i} ({t.name})" for kind, ts in (("input", meta.inputs), ("output", meta.outputs))
            for i, t in enumerate(ts)]


def contract_cpp(meta: PluginMeta) -> str:
    """The generated part of the shim: names, tables, extents, shape checks and output dims."""
    check_strings(meta)
    n_in, n_out = len(meta.inputs), len(meta.outputs)
    tensors = [*meta.inputs, *meta.outputs]
    in_ranks = [len(t.shape) for t in meta.inputs]
    out_ranks = [len(t.shape) for t in meta.outputs]
    labels = _tensor_labels(meta)
    scope = f"{meta.plugin_namespace}::" if meta.plugin_namespace else ""
    display = f"{scope}{meta.plugin_name} v{meta.plugin_version}"
    out: list[str] = [
        f"constexpr char kName[] = {c_string_literal(meta.plugin_name)};",
        f"constexpr char kVersion[] = {c_string_literal(meta.plugin_version)};",
        f"constexpr char kNamespace[] = {c_string_literal(meta.plugin_namespace)};",
        f"constexpr char kDisplayName[] = {c_string_literal(display)};",
        f"constexpr char kFingerprint[] = {c_string_literal(fingerprint(meta))};",
        f"constexpr int32_t kNbInputs = {n_in};",
        f"constexpr int32_t kNbOutputs = {n_out};",
        f"constexpr int32_t kNbExtents = {len(meta.extents)};",
        "",
        "// At each of TensorRT's inOut positions (inputs, then outputs): the one type and format accepted.",
        "constexpr DataType kTypes[] = {",
        *[f"    DataType::{_DTYPES[t.dtype]}, // {pos}: {t.dtype}" for pos, t in enumerate(tensors)],
        "};",
        "constexpr TensorFormat kFormats[] = {",
        *[f"    TensorFormat::{t.format}," for t in tensors],
        "};",
        f"constexpr int32_t kRanks[] = {{{', '.join(str(len(t.shape)) for t in tensors)}}};",
        "constexpr char const* kTensorNames[] = {",
        *[f"    {c_string_literal(label)}," for label in labels],
        "};",
        "",
    ]
    ws = (f"    return {meta.workspace}(e);" if meta.workspace else "    return 0;")
    out += ["size_t workspaceBytes(int64_t const* e) noexcept", "{",
            ws if meta.workspace else "    (void) e;\n" + ws, "}", ""]

    # run time: extents in launcher order, then every tensor's expected dims
    rt = Lowering(in_ranks, out_ranks)
    out += ["// The launcher's extents, in declaration order, from the input dims.",
            "bool computeExtents(Dims const* in, int64_t* e) noexcept", "{", "    bool ok = true;"]
    for i, (name, expr) in enumerate(meta.extents.items()):
        node = rt.lower(expr, f"extent {name}")
        if _uses_outputs(node):
            raise ShimError(f"extent {name} ({expr!r}) refers to an output; extents are computed from the inputs")
        out.append(f"    e[{i}] = {runtime_cpp(node)}; // {name} = {_canonical(expr)}")
        rt.names[name] = ExtentRef(i)
    out += ["    (void) in;", "    return ok;", "}", "", _EXPECTED_SHAPE_HEAD]
    for pos, t in enumerate(tensors):
        out.append(f"    case {pos}: // {_comment(labels[pos])}")
        for axis, expr in enumerate(t.shape):
            node = rt.lower(expr, f"shape of {labels[pos]} axis {axis}")
            out.append(f"        want[{axis}] = {runtime_cpp(node)}; // {_canonical(expr)}")
        out.append("        return true;")
    out += ["    }", "    return false;", "}", ""]

    # build time: output dims with IExprBuilder, extents inlined so that constants fold
    bt = Lowering(in_ranks, out_ranks)
    bt.out_known = {}
    for name, expr in meta.extents.items():
        bt.names[name] = bt.lower(expr, f"extent {name}")
    tr = ExprBuilderTranslator()
    assigns: list[str] = []
    for k, t in enumerate(meta.outputs):
        assigns.append(f"outputs[{k}].nbDims = {len(t.shape)};")
        for axis, expr in enumerate(t.shape):
            node = bt.lower(expr, f"shape of output {k} ({t.name}) axis {axis}")
            bt.out_known[(k, axis)] = node
            assigns.append(f"outputs[{k}].d[{axis}] = {tr.emit(node)}; // {_canonical(expr)}")
    out += [_OUTPUT_SHAPES_HEAD, *[f"    {line}" for line in tr.lines], *[f"    {line}" for line in assigns],
            "    return true;", "}"]
    return "\n".join(out)


_EXPECTED_SHAPE_HEAD = """\
// The dims each tensor must have (inputs, then outputs), from its shape expressions.
bool expectedShape(int32_t pos, Dims const* in, Dims const* out, int64_t const* e, int64_t* want, bool& ok) noexcept
{
    (void) in; (void) out; (void) e; (void) ok;
    switch (pos)
    {"""

_OUTPUT_SHAPES_HEAD = """\
// Output dims for getOutputDimensions / getOutputShapes, built with IExprBuilder.
bool outputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs* outputs,
    nvinfer1::IExprBuilder& exprBuilder) noexcept
{
    if (inputs == nullptr || outputs == nullptr || nbInputs != kNbInputs)
    {
        return false;
    }
    for (int32_t i = 0; i < kNbInputs; ++i)
    {
        if (inputs[i].nbDims != kRanks[i])
        {
            return false;
        }
    }
    (void) exprBuilder;"""


def _uses_outputs(node: Node) -> bool:
    if isinstance(node, OutDim):
        return True
    return isinstance(node, Op) and (_uses_outputs(node.a) or _uses_outputs(node.b))


def _canonical(expr: str) -> str:
    """An expression as a comment: re-printed from its parse tree, so nothing but the grammar's characters."""
    return _comment(ast.unparse(shape_expr.parse(expr)))


def _comment(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_ +\-*/()\[\],.:]", "?", text).replace("*/", "* /")[:200]


def shim_source(meta: PluginMeta, api: str, expect_major: int, expect_minor: int = -1) -> str:
    """The C++ of the ``api`` shim for ``meta``, compiled against TensorRT ``expect_major.expect_minor``
    headers (``-1``: any minor). Raises :class:`ShimError` for a contract that cannot become one."""
    if api not in TRT_APIS:
        raise ShimError(f"no TensorRT shim for engine API {api!r} (there are {', '.join(TRT_APIS)})")
    contract = contract_cpp(meta)
    common = (SHIM_DIR / "common.inc.cpp").read_text()
    body = (SHIM_DIR / TRT_APIS[api][0]).read_text()
    ws_decl = f'extern "C" size_t {meta.workspace}(int64_t const* extents);' if meta.workspace else ""
    fills = {"@@EXPECT_MAJOR@@": str(int(expect_major)), "@@EXPECT_MINOR@@": str(int(expect_minor)),
             "@@LAUNCHER@@": meta.launcher, "@@WORKSPACE_DECL@@": ws_decl, "@@CONTRACT@@": contract}
    text = common + "\n" + body
    for marker, value in fills.items():
        text = text.replace(marker, value)
    left = re.findall(r"@@[A-Z_]+@@", text)
    if left:
        raise ShimError(f"shim template left unfilled: {', '.join(sorted(set(left)))}")
    return text


def shim_for(meta: PluginMeta, api: str, arch: ArchSpec) -> str:
    """:func:`shim_source` for the TensorRT version of ``arch``."""
    return shim_source(meta, api, arch.trt_major, _expected_minor(arch))
