"""The engine file: a folded graph plus its weights, reloadable without the ONNX.

On disk it is one ``torch.save`` archive (read back with ``weights_only=True``, so loading an
engine never runs pickled code) holding the :class:`EnginePlan` header as JSON and the constants.
Weights are stored in the engine's precision (fp16 for an fp16 engine); constants read as shapes,
axes or scales, and a plugin's lifted weights (cast to the plugin's declared dtype when the program
is built), stay exact.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import Versioned, write_bytes_atomic

from .folding import FoldedGraph
from .ops import to_compute
from .plugin_nodes import PluginBinding

FORMAT = "ytk-torch-plan"
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
               torch.float64: "float64", torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
               torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool"}
DTYPES = {v: k for k, v in DTYPE_NAMES.items()}


class PlanTensor(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    shape: list[int]
    dtype: str


class PlanLayer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    type: str
    kind: Literal["op", "plugin"]
    onnx_nodes: list[str]
    node: dict[str, Any]


class EnginePlan(Versioned):
    """The header of a torch engine file."""

    format: Literal["ytk-torch-plan"] = FORMAT
    precision: Literal["fp16", "fp32"]
    opset: int
    onnx_sha256: str
    torch_version: str
    inputs: list[PlanTensor]
    outputs: list[PlanTensor]
    layers: list[PlanLayer]
    values: dict[str, PlanTensor] = Field(description="shape and dtype of every runtime tensor")
    const_use: dict[str, list[str]]
    plugins: list[PluginBinding] = Field(default_factory=list)
    stats: dict[str, int] = Field(default_factory=dict)

    @property
    def float_dtype(self) -> torch.dtype:
        return torch.float16 if self.precision == "fp16" else torch.float32


def _plain_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, torch.Tensor):
            out[k] = {"__tensor__": v.tolist(), "dtype": DTYPE_NAMES[v.dtype]}
        else:
            out[k] = v
    return out


def restore_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        if isinstance(v, dict) and "__tensor__" in v:
            out[k] = torch.tensor(v["__tensor__"], dtype=DTYPES[v["dtype"]])
        else:
            out[k] = v
    return out


def make_plan(fg: FoldedGraph, precision: str, onnx_sha256: str,
              bindings: dict[str, PluginBinding]) -> tuple[EnginePlan, dict[str, torch.Tensor]]:
    """The plan header and the constants as stored (weights and data in the engine's precision)."""
    fdt = torch.float16 if precision == "fp16" else torch.float32
    stored: dict[str, torch.Tensor] = {}
    for name, t in fg.constants.items():
        exact = "param" in fg.const_use.get(name, set())
        stored[name] = t if exact else to_compute(t, fdt).contiguous()
    layers = []
    for layer in fg.layers:
        nd = layer.node.to_dict()
        nd["attrs"] = _plain_attrs(layer.node.attrs)
        layers.append(PlanLayer(name=layer.name, type=layer.type, kind=layer.kind,  # type: ignore[arg-type]
                                onnx_nodes=layer.onnx_nodes, node=nd))
    values = {n: PlanTensor(name=n, shape=s, dtype=DTYPE_NAMES[d]) for n, (s, d) in fg.values.items()}
    for n, t in fg.constants.items():
        values.setdefault(n, PlanTensor(name=n, shape=list(t.shape), dtype=DTYPE_NAMES[t.dtype]))
    outputs = [values[o] if o in values else PlanTensor(name=o, shape=[], dtype="float32") for o in fg.outputs]
    plan = EnginePlan(
        precision=precision, opset=fg.opset, onnx_sha256=onnx_sha256, torch_version=torch.__version__,
        inputs=[PlanTensor(name=n, shape=s, dtype=DTYPE_NAMES[d]) for n, s, d in fg.inputs],
        outputs=outputs, layers=layers, values=values,
        const_use={k: sorted(v) for k, v in fg.const_use.items()},
        plugins=list({b.path: b for b in bindings.values()}.values()), stats=dict(fg.stats))
    return plan, stored


def save_plan(path: Path, plan: EnginePlan, constants: dict[str, torch.Tensor],
              bindings: dict[str, PluginBinding]) -> Path:
    """Write the engine file atomically."""
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "header": plan.model_dump_json(), "constants": constants,
                "bindings": {k: v.model_dump_json() for k, v in bindings.items()}}, buf)
    write_bytes_atomic(Path(path), buf.getvalue())
    return Path(path)


def load_plan(path: Path) -> tuple[EnginePlan, dict[str, torch.Tensor], dict[str, PluginBinding]]:
    """Read an engine file; anything else is a :class:`StageError` naming it."""
    p = Path(path)
    try:
        raw = torch.load(p, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise StageError(f"{p}: engine file not found") from None
    except Exception as e:
        raise StageError(f"{p}: not a torch engine file ({type(e).__name__}: {e})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise StageError(f"{p}: not a torch engine file (no {FORMAT} header)")
    try:
        plan = EnginePlan.model_validate_json(raw["header"])
        bindings = {k: PluginBinding.model_validate_json(v) for k, v in raw["bindings"].items()}
    except Exception as e:
        raise StageError(f"{p}: its engine header is invalid: {e}") from None
    return plan, dict(raw["constants"]), bindings
