"""What a region is, decided once for both propose and the carve (torch-free).

propose reads fx_nodes.json; the carve reads the traced FX graph. Both describe the same nodes, so
both build a :class:`FactGraph` and ask the functions here which FX nodes a region holds. That is
how a proposal and its carve agree by construction rather than by two rule sets kept in step.

Two rules widen a region beyond the nodes its selector names:

* **Whole ONNX nodes.** The exporter fuses ops (a BatchNorm folds into its conv, a tuple's getitem
  is the node that makes the tuple), and a carve can only replace whole ONNX nodes. Every FX node
  that became part of an ONNX node the region touches joins the region. Automatic: without it the
  carve would cut a fused node in half (timm writes ``conv_pw`` and ``bn1`` as siblings, so the
  folded conv belongs to neither module alone).
* **Epilogue** (the ``@epilogue`` selector modifier). The pointwise ops that consume the region's
  single output and nothing else from outside it -- BatchNorm, activations, identities, scaling
  by a constant -- join it, one after another, until a value has several users or an op mixes in a
  second activation (a residual add). That is the bias + activation a kernel fuses for free, and
  which a model zoo writes in sibling modules (``bn1.act``) that no module selector reaches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: aten ops (name before the overload) that a kernel's epilogue absorbs: unary pointwise math.
EPILOGUE_UNARY = {
    "relu", "relu_", "relu6", "hardtanh", "hardtanh_", "clamp", "clamp_", "clamp_min", "clamp_max",
    "hardswish", "hardswish_", "hardsigmoid", "silu", "silu_", "sigmoid", "tanh", "gelu", "leaky_relu", "elu",
    "mish", "selu", "celu", "softplus", "_to_copy", "_native_batch_norm_legit_no_training", "batch_norm",
    "_native_batch_norm_legit",
}
#: Ops that compute nothing in eval mode; the exporter files them under their consumer's ONNX node.
IDENTITY = {"dropout", "native_dropout", "clone", "alias", "contiguous", "detach", "lift_fresh_copy"}
#: Binary pointwise ops that stay in an epilogue when the other operand is a weight or a constant.
EPILOGUE_BINARY = {"mul", "add", "sub", "div"}
#: The ops that make a region heavy (what a kernel is built around).
HEAVY_TARGETS = ("conv2d", "convolution", "_convolution", "conv1d", "conv3d", "linear", "addmm", "mm", "bmm",
                 "matmul", "einsum", "baddbmm", "scaled_dot_product")


def aten_base(target: str) -> str:
    """``aten.relu.default`` -> ``relu``; ``_operator.getitem`` -> ``getitem``."""
    if target.endswith("getitem"):
        return "getitem"
    return target.split("aten.", 1)[1].split(".")[0] if "aten." in target else target.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class NodeFacts:
    """One traced FX node, as much of it as region decisions need."""

    name: str
    op: str                     # call_function | placeholder | get_attr | output
    target: str                 # e.g. "aten.conv2d.default", "_operator.getitem"
    inputs: tuple[str, ...]     # producer node names, in argument order
    modules: tuple[str, ...]    # module paths from the root to the innermost owner ("" first)
    onnx: tuple[str, ...]       # the ONNX nodes it became
    shapes: tuple[tuple[Any, ...], ...] = ()   # its output's shape, then each input tensor's (when traced)
    calls: tuple[int, ...] = ()  # per module in ``modules``, which call of it (0: the first; () all first)

    def call_of(self, path: str) -> int:
        """Which call of module ``path`` this node belongs to (a module called twice is two sites)."""
        return self.calls[self.modules.index(path)] if self.calls and path in self.modules else 0

    @property
    def base(self) -> str:
        return aten_base(self.target)

    @property
    def module(self) -> str:
        return self.modules[-1] if self.modules else ""

    @property
    def heavy(self) -> bool:
        return self.op == "call_function" and any(self.base == h or self.base.startswith(h) for h in HEAVY_TARGETS)


class FactGraph:
    """The traced graph as facts: nodes in order, their users, and which names are weights."""

    def __init__(self, nodes: Iterable[NodeFacts], weights: Iterable[str]) -> None:
        self.nodes: dict[str, NodeFacts] = {}
        self.order: dict[str, int] = {}
        for i, n in enumerate(nodes):
            self.nodes[n.name] = n
            self.order[n.name] = i
        self.weights = set(weights)
        self.users: dict[str, list[str]] = {n: [] for n in self.nodes}
        for n in self.nodes.values():
            for i in n.inputs:
                if i in self.users and n.name not in self.users[i]:
                    self.users[i].append(n.name)
        self.by_onnx: dict[str, list[str]] = {}
        for n in self.nodes.values():
            for o in n.onnx:
                self.by_onnx.setdefault(o, []).append(n.name)

    # -- builders ---------------------------------------------------------------------------------
    @classmethod
    def from_fx_nodes(cls, fx: Any, weights: Iterable[str] | None = None) -> "FactGraph":
        """From an :class:`~ytk_hookspecs.models.FxNodesFile`: propose reads it, and the carve reads the
        same file for the same graph (its node names are checked against the traced program), so both
        decide on identical facts. ``weights``: the program's parameter/buffer names when known."""
        names = {n.name for n in fx.nodes}
        facts = []
        for n in fx.nodes:
            ins = tuple(a for a in _flat(n.args) if isinstance(a, str) and a in names)
            shapes = tuple(tuple(t.shape) for t in (n.outputs[:1] + list(n.inputs)))
            facts.append(NodeFacts(name=n.name, op=n.op, target=str(n.target), inputs=ins,
                                   modules=tuple(f.path for f in n.module_stack), onnx=tuple(n.onnx_nodes),
                                   shapes=shapes, calls=tuple(f.call for f in n.module_stack)))
        if weights is None:
            weights = [n.name for n in fx.nodes if n.op == "placeholder" and _is_weight_name(n.name)]
        return cls(facts, weights)

    # -- queries ----------------------------------------------------------------------------------
    def calls(self) -> list[NodeFacts]:
        return [n for n in self.nodes.values() if n.op == "call_function"]

    def owned_by(self, path: str, call: int | None = None) -> list[str]:
        """The call nodes a module (and its children) computes: in every call of it, or in call ``call``."""
        return [n.name for n in self.calls() if path in n.modules and (call is None or n.call_of(path) == call)]

    def outputs_of(self, region: set[str]) -> list[str]:
        """Region nodes whose value is used outside the region (or is a graph output)."""
        out = []
        for name in region:
            users = self.users.get(name, [])
            if not users or any(u not in region for u in users):
                if users or self.nodes[name].op == "call_function":
                    out.append(name)
        return sorted(out, key=self.order.get)

    def is_constant(self, name: str) -> bool:
        n = self.nodes.get(name)
        return n is None or name in self.weights or n.op == "get_attr" or self.is_literal(name)

    def is_literal(self, name: str) -> bool:
        """A number the exporter made a tensor of (``x + 3`` traces as ``add(x, scalar_tensor(3))``): it
        reads nothing, so a region that uses it holds it rather than taking it as an input."""
        n = self.nodes.get(name)
        return n is not None and n.op == "call_function" and n.base == "scalar_tensor" and not n.inputs

    def folded(self, name: str) -> bool:
        """Computed from weights alone and left no ONNX node: the exporter folded it into an
        initializer, which every ONNX consumer reads (Swin's gathered bias, EfficientViT-M's)."""
        n = self.nodes.get(name)
        if n is None or n.op != "call_function" or n.onnx:
            return False
        seen, todo = {name}, list(n.inputs)
        while todo:
            m = self.nodes.get(todo.pop())
            if m is None or m.name in seen:
                continue
            seen.add(m.name)
            if self.is_constant(m.name):
                continue
            if m.op != "call_function":
                return False
            todo += m.inputs
        return True


def whole_onnx_nodes(region: Iterable[str], g: FactGraph) -> set[str]:
    """The region grown until it holds every FX node of every ONNX node it computes.

    An identity (eval dropout, clone, alias) becomes no ONNX node of its own: the exporter files it
    under its consumer's node. So an identity never pulls its consumer in, and one whose consumer
    stays outside is left out (it computes nothing; the value it passes on is its input's).

    An op the ONNX optimiser merged into its consumers' nodes (an asymmetric ``F.pad`` before a
    conv becomes the Conv's ``pads``) has no ONNX node and no tensor: a region that reads it cannot
    take it as an input, so it joins the region when every consumer is inside.
    """
    out = _grow_whole(set(region), g)
    while True:
        absorbed = {i for n in out if n in g.nodes for i in g.nodes[n].inputs if _absorbed(i, out, g)}
        if not absorbed:
            return out
        out = _grow_whole(out | absorbed, g)


def _absorbed(name: str, region: set[str], g: FactGraph) -> bool:
    """A value with no ONNX tensor that ``region`` reads: one the ONNX optimiser merged into consumers that are
    all in ``region``, or one computed from weights alone that the exporter folded into an initializer (a
    table the model computes once in forward and hands to every block: each region computes its own)."""
    n = g.nodes.get(name)
    if n is None or name in region or n.op != "call_function" or n.onnx or _identity(n) or g.is_constant(name) \
            or n.base == "getitem":
        return False
    return g.folded(name) or all(u in region for u in g.users.get(name, []))


def _grow_whole(out: set[str], g: FactGraph) -> set[str]:
    todo = [n for n in out if not _identity(g.nodes.get(n))]
    while todo:
        n = g.nodes.get(todo.pop())
        if n is None:
            continue
        for o in n.onnx:
            for m in g.by_onnx.get(o, []):
                if m not in out and g.nodes[m].op == "call_function":
                    out.add(m)
                    if not _identity(g.nodes[m]):
                        todo.append(m)
    changed = True
    while changed:
        changed = False
        for name in sorted(out):
            n = g.nodes.get(name)
            if _identity(n) and any(m not in out and not _identity(g.nodes[m]) for o in n.onnx
                                    for m in g.by_onnx.get(o, [])):
                out.discard(name)
                changed = True
    return out


def grow_epilogue(region: Iterable[str], g: FactGraph) -> set[str]:
    """The region plus the chain of pointwise ops its single output flows through (see module doc)."""
    out = whole_onnx_nodes(region, g)
    while True:
        outs = _value_outputs(out, g)
        if len(outs) != 1:
            return out
        step = _next_epilogue_step(outs[0], out, g) or _channel_norm_step(outs[0], out, g)
        if not step:
            return out
        literals = {i for m in step for i in g.nodes[m].inputs if g.is_literal(i)}
        grown = whole_onnx_nodes(out | set(step) | literals, g)
        if not _fed_from_outside(grown, g) <= _fed_from_outside(out, g):
            # the exporter fused the step into an ONNX node that also reads another value (``x + 0``
            # folded into the next add of a branch sum): taking it whole would add an input, not an epilogue
            return out
        # a getitem that picks a tuple's first value is part of the op that made the tuple
        for name in list(grown):
            for u in g.users.get(name, []):
                if g.nodes[u].base == "getitem" and u not in grown:
                    grown |= whole_onnx_nodes({u}, g)
        if grown <= out:
            return out
        out = grown


def _fed_from_outside(nodes: set[str], g: FactGraph) -> set[str]:
    """The non-constant values the nodes read from outside them."""
    return {i for n in nodes for i in g.nodes[n].inputs if i not in nodes and not g.is_constant(i)}


def _next_epilogue_step(value: str, region: set[str], g: FactGraph, reach: int = 24) -> list[str]:
    """The pointwise ops after ``value`` that an epilogue may take in one step: the largest set that
    closes on one node again (a spelled-out ``x * relu6(x + 3) / 6`` forks and re-joins), whose
    every input is ``value``, the set itself or a constant, and which nothing outside it consumes."""
    inside = set(region)
    seen: list[str] = []
    todo = sorted(g.users.get(value, []), key=g.order.get)
    while todo and len(seen) < reach:
        n = g.nodes[todo.pop(0)]
        if n.name in inside or n.name in seen or not _absorbable(n, inside | set(seen), g):
            continue
        seen.append(n.name)
        todo = sorted(set(todo) | set(g.users.get(n.name, [])), key=g.order.get)
    for y in sorted(seen, key=g.order.get, reverse=True):
        step = _ancestors_within(y, set(seen), g)
        ok = all(u in step for u in g.users.get(value, [])) and all(
            u in step for m in step if m != y for u in g.users.get(m, []))
        if ok:
            return sorted(step, key=g.order.get)
    return []


#: LayerNorm spellings an epilogue takes when they normalise the channels of an NCHW value
LN_BASES = ("layer_norm", "native_layer_norm")


def _channel_norm_step(value: str, region: set[str], g: FactGraph) -> list[str]:
    """A LayerNorm over the channels of the NCHW ``value``, spelled as timm writes it: ``permute(0, 2, 3, 1)``,
    ``layer_norm`` over the last dim (its weight and bias constants), and -- LayerNorm2d -- ``permute(0, 3, 1,
    2)`` back, taken when it is the norm's only consumer (ConvNeXt with conv_mlp=False and EdgeNeXt go on in
    NHWC into a Linear: the step then ends at the norm). Each value in it has that one consumer. The norm is
    per pixel, so a kernel computing the pixel's channels fuses it like an activation."""
    def only_user(name: str) -> NodeFacts | None:
        users = g.users.get(name, [])
        return g.nodes[users[0]] if len(users) == 1 and users[0] not in region else None

    src = g.nodes.get(value)
    to_nhwc = only_user(value)
    if src is None or to_nhwc is None or to_nhwc.base != "permute" or not src.shapes:
        return []
    nchw = src.shapes[0]
    if len(nchw) != 4 or not to_nhwc.shapes or tuple(to_nhwc.shapes[0]) != (nchw[0], nchw[2], nchw[3], nchw[1]):
        return []
    norm = only_user(to_nhwc.name)
    if norm is None or norm.base not in LN_BASES or not norm.inputs or norm.inputs[0] != to_nhwc.name:
        return []
    params = norm.inputs[1:]
    if not all(g.is_constant(i) and i in g.weights for i in params):
        return []
    # over the channels alone: its weight (when it has one) is [C]; the output keeps the input's shape
    wshape = g.nodes[params[0]].shapes[0] if params and g.nodes[params[0]].shapes else None
    if wshape is not None and tuple(wshape) != (nchw[1],):
        return []
    step = [to_nhwc.name, norm.name]
    last = norm
    if norm.base == "native_layer_norm":  # (out, mean, rstd): only the first may be read
        users = [g.nodes[u] for u in g.users.get(norm.name, [])]
        if len(users) != 1 or users[0].base != "getitem":
            return []
        last = users[0]
        step.append(last.name)
    back = only_user(last.name)
    if back is not None and back.base == "permute" and back.shapes and tuple(back.shapes[0]) == tuple(nchw):
        step.append(back.name)
    return step


def _ancestors_within(y: str, pool: set[str], g: FactGraph) -> set[str]:
    out, todo = {y}, [y]
    while todo:
        for i in g.nodes[todo.pop()].inputs:
            if i in pool and i not in out:
                out.add(i)
                todo.append(i)
    return out


def _value_outputs(region: set[str], g: FactGraph) -> list[str]:
    """Region outputs, a tuple-making node counted through its getitems."""
    return [o for o in g.outputs_of(region)
            if not all(g.nodes[u].base == "getitem" and u in region for u in g.users.get(o, []))]


def _absorbable(n: NodeFacts, inside: set[str], g: FactGraph) -> bool:
    """A pointwise op whose every input is already inside (or a weight / constant)."""
    if n.op != "call_function" or n.base not in EPILOGUE_UNARY | EPILOGUE_BINARY | IDENTITY:
        return False
    return all(i in inside or g.is_constant(i) for i in n.inputs)


def _identity(n: NodeFacts | None) -> bool:
    return n is not None and n.op == "call_function" and n.base in IDENTITY


def _flat(v: Any) -> Iterable[Any]:
    if isinstance(v, (list, tuple)):
        for x in v:
            yield from _flat(x)
    else:
        yield v


def _is_weight_name(name: str) -> bool:
    # torch.export names lifted parameters p_*, buffers b_*, lifted constants c_*
    return name.startswith(("p_", "b_", "c_"))


# -- what a region bakes ----------------------------------------------------------------------------
#: aten ops whose weight operands the carve lifts as a folded (weight, bias) pair (conv2d and kin).
CONV_BASES = ("conv2d", "convolution", "_convolution", "conv1d", "conv3d")
#: BatchNorm spellings a lifted conv folds when the BatchNorm is the conv's only consumer.
BN_BASES = ("_native_batch_norm_legit_no_training", "batch_norm", "_native_batch_norm_legit")


@dataclass(frozen=True)
class BranchSum:
    """Parallel branches over one input, summed: what a re-parameterisable block (RepVGG, MobileOne,
    FastViT's RepMixer, RepViT's RepVggDw) computes before it is re-parameterised. Every member is an
    affine function of ``x`` that one convolution computes: convs reading ``x`` (each with its BatchNorm),
    ``x`` itself and BatchNorms of it, added or subtracted, scaled by per-channel parameters. A lifting carve
    merges the members into that one conv's (weight, bias) pair (region_module), so the region is a plain
    conv wherever the model wrote the branches out."""

    root: str                   # the value the merged conv computes
    x: str                      # the input every branch reads
    convs: tuple[str, ...]      # the branch convs, in graph order
    members: tuple[str, ...]    # every node the merged conv replaces, in graph order (root last)
    identity: bool = False      # a branch is x itself (or a BatchNorm of it)


def branch_sums(region: Iterable[str], g: FactGraph) -> list[BranchSum]:
    """The branch sums inside ``region`` (see :class:`BranchSum`), at most one per value, none overlapping.

    A residual around a sum (``x + f(x)``, RepMixer's ``x + ls * (mixer(x) - norm(x))``) is left out of it: a
    kernel adds a residual exactly, where merged into the weights an identity term rounds the branch it is added
    to at fp16 (a layer scale of 1e-5 would vanish). A sum whose value a non-member also reads, or that holds
    fewer than two branches, is none (a single conv's BatchNorm and layer scale are folded by the plain lift)."""
    inside = set(region)
    names = sorted(inside, key=lambda n: g.order.get(n, 0))
    xs: list[str] = []
    for name in names:
        n = g.nodes[name]
        if n.op == "call_function" and n.base in CONV_BASES and len(n.inputs) >= 2 and n.inputs[0] not in xs \
                and all(i in g.weights for i in n.inputs[1:]) and n.inputs[0] not in g.weights:
            xs.append(n.inputs[0])
    out: list[BranchSum] = []
    claimed: set[str] = set()
    for x in xs:
        aff = _affine_in(x, names, g)
        for root in [m for m in names if m in aff and (any(u not in aff for u in g.users.get(m, []))
                                                        or not g.users.get(m))]:
            n = g.nodes[root]
            if n.base == "add" and x in n.inputs:  # a residual around the sum stays a residual
                root = next((i for i in n.inputs if i != x), root)
                if root not in aff:
                    continue
            members = _cone_of(root, aff, g)
            if members is None or members & claimed:
                continue
            convs = tuple(m for m in sorted(members, key=g.order.get) if g.nodes[m].base in CONV_BASES)
            identity = any(x in g.nodes[m].inputs for m in members if m not in convs)
            # two branches at least: a conv plus a number is a bias (``relu6(conv + 3)`` stays a hardsigmoid)
            if len(convs) + identity < 2:
                continue
            if not _same_geometry(convs, g):
                continue
            claimed |= members
            out.append(BranchSum(root=root, x=x, convs=convs, members=tuple(sorted(members, key=g.order.get)),
                                 identity=identity))
    return sorted(out, key=lambda b: g.order.get(b.root, 0))


def _affine_in(x: str, names: list[str], g: FactGraph) -> set[str]:
    """The region's nodes whose value one convolution of ``x`` computes (convs of ``x``, their BatchNorms, sums
    and differences of same-shaped such values and ``x``, per-channel scaling by a parameter)."""
    aff: set[str] = set()

    def weights_only(ins: tuple[str, ...]) -> bool:
        return all(i in g.weights for i in ins)

    for name in names:
        n = g.nodes[name]
        if n.op != "call_function" or not n.inputs:
            continue
        b, first = n.base, n.inputs[0]
        if b in CONV_BASES:
            ok = first == x and len(n.inputs) >= 2 and weights_only(n.inputs[1:])
        elif b in BN_BASES:
            ok = (first in aff or first == x) and len(n.inputs) > 1 and weights_only(n.inputs[1:])
        elif b == "getitem":  # the normalised value of a BatchNorm's (value, mean, invstd) tuple
            src = g.nodes.get(first)
            ok = first in aff and src is not None and src.base in BN_BASES and len(n.inputs) == 1 \
                and bool(n.shapes) and len(src.shapes) > 1 and tuple(n.shapes[0]) == tuple(src.shapes[1])
        elif b in IDENTITY:
            ok = first in aff and len(n.inputs) == 1
        elif b in ("add", "sub"):  # of two such values, or of one and a number (MobileOne's ``0 + branch``)
            tensors = [(i, sh) for i, sh in zip(n.inputs, n.shapes[1:]) if not g.is_literal(i)]
            ok = len(n.shapes) == len(n.inputs) + 1 and 1 <= len(tensors) <= 2 \
                and all((i in aff or i == x) and sh == n.shapes[0] for i, sh in tensors) \
                and any(i in aff for i, _ in tensors)
        elif b == "mul":
            ok = len(n.inputs) == 2 and any(i in aff for i in n.inputs) and _per_channel(n, g)
        else:
            ok = False
        if ok:
            aff.add(name)
    return aff


def _per_channel(mul: NodeFacts, g: FactGraph) -> bool:
    """A product with a ``[C, 1, 1]`` (or ``[1, C, 1, 1]``) parameter: a layer scale."""
    w = [i for i in mul.inputs if i in g.weights]
    out = mul.shapes[0] if mul.shapes else None
    if len(w) != 1 or out is None or len(out) != 4:
        return False
    ws = tuple(g.nodes[w[0]].shapes[0]) if g.nodes[w[0]].shapes else None
    return ws in ((out[1], 1, 1), (1, out[1], 1, 1))


def _cone_of(root: str, aff: set[str], g: FactGraph) -> set[str] | None:
    """``root`` and the affine nodes it is computed from, when no node outside reads any of them but ``root``."""
    cone = _ancestors_within(root, aff, g)
    if any(u not in cone for m in cone - {root} for u in g.users.get(m, [])):
        return None
    # the numbers it adds (``x + 0`` traces as an add of a scalar_tensor), where nothing else reads them
    return cone | {i for m in cone for i in g.nodes[m].inputs
                   if g.is_literal(i) and all(u in cone for u in g.users.get(i, []))}


def _same_geometry(convs: tuple[str, ...], g: FactGraph) -> bool:
    """Convs of one sum merge when their weights have one shape, or differ only in odd kernel sizes (centred:
    RepVGG's 3x3 and 1x1)."""
    shapes = [tuple(g.nodes[c].shapes[2]) if len(g.nodes[c].shapes) > 2 else None for c in convs]
    if len(set(shapes)) == 1:
        return True
    return None not in shapes and len({s[:2] for s in shapes}) == 1 and all(k % 2 for s in shapes for k in s[2:])


def baked_weights(region: Iterable[str], g: FactGraph, lift: bool = True) -> list[str]:
    """The weights (parameters, buffers, lifted constants) a region's program keeps inside it, in
    first-use order: every weight its nodes read, less, when convs are lifted (``lift``, the carve's
    default), each conv's own weight and bias, the parameters of a BatchNorm and a layer scale folded into it
    (:func:`folded_scale`), every parameter of a branch sum merged into one conv (:func:`branch_sums`), and each
    LayerNorm's weight and bias when the region lifts a conv (a channel norm in a conv's epilogue, see
    :func:`grow_epilogue`); a region without a conv lifts nothing.

    One plugin runs one program at every site, so sites that bake different values cannot share a
    plugin: the carve refuses them, and propose gives such a region a family of its own per site."""
    inside = set(region)
    names = sorted(inside, key=lambda n: g.order.get(n, 0))
    read: list[str] = []
    for name in names:
        for i in g.nodes[name].inputs:
            if i not in inside and i in g.weights and i not in read:
                read.append(i)
    if not lift:
        return read
    lifted: set[str] = set()
    if not any(g.nodes[name].op == "call_function" and g.nodes[name].base in CONV_BASES for name in names):
        return read
    for b in branch_sums(names, g):  # merged into one conv's pair
        lifted.update(i for m in b.members for i in g.nodes[m].inputs if i in g.weights)
    for name in names:
        n = g.nodes[name]
        if lifted_norm(n, g):
            lifted.update(i for i in n.inputs[1:] if i in g.weights)  # a norm's affine: one more lifted pair
            continue
        if n.op != "call_function" or n.base not in CONV_BASES:
            continue
        lifted.update(i for i in n.inputs[1:] if i in g.weights)
        users = g.users.get(name, [])
        if len(users) == 1 and users[0] in inside and g.nodes[users[0]].base in BN_BASES:
            lifted.update(i for i in g.nodes[users[0]].inputs[1:] if i in g.weights)
        scale = folded_scale(name, inside, g)
        if scale is not None:
            lifted.add(scale[1])
    return [w for w in read if w not in lifted]


def folded_scale(conv: str, inside: set[str], g: FactGraph) -> tuple[str, str] | None:
    """``(mul node, its weight)`` when the conv's output, through a BatchNorm folded into it and identities
    (eval dropout), is multiplied by a per-channel parameter of shape ``[C, 1, 1]`` or ``[1, C, 1, 1]`` and by
    nothing else first: a layer scale (FastViT's, PoolFormer's), which a lifting carve folds into the conv's
    (weight, bias) pair as it folds the BatchNorm."""
    cur = conv
    out_shape = g.nodes[conv].shapes[0] if g.nodes[conv].shapes else None
    while True:
        users = g.users.get(cur, [])
        if len(users) != 1 or users[0] not in inside:
            return None
        n = g.nodes[users[0]]
        if n.base in BN_BASES or n.base in IDENTITY or (
                n.base == "getitem" and g.nodes[cur].base in (*BN_BASES, "native_dropout")):
            cur = n.name
            continue
        if n.base != "mul" or len(n.inputs) != 2 or cur not in n.inputs:
            return None
        w = n.inputs[1] if n.inputs[0] == cur else n.inputs[0]
        if w == cur or w not in g.weights or out_shape is None or len(out_shape) != 4:
            return None
        wshape = tuple(g.nodes[w].shapes[0]) if g.nodes[w].shapes else None
        c = out_shape[1]
        return (n.name, w) if wshape in ((c, 1, 1), (1, c, 1, 1)) else None


def lifted_norm(n: NodeFacts, g: FactGraph) -> bool:
    """A LayerNorm whose weight is a parameter: a lifting carve passes its (weight, bias) as one pair."""
    return n.op == "call_function" and n.base in LN_BASES and len(n.inputs) > 1 and n.inputs[1] in g.weights


# -- convexity --------------------------------------------------------------------------------------
def convexity_witness(inside: Iterable[str], succ: Mapping[str, Iterable[str]]) -> tuple[str, str] | None:
    """``(outside, inside)`` where a path leaves the node set ``inside`` and re-enters it -- the
    outside node on that path and the inside node it feeds -- or None when the set is convex (one
    node can replace it). ``succ``: each graph node's consumers (the carve and propose each build it
    from their ONNX graph)."""
    inside = set(inside)
    start = [c for n in inside for c in succ.get(n, ()) if c not in inside]
    seen = set(start)
    todo = deque(start)
    while todo:
        cur = todo.popleft()
        for c in succ.get(cur, ()):
            if c in inside:
                return cur, c
            if c not in seen:
                seen.add(c)
                todo.append(c)
    return None


def convex_parts(region: Iterable[str], g: FactGraph, succ: Mapping[str, Iterable[str]]) -> list[list[str]] | None:
    """A region that is not convex, cut where outside paths re-enter it: FX node sets, each convex
    and made of whole ONNX nodes, in graph order; None when no cut at FX-node granularity exists.

    Each ONNX node of the region gets the largest number of times a path from it to the end of
    the graph leaves the region and comes back; the nodes that share that number form convex
    sets (a path that leaves and re-enters strictly lowers it), split into their connected pieces.
    So plumbing joins the part it feeds: q, k and v reshapes go with their product. An FX node with
    no ONNX node of its own (an identity, a constant the exporter folded) goes with the parts that
    consume it, in each of them. ``succ`` as for :func:`convexity_witness`; ONNX nodes that are not
    in it (replaced by a plugin, removed by the optimizer) are ignored."""
    names = sorted(set(region), key=lambda n: g.order.get(n, 0))
    onnx_of = {f: [o for o in g.nodes[f].onnx if o in succ] for f in names}
    # FX nodes that share an ONNX node are cut together (one FX node can become several ONNX nodes)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for os_ in onnx_of.values():
        for o in os_:
            parent.setdefault(o, o)
        for o in os_[1:]:
            parent[find(o)] = find(os_[0])
    unit = {o: find(o) for o in parent}
    if not unit:
        return None
    pred: dict[str, list[str]] = {}
    for a, cs in succ.items():
        for c in cs:
            pred.setdefault(c, []).append(a)
    between = _reach(set(unit), succ) & _reach(set(unit), pred)
    # the condensed graph: one vertex per unit, the outside nodes on region-to-region paths as they are
    vert = {o: unit.get(o, o) for o in between | set(unit)}
    out_edges: dict[str, set[str]] = {v: set() for v in vert.values()}
    for a, va in vert.items():
        for c in succ.get(a, ()):
            if c in vert and vert[c] != va:
                out_edges[va].add(vert[c])
    order = _topo(out_edges)
    if order is None:  # an outside path from a unit back into itself: no cut at this granularity
        return None
    units = set(unit.values())
    exits: dict[str, int] = {}
    for v in reversed(order):
        best = 0
        for c in out_edges[v]:
            best = max(best, exits[c] + (1 if v in units and c not in units else 0))
        exits[v] = best
    # connected pieces of each level, through direct edges between units of that level
    comp = {u: u for u in units}

    def root(u: str) -> str:
        while comp[u] != u:
            comp[u] = comp[comp[u]]
            u = comp[u]
        return u

    for u in units:
        for c in out_edges[u]:
            if c in units and exits[c] == exits[u]:
                comp[root(c)] = root(u)
    piece_of_unit = {u: root(u) for u in units}
    pieces: dict[str, set[str]] = {}
    for f, os_ in onnx_of.items():
        if os_:
            pieces.setdefault(piece_of_unit[unit[os_[0]]], set()).add(f)
    floating = [f for f in names if not onnx_of[f]]
    placed: dict[str, set[str]] = {}
    for f in reversed(floating):  # consumers first: a chain of them follows its last link
        keys: set[str] = set()
        for u in g.users.get(f, []):
            if u in onnx_of and onnx_of[u]:
                keys.add(piece_of_unit[unit[onnx_of[u][0]]])
            keys |= placed.get(u, set())
        placed[f] = keys
        for k in keys:
            pieces[k].add(f)
    out = [sorted(p, key=lambda n: g.order.get(n, 0)) for p in pieces.values()]
    return sorted(out, key=lambda p: g.order.get(p[0], 0))


def _reach(start: set[str], nxt: Mapping[str, Iterable[str]]) -> set[str]:
    seen = set(start)
    todo = list(start)
    while todo:
        for m in nxt.get(todo.pop(), ()):
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def _topo(edges: dict[str, set[str]]) -> list[str] | None:
    indeg = {v: 0 for v in edges}
    for cs in edges.values():
        for c in cs:
            indeg[c] += 1
    todo = deque(sorted(v for v, d in indeg.items() if d == 0))
    order = []
    while todo:
        v = todo.popleft()
        order.append(v)
        for c in sorted(edges[v]):
            indeg[c] -= 1
            if indeg[c] == 0:
                todo.append(c)
    return order if len(order) == len(edges) else None


def from_sources(start: Any, memo: dict[Any, bool], source: Callable[[Any], bool | None],
                 parents: Callable[[Any], Iterable[Any]]) -> bool:
    """Whether every source value ``start`` is computed from passes: ``source(x)`` says so for a source and is
    None for a computed value, whose ``parents`` are then checked. Iterative (graphs run deep), ``memo``
    shared between calls on one graph (the carve's constant tensors, the traced graph's constant nodes)."""
    todo = [start]
    while todo:
        x = todo[-1]
        if x in memo:
            todo.pop()
            continue
        leaf = source(x)
        if leaf is not None:
            memo[x] = leaf
            todo.pop()
            continue
        pending = [i for i in parents(x) if i not in memo]
        if pending:
            todo += pending
            continue
        memo[x] = all(memo[i] for i in parents(x))
        todo.pop()
    return memo[start]
