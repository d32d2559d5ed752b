"""What ``benchmarks/zoo.py`` measures, as versioned pydantic models (``--json`` prints :class:`ZooReport`).

One :class:`ModelRun` per corpus model, written by the model's own subprocess (``zoo_flow.py``) after
every stage, so a crash or a timeout still leaves what was reached; the parent gathers them into one
:class:`ZooReport`. Every shortfall is a :class:`Miss` with the stage it happened at and one line saying
why: the misses are the data, not an error of the harness.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ytk_hookspecs.models.base import Versioned

Stage = Literal["prepare", "compile", "propose", "carve", "carve-together", "support", "templates", "timeout",
                "crash"]
#: Shown in the supports column when ytk_core.stages.supports (a generator's supports()) is absent.
NO_SUPPORTS_HOOK = "n/a (no supports hook)"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Miss(_Model):
    """One thing that did not go through: which model, which selector (none for whole-model stages),
    at which stage, and why (one line; ``detail`` keeps the whole message)."""

    model: str
    selector: str | None = None
    stage: Stage
    reason: str
    detail: str = ""


class CandidateRun(_Model):
    """One proposal of propose, carved on its own, then asked about."""

    name: str
    selector: str
    kind: str = ""
    label: str = ""
    sites: int = 0
    ms: float = 0.0
    carved: bool | None = Field(None, description="None: not tried (an earlier stage stopped the model)")
    carve_s: float | None = None
    op_inventory: dict[str, int] = Field(default_factory=dict)
    supported: bool | None = Field(None, description="the selected kernel generator's answer; None: not asked")
    support_backend: str = ""
    support_why: str = ""
    recognised: bool | None = Field(None, description="ytk_backend_templates.recognise on the carved .pt2")
    recognised_as: str = ""
    recognise_why: str = ""


class FamilyTime(_Model):
    """Where a share of one model's measured time went: a proposed region family (by op), compute outside any
    proposal (by ONNX op type), or glue. The families table sums these over the corpus."""

    family: str = Field(description="the op of a proposal (DwConv7x7s1, Conv1x1s1, Gemm, ...), the ONNX op types of "
                                    "layers outside every proposal (Transpose, LayerNormalization, ...), or glue")
    where: Literal["proposed", "not worth", "outside regions", "glue"] = Field(
        description="propose's own categories: a proposal; a heavy op (conv, GEMM, attention) propose left out (at "
                    "roofline or under --min-ms); compute with no heavy op to build a kernel around; reformats")
    ms: float
    sites: int = 0
    taken: bool | None = Field(None, description="proposed: would the real kernel generators take it (propose's "
                                                 "answer; None: not asked)")
    why: str = ""


class ModelRun(_Model):
    """Everything one model's subprocess found out."""

    name: str
    source: str
    family: str
    depthwise: bool
    attention: str
    size: str = Field(description="BxHxW the model ran at")
    workdir: str
    stage: str = Field("start", description="the last stage started")
    status: Literal["running", "done", "failed", "timeout", "crashed"] = "running"
    fx_nodes: int | None = None
    onnx_nodes: int | None = None
    coverage: float | None = Field(None, description="fraction of ONNX compute nodes mapped to a torch module")
    baseline_ms: float | None = Field(None, description="median latency of the baseline engine")
    simulated: bool | None = None
    engine: str = ""
    proposals: int | None = None
    profile_ms: float | None = Field(None, description="sum of the engine's per-layer times (the families' whole)")
    time_by_family: list[FamilyTime] = Field(default_factory=list)
    real_chain: str = Field("", description="the real kernel generators propose asked (FamilyTime.taken)")
    candidates: list[CandidateRun] = Field(default_factory=list)
    supports_hook: bool | None = Field(None, description="False: the supports hook does not exist in this tree")
    kernelgen: str = Field("", description="the kernel generator the support check asked")
    carved_together: bool | None = Field(None, description="all solo-accepted selectors carved in one prepare")
    warnings: list[str] = Field(default_factory=list)
    misses: list[Miss] = Field(default_factory=list)
    stage_s: dict[str, float] = Field(default_factory=dict, description="wall seconds per stage")
    wall_s: float = 0.0

    def miss(self, stage: Stage, reason: str, selector: str | None = None) -> Miss:
        """Record a miss (``reason`` may span lines: the first non-empty one is the short reason)."""
        m = Miss(model=self.name, selector=selector, stage=stage, reason=one_line(reason), detail=reason.strip())
        self.misses.append(m)
        return m

    @property
    def flow_ok(self) -> bool:
        """prepare, compile and propose went through (the carves are data either way)."""
        return self.proposals is not None


class ZooReport(Versioned):
    """``benchmarks/zoo.py --json``: the table over the corpus. Schema 2 added ``time_by_family`` per model."""

    SCHEMA_VERSION = 2

    arch: str
    precision: str
    backends: dict[str, str] = Field(description="role -> backend, as the runs selected them (environment)")
    size_kind: Literal["small", "default", "override"]
    jobs: int
    timeout_s: float
    propose: dict[str, float] = Field(description="the ProposeOptions the runs used (min_ms, launch_ms)")
    workdir: str
    wall_s: float
    models: list[ModelRun]

    @property
    def misses(self) -> list[Miss]:
        return [m for run in self.models for m in run.misses]


_SPACE = re.compile(r"\s+")
#: What varies between two misses of one cause: quoted text, braces, brackets, dotted/underscored names, numbers.
_VARYING = [(re.compile(r"'[^']*'"), "'…'"), (re.compile(r"\{[^}]*\}"), "{…}"), (re.compile(r"\[[^\]]*\]"), "[…]"),
            (re.compile(r"\([^()]*\)"), "(…)"), (re.compile(r"\bNone\b"), "[…]"),
            (re.compile(r"\b[\w*]+(?:[._][\w*]+)+\b"), "X"), (re.compile(r"\d+"), "N")]


def one_line(text: str, limit: int = 240) -> str:
    """The first non-empty line of ``text``, whitespace collapsed, cut to ``limit`` characters."""
    line = next((ln for ln in str(text).splitlines() if ln.strip()), "")
    line = _SPACE.sub(" ", line).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def reason_pattern(reason: str) -> str:
    """``reason`` with what varies from site to site masked, so that misses of one cause group together."""
    for pattern, mask in _VARYING:
        reason = pattern.sub(mask, reason)
    return reason.rstrip("…")[:90]  # the start says what went wrong; one_line() cut the ends at different places
