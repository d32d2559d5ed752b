"""Regions already replaced by a plugin: recognised through plugins.json and the custom-op nodes.

Their measured time is the bar a better kernel has to beat ("re-optimize: X ms/site to beat"),
and ``kernelgen_input`` names the ``.pt2`` to re-run kernel generation against.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ytk_hookspecs.models import ArtifactError, CandidatesFile, PluginEntry, PluginsFile

from ..errors import UsageError
from .attribution import Attribution
from .models import Proposal, SiteTime
from .onnx_graph import OnnxGraph

PLUGINS_JSON = "plugins.json"
CANDIDATES_JSON = "candidates.json"


@dataclass
class PluginCarve:
    """plugins.json (and candidates.json when present) read back, with where it lives."""

    path: Path
    plugins: PluginsFile
    site_paths: dict[str, str]  # plugin ONNX node -> module path of the site

    def entry_for(self, node_name: str, op_type: str) -> PluginEntry | None:
        for e in self.plugins.plugins:
            if node_name in e.site_nodes:
                return e
        return next((e for e in self.plugins.plugins if e.op_type == op_type or e.name == op_type), None)


def load_carve(onnx: Path, plugins: Path | None) -> PluginCarve | None:
    """``--plugins`` if given (must exist), else plugins.json beside the ONNX if present."""
    p = Path(plugins) if plugins is not None else Path(onnx).parent / PLUGINS_JSON
    if not p.is_file():
        if plugins is not None:
            raise UsageError(f"{p}: plugins.json not found (--plugins); it is written by "
                             "`ytk embedded prepare --plugin ...` beside the carved ONNX")
        return None
    try:
        pf = PluginsFile.read(p)
    except ArtifactError as e:
        raise UsageError(str(e)) from None
    site_paths: dict[str, str] = {}
    cand = p.parent / CANDIDATES_JSON
    if cand.is_file():
        try:
            for c in CandidatesFile.read(cand).candidates:
                for s in c.sites:
                    site_paths[s.onnx_node] = s.module_path
        except ArtifactError:
            pass  # candidates.json only improves the site labels
    return PluginCarve(path=p, plugins=pf, site_paths=site_paths)


def plugin_nodes(graph: OnnxGraph, carve: PluginCarve | None) -> set[str]:
    nodes = {n.name for n in graph.nodes if graph.is_plugin(n)}
    if carve is not None:
        nodes |= {s for e in carve.plugins.plugins for s in e.site_nodes if s in graph.by_name}
    return nodes


def _display(p: Path) -> str:
    try:
        return os.path.relpath(p)
    except ValueError:
        return str(p)


def plugged_proposals(graph: OnnxGraph, carve: PluginCarve | None, nodes: set[str],
                      att: Attribution) -> list[Proposal]:
    """One already-plugged row per plugin, with per-site measured times."""
    rows: dict[str, Proposal] = {}
    for n in sorted(nodes, key=lambda x: graph.by_name[x].index):
        node = graph.by_name[n]
        entry = carve.entry_for(n, node.op_type) if carve else None
        name = entry.name if entry else node.op_type
        path = (carve.site_paths.get(n) if carve else None) or n
        site = SiteTime(module_path=path, ms=att.node_ms.get(n, 0.0), onnx_nodes=[n],
                        layers=sorted(set(att.node_layers.get(n, []))))
        if name not in rows:
            kgi = None
            if entry is not None and entry.kernelgen_input and carve is not None:
                kgi = _display(carve.path.parent / entry.kernelgen_input)
            rows[name] = Proposal(name=name, namespace=entry.namespace if entry else str(node.attrs.get(
                "plugin_namespace", "")), label=f"{name} (already plugged)", selector=entry.selector if entry else "",
                kind="plugin", sites=[], ms=0.0, ms_per_site=[], already_plugged=True, kernelgen_input=kgi)
        row = rows[name]
        row.sites.append(site)
        row.ms_per_site.append(site.ms)
        row.ms += site.ms
    return sorted(rows.values(), key=lambda p: p.name)
