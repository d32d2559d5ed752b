"""User-facing errors: one clear paragraph and a non-zero exit, never a bare traceback."""

from __future__ import annotations

from ytk_hookspecs.errors import StageError


class YtkError(StageError):
    """An error the user can act on. ``str(err)`` is the whole message shown to them."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def render(self) -> str:
        return f"{self}" + (f"\n  hint: {self.hint}" if self.hint else "")


class UsageError(YtkError):
    exit_code = 2


class BackendError(YtkError):
    exit_code = 3


class KernelJobFailed(BackendError):
    """A kernel generation job that ran and failed. The message reads on its own at the CLI; ``job_id``,
    ``backend`` and ``detail`` (the generator's own words) let a caller that already says "kernel
    generation" (the autoloop's drop reasons) word it without saying so twice."""

    def __init__(self, job_id: str, backend: str, detail: str) -> None:
        super().__init__(f"kernel generation failed (job {job_id}, backend {backend}): {detail}")
        self.job_id = job_id
        self.backend = backend
        self.detail = detail


class NumericsFailed(YtkError):
    exit_code = 5


#: How a crash of the carve itself (a ytk bug, not a refusal of the region) begins its one line.
INTERNAL_CARVE_ERROR = "internal carve error (a ytk bug; please report it)"


class RegionRefused(UsageError):
    """One region (one ``--plugin`` selector) cannot go on: the carve, a generator, a build, an
    engine compile or numerics refused it. ``selector`` names it, ``stage`` says where, so a caller
    running several regions (the autoloop) can drop exactly this one and keep the rest."""

    def __init__(self, selector: str, stage: str, message: str, *, hint: str | None = None,
                 exit_code: int | None = None, internal: bool = False) -> None:
        super().__init__(message, hint=hint, exit_code=exit_code)
        self.selector = selector
        self.stage = stage
        #: the stage itself broke on this region (a ytk bug), rather than refusing it
        self.internal = internal
