"""Turn one site's FX nodes into a standalone torch module: the plugin's reference semantics.

The module takes the node's inputs in the custom-op node's order (activations, then one folded
(weight, bias) pair per lifted conv, then one (weight, bias) pair per LayerNorm a lifting region holds)
and returns its outputs. BatchNorm following a lifted conv is folded into that pair, exactly as the
engine will see the weights, and so is a layer scale (a per-channel ``[C, 1, 1]`` parameter multiplied in
right after the conv or its BatchNorm). Parallel branches summed over one input (a RepVGG / MobileOne block
written out, region_rules.branch_sums) are merged into one conv and its one pair, as re-parameterising the
block would.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from .region_rules import LN_BASES, FactGraph, baked_weights, branch_sums, folded_scale
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
    sums: dict[Any, "MergedSum"] = field(default_factory=dict)  # root node -> the branch sum one conv computes


@dataclass
class MergedSum:
    """A branch sum (region_rules.BranchSum) as the FX nodes it merges and the one conv it becomes."""

    x: Any
    convs: list[Any]
    members: list[Any]
    kernel: tuple[int, ...]      # the merged kernel: each dimension's largest
    stride: tuple[int, ...]
    padding: tuple[int, ...]     # the merged conv's: centred like every branch
    dilation: tuple[int, ...]
    groups: int


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


def conv_signature(conv: Any, spec: RegionSpec | None = None) -> tuple[Any, ...]:
    """What must agree between sites of one plugin: kernel size, stride, padding, dilation, depthwise (of the
    merged conv, for a branch sum's root)."""
    m = spec.sums.get(conv) if spec is not None else None
    if m is not None:
        return (m.kernel, m.stride, m.padding, m.dilation, _is_depthwise(m.convs[0], m.groups))
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
    by_name = {n.name: n for n in nodes}
    sums = [] if transposed or lift == "none" else branch_sums(list(by_name), facts)
    in_sums = {by_name[c] for b in sums for c in b.convs}
    units = len(sums) + len([c for c in convs if c not in in_sums])  # lifted pairs: one per sum, one per conv
    if lift:
        mode = lift
    elif not convs or transposed:
        mode = "none"  # a transposed conv's weights stay baked: a conv lift cannot rebuild them
    elif units == 1:
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
    if mode == "fold_conv_bn" and units > 1:
        raise UsageError(f"region {where or '<root>'} contains {len(convs)} convolutions; fold_conv_bn lifts exactly "
                         "one (weight, bias) pair, which cannot describe several convolutions. Add "
                         "@lift=fold_conv_bn_seq (one folded pair per conv, in call order) or @lift=none.")
    baked = [weights[w] for w in baked_weights([n.name for n in nodes], facts, lift=mode != "none")]
    spec = RegionSpec(nodes=nodes, activations=acts, outputs=outs, baked=baked)
    if mode != "none":
        merged = {by_name[b.root]: _merged_sum(b, by_name, where) for b in sums}
        spec.sums = merged
        for c in convs:
            if c in in_sums:
                continue
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
                spec.folded_scale[c] = (by_name[scale[0]], weights[scale[1]])
        # each sum's pair where its value is computed, in call order with the convs' own
        spec.convs = sorted(spec.convs + list(merged), key=nodes.index)
        # region_rules.lifted_norm on the traced graph: a LayerNorm whose weight is a parameter
        for n in nodes:
            w = _norm_parts(n)[0] if is_layer_norm(n) else None
            if w is not None and getattr(w, "op", "") == "placeholder" and w.name in weight_names:
                spec.norms.append(n)
    return spec, mode


def _merged_sum(b: Any, by_name: dict[str, Any], where: str) -> MergedSum:
    """The one conv a branch sum becomes, refused (with why) where its branches do not line up exactly: the
    facts propose decides on hold only shapes, the traced convs hold their stride, padding and dilation."""
    convs = [by_name[c] for c in b.convs]
    parts = [_conv_parts(c) for c in convs]
    shapes = [tuple(int(d) for d in p[1].meta["val"].shape) for p in parts]
    ks = [s[2:] for s in shapes]
    kernel = tuple(max(k[d] for k in ks) for d in range(len(ks[0])))
    strides = {tuple(int(v) for v in p[3]) for p in parts}
    dilations = {tuple(int(v) for v in p[5]) for p in parts}
    groups = {int(p[6]) for p in parts}
    names = ", ".join(c.name for c in convs)
    if any(isinstance(p[4], str) for p in parts):
        pads = [tuple((k - 1) // 2 for k in kk) if p[4] == "same" else None for p, kk in zip(parts, ks)]
    else:
        pads = [tuple(int(v) for v in p[4]) for p in parts]
    offsets = {tuple(pp[d] - kk[d] // 2 for d in range(len(kk))) if pp is not None else None
               for pp, kk in zip(pads, ks)}
    why = None
    if len(strides) > 1 or len(dilations) > 1 or len(groups) > 1:
        why = "their strides, dilations or groups differ"
    elif dilations != {tuple([1] * len(kernel))} and len(set(ks)) > 1:
        why = "dilated kernels of different sizes do not nest"
    elif None in offsets or len(offsets) > 1:
        why = "their paddings do not centre them alike"
    elif b.identity and offsets != {tuple([0] * len(kernel))}:
        why = "an identity branch needs 'same' padding"
    if why:
        raise UsageError(f"region {where or '<root>'}: the parallel convs {names} are summed but cannot be merged "
                         f"into one conv ({why}); use @lift=none")
    off = next(iter(offsets))
    return MergedSum(x=convs[0].args[0], convs=convs,  # every branch conv reads x
                     members=[by_name[m] for m in b.members], kernel=kernel, stride=next(iter(strides)),
                     padding=tuple(kernel[d] // 2 + off[d] for d in range(len(kernel))),
                     dilation=next(iter(dilations)), groups=next(iter(groups)))


def _merged_pair(m: MergedSum, values: dict[str, Any]) -> tuple[Any, Any]:
    """The (weight, bias) of the one conv a branch sum computes, in float64 then float32: each member's value
    as ``conv(x, W) + b`` over the merged kernel, composed in graph order."""
    import torch
    import torch.nn.functional as F

    w0 = values[_conv_parts(m.convs[0])[1].name]
    cout, cpg = int(w0.shape[0]), int(w0.shape[1])
    opg = cout // m.groups
    dt = torch.float64
    pairs: dict[Any, tuple[Any, Any]] = {}

    def of(a: Any) -> tuple[Any, Any]:
        if a is m.x:  # x itself (the sum's shapes agree, so x has cout channels): o reads o, at the centre
            eye = torch.zeros(cout, cpg, *m.kernel, dtype=dt)
            for o in range(cout):
                eye[(o, o - (o // opg) * cpg, *[k // 2 for k in m.kernel])] = 1.0
            return eye, torch.zeros(cout, dtype=dt)
        if a in pairs:
            return pairs[a]
        # a number: a bias only
        return torch.zeros(cout, cpg, *m.kernel, dtype=dt), torch.full((cout,), float(a), dtype=dt)

    for n in m.members:
        base = op_name(n).split(".")[0]
        if n in m.convs:
            _, w, b, _, _, _, _ = _conv_parts(n)
            wt = values[w.name].detach().to(dt)
            pad = []
            for d in reversed(range(len(m.kernel))):
                extra = (m.kernel[d] - wt.shape[2 + d]) // 2
                pad += [extra, extra]
            pairs[n] = (F.pad(wt, pad), values[b.name].detach().to(dt).reshape(-1) if b is not None
                        else torch.zeros(cout, dtype=dt))
        elif is_batch_norm(n):
            pairs[n] = _through_bn(n, *of(n.args[0]), values)
        elif n.target is operator.getitem:
            if n.args[1] != 0:
                raise UsageError(f"region uses BatchNorm statistics output {n.name}; it cannot be folded "
                                 "(use @lift=none)")
            pairs[n] = of(n.args[0])
        elif base == "scalar_tensor":  # a number the exporter made a tensor of
            pairs[n] = of(float(n.args[0]))
        elif base in ("add", "sub"):
            (wa, ba), (wb, bb) = of(n.args[0]), of(n.args[1])
            sign = -1.0 if base == "sub" else 1.0
            alpha = float(n.kwargs.get("alpha", 1)) * sign
            pairs[n] = (wa + alpha * wb, ba + alpha * bb)
        elif base == "mul":  # by a per-channel parameter (a layer scale)
            a, p = (n.args[0], n.args[1]) if n.args[0] in pairs else (n.args[1], n.args[0])
            pairs[n] = _scaled(*of(a), values[p.name].detach())
        else:  # an identity (eval dropout, clone)
            pairs[n] = of(n.args[0])
    wt, bt = pairs[m.members[-1]]
    return wt.float().contiguous(), bt.float().contiguous()


def folded_weights(spec: RegionSpec, values: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Per lifted conv: (weight, bias) with any following BatchNorm folded in; then per lifted LayerNorm its
    (weight, bias), a zero bias where it has none (float32)."""
    import torch

    pairs = []
    with torch.no_grad():
        for c in spec.convs:
            pairs.append(_merged_pair(spec.sums[c], values) if c in spec.sums else _fold_one(spec, c, values))
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
        wt, bt = _through_bn(bn, wt, bt, values)
    if c in spec.folded_scale:  # a layer scale after it: y * s = conv(x, w * s) + b * s
        wt, bt = _scaled(wt, bt, values[spec.folded_scale[c][1].name])
    return wt.float().contiguous(), bt.float().contiguous()


def _through_bn(bn: Any, wt: Any, bt: Any, values: dict[str, Any]) -> tuple[Any, Any]:
    """(weight, bias) of ``bn(conv(x, wt) + bt)`` in eval mode (float64)."""
    import torch

    g, beta, mean, var, eps = _bn_parts(bn)
    gv = values[g.name].double().reshape(-1) if g is not None else torch.ones_like(bt)
    betav = values[beta.name].double().reshape(-1) if beta is not None else torch.zeros_like(bt)
    scale = gv / torch.sqrt(values[var.name].double().reshape(-1) + eps)
    wt, bt = _scaled(wt, bt - values[mean.name].double().reshape(-1), scale)
    return wt, bt + betav


def _scaled(wt: Any, bt: Any, s: Any) -> tuple[Any, Any]:
    """(weight, bias) of ``(conv(x, wt) + bt) * s`` for a per-output-channel ``s`` (float64)."""
    s = s.double().reshape(-1)
    return wt * s.reshape(-1, *([1] * (wt.dim() - 1))), bt * s


def _emit_conv(g: Any, conv: Any, x: Any, w: Any, b: Any, stride: list[int], padding: Any, dilation: list[int],
               groups: int, per_group: int | None) -> Any:
    """A conv with lifted (w, b) in graph ``g``, shaped like ``conv``: its groups tied to the input's channels
    where that lets one program serve every site's width."""
    import torch

    groups_arg: Any = groups
    if _is_depthwise(conv, groups):
        # Depthwise: groups == channels. Tie it to the input so one program serves every C.
        groups_arg = g.call_function(torch.ops.aten.sym_size.int, (x, 1))
    elif groups > 1 and per_group is not None:
        # Grouped: the group size is what the sites share (e.g. 16 -> 16 per group at 384 and
        # 768 channels), so groups = C // (input channels per group), from the input.
        c_in = g.call_function(torch.ops.aten.sym_size.int, (x, 1))
        groups_arg = g.call_function(operator.floordiv, (c_in, per_group))
    op = {1: torch.ops.aten.conv1d, 2: torch.ops.aten.conv2d, 3: torch.ops.aten.conv3d}[_spatial_dims(conv)]
    # padding="same"/"valid": the overload that takes the word
    overload = op.padding if isinstance(padding, str) else op.default
    return g.call_function(overload, (x, w, b, stride, padding, dilation, groups_arg))


def build_module(spec: RegionSpec, values: dict[str, Any]) -> Any:
    """A GraphModule: forward(activations..., w0, b0, w1, b1, ...) -> outputs (conv pairs, then norm pairs)."""
    from torch import fx, nn

    g = fx.Graph()
    env: dict[Any, Any] = {}
    for i, a in enumerate(spec.activations):
        env[a] = g.placeholder(f"in{i}")
        if "val" in a.meta:  # its traced shape and dtype, which the canonical passes read (canonical.py)
            env[a].meta["val"] = a.meta["val"]
    lifted: dict[Any, tuple[Any, Any]] = {}
    for k, c in enumerate(spec.convs + spec.norms):
        lifted[c] = (g.placeholder(f"w{k}"), g.placeholder(f"b{k}"))
    root = nn.Module()
    for j, p in enumerate(spec.baked):
        root.register_buffer(f"const{j}", values[p.name].detach().clone())
        env[p] = g.get_attr(f"const{j}")
    folded_bn = {bn: c for c, bn in spec.folded_bn.items()}
    scales = {mul: w for mul, w in spec.folded_scale.values()}  # each computes what its other operand holds
    merged = {m for root, ms in spec.sums.items() for m in ms.members if m is not root}
    for n in spec.nodes:
        if n in merged:
            continue  # computed by its sum's one conv, at the sum's root
        if n in spec.sums:
            ms = spec.sums[n]
            w, b = lifted[n]
            wshape = _conv_parts(ms.convs[0])[1].meta["val"].shape
            env[n] = _emit_conv(g, ms.convs[0], env[ms.x], w, b, list(ms.stride), list(ms.padding),
                                list(ms.dilation), ms.groups, int(wshape[1]))
        elif n in lifted and is_layer_norm(n):
            args = list(n.args) + [None] * max(0, 4 - len(n.args))
            args[0] = env[args[0]]
            args[2], args[3] = lifted[n]
            kwargs = {k: v for k, v in n.kwargs.items() if k not in ("weight", "bias")}
            env[n] = g.call_function(n.target, tuple(args), kwargs)
        elif n in lifted:
            x, wnode, _, stride, padding, dilation, groups = _conv_parts(n)
            wval = getattr(wnode, "meta", {}).get("val")
            env[n] = _emit_conv(g, n, env[x], *lifted[n], list(stride),
                                padding if isinstance(padding, str) else list(padding), list(dilation), int(groups),
                                int(wval.shape[1]) if wval is not None else None)
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
