"""Contract checks: does a kernel, or a built plugin, fit the ONNX node it is meant to replace?

Every check here runs before something expensive (a build, an engine compile) and answers with
findings that name the node, the plugin and what differs. Errors stop the command; warnings are
printed and the command goes on. Three places use them:

* ``kernelgen compile`` checks a generated source against its region's ``candidates.json`` entry;
* ``build-plugin`` checks a source on its own (and against a candidate when one is given);
* ``compile`` checks each plugin's self-description against its custom-op node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ytk_hookspecs import shape_expr
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import Candidate, PluginDescription, PluginMeta

#: The activation dtype an engine of each precision feeds a plugin.
ENGINE_DTYPE = {"fp16": "float16", "fp32": "float32"}

#: Which dtypes TensorRT accepts for each tensor format (TensorRT 8.6 / 10 format documentation).
FORMAT_DTYPES = {
    "kLINEAR": {"float16", "float32", "int32", "int8"},
    "kHWC8": {"float16"},
    "kCHW32": {"float16", "int8"},
    "kHWC": {"float16", "float32"},
}

ERROR_9 = ("TensorRT reports this as Error 9, \"could not find any supported formats consistent with input/output "
           "data types\": a format error for what is really an arity problem. Lifted weights are real inputs of the "
           "node, so the kernel must take them as inputs instead of baking them in.")


@dataclass
class Finding:
    level: Literal["error", "warning"]
    message: str


@dataclass
class ContractReport:
    """The findings of one check, with the subject it was about (a file or a node)."""

    subject: str
    findings: list[Finding] = field(default_factory=list)

    def error(self, msg: str) -> None:
        self.findings.append(Finding("error", msg))

    def warn(self, msg: str) -> None:
        self.findings.append(Finding("warning", msg))

    def extend(self, other: "ContractReport") -> None:
        self.findings.extend(other.findings)

    @property
    def errors(self) -> list[str]:
        return [f.message for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[str]:
        return [f.message for f in self.findings if f.level == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict[str, object]:
        return {"subject": self.subject, "ok": self.ok, "errors": self.errors, "warnings": self.warnings}


# -- a kernel source on its own ------------------------------------------------------------------

def check_meta(meta: PluginMeta, subject: str = "") -> ContractReport:
    """Intrinsic checks of a plugin_meta: expressions parse, extents resolve, formats fit dtypes."""
    rep = ContractReport(subject or meta.plugin_name)
    if meta.deployment_target != "tensorrt":
        rep.error(f"plugin {meta.plugin_name}: deployment_target is {meta.deployment_target!r}; only a kernel "
                  "generated with --config deployment_target=tensorrt can be built into an engine plugin")
    names = [t.name for t in (*meta.inputs, *meta.outputs)]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        rep.error(f"plugin {meta.plugin_name}: tensor names repeat: {', '.join(dup)}")
    known: set[str] = set()
    for ext, expr in meta.extents.items():
        _check_expr(rep, meta, f"extent {ext}", expr, len(meta.inputs), known)
        known.add(ext)
    for kind, tensors in (("input", meta.inputs), ("output", meta.outputs)):
        for i, t in enumerate(tensors):
            if t.format not in FORMAT_DTYPES or t.dtype not in FORMAT_DTYPES[t.format]:
                rep.error(f"plugin {meta.plugin_name}: {kind} {i} ({t.name}) is {t.dtype} in {t.format}, a "
                          f"combination TensorRT does not support ({t.format} takes "
                          f"{', '.join(sorted(FORMAT_DTYPES.get(t.format, set())))})")
            if t.format == "kHWC8" and len(t.shape) != 4:
                rep.error(f"plugin {meta.plugin_name}: {kind} {i} ({t.name}) is kHWC8 but has rank {len(t.shape)}; "
                          "kHWC8 is a 4-D (NCHW logical) layout")
            for ax, expr in enumerate(t.shape):
                _check_expr(rep, meta, f"{kind} {i} ({t.name}) dim {ax}", expr, len(meta.inputs), known)
    if meta.accumulation == "float16":
        rep.warn(f"plugin {meta.plugin_name}: accumulates in float16; long reductions lose precision "
                 "(fp32 accumulation is the norm for fp16 kernels)")
    return rep


def _check_expr(rep: ContractReport, meta: PluginMeta, what: str, expr: str, n_inputs: int,
                known: set[str]) -> None:
    import ast

    try:
        tree = shape_expr.parse(expr)
    except shape_expr.ShapeExprError as e:
        rep.error(f"plugin {meta.plugin_name}: {what}: {e}")
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            ref = node.value.id
            if not ref.startswith("in") or not ref[2:].isdigit() or int(ref[2:]) >= n_inputs:
                rep.error(f"plugin {meta.plugin_name}: {what}: {expr!r} refers to {ref}, but the plugin has "
                          f"{n_inputs} input(s) (in0..in{n_inputs - 1})")
        elif isinstance(node, ast.Name) and node.id not in ("cdiv", "max", "min") \
                and not node.id.startswith(("in", "out")) and node.id not in known:
            rep.error(f"plugin {meta.plugin_name}: {what}: {expr!r} uses {node.id!r}, which is no extent declared "
                      "before it")


def check_source(src: KernelSource, subject: str = "") -> ContractReport:
    """Intrinsic checks of a kernel source bundle, including that its CUDA defines the launcher."""
    rep = check_meta(src.meta, subject)
    for sym, what in ((src.meta.launcher, "launcher"), (src.meta.workspace, "workspace function")):
        # A declaration in the header is not enough: the definition belongs to the CUDA source.
        if sym and f"{sym}(" not in src.source.replace(f"{sym} (", f"{sym}("):
            rep.error(f"plugin {src.meta.plugin_name}: the {what} {sym!r} declared in plugin_meta is not defined in "
                      "the CUDA source; the plugin could not be linked")
    return rep


# -- a kernel against its region ------------------------------------------------------------------

def check_meta_against_candidate(meta: PluginMeta, cand: Candidate, precision: str) -> ContractReport:
    """Arity, roles, dtypes, layouts and output shapes of a kernel against its carved region."""
    rep = ContractReport(f"{meta.plugin_name} vs region {cand.name}")
    n_node = len(cand.input_roles)
    n_act = cand.input_roles.count("activation")
    if len(meta.inputs) != n_node:
        rep.error(f"input arity: region {cand.name}'s ONNX node has {n_node} inputs ({n_act} activation(s) + "
                  f"{n_node - n_act} lifted weight(s)) but kernel {meta.plugin_name} declares {len(meta.inputs)}. "
                  + ERROR_9)
        return rep
    n_out = len(cand.sites[0].outputs) if cand.sites else len(meta.outputs)
    if len(meta.outputs) != n_out:
        rep.error(f"output arity: region {cand.name} has {n_out} output(s) but kernel {meta.plugin_name} declares "
                  f"{len(meta.outputs)}")
        return rep
    for i, (t, role) in enumerate(zip(meta.inputs, cand.input_roles)):
        if t.role != role:
            rep.error(f"input {i} ({t.name}): the region's node passes a {role} there but the kernel declares a "
                      f"{t.role} (inputs are the activations in first-use order, then each conv's weight and bias)")
    _check_dtypes(rep, meta.plugin_name, [t.dtype for t in meta.inputs], cand.input_roles,
                  [t.dtype for t in meta.outputs], precision)
    _check_layouts(rep, meta, cand.input_roles, precision)
    for site in cand.sites:
        shapes = [list(x.shape) for x in site.inputs]
        if any(not isinstance(d, int) for s in shapes for d in s):
            continue
        try:
            ext = shape_expr.evaluate_extents(meta.extents, shapes)
            for i, (t, want) in enumerate(zip(meta.outputs, site.outputs)):
                got = [shape_expr.evaluate(e, shapes, ext) for e in t.shape]
                if got != list(want.shape):
                    rep.error(f"output {i} ({t.name}) at site {site.index} ({site.module_path}): the kernel's shape "
                              f"expressions give {got} but the region produces {list(want.shape)}")
            for i, (t, have) in enumerate(zip(meta.inputs, site.inputs)):
                got = [shape_expr.evaluate(e, shapes, ext) for e in t.shape]
                if len(got) != len(have.shape) or got != list(have.shape):
                    rep.error(f"input {i} ({t.name}) at site {site.index} ({site.module_path}): the kernel expects "
                              f"shape {got} but the node feeds {list(have.shape)}")
        except (shape_expr.ShapeExprError, ZeroDivisionError) as e:
            rep.error(f"site {site.index} ({site.module_path}): the kernel's shape expressions do not evaluate: {e}")
    return rep


def _check_dtypes(rep: ContractReport, plugin: str, in_dtypes: Sequence[str], roles: Sequence[str],
                  out_dtypes: Sequence[str], precision: str) -> None:
    want = ENGINE_DTYPE[precision]
    for i, (dt, role) in enumerate(zip(in_dtypes, roles)):
        if role == "activation" and dt != want:
            rep.error(f"precision: input {i} of {plugin} is {dt} but a {precision} engine feeds {want} activations"
                      + (" (an fp32-only kernel cannot go into an fp16 engine)" if precision == "fp16" else ""))
        elif role != "activation" and dt not in ("float16", "float32"):
            rep.error(f"precision: input {i} of {plugin} is a lifted {role} declared {dt}; weights are float tensors")
    for i, dt in enumerate(out_dtypes):
        if dt != want:
            rep.error(f"precision: output {i} of {plugin} is {dt} but a {precision} engine expects {want}")


def _check_layouts(rep: ContractReport, meta: PluginMeta, roles: Sequence[str], precision: str) -> None:
    if precision != "fp16":
        return
    linear = [f"input {i} ({t.name})" for i, (t, r) in enumerate(zip(meta.inputs, roles))
              if r == "activation" and len(t.shape) == 4 and t.format == "kLINEAR"]
    linear += [f"output {i} ({t.name})" for i, t in enumerate(meta.outputs)
               if len(t.shape) == 4 and t.format == "kLINEAR"]
    if linear:
        rep.warn(f"layout: {meta.plugin_name} takes {', '.join(linear)} as NCHW (kLINEAR); an fp16 engine keeps "
                 "4-D activations channels-last (kHWC8), so every such edge gets a reformat that can cost more "
                 "than the kernel saves")


# -- a built plugin against its ONNX node ---------------------------------------------------------

@dataclass
class NodeInput:
    name: str
    dtype: str
    is_weight: bool


@dataclass
class CustomNode:
    """A custom-op node of an ONNX graph, as TensorRT will look its plugin up."""

    name: str
    op_type: str
    namespace: str
    version: str
    domain: str
    inputs: list[NodeInput]
    outputs: list[str]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.op_type, self.version)

    @property
    def label(self) -> str:
        return f"{self.namespace}::{self.op_type} v{self.version}"

    def arity_text(self) -> str:
        w = sum(1 for i in self.inputs if i.is_weight)
        return f"{len(self.inputs)} inputs ({len(self.inputs) - w} activation(s) + {w} lifted weight(s))"


def plugin_label(d: PluginDescription) -> str:
    return f"{d.namespace}::{d.name} v{d.version}"


def check_plugin_against_node(desc: PluginDescription, node: CustomNode, precision: str,
                              origin: str = "") -> ContractReport:
    """Arity and dtypes of a built plugin against the node it resolves (name already matched)."""
    src = f" ({origin})" if origin else ""
    rep = ContractReport(f"node {node.name} / plugin {plugin_label(desc)}{src}")
    if desc.num_inputs != len(node.inputs):
        rep.error(f"node {node.name} ({node.label}) has {node.arity_text()} but plugin {plugin_label(desc)}{src} "
                  f"reports num_inputs={desc.num_inputs}. " + ERROR_9)
        return rep
    if desc.num_outputs != len(node.outputs):
        rep.error(f"node {node.name} ({node.label}) has {len(node.outputs)} output(s) but plugin "
                  f"{plugin_label(desc)}{src} reports num_outputs={desc.num_outputs}")
        return rep
    roles = ["weight" if i.is_weight else "activation" for i in node.inputs]
    inner = ContractReport(rep.subject)
    _check_dtypes(inner, f"plugin {plugin_label(desc)}{src}", desc.input_dtypes, roles, desc.output_dtypes,
                  precision)
    for msg in inner.errors:
        rep.error(f"node {node.name}: {msg}")
    return rep


@dataclass
class PluginFile:
    path: Path
    description: PluginDescription


@dataclass
class MatchResult:
    """Which plugin serves which node, and everything that stops (or merely worries) a compile."""

    matches: dict[str, PluginFile] = field(default_factory=dict)  # node name -> plugin
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unused: list[PluginFile] = field(default_factory=list)  # plugins no node resolves to (also warned)


def match_plugins(nodes: Iterable[CustomNode], plugins: Sequence[PluginFile], precision: str,
                  sm: int | None = None, simulated_engine: bool = True) -> MatchResult:
    """Resolve every custom-op node to a plugin as TensorRT would, on (namespace, name, version)."""
    res = MatchResult()
    nodes = list(nodes)
    by_key: dict[tuple[str, str, str], PluginFile] = {}
    for p in plugins:
        d = p.description
        key = (d.namespace, d.name, d.version)
        if key in by_key:
            res.errors.append(f"{p.path} and {by_key[key].path} both register {plugin_label(d)}; TensorRT keeps "
                              "one creator per (namespace, name, version), so pass only one of them")
            continue
        by_key[key] = p
        if sm is not None and d.sm != sm:
            res.errors.append(f"plugin {plugin_label(d)} ({p.path}) was built for sm{d.sm} but the target is "
                              f"sm{sm}; rebuild it with `ytk embedded build-plugin -a <the target's arch>`")
        if d.engine_api == "mock-cpu" and not simulated_engine:
            res.errors.append(f"plugin {plugin_label(d)} ({p.path}) was built by the mock builder (engine_api "
                              "mock-cpu, no GPU code); a real engine cannot load it. Build it with a real builder "
                              "(--builder nvcc or gaia).")
    used: set[tuple[str, str, str]] = set()
    supplied = ", ".join(f"{plugin_label(p.description)} ({p.path.name})" for p in plugins) or "none"
    unserved: dict[tuple[str, str, str], list[CustomNode]] = {}
    for node in nodes:
        p = by_key.get(node.key)
        if p is None:
            unserved.setdefault(node.key, []).append(node)
            continue
        used.add(node.key)
        rep = check_plugin_against_node(p.description, node, precision, str(p.path))
        res.errors.extend(rep.errors)
        res.warnings.extend(rep.warnings)
        if rep.ok:
            res.matches[node.name] = p
    for group in unserved.values():
        res.errors.append(_no_plugin_message(group, plugins, supplied))
    for key, p in by_key.items():
        if key not in used:
            res.unused.append(p)
            res.warnings.append(f"plugin {plugin_label(p.description)} ({p.path}) matches no custom-op node of this "
                                "ONNX; it is passed to the engine but nothing uses it")
    return res


def _no_plugin_message(group: list[CustomNode], plugins: Sequence[PluginFile], supplied: str) -> str:
    node = group[0]
    names = ", ".join(n.name for n in group)
    who = f"node {names} needs" if len(group) == 1 else f"{len(group)} nodes ({names}) need"
    near = [p for p in plugins if p.description.name == node.op_type]
    if near:
        diffs = []
        for p in near:
            d = p.description
            what = []
            if d.namespace != node.namespace:
                what.append(f"namespace {d.namespace!r} (node wants {node.namespace!r})")
            if d.version != node.version:
                what.append(f"version {d.version!r} (node wants {node.version!r})")
            diffs.append(f"{p.path} reports {plugin_label(d)}: {' and '.join(what)} differ")
        return (f"{who} plugin {node.label}, which no supplied .so registers: " + "; ".join(diffs)
                + ". TensorRT resolves a plugin by (namespace, name, version); rebuild with matching "
                  "--plugin-name, or fix the selector's namespace.")
    return (f"{who} plugin {node.label} but no --custom-plugin registers it (supplied: {supplied}). Build it with "
            f"`ytk embedded build-plugin --plugin-name {node.op_type} ...` and pass the .so with --custom-plugin.")


# -- custom-op nodes of an ONNX file ---------------------------------------------------------------

_STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")


def custom_nodes(onnx_path: Path) -> list[CustomNode]:
    """The nodes TensorRT must resolve through a plugin: ytk's ``trt.plugins`` nodes and any other
    op outside the standard domains."""
    import onnx
    from onnx import TensorProto

    model = onnx.load(str(onnx_path), load_external_data=False)
    g = model.graph
    consts = {t.name: TensorProto.DataType.Name(t.data_type).lower() for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant":
            consts.update({o: "float32" for o in n.output})
    dtypes = {v.name: TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower()
              for v in (*g.input, *g.value_info, *g.output) if v.type.tensor_type.elem_type}
    out: list[CustomNode] = []
    for n in g.node:
        if n.domain in _STANDARD_DOMAINS:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}

        def text(v: object, default: str) -> str:
            if isinstance(v, bytes):
                return v.decode()
            return default if v is None else str(v)

        ins = [NodeInput(name=i, dtype=_np_dtype(consts.get(i) or dtypes.get(i, "float")), is_weight=i in consts)
               for i in n.input if i]
        out.append(CustomNode(name=n.name or n.output[0], op_type=n.op_type,
                              namespace=text(attrs.get("plugin_namespace"), ""),
                              version=text(attrs.get("plugin_version"), "1"), domain=n.domain,
                              inputs=ins, outputs=[o for o in n.output if o]))
    return out


def _np_dtype(onnx_name: str) -> str:
    return {"float": "float32", "float16": "float16", "double": "float64", "int64": "int64",
            "int32": "int32", "int8": "int8", "uint8": "uint8", "bool": "bool"}.get(onnx_name, onnx_name)
