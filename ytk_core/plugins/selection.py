"""Pick the backend per role: flag > environment > ytk.toml > automatic default.

The automatic default takes the highest ``auto_priority`` backend that is available here and
says what it picked and why (and why the ones ranked above it were skipped). The kernel generator
role may name several, in order (:func:`select_chain`): ``--kernelgen templates,naive-dw``,
``YTK_KERNELGEN=...``, ``[backends] kernelgen = ["templates", "naive-dw"]``; each region goes to the
first that takes it, and to the next when a job fails.
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


#: The roles that may name several backends, tried in order.
CHAIN_ROLES = ("kernelgen",)


def _chain_names(value: Any, where: str, role: str) -> list[str]:
    names = value if isinstance(value, list) else str(value).split(",")
    names = [str(n).strip() for n in names]
    if not names or any(not n for n in names):
        raise UsageError(f"{where} {value!r}: expected backend names separated by commas")
    if len(names) > 1 and role not in CHAIN_ROLES:
        raise UsageError(f"{where} {value!r}: one {role} backend only (only {', '.join(CHAIN_ROLES)} takes a list)")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"{where} {value!r}: {', '.join(dup)} named twice")
    return names


def named_choice(role: str, flag: str | None = None,
                 config: dict[str, Any] | None = None) -> tuple[list[str], str] | None:
    """The backends the user named for ``role`` and where (``--kernelgen``, ``$YTK_KERNELGEN`` or ``ytk.toml
    [backends]``, first wins); None when the choice is left to ytk."""
    cfg_backends = (config or {}).get("backends", {}) if config else {}
    value: Any = None
    where = ""
    if flag:
        value, where = flag, f"--{role}"
    elif os.environ.get(ENV_VARS.get(role, "")):
        value, where = os.environ[ENV_VARS[role]], f"${ENV_VARS[role]}"
    elif isinstance(cfg_backends, dict) and cfg_backends.get(role):
        value, where = cfg_backends[role], "ytk.toml [backends]"
    if value is None:
        return None
    return _chain_names(value, where, role), where


def select_chain(mgr: BackendManager, role: str, flag: str | None = None, config: dict[str, Any] | None = None,
                 arch: ArchSpec | None = None, need_available: bool = True) -> list[Selection]:
    """The backends for ``role`` in the order to try them: those named (comma-separated, or a TOML list),
    each checked like a single choice; automatically, every available real (not simulated) backend
    ranked for the role, best first -- or the single automatic choice when there is none."""
    named = named_choice(role, flag, config)
    if named is not None:
        names, where = named
        src = {"--": "flag", "$Y": "env"}.get(where[:2], "config")
        out = [select_backend(mgr, role, name, None, arch, need_available, named_by=(where, src)) for name in names]
        if len(out) > 1:
            out = [Selection(role=role, backend=s.backend, source=s.source, reason=f"{s.reason} (#{k + 1} of "
                             f"{len(out)})") for k, s in enumerate(out)]
        return out
    first = select_backend(mgr, role, None, config, arch, need_available)
    if role not in CHAIN_ROLES or first.backend.info.simulated:
        return [first]
    chain = [first]
    top = first.backend.info.auto_priority.get(role, 0)
    for c in _ranked_real(mgr, role):
        if c.name != first.name and c.info.auto_priority[role] <= top and c.availability(arch).available:
            chain.append(Selection(role=role, backend=c, source="auto", reason=f"next after {chain[-1].name}"))
    return chain


def _ranked_real(mgr: BackendManager, role: str) -> list[LoadedBackend]:
    """The real (not simulated) backends ranked for ``role`` by ``auto_priority``, best first."""
    return sorted((c for c in mgr.for_role(role) if role in c.info.auto_priority and not c.info.simulated),
                  key=lambda c: (-c.info.auto_priority[role], c.name))


def runs_with_a_gpu(backend: LoadedBackend) -> bool:
    """Available here, or lacking only a (matching) GPU (``Availability.needs_gpu``): a backend that lacks
    its configuration, such as gaia without a service URL, is no answer on any machine."""
    a = backend.availability(None)
    return a.available or a.needs_gpu


def real_auto_chain(mgr: BackendManager, role: str) -> list[Selection]:
    """The chain the automatic choice would give here with a GPU: the real backends ranked for ``role``,
    best first, that :func:`runs_with_a_gpu`. What a simulated run's figures would meet on hardware."""
    return [Selection(role=role, backend=c, source="auto", reason="ranked for a real target")
            for c in _ranked_real(mgr, role) if runs_with_a_gpu(c)]


def chain_label(chain: list[Selection]) -> str:
    """``templates,naive-dw``: how a chain is named in flags, state and reports."""
    return ",".join(s.name for s in chain)


def select_backend(mgr: BackendManager, role: str, flag: str | None = None,
                   config: dict[str, Any] | None = None, arch: ArchSpec | None = None,
                   need_available: bool = True, named_by: tuple[str, str] | None = None) -> Selection:
    """Select the backend for ``role``; with ``arch``, availability is judged for that target.
    ``need_available=False`` lets an explicitly named backend answer questions that need none of
    what it lacks here (a generator's ``supports`` needs no GPU)."""
    candidates = mgr.for_role(role)
    cfg_backends = (config or {}).get("backends", {}) if config else {}
    explicit: tuple[Any, str, str] | None = None
    if flag:
        explicit = (flag, *(named_by or (f"--{role}", "flag")))
    elif os.environ.get(ENV_VARS.get(role, "")):
        explicit = (os.environ[ENV_VARS[role]], f"${ENV_VARS[role]}", "env")
    elif isinstance(cfg_backends, dict) and cfg_backends.get(role):
        explicit = (cfg_backends[role], "ytk.toml [backends]", "config")
    if explicit:
        name, where, src = explicit
        if isinstance(name, list) or "," in str(name):
            names = _chain_names(name, where, role)
            if len(names) > 1:
                raise UsageError(f"{where} names {len(names)} {role} backends ({', '.join(names)}); this step takes "
                                 "one")
            name = names[0]
        b = mgr.get(name)
        if b is None or role not in b.info.roles:
            installed = ", ".join(c.name for c in candidates) or "none"
            extra = "" if b is None else f" ({name!r} is installed but serves {', '.join(b.info.roles)})"
            disabled = [w for w in mgr.warnings if f"{name!r}" in w and "disabled" in w]
            if b is None and disabled:  # installed, but its plugin could not be used: say why
                raise UsageError(f"{role} backend {name!r} (from {where}) is installed but disabled: {disabled[0]}")
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
