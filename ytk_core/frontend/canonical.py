"""The canonical region graph: one spelling for the same math, before any generator sees a region.

The carve rewrites every region module (the plugin's reference program, the ``.pt2`` a kernel
generator reads) with these passes, so that two models writing the same computation differently
get the same region -- and the same kernel:

* **identities removed**: eval dropout, clone, alias, contiguous, detach, casts to the same dtype,
  reshapes and expands to the same shape;
* **activations in one spelling**, found by what they compute rather than how they are written:
  every single-input chain of pointwise ops is evaluated on probe values in float64 and, when it
  equals a known activation there, replaced by that activation's one aten op (hardswish written
  as ``x * relu6(x + 3) / 6`` or ``x * hardsigmoid(x)``, SiLU as ``x * sigmoid(x)``, ReLU6 as
  clamp / hardtanh / relu6 -> ``hardtanh(x, 0, 6)``, GELU written out with erf or tanh, ...);
* **zero padding as the convolution's own**, where a symmetric ``constant_pad_nd`` feeds only a conv;
* **a global average pool as a mean**: ``avg_pool2d`` whose window is the whole image (the official MobileOne
  SE's ``F.avg_pool2d(x, kernel_size=[h, w])``) becomes ``mean(x, [2, 3], keepdim=True)``, as
  ``x.mean((2, 3), keepdim=True)`` writes it.

BatchNorm after a lifted conv is folded by the lift (region_module). The carve checks the
rewritten module against the model's own captured outputs at every site, so a rewrite that
changed the math is caught there, not in a kernel.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

#: aten ops (name before the overload) that act elementwise on one tensor plus Python scalars.
_POINTWISE = {
    "add", "sub", "rsub", "mul", "div", "neg", "relu", "relu6", "hardtanh", "clamp", "clamp_min", "clamp_max",
    "sigmoid", "tanh", "erf", "exp", "pow", "sqrt", "rsqrt", "reciprocal", "hardswish", "hardsigmoid", "silu",
    "gelu", "abs", "leaky_relu", "elu", "softplus", "mish",
}
_IDENTITY = {"clone", "alias", "contiguous", "detach", "lift_fresh_copy"}


def _base(node: Any) -> str:
    if node.op != "call_function" or node.target is operator.getitem:
        return ""
    s = str(node.target)
    return s.split("aten.", 1)[1].split(".")[0] if "aten." in s else ""


def _val(node: Any) -> Any:
    return node.meta.get("val") if hasattr(node, "meta") else None


def canonicalise(gm: Any) -> list[str]:
    """Rewrite ``gm`` (a torch.fx.GraphModule) in place; returns one note per kind of rewrite made."""
    notes: list[str] = []
    for name, rewrite in (("identities removed", _drop_identities),
                          ("activations respelled", _respell_activations),
                          ("zero padding moved into the conv", _fold_pads),
                          ("global average pools written as a mean", _pools_as_means)):
        n = rewrite(gm.graph)
        if n:
            notes.append(f"canonical: {name} ({n})")
    if notes:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return notes


# -- identities ----------------------------------------------------------------------------------
def _is_identity(node: Any) -> bool:
    base = _base(node)
    if base in _IDENTITY:
        return True
    if base in ("dropout", "native_dropout"):
        train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train", True)
        p = node.args[1] if len(node.args) > 1 else node.kwargs.get("p", 0.5)
        return base == "dropout" and (train is False or p == 0)
    src = node.args[0] if node.args else None
    vin, vout = _val(src) if hasattr(src, "meta") else None, _val(node)
    if vin is None or vout is None or not hasattr(vin, "shape") or not hasattr(vout, "shape"):
        return False
    if base == "_to_copy":
        extra = {k for k in node.kwargs if k not in ("dtype", "memory_format", "layout", "device")}
        return not extra and vin.dtype == vout.dtype and vin.device == vout.device
    if base in ("view", "reshape", "_unsafe_view", "expand", "flatten"):
        return tuple(vin.shape) == tuple(vout.shape)
    return False


#: Ops that need their input laid out contiguously: a clone/contiguous before them is not an identity.
_NEEDS_CONTIGUOUS = {"view", "_unsafe_view", "as_strided"}
#: Ops whose result is a view with strides derived from their input's: a layout copy before them still decides
#: whether a view after them is legal (nn.MultiheadAttention: ``contiguous()``, ``select``, then ``view``).
_STRIDES_THROUGH = {"select", "slice", "squeeze", "unsqueeze", "transpose", "permute", "t", "split",
                    "split_with_sizes", "unbind", "chunk", "narrow", "expand", "unflatten"}


def _feeds_a_view(node: Any, depth: int = 0) -> bool:
    """Whether ``node``'s result reaches a view-only op directly or through ops that pass its strides on."""
    for u in node.users:
        base = _base(u)
        if base in _NEEDS_CONTIGUOUS:
            return True
        through = base in _STRIDES_THROUGH or (u.op == "call_function" and u.target is operator.getitem)
        if through and depth < 8 and _feeds_a_view(u, depth + 1):
            return True
    return False


def _drop_identities(graph: Any) -> int:
    n = 0
    for node in list(graph.nodes):
        if _base(node) in ("clone", "contiguous", "_to_copy") and _feeds_a_view(node):
            continue
        if node.op == "call_function" and _is_identity(node) and node.args and hasattr(node.args[0], "op"):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            n += 1
    return n


# -- activations ----------------------------------------------------------------------------------
def _probe() -> Any:
    import torch

    xs = torch.linspace(-9.0, 9.0, 3601, dtype=torch.float64)
    return torch.cat([xs, torch.tensor([-3.0, 3.0, 0.0, -6.0, 6.0, 1e-3, -1e-3], dtype=torch.float64)])


def _canonical_forms() -> list[tuple[str, Callable[[Any], Any], Callable[[Any, Any], Any]]]:
    """(name, reference on float64, builder of the one canonical node)."""
    import torch
    import torch.nn.functional as F

    aten = torch.ops.aten

    def op(target: Any, *extra: Any, **kw: Any) -> Callable[[Any, Any], Any]:
        return lambda g, x: g.call_function(target, (x, *extra), kw)

    return [
        ("identity", lambda x: x, lambda g, x: x),
        ("relu", F.relu, op(aten.relu.default)),
        ("relu6", lambda x: x.clamp(0.0, 6.0), op(aten.hardtanh.default, 0.0, 6.0)),
        ("hardswish", F.hardswish, op(aten.hardswish.default)),
        ("hardsigmoid", F.hardsigmoid, op(aten.hardsigmoid.default)),
        ("silu", F.silu, op(aten.silu.default)),
        ("sigmoid", torch.sigmoid, op(aten.sigmoid.default)),
        ("gelu", F.gelu, op(aten.gelu.default)),
        ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), op(aten.gelu.default, approximate="tanh")),
        ("tanh", torch.tanh, op(aten.tanh.default)),
    ]


def _cone(y: Any) -> tuple[list[Any], Any] | None:
    """The pointwise nodes computing ``y`` from one tensor leaf, in graph order, and that leaf."""
    nodes, leaves, stack, seen = [], set(), [y], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if _base(n) == "scalar_tensor" and all(isinstance(a, (int, float, bool)) for a in n.args):
            nodes.append(n)  # a constant the exporter made a tensor of (``x + 3`` as scalar_tensor(3))
        elif _base(n) in _POINTWISE:
            nodes.append(n)
            for a in list(n.args) + list(n.kwargs.values()):
                if hasattr(a, "op"):
                    stack.append(a)
                elif not isinstance(a, (int, float, bool, str, type(None))):
                    return None
        else:
            leaves.add(n)
    if len(leaves) != 1 or not nodes:
        return None
    leaf = next(iter(leaves))
    # every other operand is a Python scalar, so the chain is elementwise in its leaf; only its
    # dtype can rule it out (an integer chain is no activation)
    vy = _val(y)
    if vy is not None and hasattr(vy, "dtype") and not vy.dtype.is_floating_point:
        return None
    order = {n: i for i, n in enumerate(y.graph.nodes)}
    return sorted(nodes, key=order.get), leaf


def _evaluate(nodes: list[Any], leaf: Any, x: Any) -> Any:
    env = {leaf: x}

    def arg(a: Any) -> Any:
        return env[a] if hasattr(a, "op") else a

    for n in nodes:
        env[n] = n.target(*[arg(a) for a in n.args], **{k: arg(v) for k, v in n.kwargs.items()})
    return env[nodes[-1]]


def _respell_activations(graph: Any) -> int:
    import torch

    x = _probe()
    forms = _canonical_forms()
    done, n = set(), 0
    for y in reversed(list(graph.nodes)):
        if y in done or _base(y) not in _POINTWISE or y.op != "call_function":
            continue
        found = _cone(y)
        if found is None:
            continue
        nodes, leaf = found
        try:
            with torch.no_grad():
                got = _evaluate(nodes, leaf, x.clone())
        except Exception:  # an op that does not take a float64 probe: leave the chain as written
            continue
        if not isinstance(got, torch.Tensor) or got.shape != x.shape:
            continue
        for name, ref, build in forms:
            want = ref(x)
            # float64 spellings of one function agree to ~1e-15; a chain that merely comes close
            # (x + 1e-15 guarding a division) is not that function, and identity must be exact
            same = torch.equal(got, want) if name == "identity" else torch.allclose(got, want, rtol=1e-9, atol=1e-12)
            if same:
                done.update(nodes)
                if len(nodes) == 1 and _is_form(nodes[0], name):
                    break  # already the canonical spelling
                with graph.inserting_before(y):
                    new = build(graph, leaf)
                if new is not leaf:
                    new.meta = dict(y.meta)
                y.replace_all_uses_with(new)
                n += 1
                break
    return n


def _is_form(node: Any, name: str) -> bool:
    base = _base(node)
    if name == "relu6":
        return base == "hardtanh" and list(node.args[1:3]) == [0.0, 6.0]
    if name == "gelu_tanh":
        return base == "gelu" and node.kwargs.get("approximate") == "tanh"
    if name == "gelu":
        return base == "gelu" and node.kwargs.get("approximate", "none") == "none"
    return base == name


# -- padding --------------------------------------------------------------------------------------
def _fold_pads(graph: Any) -> int:
    n = 0
    for conv in list(graph.nodes):
        if _base(conv) != "conv2d" or not conv.args:
            continue
        pad = conv.args[0]
        if _base(pad) not in ("constant_pad_nd", "pad") or len(pad.users) != 1:
            continue
        if _base(pad) == "pad" and (pad.args[2] if len(pad.args) > 2
                                    else pad.kwargs.get("mode", "constant")) != "constant":
            continue
        pads = list(pad.args[1])
        value = pad.args[-1] if _base(pad) == "constant_pad_nd" and len(pad.args) > 2 else pad.kwargs.get("value", 0)
        if _base(pad) == "pad" and len(pad.args) > 3:
            value = pad.args[3]
        value = 0 if value is None else value
        if value not in (0, 0.0) or len(pads) != 4 or pads[0] != pads[1] or pads[2] != pads[3] or min(pads) < 0:
            continue
        args = list(conv.args) + [None] * (7 - len(conv.args))
        padding = args[4] if args[4] is not None else conv.kwargs.get("padding", [0, 0])
        if isinstance(padding, str) or len(padding) != 2:
            continue
        args[4] = [int(padding[0]) + pads[2], int(padding[1]) + pads[0]]
        args[3] = args[3] if args[3] is not None else conv.kwargs.get("stride", [1, 1])
        args[5] = args[5] if args[5] is not None else conv.kwargs.get("dilation", [1, 1])
        args[6] = args[6] if args[6] is not None else conv.kwargs.get("groups", 1)
        conv.args = (pad.args[0], *args[1:])
        conv.kwargs = {}
        graph.erase_node(pad)
        n += 1
    return n


# -- global pools ---------------------------------------------------------------------------------
def _pools_as_means(graph: Any) -> int:
    import torch

    n = 0
    for pool in list(graph.nodes):
        if _base(pool) != "avg_pool2d" or not pool.args:
            continue
        x, vin = pool.args[0], _val(pool.args[0])
        if vin is None or not hasattr(vin, "shape") or vin.dim() != 4:
            continue
        a = list(pool.args) + [None] * (7 - len(pool.args))
        kernel = a[1] if a[1] is not None else pool.kwargs.get("kernel_size")
        padding = a[3] if a[3] is not None else pool.kwargs.get("padding", 0)
        ceil = a[4] if a[4] is not None else pool.kwargs.get("ceil_mode", False)
        divisor = a[6] if a[6] is not None else pool.kwargs.get("divisor_override")
        kernel = [kernel, kernel] if isinstance(kernel, int) else list(kernel or [])
        padding = [padding, padding] if isinstance(padding, int) else list(padding or [0, 0])
        hw = [int(d) for d in vin.shape[2:]]
        if kernel != hw or any(int(p) for p in padding) or ceil or divisor is not None:
            continue  # a window smaller than the image, padded (count_include_pad matters), or a divisor of its own
        # one window covers the image, whatever its stride
        with graph.inserting_before(pool):
            mean = graph.call_function(torch.ops.aten.mean.dim, (x, [2, 3], True))
        mean.meta.update(pool.meta)
        pool.replace_all_uses_with(mean)
        graph.erase_node(pool)
        n += 1
    return n
