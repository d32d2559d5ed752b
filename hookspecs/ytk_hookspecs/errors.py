"""Errors a backend raises to tell the user something they can act on.

The core shows ``str(error)`` as one paragraph and exits non-zero; anything else a backend raises
is a bug and is shown with its traceback under ``-vv``.
"""


class StageError(Exception):
    """A stage failed for a reason the user can fix (bad input, unreachable worker, ...)."""

    exit_code = 3


class UnsupportedRegion(StageError):
    """A kernel generator does not recognise a region; it says so instead of faking a kernel."""


class ContractViolation(StageError):
    """A kernel or plugin breaks the contract of the node it is meant to replace."""
