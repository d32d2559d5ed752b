"""The --verbose tables: time per torch class, and per module down to --depth (both inclusive)."""

from __future__ import annotations

from collections import defaultdict

from .attribution import Attribution
from .models import ClassRow, ModuleRow
from .modules import ModuleIndex
from .regions import CONTAINERS


def class_table(mods: ModuleIndex, att: Attribution) -> list[ClassRow]:
    """Inclusive time per torch class: a node counts once for every class on its module stack."""
    ms: dict[str, float] = defaultdict(float)
    inst: dict[str, set[str]] = defaultdict(set)
    for n, t in att.node_ms.items():
        st = mods.owner.get(n)
        if not st:
            continue
        for cls in {c for _, c in st}:
            ms[cls] += t
        for p, c in st:
            inst[c].add(p)
    total = att.total_ms or 1.0
    # The root holds everything and containers only group: neither says where time goes.
    skip = {mods.root_cls} | CONTAINERS
    rows = [ClassRow(cls=c, instances=len(inst[c]), ms=v, share=v / total) for c, v in ms.items() if c not in skip]
    return sorted(rows, key=lambda r: (-r.ms, r.cls))


def module_table(mods: ModuleIndex, att: Attribution, depth: int) -> list[ModuleRow]:
    """Inclusive time per module down to ``depth`` levels below the root, in model order."""
    ms: dict[str, float] = defaultdict(float)
    first: dict[str, int] = {}
    for i, (n, t) in enumerate(att.node_ms.items()):
        for p, _ in mods.owner.get(n, ()):
            ms[p] += t
            first.setdefault(p, i)
    total = att.total_ms or 1.0
    rows = []
    for p in sorted(ms, key=lambda q: (first[q], q)):
        d = mods.depth(p)
        if d <= depth:
            rows.append(ModuleRow(path=p or "(model)", cls=mods.cls_of.get(p, "?"), depth=d, ms=ms[p],
                                  share=ms[p] / total))
    return _tree_order(rows)


def _tree_order(rows: list[ModuleRow]) -> list[ModuleRow]:
    """Parents before children, siblings in model order."""
    out: list[ModuleRow] = []
    children: dict[str, list[ModuleRow]] = defaultdict(list)
    paths = {r.path for r in rows}
    roots = []
    for r in rows:
        par = _parent_in(r.path, paths)
        (children[par].append(r) if par is not None else roots.append(r))

    def walk(r: ModuleRow) -> None:
        out.append(r)
        for c in children.get(r.path, []):
            walk(c)

    for r in roots:
        walk(r)
    return out


def _parent_in(path: str, paths: set[str]) -> str | None:
    if path == "(model)":
        return None
    p = path
    while "." in p:
        p = p.rsplit(".", 1)[0]
        if p in paths:
            return p
    return "(model)" if "(model)" in paths else None
