"""structlog set-up: human output on a TTY, JSON lines otherwise or with ``--log-format json``.

Everything logged goes to stderr; stdout is reserved for results.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_LEVELS = {-2: logging.ERROR, -1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}


class _CurrentStderr:
    """Resolves sys.stderr at write time, so redirected/captured stderr is honoured."""

    def write(self, s: str) -> int:
        return sys.stderr.write(s)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(verbosity: int = 0, fmt: str = "auto") -> None:
    level = _LEVELS[max(-2, min(1, verbosity))]
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
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
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    # Third-party libraries log chatty INFO lines (exporters, ONNX passes): show them only with -v.
    logging.basicConfig(level=logging.DEBUG if verbosity >= 1 else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s", force=True)


def get_logger(**bind: Any) -> Any:
    """A logger with ``bind`` in its context that follows the configuration current when it logs.

    It is a lazy proxy, not a logger bound now: a logger made before ``configure`` ran (the runtime's
    and the backend manager's are made while the CLI is built, before ``-v`` and ``--log-format`` take
    effect) still honours them. Calling ``.bind()`` on it fixes the configuration of that moment.
    """
    return structlog.get_logger("ytk", **bind)


def bind(**kw: Any) -> None:
    structlog.contextvars.bind_contextvars(**kw)
