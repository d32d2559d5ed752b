"""Regions: the module instances a plugin could replace, found from the ops they contain.

* An attention block is the module that itself calls an activation x activation product (Q.K,
  attn.V, LiteMLA's k^T.v): it is proposed ``:around``, so its region is the block's own ops and
  the plumbing children (no child that carries weights: those convs/GEMMs are regions of their own).
* Every other weighted op (conv, GEMM) is the region of the largest module around it that holds
  no other heavy op: the whole ``ConvNormAct`` (conv + norm + activation), but just the ``Conv2d``
  when its parent also holds a second conv. Containers (Sequential, ModuleList) are not chosen.
* What is left (residual adds, ops at the model root) is outside every region.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

from ytk_hookspecs.models.kernel import KernelDtype

from ..frontend.region_rules import FactGraph, grow_epilogue, whole_onnx_nodes
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
    kind: str                          # depthwise_conv | grouped_conv | conv | gemm | attention
    around: bool
    anchors: list[str]                 # the heavy ONNX node(s)
    nodes: list[str]
    ms: float = 0.0
    sig: dict[str, Any] = field(default_factory=dict)
    cannot: str | None = None          # why the kernel contract cannot express it
    epilogue: bool = False             # the pointwise ops after the module are part of it (@epilogue)

    @property
    def gemm_like(self) -> bool:
        return self.kind in ("conv", "grouped_conv", "gemm")


def discover_regions(g: OnnxGraph, mods: ModuleIndex, node_ms: dict[str, float]) -> tuple[list[Region], list[str]]:
    """All regions in graph order, and the owned nodes that fall outside every region."""
    facts = FactGraph.from_fx_nodes(mods.fx)
    weighted = [n.name for n in g.nodes if n.name in mods.owner and is_weighted(g, n)]
    attn = [n.name for n in g.nodes if n.name in mods.owner and is_attention_op(g, n)]
    # A weighted node's home is the module of the conv/GEMM it computes, not the common ancestor of
    # everything the exporter fused into it: timm's conv_pw and bn1 are siblings in a block of five
    # convs, and their folded Conv is no more that block's than any other conv's.
    stacks = {n: _heavy_stack(mods, facts, n) for n in weighted}
    stacks.update({n: mods.owner[n] for n in attn})
    heavy_in: dict[str, int] = {}
    weighted_in: dict[str, bool] = {}
    for n in (*weighted, *attn):
        for p, _ in stacks[n]:
            heavy_in[p] = heavy_in.get(p, 0) + 1
    for n in weighted:
        for p, _ in stacks[n]:
            weighted_in[p] = True

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
        nodes = [] if block else [n]
        for m in mods.nodes_of.get(block, []) if block else []:
            stack = [p for p, _ in mods.owner[m]]
            below = stack[stack.index(block) + 1:]
            if any(weighted_in.get(p) for p in below):
                continue
            nodes.append(m)
        regions[block] = Region(path=block, cls=mods.cls_of.get(block, "?"), kind="attention", around=True,
                                anchors=[n], nodes=nodes)
        taken.update(nodes)
    blocks = set(r.path for r in regions.values() if r.kind == "attention")
    for n in weighted:
        if n in taken:
            continue
        path = _climb(stacks[n], heavy_in, blocks)
        if path in regions:
            regions[path].anchors.append(n)
            if not path:
                regions[path].nodes.append(n)
                taken.add(n)
            continue
        if not path:  # an op called at the model root has no module of its own: the region is just that op
            regions[path] = Region(path=path, cls=mods.cls_of.get(path, "?"), kind="gemm", around=False,
                                   anchors=[n], nodes=[n])
            taken.add(n)
            continue
        nodes, epilogue = _module_region(g, facts, path, taken)
        regions[path] = Region(path=path, cls=mods.cls_of.get(path, "?"), kind="gemm", around=False,
                               anchors=[n], nodes=nodes, epilogue=epilogue)
        taken.update(nodes)
    out = sorted(regions.values(), key=lambda r: min(g.by_name[a].index for a in r.anchors))
    for r in out:
        r.nodes.sort(key=lambda m: g.by_name[m].index)
        r.ms = float(sum(node_ms.get(m, 0.0) for m in r.nodes))
        _describe(g, r)
        r.cannot = cannot_express(g, r)
    outside = [m for m in node_ms if m in mods.owner and m not in taken]
    return out, outside


def _heavy_stack(mods: ModuleIndex, facts: FactGraph, onnx_node: str) -> tuple[tuple[str, str], ...]:
    heavy = [facts.nodes[f] for f in mods.fx_of.get(onnx_node, []) if f in facts.nodes and facts.nodes[f].heavy]
    if not heavy or not heavy[0].modules:
        return mods.owner[onnx_node]
    paths = heavy[0].modules if heavy[0].modules[0] == "" else ("", *heavy[0].modules)
    return tuple((p, mods.cls_of.get(p, "?")) for p in paths)


def _module_region(g: OnnxGraph, facts: FactGraph, path: str, taken: set[str]) -> tuple[list[str], bool]:
    """A module's ONNX nodes as the carve will cut them: whole ONNX nodes, plus its pointwise
    epilogue when that lies outside the module (then the selector carries ``@epilogue``)."""
    own = facts.owned_by(path)
    whole = whole_onnx_nodes(own, facts)
    grown = grow_epilogue(own, facts)

    def onnx_of(fx_names: set[str]) -> set[str]:
        return {o for f in fx_names for o in facts.nodes[f].onnx if o in g.by_name}

    base, more = onnx_of(whole), onnx_of(grown)
    if more - base and not (more & taken):
        return sorted(more - taken), True
    return sorted(base - taken), False


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
    ins, _outs, _c = boundary(g, r.nodes)
    r.sig["inputs"] = [g.shape(t) for t in ins]
    # The carve makes one plugin of sites that compute the same ops: a conv with and one without
    # its activation are different kernels, so the op inventory is part of every family.
    inv: dict[str, int] = {}
    for n in r.nodes:
        op = g.by_name[n].op_type
        inv[op] = inv.get(op, 0) + 1
    r.sig["ops"] = tuple(sorted(inv.items()))
    r.sig["extra_ops"] = tuple(sorted(op for op in inv if op != a.op_type))
    if r.kind == "attention":
        x = g.shape(ins[0]) if ins else None
        r.sig["C"] = _channels(x)
        r.sig["spatial"] = _spatial(x)
        return
    if a.op_type in ("Conv", "ConvTranspose"):
        x, w = g.shape(a.inputs[0]), g.shape(a.inputs[1])
        k = list(a.attrs.get("kernel_shape") or (w[2:] if w else []))
        groups = int(a.attrs.get("group", 1))
        cin = x[1] if x and len(x) > 1 else None
        cout = w[0] if w else None
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
