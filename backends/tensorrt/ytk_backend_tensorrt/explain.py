"""Known TensorRT failures, each explained in one line from the log, the ONNX and the plugins' self-descriptions.

TensorRT's own messages name a layer or a (name, version) and little else. The lines they come in
(samples in ``tests/data/trtexec/``):

* Error 9, format search: ``Error[9]: [pluginV2Builder.cpp::reportPluginError::23] Error Code 9: Internal
  Error (<layer>: could not find any supported formats consistent with input/output data types)``
  (8.x and 10.x; ``pluginV3Builder.cpp`` for IPluginV3).
* Plugin not found, ONNX parser: ``Searching for plugin: <name>, plugin_version: <v>, plugin_namespace: <ns>``,
  then ``getPluginCreator could not find plugin: <name> version: <v>`` (8.x/9.x) or ``Cannot find plugin:
  <name>, version: <v>, namespace:<ns>.`` (10.x), and ``creator && "Plugin not found, are the plugin name,
  version, and namespace correct?"``.
* Plugin not found, engine load: ``Cannot deserialize plugin since corresponding IPluginCreator not found in
  Plugin Registry``.
* Entry point missing: ``SymbolAddress for getPluginCreators could not be loaded`` (``--dynamicPlugins`` on a
  library that does not export what this TensorRT calls).

Each explanation names the plugin, the node, what was looked for and what the supplied ``.so`` files
register (read from their self-description, as the shims register: under the plugin's namespace and
under the empty namespace).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ytk_hookspecs.models import PluginArtifact, PluginDescription

from .versions import V2_API, V3_API, TrtVersion

if TYPE_CHECKING:  # pragma: no cover
    from ytk_hookspecs.nodes import CustomNode

_FORMATS = r": could not find any supported formats consistent with input/output data types"
#: Most specific first: "Error Code 9: Internal Error (<layer>...)", then a bare "Error[9]: <layer>..." or
#: "9: <layer>..." (the prefixes trtexec's and the Python logger add)
_ERROR9 = (re.compile(r"Error Code 9: Internal Error \((?P<layer>.+?)" + _FORMATS),
           re.compile(r"(?:Error\[9\]|\b9): (?!\[)(?P<layer>.+?)" + _FORMATS))
_SEARCHING = re.compile(r"Searching for plugin: (?P<name>[^,]+), plugin_version: (?P<ver>[^,]*), "
                        r"plugin_namespace: ?(?P<ns>\S*)")
_NOT_FOUND_8 = re.compile(r"getPluginCreator could not find plugin:? (?P<name>\S+) version:? (?P<ver>\S+)")
_NOT_FOUND_10 = re.compile(r"Cannot find plugin: (?P<name>[^,]+), version: (?P<ver>[^,]+), "
                           r"namespace:(?P<ns>[^)]*?)\.?\)")
_PARSER_ASSERT = "Plugin not found, are the plugin name, version, and namespace correct?"
_NODE_8 = re.compile(r"While parsing node number \d+ \[(?P<op>[^ \]]+) -> \"(?P<out>[^\"]*)\"\]")
_NODE_10 = re.compile(r"In node -?\d+ with name: (?P<name>\S*) and operator: (?P<op>\S+)")
_DESERIALIZE = "Cannot deserialize plugin since corresponding IPluginCreator not found in Plugin Registry"
_SYMBOL = re.compile(r"SymbolAddress for (?P<sym>\w+) could not be loaded")

#: The entry points a ytk plugin library exports, per engine API (``ytk_backend_nvcc.trt_shim.TRT_APIS``).
EXPORTS = {V2_API: ("getPluginCreators", "setLoggerFinder"), V3_API: ("getCreators", "setLoggerFinder"),
           "torch-launcher": (), "mock-cpu": ()}


@dataclass
class LoadContext:
    """How the plugins were handed to TensorRT."""

    version: TrtVersion | None
    flag: str  # --dynamicPlugins / --plugins / "IPluginRegistry::loadLibrary"


def label(d: PluginDescription) -> str:
    return f"{d.namespace}::{d.name} v{d.version}"


def registrations(p: PluginArtifact, load: LoadContext) -> str:
    """What TensorRT's registry holds after loading ``p`` the way it was loaded."""
    d = p.description
    so = Path(p.path).name
    if load.flag == "--plugins":
        return (f"{so} registers nothing when loaded with --plugins (TensorRT {load.version} only dlopens it; ytk "
                f"libraries register through their exported entry points, which TensorRT calls from 8.6 on, with "
                "--dynamicPlugins)")
    loadable = load.version.loadable_apis if load.version is not None else (V2_API, V3_API)
    if d.engine_api not in loadable:
        why = ("a bare launcher for the torch engine, with no TensorRT plugin in it" if d.engine_api == "torch-launcher"
               else "the mock builder's CPU stand-in" if d.engine_api == "mock-cpu"
               else f"an {d.engine_api} plugin, which TensorRT {load.version} does not load")
        return f"{so} registers nothing TensorRT can use ({why})"
    names = [label(d)] + ([f"::{d.name} v{d.version}"] if d.namespace else [])
    return f"{so} registers {' and '.join(names)}"


def _node_by_layer(layer: str, nodes: list["CustomNode"]) -> "CustomNode | None":
    by_name = {n.name: n for n in nodes}
    if layer in by_name:
        return by_name[layer]
    hits = [n for n in nodes if n.name and n.name in layer]
    if len(hits) == 1:
        return hits[0]
    return nodes[0] if len(nodes) == 1 else None


def _combo(d: PluginDescription) -> str:
    ins = ", ".join(f"{t}/{f}" for t, f in zip(d.input_dtypes, d.input_formats))
    outs = ", ".join(f"{t}/{f}" for t, f in zip(d.output_dtypes, d.output_formats))
    return f"[{ins}] -> [{outs}]"


def _format_problem(node: "CustomNode", d: PluginDescription, precision: str) -> str:
    """What in the node cannot meet what the plugin declares (the usual cause of Error 9)."""
    if d.num_inputs != len(node.inputs):
        return (f"node {node.name} has {node.arity_text()} but the plugin declares {d.num_inputs} input(s) "
                f"{_combo(d)}: an arity mismatch that TensorRT reports as a format error (lifted weights are real "
                "inputs of the node, so the kernel must take them as inputs)")
    if d.num_outputs != len(node.outputs):
        return f"node {node.name} has {len(node.outputs)} output(s) but the plugin declares {d.num_outputs}"
    floats = {"float16", "float32"}
    for i, (inp, want) in enumerate(zip(node.inputs, d.input_dtypes)):
        have = inp.dtype
        if want == "float16" and precision == "fp32" and have in floats:
            return (f"input {i} ({inp.name}) is declared float16 but the engine is built fp32 (no --fp16), so "
                    f"TensorRT cannot hand the plugin FP16; declared {_combo(d)}")
        if (have in floats) != (want in floats) and not (have == "int64" and want == "int32"):
            return f"input {i} ({inp.name}) is {have} in the ONNX but the plugin declares {want}; declared {_combo(d)}"
    for fmts, dts, side in ((d.input_formats, d.input_dtypes, "input"), (d.output_formats, d.output_dtypes, "output")):
        for i, (f, t) in enumerate(zip(fmts, dts)):
            if f in ("kHWC8", "kCHW2", "kCHW16", "kHWC16") and t != "float16":
                return f"{side} {i} is declared {t}/{f}, but TensorRT binds {f} to FP16 only; declared {_combo(d)}"
            if f == "kCHW32" and t not in ("int8", "float16"):
                return (f"{side} {i} is declared {t}/{f}, which TensorRT offers for INT8 or FP16 only; declared "
                        f"{_combo(d)}")
            if t == "int8" and precision != "int8":
                return f"{side} {i} is declared int8 but the engine is not built with --int8; declared {_combo(d)}"
    return (f"its arity and dtypes match node {node.name}; TensorRT could not provide the one combination the "
            f"plugin accepts, {_combo(d)} (a vectorized format needs rank >= 3 and pads channels)")


def explain_error9(log: str, plugins: list[PluginArtifact], nodes: list["CustomNode"], precision: str) -> str | None:
    m = _ERROR9[0].search(log) or _ERROR9[1].search(log)
    if not m:
        return None
    layer = m.group("layer").strip()
    node = _node_by_layer(layer, nodes)
    if node is None:
        names = ", ".join(f"{n.name} ({n.label})" for n in nodes) or "none"
        return (f"TensorRT Error 9 at layer '{layer}': could not find any supported formats consistent with input/"
                f"output data types; no custom-op node of the ONNX is named so (its plugin nodes: {names})")
    plugin = next((p for p in plugins if (p.description.namespace, p.description.name, p.description.version)
                   == node.key), None) or next((p for p in plugins if p.description.name == node.op_type), None)
    if plugin is None:
        return (f"TensorRT Error 9 at layer '{layer}' (node {node.name}, {node.label}): no supplied plugin describes "
                "this node, so its formats cannot be checked")
    d = plugin.description
    return (f"TensorRT Error 9 at plugin {label(d)} ({Path(plugin.path).name}), node {node.name}: "
            f"{_format_problem(node, d, precision)}")


def explain_not_found(log: str, plugins: list[PluginArtifact], nodes: list["CustomNode"],
                      load: LoadContext) -> str | None:
    m10 = _NOT_FOUND_10.search(log)
    m8 = _NOT_FOUND_8.search(log)
    deser = _DESERIALIZE in log
    if not (m10 or m8 or _PARSER_ASSERT in log or deser):
        return None
    name = version = namespace = None
    searches = list(_SEARCHING.finditer(log))
    if m10:
        name, version, namespace = m10.group("name").strip(), m10.group("ver").strip(), m10.group("ns").strip()
    elif m8:
        name, version = m8.group("name"), m8.group("ver")
        s = next((s for s in reversed(searches) if s.group("name") == name), None)
        namespace = s.group("ns") if s else None
    elif searches:
        s = searches[-1]
        name, version, namespace = s.group("name"), s.group("ver"), s.group("ns")
    node_name = None
    if (n10 := _NODE_10.search(log)):
        node_name, name = n10.group("name") or None, name or n10.group("op")
    elif (n8 := _NODE_8.search(log)):
        name = name or n8.group("op")
        out = n8.group("out")
        node_name = next((n.name for n in nodes if out in n.outputs), None)
    node = next((n for n in nodes if n.name == node_name), None) or next(
        (n for n in nodes if n.op_type == name), None)
    if node is not None:
        name = name or node.op_type
        version = version or node.version
        namespace = node.namespace if namespace is None else namespace
    supplied = "; ".join(registrations(p, load) for p in plugins) or "no plugin library was supplied"
    if deser and not (m8 or m10):
        return (f"TensorRT could not deserialize the engine: it holds plugin layers but no creator for them was "
                f"registered in the run that loaded it ({supplied})")
    looked = f"{namespace if namespace is not None else '?'}::{name} v{version or '?'}"
    where = f" for node {node.name}" if node is not None else ""
    return f"TensorRT found no plugin {looked}{where}: {supplied}{_hint(name, version, namespace, plugins, load)}"


def _hint(name: str | None, version: str | None, namespace: str | None, plugins: list[PluginArtifact],
          load: LoadContext) -> str:
    same = [p for p in plugins if p.description.name == name]
    if not same:
        return f"; none registers {name}: build it with `ytk embedded build-plugin --plugin-name {name}`" \
            if name else ""
    d = same[0].description
    if version is not None and d.version != version:
        return (f"; {Path(same[0].path).name} has version {d.version!r} where the node asks {version!r} (TensorRT "
                "resolves a plugin by namespace, name and version)")
    if namespace and d.namespace != namespace:
        return f"; {Path(same[0].path).name} registers namespace {d.namespace!r}, the node asks {namespace!r}"
    return ""


def explain_symbol(log: str, plugins: list[PluginArtifact], load: LoadContext) -> str | None:
    m = _SYMBOL.search(log)
    if not m:
        return None
    sym = m.group("sym")
    lacking = [p for p in plugins if sym not in EXPORTS.get(p.description.engine_api, ())]
    who = "; ".join(f"{Path(p.path).name} is {p.description.engine_api}, exporting "
                    f"{', '.join(EXPORTS.get(p.description.engine_api, ())) or 'no TensorRT entry point'}"
                    for p in lacking) or "every supplied library claims to export it"
    want = load.version.engine_api if load.version is not None else V2_API
    trt = f"TensorRT {load.version}" if load.version is not None else "TensorRT"
    return f"{trt} loads plugin libraries through {sym}, which is not there: {who}; build the plugins as {want} for it"


def explain(log: str, plugins: list[PluginArtifact], onnx: Path | None, precision: str,
            load: LoadContext) -> list[str]:
    """One line per known failure in ``log`` (empty when none is recognised)."""
    nodes: list[CustomNode] = []
    if onnx is not None and Path(onnx).is_file():
        from ytk_hookspecs.nodes import custom_nodes

        try:
            nodes = custom_nodes(Path(onnx))
        except Exception:  # noqa: BLE001  -- an unreadable ONNX only loses node names in the message
            nodes = []
    out = []
    for line in (explain_symbol(log, plugins, load), explain_not_found(log, plugins, nodes, load),
                 explain_error9(log, plugins, nodes, precision)):
        if line:
            out.append(line)
    return out


def last_error(log: str) -> str:
    """The most specific error line of a failed trtexec run (its generic closing lines skipped)."""
    generic = ("Engine set up failed", "Engine could not be created", "Building engine failed", "Failed to create "
               "engine", "Parsing model failed", "Failed to parse onnx file", "Engine creation failed")
    errors = [ln.strip() for ln in log.splitlines() if ("[E]" in ln or "Error Code" in ln or "ERROR" in ln)
              and not any(g in ln for g in generic)]
    if errors:
        return errors[0]
    fails = [ln.strip() for ln in log.splitlines() if ln.startswith("&&&& FAILED")]
    return fails[-1] if fails else (log.strip().splitlines() or ["(no output)"])[-1]
