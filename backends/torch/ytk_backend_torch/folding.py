"""Build-time graph work: constant folding with static shapes, BatchNorm folding, dead-node removal.

Every node is visited once in graph order. A node whose runtime inputs are all constants is
executed right here on the CPU and disappears (shape arithmetic: Shape -> Gather -> Concat ->
Reshape folds to one constant). Every other node is run on the ``meta`` device, which gives its
output shapes and dtypes without computing anything; it becomes a layer of the engine.
"""

from __future__ import annotations

import math
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
        f"{origin}: node {node.name!r} ({node.op_type}{dom}) is an op the torch engine does not execute. "
        "Carve it out as a plugin (prepare --plugin) or use another engine backend; docs/guide.md lists the "
        "ops it runs (\"The ONNX ops the torch engine runs\").")


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
    layers, n_attn = _fuse_attention(layers, consts, metas, graph.outputs, graph.opset)
    layers, n_gelu = _fuse_gelu(layers, consts, graph.outputs)
    layers, n_silu = _fuse_silu(layers, graph.outputs)
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
                        "attention_fused": n_attn, "gelu_fused": n_gelu, "silu_fused": n_silu,
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


def _readers(layers: list[Layer]) -> dict[str, list[Layer]]:
    """Tensor name -> the layers reading it."""
    out: dict[str, list[Layer]] = {}
    for layer in layers:
        for n in layer.node.inputs:
            if n:
                out.setdefault(n, []).append(layer)
    return out


def _replaced(layers: list[Layer], fused: dict[str, Layer], drop: set[str]) -> list[Layer]:
    """``layers`` with each layer named in ``fused`` replaced by its fused layer and those in ``drop`` removed."""
    return [fused.get(layer.name, layer) for layer in layers if layer.name not in drop]


def _scalar(name: str, consts: dict[str, torch.Tensor]) -> float | None:
    t = consts.get(name)
    return float(t.reshape(-1)[0]) if t is not None and t.numel() == 1 and t.is_floating_point() else None


def _fuse_attention(layers: list[Layer], consts: dict[str, torch.Tensor], metas: dict[str, torch.Tensor],
                    outputs: list[str], opset: int) -> tuple[list[Layer], int]:
    """Fuse ``MatMul(a, b) -> [Mul|Div by a constant scalar] -> [Add mask | Where(cond, -inf)] -> [Reshape to
    [groups, windows, ...] -> Add window mask -> Reshape back] -> Softmax(last axis) -> MatMul(., v)`` into one
    attention layer (``YtkAttention``), as TensorRT fuses it: run op by op, the
    scores tensor ([..., L, S]) is written and read three times, which on a ViT at 8160 tokens made the engine 9x slower
    than torch (docs/benchmarks.md). Only a chain whose intermediates nothing else reads is fused; the
    fused layer keeps every ONNX node's name, so per-layer time still maps back to the model."""
    if opset < 13:  # Softmax's axis meant a 2-D coercion before opset 13
        return layers, 0
    producer = {o: layer for layer in layers for o in layer.node.outputs if o}
    uses = _consumers(layers)
    graph_outs = set(outputs)

    def only(name: str) -> Layer | None:
        """The op layer producing ``name`` when ``name`` is read once and is no graph output."""
        p = producer.get(name)
        ok = p is not None and p.kind == "op" and uses.get(name, 0) == 1 and name not in graph_outs
        return p if ok else None

    def shape(name: str) -> tuple[int, ...] | None:
        t = metas.get(name, consts.get(name))
        return tuple(t.shape) if t is not None and t.is_floating_point() else None

    def bool_shape(name: str) -> tuple[int, ...] | None:
        t = metas.get(name, consts.get(name))
        return tuple(t.shape) if t is not None and t.dtype == torch.bool else None

    def broadcasts(ms: tuple[int, ...] | None, scores: tuple[int, ...]) -> bool:
        return ms is not None and len(ms) <= len(scores) and all(m in (1, d) for m, d in
                                                                 zip(reversed(ms), reversed(scores)))

    def scores_side(ins: list[str], sides: tuple[int, ...], scores: tuple[int, ...]) -> list[int]:
        """The inputs among ``sides`` that carry the scores: a MatMul's (maybe scaled) output of their shape."""
        return [i for i in sides if producer.get(ins[i]) is not None and ins[i] not in consts
                and shape(ins[i]) == scores and only(ins[i]) is not None
                and only(ins[i]).node.op_type in ("MatMul", "Mul", "Div")]  # type: ignore[union-attr]

    fused: dict[str, Layer] = {}  # the second MatMul's name -> the fused layer
    drop: set[str] = set()
    for m2 in layers:
        if m2.kind != "op" or m2.node.op_type != "MatMul" or len(m2.node.inputs) != 2:
            continue
        sm = only(m2.node.inputs[0])
        if sm is None or sm.node.op_type != "Softmax":
            continue
        scores = shape(sm.node.inputs[0])
        if scores is None or len(scores) < 3 or int(sm.node.attrs.get("axis", -1)) not in (-1, len(scores) - 1):
            continue
        chain, mask, scale, mask_mode = [sm], None, 1.0, "add"
        cur = only(sm.node.inputs[0])
        window, wmask = 0, None
        if cur is not None and cur.node.op_type == "Reshape" and len(scores) == 4:
            # a windowed attention's per-window mask (Swin's shifted windows): the scores viewed
            # [groups, windows, heads, L, S], a mask added that broadcasts over that view, viewed back
            view_add = only(cur.node.inputs[0])
            if view_add is None or view_add.node.op_type != "Add":
                continue
            ins, view = view_add.node.inputs, shape(view_add.node.outputs[0])
            into = [i for i in (0, 1) if (p := only(ins[i])) is not None and p.node.op_type == "Reshape"
                    and shape(ins[i]) == view and shape(p.node.inputs[0]) == scores]
            if view is None or len(view) != 5 or view[2:] != scores[1:] or view[0] * view[1] != scores[0] \
                    or len(into) != 1 or not broadcasts(shape(ins[1 - into[0]]), view):
                continue
            view_in = only(ins[into[0]])
            chain += [cur, view_add, view_in]  # type: ignore[list-item]
            window, wmask = view[1], ins[1 - into[0]]
            cur = only(view_in.node.inputs[0])  # type: ignore[union-attr]
        if cur is not None and cur.node.op_type == "Add":
            ins = cur.node.inputs
            mm_side = scores_side(ins, (0, 1), scores)
            other = ins[1 - mm_side[0]] if len(mm_side) == 1 else None
            if other is None or len(scores) > 4 or not broadcasts(shape(other), scores):
                continue  # no mask that broadcasts over the scores
            chain.append(cur)
            mask, cur = other, only(ins[mm_side[0]])
        elif cur is not None and cur.node.op_type == "Where" and len(cur.node.inputs) == 3:
            # masked_fill(cond, -inf): Where(cond, -inf, scores) attends where cond is False;
            # Where(cond, scores, -inf) where it is True. A finite fill is not a mask: a row it fills whole
            # softmaxes to a uniform row, which no mask gives, so it stays op by op
            ins = cur.node.inputs
            fill = [i for i in (1, 2) if _scalar(ins[i], consts) == -math.inf]
            mm_side = scores_side(ins, (1, 2), scores)
            if len(fill) != 1 or mm_side != [3 - fill[0]] or len(scores) > 4 \
                    or not broadcasts(bool_shape(ins[0]), scores):
                continue
            if window:  # a boolean mask and a per-window additive one: left op by op (never seen)
                continue
            chain.append(cur)
            mask, mask_mode, cur = ins[0], "fill_true" if fill[0] == 1 else "fill_false", only(ins[mm_side[0]])
        if cur is not None and cur.node.op_type in ("Mul", "Div"):
            ins = cur.node.inputs
            k = next((i for i in ((0, 1) if cur.node.op_type == "Mul" else (1,)) if _scalar(ins[i], consts)
                      is not None), None)
            if k is None:
                continue
            c = _scalar(ins[k], consts)
            if not c or not math.isfinite(c):
                continue
            scale = c if cur.node.op_type == "Mul" else 1.0 / c
            chain.append(cur)
            cur = only(ins[1 - k])
        if cur is None or cur.node.op_type != "MatMul" or len(cur.node.inputs) != 2:
            continue
        a, b, v = cur.node.inputs[0], cur.node.inputs[1], m2.node.inputs[1]
        sa, sb, sv = shape(a), shape(b), shape(v)
        if sa is None or sb is None or sv is None or not len(sa) == len(sb) == len(sv) == len(scores) or \
                any(n in consts for n in (a, b, v)) or not (sa[:-2] == sb[:-2] == sv[:-2]) or \
                sa[-1] != sb[-2] or sb[-1] != sv[-2] or (mask is not None and len(sa) not in (3, 4)) or \
                (window and len(sa) != 4):
            continue
        chain.append(cur)
        if any(p.name in fused or p.name in drop for p in chain):  # a chain inside another's (never seen)
            continue
        parts = list(reversed(chain)) + [m2]
        masks = [mask or "", wmask] if wmask else [mask] if mask else []
        node = Node(m2.node.name, "YtkAttention", "", [a, b, v, *masks], list(m2.node.outputs),
                    {"scale": scale, "mask_mode": mask_mode, **({"windows": window} if window else {})})
        fused[m2.name] = Layer(" + ".join(p.name for p in parts), OPS["YtkAttention"].layer_type,
                               [n for p in parts for n in p.onnx_nodes], node)
        drop.update(p.name for p in chain)
    return _replaced(layers, fused, drop), len(fused)


def _fuse_gelu(layers: list[Layer], consts: dict[str, torch.Tensor], outputs: list[str]) -> tuple[list[Layer], int]:
    """Fuse the erf spelling of GELU an ONNX exporter writes (``x / sqrt(2) -> Erf -> + 1 -> * 0.5 -> * x``, the
    three products in any order) into one ``Gelu`` layer, as TensorRT fuses a pointwise chain: op by op, five
    kernels read and write the activation where one does (on RepViT and the ViTs the MLP's GELU). Only a chain
    whose intermediates nothing else reads is fused."""
    producer = {o: layer for layer in layers for o in layer.node.outputs if o}
    readers = _readers(layers)
    graph_outs = set(outputs)

    def sole_reader(name: str, op_type: str) -> Layer | None:
        r = readers.get(name, [])
        ok = len(r) == 1 and name not in graph_outs and r[0].kind == "op" and r[0].node.op_type == op_type
        return r[0] if ok else None

    def const_side(layer: Layer, value: float, sides: tuple[int, ...] = (0, 1)) -> int | None:
        """The input index of ``layer`` holding the scalar ``value`` (to fp32 rounding), or None."""
        for i in sides:
            c = _scalar(layer.node.inputs[i], consts) if i < len(layer.node.inputs) else None
            if c is not None and abs(c - value) <= 1e-6 * max(1.0, abs(value)):
                return i
        return None

    fused: dict[str, Layer] = {}
    drop: set[str] = set()
    for erf in layers:
        if erf.kind != "op" or erf.node.op_type != "Erf":
            continue
        pre = producer.get(erf.node.inputs[0])
        if pre is None or pre.kind != "op" or sole_reader(erf.node.inputs[0], "Erf") is None:
            continue
        k = const_side(pre, math.sqrt(2.0), (1,)) if pre.node.op_type == "Div" else (
            const_side(pre, 1.0 / math.sqrt(2.0)) if pre.node.op_type == "Mul" else None)
        if k is None:
            continue
        x = pre.node.inputs[1 - k]
        one = sole_reader(erf.node.outputs[0], "Add")
        if x in consts or one is None or const_side(one, 1.0) is None:
            continue
        m1 = sole_reader(one.node.outputs[0], "Mul")
        if m1 is None:
            continue
        other = m1.node.inputs[1] if m1.node.inputs[0] == one.node.outputs[0] else m1.node.inputs[0]
        chain = [pre, erf, one, m1]
        if other == x or _scalar(other, consts) is not None:  # (x * (1 + erf)) * 0.5 or (0.5 * (1 + erf)) * x
            last = sole_reader(m1.node.outputs[0], "Mul")
            want_const = other == x
            if last is None:
                continue
            rest = last.node.inputs[1] if last.node.inputs[0] == m1.node.outputs[0] else last.node.inputs[0]
            if want_const and abs((_scalar(rest, consts) or 0.0) - 0.5) > 1e-6:
                continue
            if not want_const and (rest != x or abs((_scalar(other, consts) or 0.0) - 0.5) > 1e-6):
                continue
            chain.append(last)
        else:  # (x * 0.5) * (1 + erf)
            half = producer.get(other)
            if half is None or half.kind != "op" or half.node.op_type != "Mul" or \
                    sole_reader(other, "Mul") is not m1:
                continue
            hk = const_side(half, 0.5)
            if hk is None or half.node.inputs[1 - hk] != x:
                continue
            chain.insert(0, half)
        if any(p.name in drop or p.name in fused for p in chain):
            continue
        last = chain[-1]
        node = Node(last.node.name, "Gelu", "", [x], list(last.node.outputs), {"approximate": "none"})
        fused[last.name] = Layer(" + ".join(p.name for p in chain), OPS["Gelu"].layer_type,
                                 [n for p in chain for n in p.onnx_nodes], node)
        drop.update(p.name for p in chain[:-1])
    return _replaced(layers, fused, drop), len(fused)


def _fuse_silu(layers: list[Layer], outputs: list[str]) -> tuple[list[Layer], int]:
    """Run ``x * Sigmoid(x)`` (SiLU / swish, which ONNX has no op for) as one layer, as TensorRT fuses it: op by
    op, EfficientNet's every activation read and wrote its tensor twice. Only a Sigmoid that nothing else reads."""
    readers = _readers(layers)
    fused: dict[str, Layer] = {}
    drop: set[str] = set()
    for sig in layers:
        if sig.kind != "op" or sig.node.op_type != "Sigmoid" or sig.node.outputs[0] in outputs:
            continue
        x, y = sig.node.inputs[0], sig.node.outputs[0]
        r = readers.get(y, [])
        if len(r) != 1 or r[0].kind != "op" or r[0].node.op_type != "Mul" or sorted(r[0].node.inputs) != sorted([x, y]):
            continue
        mul = r[0]
        node = Node(mul.node.name, "YtkSilu", "", [x], list(mul.node.outputs))
        fused[mul.name] = Layer(f"{sig.name} + {mul.name}", OPS["YtkSilu"].layer_type,
                                sig.onnx_nodes + mul.onnx_nodes, node)
        drop.add(sig.name)
    return _replaced(layers, fused, drop), len(fused)


def _drop_dead(layers: list[Layer], outputs: list[str]) -> list[Layer]:
    """Remove layers none of whose outputs is read (engines never run dead code either)."""
    needed = set(outputs)
    keep: list[Layer] = []
    for layer in reversed(layers):
        if any(o in needed for o in layer.node.outputs if o):
            keep.append(layer)
            needed.update(n for n in layer.node.inputs if n)
    return list(reversed(keep))
