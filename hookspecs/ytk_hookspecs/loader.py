"""Loading plugins and collecting the backend objects they register, as ytk does it.

The core's plugin manager and the conformance suite (:mod:`ytk_hookspecs.testing`) both load
through :class:`PluginLoader`, so a backend that passes conformance is one ytk loads. Every
load-time failure of one plugin -- an import error, a hook name that matches no hookspec, a
hookimpl whose arguments the hook does not have, a raising :func:`~ytk_hookspecs.specs.ytk_register_backends`
-- disables that plugin with one warning naming it and the cause; an object that does not satisfy
the protocols of its roles (:func:`ytk_hookspecs.roles.backend_problems`) or whose name is taken is
disabled on its own. Nothing here raises for a broken plugin.
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pluggy

from . import specs
from .markers import ENTRY_POINT_GROUP, PROJECT
from .models import ArchSpec, Availability, BackendInfo
from .roles import backend_problems

__all__ = ["LoadedBackend", "PluginLoader"]

#: Hooks of the first plugin API (one function per stage), named in the warning a plugin still using them gets.
_RETIRED_HOOKS = ("ytk_register_backend", "ytk_trace", "ytk_carve", "ytk_engine_compile", "ytk_engine_profile",
                  "ytk_kernelgen_submit", "ytk_kernelgen_fetch", "ytk_kernelgen_supports", "ytk_build_plugin")


@dataclass
class LoadedBackend:
    """One registered backend object (``impl``), its validated ``info`` and where it came from."""

    impl: Any
    info: BackendInfo
    plugin_name: str
    distribution: str
    _availability: dict[str, Availability] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.info.name

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        """``impl.availability(arch)``, asked once per target; a backend without it is available, and
        one whose answer raises or is no :class:`~ytk_hookspecs.models.Availability` is not."""
        key = arch.spec if arch is not None else ""
        if key not in self._availability:
            probe = getattr(self.impl, "availability", None)
            if probe is None:
                res = Availability(available=True, reason="no availability probe declared")
            else:
                try:
                    res = probe(arch)
                    if not isinstance(res, Availability):
                        res = Availability(available=False, reason=f"availability() returned "
                                                                   f"{type(res).__name__}, not Availability")
                except Exception as e:  # a broken probe must not take ytk down
                    res = Availability(available=False, reason=f"availability probe failed: {type(e).__name__}: "
                                                               f"{_first_line(e)}")
            self._availability[key] = res
        return self._availability[key]


class PluginLoader:
    """A pluggy manager for the ``ytk`` hooks plus the backends its plugins registered.

    Add plugins with :meth:`add` and :meth:`add_entry_points`, then call :meth:`collect` once.
    ``warnings`` holds one line per disabled plugin or object; ``backends`` maps names to
    :class:`LoadedBackend`.
    """

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(specs)
        self.warnings: list[str] = []
        self.backends: dict[str, LoadedBackend] = {}
        self._dist: dict[str, str] = {}

    def warn(self, message: str) -> None:
        """Record one load-time warning (the core also logs it)."""
        self.warnings.append(message)

    # -- loading --------------------------------------------------------------------------------
    def add(self, plugin: Any, name: str, distribution: str) -> None:
        """Register ``plugin`` (a module or object with hookimpls) as ``name`` from ``distribution``."""
        if self.pm.has_plugin(name):
            self.warn(f"backend plugin {name!r} from {distribution} is already registered by "
                      f"{self._dist.get(name, '?')}; ignoring the second one")
            return
        try:
            self.pm.register(plugin, name=name)
        except pluggy.PluginValidationError as e:  # e.g. a hookimpl whose arguments the hook does not have
            # pluggy < 1.7 (1.6.0 on the GPU machine) leaves a plugin that fails validation registered, with the
            # hookimpls it checked before the failing one; 1.7 registers nothing. Disabled means disabled.
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            self.warn(f"backend plugin {name!r} from {distribution} is disabled: {_first_line(e)}")
            return
        except Exception as e:  # a plugin object pluggy cannot even inspect
            self.warn(f"backend plugin {name!r} from {distribution} failed to load and is disabled: "
                      f"{type(e).__name__}: {_first_line(e)}")
            return
        self._dist[name] = distribution

    def add_entry_points(self, group: str = ENTRY_POINT_GROUP) -> None:
        """Import and add every plugin installed under the entry-point ``group``."""
        for ep in md.entry_points(group=group):
            dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "unknown distribution"
            try:
                plugin = ep.load()
            except Exception as e:
                self.warn(f"backend package {dist} (entry point {ep.name!r} = {ep.value}) failed to "
                          f"import and is disabled: {type(e).__name__}: {_first_line(e)}")
                continue
            self.add(plugin, ep.name, dist)

    def collect(self) -> None:
        """Disable plugins implementing unknown hooks, then collect every plugin's backend objects."""
        self._drop_unknown_hooks()
        for impl in self.pm.hook.ytk_register_backends.get_hookimpls():
            self._collect_from(impl)

    def _drop_unknown_hooks(self) -> None:
        known = list(specs.__all__)
        for hook_name, caller in list(self.pm.hook.__dict__.items()):
            if hook_name.startswith("_") or not isinstance(caller, pluggy.HookCaller) or caller.spec is not None:
                continue
            for impl in caller.get_hookimpls():
                if impl.optionalhook or not self.pm.is_registered(impl.plugin):
                    continue
                pname = self.pm.get_name(impl.plugin) or "?"
                if hook_name in _RETIRED_HOOKS:
                    hint = (" (stage hooks were replaced by backend objects: implement ytk_register_backends and "
                            "register objects with the methods of ytk_hookspecs.roles)")
                else:
                    close = difflib.get_close_matches(hook_name, known, n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else f"; valid hooks: {', '.join(known)}"
                # one broken plugin must not take every command down (``--help`` included): it goes, with a
                # warning naming it and the hook
                self.warn(f"backend plugin {pname!r} from {self._dist.get(pname, '?')} is disabled: it implements "
                          f"hook {hook_name!r}, which is no ytk hook{hint}")
                self.pm.unregister(impl.plugin)

    def _collect_from(self, hookimpl: Any) -> None:
        pname = self.pm.get_name(hookimpl.plugin) or "?"
        dist = self._dist.get(pname, "?")
        objects: list[Any] = []
        try:
            hookimpl.function(register=objects.append)
        except Exception as e:
            self.warn(f"backend plugin {pname!r} from {dist} failed to register and is disabled: "
                      f"{type(e).__name__}: {_first_line(e)}")
            self.pm.unregister(hookimpl.plugin)
            return
        for obj in objects:
            self._accept(obj, pname, dist)

    def _accept(self, obj: Any, pname: str, dist: str) -> None:
        problems = backend_problems(obj)
        label = _label(obj)
        if problems:
            self.warn(f"backend {label} from {dist} is disabled: {'; '.join(problems)}")
            return
        info = obj.info if isinstance(obj.info, BackendInfo) else BackendInfo.model_validate(obj.info)
        if info.name in self.backends:
            other = self.backends[info.name]
            self.warn(f"backend name {info.name!r} from {dist} is already taken by {other.distribution}; "
                      f"ignoring the one from {dist}")
            return
        self.backends[info.name] = LoadedBackend(impl=obj, info=info, plugin_name=pname, distribution=dist)

    # -- queries --------------------------------------------------------------------------------
    def for_role(self, role: str) -> list[LoadedBackend]:
        """The backends serving ``role``, by name."""
        return sorted((b for b in self.backends.values() if role in b.info.roles), key=lambda b: b.name)

    def get(self, name: str) -> LoadedBackend | None:
        return self.backends.get(name)

    def __iter__(self) -> Iterator[LoadedBackend]:
        return iter(sorted(self.backends.values(), key=lambda b: b.name))

    # -- CLI extension --------------------------------------------------------------------------
    def add_cli_commands(self, cli: Any) -> None:
        """Let every plugin add CLI commands (:func:`~ytk_hookspecs.specs.ytk_cli_commands`); one that
        raises is a warning."""
        for impl in self.pm.hook.ytk_cli_commands.get_hookimpls():
            pname = self.pm.get_name(impl.plugin) or "?"
            try:
                impl.function(cli=cli)
            except Exception as e:
                self.warn(f"backend plugin {pname!r} from {self._dist.get(pname, '?')} failed to add its CLI "
                          f"commands: {type(e).__name__}: {_first_line(e)}")


def _label(obj: Any) -> str:
    """How a warning names an object: its declared name when it has one, else its type."""
    info = getattr(obj, "info", None)
    name = getattr(info, "name", None) or (info.get("name") if isinstance(info, dict) else None)
    return repr(name) if isinstance(name, str) else f"object {type(obj).__name__}"


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
