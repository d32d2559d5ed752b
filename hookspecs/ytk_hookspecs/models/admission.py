"""What the core's admission gate found when it ran a built plugin (``<plugin>.so.admission.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import Versioned

__all__ = ["AdmissionStatus", "AdmissionCaseRecord", "AdmissionRecord"]


AdmissionStatus = Literal["admitted", "rejected", "unverified"]


class AdmissionCaseRecord(BaseModel):
    # an error of inf (a NaN output) must read back as inf, not as a null that fails validation
    """One case of an admission verdict as stored: its label, whether it passed (or why it was skipped), the error
    figures and the problems found."""
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")

    label: str = Field(description="site shape / input distribution / seed")
    ok: bool
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    budget_used: float = Field(0.0, description="max |out - ref| / tolerance over the case (<= 1 passes)")
    problems: list[str] = Field(default_factory=list)
    skipped: str = Field("", description="why a drawn case was not run (the region's own ops are not finite on it)")


class AdmissionRecord(Versioned):
    """The verdict on one ``.so`` (by its sha256): ``admitted`` only after every case passed on a GPU;
    ``unverified`` where the gate could not run (no GPU of the plugin's SM here, a simulated plugin, no region
    reference); ``rejected`` with the problems found. A plugin that is not admitted never reaches a real
    engine."""

    plugin_name: str
    so_sha256: str
    status: AdmissionStatus
    region: str = Field("", description="digest of the region it was checked against (its ops, attributes, "
                                        "roles and site shapes): a verdict covers that region only")
    precision: str = Field("", description="the engine precision it was checked at")
    reason: str = ""
    device: str = ""
    error_budget: str = ""
    repeats: int = 0
    cases: list[AdmissionCaseRecord] = Field(default_factory=list)
    kernel_ms_per_site: list[float] = Field(default_factory=list)
    floor_ms_per_site: list[float] = Field(default_factory=list)

    @staticmethod
    def path_for(so: str | Path) -> Path:
        p = Path(so)
        return p.with_name(p.name + ".admission.json")
