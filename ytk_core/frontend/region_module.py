"""Turn one site's FX nodes into a standalone torch module: the plugin's reference semantics.

The module takes the node's inputs in the custom-op node's order (activations, then one folded
(weight, bias) pair per lifted conv, then one (weight, bias) pair per LayerNorm a lifting region holds)
and returns its outputs. BatchNorm following a lifted conv is folded into that pair, exactly as the
engine will see the weights, and so is a layer scale (a per-channel ``[C, 1, 1]`` parameter multiplied in
right after the conv or its BatchNorm).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from .region_rules import LN_BASES, FactGraph, baked_weights, folded_scale
from .regions import is_conv, is_transposed_conv, op_name


@dataclass
class RegionSpec:
    """The interface of a site's region and everything needed to rebuild it."""

    nodes: list[Any]
    activations: list[Any]             # outside fx nodes feeding the region, first-use order
    outputs: list[Any]                 # region nodes consumed outside (or graph outputs)
    convs: list[Any] = field(default_factory=list)       # lifted convs in call order
    folded_bn: dict[Any, Any] = field(default_factory=dict)  # conv -> bn node folded into it
    norms: list[Any] = field(default_factory=list)       # LayerNorms whose (weight, bias) are lifted, in call order
    folded_scale: dict[Any, tuple[Any, Any]] = field(default_factory=dict)  # conv -> (mul node, [C,1,1] weight)
    baked: list[Any] = field(default_factory=list)       # weight placeholders kept inside the region


def _spatial_dims(c: Any) -> int:
    """1, 2 or 3: a conv's spatial rank, from its op (conv1d/conv3d) or its weight's rank."""
    name = op_name(c).split(".")[0]
    if name in ("conv1d", "conv3d"):
        return int(name[4])
    a = list(c.args)
    wval = getattr(a[1] if len(a) > 1 else None, "meta", {}).get("val")
    return int(wval.dim()) - 2 if wval is not None and wval.dim() >= 3 else 2


def _conv_parts(c: Any) -> tuple[Any, Any, Any, Any, Any, Any, Any]:
    """(input, weight, bias, stride, padding, dilation, groups) of aten.conv1d/2d/3d or aten.convolution, omitted
    arguments at the op's defaults for its spatial rank. ``padding`` may be a string ('same', 'valid')."""
    a = list(c.args) + [None] * 9
    n = _spatial_dims(c)
    if op_name(c).split(".")[0] in ("convolution", "_convolution"):
        if a[6]:  # transposed
            raise UsageError(f"{c.name} is a transposed convolution, whose weights a conv lift cannot rebuild; "
                             "use @lift=none")
        return a[0], a[1], a[2], a[3], a[4], a[5], a[8]
    kw = c.kwargs
    return (a[0], a[1], a[2] if len(c.args) > 2 else kw.get("bias"),
            a[3] if len(c.args) > 3 else kw.get("stride", [1] * n),
            a[4] if len(c.args) > 4 else kw.get("padding", [0] * n),
            a[5] if len(c.args) > 5 else kw.get("dilation", [1] * n),
            a[6] if len(c.args) > 6 else kw.get("groups", 1))


def _is_depthwise(conv: Any, groups: Any) -> bool:
    x = _conv_parts(conv)[0]
    val = getattr(x, "meta", {}).get("val")
    return val is not None and val.dim() >= 3 and int(groups) > 1 and int(val.shape[1]) == int(groups)


def conv_signature(conv: Any) -> tuple[Any, ...]:
    """What must agree between sites of one plugin: kernel size, stride, padding, dilation, depthwise."""
    _, w, _, stride, padding, dilation, groups = _conv_parts(conv)
    wval = getattr(w, "meta", {}).get("val")
    k = tuple(int(d) for d in wval.shape[2:]) if wval is not None else ()
    return (k, tuple(stride), tuple(padding), tuple(dilation), _is_depthwise(conv, groups))


def is_batch_norm(n: Any) -> bool:
    return n.op == "call_function" and op_name(n).split(".")[0] in (
        "_native_batch_norm_legit_no_training", "batch_norm", "_native_batch_norm_legit")


_is_bn = is_batch_norm


def _bn_parts(bn: Any) -> tuple[Any, Any, Any, Any, float]:
    a = bn.args
    if op_name(bn).startswith("batch_norm"):
        return a[1], a[2], a[3], a[4], float(a[7])
    return a[1], a[2], a[3], a[4], float(a[6])


def _norm_parts(n: Any) -> tuple[Any, Any]:
    """(weight, bias) of aten.layer_norm / native_layer_norm (either may be None)."""
    a = list(n.args) + [None] * 5
    return (a[2] if len(n.args) > 2 else n.kwargs.get("weight"), a[3] if len(n.args) > 3 else n.kwargs.get("bias"))


def is_layer_norm(n: Any) -> bool:
    return n.op == "call_function" and op_name(n).split(".")[0] in LN_BASES


def analyse(nodes: list[Any], weight_names: set[str], graph_outputs: set[Any], lift: str | None,
            where: str, facts: FactGraph) -> tuple[RegionSpec, str]:
    """Find the region's boundary and decide which convs are lifted; returns (spec, lift mode used).
    What stays baked is region_rules.baked_weights on ``facts`` (the traced graph's facts), the rule
    propose judges a family's sites by."""
    inside = set(nodes)
    acts: list[Any] = []
    weights: dict[str, Any] = {}
    for n in nodes:
        for m in n.all_input_nodes:
            if m in inside:
                continue
            if m.op == "placeholder" and m.name in weight_names:
                weights.setdefault(m.name, m)
            elif m not in acts:
                acts.append(m)
    # A folded constant (no ONNX node) is no output even when read outside: ONNX reads its initializer
    # there, and another region that needs it computes it too (the parts of one :around block).
    outs = [n for n in nodes if n in graph_outputs or (any(u not in inside for u in n.users) and
                                                        not facts.folded(n.name))]
    convs = [n for n in nodes if is_conv(n)]
    transposed = [c for c in convs if is_transposed_conv(c)]
    if lift:
        mode = lift
    elif not convs or transposed:
        mode = "none"  # a transposed conv's weights stay baked: a conv lift cannot rebuild them
    elif len(convs) == 1:
        mode = "fold_conv_bn"
    else:
        # several convs (an MLP of 1x1 convs, a whole inverted residual): one folded pair each
        mode = "fold_conv_bn_seq"
    if mode != "none" and transposed:
        raise UsageError(f"region {where or '<root>'}: {transposed[0].name} is a transposed convolution, whose "
                         f"weights @lift={mode} cannot rebuild; drop the @lift (its weights then stay baked, the "
                         "default for a transposed conv) or use @lift=none")
    if mode != "none" and lift and not convs:
        raise UsageError(f"region {where or '<root>'} has no convolution; @lift={mode} lifts a conv's (weight, bias) "
                         "and has nothing to lift here. Drop the @lift (its weights stay as they are) or use "
                         "@lift=none.")
    if mode == "fold_conv_bn" and len(convs) > 1:
        raise UsageError(f"region {where or '<root>'} contains {len(convs)} convolutions; fold_conv_bn lifts exactly "
                         "one (weight, bias) pair, which cannot describe several convolutions. Add "
                         "@lift=fold_conv_bn_seq (one folded pair per conv, in call order) or @lift=none.")
    baked = [weights[w] for w in baked_weights([n.name for n in nodes], facts, lift=mode != "none")]
    spec = RegionSpec(nodes=nodes, activations=acts, outputs=outs, baked=baked)
    if mode != "none":
        for c in convs:
            _, w, _, _, _, _, _ = _conv_parts(c)
            if not (hasattr(w, "op") and w.op == "placeholder" and w.name in weight_names):
                raise UsageError(f"region {where}: conv {c.name} takes its weight from a computed tensor, so it cannot "
                                 "be lifted; use @lift=none")
            spec.convs.append(c)
            users = list(c.users)
            if len(users) == 1 and users[0] in inside and _is_bn(users[0]):
                spec.folded_bn[c] = users[0]
            scale = folded_scale(c.name, {n.name for n in nodes}, facts)
            if scale is not None:
                by_name = {n.name: n for n in nodes}
                spec.folded_scale[c] = (by_name[scale[0]], weights[scale[1]])
        # region_rules.lifted_norm on the traced graph: a LayerNorm whose weight is a parameter
        for n in nodes:
            w = _norm_parts(n)[0] if is_layer_norm(n) else None
            if w is not None and getattr(w, "op", "") == "placeholder" and w.name in weight_names:
                spec.norms.append(n)
    return spec, mode


def folded_weights(spec: RegionSpec, values: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Per lifted conv: (weight, bias) with any following BatchNorm folded in; then per lifted LayerNorm its
    (weight, bias), a zero bias where it has none (float32)."""
    import torch

    pairs = []
    with torch.no_grad():
        for c in spec.convs:
            pairs.append(_fold_one(spec, c, values))
        for n in spec.norms:
            w, b = _norm_parts(n)
            wt = values[w.name].detach().float().contiguous()
            bt = values[b.name].detach().float().contiguous() if b is not None else torch.zeros_like(wt)
            pairs.append((wt, bt))
    return pairs


def _fold_one(spec: RegionSpec, c: Any, values: dict[str, Any]) -> tuple[Any, Any]:
    import torch

    _, w, b, _, _, _, _ = _conv_parts(c)
    wt = values[w.name].detach().to(torch.float64)
    bt = values[b.name].detach().to(torch.float64) if b is not None else torch.zeros(wt.shape[0], dtype=torch.float64)
    bn = spec.folded_bn.get(c)
    if bn is not None:
        g, beta, mean, var, eps = _bn_parts(bn)
        gv = values[g.name].double() if g is not None else torch.ones_like(bt)
        betav = values[beta.name].double() if beta is not None else torch.zeros_like(bt)
        scale = gv / torch.sqrt(values[var.name].double() + eps)
        wt = wt * scale.reshape(-1, *([1] * (wt.dim() - 1)))
        bt = (bt - values[mean.name].double()) * scale + betav
    if c in spec.folded_scale:  # a layer scale after it: y * s = conv(x, w * s) + b * s
        s = values[spec.folded_scale[c][1].name].double().reshape(-1)
        wt = wt * s.reshape(-1, *([1] * (wt.dim() - 1)))
        bt = bt * s
    return wt.float().contiguous(), bt.float().contiguous()




def build_module(spec: RegionSpec, values: dict[str, Any]) -> Any:
    """A GraphModule: forward(activations..., w0, b0, w1, b1, ...) -> outputs (conv pairs, then norm pairs)."""
    import torch
    from torch import fx, nn

    g = fx.Graph()
    env: dict[Any, Any] = {}
    for i, a in enumerate(spec.activations):
        env[a] = g.placeholder(f"in{i}")
    lifted: dict[Any, tuple[Any, Any]] = {}
    for k, c in enumerate(spec.convs + spec.norms):
        lifted[c] = (g.placeholder(f"w{k}"), g.placeholder(f"b{k}"))
    root = nn.Module()
    for j, p in enumerate(spec.baked):
        root.register_buffer(f"const{j}", values[p.name].detach().clone())
        env[p] = g.get_attr(f"const{j}")
    folded_bn = {bn: c for c, bn in spec.folded_bn.items()}
    scales = {mul: w for mul, w in spec.folded_scale.values()}  # each computes what its other operand holds
    for n in spec.nodes:
        if n in lifted and is_layer_norm(n):
            args = list(n.args) + [None] * max(0, 4 - len(n.args))
            args[0] = env[args[0]]
            args[2], args[3] = lifted[n]
            kwargs = {k: v for k, v in n.kwargs.items() if k not in ("weight", "bias")}
            env[n] = g.call_function(n.target, tuple(args), kwargs)
        elif n in lifted:
            x, _, _, stride, padding, dilation, groups = _conv_parts(n)
            w, b = lifted[n]
            groups_arg: Any = int(groups)
            if _is_depthwise(n, groups):
                # Depthwise: groups == channels. Tie it to the input so one program serves every C.
                groups_arg = g.call_function(torch.ops.aten.sym_size.int, (env[x], 1))
            elif int(groups) > 1:
                # Grouped: the group size is what the sites share (e.g. 16 -> 16 per group at 384 and
                # 768 channels), so groups = C // (input channels per group), from the input.
                wval = getattr(_conv_parts(n)[1], "meta", {}).get("val")
                if wval is not None:
                    c_in = g.call_function(torch.ops.aten.sym_size.int, (env[x], 1))
                    groups_arg = g.call_function(operator.floordiv, (c_in, int(wval.shape[1])))
            op = {1: torch.ops.aten.conv1d, 2: torch.ops.aten.conv2d, 3: torch.ops.aten.conv3d}[_spatial_dims(n)]
            if isinstance(padding, str):  # padding="same"/"valid": the overload that takes the word
                env[n] = g.call_function(op.padding, (env[x], w, b, list(stride), padding, list(dilation),
                                                      groups_arg))
            else:
                env[n] = g.call_function(op.default, (env[x], w, b, list(stride), list(padding), list(dilation),
                                                      groups_arg))
        elif n in folded_bn:
            env[n] = ("folded", folded_bn[n])
        elif n in scales:
            env[n] = env[next(a for a in n.args if a is not scales[n])]
        elif n.target is operator.getitem and isinstance(env.get(n.args[0]), tuple) and env[n.args[0]][0] == "folded":
            if n.args[1] != 0:
                raise UsageError(f"region uses BatchNorm statistics output {n.name}; "
                                 "it cannot be folded (use @lift=none)")
            env[n] = env[env[n.args[0]][1]]
        else:
            env[n] = g.node_copy(n, lambda m: env[m])
    outs = [env[o] for o in spec.outputs]
    g.output(outs[0] if len(outs) == 1 else tuple(outs))
    gm = fx.GraphModule(root, g)
    gm.eval()
    return gm
