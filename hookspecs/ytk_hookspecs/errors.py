"""Errors a backend raises to tell the user something they can act on.

The core shows ``str(error)`` as one paragraph and exits non-zero; anything else a backend raises
is a bug and is shown with its traceback under ``-vv``.
"""

__all__ = ["StageError", "UnsupportedRegion", "ContractViolation", "BadConfig"]


class StageError(Exception):
    """A stage failed for a reason the user can fix (bad input, unreachable worker, ...)."""

    exit_code = 3


class UnsupportedRegion(StageError):
    """A kernel generator does not recognise a region; it says so instead of faking a kernel."""


class ContractViolation(StageError):
    """A kernel or plugin breaks the contract of the node it is meant to replace."""


class BadConfig(StageError):
    """A ``--config`` value the generator cannot use (the key is one it declares; the value is not one it
    takes). Raise it from ``submit()`` before any work: the user mistyped a setting, so it is a usage
    error (exit 2) naming the key and the values it takes, not a failed job (exit 3)."""

    exit_code = 2
