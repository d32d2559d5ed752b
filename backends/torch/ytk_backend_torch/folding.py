"""Build-time graph work: constant folding with static shapes, BatchNorm folding, dead-node removal.

Every node is visited once in graph order. A node whose runtime inputs are all constants is
executed right here on the CPU and disappears (shape arithmetic: Shape -> Gather -> Concat ->
Reshape folds to one constant). Every other node is run on the ``meta`` device, which gives its
output shapes and dtypes without computing anything; it becomes a layer of the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ytk_hookspecs.errors import StageError

from .onnx_graph import Graph, Node
from .ops import OPS, NodeCtx
from .ops.nn import bn_affine
from .plugin_nodes import PluginBinding, contract_shapes

META = torch.device("meta")
CPU = torch.device("cpu")


@dataclass
class Layer:
    """One engine layer: an ONNX node (or a BatchNorm folded into its Conv) executed as a unit."""

    name: str
    type: str
    onnx_nodes: list[str]
    node: Node
    kind: str = "op"  # op | plugin


@dataclass
class FoldedGraph:
    layers: list[Layer]
    constants: dict[str, torch.Tensor]
    #: per constant: how its consumers use it (param / weight / data), which decides its storage
    const_use: dict[str, set[str]]
    values: dict[str, tuple[list[int], torch.dtype]]
    inputs: list[tuple[str, list[int], torch.dtype]]
    outputs: list[str]
    opset: int
    stats: dict[str, int] = field(default_factory=dict)


def _build_time_inputs(node: Node, kind: str, consts: dict[str, torch.Tensor]) -> frozenset[int]:
    if kind == "plugin":
        return frozenset(i for i, n in enumerate(node.inputs) if n in consts)
    return OPS[node.op_type].build_time()


def _unsupported(node: Node, origin: str) -> StageError:
    dom = f" (domain {node.domain!r})" if node.domain not in ("", "ai.onnx") else ""
    return StageError(
        f"{origin}: node {node.name!r} is a {node.op_type}{dom}, an op the torch engine does not execute. "
        "Carve it out as a plugin (prepare --plugin) or use another engine backend; supported ops are listed "
        "by ytk_backend_torch.ops.OPS.")


def fold_graph(graph: Graph, bindings: dict[str, PluginBinding], origin: str = "model.onnx",
               progress: Any = None) -> FoldedGraph:
    """Fold ``graph`` for its static input shapes; ``bindings`` maps custom-op node names to plugins."""
    consts: dict[str, torch.Tensor] = dict(graph.initializers)
    metas: dict[str, torch.Tensor] = {i.name: torch.empty(i.shape, dtype=i.dtype, device=META) for i in graph.inputs}
    layers: list[Layer] = []
    folded = 0
    if progress is not None:
        progress.update(total=len(graph.nodes))
    for node in graph.nodes:
        if progress is not None:
            progress.advance()
        kind = "plugin" if node.name in bindings else "op"
        if kind == "op" and (node.domain not in ("", "ai.onnx") or node.op_type not in OPS):
            raise _unsupported(node, origin)
        build_time = _build_time_inputs(node, kind, consts)
        runtime = [i for i, n in enumerate(node.inputs) if n and i not in build_time]
        foldable = kind == "op" and all(node.inputs[i] in consts for i in runtime)

        def value(n: str) -> torch.Tensor | None:
            return consts.get(n) if n in consts else metas.get(n)

        ins = [value(n) if n else None for n in node.inputs]
        shapes = [tuple(t.shape) if t is not None else None for t in ins]
        dtypes = [t.dtype if t is not None else None for t in ins]
        if kind == "plugin":
            meta = bindings[node.name].meta()
            out_shapes = contract_shapes(node, meta, [list(s or ()) for s in shapes])
            for o, s in zip([o for o in node.outputs if o], out_shapes):
                declared = graph.declared_shapes.get(o)
                if declared is not None and declared != s:
                    raise StageError(
                        f"{origin}: custom-op node {node.name!r}: plugin {meta.plugin_name!r} computes output {o!r} "
                        f"with shape {s} from its contract, but the ONNX graph declares {declared}.")
                metas[o] = torch.empty(s, dtype=torch.float32, device=META)
            layers.append(Layer(node.name, "PluginV2", [node.name], node, "plugin"))
            continue
        dev = CPU if foldable else META
        ctx = NodeCtx(node, [consts.get(n) if n else None for n in node.inputs], shapes, dtypes,
                      torch.float32, dev, origin, graph.opset)
        fn = OPS[node.op_type].build(ctx)
        args = []
        for i, t in enumerate(ins):
            if t is None or i in build_time:
                args.append(None)
            else:
                args.append(t if foldable else t.to(META))
        try:
            res = fn(*args)
        except StageError:
            raise
        except Exception as e:
            raise StageError(f"{origin}: node {node.name!r} ({node.op_type}) cannot run on inputs of shapes "
                             f"{[list(s) if s is not None else None for s in shapes]}: {e}") from None
        outs = list(res) if isinstance(res, (tuple, list)) else [res]
        for o, t in zip(node.outputs, outs):
            if not o:
                continue
            if foldable:
                consts[o] = t.contiguous().clone()
            else:
                metas[o] = t
        if foldable:
            folded += 1
        else:
            layers.append(Layer(node.name, OPS[node.op_type].layer_type, [node.name], node))
    layers, n_bn = _fold_batchnorm(layers, consts, graph.outputs)
    layers = _drop_dead(layers, graph.outputs)
    used: dict[str, set[str]] = {}
    for layer in layers:
        bt = _build_time_inputs(layer.node, layer.kind, consts)
        od = OPS.get(layer.node.op_type) if layer.kind == "op" else None
        for i, n in enumerate(layer.node.inputs):
            if n in consts:
                use = "param" if layer.kind == "plugin" or (od and i in od.params) else (
                    "weight" if i in bt else "data")
                used.setdefault(n, set()).add(use)
    for o in graph.outputs:
        if o in consts:
            used.setdefault(o, set()).add("data")
    values = {n: (list(t.shape), t.dtype) for n, t in metas.items()}
    return FoldedGraph(layers, {n: consts[n] for n in used}, used, values,
                       [(i.name, i.shape, i.dtype) for i in graph.inputs], list(graph.outputs), graph.opset,
                       {"onnx_nodes": len(graph.nodes), "folded_nodes": folded, "batchnorm_folded": n_bn,
                        "layers": len(layers)})


def _consumers(layers: list[Layer]) -> dict[str, int]:
    count: dict[str, int] = {}
    for layer in layers:
        for n in layer.node.inputs:
            if n:
                count[n] = count.get(n, 0) + 1
    return count


def _fold_batchnorm(layers: list[Layer], consts: dict[str, torch.Tensor],
                    outputs: list[str]) -> tuple[list[Layer], int]:
    """Fold a BatchNormalization into the Conv that alone feeds it: one conv with new weights."""
    producer = {o: layer for layer in layers for o in layer.node.outputs if o}
    uses = _consumers(layers)
    drop: set[str] = set()
    n = 0
    for bn in layers:
        node = bn.node
        if node.op_type != "BatchNormalization" or len([o for o in node.outputs if o]) != 1:
            continue
        conv = producer.get(node.inputs[0])
        if conv is None or conv.kind != "op" or conv.node.op_type != "Conv" or conv.name in drop:
            continue
        if uses.get(node.inputs[0], 0) != 1 or node.inputs[0] in outputs:
            continue
        cin = conv.node.inputs
        if not all(x in consts for x in node.inputs[1:5]) or cin[1] not in consts or \
                (len(cin) > 2 and cin[2] and cin[2] not in consts):
            continue
        a, b = bn_affine(*(consts[x] for x in node.inputs[1:5]), float(node.attrs.get("epsilon", 1e-5)))
        w = consts[cin[1]].float()
        bias = consts[cin[2]].float() if len(cin) > 2 and cin[2] else torch.zeros(w.shape[0])
        wn, bnm = f"{conv.name}::weight+{bn.name}", f"{conv.name}::bias+{bn.name}"
        consts[wn] = w * a.reshape([-1] + [1] * (w.dim() - 1))
        consts[bnm] = bias * a + b
        conv.node = Node(conv.node.name, "Conv", conv.node.domain, [cin[0], wn, bnm], list(node.outputs),
                         dict(conv.node.attrs))
        conv.name = f"{conv.name} + {bn.name}"
        conv.onnx_nodes = conv.onnx_nodes + bn.onnx_nodes
        drop.add(bn.name)
        n += 1
    return [layer for layer in layers if layer.name not in drop], n


def _drop_dead(layers: list[Layer], outputs: list[str]) -> list[Layer]:
    """Remove layers none of whose outputs is read (engines never run dead code either)."""
    needed = set(outputs)
    keep: list[Layer] = []
    for layer in reversed(layers):
        if any(o in needed for o in layer.node.outputs if o):
            keep.append(layer)
            needed.update(n for n in layer.node.inputs if n)
    return list(reversed(keep))
