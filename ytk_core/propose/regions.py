"""Regions: the module instances a plugin could replace, found from the ops they contain.

* An attention block is the module that itself calls an activation x activation product (Q.K,
  attn.V, LiteMLA's k^T.v): it is proposed ``:around``, and its region is the one the carve cuts,
  decided by the carve's own code (its :around growth, whole ONNX nodes, the convexity check). When
  a conv of the block cuts through that region, its convex parts are proposed instead (``@part=K``).
* A squeeze-excite module (a global average pool, then two 1x1 convs on the pooled vector, gating
  the module's input) is one region, ``squeeze_excite``: its convs are tiny and their work is the pool
  and the gate, which a kernel fuses only when it holds the whole module.
* Every other weighted op (conv, GEMM) is the region of the largest module around it that holds
  no other heavy op: the whole ``ConvNormAct`` (conv + norm + activation), but just the ``Conv2d``
  when its parent also holds a second conv. Containers (Sequential, ModuleList) are not chosen.
* The parallel convs of a branch sum (one input, added: a RepVGG / MobileOne block in its training form) are
  one heavy op, which the carve merges into one conv: the block is their region, or, where the block holds
  other heavy ops too (an SE), the sum alone (``@branches``).
* What is left (residual adds, ops at the model root) is outside every region.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, get_args

from ytk_hookspecs.models.kernel import KernelDtype

from ..errors import UsageError
from ..frontend.region_rules import (BranchSum, FactGraph, baked_weights, branch_sums, convexity_witness,
                                     grow_epilogue, whole_onnx_nodes)
from ..frontend.regions import GraphIndex, GraphView, around_parts, grow_around
from .modules import ModuleIndex
from .onnx_graph import OnnxGraph
from .roofline import boundary, is_attention_op, is_weighted

CONTAINERS = {"Sequential", "ModuleList", "ModuleDict", "ParameterList"}
DATA_DEPENDENT = {"NonZero", "Unique", "NonMaxSuppression", "Compress", "RandomNormal", "RandomUniform",
                  "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}
_KERNEL_DTYPES = set(get_args(KernelDtype))


@dataclass
class Region:
    """One site: a module instance, its ONNX nodes and what kind of op it is built around."""

    path: str
    cls: str
    kind: str                          # depthwise_conv | grouped_conv | conv | gemm | attention | squeeze_excite
    around: bool
    anchors: list[str]                 # the heavy ONNX node(s)
    nodes: list[str]
    ms: float = 0.0
    sig: dict[str, Any] = field(default_factory=dict)
    cannot: str | None = None          # why the kernel contract cannot express it
    epilogue: bool = False             # the pointwise ops after the module are part of it (@epilogue)
    part: int | None = None            # the K-th convex part of an :around region (@part=K)
    branches: bool = False             # only the module's branch sum (@branches)
    baked: tuple[str, ...] = ()        # weights its program keeps inside (region_rules.baked_weights)

    @property
    def gemm_like(self) -> bool:
        return self.kind in ("conv", "grouped_conv", "gemm")


def discover_regions(g: OnnxGraph, mods: ModuleIndex, node_ms: dict[str, float],
                     plugged: dict[str, str] | None = None) -> tuple[list[Region], list[str]]:
    """All regions in graph order, and the owned nodes that fall outside every region. ``plugged``: each plugin
    node of a plugged graph -> its site's module path (a plugin is a heavy op of the modules around it)."""
    facts = FactGraph.from_fx_nodes(mods.fx)
    weighted = [n.name for n in g.nodes if n.name in mods.owner and is_weighted(g, n)]
    attn = [n.name for n in g.nodes if n.name in mods.owner and is_attention_op(g, n)]
    # A weighted node's home is the module of the conv/GEMM it computes, not the common ancestor of
    # everything the exporter fused into it: timm's conv_pw and bn1 are siblings in a block of five
    # convs, and their folded Conv is no more that block's than any other conv's.
    stacks = {n: _heavy_stack(mods, facts, n) for n in weighted}
    stacks.update({n: mods.owner[n] for n in attn})
    # Heavy ops per module, in one call of it: a module called twice (a detection head shared by two levels)
    # holds its conv once, and is two sites, not a module of two convs. The parallel convs of a branch sum (a
    # RepVGG / MobileOne block as its training code writes it) are one: the carve merges them into one conv.
    unit = _branch_units(mods, facts, weighted)
    convs_of: dict[str, list[str]] = {}  # a sum's root -> its ONNX convs, in graph order
    for m in weighted:
        if m in unit:
            convs_of.setdefault(unit[m].root, []).append(m)
    per_call: dict[tuple[str, int], set[str]] = {}
    for n in (*weighted, *attn):
        for p, _ in stacks[n]:
            per_call.setdefault((p, _call(mods, facts, n, p)), set()).add(unit[n].root if n in unit else n)
    # A plugged site is still a heavy op of its modules: a conv beside it (seg_head.classifier beside a plugged
    # seg_head.block) stays its own region instead of climbing over the plugin to their parent.
    for node, site in (plugged or {}).items():
        parts = site.split(".") if site else []
        for k in range(len(parts) + 1):
            per_call.setdefault((".".join(parts[:k]), 0), set()).add(node)
    heavy_in: dict[str, int] = {}
    for (p, _c), units in per_call.items():
        heavy_in[p] = max(heavy_in.get(p, 0), len(units))

    regions: dict[str, Region] = {}
    taken: set[str] = set()
    for n in attn:
        block = mods.owner_path(n) or ""
        if block in regions:
            regions[block].anchors.append(n)
            if not block:
                regions[block].nodes.append(n)
                taken.add(n)
            continue
        regions[block] = Region(path=block, cls=mods.cls_of.get(block, "?"), kind="attention", around=True,
                                anchors=[n], nodes=[] if block else [n])
        taken.update(regions[block].nodes)
    blocks = set(r.path for r in regions.values() if r.kind == "attention")
    excite = _squeeze_excites(g, mods, weighted, stacks, heavy_in) - blocks
    # An attention block's region is the carve's own :around region, or its convex parts
    around: list[Region] = []
    if blocks - {""}:
        gi = GraphIndex(GraphView(mods.fx), facts.weights)
        succ = g.successors()
        for block in sorted(blocks - {""}, key=lambda b: g.by_name[regions[b].anchors[0]].index):
            for r in _around_regions(g, facts, gi, succ, regions.pop(block)):
                _shared(r, taken)
                around.append(r)
                taken.update(r.nodes)
    for n in weighted:
        if n in taken:
            continue
        path = next((p for p, _ in stacks[n] if p in excite), None) or _climb(stacks[n], heavy_in, blocks)
        whole = convs_of[unit[n].root] if n in unit else []  # the ONNX convs of n's branch sum
        if whole and path not in excite:
            r = _branches_region(g, mods, facts, stacks, n, path, whole, unit[n])
            if r is not None:  # the sum's module holds other heavy ops too: the sum alone, @branches
                regions[f"{r.path}@{_call(mods, facts, n, r.path)}@branches"] = r
                _shared(r, taken)
                taken.update(r.nodes)
                continue
        call = _call(mods, facts, n, path) if path else 0
        key = f"{path}@{call}" if call else path  # each call of a module is a site of its own
        if key in regions:
            regions[key].anchors.append(n)
            if not path:
                regions[key].nodes.append(n)
                taken.add(n)
            continue
        if not path:  # an op called at the model root has no module of its own: the region is just that op
            regions[path] = Region(path=path, cls=mods.cls_of.get(path, "?"), kind="gemm", around=False,
                                   anchors=[n], nodes=[n])
            taken.add(n)
            continue
        if path in blocks:  # a GEMM the block calls itself: the :around region leaves it out
            continue
        # a squeeze-excite's region ends at its product: no kernel fuses what follows it
        nodes, epilogue, fx = _module_region(g, facts, path, taken, epilogue_ok=path not in excite, call=call)
        # a transposed conv's weights cannot be lifted: the carve keeps them baked by default (region_module),
        # so its sites are judged by their baked weights, as the carve will carve them
        lift = not any(g.by_name[m].op_type == "ConvTranspose" for m in nodes if m in g.by_name)
        regions[key] = r = Region(path=path, cls=mods.cls_of.get(path, "?"),
                                   kind="squeeze_excite" if path in excite else "gemm", around=False,
                                   anchors=[n], nodes=nodes, epilogue=epilogue,
                                   baked=tuple(baked_weights(fx, facts, lift=lift)))
        if whole and set(whole) <= set(nodes):  # the region holds a whole branch sum: its convs are its heavy ops
            r.anchors = list(whole)
            r.sig["branches"] = len(unit[n].convs) + unit[n].identity
        _shared(r, taken)
        taken.update(r.nodes)
    out = sorted([*regions.values(), *around], key=lambda r: min(g.by_name[a].index for a in r.anchors))
    for r in out:
        r.nodes.sort(key=lambda m: g.by_name[m].index)
        r.ms = float(sum(node_ms.get(m, 0.0) for m in r.nodes))
        _describe(g, r)
        r.cannot = r.cannot or cannot_express(g, r)
    outside = [m for m in node_ms if m in mods.owner and m not in taken]
    return out, outside


def _branches_region(g: OnnxGraph, mods: ModuleIndex, facts: FactGraph, stacks: dict[str, Any], n: str, path: str,
                     convs: list[str], b: BranchSum) -> Region | None:
    """The region of a branch sum whose convs' region (``path``, where the climb stopped) does not hold all of
    it -- a MobileOne block that also holds an SE: the sum alone, in the innermost module holding all its convs,
    when that module holds no other sum (what ``Cls@branches`` carves). None where ``path`` holds the sum."""
    if all(any(p == path for p, _ in stacks[c]) for c in convs):
        return None
    home = ""
    for frames in zip(*(stacks[c] for c in convs)):
        if len({p for p, _ in frames}) != 1:
            break
        home = frames[0][0]
    if not home or mods.cls_of.get(home) in CONTAINERS:
        return None
    call = _call(mods, facts, n, home)
    if len(branch_sums(facts.owned_by(home, call), facts)) != 1:
        return None
    fx = whole_onnx_nodes(list(b.members), facts)
    r = Region(path=home, cls=mods.cls_of.get(home, "?"), kind="gemm", around=False,
               anchors=sorted(convs, key=lambda m: g.by_name[m].index), nodes=sorted(_onnx_of(g, facts, fx)),
               branches=True, baked=tuple(baked_weights(fx, facts)))
    r.sig["branches"] = len(b.convs) + b.identity
    return r


def _branch_units(mods: ModuleIndex, facts: FactGraph, weighted: list[str]) -> dict[str, BranchSum]:
    """Each weighted ONNX node whose conv is a branch of a branch sum (region_rules.branch_sums over the whole
    graph) -> that sum: what the carve will merge into one conv."""
    of_conv = {c: b for b in branch_sums([n.name for n in facts.calls()], facts) for c in b.convs}
    out = {}
    for n in weighted:
        sums = {of_conv[f].root: of_conv[f] for f in mods.fx_of.get(n, []) if f in of_conv}
        if len(sums) == 1:
            out[n] = next(iter(sums.values()))
    return out


#: ONNX spellings of a global average pool over H and W
_POOLS = {"GlobalAveragePool", "ReduceMean"}


def _squeeze_excites(g: OnnxGraph, mods: ModuleIndex, weighted: list[str], stacks: dict[str, Any],
                     heavy_in: dict[str, int]) -> set[str]:
    """Modules that are a squeeze-excite: exactly two heavy ops, both 1x1 convs on a 1x1-spatial
    tensor, and a global average pool of their own. What the module computes exactly (the gate, the
    product with the input) is the kernel generator's to recognise on the carved program."""
    out = set()
    for path, count in heavy_in.items():
        if count != 2 or not path or mods.cls_of.get(path) in CONTAINERS:
            continue
        convs = [n for n in weighted if any(p == path for p, _ in stacks[n])]
        if len(convs) != 2 or not all(_pooled_1x1(g, g.by_name[n]) for n in convs):
            continue
        if any(_global_pool(g, g.by_name[m]) for m in mods.nodes_of.get(path, ()) if m in g.by_name):
            out.add(path)
    return out


def _global_pool(g: OnnxGraph, node: Any) -> bool:
    """A global average pool: GlobalAveragePool, ReduceMean, or an AveragePool whose window is the whole image
    (the official MobileOne SE's ``F.avg_pool2d(x, kernel_size=[h, w])``; the carve writes it as a mean)."""
    if node.op_type in _POOLS:
        return True
    if node.op_type != "AveragePool" or not node.inputs:
        return False
    x = g.shape(node.inputs[0])
    pads = [int(p) for p in node.attrs.get("pads") or []]
    return bool(x and len(x) == 4 and list(node.attrs.get("kernel_shape") or []) == list(x[2:]) and not any(pads))


def _pooled_1x1(g: OnnxGraph, node: Any) -> bool:
    if node.op_type != "Conv" or len(node.inputs) < 2:
        return False
    x, w = g.shape(node.inputs[0]), g.shape(node.inputs[1])
    return bool(x and w and len(x) == 4 and list(x[2:]) == [1, 1] and list(w[2:]) == [1, 1]
                and int(node.attrs.get("group", 1)) == 1)


def _heavy_stack(mods: ModuleIndex, facts: FactGraph, onnx_node: str) -> tuple[tuple[str, str], ...]:
    heavy = [facts.nodes[f] for f in mods.fx_of.get(onnx_node, []) if f in facts.nodes and facts.nodes[f].heavy]
    if not heavy or not heavy[0].modules:
        return mods.owner[onnx_node]
    paths = heavy[0].modules if heavy[0].modules[0] == "" else ("", *heavy[0].modules)
    return tuple((p, mods.cls_of.get(p, "?")) for p in paths)


def _call(mods: ModuleIndex, facts: FactGraph, onnx_node: str, path: str) -> int:
    """Which call of module ``path`` an ONNX node's heavy op (else its first op) belongs to."""
    fx = [facts.nodes[f] for f in mods.fx_of.get(onnx_node, []) if f in facts.nodes and path in facts.nodes[f].modules]
    heavy = [f for f in fx if f.heavy] or fx
    return heavy[0].call_of(path) if heavy else 0


def _module_region(g: OnnxGraph, facts: FactGraph, path: str, taken: set[str],
                   epilogue_ok: bool = True, call: int | None = None) -> tuple[list[str], bool, set[str]]:
    """A module's ONNX nodes (in call ``call`` of it) as the carve will cut them: whole ONNX nodes, plus its
    pointwise epilogue when that lies outside the module and no earlier region (``taken``) holds it (then the
    selector carries ``@epilogue``); and the FX nodes the carve's region holds."""
    own = facts.owned_by(path, call)
    whole = whole_onnx_nodes(own, facts)
    grown = grow_epilogue(own, facts)
    base, more = _onnx_of(g, facts, whole), _onnx_of(g, facts, grown)
    if epilogue_ok and more - base and not (more & taken):
        return sorted(more), True, grown
    return sorted(base), False, whole


def _shared(r: Region, taken: set[str]) -> None:
    """A region that needs an ONNX node an earlier region holds cannot be carved beside it: the
    exporter fused ops of both into that node (LeViT's kv LinearNorm ends in a reshape merged with
    the attention's own), and the carve refuses two selectors claiming its FX nodes. The earlier
    region keeps it; this one is reported, not proposed."""
    shared = sorted(set(r.nodes) & taken)
    r.nodes = [m for m in r.nodes if m not in taken]
    if shared and r.cannot is None:
        r.cannot = (f"shares ONNX node {shared[0]} with another region (the exporter fused ops of both into it): "
                    "the carve takes one or the other, not both")


def _onnx_of(g: OnnxGraph, facts: FactGraph, fx_names: Iterable[str]) -> set[str]:
    return {o for f in fx_names for o in facts.nodes[f].onnx if o in g.by_name}


def _around_regions(g: OnnxGraph, facts: FactGraph, gi: GraphIndex, succ: dict[str, list[str]],
                    block: Region) -> list[Region]:
    """The regions ``Cls:around`` carves at an attention block, decided by the carve's own rules:
    its :around growth (frontend.regions.grow_around), whole ONNX nodes, and the convexity check.
    When an outside op cuts through the region (a conv between two attention products: one plugin
    node cannot replace it), the convex parts that hold an attention op instead, each its own
    region proposed ``@part=K``."""
    try:
        fx = [n.name for n in grow_around(gi.owned_by(block.path), gi, nojoin=False, where=block.path)]
    except UsageError as e:
        block.cannot = str(e)
        return [block]
    names = sorted(whole_onnx_nodes(fx, facts), key=facts.order.get)
    nodes = _onnx_of(g, facts, names)
    if not nodes:
        block.cannot = "its :around region became no ONNX node (constant-folded or optimised away)"
        return [block]
    hit = convexity_witness(nodes, succ)
    if hit is None:
        return [_with(block, names, nodes, None, facts)]
    parts = around_parts(names, gi, facts, succ)
    if not parts:
        block.nodes = sorted(nodes)
        block.cannot = (f"not convex (ONNX node {hit[0]} depends on the region and feeds {hit[1]} inside it), and no "
                        "convex part of it holds an attention op")
        return [block]
    return [_with(block, p, _onnx_of(g, facts, p), k, facts) for k, p in enumerate(parts) if _onnx_of(g, facts, p)]


def _with(block: Region, fx: list[str], nodes: set[str], part: int | None, facts: FactGraph) -> Region:
    anchors = [a for a in block.anchors if a in nodes] or sorted(nodes)[:1]
    return Region(path=block.path, cls=block.cls, kind="attention", around=True, anchors=anchors,
                  nodes=sorted(nodes), part=part, baked=tuple(baked_weights(fx, facts)))


def _after_a_conv(g: OnnxGraph, bn: Any, nodes: list[str]) -> bool:
    """A BatchNormalization that reads a conv of the region and is that conv's only consumer."""
    src = g.producer.get(bn.inputs[0]) if bn.inputs else None
    return src in nodes and g.by_name[src].op_type == "Conv" and g.consumers.get(bn.inputs[0], []) == [bn.name]


def _kernel_area(g: OnnxGraph, conv: Any) -> int:
    w = g.shape(conv.inputs[1]) if len(conv.inputs) > 1 else None
    k = [d for d in (conv.attrs.get("kernel_shape") or (w or [])[2:]) if isinstance(d, int)]
    area = 1
    for d in k:
        area *= d
    return area


def _climb(stack: tuple[tuple[str, str], ...], heavy_in: dict[str, int], blocks: set[str]) -> str:
    i = len(stack) - 1
    while i > 1 and heavy_in.get(stack[i - 1][0], 0) == 1 and stack[i - 1][0] not in blocks:
        i -= 1
    # Prefer a real module over a container that happens to hold only this op.
    j = i
    while j < len(stack) - 1 and stack[j][1] in CONTAINERS:
        j += 1
    return stack[j][0]


def _describe(g: OnnxGraph, r: Region) -> None:
    a = g.by_name[r.anchors[0]]
    if r.sig.get("branches"):
        # a branch sum's convs, merged by the carve into one conv of the largest kernel: described as that one
        a = max((g.by_name[m] for m in r.anchors), key=lambda n: _kernel_area(g, n))
        merged = {"Conv", "Add", "Sub", "Mul", "BatchNormalization", "Identity"}  # what the merge absorbs
    else:
        merged = {a.op_type}
    ins, _outs, _c = boundary(g, r.nodes)
    r.sig["inputs"] = [g.shape(t) for t in ins]
    # The carve makes one plugin of sites that compute the same ops: a conv with and one without
    # its activation are different kernels, so the op inventory is part of every family.
    inv: dict[str, int] = {}
    for n in r.nodes:
        op = g.by_name[n].op_type
        if op == "BatchNormalization" and _after_a_conv(g, g.by_name[n], r.nodes):
            continue  # one the exporter left unfolded (a module called twice): the carve folds it like the rest
        inv[op] = inv.get(op, 0) + 1
    r.sig["ops"] = tuple(sorted(inv.items()))
    # Which values of a many-output node (a Split) the region uses is part of what it computes: MixNet's
    # mixed convs each take their own slice of one split, with equal op counts but different programs.
    used = {t for n in r.nodes for t in g.by_name[n].inputs} | set(ins) | set(_outs)
    r.sig["taps"] = tuple((g.by_name[n].op_type, tuple(i for i, o in enumerate(g.by_name[n].outputs) if o in used))
                          for n in r.nodes if len(g.by_name[n].outputs) > 1)
    r.sig["extra_ops"] = tuple(sorted(op for op in inv if op not in merged))
    if a.op_type == "Conv" and r.kind not in ("squeeze_excite", "attention") and inv.get("LayerNormalization"):
        # a LayerNorm over the conv's channels (its epilogue): part of what the kernel computes, so part of every
        # name; its permutes only say whether the result leaves in NCHW (LayerNorm2d) or NHWC (a Linear follows)
        r.sig["norm"] = "Ln" if inv.get("Transpose", 0) >= 2 else "LnNhwc"
        r.sig["extra_ops"] = tuple(op for op in r.sig["extra_ops"] if op not in ("LayerNormalization", "Transpose"))
    if r.kind == "squeeze_excite":
        # what every squeeze-excite holds (its pool, its convs, the gate's product) names none of them apart
        r.sig["extra_ops"] = tuple(op for op in r.sig["extra_ops"]
                                   if op not in ("Mul", "ReduceMean", "AveragePool", *_POOLS))
        x = g.shape(ins[0]) if ins else None
        w = g.shape(a.inputs[1])
        r.sig.update(C=_channels(x), CR=w[0] if w else None, spatial=_spatial(x))
        return
    if r.kind == "attention":
        x = g.shape(ins[0]) if ins else None
        r.sig["C"] = _channels(x)
        r.sig["spatial"] = _spatial(x)
        if r.part is not None:
            r.sig["part"] = r.part
        return
    if a.op_type in ("Conv", "ConvTranspose"):
        x, w = g.shape(a.inputs[0]), g.shape(a.inputs[1])
        k = list(a.attrs.get("kernel_shape") or (w[2:] if w else []))
        groups = int(a.attrs.get("group", 1))
        cin = x[1] if x and len(x) > 1 else None
        # ONNX weights: Conv (Cout, Cin/groups, k...), ConvTranspose (Cin, Cout/groups, k...)
        cout = (w[1] * groups if a.op_type == "ConvTranspose" else w[0]) if w and len(w) > 1 else None
        r.sig.update(k=k, stride=list(a.attrs.get("strides") or [1] * len(k)), pads=list(a.attrs.get("pads") or []),
                     dilation=list(a.attrs.get("dilations") or [1] * len(k)), groups=groups, C=cin, Cout=cout,
                     spatial=_spatial(x), transpose=a.op_type == "ConvTranspose")
        if isinstance(cin, int) and groups == cin and groups > 1:
            r.kind = "depthwise_conv"
        elif groups > 1:
            r.kind = "grouped_conv"
        else:
            r.kind = "conv"
        return
    x = g.shape(a.inputs[0])
    w = g.shape(a.inputs[1]) if len(a.inputs) > 1 else None
    r.kind = "gemm"
    n_out = None
    if w:
        n_out = w[0] if a.op_type == "Gemm" and a.attrs.get("transB") else w[-1]
    r.sig.update(K=x[-1] if x else None, N=n_out, C=x[-1] if x else None, spatial=list(x[:-1]) if x else None)


def _channels(shape: list[int | str] | None) -> int | str | None:
    if not shape:
        return None
    return shape[1] if len(shape) == 4 else shape[-1]


def _spatial(shape: list[int | str] | None) -> list[int | str] | None:
    if not shape:
        return None
    return list(shape[2:]) if len(shape) == 4 else list(shape[1:-1])


def cannot_express(g: OnnxGraph, r: Region) -> str | None:
    """Why the kernel contract (or the carve) cannot take this region, or None."""
    if r.path == "":
        return "its ops sit at the model root: no module to select"
    ops = {g.by_name[n].op_type for n in r.nodes}
    dd = sorted(ops & DATA_DEPENDENT)
    if dd:
        return f"data-dependent output shape ({', '.join(dd)}): a plugin declares its output shape up front"
    cf = sorted(ops & CONTROL_FLOW)
    if cf:
        return f"control flow ({', '.join(cf)}) inside the region"
    _ins, outs, _c = boundary(g, r.nodes)
    if not outs:
        return "the region has no output used outside it"
    # several outputs are fine: the carve makes one custom-op node with an output per value that leaves
    for o in outs:
        m = g.meta.get(o)
        if m is not None and m.dtype not in _KERNEL_DTYPES:
            return f"{m.dtype} output: the kernel contract carries float16/float32/int32/int8 tensors only"
    return None
