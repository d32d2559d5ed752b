"""``--plugin <selector>``: attribute the measured cost onto a carve you already ship.

Sites are matched exactly as the carve matches them: the carve's own matcher runs over a light
stand-in for the FX graph rebuilt from fx_nodes.json, so a selector selects the same module
instances here as in ``prepare --plugin``. A selector whose plugin is already in the engine
reports that plugin's measured time instead.
"""

from __future__ import annotations

from ytk_hookspecs.models import FxNodesFile

from ..errors import UsageError
from ..frontend.region_rules import FactGraph
from ..frontend.regions import GraphIndex, GraphView, match_sites, region_nodes
from ..frontend.selectors import parse_selector
from .attribution import Attribution
from .models import NotWorthRow, Proposal, SiteTime
from .modules import ModuleIndex
from .onnx_graph import OnnxGraph


#: The carve's matcher over a stand-in for the FX graph (kept under its old name for callers).
_GraphView = GraphView


def given_tables(selectors: list[str], fx: FxNodesFile, mods: ModuleIndex, att: Attribution,
                 plugged: list[Proposal], graph: OnnxGraph | None = None) -> tuple[list[Proposal], list[NotWorthRow],
                                                                                list[str]]:
    """(exactly the given plugins, the accounting rows, warnings). ``graph``: the ONNX graph, which
    an ``@part=K`` selector needs to find its part."""
    warnings: list[str] = []
    gi = facts = None
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
        if gi is None or facts is None:
            facts = FactGraph.from_fx_nodes(fx)
            gi = GraphIndex(GraphView(fx), facts.weights)
        sites: list[SiteTime] = []
        for site in match_sites(sel, gi):
            if sel.part is not None:  # the part the carve takes, by the carve's rule
                names = region_nodes(sel, site, facts, gi, graph.successors() if graph is not None else None)
                site.nodes = [gi.by_name[x] for x in names]
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
