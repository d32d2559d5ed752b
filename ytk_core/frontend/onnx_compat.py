"""Rewrites of an exported program that torch's ONNX exporter needs for spellings it cannot take as they are.

Each rewrite computes the math of the node it replaces (the same values, up to the rounding of another kernel),
and every node it adds carries the replaced node's module stack, so attribution and the carve see it where the
model's code put it. ``export_onnx`` applies them only after the exporter failed on the program as traced: a
model that exports today exports the same graph.

- **A reshape of a transposed attention output** (timm's MaxViT: ``sdpa(q, k, v).transpose(1, 2).reshape(...)``
  with q, k, v chunks of one projection): the exporter's decomposition turns the reshape into a view from the
  strides of one scaled_dot_product_attention implementation and runs it on another's, and fails with "Cannot
  view a tensor ...". A contiguous copy before each reshape or view of a transpose or permute makes the view
  valid whatever the strides (ONNX has no strides: the copy is an Identity the optimiser drops).
- **Attention on tensors of other than 4 dimensions** (timm's Hiera, 5-D: heads x windows x tokens): the
  exporter translates scaled_dot_product_attention on 4-D query, key and value only ("only 4D query, key, and
  value are supported"). Every dimension before the last two is one batch to attention, so the rewrite folds
  them into one, runs the 4-D op and unfolds the result.
"""

from __future__ import annotations

import math
from typing import Any


def onnx_compatible(program: Any) -> list[str]:
    """Rewrite ``program``'s graph in place; returns what was rewritten, one phrase per kind (empty: nothing)."""
    import torch

    aten = torch.ops.aten
    graph = program.graph_module.graph
    copies = attention = 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in (aten.view.default, aten.reshape.default):
            copies += _copy_before_view(graph, node, aten)
        elif node.target is aten.scaled_dot_product_attention.default:
            attention += _attention_as_4d(graph, node, aten)
    done = []
    if copies:
        done.append(f"a contiguous copy before {copies} reshape(s) of a transpose")
    if attention:
        done.append(f"{attention} attention call(s) on other than 4-D tensors folded to 4-D")
    if done:
        graph.lint()
        program.graph_module.recompile()
    return done


def _meta_from(new: Any, old: Any, val: Any) -> None:
    """``new`` sits where ``old`` was in the model's code: its module stack and source, with its own value."""
    new.meta.update({k: v for k, v in old.meta.items() if k not in ("val", "tensor_meta")})
    new.meta["val"] = val


def _copy_before_view(graph: Any, node: Any, aten: Any) -> int:
    import torch

    src = node.args[0]
    val = getattr(src, "meta", {}).get("val")
    if val is None or getattr(src, "target", None) not in (aten.transpose.int, aten.permute.default):
        return 0
    with graph.inserting_before(node):
        copy = graph.call_function(aten.clone.default, (src,), {"memory_format": torch.contiguous_format})
    _meta_from(copy, node, val.clone(memory_format=torch.contiguous_format))
    node.replace_input_with(src, copy)
    return 1


def _attention_as_4d(graph: Any, node: Any, aten: Any) -> int:
    q, k, v = node.args[:3]
    vals = [getattr(a, "meta", {}).get("val") for a in (q, k, v)]
    out = node.meta.get("val")
    if out is None or any(t is None for t in vals) or vals[0].dim() == 4 or vals[0].dim() < 3:
        return 0
    lead = tuple(vals[0].shape[:-2])
    if any(tuple(t.shape[:-2]) != lead for t in vals[1:]):
        return 0  # batch dimensions broadcast between query, key and value: not a plain fold
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    mval = getattr(mask, "meta", {}).get("val") if mask is not None else None
    if mask is not None and (mval is None or mval.dim() > 2):
        return 0  # a mask with batch dimensions of its own: left as it is (a 2-D one broadcasts over the fold)
    b = math.prod(lead)

    def fold(a: Any, t: Any) -> Any:
        shape = [b, 1, t.shape[-2], t.shape[-1]]
        r = graph.call_function(aten.reshape.default, (a, shape))
        _meta_from(r, node, t.reshape(shape))
        return r

    with graph.inserting_before(node):
        args = (*[fold(a, t) for a, t in zip((q, k, v), vals)], *node.args[3:])
        attn = graph.call_function(aten.scaled_dot_product_attention.default, args, dict(node.kwargs))
        _meta_from(attn, node, out.reshape([b, 1, out.shape[-2], out.shape[-1]]))
        back = graph.call_function(aten.reshape.default, (attn, list(out.shape)))
        _meta_from(back, node, out)
    node.replace_all_uses_with(back)
    graph.erase_node(node)
    return 1
