"""Pick ONE backend per role: flag > environment > ytk.toml > automatic default.

The automatic default takes the highest ``auto_priority`` backend that is available here and
says what it picked and why (and why the ones ranked above it were skipped).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ytk_hookspecs.loader import LoadedBackend
from ytk_hookspecs.models import ArchSpec

from ..errors import BackendError, UsageError
from .manager import BackendManager

ENV_VARS = {"engine": "YTK_ENGINE", "kernelgen": "YTK_KERNELGEN", "builder": "YTK_BUILDER"}


@dataclass
class Selection:
    role: str
    backend: LoadedBackend  # .impl is the object whose methods the stage calls
    source: str  # flag | env | config | auto | only
    reason: str
    skipped: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.backend.name

    def describe(self) -> str:
        return f"{self.role}={self.name} ({self.source}: {self.reason})"


def select_backend(mgr: BackendManager, role: str, flag: str | None = None,
                   config: dict[str, Any] | None = None, arch: ArchSpec | None = None,
                   need_available: bool = True) -> Selection:
    """Select the backend for ``role``; with ``arch``, availability is judged for that target.
    ``need_available=False`` lets an explicitly named backend answer questions that need none of
    what it lacks here (a generator's ``supports`` needs no GPU)."""
    candidates = mgr.for_role(role)
    cfg_backends = (config or {}).get("backends", {}) if config else {}
    explicit: tuple[str, str, str] | None = None
    if flag:
        explicit = (flag, f"--{role}", "flag")
    elif os.environ.get(ENV_VARS.get(role, "")):
        explicit = (os.environ[ENV_VARS[role]], f"${ENV_VARS[role]}", "env")
    elif isinstance(cfg_backends, dict) and cfg_backends.get(role):
        explicit = (str(cfg_backends[role]), "ytk.toml [backends]", "config")
    if explicit:
        name, where, src = explicit
        b = mgr.get(name)
        if b is None or role not in b.info.roles:
            installed = ", ".join(c.name for c in candidates) or "none"
            extra = "" if b is None else f" ({name!r} is installed but serves {', '.join(b.info.roles)})"
            raise UsageError(f"unknown {role} backend {name!r} (from {where}){extra}. "
                             f"Installed {role} backends: {installed}. See `ytk backends`.")
        av = b.availability(arch)
        if not av.available and not need_available:
            return Selection(role=role, backend=b, source=src, reason=f"chosen with {where} (not available here: "
                                                                      f"{av.reason}; asked only what needs none)")
        if not av.available:
            raise BackendError(f"{role} backend {name!r} (from {where}) is not available on this machine: "
                               f"{av.reason}")
        return Selection(role=role, backend=b, source=src, reason=f"chosen with {where}")
    ranked = sorted((c for c in candidates if role in c.info.auto_priority),
                    key=lambda c: (-c.info.auto_priority[role], c.name))
    skipped: list[str] = []
    for c in ranked:
        av = c.availability(arch)
        if av.available:
            why = av.reason or "available"
            tail = f"; skipped {'; '.join(skipped)}" if skipped else ""
            return Selection(role=role, backend=c, source="auto", reason=f"{why}{tail}", skipped=skipped)
        skipped.append(f"{c.name}: {av.reason}")
    installed = ", ".join(c.name for c in candidates) or "none"
    raise BackendError(f"no {role} backend is available on this machine (installed: {installed}"
                       + (f"; {'; '.join(skipped)}" if skipped else "") + f"). Pick one with --{role}.")
