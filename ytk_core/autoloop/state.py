"""The autoloop state file: everything needed to resume after a crash, written atomically.

Every job that costs real time (kernel generation, plugin builds, engine compiles) is recorded as
soon as it finishes, with the sha256 of what it produced; a resumed run trusts a record only when
the file is still there with that hash.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ytk_hookspecs.models import Versioned
from ytk_hookspecs.models.base import sha256_file, write_bytes_atomic

from ..errors import UsageError
from ..propose.models import RealSupport

STATE_FILE = "autoloop.json"
#: The last good state, one save older than STATE_FILE: a resume uses it when STATE_FILE is damaged.
PREV_STATE_FILE = "autoloop.prev.json"

PluginStatus = Literal["pending", "generated", "built", "kept", "dropped"]
#: What ended a loop: --max-rounds, --time-budget, --min-gain-ms, or nothing left to propose.
StopKind = Literal["max_rounds", "time_budget", "min_gain", "nothing_left"]
#: How a schema-1 state's stop reason says its stop kind (the texts ws.stop() was given).
_STOP_SAYS = (("max_rounds", "reached --max-rounds"), ("time_budget", "time budget of"),
              ("min_gain", "under --min-gain-ms"))
RoundStage = Literal["propose", "prepare", "kernelgen", "build", "compile", "verify", "decide", "done"]
#: Where a candidate was dropped: the round stage, named as the user knows it ("carve", not "prepare").
DropStage = Literal["propose", "carve", "kernelgen", "build", "compile", "numerics", "decide"]


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PluginRecord(_M):
    """One plugin as it moves through a round."""

    name: str
    selector: str
    status: PluginStatus = "pending"
    origin_round: int
    region_ms: float = Field(0.0, description="what the region cost in the engine it was proposed from")
    sites: int = 0
    job_id: str | None = None
    generator: str | None = Field(None, description="the kernel generator (of the kernelgen chain) that made it")
    generator_notes: list[str] = Field(default_factory=list, description="generators tried before it, and why "
                                                                          "they gave no kernel")
    source: str | None = None
    source_sha256: str | None = None
    report: str | None = None
    kernel_ms_per_site: list[float] = Field(default_factory=list)
    so: str | None = None
    so_sha256: str | None = None
    plugin_ms: float | None = Field(None, description="its layers' time in the engine it was compiled into")
    reason: str = ""
    dropped_at: DropStage | None = Field(None, description="the stage that dropped it (with status dropped)")
    replaces: str | None = Field(None, description="re-optimization: the kept plugin this one would replace "
                                                   "(same name and selector, a new kernel)")
    ms_to_beat: float | None = Field(None, description="re-optimization: the plugged kernel's measured ms per site")


class CompileRecord(_M):
    bundle: str
    prepare_dir: str
    sha256: str
    p50_ms: float
    plugins: list[str]
    plugin_sha256s: list[str] = Field(default_factory=list, description="the .so files' sha256, sorted: a "
                                      "re-optimization has its plugin's name, so names alone do not tell two "
                                      "engines apart")
    numerics_passed: bool | None = None
    numerics_note: str = ""


class CarveFailure(_M):
    """A carve of some of a round's selectors that failed, kept so a resumed run does not carve it again."""

    message: str = Field(description="the error, one line")
    selector: str | None = Field(None, description="the selector the error names, if it names one")


class RoundRecord(_M):
    index: int
    stage: RoundStage = "propose"
    started: str = Field(default_factory=now)
    prepare_dir: str | None = None
    selectors: list[str] = Field(default_factory=list)
    prepares: dict[str, str] = Field(default_factory=dict, description="sorted selectors -> prepare dir carved so")
    carve_failures: dict[str, CarveFailure] = Field(
        default_factory=dict, description="sorted selectors -> why carving exactly those failed (the carves that "
                                          "isolate a bad candidate)")
    candidates: list[PluginRecord] = Field(default_factory=list)
    compiles: list[CompileRecord] = Field(default_factory=list)
    stage_s: dict[str, float] = Field(default_factory=dict, description="wall seconds spent in each stage")
    admission_s: float = Field(0.0, description="of the build stage's seconds, those the admission gate took")
    bookkeeping_s: float = Field(0.0, description="of the stages' seconds, those spent writing engine bundles and "
                                                  "saving the state")
    result_bundle: str | None = None
    result_ms: float | None = None
    losers_engine: str | None = Field(None, description="the round's engine with every new plugin, once decide "
                                      "has dropped the ones whose layers lost (it is compared with the engine "
                                      "without them)")
    losers_ms: float | None = Field(None, description="that engine's p50 ms")
    gain_ms: float | None = None
    note: str = ""
    real_support: RealSupport | None = Field(None, description="with a simulated generator: what the real "
                                             "ones would take of this round's proposals")


class BestEngine(_M):
    round: int
    bundle: str
    ms: float
    prepare_dir: str
    plugins: list[PluginRecord] = Field(default_factory=list)


class BackendChoice(_M):
    """What the user asked for per role (``--engine``/``--kernelgen``/``--builder``); None: automatic."""

    engine: str | None = None
    kernelgen: str | None = None
    builder: str | None = None

    def asked(self) -> dict[str, str]:
        """role -> name, for the roles the user named."""
        return {role: name for role, name in self.model_dump().items() if name}


class AutoloopBackends(_M):
    """The backend serving each role in this run, chosen once when it starts (a resume keeps them).
    ``kernelgen`` may name several generators, comma-separated, tried in order per region."""

    engine: str
    kernelgen: str
    builder: str

    def roles(self) -> dict[str, str]:
        """role -> backend name (the kernelgen chain as written)."""
        return self.model_dump()

    def chain(self) -> list[str]:
        """The kernel generators, in the order they are tried per region."""
        return [n for n in self.kernelgen.split(",") if n]

    def named(self) -> list[tuple[str, str]]:
        """(role, backend) for every backend in use, each generator of the chain on its own."""
        return [(role, n) for role, v in self.roles().items() for n in (self.chain() if role == "kernelgen" else [v])]


class AutoloopLimits(_M):
    """When the loop stops; a resume applies the limits given to it to the rounds that remain."""

    max_rounds: int = Field(ge=1, description="rounds of propose -> plug after the baseline")
    min_gain_ms: float | None = Field(None, ge=0, description="a candidate or round worth less stops the loop; None "
                                      "until a share (min_gain_pct) is resolved against the baseline")
    min_gain_pct: float | None = Field(None, ge=0, le=100, description="--min-gain-ms given as a share of the "
                                       "baseline engine's latency")
    time_budget_s: float | None = Field(None, ge=0, description="wall seconds, checked between rounds")
    roofline: float = Field(0.5, gt=0, le=1, description="propose's --roofline: a family measured at this fraction "
                            "of its roofline bound or better is not worth a kernel")

    @model_validator(mode="before")
    @classmethod
    def _older_state(cls, data: Any) -> Any:
        """A state written before the limits were a model held floats with -1 for "not set"."""
        if isinstance(data, dict):
            data = {k: (None if isinstance(v, (int, float)) and v < 0 else v) for k, v in data.items()}
            if isinstance(data.get("max_rounds"), float):
                data["max_rounds"] = int(data["max_rounds"])
        return data

    def gain_ms(self) -> float:
        """The minimum gain in milliseconds (the baseline is measured before anything asks)."""
        if self.min_gain_ms is None:
            raise RuntimeError("the minimum gain is a share of the baseline, which is not measured yet")
        return self.min_gain_ms


class AutoloopState(Versioned):
    """Schema 2 added ``stop_kind`` and a round's ``losers_engine`` / ``losers_ms``; a schema-1 state is
    read with its stop kind taken from its stop reason, except one stopped mid-decide (see _from_schema1).
    Schema 3 added a round's ``real_support``, schema 4 ``model_code_sha256`` (a schema-2 or -3 state reads as is,
    without the code's hash, and is saved as schema 4)."""

    SCHEMA_VERSION: ClassVar[int] = 4

    model: str
    model_sha256: str
    model_code_sha256: str | None = Field(None, description="sha256 of the model file's syntax tree (comments and "
                                                            "layout left out): a resume after an edit of those alone "
                                                            "goes on; None where the file did not parse")
    arch: str
    precision: str
    backends: AutoloopBackends
    limits: AutoloopLimits
    worker: str | None = Field(None, description="the Kronos worker every engine was compiled on, if any")
    started: str = Field(default_factory=now)
    updated: str = Field(default_factory=now)
    elapsed_s: float = 0.0
    input_shapes: list[list[int]] | None = Field(None, description="what get_fwd_args() gave when the baseline "
                                                                   "was prepared (a resume compares)")
    backend_versions: dict[str, str] = Field(default_factory=dict, description="role -> version of its backend")
    round0_prepare: str | None = Field(None, description="round 0's prepare dir once it is complete (a resume "
                                                            "does not trace the model again)")
    round0_compiles: list[CompileRecord] = Field(default_factory=list)
    round0_s: dict[str, float] = Field(default_factory=dict, description="wall seconds of round 0's prepare "
                                                                         "and compile")
    round0_bookkeeping_s: float = Field(0.0, description="of round 0's seconds, those spent writing the baseline "
                                                         "bundle and saving the state")
    baseline: BestEngine | None = None
    best: BestEngine | None = None
    rounds: list[RoundRecord] = Field(default_factory=list)
    finished: bool = False
    stop_reason: str = ""
    stop_kind: StopKind | None = Field(None, description="which limit stopped it: a resume with that limit "
                                       "loosened goes on")
    history: list[str] = Field(default_factory=list, description="one line per notable event, for the report")

    @model_validator(mode="before")
    @classmethod
    def _from_schema1(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("schema_version", 1) >= cls.SCHEMA_VERSION:
            return data
        if data.get("schema_version", 1) != 1:  # schema 2: only added fields since, each with a default
            return {**data, "schema_version": cls.SCHEMA_VERSION}
        data = dict(data)
        for r in data.get("rounds") or []:
            if isinstance(r, dict) and r.get("stage") == "decide" and r.get("losers_engine") is None and any(
                    isinstance(c, dict) and c.get("status") == "dropped" and c.get("dropped_at") == "decide"
                    for c in r.get("candidates") or []):
                # the one-step decide of an older ytk dropped the losers and rebuilt the engine without them at
                # once: killed in between, the state cannot tell which engine holds what, so it is not picked up
                raise ValueError(f"round {r.get('index')} was stopped mid-decide by an older ytk, which this one "
                                 "cannot pick up")
        if data.get("finished") and data.get("stop_kind") is None:
            reason = str(data.get("stop_reason", ""))
            data["stop_kind"] = next((k for k, says in _STOP_SAYS if says in reason), "nothing_left")
        data["schema_version"] = cls.SCHEMA_VERSION
        return data

    def resolve_min_gain(self) -> None:
        """A --min-gain-ms given as a share of the baseline becomes milliseconds once the baseline is measured."""
        pct = self.limits.min_gain_pct
        if pct is not None and self.baseline is not None:
            self.limits.min_gain_ms = pct / 100.0 * self.baseline.ms

    def min_gain_label(self) -> str:
        """``--min-gain-ms`` as the user gave it: ``1% (0.075 ms)`` or ``0.1 ms``."""
        pct, ms = self.limits.min_gain_pct, self.limits.min_gain_ms
        if pct is not None:
            return f"{pct:g}% ({ms:.3g} ms)" if ms is not None else f"{pct:g}%"
        return f"{ms:g} ms"

    def save(self, workdir: Path) -> None:
        self.updated = now()
        p = Path(workdir) / STATE_FILE
        if p.exists() and not p.is_file():
            # e.g. a directory named autoloop.json: the state can neither be read nor replaced.
            raise UsageError(f"{p} is not a file (a directory or something else is in the way of the autoloop "
                             "state); move it aside or use another --workdir")
        if p.is_file():  # keep the state being replaced as the last good one, unless it is damaged itself
            try:
                raw = p.read_bytes()
                AutoloopState.model_validate_json(raw)
            except (OSError, ValueError):
                pass
            else:
                write_bytes_atomic(Path(workdir) / PREV_STATE_FILE, raw)
        self.write(p)


def file_ok(workdir: Path, rel: str | None, sha: str | None) -> bool:
    """A recorded artifact is still there and unchanged (so its job need not run again)."""
    if not rel or not sha:
        return False
    p = Path(workdir) / rel
    return p.is_file() and sha256_file(p) == sha
