"""The simulated engine's raw dumps, in the shapes trtexec writes them.

``--exportLayerInfo`` (``{"Layers": [...], "Bindings": [...]}``) and ``--exportProfile`` (an array
led by ``{"count": N}``, then one record per layer), so that tools parsing real TensorRT output
parse the simulator's too. Every record also says ``"Simulated": true``.
"""

from __future__ import annotations

from typing import Any

from .fusion import Fmt, Layer
from .graph import Graph

_FORMAT_TEXT = {
    ("float32", "kLINEAR"): "Row major linear FP32 format (kLINEAR)",
    ("float16", "kLINEAR"): "Row major linear FP16 format (kLINEAR)",
    ("float16", "kHWC8"): "Channel major FP16 format where channel % 8 == 0 (kHWC8)",
    ("float16", "kCHW32"): "Channel major FP16 format where channel % 32 == 0 (kCHW32)",
    ("int8", "kCHW32"): "Channel major INT8 format where channel % 32 == 0 (kCHW32)",
    ("float32", "kHWC"): "Channel major FP32 format (kHWC)",
    ("float16", "kHWC"): "Channel major FP16 format (kHWC)",
}


def format_text(f: Fmt) -> str:
    return _FORMAT_TEXT.get(f, f"{f[0]} {f[1]}")


def metadata(layer: Layer) -> str:
    """TensorRT 8.6 joins the ONNX layers a fused layer came from with the record separator."""
    return "\x1e".join(f"[ONNX Layer: {n}]" for n in layer.onnx_nodes)


def export_layer_info(layers: list[Layer], g: Graph) -> dict[str, Any]:
    recs = []
    for lay in layers:
        def io(names: list[str], fmts: list[Fmt]) -> list[dict[str, Any]]:
            return [{"Name": n, "Location": "Device", "Dimensions": list(g.tensor(n).shape or ()),
                     "Format/Datatype": format_text(f)} for n, f in zip(names, fmts)]

        rec: dict[str, Any] = {
            "Name": lay.name, "LayerType": lay.trt_type, "Inputs": io(lay.inputs, lay.in_formats),
            "Outputs": io(lay.outputs, lay.out_formats), "TacticName": f"sim_{lay.kind}",
            "TacticValue": "0x0000000000000000", "StreamId": 0, "Metadata": metadata(lay), "Simulated": True,
        }
        if lay.plugin:
            rec["ParameterType"] = "PluginV2"
            rec["PluginName"] = lay.plugin
        recs.append(rec)
    return {"Layers": recs, "Bindings": [*g.inputs, *g.outputs]}


def export_profile(names: list[str], per_iter_ms: list[list[float]], medians: list[float]) -> list[dict[str, Any]]:
    count = len(per_iter_ms)
    totals = [sum(it[i] for it in per_iter_ms) for i in range(len(names))]
    grand = sum(totals) or 1.0
    out: list[dict[str, Any]] = [{"count": count}]
    for i, n in enumerate(names):
        out.append({"name": n, "timeMs": round(totals[i], 6), "averageMs": round(totals[i] / max(1, count), 6),
                    "medianMs": round(medians[i], 6), "percentage": round(100.0 * totals[i] / grand, 4),
                    "simulated": True})
    return out
