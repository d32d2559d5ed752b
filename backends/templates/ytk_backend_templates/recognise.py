"""Recognising a carved region from its ``torch.export`` graph and its candidates.json entry.

Recognition reads the graph structurally (op targets, constant arguments, fake-tensor shapes) and
either returns a :class:`~.regions.Region` or raises :class:`UnsupportedRegion` naming what did
not fit. It never guesses from names: a region is only what its graph computes. The harness then
checks the generated kernel numerically against the same ``.pt2``, so a mis-recognition cannot
turn into a wrong kernel.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ytk_hookspecs.contract import layout_error
from ytk_hookspecs.pt2 import load_exported
from ytk_hookspecs.errors import UnsupportedRegion
from ytk_hookspecs.models import Candidate

from . import emit_dwconv
from .regions import Conv1x1Region, DwConvLNRegion, DwConvRegion, LiteMLARegion, Region, SERegion, SiteShape
from .supports import ONLY_2D

_CONV = {"aten.conv2d.default", "aten.convolution.default", "aten._convolution.default"}
#: convolutions of another rank, as torch.export writes them
_OTHER_CONV = {"aten.conv1d.default": "1-D", "aten.conv3d.default": "3-D",
               "aten.conv_transpose1d.default": "1-D transposed", "aten.conv_transpose2d.input": "2-D transposed",
               "aten.conv_transpose3d.input": "3-D transposed"}
_IDENTITY = {"aten.clone.default", "aten.alias.default", "aten.contiguous.default", "aten.detach.default",
             "aten.lift_fresh_copy.default", "aten.dropout.default"}
_ACT_SIMPLE = {
    "aten.relu.default": "relu", "aten.relu_.default": "relu",
    "aten.hardswish.default": "hardswish", "aten.hardswish_.default": "hardswish",
    "aten.silu.default": "silu", "aten.silu_.default": "silu",
    "aten.relu6.default": "relu6",
    "aten.hardsigmoid.default": "hardsigmoid", "aten.hardsigmoid_.default": "hardsigmoid",
    "aten.sigmoid.default": "sigmoid", "aten.sigmoid_.default": "sigmoid",
    "aten.tanh.default": "tanh", "aten.tanh_.default": "tanh",
}
_ADD = {"aten.add.Tensor", "aten.add_.Tensor"}
_CLAMPS = {"aten.hardtanh.default", "aten.hardtanh_.default", "aten.clamp.default", "aten.clamp_.default"}
_MATMUL = {"aten.matmul.default", "aten.bmm.default", "aten.mm.default", "aten.einsum.default"}
#: A global average pool over H and W, as torch.export writes ``x.mean((2, 3), keepdim=True)`` and
#: ``F.adaptive_avg_pool2d(x, 1)``.
_POOL = {"aten.mean.dim", "aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default"}
_MUL = {"aten.mul.Tensor", "aten.mul_.Tensor"}
#: A LayerNorm, as torch.export writes ``F.layer_norm`` and its decomposition (``native_layer_norm`` and the
#: ``getitem`` of its first result).
_LN = {"aten.layer_norm.default", "aten.native_layer_norm.default"}
_PERMUTE = {"aten.permute.default"}
_GETITEM = {"<built-in function getitem>", "_operator.getitem"}
#: Shape queries of a graph exported with dynamic shapes: they compute no tensor data.
_SHAPE_OPS = {"aten.sym_size.int", "aten.sym_numel.default", "aten.sym_stride.int"}
#: How an exported graph spells Python's ``//`` on symbolic sizes (e.g. groups = C // 16).
_FLOORDIV = {"<built-in function floordiv>", "_operator.floordiv"}


@dataclass
class OpNode:
    name: str
    target: str
    args: list[Any]
    kwargs: dict[str, Any]
    shape: tuple[int, ...] | None
    users: list[str] = field(default_factory=list)


@dataclass
class RegionGraph:
    """The parts of an exported program recognition needs, torch-free once built."""

    inputs: list[str]
    input_shapes: list[tuple[int, ...]]
    baked: list[str]
    ops: list[OpNode]
    outputs: list[str]
    #: the baked parameters' shapes, by name (how a refusal names them: their names are the exporter's)
    baked_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def by_name(self) -> dict[str, OpNode]:
        return {o.name: o for o in self.ops}

    def inventory(self) -> Counter[str]:
        return Counter(o.target for o in self.ops)


def load_graph(pt2: Path) -> RegionGraph:
    """Read ``pt2`` with ``torch.export.load`` and flatten its graph into a :class:`RegionGraph`."""
    import torch

    try:
        ep = load_exported(pt2)
    except Exception as e:  # torch raises many types for a bad archive
        raise UnsupportedRegion(f"{pt2}: cannot read the region as a torch.export program: {e}") from None
    user = list(ep.graph_signature.user_inputs)

    def conv(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return a.name
        if isinstance(a, (list, tuple)):
            return [conv(x) for x in a]
        return a

    ops: list[OpNode] = []
    shapes: dict[str, tuple[int, ...]] = {}
    baked: list[str] = []
    outputs: list[str] = []
    for n in ep.graph.nodes:
        val = n.meta.get("val")
        # Symbolic dims of a dynamic-shape export read as their example values (hints); the
        # concrete shapes that matter come from candidates.json.
        shp = tuple(int(d) for d in val.shape) if hasattr(val, "shape") else None
        if n.op == "placeholder":
            if shp is not None:
                shapes[n.name] = shp
            if n.name not in user and len(n.users) > 0:
                baked.append(n.name)
        elif n.op == "call_function":
            ops.append(OpNode(n.name, str(n.target), conv(list(n.args)), {k: conv(v) for k, v in n.kwargs.items()},
                              shp, [u.name for u in n.users]))
        elif n.op == "output":
            outs = n.args[0]
            outputs = [conv(o) for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
    return RegionGraph(inputs=user, input_shapes=[shapes.get(u, ()) for u in user], baked=baked, ops=ops,
                       outputs=outputs, baked_shapes={b: shapes[b] for b in baked if b in shapes})


# -- depthwise convolution -------------------------------------------------------------------------
def _pair(v: Any, default: int) -> tuple[int, int]:
    if v is None:
        return default, default
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1])) if v else (default, default)
    return int(v), int(v)


def _conv_args(op: OpNode) -> dict[str, Any]:
    a = op.args + [None] * 10
    if op.target == "aten.conv2d.default":
        names = ["input", "weight", "bias", "stride", "padding", "dilation", "groups"]
        d = dict(zip(names, a))
        d.update(op.kwargs)
        d["transposed"] = False
    else:
        names = ["input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups"]
        d = dict(zip(names, a))
        d.update(op.kwargs)
    return d


def _activation(op: OpNode) -> str | None:
    if op.target in _ACT_SIMPLE:
        return _ACT_SIMPLE[op.target]
    if op.target in ("aten.gelu.default", "aten.gelu_.default"):
        approx = op.kwargs.get("approximate", op.args[1] if len(op.args) > 1 else "none")
        return "gelu_tanh" if approx == "tanh" else "gelu"
    if op.target in _CLAMPS:
        lo = op.args[1] if len(op.args) > 1 else op.kwargs.get("min_val", op.kwargs.get("min"))
        hi = op.args[2] if len(op.args) > 2 else op.kwargs.get("max_val", op.kwargs.get("max"))
        if lo is not None and hi is not None and float(lo) == 0.0 and float(hi) == 6.0:
            return "relu6"
        if lo is not None and float(lo) == 0.0 and hi is None:
            return "relu"
    if op.target == "aten.clamp_min.default" and float(op.args[1]) == 0.0:
        return "relu"
    return None


def _residual_add(op: OpNode, value: str, x: str) -> bool:
    """Whether ``op`` is ``value + x`` (either order, alpha 1)."""
    if op.target not in _ADD or len(op.args) < 2:
        return False
    alpha = op.kwargs.get("alpha", op.args[2] if len(op.args) > 2 else 1)
    return sorted(a for a in op.args[:2] if isinstance(a, str)) == sorted([value, x]) and alpha == 1


def _conv_chain(g: RegionGraph, conv: OpNode, residual_of: str | None = None) -> tuple[str, bool]:
    """The activation fused after ``conv``, and whether the chain then adds ``residual_of`` (the
    conv's input; None: no residual allowed): the ops after the conv must form one chain ending at
    the region's output, of identities, at most one activation and then at most that one add;
    nothing else may be in the region."""
    by = g.by_name()
    act, res, cur = "none", None, conv
    while cur.users:
        if len(cur.users) != 1:
            raise UnsupportedRegion(f"the result of {cur.target} is used {len(cur.users)} times inside the region")
        nxt = by.get(cur.users[0])
        if nxt is None:
            break
        if nxt.target in _IDENTITY:
            cur = nxt
            continue
        if residual_of is not None and res is None and _residual_add(nxt, cur.name, residual_of):
            res = cur = nxt
            continue
        a2 = _activation(nxt)
        if a2 is None or act != "none" or res is not None:
            fused = ("one activation (relu, relu6/hardtanh(0,6), hardswish, hardsigmoid, sigmoid, silu, tanh, gelu)"
                     + (", then the convolution's input added (a residual)" if residual_of is not None else ""))
            raise UnsupportedRegion(f"unsupported op {nxt.target} after the convolution (templates fuse {fused})")
        act, cur = a2, nxt
    if g.outputs != [cur.name]:
        raise UnsupportedRegion(f"the region has outputs {g.outputs}; expected exactly the convolution chain's result")
    extra = [o.target for o in g.ops if o is not conv and o is not res
             and o.target not in _IDENTITY | _SHAPE_OPS | _FLOORDIV and _activation(o) is None]
    if extra:
        raise UnsupportedRegion(f"unsupported ops in the region: {sorted(set(extra))}")
    return act, res is not None


def _conv_operands(g: RegionGraph, conv: OpNode) -> tuple[dict[str, Any], tuple[int, ...], tuple[int, ...], bool]:
    """The conv's arguments, weight and input shapes, and whether it has a bias; weights must be lifted."""
    a = _conv_args(conv)
    if a["weight"] not in g.inputs:
        raise UnsupportedRegion("the convolution's weight is baked into the region, not a lifted input "
                                "(carve with the default @lift=fold_conv_bn)")
    if a["input"] not in g.inputs:
        made = next((o for o in g.ops if o.name == a["input"]), None)
        if made is not None and "pad" in str(made.target):
            pads = made.args[1] if len(made.args) > 1 else made.kwargs.get("pad")
            raise UnsupportedRegion(f"an explicit pad {list(pads or [])} before the convolution (TF-style 'same' "
                                    "padding): templates cover the conv's own symmetric padding")
        by = f" (by {made.target})" if made is not None else ""
        raise UnsupportedRegion(f"the convolution's input is computed inside the region{by}")
    has_bias = a["bias"] is not None
    if has_bias and a["bias"] not in g.inputs:
        raise UnsupportedRegion("the convolution's bias is baked into the region, not a lifted input")
    shapes = dict(zip(g.inputs, g.input_shapes))
    wshape, xshape = shapes[a["weight"]], shapes[a["input"]]
    if len(wshape) != 4 or len(xshape) != 4:
        raise UnsupportedRegion(f"not a 2-D convolution (weight {list(wshape)}, input {list(xshape)})")
    if bool(a.get("transposed")):
        raise UnsupportedRegion("transposed convolution")
    return a, wshape, xshape, has_bias


def _groups(g: RegionGraph, a: dict[str, Any], c: int, cout: int) -> int:
    """The conv's group count at the export shape; a dynamic export derives it from a channel count:
    the input's (``x.shape[1]`` for depthwise, ``x.shape[1] // k`` for grouped convs) or, where the
    exporter found them equal and spelled it so, the weight's or the bias's outputs (a depthwise conv
    whose result is added to its input: ``b.shape[0]``)."""
    groups = a["groups"]
    if isinstance(groups, str):
        by = g.by_name()
        q = by.get(groups)
        div = 1
        if q is not None and q.target in _FLOORDIV and isinstance(q.args[1], int):
            div, q = int(q.args[1]), by.get(q.args[0]) if isinstance(q.args[0], str) else None
        counts = {(a["input"], 1): c, (a["weight"], 0): cout}
        if a["bias"] is not None:
            counts[(a["bias"], 0)] = cout
        src = tuple(q.args[:2]) if q is not None and q.target == "aten.sym_size.int" else None
        if src not in counts:
            raise UnsupportedRegion(f"a dynamic export computes the convolution's groups from {groups} "
                                    f"({q.target if q else 'not an op of the region'}), not from a channel count of "
                                    "its input, weight or bias")
        return counts[src] // div
    return int(groups or 1)


def _the_conv(g: RegionGraph) -> OpNode:
    convs = [o for o in g.ops if o.target in _CONV]
    if len(convs) != 1:
        raise UnsupportedRegion(f"expected one convolution, found {len(convs)}")
    return convs[0]


def _is_pointwise(g: RegionGraph) -> bool:
    convs = [o for o in g.ops if o.target in _CONV]
    if len(convs) != 1:
        return False
    w = _conv_args(convs[0])["weight"]
    shapes = dict(zip(g.inputs, g.input_shapes))
    return w in shapes and len(shapes[w]) == 4 and tuple(shapes[w][2:]) == (1, 1)


def _recognise_dwconv(g: RegionGraph) -> DwConvRegion:
    conv = _the_conv(g)
    a, c, kh, sh, has_bias = _depthwise_geometry(g, conv)
    act, residual = _conv_chain(g, conv, residual_of=a["input"])
    if residual and sh != 1:
        raise UnsupportedRegion(f"a residual add after a stride-{sh} convolution: the input and output shapes differ")
    expected_inputs = [a["input"], a["weight"]] + ([a["bias"]] if has_bias else [])
    if g.inputs != expected_inputs:
        raise UnsupportedRegion(f"input order {g.inputs}: the depthwise template takes (x, weight, bias)")
    return DwConvRegion(k=kh, stride=sh, act=act, channels=c, has_bias=has_bias, residual=residual)


def _depthwise_geometry(g: RegionGraph, conv: OpNode) -> tuple[dict[str, Any], int, int, int, bool]:
    """The conv's arguments, channels, kernel size, stride and whether it has a bias, when it is a square
    1/3/5/7 depthwise conv at stride 1 or 2 with 'same' padding; else the reason it is not."""
    a, wshape, xshape, has_bias = _conv_operands(g, conv)
    c = xshape[1]
    groups = _groups(g, a, c, wshape[0])
    if not (groups == c and wshape[0] == c and wshape[1] == 1):
        raise UnsupportedRegion(not_depthwise_refusal(groups, c, list(wshape)))
    kh, kw = wshape[2], wshape[3]
    sh, sw = _pair(a["stride"], 1)
    ph, pw = _pair(a["padding"], 0)
    dh, dw = _pair(a["dilation"], 1)
    if kh != kw or kh not in (1, 3, 5, 7):
        raise UnsupportedRegion(f"kernel {kh}x{kw}: templates cover square 1x1 (a per-channel scale), 3x3, 5x5 "
                                "and 7x7")
    if sh != sw or sh not in (1, 2):
        raise UnsupportedRegion(f"stride {sh}x{sw}: templates cover stride 1 and 2")
    if (dh, dw) != (1, 1):
        raise UnsupportedRegion(f"dilation {dh}x{dw}: templates cover dilation 1")
    if (ph, pw) != (kh // 2, kh // 2):
        raise UnsupportedRegion(f"padding {ph}x{pw}: templates cover 'same' padding k//2 = {kh // 2}")
    return a, c, kh, sh, has_bias


def pointwise_channels_refusal(c: int, co: int, groups: int) -> str | None:
    """Why a 1x1 conv of ``c -> co`` channels in ``groups`` groups has no template (its vectors are 8 fp16
    channels wide), or None. Also propose's answer before the carve (supports.py): one rule, one wording."""
    if c % 8 or co % 8:
        return f"channels {c} -> {co}: templates need multiples of 8 (16-byte fp16 vectors)"
    if groups > 1 and c % groups == 0 and co % groups == 0 and ((c // groups) % 8 or (co // groups) % 8):
        return f"{c // groups} -> {co // groups} channels per group: templates need multiples of 8"
    return None


def not_depthwise_refusal(groups: int, c: int, wshape: list[int]) -> str:
    """The refusal of a kxk conv that is not depthwise with one output per channel (dense, grouped, or
    depthwise with a channel multiplier: FastViT's ``[2C, 1, k, k]``). Also propose's answer before the carve
    (supports.py), with the sketch's numbers: one rule, one wording."""
    form = "dense" if groups == 1 else f"grouped (groups={groups})"
    return (f"a {form} {'x'.join(map(str, wshape[2:]))} conv (input channels {c}, weight {wshape}): templates cover "
            "depthwise kxk and 1x1 convs")


def kHWC8_refusal(channels: int) -> str:
    """The refusal of an activation of ``channels`` (not a multiple of 8) in the templates' fp16 kHWC8 layout."""
    return (f"{channels} channels: the templates' kernels take fp16 kHWC8 activations, whose channels must be a "
            "multiple of 8")


# -- pointwise convolution -------------------------------------------------------------------------
def _recognise_conv1x1(g: RegionGraph) -> Conv1x1Region | DwConvRegion:
    conv = _the_conv(g)
    a, wshape, xshape, has_bias = _conv_operands(g, conv)
    c, co = xshape[1], wshape[0]
    groups = _groups(g, a, c, co)
    if groups == c > 1 and co == c and wshape[1] == 1:
        # a depthwise 1x1 (a per-channel scale + bias: FastViT's and MobileOne's conv_scale branches,
        # RepViT's conv1) is the depthwise template at k = 1
        return _recognise_dwconv(g)
    if tuple(wshape[2:]) != (1, 1):
        raise UnsupportedRegion(f"kernel {wshape[2]}x{wshape[3]}: not a pointwise convolution")
    if _pair(a["stride"], 1) != (1, 1) or _pair(a["padding"], 0) != (0, 0) or _pair(a["dilation"], 1) != (1, 1):
        raise UnsupportedRegion(f"1x1 convolution with stride {a['stride']}, padding {a['padding']}, dilation "
                                f"{a['dilation']}: templates cover stride 1, no padding, dilation 1")
    if groups < 1 or c % groups or co % groups or wshape[1] * groups != c:
        raise UnsupportedRegion(f"groups={groups} do not divide input channels {c} / outputs {co}")
    why = pointwise_channels_refusal(c, co, groups)
    if why:
        raise UnsupportedRegion(why)
    gin, gout = (c // groups, co // groups) if groups > 1 else (0, 0)
    act, _ = _conv_chain(g, conv)
    expected_inputs = [a["input"], a["weight"]] + ([a["bias"]] if has_bias else [])
    if g.inputs != expected_inputs:
        raise UnsupportedRegion(f"input order {g.inputs}: the 1x1 template takes (x, weight, bias)")
    return Conv1x1Region(act=act, cin=c, cout=co, group_in=gin, group_out=gout, has_bias=has_bias)


# -- squeeze-excite ------------------------------------------------------------------------------
def _global_pool(op: OpNode) -> bool:
    """Whether ``op`` averages over H and W keeping them as 1 x 1 (NCHW)."""
    if op.target == "aten.mean.dim":
        dims = op.args[1] if len(op.args) > 1 else op.kwargs.get("dim")
        keep = op.args[2] if len(op.args) > 2 else op.kwargs.get("keepdim", False)
        return bool(keep) and isinstance(dims, list) and sorted(int(d) % 4 for d in dims) == [2, 3]
    if op.target in _POOL:
        size = op.args[1] if len(op.args) > 1 else None
        return _pair(size, 0) == (1, 1)
    return False


def _recognise_se(g: RegionGraph) -> SERegion:
    """Squeeze-excite: pool -> 1x1 conv -> act -> 1x1 conv -> gate -> times the region's input, one
    chain of single uses (identities skipped), nothing else in the region."""
    by = g.by_name()
    pools = [o for o in g.ops if o.target in _POOL]
    if len(pools) != 1 or not _global_pool(pools[0]):
        raise UnsupportedRegion("not a squeeze-excite: needs one global average pool over H and W (keepdim)")
    pool = pools[0]
    x = pool.args[0]
    if not g.inputs or x != g.inputs[0] or len(g.input_shapes[0]) != 4:
        raise UnsupportedRegion("not a squeeze-excite: the pool does not read the region's first (4-D) input")

    def next_op(cur: OpNode) -> OpNode:
        while True:
            if len(cur.users) != 1 or cur.users[0] not in by:
                raise UnsupportedRegion(f"squeeze-excite: the result of {cur.target} is used {len(cur.users)} times "
                                        "or leaves the region")
            cur = by[cur.users[0]]
            if cur.target not in _IDENTITY:
                return cur

    seen = [pool]
    convs: list[OpNode] = []
    acts: list[str] = []
    cur = next_op(pool)
    for i in range(2):
        if cur.target not in _CONV:
            raise UnsupportedRegion(f"squeeze-excite: expected a 1x1 convolution after the "
                                    f"{'pool' if i == 0 else 'activation'}, found {cur.target}")
        convs.append(cur)
        seen.append(cur)
        cur = next_op(cur)
        act = _activation(cur)
        if act is None:
            if i == 0:
                acts.append("none")
                continue
            raise UnsupportedRegion(f"squeeze-excite: expected the gate (sigmoid, hardsigmoid) after the second "
                                    f"convolution, found {cur.target}")
        acts.append(act)
        seen.append(cur)
        cur = next_op(cur)
    if acts[1] not in ("sigmoid", "hardsigmoid"):
        raise UnsupportedRegion(f"squeeze-excite gate {acts[1]}: templates gate with sigmoid or hardsigmoid")
    mul = cur
    if mul.target not in _MUL or sorted(a for a in mul.args[:2] if isinstance(a, str)) != sorted([x, seen[-1].name]):
        raise UnsupportedRegion(f"squeeze-excite: expected the region's input times the gate, found {mul.target}")
    if g.outputs != [mul.name]:
        raise UnsupportedRegion(f"the region has outputs {g.outputs}; expected exactly the gated input")
    extra = [o.target for o in g.ops if o not in seen and o is not mul
             and o.target not in _IDENTITY | _SHAPE_OPS | _FLOORDIV]
    if extra:
        raise UnsupportedRegion(f"unsupported ops in the squeeze-excite region: {sorted(set(extra))}")
    shapes = dict(zip(g.inputs, g.input_shapes))
    c = g.input_shapes[0][1]
    expected = [x]
    dims = []
    for conv in convs:
        a = _conv_args(conv)
        if a["weight"] not in g.inputs or (a["bias"] is not None and a["bias"] not in g.inputs):
            raise UnsupportedRegion("squeeze-excite: a convolution's weight or bias is baked into the region, "
                                    "not a lifted input (carve with the default lift)")
        w = shapes[a["weight"]]
        if len(w) != 4 or tuple(w[2:]) != (1, 1) or bool(a.get("transposed")) \
                or _pair(a["stride"], 1) != (1, 1) or _pair(a["padding"], 0) != (0, 0):
            raise UnsupportedRegion(f"squeeze-excite: convolution weight {list(w)}, stride {a['stride']}, padding "
                                    f"{a['padding']}: templates take 1x1 convs, stride 1, no padding")
        groups = _groups(g, a, w[1], w[0])
        if groups != 1:
            raise UnsupportedRegion(f"squeeze-excite with grouped convolutions (groups={groups})")
        expected += [a["weight"]] + ([a["bias"]] if a["bias"] is not None else [])
        dims.append((w[0], w[1]))
    (cr, c1), (c2, cr2) = dims
    if c1 != c or c2 != c or cr2 != cr:
        raise UnsupportedRegion(f"squeeze-excite: convolutions {c1}->{cr} and {cr2}->{c2} do not map {c} channels "
                                "back to themselves")
    if g.inputs != expected:
        raise UnsupportedRegion(f"input order {g.inputs}: the squeeze-excite template takes (x, w1, b1, w2, b2)")
    a1, a2 = _conv_args(convs[0]), _conv_args(convs[1])
    return SERegion(act=acts[0], gate=acts[1], channels=c, reduced=cr, has_bias1=a1["bias"] is not None,
                    has_bias2=a2["bias"] is not None)


def _is_se(g: RegionGraph) -> bool:
    return sum(o.target in _CONV for o in g.ops) == 2 and any(o.target in _POOL for o in g.ops)


# -- depthwise conv + LayerNorm over the channels ---------------------------------------------------
#: what a dwconv_ln region is, in its refusals' words
_DWLN = ("templates fuse a depthwise conv with a LayerNorm over its channels: permute(0, 2, 3, 1), layer_norm "
         "over [C] with its weight and bias, then optionally permute(0, 3, 1, 2) back")


def _is_dwln(g: RegionGraph) -> bool:
    return any(o.target in _LN for o in g.ops)


def _ln_args(op: OpNode) -> dict[str, Any]:
    names = ["input", "normalized_shape", "weight", "bias", "eps"]
    d = dict(zip(names, op.args + [None] * 5))
    d.update({k: v for k, v in op.kwargs.items() if k in names})
    if d["eps"] is None:
        d["eps"] = 1e-5  # aten.layer_norm's default
    return d


def _recognise_dwln(g: RegionGraph) -> DwConvLNRegion:
    """A depthwise conv whose only consumer is a LayerNorm over its channels, spelled as timm writes it:
    ``permute(0, 2, 3, 1)``, ``layer_norm`` (or ``native_layer_norm`` and its first result) over ``[C]``,
    and either the region's output (NHWC) or ``permute(0, 3, 1, 2)`` back (LayerNorm2d, NCHW)."""
    conv = _the_conv(g)
    a, c, k, s, has_bias = _depthwise_geometry(g, conv)
    by = g.by_name()

    def users(cur: OpNode) -> list[OpNode]:
        return [by[u] for u in cur.users if u in by]

    def next_op(cur: OpNode, what: str) -> OpNode | None:
        """The op after ``cur`` (identities skipped); None when ``cur`` is used by nothing in the region."""
        while True:
            if len(cur.users) > 1:
                raise UnsupportedRegion(f"the result of {cur.target} ({what}) is used {len(cur.users)} times inside "
                                        f"the region: {_DWLN}")
            nxt = users(cur)
            if not nxt:
                return None
            cur = nxt[0]
            if cur.target not in _IDENTITY:
                return cur

    seen = [conv]
    op = next_op(conv, "the convolution")
    if op is None:
        raise UnsupportedRegion(f"no LayerNorm after the depthwise conv: {_DWLN}")
    act = _activation(op)
    if act is not None:
        raise UnsupportedRegion(f"an activation ({act}) between the depthwise conv and its LayerNorm: {_DWLN}, "
                                "nothing between them")
    if op.target in _LN:
        shape = _ln_args(op)["normalized_shape"]
        raise UnsupportedRegion(f"a LayerNorm of the convolution's NCHW output over its trailing dims {shape} (not "
                                f"the channels): {_DWLN}")
    perm = op.args[1] if op.target in _PERMUTE and len(op.args) > 1 else None
    if perm is None or [int(d) % 4 for d in perm] != [0, 2, 3, 1]:
        raise UnsupportedRegion(f"{op.target}{f' {perm}' if perm is not None else ''} after the depthwise conv: "
                                f"{_DWLN}")
    seen.append(op)
    ln = next_op(op, "the permute to NHWC")
    if ln is None or ln.target not in _LN:
        raise UnsupportedRegion(f"{ln.target if ln else 'nothing'} after the permute to NHWC: {_DWLN}")
    seen.append(ln)
    la = _ln_args(ln)
    shape = la["normalized_shape"]
    if not _over_channels(g, shape, c, [a["input"], a["weight"], a["bias"], la["weight"], la["bias"]]):
        raise UnsupportedRegion(f"a LayerNorm over {shape} of the NHWC view [N, H, W, C] (C = {c}): templates "
                                "normalise over the channels alone ([C])")
    if la["weight"] is None or la["bias"] is None:
        raise UnsupportedRegion("a LayerNorm without its weight and bias (elementwise_affine=False): the dwconv_ln "
                                "template takes both as lifted inputs")
    if la["weight"] not in g.inputs or la["bias"] not in g.inputs:
        raise UnsupportedRegion("the LayerNorm's weight or bias is computed inside the region, not a lifted input")
    shapes = dict(zip(g.inputs, g.input_shapes))
    if tuple(shapes[la["weight"]]) != (c,) or tuple(shapes[la["bias"]]) != (c,):
        raise UnsupportedRegion(f"LayerNorm weight {list(shapes[la['weight']])} and bias {list(shapes[la['bias']])}: "
                                f"expected [{c}] each")
    out = ln
    if ln.target == "aten.native_layer_norm.default":  # (y, mean, rstd): only y may be read
        firsts = [u for u in users(ln) if u.target in _GETITEM and len(u.args) > 1 and u.args[1] == 0]
        rest = [u for u in users(ln) if u not in firsts]
        if len(firsts) != 1 or any(u.target not in _GETITEM or u.users for u in rest):
            raise UnsupportedRegion(f"the LayerNorm's mean or inverse deviation is read inside the region: {_DWLN}")
        out = firsts[0]
        seen += users(ln)
    closed = False
    after = next_op(out, "the LayerNorm")
    if after is not None:
        perm = after.args[1] if after.target in _PERMUTE and len(after.args) > 1 else None
        if perm is None or [int(d) % 4 for d in perm] != [0, 3, 1, 2]:
            raise UnsupportedRegion(f"{after.target}{f' {perm}' if perm is not None else ''} after the LayerNorm: "
                                    f"{_DWLN}")
        seen.append(after)
        closed, out = True, after
        nxt = next_op(after, "the permute back to NCHW")
        if nxt is not None:
            raise UnsupportedRegion(f"{nxt.target} after the permute back to NCHW: {_DWLN}")
    last = out
    while last.users and last.users[0] in by:  # identities after the region's result
        last = by[last.users[0]]
    if g.outputs != [last.name]:
        raise UnsupportedRegion(f"the region has outputs {g.outputs}; expected exactly the normalised result")
    extra = [o.target for o in g.ops if o not in seen and o.target not in _IDENTITY | _SHAPE_OPS | _FLOORDIV]
    if extra:
        raise UnsupportedRegion(f"unsupported ops in the depthwise conv + LayerNorm region: {sorted(set(extra))}")
    expected = [a["input"], a["weight"]] + ([a["bias"]] if has_bias else []) + [la["weight"], la["bias"]]
    if g.inputs != expected:
        raise UnsupportedRegion(f"input order {g.inputs}: the dwconv_ln template takes (x, w0, b0, w1, b1)")
    return DwConvLNRegion(k=k, stride=s, eps=float(la["eps"]), channels=c, has_bias=has_bias, closed=closed)


def _over_channels(g: RegionGraph, shape: Any, c: int, names: list[Any]) -> bool:
    """Whether a LayerNorm's ``normalized_shape`` is ``[C]``: the number, or (a dynamic export) a size query
    of a channel count (dim 1 of the input, dim 0 of the conv's weight or bias or the norm's)."""
    if not isinstance(shape, (list, tuple)) or len(shape) != 1:
        return False
    d = shape[0]
    if isinstance(d, int):
        return d == c
    q = g.by_name().get(d) if isinstance(d, str) else None
    if q is None or q.target != "aten.sym_size.int" or len(q.args) < 2:
        return False
    src, dim = q.args[0], int(q.args[1])
    return (src == names[0] and dim == 1) or (src in names[1:] and src is not None and dim == 0)


# -- LiteMLA ---------------------------------------------------------------------------------------
def _recognise_litemla(g: RegionGraph) -> LiteMLARegion:
    inv = g.inventory()
    mm = sum(inv[t] for t in _MATMUL)
    if mm < 2 or inv["aten.relu.default"] + inv["aten.relu_.default"] < 2:
        raise UnsupportedRegion("not a ReLU linear attention: needs two matmuls and two ReLUs")
    if len(g.inputs) not in (1, 2) or any(len(s) != 4 for s in g.input_shapes):
        raise UnsupportedRegion(f"LiteMLA takes one or two 4-D activations, got shapes {g.input_shapes}")
    if len(g.inputs) == 2 and g.input_shapes[0] != g.input_shapes[1]:
        raise UnsupportedRegion(f"LiteMLA inputs differ in shape: {g.input_shapes}")
    pads = [o for o in g.ops if o.target in ("aten.pad.default", "aten.constant_pad_nd.default")]
    if len(pads) != 1:
        raise UnsupportedRegion("LiteMLA pads v with a column of ones once; found no such pad")
    pad = pads[0]
    pad_amount = list(pad.args[1]) if len(pad.args) > 1 else []
    pad_value = pad.args[3] if pad.target == "aten.pad.default" and len(pad.args) > 3 else (
        pad.args[2] if pad.target == "aten.constant_pad_nd.default" and len(pad.args) > 2 else pad.kwargs.get("value"))
    if pad_amount != [0, 1] or pad_value is None or float(pad_value) != 1.0:
        raise UnsupportedRegion(f"LiteMLA's v padding should be (0, 1) with value 1, got {pad_amount} "
                                f"value {pad_value}")
    dims = {o.shape[-1] for o in g.ops if o.target in _MATMUL and o.shape and len(o.shape) >= 2
            and o.shape[-2] + 1 == o.shape[-1]}
    if len(dims) != 1:
        raise UnsupportedRegion("cannot find the (d, d+1) key-value product of LiteMLA")
    d = dims.pop() - 1
    eps = None
    for o in g.ops:
        if o.target in ("aten.add.Tensor", "aten.add.Scalar") and len(o.args) > 1 \
                and isinstance(o.args[1], float) and 0 < o.args[1] < 1e-3:
            if any(g.by_name()[u].target in ("aten.div.Tensor", "aten.div.Scalar")
                   for u in o.users if u in g.by_name()):
                eps = float(o.args[1])
    if eps is None:
        raise UnsupportedRegion("cannot find LiteMLA's eps (a small constant added to the denominator)")
    ch = g.input_shapes[0][1]
    total = ch * len(g.inputs)
    if total % (3 * d):
        raise UnsupportedRegion(f"{total} joined channels are not a multiple of 3*d = {3 * d}")
    if d % 8:
        raise UnsupportedRegion(f"head dim {d}: templates need a multiple of 8 (16-byte loads)")
    if len(g.inputs) == 2 and "aten.cat.default" not in inv:
        raise UnsupportedRegion("two LiteMLA inputs but no concatenation joining them")
    return LiteMLARegion(dim=d, eps=eps, joined=len(g.inputs) == 2, channels=ch)


def _baked_text(g: RegionGraph) -> str:
    """``2 parameters (shapes [1000, 768], [1000])``: the baked parameters by their shapes, the first three of
    them. Their names (``b_const0``) are the exporter's and mean nothing to the user who wrote the model."""
    n = len(g.baked)
    dims = [str(list(g.baked_shapes[b])) if b in g.baked_shapes else "?" for b in g.baked[:3]]
    more = ", ..." if n > 3 else ""
    return f"{n} parameter{'s' if n != 1 else ''} (shape{'s' if n != 1 else ''} {', '.join(dims)}{more})"


def _baked_users(g: RegionGraph) -> list[OpNode]:
    """The ops that read a baked parameter (directly, or through a view or cast of it)."""
    reads = set(g.baked)
    users = []
    for o in g.ops:  # graph order: a view of a baked parameter is seen before its users
        flat = [a for a in o.args for a in (a if isinstance(a, list) else [a])] + list(o.kwargs.values())
        if any(isinstance(a, str) and a in reads for a in flat):
            if o.target in ("aten.view.default", "aten.reshape.default", "aten.unsqueeze.default",
                            "aten._to_copy.default", "aten.to.dtype", "aten.expand.default"):
                reads.add(o.name)
            else:
                users.append(o)
    return users


def recognise(g: RegionGraph, candidate: Candidate | None = None) -> Region:
    """The region ``g`` computes; :class:`UnsupportedRegion` with the reason when no template fits."""
    other_conv = sorted({o.target for o in g.ops if o.target in _OTHER_CONV})
    if other_conv:  # before the parameters: lifting them would not help
        dims = ", ".join(_OTHER_CONV[t] for t in other_conv)
        raise UnsupportedRegion(f"a {dims} convolution: {ONLY_2D}")
    if any(o.target in _CONV and len(o.args) > 6 and o.args[6] is True for o in g.ops):
        # aten.convolution with `transposed` set: its weights stay baked (no lift rebuilds them), so the
        # baked-parameters advice below would send the user after a lift the carve refuses
        raise UnsupportedRegion("a 2-D transposed convolution: templates build forward convolutions only")
    has_conv = any(o.target in _CONV for o in g.ops)
    if g.baked and has_conv:
        users = _baked_users(g)
        if users and not any(o.target in _CONV for o in users):
            # the conv is lifted; what keeps its parameters is another op (a GroupNorm's affine, a scale), which
            # no carve option lifts: advising @lift would send the user after a fix that does not exist
            ops = sorted({o.target.removeprefix("aten.").removesuffix(".default") for o in users})
            raise UnsupportedRegion(f"its {', '.join(ops)} keeps {_baked_text(g)} inside the region; templates "
                                    "take a conv with its bias, a folded "
                                    "BatchNorm and an activation, and the carve lifts conv weights only")
        raise UnsupportedRegion(f"the region uses {_baked_text(g)} baked into it instead of "
                                "taking them as lifted inputs; carve it with weights lifted (@lift=fold_conv_bn)")
    if any("softmax" in o.target or "scaled_dot_product_attention" in o.target for o in g.ops):
        # the words propose's answer uses (supports.py), so a region is refused alike before and after its carve
        raise UnsupportedRegion("softmax attention: templates cover ReLU linear attention (LiteMLA) only")
    if g.baked:
        # the carve lifts conv weights only; a Linear / LayerNorm region keeps its parameters inside
        verb = "stays" if len(g.baked) == 1 else "stay"
        raise UnsupportedRegion(f"no template for a region of {_ops_text(g)}: its {_baked_text(g)} {verb} baked, "
                                "and the carve lifts conv weights only")
    if has_conv and _is_se(g):
        region: Region = _recognise_se(g)
    elif has_conv and _is_dwln(g):
        region = _recognise_dwln(g)
    elif has_conv:
        region = (_recognise_conv1x1(g) if _is_pointwise(g) else _recognise_dwconv(g))
    elif any(o.target in _MATMUL for o in g.ops):
        region = _recognise_litemla(g)
    else:
        raise UnsupportedRegion(f"no template for a region of {_ops_text(g)}")
    shapes = site_shapes(g, candidate)
    channels = {shape.inputs[0][1] for shape in shapes if shape.inputs and len(shape.inputs[0]) == 4}
    if candidate is not None:
        _check_candidate(region, g, candidate)
        axes = candidate.constant_axes[0] if candidate.constant_axes else []
        if isinstance(region, Conv1x1Region):
            channels |= {-shape.inputs[1][0] for shape in shapes}  # output channels vary too
            per_group = {shape.inputs[1][1] for shape in shapes}
            if region.grouped and per_group != {region.group_in}:
                raise UnsupportedRegion(f"the sites have {sorted(per_group)} input channels per group; one "
                                        "plugin needs one group size")
            if not region.grouped and any(shape.inputs[1][1] != shape.inputs[0][1] for shape in shapes):
                raise UnsupportedRegion("a site's weight does not take all of its input channels")
            if region.grouped and any(shape.inputs[1][0] * region.group_in != shape.inputs[0][1] * region.group_out
                                      for shape in shapes):
                raise UnsupportedRegion("the sites do not share one output/input channel ratio per group")
        if len(channels) > (2 if isinstance(region, Conv1x1Region) else 1) or (len(axes) > 1 and not axes[1]):
            region = _with_dynamic_channels(region)
    odd = sorted({abs(c) for c in channels if isinstance(c, int) and layout_error("kHWC8", [1, abs(c), 1, 1])})
    if odd:  # every template takes and gives fp16 kHWC8 activations (the contract's layout rule)
        raise UnsupportedRegion(("a site has " if len(shapes) > 1 else "") + kHWC8_refusal(odd[0]))
    if isinstance(region, DwConvRegion) and region.channels and not emit_dwconv.variant_space(region):
        # no channel block tiles this C (they are 16..128 wide): the runtime-C kernels, whose partial
        # channel blocks are guarded, take it at one shape as they take a dynamic remainder's
        region = _with_dynamic_channels(region)
    return region


def _ops_text(g: RegionGraph) -> str:
    """The region's computing ops, most frequent first, as a person reads them: 'linear, gelu, layer_norm'."""
    layout = ("view", "reshape", "permute", "transpose", "expand", "squeeze", "unsqueeze", "getitem", "slice",
              "select", "split", "chunk", "unbind", "flatten", "t.")
    inv = {k.removeprefix("aten.").removesuffix(".default"): v for k, v in g.inventory().items()
           if k not in _IDENTITY | _SHAPE_OPS and not any(w in k for w in layout)}
    names = [k for k, _ in sorted(inv.items(), key=lambda kv: -kv[1])]
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "") if names else "no ops"


def _with_dynamic_channels(r: Region) -> Region:
    if isinstance(r, DwConvRegion):
        return replace(r, channels=None)
    if isinstance(r, Conv1x1Region):
        return Conv1x1Region(act=r.act, cin=None, cout=None, group_in=r.group_in, group_out=r.group_out,
                             has_bias=r.has_bias)
    if isinstance(r, SERegion):
        return replace(r, channels=None, reduced=None)
    if isinstance(r, DwConvLNRegion):
        return replace(r, channels=None)
    return LiteMLARegion(dim=r.dim, eps=r.eps, joined=r.joined, channels=None)


def _check_candidate(region: Region, g: RegionGraph, cand: Candidate) -> None:
    n_in = len(g.inputs)
    for s in cand.sites:
        if len(s.inputs) != n_in:
            raise UnsupportedRegion(f"site {s.index} of {cand.name} has {len(s.inputs)} inputs; "
                                    f"the region graph takes {n_in}")
    roles = list(cand.input_roles)
    if isinstance(region, (DwConvRegion, Conv1x1Region)):
        want = ["activation", "weight"] + (["bias"] if region.has_bias else [])
        if roles and roles != want:
            raise UnsupportedRegion(f"input roles {roles}; the convolution templates take {want}")
    elif isinstance(region, SERegion):
        want = (["activation", "weight"] + (["bias"] if region.has_bias1 else []) + ["weight"]
                + (["bias"] if region.has_bias2 else []))
        if roles and roles != want:
            raise UnsupportedRegion(f"input roles {roles}; the squeeze-excite template takes {want}")
    elif isinstance(region, DwConvLNRegion):
        want = ["activation", "weight"] + (["bias"] if region.has_bias else []) + ["weight", "bias"]
        if roles and roles != want:
            raise UnsupportedRegion(f"input roles {roles}; the depthwise conv + LayerNorm template takes {want}")
    elif roles and any(r != "activation" for r in roles):
        raise UnsupportedRegion(f"input roles {roles}; the LiteMLA template takes activations only")


def site_shapes(g: RegionGraph, candidate: Candidate | None) -> list[SiteShape]:
    """Distinct concrete input shapes over the plugin's sites, with how many sites share each."""
    if candidate is None or not candidate.sites:
        return [SiteShape(tuple(tuple(s) for s in g.input_shapes), 1)]
    counts: Counter[tuple[tuple[int, ...], ...]] = Counter()
    order: list[tuple[tuple[int, ...], ...]] = []
    for s in candidate.sites:
        try:
            key = tuple(tuple(int(d) for d in t.shape) for t in s.inputs)
        except (TypeError, ValueError):
            raise UnsupportedRegion(f"site {s.index} of {candidate.name} has symbolic input dims; "
                                    "templates are scored on concrete shapes") from None
        if key not in counts:
            order.append(key)
        counts[key] += 1
    return [SiteShape(k, counts[k]) for k in order]


def site_shape_indices(candidate: Candidate | None, shapes: list[SiteShape]) -> list[int]:
    """For each site of the candidate (in order), the index of its shape in ``shapes``."""
    if candidate is None or not candidate.sites:
        return [0]
    index = {s.inputs: i for i, s in enumerate(shapes)}
    return [index[tuple(tuple(int(d) for d in t.shape) for t in s.inputs)] for s in candidate.sites]
