"""Carving (step 3): regions replaced by custom-op nodes, and the kernel-generation inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import Versioned
from .tensors import TensorInfo

__all__ = ["PLUGIN_DOMAIN", "LiftMode", "InputRole", "SiteInfo", "RegionOp", "CandidateFiles", "Candidate",
           "CandidatesFile", "PluginEntry", "PluginsFile", "CarveRequest", "CarveResult"]


#: ONNX domain of every custom-op node ytk inserts. TensorRT's parser ignores the domain and looks
#: the plugin up by (op_type, plugin_namespace, plugin_version); the domain keeps the ONNX checker
#: from treating the node as an unknown standard op.
PLUGIN_DOMAIN = "trt.plugins"

LiftMode = Literal["fold_conv_bn", "fold_conv_bn_seq", "none"]
InputRole = Literal["activation", "weight", "bias"]


class SiteInfo(BaseModel):
    """One place in the model where a plugin's region was matched."""

    model_config = ConfigDict(extra="forbid")

    index: int
    module_path: str
    onnx_node: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    replaced_onnx_nodes: list[str]
    fx_nodes: list[str]


class RegionOp(BaseModel):
    """One heavy op of a carved region with its attributes, read from the region's canonical program:
    what a kernel generator needs to decide what a region is without loading the ``.pt2`` with torch."""

    model_config = ConfigDict(extra="forbid")

    op: str = Field(description="conv | linear | matmul | attention | softmax | layer_norm | batch_norm | "
                                "group_norm")
    kernel: list[int] = Field(default_factory=list, description="conv kernel size (kh, kw)")
    stride: list[int] = Field(default_factory=list)
    padding: list[int] = Field(default_factory=list, description="conv padding per spatial dim (symmetric)")
    dilation: list[int] = Field(default_factory=list)
    groups: int | None = None
    channels_in: int | None = Field(None, description="input channels (conv) or in_features (linear); None "
                                                      "when it varies across sites")
    channels_out: int | None = None
    activation: str | None = Field(None, description="the activation applied to this op's output inside the "
                                                     "region, in its canonical spelling (relu, relu6, hardswish, "
                                                     "silu, gelu, gelu_tanh, sigmoid, hardsigmoid, tanh, ...)")
    normalisation: str | None = Field(None, description="a norm applied to this op's output inside the region "
                                                        "(batch_norm, layer_norm, group_norm); a conv's batch norm "
                                                        "that the lift folded is not here: see Candidate.lift")
    transposed: bool = Field(False, description="a transposed conv (ConvTranspose): its weights stay baked in the "
                                                "region, and channels_out is its output channels")


class CandidateFiles(BaseModel):
    """Paths relative to the prepare directory."""

    model_config = ConfigDict(extra="forbid")

    pt2: str | None = None
    io_npz: str | None = None
    inputs_pt: str | None = None
    reference_py: str | None = None


class Candidate(BaseModel):
    """A plugin's region as a kernel generator sees it (one entry of ``candidates.json``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    namespace: str
    version: str = "1"
    selector: str
    ops_name: str
    around: bool = False
    lift: LiftMode
    input_roles: list[InputRole]
    sites: list[SiteInfo]
    op_inventory: dict[str, int]
    ops: list[RegionOp] = Field(default_factory=list, description="the region's heavy ops in graph order, with "
                                                                  "their attributes")
    constant_axes: list[list[bool]] = Field(
        description="per region input, per axis: is that dim the same at every site")
    dynamic_dims: dict[str, list[int]] = Field(
        default_factory=dict, description="per region input name: the axes that vary across sites")
    files: CandidateFiles = Field(default_factory=CandidateFiles)
    notes: list[str] = Field(default_factory=list)


class CandidatesFile(Versioned):
    """``candidates.json``."""

    onnx: str
    candidates: list[Candidate]


class PluginEntry(BaseModel):
    """One plugin of the carve (an entry of ``plugins.json``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    namespace: str
    version: str = "1"
    op_type: str
    domain: str = PLUGIN_DOMAIN
    selector: str
    sites: int
    site_nodes: list[str]
    kernelgen_input: str | None = None


class PluginsFile(Versioned):
    """``plugins.json``: the machine-readable carve; propose reads it back."""

    onnx: str
    plugins: list[PluginEntry]

    def by_name(self, name: str) -> PluginEntry | None:
        return next((p for p in self.plugins if p.name == name), None)


class CarveRequest(Versioned):
    """Carve ``selectors`` out of a freshly traced prepare directory."""

    prepare_dir: Path
    onnx: Path
    fx_nodes: Path
    selectors: list[str]
    export_pt2: bool = True


class CarveResult(Versioned):
    """What a carve wrote: ``plugins.json``, ``candidates.json``, the rewritten ONNX and how many custom-op nodes it
    holds."""
    plugins: Path
    candidates: Path
    onnx: Path
    custom_nodes: int
    wall_s: float
