"""``ProposeReport``: what ``ytk embedded propose --json`` prints and what autoloop consumes.

Every millisecond of the measured profile lands in exactly one place: a proposal (or an
already-plugged row), a NOT WORTH PLUGGING row, or the unattributed-glue bucket, so the rows
always add up to ``total_ms``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ytk_hookspecs.models import RegionSketch, Versioned

ResolvedBy = Literal["engine", "metadata", "name", "span", "layer-info", "none"]
RowCategory = Literal["roofline", "under_threshold", "outside_regions", "glue", "cannot_express", "outside_carve"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProposeOptions(_Model):
    """Knobs of a propose run (the CLI flags, for the Python API)."""

    min_ms: float = Field(1.0, description="a region family (or remainder) under this total is not worth a kernel")
    min_pct: float | None = Field(None, description="min_ms as a percentage of the profile's total instead "
                                                    "(resolved when the profile is read)")
    family_min_ms: float | None = Field(
        None, description="a shape family under this gets no kernel of its own and folds into its op's dynamic "
                          "remainder; default 2 x min_ms")
    merge_shape_families: bool = Field(False, description="one dynamic candidate per op instead of per family")
    roofline_fraction: float = Field(
        0.5, description="a family whose measured time reaches this fraction of the arch's roofline bound is "
                         "'TRT at roofline'")
    launch_ms: float = Field(
        0.002, description="cost of one kernel launch inside an engine, counted once per site in the roofline bound "
                           "(a plugin cannot go below it); ~2-5 us on Orin-class GPUs")
    plugins: list[str] = Field(default_factory=list, description="--plugin selectors: report exactly these")
    namespace: str = "yasp"
    arch: str | None = Field(None, description="arch spec when the profile carries none (raw trtexec files)")
    precision: Literal["fp16", "fp32"] | None = None
    kernelgen: str | None = Field(None, description="ask this kernel generator (or 'auto') whether it would take "
                                                    "each proposal; None: do not ask")

    @property
    def own_kernel_ms(self) -> float:
        return self.family_min_ms if self.family_min_ms is not None else 2.0 * self.min_ms


class LayerAttribution(_Model):
    """One engine layer and where its time went."""

    name: str
    ms: float
    kind: Literal["compute", "reformat", "engine", "plugin"]
    resolved_by: ResolvedBy
    onnx_nodes: list[str] = Field(default_factory=list)
    glue_ms: float = 0.0
    note: str = ""


class GlueItem(_Model):
    """Time no torch module owns, by cause."""

    cause: Literal["reformat", "engine-internal", "unresolved-layer", "unmapped-onnx-node"]
    ms: float
    layers: int


class RooflineFigures(_Model):
    """A region's (or family's) bytes and FLOPs against the target's limits."""

    bytes: int
    flops: int
    bound_ms: float = Field(description="max(bytes / bandwidth, flops / peak) + launch_ms: the fastest any kernel "
                                        "could be")
    launch_ms: float = Field(0.0, description="the kernel-launch floor included in bound_ms (sites x launch cost)")
    measured_ms: float
    fraction: float = Field(description="bound_ms / measured_ms: 1.0 means running at the roofline")
    limiter: Literal["memory", "compute"]
    gpu: str


class SiteTime(_Model):
    """One site of a proposal: a module instance and its measured time."""

    module_path: str
    ms: float
    onnx_nodes: list[str] = Field(default_factory=list)
    layers: list[str] = Field(default_factory=list)
    input_shapes: list[list[int | str]] = Field(default_factory=list)


class Proposal(_Model):
    """A row of WHAT TO PLUG: a region family (or a plugin already in the engine)."""

    name: str
    namespace: str = "yasp"
    label: str
    selector: str = Field(description="ready for prepare --plugin; empty for an already-plugged row with no "
                                      "selector on record")
    ops_name: str = ""
    around: bool = False
    kind: str = Field(description="region kind: depthwise_conv, conv, grouped_conv, gemm, attention, plugin, ...")
    dynamic: bool = Field(False, description="a dynamic remainder: several shape families in one kernel")
    families: list[str] = Field(default_factory=list, description="shape-family labels folded into this row")
    sites: list[SiteTime]
    ms: float
    ms_per_site: list[float]
    already_plugged: bool = False
    kernelgen_input: str | None = Field(None, description="the .pt2 to re-run kernel generation against")
    roofline: RooflineFigures | None = None
    sketch: RegionSketch | None = Field(None, description="what a kernel generator is shown before the carve")
    supported: bool | None = Field(None, description="the selected kernel generator's answer (None: not asked)")
    support_why: str = ""
    support_certain: bool = False
    support_backend: str = ""

    @property
    def site_count(self) -> int:
        return len(self.sites)

    @property
    def ms_to_beat(self) -> float:
        return self.ms / max(1, len(self.sites))


class NotWorthRow(_Model):
    """A row of NOT WORTH PLUGGING, with the reason."""

    label: str
    category: RowCategory
    sites: int | None
    ms: float
    reason: str
    members: list[str] = Field(default_factory=list, description="family labels or module paths in this row")
    sketches: list[RegionSketch] = Field(default_factory=list, exclude=True)  # at roofline: what to ask a generator
    supported: bool | None = Field(None, description="at roofline: would the selected kernel generator take a "
                                                     "family of this row (None: not asked)")
    support_why: str = ""
    support_backend: str = ""
    supported_members: list[str] = Field(default_factory=list, description="at roofline: the families of this row "
                                                                          "the generator would take")


class ClassRow(_Model):
    """Inclusive time of every instance of one torch class (the --verbose class table)."""

    cls: str
    instances: int
    ms: float
    share: float


class ModuleRow(_Model):
    """Inclusive time of one module down to --depth (the --verbose module table)."""

    path: str
    cls: str
    depth: int
    ms: float
    share: float


class RealSupport(_Model):
    """With a simulated kernel generator: what the real generators the automatic choice ranks (templates,
    then any other installed real one that runs here or would with a GPU) would take of the proposals,
    asked from each region's sketch. A simulated figure counts every region; on a GPU only these get a
    kernel."""

    chain: str = Field(description="the real generators asked, comma-separated; empty: none is installed")
    takes: list[str] = Field(default_factory=list, description="proposals the chain takes (or likely takes)")
    refuses: dict[str, str] = Field(default_factory=dict, description="proposal -> why the chain refuses it")


class ProposeReport(Versioned):
    """What propose measured, attributed and recommends. Schema 2 added ``real_support``; 3, each sketch's
    ``channels`` (every shape family's); 4, a roofline row's ``supported_members``."""

    SCHEMA_VERSION: ClassVar[int] = 4

    source: str = Field(description="the bundle or profile file measured")
    source_label: str
    engine: str
    engine_version: str = ""
    device: str = ""
    arch: str | None = None
    precision: str = "fp16"
    simulated: bool
    onnx: str
    fx_nodes: str
    plugins_file: str | None = None
    total_ms: float = Field(description="sum of the engine's per-layer median times")
    end_to_end_ms: float | None = Field(None, description="median end-to-end latency, when the bundle has it")
    attributed_ms: float
    glue_ms: float
    candidates_ms: float = Field(description="time in WHAT TO PLUG rows that are not yet plugged")
    plugged_ms: float = 0.0
    proposals: list[Proposal]
    not_worth: list[NotWorthRow]
    glue: list[GlueItem]
    class_table: list[ClassRow] = Field(default_factory=list)
    module_table: list[ModuleRow] = Field(default_factory=list)
    layers: list[LayerAttribution] = Field(default_factory=list)
    options: ProposeOptions
    summary: str
    warnings: list[str] = Field(default_factory=list)
    real_support: RealSupport | None = Field(None, description="asked a simulated generator: what the real "
                                             "ones would take of the new proposals")

    @property
    def candidates(self) -> list[Proposal]:
        return [p for p in self.proposals if not p.already_plugged]

    @property
    def plugged(self) -> list[Proposal]:
        return [p for p in self.proposals if p.already_plugged]
