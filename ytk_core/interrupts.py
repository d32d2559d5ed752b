"""Ctrl-C that is never lost.

Python raises KeyboardInterrupt wherever the main thread happens to be when SIGINT arrives; when that is
inside a finalizer (a ``__del__`` of torch's storage references during an export), Python prints "Exception
ignored in ..." with a traceback and goes on, and the command ran to its end with exit 0 although the user
asked it to stop. The handler installed here also records the interrupt; :func:`check`, called at every
progress step and stage boundary, raises it again, and the CLI's exit says "interrupted" (130) whatever
swallowed the first one, without the "Exception ignored" traceback.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_pending = False


def _on_sigint(signum: int, frame: Any) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


def pending() -> bool:
    """Whether a Ctrl-C arrived during this command (even one something swallowed)."""
    return _pending


def check() -> None:
    """Raise the Ctrl-C that arrived and was swallowed; nothing when none did."""
    if _pending:
        raise KeyboardInterrupt


@contextmanager
def watching() -> Iterator[None]:
    """For one command: record every SIGINT (then raise it as Python does); the previous handler after."""
    global _pending
    _pending = False
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _on_sigint)
    hook = sys.unraisablehook

    def quiet(unraisable: Any) -> None:  # the swallowed Ctrl-C is ours to report: no "Exception ignored" traceback
        if not (_pending and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            hook(unraisable)

    sys.unraisablehook = quiet
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = hook
        _pending = False
