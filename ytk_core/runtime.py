"""Per-invocation state shared by CLI commands: consoles, config, backends, selection, progress."""

from __future__ import annotations

import contextlib
import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ytk_hookspecs import StageContext
from ytk_hookspecs.models import ArchSpec

from .config import load_config
from .logs import bind_global, get_logger
from .plugins import BackendManager, Selection, select_backend

def _console(to_stderr: bool) -> Console:
    c = Console(stderr=to_stderr, soft_wrap=True)
    if not c.is_terminal:
        # Piped output (CI logs, files): wide enough that tables keep selectors on one line.
        c = Console(stderr=to_stderr, soft_wrap=True, width=max(c.width, 200))
    return c


stdout = _console(False)
stderr = _console(True)


class _RichTask:
    def __init__(self, progress: Progress | None, task_id: Any, log: Any, description: str) -> None:
        self._p, self._id, self._log, self._desc = progress, task_id, log, description

    def advance(self, n: float = 1) -> None:
        from . import interrupts

        interrupts.check()  # a Ctrl-C a finalizer swallowed stops the work at its next step
        if self._p is not None:
            self._p.advance(self._id, n)

    def update(self, *, description: str | None = None, total: float | None = None,
               completed: float | None = None) -> None:
        if self._p is not None:
            kw = {k: v for k, v in {"description": description, "total": total, "completed": completed}.items()
                  if v is not None}
            self._p.update(self._id, **kw)
        elif description:
            self._log.info(description)


class CoreStageContext(StageContext):
    """StageContext whose progress is a rich bar on a terminal and log lines otherwise."""

    _live: Progress | None = None

    @contextlib.contextmanager
    def progress(self, description: str, total: float | None = None) -> Iterator[_RichTask]:
        from . import interrupts

        interrupts.check()
        t0 = time.perf_counter()
        if stderr.is_terminal and CoreStageContext._live is None:
            with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                          TextColumn("{task.completed:.0f}/{task.total:.0f}" if total else ""),
                          TimeElapsedColumn(), console=stderr, transient=True) as p:
                CoreStageContext._live = p
                try:
                    tid = p.add_task(description, total=total)
                    yield _RichTask(p, tid, self.log, description)
                finally:
                    CoreStageContext._live = None
        elif CoreStageContext._live is not None:
            p = CoreStageContext._live
            tid = p.add_task(description, total=total)
            try:
                yield _RichTask(p, tid, self.log, description)
            finally:
                p.remove_task(tid)
        else:
            self.log.info(f"{description} ...")
            yield _RichTask(None, None, self.log, description)
        interrupts.check()
        self.log.info(f"{description}: done", seconds=round(time.perf_counter() - t0, 2))


class Runtime:
    """Lazily built state for one ytk invocation."""

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex[:8]
        self._mgr: BackendManager | None = None
        #: the CLI logs the plugins' load warnings itself, once its log options are parsed
        self.defer_load_warnings = False
        self._warned: set[str] = set()
        self._config: tuple[dict[str, Any], Path | None] | None = None
        bind_global(run_id=self.run_id)  # on every event, worker threads' too
        # made while the CLI is built, before -v and --log-format: get_logger's follows them anyway
        self.log = get_logger()

    @property
    def manager(self) -> BackendManager:
        if self._mgr is None:
            self._mgr = BackendManager()
            if not self.defer_load_warnings:
                self._mgr.log_warnings()
        return self._mgr

    @property
    def config(self) -> dict[str, Any]:
        if self._config is None:
            self._config = load_config()
        return self._config[0]

    def warn_once(self, message: str) -> None:
        """Log ``message`` as a warning unless this invocation already did: several stages check one kernel's
        contract (kernelgen, build-plugin, compile), and the autoloop runs them all, once per plugin."""
        if message not in self._warned:
            self._warned.add(message)
            self.log.warning(message)

    def select(self, role: str, flag: str | None, arch: ArchSpec | None = None,
               need_available: bool = True) -> Selection:
        sel = select_backend(self.manager, role, flag, self.config, arch, need_available=need_available)
        if sel.source == "auto":
            self.log.info(f"{role} backend chosen automatically", backend=sel.name, why=sel.reason)
        else:
            self.log.debug(f"{role} backend", backend=sel.name, why=sel.reason)
        return sel

    def select_chain(self, role: str, flag: str | None, arch: ArchSpec | None = None,
                     need_available: bool = True) -> list[Selection]:
        """The backends to try in order for ``role`` (:func:`~ytk_core.plugins.selection.select_chain`)."""
        from .plugins.selection import select_chain

        chain = select_chain(self.manager, role, flag, self.config, arch, need_available=need_available)
        for sel in chain:
            if sel.source == "auto":
                self.log.info(f"{role} backend chosen automatically", backend=sel.name, why=sel.reason)
            else:
                self.log.debug(f"{role} backend", backend=sel.name, why=sel.reason)
        if len(chain) > 1:
            self.log.info(f"{role} backends, tried in order", backends=",".join(s.name for s in chain))
        return chain

    def context(self, sel: Selection | None, stage: str, workdir: Path | None = None) -> CoreStageContext:
        backend = sel.name if sel else "core"
        cfg = {}
        if sel is not None:
            cfg = dict((self.config.get("backends", {}) or {}).get(sel.name, {}) or {})
        return CoreStageContext(log=get_logger(stage=stage, backend=backend), workdir=workdir,
                                config=cfg, run_id=self.run_id)

    def frontend(self) -> Selection:
        return select_backend(self.manager, "frontend", None, {})


#: Whether this invocation already printed its JSON document (a failure after it adds no second one).
JSON_EMITTED = False


def emit_json(obj: Any) -> None:
    """Machine output on stdout (for ``--json``)."""
    global JSON_EMITTED
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json")
    out = JSON_OUT or sys.stdout
    out.write(json.dumps(obj, indent=2, default=str) + "\n")
    out.flush()
    JSON_EMITTED = True


#: With --json, the stream the JSON document goes to (the real stdout); meanwhile ``sys.stdout`` is stderr.
JSON_OUT: Any = None


RUNTIME: Runtime | None = None


def runtime() -> Runtime:
    global RUNTIME
    if RUNTIME is None:
        RUNTIME = Runtime()
    return RUNTIME


def reset_runtime() -> None:
    global RUNTIME, JSON_EMITTED
    RUNTIME = None
    JSON_EMITTED = False
