"""The engine's raw layer dump, in the shape of ``trtexec --exportLayerInfo`` (detailed).

``{"Layers": [{"Name", "LayerType", "Inputs", "Outputs", "Metadata", ...}], "Bindings": [...]}``
so that any reader written for TensorRT's file reads ours; ``Metadata`` carries the ONNX node(s)
of each layer the way TensorRT 10 does (``[ONNX Layer: name]``, several joined by ``\\x1e``).
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import Field

from ytk_hookspecs.models import Versioned

from .plan import DTYPES
from .program import Program

_FMT = {"float16": "FP16", "float32": "FP32", "int64": "Int64", "int32": "Int32", "int8": "Int8", "bool": "Bool",
        "uint8": "UInt8", "bfloat16": "BF16", "float64": "FP64", "int16": "Int16"}


class LayerInfoFile(Versioned):
    """``layer_info.json`` of a torch engine."""

    Layers: list[dict[str, Any]]
    Bindings: list[str]
    Engine: dict[str, Any] = Field(default_factory=dict)


def build_layer_info(program: Program) -> LayerInfoFile:
    plan = program.plan
    engine_float = "float16" if plan.precision == "fp16" else "float32"

    def tensor(name: str, binding: bool = False) -> dict[str, Any]:
        v = plan.values.get(name)
        io = next((t for t in plan.inputs + plan.outputs if t.name == name), None)
        v = v or io
        dims = list(v.shape) if v else []
        dt = v.dtype if v else "float32"
        if not binding and DTYPES[dt].is_floating_point:
            dt = engine_float
        return {"Name": name, "Dimensions": dims, "Format/Datatype": _FMT.get(dt, dt)}

    plugin_fmt: dict[str, list[list[str]]] = {}
    for b in plan.plugins:
        meta = yaml.safe_load(b.meta_yaml) or {}
        plugin_fmt[b.name] = [[f"{_FMT.get(c['dtype'], c['dtype'])} {c.get('format', 'kLINEAR')}"
                               for c in meta.get(k, [])] for k in ("inputs", "outputs")]
    layers = []
    for s in program.steps:
        if s.type == "Reformat":
            is_in = s.name.startswith("Reformatting CopyNode for Input")
            src, dst = tensor(s.inputs[0], binding=is_in), tensor(s.outputs[0], binding=not is_in)
            layers.append({"Name": s.name, "LayerType": "Reformat", "Inputs": [src], "Outputs": [dst],
                           "Metadata": ""})
            continue
        # Weights are not layer inputs in TensorRT's dump, except a plugin's (they are real inputs).
        ins = [tensor(n) for n in s.inputs if n in plan.values and (s.type == "PluginV2" or n not in plan.const_use)]
        outs = [tensor(n) for n in s.outputs]
        entry: dict[str, Any] = {"Name": s.name, "LayerType": s.type, "Inputs": ins, "Outputs": outs,
                                 "Metadata": s.metadata, "OnnxNodes": list(s.onnx_nodes)}
        if s.type == "PluginV2":
            layer = next(ly for ly in plan.layers if ly.name == s.name)
            entry["PluginType"] = layer.node["op_type"]
            fmts = plugin_fmt.get(layer.node["op_type"])
            if fmts:
                for t, f in zip(ins, fmts[0]):
                    t["Format/Datatype"] = f
                for t, f in zip(outs, fmts[1]):
                    t["Format/Datatype"] = f
        layers.append(entry)
    bindings = [t.name for t in plan.inputs] + [t.name for t in plan.outputs]
    return LayerInfoFile(Layers=layers, Bindings=bindings,
                         Engine={"backend": "torch", "precision": plan.precision, "torch": plan.torch_version,
                                 **plan.stats})
