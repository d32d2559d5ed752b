"""Kernel generation (step 4): the kernel contract (plugin_meta) and the report beside a source.

The launcher contract every generated kernel honours (builders wrap exactly this in their
engine-specific shim: TensorRT 8.6 IPluginV2DynamicExt, TensorRT 10 IPluginV3, torch)::

    extern "C" int <launcher>(const void* const* inputs, void* const* outputs,
                              const int64_t* extents, void* workspace, cudaStream_t stream);
    extern "C" size_t <workspace>(const int64_t* extents);   // optional

``inputs``/``outputs`` are device pointers in the declared order (lifted weights included);
``extents`` holds the values of ``PluginMeta.extents`` in declaration order, evaluated from the
runtime input dims. The return value is 0 or a ``cudaError_t``.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .base import Versioned
from .carve import Candidate, InputRole

__all__ = ["TensorFormat", "KernelDtype", "DeploymentTarget", "C_IDENTIFIER", "TensorContract", "KernelPerf",
           "PluginMeta", "Reoptimization", "KernelGenRequest", "CandidateScore", "KernelReport", "KernelGenResult",
           "RegionSketch", "SupportRequest", "SupportAnswer"]


TensorFormat = Literal["kLINEAR", "kHWC8", "kCHW32", "kHWC"]
KernelDtype = Literal["float16", "float32", "int32", "int8"]
#: What a kernel is generated for: an engine plugin around the launcher ABI, or a torch custom op.
DeploymentTarget = Literal["tensorrt", "torch"]


#: A C identifier: what a contract field must be when a builder pastes it into generated C/C++.
C_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"


class TensorContract(BaseModel):
    """One input or output of the plugin as the engine must feed it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    dtype: KernelDtype
    format: TensorFormat = "kLINEAR"
    role: InputRole = "activation"
    shape: list[str] = Field(description="one expression per logical (NCHW) dim; see shape_expr")


class KernelPerf(BaseModel):
    """What the kernel generator measured, so a simulator can price the kernel honestly."""

    model_config = ConfigDict(extra="forbid")

    measured_on: str
    achieved_bandwidth_fraction: float = Field(gt=0, le=1.0)
    time_ms_per_site: list[float] = Field(default_factory=list)


class PluginMeta(Versioned):
    """The ``plugin_meta.yaml`` block of a kernel source bundle: the TensorRT contract."""

    plugin_name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    plugin_namespace: str = Field(default="yasp", pattern=r"^[A-Za-z0-9_]*$")
    plugin_version: str = "1"
    deployment_target: DeploymentTarget = "tensorrt"
    inputs: list[TensorContract]
    outputs: list[TensorContract]
    accumulation: KernelDtype = "float32"
    extents: dict[str, str] = Field(description="name -> expression over input dims, in launcher order")
    launcher: str = Field(pattern=C_IDENTIFIER)
    # Pasted into generated C as a function name, like launcher: the same identifier check.
    workspace: str | None = Field(default=None, pattern=C_IDENTIFIER)
    constraints: list[str] = Field(default_factory=list)
    perf: KernelPerf | None = None

    @field_validator("outputs")
    @classmethod
    def _one_output_at_least(cls, v: list[TensorContract]) -> list[TensorContract]:
        if not v:
            raise ValueError("a plugin needs at least one output")
        return v


class Reoptimization(BaseModel):
    """The region is plugged already: search harder, and fail the job unless the new kernel beats these.

    ``ms_to_beat`` is the engine's time for the region's layers per site now (it includes what the
    engine adds around the plugin); ``kernel_ms_to_beat``, when the plugged kernel's own time was
    measured, is that time per site -- the sharper bar.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ms_to_beat: float = Field(gt=0, description="the engine's time for the region's layers per site (ms)")
    kernel_ms_to_beat: float | None = Field(None, gt=0, description="the kept kernel's own time per site (ms)")

    def bar_ms(self) -> float:
        """The time per site a new kernel must beat: the kernel's own when known, else the engine's."""
        return self.kernel_ms_to_beat or self.ms_to_beat


class KernelGenRequest(Versioned):
    """``ytk kernelgen compile -r X.pt2 -g GPU --config k=v -o X.module_source.py``.

    ``config`` holds only the selected generator's own keys (those its ``BackendInfo.config_keys``
    declares); what the core decides arrives typed: ``deployment_target`` (from the required
    ``--config deployment_target=tensorrt``) and ``reoptimize`` (set by the autoloop, or by
    ``--config reoptimize=1 ms_to_beat=... [kernel_ms_to_beat=...]`` by hand).
    """

    SCHEMA_VERSION: ClassVar[int] = 2

    reference: Path
    gpu: str
    config: dict[str, str] = Field(default_factory=dict)
    deployment_target: DeploymentTarget = "tensorrt"
    reoptimize: Reoptimization | None = None
    output: Path
    candidate: Candidate | None = None
    prepare_dir: Path | None = None
    arch: str | None = None
    precision: Literal["fp16", "fp32"] = "fp16"
    plugin_name: str | None = None


class CandidateScore(BaseModel):
    """One kernel variant tried by a generator and what happened to it."""

    model_config = ConfigDict(extra="forbid")

    variant: str
    params: dict[str, int | str | float] = Field(default_factory=dict)
    compiled: bool = True
    correct: bool | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    time_ms_per_site: list[float] = Field(default_factory=list)
    spread_ms_per_site: list[float] = Field(default_factory=list)
    floor_ms_per_site: list[float] = Field(default_factory=list)
    fraction_of_floor: float | None = None
    rejected: str | None = None
    note: str | None = Field(None, description="why ``correct`` is None: e.g. checked on fewer cases, as slower "
                                               "than a winner that passed all of them")


class KernelReport(Versioned):
    """``report.json`` beside a generated source: every candidate tried, the winner, the hardware.

    Every ``*_ms_per_site`` list (the winner's and each candidate's) holds one entry per site of the region,
    in site order, even where sites share a shape: the sum is the region's time
    (:func:`ytk_hookspecs.contract.check_report_against_candidate` checks it).

    Schema 2 added ``copy_ms_per_site`` (reports of schema 1 still read, with it empty); schema 3 a
    candidate's ``note``.
    """

    SCHEMA_VERSION: ClassVar[int] = 3

    plugin_name: str
    backend: str
    job_id: str
    region_kind: str
    measured_on: str
    simulated: bool
    error_budget: str
    candidates: list[CandidateScore]
    winner: str | None
    torch_ms_per_site: list[float] = Field(default_factory=list)
    floor_ms_per_site: list[float] = Field(default_factory=list)
    # a plain memory pass (elementwise SM kernel) over the same bytes per site, timed like the kernels:
    # the practical ceiling at that size (launch, ramp-up and tail included), well above the floor
    # for small tensors
    copy_ms_per_site: list[float] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class KernelGenResult(Versioned):
    """A kernel job's state. A ``done`` job names its kernel source and its ``report.json`` (written at
    :func:`ytk_hookspecs.kernel_source.report_path` of the source): the report is how a user and the
    autoloop learn what was measured, so a job without one is not done."""

    job_id: str
    status: Literal["done", "running", "failed"]
    source: Path | None = None
    report: Path | None = None
    message: str = ""

    @model_validator(mode="after")
    def _done_names_its_files(self) -> "KernelGenResult":
        if self.status == "done" and (self.source is None or self.report is None):
            missing = " and ".join(n for n, v in (("source", self.source), ("report", self.report)) if v is None)
            raise ValueError(f"a done kernel job must name its {missing} (the report.json beside the source: "
                             "ytk_hookspecs.kernel_source.report_path(source))")
        return self


class RegionSketch(BaseModel):
    """What propose knows of a region before any carve: enough for a generator to say whether it
    would take it, without torch and without the region's program."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="depthwise_conv | conv | grouped_conv | gemm | attention")
    ops_name: str = Field("", description="the torch class of the region's module")
    around: bool = False
    kernel: list[int] = Field(default_factory=list, description="conv kernel size (kh, kw)")
    stride: list[int] = Field(default_factory=list)
    dilation: list[int] = Field(default_factory=list)
    pads: list[int] = Field(default_factory=list, description="ONNX pads (begins then ends)")
    groups: int | None = None
    channels_in: int | str | None = None
    channels_out: int | str | None = None
    onnx_ops: dict[str, int] = Field(default_factory=dict, description="ONNX op type -> count inside the region")
    channels: list[tuple[int | str | None, int | str | None]] = Field(
        default_factory=list, description="(input, output) channels of each shape family the region serves: one "
                                          "pair for a closed family, every member's for a dynamic remainder "
                                          "(whose channels_in / channels_out are None)")


class SupportRequest(Versioned):
    """``KernelGenBackend.supports``: would this generator take the region?

    Before the carve only ``sketch`` is set (propose, the autoloop choosing what to carve); after it,
    ``candidate`` and ``reference`` (its ``.pt2``, the canonical region program) are set too.
    """

    sketch: RegionSketch | None = None
    candidate: Candidate | None = None
    reference: Path | None = None
    precision: Literal["fp16", "fp32"] = "fp16"
    config: dict[str, str] = Field(default_factory=dict)
    arch: str | None = Field(None, description="the target's arch spec, when known (a generator's kernel space "
                                               "can depend on the SM)")


class SupportAnswer(Versioned):
    """A generator's answer. ``certain`` is false when only the region's sketch was seen and the
    program itself decides (e.g. pointwise ops that may spell an activation the generator fuses)."""

    supported: bool
    why: str
    backend: str = ""
    certain: bool = True
    kind: str | None = Field(None, description="what the generator recognised the region as, when it did")
