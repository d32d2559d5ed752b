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

from dataclasses import dataclass
from typing import Any, Iterable

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
            facts.append(NodeFacts(name=n.name, op=n.op, target=str(n.target), inputs=ins,
                                   modules=tuple(f.path for f in n.module_stack), onnx=tuple(n.onnx_nodes)))
        if weights is None:
            weights = [n.name for n in fx.nodes if n.op == "placeholder" and _is_weight_name(n.name)]
        return cls(facts, weights)

    # -- queries ----------------------------------------------------------------------------------
    def calls(self) -> list[NodeFacts]:
        return [n for n in self.nodes.values() if n.op == "call_function"]

    def owned_by(self, path: str) -> list[str]:
        """The call nodes a module (and its children) computes."""
        return [n.name for n in self.calls() if path in n.modules]

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
        return n is None or name in self.weights or n.op == "get_attr"


def whole_onnx_nodes(region: Iterable[str], g: FactGraph) -> set[str]:
    """The region grown until it holds every FX node of every ONNX node it computes.

    An identity (eval dropout, clone, alias) becomes no ONNX node of its own: the exporter files it
    under its consumer's node. So an identity never pulls its consumer in, and one whose consumer
    stays outside is left out (it computes nothing; the value it passes on is its input's).
    """
    out = set(region)
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
        step = _next_epilogue_step(outs[0], out, g)
        if not step:
            return out
        grown = whole_onnx_nodes(out | set(step), g)
        # a getitem that picks a tuple's first value is part of the op that made the tuple
        for name in list(grown):
            for u in g.users.get(name, []):
                if g.nodes[u].base == "getitem" and u not in grown:
                    grown |= whole_onnx_nodes({u}, g)
        if grown <= out:
            return out
        out = grown


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
