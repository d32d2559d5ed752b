"""A carved region's heavy ops and their attributes, for the candidate record.

Read from the canonical region program (activations in one spelling, identities gone), with the
shapes of the first site propagated through it on fake tensors (no compute), so that a kernel
generator learns "depthwise 3x3 stride 2, 72 channels, then ReLU" from ``candidates.json`` alone.
"""

from __future__ import annotations

from typing import Any

from ytk_hookspecs.models import RegionOp

from .regions import is_transposed_conv

#: aten op (name before the overload) -> the kind a RegionOp names
_HEAVY = {
    "conv2d": "conv", "convolution": "conv", "conv1d": "conv", "conv3d": "conv",
    "linear": "linear", "addmm": "linear",
    "matmul": "matmul", "bmm": "matmul", "mm": "matmul", "baddbmm": "matmul",
    "scaled_dot_product_attention": "attention",
    "softmax": "softmax", "_softmax": "softmax",
    "layer_norm": "layer_norm", "native_layer_norm": "layer_norm",
    "batch_norm": "batch_norm", "_native_batch_norm_legit_no_training": "batch_norm",
    "group_norm": "group_norm", "native_group_norm": "group_norm",
}
_NORMS = {"batch_norm", "layer_norm", "group_norm"}
_ACTIVATIONS = {"relu", "relu6", "hardtanh", "hardswish", "silu", "gelu", "sigmoid", "hardsigmoid", "tanh",
                "leaky_relu", "elu", "mish", "softplus"}


def _base(node: Any) -> str:
    s = str(getattr(node, "target", ""))
    return s.split("aten.", 1)[1].split(".")[0] if node.op == "call_function" and "aten." in s else ""


def _shape(node: Any) -> list[int] | None:
    v = node.meta.get("val") if hasattr(node, "meta") else None
    if v is None:
        v = (node.meta.get("tensor_meta") if hasattr(node, "meta") else None)
    shape = getattr(v, "shape", None)
    if shape is None:
        return None
    try:
        return [int(d) for d in shape]
    except (TypeError, ValueError):
        return None


def _const(v: Any) -> int | None:
    """An int argument, or the concrete value a node computed it to (a symbolic one stays None)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    val = v.meta.get("val") if hasattr(v, "meta") else None
    try:
        return int(val) if val is not None else None
    except (TypeError, ValueError):
        return None


def _ints(v: Any, n: int, default: int) -> list[int]:
    if v is None:
        return [default] * n
    vals = [_const(x) for x in v] if isinstance(v, (list, tuple)) else [_const(v)]
    if any(x is None for x in vals):
        return []
    return vals * n if len(vals) == 1 else vals  # type: ignore[return-value]


def _activation(node: Any) -> str | None:
    base = _base(node)
    if base == "hardtanh":
        lo, hi = (list(node.args[1:3]) + [-1.0, 1.0])[:2]
        return "relu6" if (float(lo), float(hi)) == (0.0, 6.0) else "hardtanh"
    if base == "gelu":
        return "gelu_tanh" if node.kwargs.get("approximate", "none") == "tanh" else "gelu"
    return base if base in _ACTIVATIONS else None


def _follow(node: Any) -> tuple[str | None, str | None]:
    """(normalisation, activation) applied to ``node``'s output: its sole user, then that one's."""
    norm = act = None
    cur = node
    for _ in range(2):
        users = list(cur.users)
        if len(users) != 1:
            break
        nxt = users[0]
        kind = _HEAVY.get(_base(nxt))
        if norm is None and act is None and kind in _NORMS:
            norm, cur = kind, nxt
            continue
        act = _activation(nxt)
        break
    return norm, act


def _propagate(gm: Any, inputs: list[Any]) -> None:
    """Shapes on every node, from fake copies of the site's inputs (no arithmetic is done)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    class _Prop(FakeTensorProp):
        """Plain numbers kept too: a depthwise conv's ``groups`` is ``sym_size(x, 1)``, and torch 2.11's
        FakeTensorProp (the GPU machine's) stores only tensors and SymInts, where 2.13 also stores ints."""

        def run_node(self, n: Any) -> Any:
            result = super().run_node(n)
            if "val" not in n.meta and isinstance(result, (int, float, bool)):
                n.meta["val"] = result
            return result

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    _Prop(gm, mode).propagate(*[mode.from_tensor(t) for t in inputs])


def region_ops(gm: Any, inputs: list[Any]) -> list[RegionOp]:
    """The heavy ops of ``gm`` in graph order. Attributes that cannot be read are left empty: a
    generator that needs them falls back to the ``.pt2``."""
    try:
        _propagate(gm, inputs)
    except Exception:  # shapes are a nicety here; the op kinds and their static attributes still stand
        pass
    out: list[RegionOp] = []
    for node in gm.graph.nodes:
        kind = _HEAVY.get(_base(node))
        if kind is None:
            continue
        try:
            out.append(_region_op(node, kind))
        except Exception:  # an unusual argument spelling: the kind alone, the .pt2 has the rest
            out.append(RegionOp(op=kind))
    return out


def _region_op(node: Any, kind: str) -> RegionOp:
    norm, act = _follow(node)
    op = RegionOp(op=kind, activation=act, normalisation=norm if kind not in _NORMS else None)
    if kind == "conv":
        x, w = node.args[0], node.args[1]
        ws, xs = _shape(w), _shape(x)
        nsp = len(ws) - 2 if ws else 2
        a = list(node.args) + [None] * 7
        transposed = False
        if _base(node) == "convolution":  # (input, weight, bias, stride, padding, dilation, transposed, ...)
            stride, padding, dilation, groups = a[3], a[4], a[5], a[8]
            transposed = is_transposed_conv(node)
        else:
            stride, padding, dilation, groups = a[3], a[4], a[5], a[6]
        g = _const(groups) if groups is not None else 1
        # a transposed conv's weight is (Cin, Cout/groups, k...), a forward one's (Cout, Cin/groups, k...)
        cout = (ws[1] * (g if isinstance(g, int) else 1) if transposed else ws[0]) if ws else None
        op = op.model_copy(update=dict(
            kernel=ws[2:] if ws else [], stride=_ints(stride, nsp, 1),
            padding=_ints(padding, nsp, 0) if not isinstance(padding, str) else [],
            dilation=_ints(dilation, nsp, 1), groups=g,
            channels_in=xs[1] if xs and len(xs) > 1 else None, channels_out=cout, transposed=transposed))
    elif kind == "linear":
        w = node.args[2] if _base(node) == "addmm" else node.args[1]
        ws = _shape(w)
        if ws and len(ws) == 2:
            out_f, in_f = (ws[1], ws[0]) if _base(node) == "addmm" else (ws[0], ws[1])
            op = op.model_copy(update=dict(channels_in=in_f, channels_out=out_f))
    return op


def merged_region_ops(modules: list[Any], site_inputs: list[list[Any]]) -> list[RegionOp]:
    """The ops of a plugin's sites (one structure, checked by the carve): an attribute that differs
    between sites (the channels of a dynamic remainder) is left empty."""
    per_site = [region_ops(gm, ins) for gm, ins in zip(modules, site_inputs)]
    first = per_site[0]
    out = []
    for i, op in enumerate(first):
        upd: dict[str, Any] = {}
        for other in per_site[1:]:
            if i >= len(other):
                continue
            for f, v in op.model_dump().items():
                if getattr(other[i], f) != v:
                    upd[f] = [] if isinstance(v, list) else None
        out.append(op.model_copy(update=upd))
    return out
