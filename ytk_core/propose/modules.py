"""ONNX node -> owning torch module, from fx_nodes.json.

An ONNX node can stand for several FX nodes (the exporter folds a BatchNorm into its conv, and
tuple getitems inherit the node that computes them); its owner is then the deepest module that
holds all of them (the ``ConvNormAct`` around a folded ``conv`` + ``norm``).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ytk_hookspecs.models import ArtifactError, FxNode, FxNodesFile, ModuleFrame

from ..errors import UsageError

Stack = tuple[tuple[str, str], ...]  # ((path, cls), ...) from the root to the owner


def load_fx_nodes(path: str | Path) -> FxNodesFile:
    try:
        return FxNodesFile.read(path)
    except ArtifactError as e:
        raise UsageError(f"{e}. Pass the fx_nodes.json prepare wrote beside the ONNX (--fx-nodes).") from None


def _stack(n: FxNode, root_cls: str) -> Stack:
    frames = [(f.path, f.cls) for f in n.module_stack]
    if not frames or frames[0][0] != "":
        frames.insert(0, ("", root_cls))
    return tuple(frames)


def _common(a: Stack, b: Stack) -> Stack:
    k = 0
    while k < min(len(a), len(b)) and a[k][0] == b[k][0]:
        k += 1
    return a[:k]


class ModuleIndex:
    """Ownership of ONNX nodes by torch modules, and the module tree they imply."""

    def __init__(self, fx: FxNodesFile, present: set[str] | None = None) -> None:
        """``present``: the ONNX graph's node names. A carved ONNX lost the nodes its plugins replaced,
        while fx_nodes.json (traced before the carve) still names them; those are left out."""
        self.fx = fx
        root_cls = next((f.cls for n in fx.nodes for f in n.module_stack if f.path == ""), None) or "Model"
        self.root_cls = root_cls
        self.fx_by_name: dict[str, FxNode] = {n.name: n for n in fx.nodes}
        self.owner: dict[str, Stack] = {}
        self.fx_of: dict[str, list[str]] = defaultdict(list)
        self.cls_of: dict[str, str] = {"": root_cls}
        for n in fx.nodes:
            st = _stack(n, root_cls)
            for p, c in st:
                self.cls_of.setdefault(p, c)
            for o in n.onnx_nodes:
                if present is not None and o not in present:
                    continue
                self.fx_of[o].append(n.name)
                self.owner[o] = _common(self.owner[o], st) if o in self.owner else st
        self.nodes_of: dict[str, list[str]] = defaultdict(list)
        for o, st in self.owner.items():
            for p, _ in st:
                self.nodes_of[p].append(o)
        self.children: dict[str, list[str]] = defaultdict(list)
        for p in self.cls_of:
            if p:
                self.children[self.parent(p)].append(p)

    # -- tree ----------------------------------------------------------------------------------
    def parent(self, path: str) -> str:
        """The enclosing module (module paths are dotted qualified names; the root is "")."""
        # Walk up through the known modules so paths like "aggreg.0.0" resolve to "aggreg.0".
        p = path
        while "." in p:
            p = p.rsplit(".", 1)[0]
            if p in self.cls_of:
                return p
        return ""

    def depth(self, path: str) -> int:
        d = 0
        p = path
        while p:
            p = self.parent(p)
            d += 1
        return d

    def instances(self, cls: str) -> list[str]:
        """Every module path of class ``cls`` (the universe a ``Class@where=`` selector matches in)."""
        return sorted(p for p, c in self.cls_of.items() if c == cls)

    def owner_path(self, onnx_node: str) -> str | None:
        st = self.owner.get(onnx_node)
        return st[-1][0] if st else None

    def owner_frames(self, onnx_node: str) -> list[ModuleFrame]:
        return [ModuleFrame(path=p, cls=c) for p, c in self.owner.get(onnx_node, ())]

    def is_within(self, onnx_node: str, path: str) -> bool:
        st = self.owner.get(onnx_node)
        return bool(st) and any(p == path for p, _ in st)
