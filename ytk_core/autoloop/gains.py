"""How much engine time each plugin's layers took (its own layers plus reformats feeding it)."""

from __future__ import annotations

from pathlib import Path

from ytk_hookspecs.models import CandidatesFile

from ..bundle import EngineBundle


def plugin_layer_ms(bundle: EngineBundle, candidates: Path) -> dict[str, float]:
    """Plugin name -> summed median ms of the layers that run its sites (None-free: absent plugins are omitted)."""
    sites: dict[str, str] = {}
    for c in CandidatesFile.read(candidates).candidates:
        for s in c.sites:
            sites[s.onnx_node] = c.name
    out: dict[str, float] = {}
    for layer in bundle.profile.layers:
        names = {layer.name, *layer.onnx_nodes}
        owner = next((sites[n] for n in names if n in sites), None)
        if owner is None and layer.name.startswith("Reformatting"):
            # "Reformatting CopyNode for Input Tensor 0 to <layer>": the reformat exists for that plugin.
            tail = layer.name.rsplit(" to ", 1)[-1]
            owner = next((p for n, p in sites.items() if n == tail or tail.startswith(n)), None)
        if owner is not None:
            out[owner] = out.get(owner, 0.0) + layer.median_ms
    return out
