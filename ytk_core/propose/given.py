"""``--plugin <selector>``: attribute the measured cost onto a carve you already ship.

Sites are matched exactly as the carve matches them: the carve's own matcher runs over a light
stand-in for the FX graph rebuilt from fx_nodes.json, so a selector selects the same module
instances here as in ``prepare --plugin``. A selector whose plugin is already in the engine
reports that plugin's measured time instead.
"""

from __future__ import annotations

import operator
from typing import Any

from ytk_hookspecs.models import FxNodesFile

from ..errors import UsageError
from .attribution import Attribution
from .models import NotWorthRow, Proposal, SiteTime
from .modules import ModuleIndex


class _FxView:
    """Just what the carve's matcher reads from an ``fx.Node``."""

    __slots__ = ("name", "op", "target", "meta", "users", "all_input_nodes")

    def __init__(self, name: str, op: str, target: Any, stack: dict[str, tuple[str, str]]) -> None:
        self.name, self.op, self.target = name, op, target
        self.meta = {"nn_module_stack": stack}
        self.users: dict[Any, None] = {}
        self.all_input_nodes: list[Any] = []


class _GraphView:
    def __init__(self, fx: FxNodesFile) -> None:
        views: dict[str, _FxView] = {}
        for n in fx.nodes:
            target: Any = operator.getitem if n.target in ("_operator.getitem", "operator.getitem") else n.target
            stack = {f"{i}:{f.path}": (f.path, f.cls) for i, f in enumerate(n.module_stack) if f.path}
            views[n.name] = _FxView(n.name, n.op, target, stack)
        for n in fx.nodes:
            v = views[n.name]
            for a in n.args:
                if a in views:
                    v.all_input_nodes.append(views[a])
                    views[a].users[v] = None
        self.nodes = list(views.values())


def _matcher() -> tuple[Any, Any, Any]:
    try:
        from ..frontend.regions import GraphIndex, match_sites
        from ..frontend.selectors import parse_selector
    except ImportError as e:  # the carve is a separate piece of work; say so rather than guess its semantics
        raise UsageError(f"--plugin needs the carve's selector matcher (ytk_core.frontend.selectors/regions), which "
                         f"this installation lacks ({e})") from None
    return parse_selector, GraphIndex, match_sites


def given_tables(selectors: list[str], fx: FxNodesFile, mods: ModuleIndex, att: Attribution,
                 plugged: list[Proposal]) -> tuple[list[Proposal], list[NotWorthRow], list[str]]:
    """(exactly the given plugins, the accounting rows, warnings)."""
    parse_selector, GraphIndex, match_sites = _matcher()
    warnings: list[str] = []
    gi = None
    claimed: set[str] = set()
    rows: list[Proposal] = []
    by_name = {p.name: p for p in plugged}
    for text in selectors:
        sel = parse_selector(text)
        if sel.name in by_name:
            p = by_name[sel.name].model_copy(update={"selector": text})
            claimed |= {n for s in p.sites for n in s.onnx_nodes}
            rows.append(p)
            continue
        if gi is None:
            gi = GraphIndex(_GraphView(fx))
        sites: list[SiteTime] = []
        for site in match_sites(sel, gi):
            onnx: list[str] = []
            for v in site.nodes:
                for o in mods.fx_by_name[v.name].onnx_nodes if v.name in mods.fx_by_name else []:
                    # An FX node can inherit its consumer's ONNX node; keep only what the site's module owns.
                    if sel.kind in ("class", "mod") and not mods.is_within(o, site.module_path):
                        continue
                    if o in att.node_ms and o not in onnx:
                        onnx.append(o)
            overlap = [o for o in onnx if o in claimed]
            if overlap:
                warnings.append(f"{sel.name}: {len(overlap)} ONNX node(s) of site {site.module_path} are already "
                                "counted by an earlier --plugin; counted once, for the earlier one")
            onnx = [o for o in onnx if o not in claimed]
            claimed |= set(onnx)
            ms = float(sum(att.node_ms[o] for o in onnx))
            layers = sorted({ly for o in onnx for ly in att.node_layers.get(o, [])})
            sites.append(SiteTime(module_path=site.module_path, ms=ms, onnx_nodes=onnx, layers=layers))
        if not any(s.ms > 0 for s in sites):
            warnings.append(f"{sel.name}: its {len(sites)} site(s) carry no measured time in this profile")
        rows.append(Proposal(name=sel.name, namespace=sel.namespace, label=f"{sel.name} ({sel.region_text()})",
                             selector=text, ops_name=sel.ops_name, around=sel.around, kind=f"given:{sel.kind}",
                             sites=sites, ms=sum(s.ms for s in sites), ms_per_site=[s.ms for s in sites]))
    if not selectors:
        raise UsageError("--plugin was given no selector")
    rest = float(sum(ms for n, ms in att.node_ms.items() if n not in claimed))
    outside = NotWorthRow(label="outside the given carve", category="outside_carve", sites=None, ms=rest,
                          reason="attributed time no --plugin selector covers")
    return rows, [outside], warnings
