"""The Gaia backend's own errors (it cannot use the core's): each is one line and an exit status."""

from ytk_hookspecs.errors import StageError


class GaiaUsageError(StageError):
    """Bad input or settings: a flag, a missing URL or key, a job the service would refuse (exit 2)."""

    exit_code = 2


class GaiaJobFailed(StageError):
    """A job that ran on the service and failed, or was cancelled (exit 3, or the status the job named)."""

    def __init__(self, message: str, exit_code: int = 3) -> None:
        super().__init__(message)
        self.exit_code = exit_code
