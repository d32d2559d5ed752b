"""structlog set-up: human output on a TTY, JSON lines otherwise or with ``--log-format json``.

Everything logged goes to stderr; stdout is reserved for results.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

import structlog

_LEVELS = {-2: logging.ERROR, -1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}


#: One lock for every writer of log lines (ytk's loggers on any thread, third-party stdlib logging):
#: each line is written whole under it, so concurrent kernel jobs never share a line.
_WRITE_LOCK = threading.RLock()
#: Fields every event carries, whatever thread logs it (context variables do not follow a worker thread).
_GLOBAL: dict[str, Any] = {}


class _LineLogger:
    """structlog's output: one write per event, the newline included, under the shared lock."""

    def __init__(self, *args: Any) -> None:
        pass

    def msg(self, message: str) -> None:
        with _WRITE_LOCK:
            sys.stderr.write(message + "\n")
            sys.stderr.flush()

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class _LockedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Third-party libraries' stdlib logging, one whole line at a time under the same lock."""

    def emit(self, record: logging.LogRecord) -> None:
        with _WRITE_LOCK:
            self.stream = sys.stderr
            super().emit(record)


def _add_global(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    for k, v in _GLOBAL.items():
        event.setdefault(k, v)
    return event


def configure(verbosity: int = 0, fmt: str = "auto") -> None:
    level = _LEVELS[max(-2, min(1, verbosity))]
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        _add_global,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso" if use_json else "%H:%M:%S"),
    ]
    if use_json:
        processors += [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), pad_event_to=0)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_LineLogger,
        cache_logger_on_first_use=False,
    )
    # Third-party libraries log chatty INFO lines (exporters, ONNX passes): show them only with -v.
    handler = _LockedHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbosity >= 1 else logging.WARNING, handlers=[handler], force=True)


def get_logger(**bind: Any) -> Any:
    """A logger with ``bind`` in its context that follows the configuration current when it logs.

    It is a lazy proxy, not a logger bound now: a logger made before ``configure`` ran (the runtime's
    and the backend manager's are made while the CLI is built, before ``-v`` and ``--log-format`` take
    effect) still honours them. Calling ``.bind()`` on it fixes the configuration of that moment.
    """
    return structlog.get_logger("ytk", **bind)


def bind(**kw: Any) -> None:
    structlog.contextvars.bind_contextvars(**kw)


def bind_global(**kw: Any) -> None:
    """Fields on every event of this process, on every thread (the run id)."""
    _GLOBAL.update(kw)
