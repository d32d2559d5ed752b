"""What the core hands every stage hook besides its request: logging, progress and a workdir.

Backends only use this interface, so the core can render progress as rich bars on a terminal and
as JSON lines in a pipeline without any backend knowing which.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["ProgressTask", "StageLogger", "StageContext"]


@runtime_checkable
class ProgressTask(Protocol):
    """A progress bar a stage advances (what ``StageContext.progress`` gives; a no-op where nothing is shown)."""
    def advance(self, n: float = 1) -> None: ...
    def update(self, *, description: str | None = None, total: float | None = None,
               completed: float | None = None) -> None: ...


@runtime_checkable
class StageLogger(Protocol):
    """The structured logger a stage writes events to (``ctx.log``): an event line with keyword fields."""
    def debug(self, event: str, **kw: Any) -> Any: ...
    def info(self, event: str, **kw: Any) -> Any: ...
    def warning(self, event: str, **kw: Any) -> Any: ...
    def error(self, event: str, **kw: Any) -> Any: ...


class StageContext:
    """Passed as ``ctx`` to every stage hook.

    ``ctx.log`` is a structured logger (``ctx.log.info("compiled", layers=42)``);
    ``with ctx.progress("building", total=3) as task: task.advance()`` shows progress on stderr;
    ``ctx.workdir`` is a scratch directory that survives the command (resumable work goes there);
    ``ctx.config`` carries the ``[backends.<name>]`` table of ytk.toml for the called backend.
    """

    def __init__(self, log: StageLogger | None = None, workdir: Path | None = None,
                 config: dict[str, Any] | None = None, run_id: str = "") -> None:
        self.log: StageLogger = log or _StdLogger()
        self.workdir = Path(workdir) if workdir else Path.cwd() / ".ytk-cache"
        self.config: dict[str, Any] = dict(config or {})
        self.run_id = run_id

    @contextlib.contextmanager
    def progress(self, description: str, total: float | None = None) -> Iterator[ProgressTask]:
        yield _NullTask()


class _NullTask:
    def advance(self, n: float = 1) -> None:
        pass

    def update(self, *, description: str | None = None, total: float | None = None,
               completed: float | None = None) -> None:
        pass


class _StdLogger:
    def __init__(self) -> None:
        self._l = logging.getLogger("ytk")

    def _fmt(self, event: str, kw: dict[str, Any]) -> str:
        return event + "".join(f" {k}={v}" for k, v in kw.items())

    def debug(self, event: str, **kw: Any) -> None:
        self._l.debug(self._fmt(event, kw))

    def info(self, event: str, **kw: Any) -> None:
        self._l.info(self._fmt(event, kw))

    def warning(self, event: str, **kw: Any) -> None:
        self._l.warning(self._fmt(event, kw))

    def error(self, event: str, **kw: Any) -> None:
        self._l.error(self._fmt(event, kw))
