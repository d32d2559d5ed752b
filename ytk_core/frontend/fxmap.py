"""Map ONNX nodes back to the FX nodes (and so the torch modules) they came from.

torch's ONNX exporter records, on every node it emits, the FX node it was translated from
(metadata ``pkg.torch.onnx.fx_node``). ytk reads that once here, writes the result to
fx_nodes.json, and strips the metadata from the ONNX so the graph stays flat and lean.
"""

from __future__ import annotations

import operator
import re
from collections import defaultdict
from typing import Any

from ytk_hookspecs.models import FxNode, ModuleFrame, TensorInfo

_FX_REF = re.compile(r"%([^\s:]+)")
#: ONNX ops that carry no computation of their own; excluded from the coverage figure.
NON_COMPUTE_OPS = {"Constant", "Identity"}


def onnx_to_fx(model_proto: Any, graph: Any = None) -> dict[str, str]:
    """ONNX node name -> FX node name, from the exporter's node metadata.

    With the FX ``graph``, nodes the ONNX optimizer made without metadata are placed too (see
    :func:`_place_unmapped`)."""
    out: dict[str, str] = {}
    for node in model_proto.graph.node:
        for p in node.metadata_props:
            if p.key == "pkg.torch.onnx.fx_node":
                m = _FX_REF.match(p.value)
                if m:
                    out[node.name] = m.group(1)
    if graph is not None:
        out.update(_place_unmapped(model_proto, graph, out))
    return out


def _place_unmapped(model_proto: Any, graph: Any, known: dict[str, str]) -> dict[str, str]:
    """ONNX nodes without exporter metadata, placed on the FX nodes they replace.

    The optimizer rewrites some translations after the fact and the new node carries no metadata:
    ``x.chunk(3)`` is exported as SplitToSequence + SequenceAt and becomes one ``Split``. Left
    unmapped, the Split belongs to no region, so a block around a chunk is "not convex" and its
    chunks have no ONNX tensor. Such a node computes the FX nodes that no ONNX node claims and that
    lie between its inputs' FX nodes and its consumers' (``split`` and its ``getitem``s): it maps to
    the first of them, and the getitems inherit it like any tuple element (see build_fx_nodes).
    """
    nodes = list(graph.nodes)
    order = {n.name: i for i, n in enumerate(nodes)}
    by_name = {n.name: n for n in nodes}
    claimed = set(known.values())
    silent = {n.name for n in nodes if n.op == "call_function" and n.name not in claimed}
    producer = {o: n.name for n in model_proto.graph.node for o in n.output}
    consumers: dict[str, list[str]] = defaultdict(list)
    for n in model_proto.graph.node:
        for i in n.input:
            consumers[i].append(n.name)

    def fx_of(value: str) -> str | None:
        return value if value in by_name else known.get(producer.get(value, ""))

    placed: dict[str, str] = {}
    for node in model_proto.graph.node:
        if node.name in known or node.op_type in NON_COMPUTE_OPS:
            continue
        srcs = {f for f in map(fx_of, node.input) if f}
        dsts = {known[c] for o in node.output for c in consumers.get(o, []) if c in known}
        dsts |= {o for o in node.output if o in by_name}
        down = _reach_silent(srcs, lambda n: n.users, by_name, silent)
        up = _reach_silent(dsts, lambda n: n.all_input_nodes, by_name, silent)
        between = down & up
        if between:
            placed[node.name] = min(between, key=order.__getitem__)
    return placed


def _reach_silent(start: set[str], step: Any, by_name: dict[str, Any], silent: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = [by_name[s] for s in start if s in by_name]
    while todo:
        for m in step(todo.pop()):
            if m.name in silent and m.name not in seen:
                seen.add(m.name)
                todo.append(m)
    return seen


def strip_metadata(model_proto: Any) -> None:
    """Drop per-node exporter metadata (stack traces, local paths); fx_nodes.json keeps the mapping."""
    for node in model_proto.graph.node:
        del node.metadata_props[:]


def _dtype_name(dt: Any) -> str:
    return str(dt).replace("torch.", "")


def tensor_infos(val: Any, base: str) -> list[TensorInfo]:
    import torch

    vals = val if isinstance(val, (tuple, list)) else [val]
    out = []
    for i, v in enumerate(vals):
        if isinstance(v, torch.Tensor):
            name = base if len(vals) == 1 else f"{base}.{i}"
            out.append(TensorInfo(name=name,
                                  shape=[int(d) if not isinstance(d, torch.SymInt) else str(d) for d in v.shape],
                                  dtype=_dtype_name(v.dtype)))
    return out


def _target_name(node: Any) -> str:
    t = node.target
    if node.op == "call_function":
        return str(t) if not callable(t) or hasattr(t, "_schema") or hasattr(t, "overloadpacket") else \
            f"{getattr(t, '__module__', '')}.{getattr(t, '__name__', str(t))}".lstrip(".")
    return str(t)


def _module_stack(node: Any) -> list[ModuleFrame]:
    stack = node.meta.get("nn_module_stack") or {}
    frames = []
    for key, val in stack.items():
        path, cls = val
        cls_name = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
        # torch.export keys each call of a module apart: "L__self___head", "L__self___head@1", ...
        call = re.search(r"@(\d+)$", str(key))
        frames.append(ModuleFrame(path=_clean_path(path), cls=cls_name.rsplit(".", 1)[-1],
                                  call=int(call.group(1)) if call else 0))
    return frames


def _clean_path(path: str) -> str:
    # torch.export spells some paths L['self'].m.stages[0] in strict mode; normalise to m.stages.0.
    p = re.sub(r"^L\['self'\]\.?", "", path)
    p = re.sub(r"\[(\d+)\]", r".\1", p)
    p = re.sub(r"\['([^']+)'\]", r".\1", p)
    return p.strip(".")


def build_fx_nodes(graph: Any, onnx_map: dict[str, str], root_class: str) -> list[FxNode]:
    """FxNode records for every node of the exported (decomposed) FX graph."""
    by_fx: dict[str, list[str]] = defaultdict(list)
    for onnx_name, fx_name in onnx_map.items():
        by_fx[fx_name].append(onnx_name)
    nodes = list(graph.nodes)
    users = {n.name: [u.name for u in n.users] for n in nodes}
    inherited: dict[str, list[str]] = {}
    # Fused nodes (conv folded into the BN the exporter kept the name of; tuple getitems) inherit the ONNX
    # node that now computes them, so that selecting either module still finds that node.
    for n in nodes:
        if n.op != "call_function" or by_fx.get(n.name):
            continue
        if n.target is operator.getitem and n.args and hasattr(n.args[0], "name"):
            inherited[n.name] = list(by_fx.get(n.args[0].name, []))
        elif len(users[n.name]) == 1 and by_fx.get(users[n.name][0]):
            inherited[n.name] = list(by_fx[users[n.name][0]])
    out = []
    for n in nodes:
        stack = _module_stack(n)
        owner = stack[-1] if stack else ModuleFrame(path="", cls=root_class)
        val = n.meta.get("val")
        outs = tensor_infos(val, n.name) if val is not None else []
        ins: list[TensorInfo] = []
        arg_names: list[str] = []
        for a in n.all_input_nodes:
            arg_names.append(a.name)
            av = a.meta.get("val")
            if av is not None:
                ins.extend(tensor_infos(av, a.name))
        out.append(FxNode(
            name=n.name, op=n.op, target=_target_name(n), module_path=owner.path, module_class=owner.cls,
            module_stack=stack, args=arg_names, inputs=ins, outputs=outs,
            onnx_nodes=sorted(set(by_fx.get(n.name, [])) | set(inherited.get(n.name, [])))))
    return out
