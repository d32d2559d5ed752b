"""Custom-op nodes of a carved ONNX, and whether a built plugin fits the node it is meant to replace.

The core's compile stage and every engine backend read the same nodes the same way (an engine that
explains a failed plugin lookup names the node from here).

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

from .contract import ERROR_9, ContractReport, check_dtypes
from .models import PluginDescription

# The kernel-source checks (check_meta, check_source, check_meta_against_candidate) live in
# ytk_hookspecs.contract, where every backend can run them.

# -- a built plugin against its ONNX node ---------------------------------------------------------

__all__ = ["NodeInput", "CustomNode", "plugin_label", "check_plugin_against_node", "PluginFile", "MatchResult",
           "match_plugins", "custom_nodes"]


@dataclass
class NodeInput:
    """One input of a custom-op node: its tensor name, dtype, and whether it is a weight (an initializer)."""
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
    """``namespace::name vN``: how messages name a plugin."""
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
    check_dtypes(inner, f"plugin {plugin_label(desc)}{src}", desc.input_dtypes, roles, desc.output_dtypes,
                  precision)
    for msg in inner.errors:
        rep.error(f"node {node.name}: {msg}")
    return rep


@dataclass
class PluginFile:
    """A plugin library on disk with the self-description read from it."""
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
    empty_ns: dict[tuple[str, str, str], PluginFile] = {}
    for p in plugins:
        d = p.description
        key = (d.namespace, d.name, d.version)
        if key in by_key:
            res.errors.append(f"{p.path} and {by_key[key].path} both register {plugin_label(d)}; TensorRT keeps "
                              "one creator per (namespace, name, version), so pass only one of them")
            continue
        by_key[key] = p
        if d.engine_api.startswith("trt"):
            # ytk's TensorRT shims register every creator under its namespace and under the empty one (the ONNX
            # parser looks there when a node has no plugin_namespace attribute); loadLibrary refuses a library
            # whose creator is already registered, so the same (name, version) in two namespaces cannot load
            alias = ("", d.name, d.version)
            other = empty_ns.get(alias)
            if other is not None and other.description.namespace != d.namespace:
                res.errors.append(
                    f"{p.path} ({plugin_label(d)}) and {other.path} ({plugin_label(other.description)}) both "
                    f"register {d.name} v{d.version} in the empty namespace too, as ytk's TensorRT plugins do; "
                    "TensorRT refuses to load the second library. Give one of them another name or version "
                    "(--plugin-name, or the selector's name) and rebuild it")
            empty_ns.setdefault(alias, p)
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
