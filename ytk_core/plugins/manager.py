"""Loads backends (built-in and entry points), validates them, and calls ONE backend's hook.

Modelled on conda's and pytest's plugin managers: backends register through a callback so the
core validates and de-duplicates in one place; a broken third-party package is a warning naming
its distribution, and a hook implementation with no matching hookspec is an error at load time.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import importlib.metadata as md
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pluggy
from pydantic import ValidationError

from ytk_hookspecs import ENTRY_POINT_GROUP, PROJECT, specs
from ytk_hookspecs.models import ArchSpec, Availability, BackendInfo

from ..errors import BackendError, YtkError
from ..logs import get_logger

#: Hook implemented for each stage name.
STAGE_HOOKS: dict[str, tuple[str, ...]] = {
    "trace": ("ytk_trace",),
    "carve": ("ytk_carve",),
    "kernelgen": ("ytk_kernelgen_submit",),
    "build_plugin": ("ytk_build_plugin",),
    "compile": ("ytk_engine_compile",),
    "profile": ("ytk_engine_profile",),
}

#: Hooks a backend may leave unanswered (None): fetch of a job it does not know, supports when it
#: cannot tell before the job (the core then lets the job decide).
OPTIONAL_ANSWERS = ("ytk_kernelgen_fetch", "ytk_kernelgen_supports")

#: Core features are plugins too, registered by the same mechanism third parties use.
BUILTIN_PLUGINS: dict[str, str] = {"torch-export": "ytk_core.frontend.plugin"}

AUTOLOAD_ENV = "YTK_DISABLE_PLUGIN_AUTOLOAD"


@dataclass
class RegisteredBackend:
    info: BackendInfo
    plugin: Any
    plugin_name: str
    distribution: str
    probe: Callable[..., Availability] | None = None
    _availability: dict[str, Availability] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.info.name

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        """Probe once per target: a probe that takes an ``arch`` argument can answer per target
        (e.g. a builder that cannot cross-compile for aarch64 on this host)."""
        key = arch.spec if arch is not None else ""
        if key not in self._availability:
            if self.probe is None:
                res = Availability(available=True, reason="no probe declared")
            else:
                try:
                    takes_arch = "arch" in inspect.signature(self.probe).parameters
                    res = self.probe(arch=arch) if takes_arch else self.probe()
                    if not isinstance(res, Availability):
                        res = Availability(available=False,
                                           reason=f"probe returned {type(res).__name__}, not Availability")
                except Exception as e:  # a broken probe must not take ytk down
                    res = Availability(available=False, reason=f"availability probe failed: {e}")
            self._availability[key] = res
        return self._availability[key]


class BackendManager:
    """Owns the pluggy manager and the registered backends."""

    def __init__(self, autoload: bool | None = None, extra_plugins: dict[str, Any] | None = None) -> None:
        self.log = get_logger(component="plugins")
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(specs)
        self.warnings: list[str] = []
        self.backends: dict[str, RegisteredBackend] = {}
        self._dist: dict[str, str] = {}
        for name, modname in BUILTIN_PLUGINS.items():
            self._register(importlib.import_module(modname), name, "yasp-toolkit (built-in)")
        if autoload is None:
            autoload = os.environ.get(AUTOLOAD_ENV, "") not in ("1", "true", "yes")
        if autoload:
            self._load_entry_points()
        for name, obj in (extra_plugins or {}).items():
            self._register(obj, name, f"{name} (registered in-process)")
        self._check_pending()
        self._collect_registrations()

    # -- loading --------------------------------------------------------------------------------
    def _warn(self, msg: str) -> None:
        self.warnings.append(msg)
        self.log.warning(msg)

    def _register(self, obj: Any, name: str, dist: str) -> None:
        if self.pm.has_plugin(name):
            self._warn(f"backend plugin {name!r} from {dist} is already registered by "
                       f"{self._dist.get(name, '?')}; ignoring the second one")
            return
        try:
            self.pm.register(obj, name=name)
        except pluggy.PluginValidationError as e:  # e.g. a hookimpl whose arguments the hook does not have
            self._warn(f"backend plugin {name!r} from {dist} is disabled: {_first_line(e)}")
            return
        except Exception as e:  # a plugin object pluggy cannot even inspect
            self._warn(f"backend plugin {name!r} from {dist} failed to load and is disabled: "
                       f"{type(e).__name__}: {_first_line(e)}")
            return
        self._dist[name] = dist

    def _load_entry_points(self) -> None:
        for ep in md.entry_points(group=ENTRY_POINT_GROUP):
            dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "unknown distribution"
            try:
                obj = ep.load()
            except Exception as e:
                self._warn(f"backend package {dist} (entry point {ep.name!r} = {ep.value}) failed to "
                           f"import and is disabled: {type(e).__name__}: {e}")
                continue
            self._register(obj, ep.name, dist)

    def _check_pending(self) -> None:
        known = [h for h in dir(specs) if h.startswith("ytk_")]
        for name, hook in self.pm.hook.__dict__.items():
            if name.startswith("_") or not isinstance(hook, pluggy.HookCaller):
                continue
            if hook.spec is not None:
                continue
            for impl in hook.get_hookimpls():
                if impl.optionalhook or not self.pm.is_registered(impl.plugin):
                    continue
                pname = self.pm.get_name(impl.plugin) or "?"
                close = difflib.get_close_matches(name, known, n=1)
                # one broken plugin must not take every command down (``--help`` included): it goes, with
                # a warning that names it and the hook
                self._warn(f"backend plugin {pname!r} from {self._dist.get(pname, '?')} is disabled: it "
                           f"implements hook {name!r}, which is no ytk hook"
                           + (f" (did you mean {close[0]!r}?)" if close else f"; valid hooks: {', '.join(known)}"))
                self.pm.unregister(impl.plugin)

    def _collect_registrations(self) -> None:
        for impl in self.pm.hook.ytk_register_backend.get_hookimpls():
            pname = self.pm.get_name(impl.plugin) or "?"
            dist = self._dist.get(pname, "?")
            calls: list[tuple[Any, Any]] = []

            def register(info: Any, probe: Callable[[], Availability] | None = None) -> None:
                calls.append((info, probe))

            try:
                impl.function(register=register)
                if len(calls) != 1:
                    raise ValueError(f"called register() {len(calls)} times; exactly once is required")
                info, probe = calls[0]
                if not isinstance(info, BackendInfo):
                    info = BackendInfo.model_validate(info)
            except (Exception, ValidationError) as e:
                self._warn(f"backend plugin {pname!r} from {dist} failed to register and is disabled: "
                           f"{type(e).__name__}: {e}")
                self.pm.unregister(impl.plugin)
                continue
            if info.name in self.backends:
                other = self.backends[info.name]
                self._warn(f"backend name {info.name!r} from {dist} is already taken by "
                           f"{other.distribution}; ignoring the one from {dist}")
                self.pm.unregister(impl.plugin)
                continue
            missing = [h for st in info.stages() for h in STAGE_HOOKS[st] if not self._implements(impl.plugin, h)]
            if missing:
                self._warn(f"backend {info.name!r} from {dist} declares roles {info.roles} but does not "
                           f"implement {', '.join(missing)}; it is disabled")
                self.pm.unregister(impl.plugin)
                continue
            self.backends[info.name] = RegisteredBackend(info=info, plugin=impl.plugin, plugin_name=pname,
                                                         distribution=dist, probe=probe)

    def _implements(self, plugin: Any, hook: str) -> bool:
        caller = getattr(self.pm.hook, hook, None)
        return caller is not None and any(i.plugin is plugin for i in caller.get_hookimpls())

    # -- queries --------------------------------------------------------------------------------
    def for_role(self, role: str) -> list[RegisteredBackend]:
        return sorted((b for b in self.backends.values() if role in b.info.roles), key=lambda b: b.name)

    def get(self, name: str) -> RegisteredBackend | None:
        return self.backends.get(name)

    # -- calling --------------------------------------------------------------------------------
    def call(self, backend: RegisteredBackend, hook: str, **kwargs: Any) -> Any:
        """Call ``hook`` on ``backend`` only (never a broadcast across backends)."""
        if hook not in {h for hs in STAGE_HOOKS.values() for h in hs} | set(OPTIONAL_ANSWERS):
            raise ValueError(f"{hook} is not a stage hook")
        others = [p for p in self.pm.get_plugins() if p is not backend.plugin]
        caller = self.pm.subset_hook_caller(hook, remove_plugins=others)
        result = caller(**kwargs)
        if result is None and hook not in OPTIONAL_ANSWERS:
            raise BackendError(f"backend {backend.name!r} returned nothing from {hook}; it does not implement "
                               "this stage")
        return result

    def broadcast_cli(self, cli: Any) -> None:
        """Let every plugin add CLI commands; one that fails is a warning."""
        for impl in self.pm.hook.ytk_cli_commands.get_hookimpls():
            pname = self.pm.get_name(impl.plugin) or "?"
            try:
                impl.function(cli=cli)
            except Exception as e:
                self._warn(f"backend plugin {pname!r} from {self._dist.get(pname, '?')} failed to add its CLI "
                           f"commands: {type(e).__name__}: {e}")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
