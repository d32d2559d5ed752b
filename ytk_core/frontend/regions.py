"""Match selectors to regions of the traced FX graph (sets of FX nodes, one set per site).

A region is a set of ``call_function`` nodes of the decomposed FX graph that torch's ONNX exporter
translated. Matching works on module paths and classes recorded in the FX node metadata, and on
dataflow for ``:around`` growth and the escape hatches.
"""

from __future__ import annotations

import difflib
import fnmatch
import operator
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from .region_rules import FactGraph, branch_sums, convex_parts, from_sources, grow_epilogue, whole_onnx_nodes
from .selectors import Selector

#: Ops an ``:around`` region targets inside a block: attention-style heavy ops. Convolutions are
#: deliberately not here, so a block's convs stay their own (separately pluggable) regions.
ATTENTION_OPS = ("scaled_dot_product_attention", "_scaled_dot_product_attention_math",
                 "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
                 "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")
HEAVY_OPS = ("matmul", "bmm", "mm", "baddbmm", "addmm", "linear", "_softmax", "softmax", "einsum") + ATTENTION_OPS
# (A heavy op that takes a parameter is a dense layer, never a seed -- except fused attention, whose only
# parameter can be its additive mask (a learned relative-position bias); see around_seeds.)
#: Ops that compute nothing in eval mode (the exporter emits no ONNX node for them).
IDENTITY_OPS = ("clone", "alias", "contiguous", "detach", "dropout", "lift_fresh_copy")
#: Plumbing that returns a tuple (``x.chunk(3)``, ``qkv.unbind(0)``): its elements are its getitems.
TUPLE_PLUMBING_OPS = ("split", "split_with_sizes", "unbind", "chunk")
CONV_OPS = ("conv2d", "convolution", "conv1d", "conv3d", "_convolution")
#: What ``:around`` may absorb around the heavy ops: reformats, slicing, casts, pads and pointwise math.
PLUMBING_OPS = ("view", "reshape", "_unsafe_view", "transpose", "permute", "t.", "slice", "select", "split",
                "split_with_sizes", "unbind", "chunk",
                "unsqueeze", "squeeze", "expand", "clone", "contiguous", "alias", "constant_pad_nd", "pad",
                "_to_copy", "to.", "type_as", "cat", "flatten", "unflatten", "relu", "add", "sub", "mul", "div",
                "neg", "exp", "pow", "sqrt", "rsqrt", "reciprocal", "clamp", "hardtanh", "sigmoid", "tanh", "gelu",
                "silu", "hardswish", "hardsigmoid", "where", "mean", "sum", "amax", "maximum", "minimum",
                "scalar_tensor",
                "full", "ones", "zeros", "getitem", "_native_batch_norm_legit_no_training", "batch_norm")


def op_name(node: Any) -> str:
    t = node.target
    if t is operator.getitem:
        return "getitem"
    s = str(t)
    return s.split("aten.", 1)[1] if "aten." in s else s


def _is(node: Any, names: tuple[str, ...]) -> bool:
    o = op_name(node)
    base = o.split(".")[0]
    return any(base == n.rstrip(".") or (n.endswith(".") and o.startswith(n)) for n in names)


def is_conv(node: Any) -> bool:
    return node.op == "call_function" and _is(node, CONV_OPS)


def is_transposed_conv(node: Any) -> bool:
    """aten.convolution with ``transposed`` set, or an aten.conv_transpose op: its weights are (Cin, Cout/groups,
    k...), and no conv lift rebuilds them."""
    if node.op != "call_function":
        return False
    name = op_name(node).split(".")[0]
    if name.startswith("conv_transpose"):
        return True
    a = list(node.args)
    return name in ("convolution", "_convolution") and len(a) > 6 and a[6] is True


def is_identity(node: Any) -> bool:
    """Computes nothing in eval mode (an eval Dropout's clone): the exporter emits no ONNX value for it."""
    return node.op == "call_function" and _is(node, IDENTITY_OPS)


def is_cat(node: Any) -> bool:
    return node.op == "call_function" and op_name(node).split(".")[0] in ("cat", "concat")


@dataclass
class Site:
    module_path: str
    nodes: list[Any]  # fx.Node, in graph order
    notes: list[str] = field(default_factory=list)


class FxView:
    """Just what the matcher and the region rules read from an ``fx.Node``, rebuilt from fx_nodes.json
    (propose runs the carve's own matcher on it, without torch)."""

    __slots__ = ("name", "op", "target", "meta", "users", "all_input_nodes", "args")

    def __init__(self, name: str, op: str, target: Any, stack: dict[str, tuple[str, str]]) -> None:
        self.name, self.op, self.target = name, op, target
        self.meta = {"nn_module_stack": stack}
        self.users: dict[Any, None] = {}
        self.all_input_nodes: list[Any] = []
        self.args: tuple[Any, ...] = ()


class GraphView:
    """An fx.Graph stand-in over fx_nodes.json: ``GraphIndex(GraphView(fx), weights)``."""

    def __init__(self, fx: Any) -> None:
        views: dict[str, FxView] = {}
        for n in fx.nodes:
            target: Any = operator.getitem if n.target in ("_operator.getitem", "operator.getitem") else n.target
            stack = {f"{i}:{f.path}": (f.path, f.cls) for i, f in enumerate(n.module_stack) if f.path}
            views[n.name] = FxView(n.name, n.op, target, stack)
        for n in fx.nodes:
            v = views[n.name]
            v.args = tuple(views[a] if isinstance(a, str) and a in views else a for a in n.args)
            for a in n.args:
                if isinstance(a, str) and a in views and views[a] not in v.all_input_nodes:
                    v.all_input_nodes.append(views[a])
                    views[a].users[v] = None
        self.nodes = list(views.values())


class GraphIndex:
    """Module ownership and dataflow queries over the decomposed FX graph."""

    def __init__(self, graph: Any, weight_names: set[str] | None = None) -> None:
        self.graph = graph
        self.weights = set(weight_names or ())
        self.nodes = [n for n in graph.nodes]
        self.order = {n: i for i, n in enumerate(self.nodes)}
        self.by_name = {n.name: n for n in self.nodes}
        self.calls = [n for n in self.nodes if n.op == "call_function"]
        self.stacks: dict[Any, list[tuple[str, str]]] = {}
        #: node -> {module path: the key of that frame}: torch.export keys each call of a module apart
        #: ("L__self___fc", "L__self___fc@1"), so a module called twice (shared weights) is two sites
        self.call_keys: dict[Any, dict[str, str]] = {}
        for n in self.calls:
            st = n.meta.get("nn_module_stack") or {}
            frames = []
            keys: dict[str, str] = {}
            for key, (path, cls) in st.items():
                from .fxmap import _clean_path

                cname = cls if isinstance(cls, str) else cls.__name__
                frames.append((_clean_path(path), cname.rsplit(".", 1)[-1]))
                keys[frames[-1][0]] = str(key)
            self.stacks[n] = frames
            self.call_keys[n] = keys
        self._constant: dict[Any, bool] = {}
        self.instances: dict[str, str] = {}
        for frames in self.stacks.values():
            for path, cls in frames:
                self.instances.setdefault(path, cls)

    def weighted(self, n: Any) -> bool:
        """Takes a parameter: a dense layer (GEMM/conv) the engine already runs well, not plumbing."""
        return any(m.op == "placeholder" and m.name in self.weights for m in n.all_input_nodes)

    def constant(self, n: Any) -> bool:
        """Computed from weights and buffers alone (the exporter folds it into an initializer)."""
        def source(m: Any) -> bool | None:
            if m.op == "call_function":
                return None
            return m.op == "get_attr" or (m.op == "placeholder" and m.name in self.weights)

        return from_sources(n, self._constant, source, lambda m: m.all_input_nodes)

    def owned_by(self, path: str) -> list[Any]:
        return [n for n in self.calls if any(p == path for p, _ in self.stacks[n])]

    def calls_of(self, path: str) -> list[list[Any]]:
        """The nodes of module ``path``, one list per call of it, in graph order."""
        by_call: dict[str, list[Any]] = {}
        for n in self.owned_by(path):
            by_call.setdefault(self.call_keys.get(n, {}).get(path, ""), []).append(n)
        return list(by_call.values())

    def classes(self) -> set[str]:
        return set(self.instances.values())


def _glob_ok(path: str, sel: Selector) -> bool:
    inc, exc = sel.includes, sel.excludes
    if inc and not any(fnmatch.fnmatchcase(path, g) for g in inc):
        return False
    return not any(fnmatch.fnmatchcase(path, g) for g in exc)


def _refuse_never_called_where(sel: Any, gi: Any) -> None:
    """``Linear@where=*.out_proj``: the modules a literal ``@where`` suffix names may exist and never run (they
    are among no class's instances); :func:`_refuse_never_called` for each such suffix."""
    for inc in sel.includes:
        suf = inc.removeprefix("*.")
        if suf and not any(ch in suf for ch in "*?["):
            _refuse_never_called(sel.text, suf, gi)


def _refuse_never_called(text: str, suf: str, gi: Any) -> None:
    """Refuse a selector naming a module that holds weights of the graph but never ran (its parent read them
    itself: nn.MultiheadAttention calls F.linear with out_proj.weight), saying so; return otherwise."""
    if any(p == suf or p.endswith("." + suf) for p in gi.instances):
        return  # such a module ran: the selector misses it for another reason (its class), said by the caller
    flat = "_" + suf.replace(".", "_") + "_"
    held = sorted(w for w in gi.weights if flat in w)
    if held:
        raise UsageError(f"selector {text!r}: a module ending in {suf!r} holds weights of the graph "
                         f"({', '.join(held[:2])}) but is never called: its parent uses them directly "
                         "(nn.MultiheadAttention calls F.linear with out_proj.weight). Select the parent, "
                         "or the op by its FX node name (fx_nodes.json lists them).")


def _closest(word: str, pool: list[str], n: int = 5) -> str:
    pool = [p for p in pool if p]  # the root module's path is empty: no selector can name it by path
    close = difflib.get_close_matches(word, pool, n=n, cutoff=0.4)
    if close:
        return ", ".join(close)
    # nothing alike: say so, rather than offer the alphabet's first names as if they were near
    names = sorted(set(pool))
    more = f", ... ({len(names)} in all)" if len(names) > n else ""
    return f"none like {word!r}; there are {', '.join(names[:n])}{more}" if names else "none"


def match_sites(sel: Selector, gi: GraphIndex) -> list[Site]:
    """All sites of ``sel`` (outermost instances only), or a UsageError listing the closest names."""
    if sel.kind == "class" and sel.ops_name not in gi.classes() and sel.ops_name in gi.by_name:
        return [Site(module_path="", nodes=[gi.by_name[sel.ops_name]])]
    if sel.kind in ("class", "mod"):
        if sel.kind == "class":
            paths = [p for p, c in gi.instances.items() if c == sel.ops_name]
            if not paths and not sel.ops_name[:1].isupper():
                # a bare lower-case word is an fx node (conv2d_3, relu) far more often than a class
                raise UsageError(f"selector {sel.text!r}: no fx node named {sel.ops_name!r} (see fx_nodes.json), "
                                 "and no module class of that name. Closest fx nodes: "
                                 f"{_closest(sel.ops_name, [n.name for n in gi.calls])}.")
            if not paths:
                _refuse_never_called_where(sel, gi)
                raise UsageError(f"selector {sel.text!r}: no module of class {sel.ops_name!r} in the traced model. "
                                 f"Closest classes: {_closest(sel.ops_name, sorted(gi.classes()))}.")
            scoped = [p for p in paths if _glob_ok(p, sel)]
            if not scoped:
                _refuse_never_called_where(sel, gi)
                raise UsageError(f"selector {sel.text!r}: {len(paths)} {sel.ops_name} module(s) exist but none matches "
                                 f"@where={','.join(sel.where)}. Closest paths: "
                                 f"{_closest(sel.includes[0] if sel.includes else '', paths)}.")
        else:
            suf = sel.mod_suffix
            scoped = [p for p in gi.instances if p == suf or p.endswith("." + suf)]
            if not scoped:
                _refuse_never_called(sel.text, suf, gi)
                raise UsageError(f"selector {sel.text!r}: no module path ends with {suf!r}. Closest paths: "
                                 f"{_closest(suf, list(gi.instances))}.")
        # Keep only outermost instances: a class nested in itself is one site.
        scoped = [p for p in scoped if not any(p != q and p.startswith(q + ".") for q in scoped)]
        sites = []
        for p in sorted(scoped, key=lambda q: min((gi.order[n] for n in gi.owned_by(q)), default=0)):
            for nodes in gi.calls_of(p):  # a module called twice is two sites (one program: its weights)
                if sel.around:
                    nodes = grow_around(nodes, gi, nojoin=sel.nojoin, where=p)
                sites.append(Site(module_path=p, nodes=sorted(nodes, key=gi.order.get)))
        if not sites:
            raise UsageError(f"selector {sel.text!r}: the matched modules contain no traced operations")
        return sites
    if sel.kind == "call":
        want = _aten_names(sel.call_target)
        hits = [n for n in gi.calls if op_name(n).split(".")[0] in want and
                (not sel.where or _glob_ok(gi.stacks[n][-1][0] if gi.stacks[n] else "", sel))]
        if not hits:
            ops = sorted({op_name(n).split(".")[0] for n in gi.calls})
            near = [o for o in ops if any(w.lstrip("_").split("_")[0].lower() in o for w in want)]
            leaf = sel.call_target.rsplit(".", 1)[-1]
            as_class = (f" ({leaf} names a module class: select it as {leaf}, without call:)"
                        if leaf[:1].isupper() and leaf in gi.classes() else "")
            raise UsageError(f"selector {sel.text!r}: no call of {sel.call_target} ("
                             f"{' or '.join('aten.' + w for w in want)}) in the traced graph"
                             f"{_LOWERED_HINT.get(want[0], '')}{as_class}. Closest ops: "
                             f"{', '.join(near[:5]) if near else _closest(want[0].lower(), ops)}.")
        return [Site(module_path=gi.stacks[n][-1][0] if gi.stacks[n] else "", nodes=[n]) for n in hits]
    names = list(sel.span) if sel.kind == "span" else list(sel.nodes)
    missing = [x for x in names if x not in gi.by_name]
    if missing:
        raise UsageError(f"selector {sel.text!r}: no fx node named {missing[0]!r} (see fx_nodes.json). Closest: "
                         f"{_closest(missing[0], [n.name for n in gi.calls])}.")
    if sel.kind == "nodes":
        nodes = [gi.by_name[x] for x in names]
    else:
        a, b = (gi.by_name[x] for x in names)
        nodes = span_nodes(a, b, gi)
        if not nodes:
            raise UsageError(f"selector {sel.text!r}: {b.name} is not downstream of {a.name}; a span A...B needs a "
                             "dataflow path from A to B")
    bad = [n.name for n in nodes if n.op != "call_function"]
    if bad:
        raise UsageError(f"selector {sel.text!r}: {bad[0]} is a graph input or weight, not an operation")
    owner = gi.stacks[nodes[0]][-1][0] if gi.stacks.get(nodes[0]) else ""
    return [Site(module_path=owner, nodes=sorted(nodes, key=gi.order.get))]


#: torch functions whose calls the exported graph holds under other (or more) aten names than their own
_ATEN_ALIASES: dict[str, tuple[str, ...]] = {
    "interpolate": ("upsample_nearest2d", "upsample_bilinear2d", "upsample_bicubic2d", "upsample_nearest1d",
                    "upsample_linear1d", "upsample_nearest3d", "upsample_trilinear3d", "_upsample_bilinear2d_aa",
                    "_upsample_bicubic2d_aa", "_upsample_nearest_exact2d"),
    "upsample": ("upsample_nearest2d", "upsample_bilinear2d", "upsample_bicubic2d"),
    "relu6": ("relu6", "hardtanh"),
    "adaptive_avg_pool1d": ("adaptive_avg_pool1d", "_adaptive_avg_pool1d"),
    "adaptive_avg_pool2d": ("adaptive_avg_pool2d", "_adaptive_avg_pool2d"),
    "adaptive_avg_pool3d": ("adaptive_avg_pool3d", "_adaptive_avg_pool3d"),
    "max_pool2d": ("max_pool2d", "max_pool2d_with_indices"),
    "layer_norm": ("layer_norm", "native_layer_norm"),
    "group_norm": ("group_norm", "native_group_norm"),
    "batch_norm": ("batch_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit"),
    "softmax": ("softmax", "_softmax"),
    "pad": ("pad", "constant_pad_nd", "reflection_pad2d", "replication_pad2d"),
    "scaled_dot_product_attention": ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                                     "_scaled_dot_product_efficient_attention", "_scaled_dot_product_attention_math"),
}
_LOWERED_HINT = {k: " (with an output size of 1 torch.export writes it as aten.mean: select call:torch.mean)"
                 for k in ("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d")}


def _aten_name(dotted: str) -> str:
    last = dotted.split(".")
    # aten.matmul.default -> matmul ; torch.nn.functional.relu -> relu ; torch.matmul -> matmul
    if last[0] == "aten" and len(last) >= 2:
        return last[1]
    if last[-1] in ("default", "Tensor", "int", "vec") and len(last) >= 2:
        return last[-2]
    return last[-1]


def _aten_names(dotted: str) -> tuple[str, ...]:
    """The aten op names a call of ``dotted`` appears as in the exported graph (an aten name as given: itself)."""
    name = _aten_name(dotted)
    if "aten" in dotted.split("."):
        return (name,)
    return _ATEN_ALIASES.get(name, (name,))


def span_nodes(a: Any, b: Any, gi: GraphIndex) -> list[Any]:
    down = _reach(a, lambda n: n.users)
    up = _reach(b, lambda n: n.all_input_nodes)
    return [n for n in gi.calls if n in down and n in up]


def _reach(start: Any, nxt: Any) -> set[Any]:
    seen = {start}
    q = deque([start])
    while q:
        for m in nxt(q.popleft()):
            if m not in seen:
                seen.add(m)
                q.append(m)
    return seen


def around_seeds(nodes: list[Any], gi: GraphIndex) -> list[Any]:
    """What an ``:around`` region grows from: activation-by-activation products (attention) and
    softmax; weighted GEMMs and convs are the block's projections and stay outside, like the spec's
    LiteMLA region. A block without them grows from its convs."""
    seeds = [n for n in nodes if _is(n, HEAVY_OPS) and (not gi.weighted(n) or _is(n, ATTENTION_OPS))]
    return seeds or [n for n in nodes if is_conv(n)]


def _kept_out(m: Any, seeds: list[Any], nojoin: bool) -> bool:
    """An op an ``:around`` region never takes: a conv, a heavy op it did not grow from (a weighted
    GEMM), and with ``@nojoin`` the joining concat."""
    return is_conv(m) or (_is(m, HEAVY_OPS) and m not in seeds) or (nojoin and is_cat(m))


def grow_around(nodes: list[Any], gi: GraphIndex, nojoin: bool, where: str) -> list[Any]:
    """Seed at the heavy ops of a block, then absorb the plumbing around them (within the block),
    then close it over the block's own ops that lie between two of its nodes (see _close).

    A child module that holds a conv or a weighted GEMM (and no seed) is a region of its own: growth
    does not enter it, so its BatchNorm or activation never ends up claimed by two regions."""
    seeds = around_seeds(nodes, gi)
    inside = set(nodes) - _weighted_children(nodes, gi, seeds, where)
    if not seeds:
        raise UsageError(f":around on {where}: the block has nothing :around grows from -- no product of two "
                         "activations (attention's Q.K or attn.V), no softmax, no conv; its GEMMs, if any, multiply by "
                         "weights (Linear projections), which an :around region leaves outside. Select the block bare, "
                         "or a span of its fx nodes (A...B), instead")
    region = set(seeds)
    q = deque(seeds)
    while q:
        n = q.popleft()
        for m in list(n.all_input_nodes) + list(n.users):
            if m in region or m not in inside or m.op != "call_function":
                continue
            if m in n.all_input_nodes and gi.constant(m):
                # A constant the block computes from its buffers (Swin's relative-position bias: a
                # gather from its table) has no ONNX tensor to cut at -- the exporter folded it into an
                # initializer the region reads -- so the region computes it from the baked weights.
                region.add(m)
                q.append(m)
                continue
            if _kept_out(m, seeds, nojoin) or not _is(m, PLUMBING_OPS):
                continue
            if m.target is operator.getitem and m.args[0] not in region and not _is(m.args[0], TUPLE_PLUMBING_OPS):
                # A tuple element joins only with the op that produced the tuple (a BatchNorm's
                # statistics stay with it) -- unless that op is plumbing the region takes next: q, k
                # and v chunked out of one qkv tensor lead back to the chunk and the qkv reshape.
                continue
            region.add(m)
            q.append(m)
    return list(_drop_trailing_identities(_close(region, inside, seeds, nojoin)))


def _weighted_children(nodes: list[Any], gi: GraphIndex, seeds: list[Any], where: str) -> set[Any]:
    """The nodes of the block's child modules that hold a conv or weighted GEMM but no seed."""
    if any(is_conv(n) for n in seeds):
        return set()  # a block of convs grows from them

    def below(n: Any) -> list[str]:
        paths = [p for p, _ in gi.stacks.get(n, [])]
        return paths[paths.index(where) + 1:] if where in paths else []

    heavy = {p for n in nodes if is_conv(n) or (_is(n, HEAVY_OPS) and n not in seeds) for p in below(n)}
    heavy -= {p for n in seeds for p in below(n)}
    return {n for n in nodes if heavy & set(below(n))}


def _close(region: set[Any], inside: set[Any], seeds: list[Any], nojoin: bool) -> set[Any]:
    """The region plus every op of the block on a path from one of its nodes to another that no
    kept-out op interrupts. Growth takes plumbing only, but a path that leaves the region and comes
    back makes it non-convex -- no single node could replace it -- whatever the op on that path is
    (EdgeNeXt's F.normalize: a vector norm and a clamp between q and the division that joins them).
    A path through a kept-out op (a conv between two attention products) is left as it is; the
    region is then cut into convex parts (``@part``)."""

    def ok(m: Any) -> bool:
        return m in inside and m.op == "call_function" and not _kept_out(m, seeds, nojoin)

    down = _reach_within(region, lambda n: n.users, ok)
    up = _reach_within(region, lambda n: n.all_input_nodes, ok)
    return region | (down & up)


def _reach_within(start: set[Any], nxt: Any, ok: Any) -> set[Any]:
    """The nodes reached from ``start`` through nodes that pass ``ok`` (``start`` itself excluded)."""
    seen: set[Any] = set()
    todo = list(start)
    while todo:
        for m in nxt(todo.pop()):
            if m not in seen and m not in start and ok(m):
                seen.add(m)
                todo.append(m)
    return seen


def _drop_trailing_identities(region: set[Any]) -> set[Any]:
    """Growth stops at the projection after the attention, but it has taken that projection's eval
    Dropout (a clone) on the way. An identity is no ONNX value of its own (the exporter files it under
    its consumer), so as the region's output it has no tensor to cut at; its input is the same value."""
    region = set(region)
    trailing = [n for n in region if is_identity(n) and n.users and
                all(u not in region and u.op != "output" for u in n.users)]
    while trailing:
        region -= set(trailing)
        trailing = [m for n in trailing for m in n.all_input_nodes if m in region and is_identity(m) and
                    all(u not in region and u.op != "output" for u in m.users)]
    return region


def region_nodes(sel: Selector, site: Site, facts: FactGraph, gi: GraphIndex | None = None,
                 succ: Any = None) -> list[str]:
    """The FX node names a site's region holds once widened to whole ONNX nodes (and, with
    ``@epilogue``, its pointwise epilogue); with ``@part=K``, the K-th of its convex parts that
    holds an op the region grew from (:func:`around_parts`). The rule propose applies too (see
    region_rules); ``gi`` and ``succ`` (each ONNX node's consumers) are needed for ``@part`` only."""
    names = [n.name for n in site.nodes]
    if sel.branches:
        sums = branch_sums(names, facts)
        if len(sums) != 1:
            where = site.module_path or sel.text
            raise UsageError(f"selector {sel.text!r}: {where} holds {len(sums) or 'no'} branch sum"
                             f"{'' if len(sums) == 1 else 's'} (parallel convs of one input, added); @branches takes "
                             "a module that holds exactly one")
        names = list(sums[0].members)
    grown = grow_epilogue(names, facts) if sel.epilogue else whole_onnx_nodes(names, facts)
    out = sorted(grown, key=facts.order.get)
    if sel.part is None:
        return out
    where = site.module_path or sel.text
    parts = around_parts(out, gi, facts, succ) if gi is not None and succ is not None else None
    if parts is None:
        raise UsageError(f"selector {sel.text!r}: region {where} cannot be cut into convex parts (an outside path "
                         "leaves one of its ONNX nodes and comes back into the same node's FX op)")
    if sel.part >= len(parts):
        have = f"{len(parts)} part(s) holding an attention op (@part=0..{len(parts) - 1})" if parts else \
            "no part holding an attention op"
        raise UsageError(f"selector {sel.text!r}: region {where} has {have}; @part={sel.part} names none")
    return parts[sel.part]


def around_parts(names: list[str], gi: GraphIndex, facts: FactGraph, succ: Any) -> list[list[str]] | None:
    """An ``:around`` region cut into convex parts (region_rules.convex_parts), keeping those that hold
    an op the region grew from (an attention product, a softmax): what ``@part=0``, ``@part=1``... name,
    in graph order. None when no cut exists."""
    parts = convex_parts(names, facts, succ)
    if parts is None:
        return None
    seeds = {n.name for n in around_seeds([gi.by_name[x] for x in names if x in gi.by_name], gi)}
    return [p for p in parts if seeds & set(p)]
