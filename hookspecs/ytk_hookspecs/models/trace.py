"""Tracing (step 1): a model.py becomes an ONNX file plus the FX-node map back to torch modules."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .base import Versioned
from .tensors import TensorInfo

__all__ = ["ModuleFrame", "FxNode", "FxNodesFile", "TraceRequest", "TraceResult"]


class ModuleFrame(BaseModel):
    """One level of the nn.Module stack that owns an FX node."""

    model_config = ConfigDict(extra="forbid")

    path: str
    cls: str
    call: int = 0  # which call of the module this is (0: its first; a module called twice is two sites)


class FxNode(BaseModel):
    """One node of the traced FX graph and what it became in the ONNX."""

    model_config = ConfigDict(extra="forbid")

    name: str
    op: str
    target: str
    module_path: str
    module_class: str
    module_stack: list[ModuleFrame] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    inputs: list[TensorInfo] = Field(default_factory=list)
    outputs: list[TensorInfo] = Field(default_factory=list)
    onnx_nodes: list[str] = Field(default_factory=list)


class FxNodesFile(Versioned):
    """``fx_nodes.json``: the traced graph, each node with its owning module and ONNX nodes. Schema 2 added
    each module frame's ``call``."""

    SCHEMA_VERSION: ClassVar[int] = 2

    model: str
    onnx: str
    onnx_sha256: str
    torch_version: str
    nodes: list[FxNode]
    onnx_compute_nodes: int
    onnx_mapped_nodes: int
    unmapped_onnx_nodes: list[str] = Field(default_factory=list)

    @property
    def coverage(self) -> float:
        return self.onnx_mapped_nodes / max(1, self.onnx_compute_nodes)


class TraceRequest(Versioned):
    """What ``ytk embedded prepare`` asks the frontend to produce."""

    model_path: Path
    onnx_out: Path
    npz_out: Path
    reference_out: Path
    opset: int = 18


class TraceResult(Versioned):
    """What tracing a model wrote: the ONNX, its inputs (``model.npz``), the torch reference outputs and the ONNX-to-FX
    node map. Schema 2 added ``output_labels``."""

    SCHEMA_VERSION: ClassVar[int] = 2

    onnx: Path
    npz: Path
    reference: Path
    fx_nodes: Path
    fx_node_count: int
    onnx_node_count: int
    coverage: float
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    wall_s: float
    output_labels: dict[str, str] = Field(default_factory=dict, description="ONNX output name -> what the model calls "
                                          "it: the key path of a returned dict or named tuple (``['seg']``, "
                                          "``.depth``); outputs the model does not name are absent")
