"""The core's plugin manager: the built-in frontend and every installed plugin, loaded as any plugin is.

Loading, validation and the warnings for broken plugins are :class:`ytk_hookspecs.loader.PluginLoader`'s
(the conformance suite loads backends the same way); this adds what only the core does: the built-in
plugins, ``YTK_DISABLE_PLUGIN_AUTOLOAD``, in-process plugins for tests, and logging each warning once.
Stages call methods on the backend object a :class:`~ytk_core.plugins.selection.Selection` holds
(``sel.backend.impl``), never a hook broadcast.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ytk_hookspecs.loader import PluginLoader

from ..logs import get_logger

#: Core features are plugins too, registered by the same mechanism third parties use.
BUILTIN_PLUGINS: dict[str, str] = {"torch-export": "ytk_core.frontend.plugin"}

AUTOLOAD_ENV = "YTK_DISABLE_PLUGIN_AUTOLOAD"


class BackendManager(PluginLoader):
    """Every backend of this invocation: built-in, installed (unless autoload is off) and in-process."""

    def __init__(self, autoload: bool | None = None, extra_plugins: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.log = get_logger(component="plugins")
        for name, modname in BUILTIN_PLUGINS.items():
            self.add(importlib.import_module(modname), name, "yasp-toolkit (built-in)")
        if autoload is None:
            autoload = os.environ.get(AUTOLOAD_ENV, "") not in ("1", "true", "yes")
        if autoload:
            self.add_entry_points()
        for name, plugin in (extra_plugins or {}).items():
            self.add(plugin, name, f"{name} (registered in-process)")
        self._logged = 0
        self.collect()

    def all_simulated(self, names: list[str]) -> bool:
        """Whether every backend named (empty names skipped) is installed and a simulator."""
        found = [self.get(n) for n in names if n]
        return all(b is not None and b.info.simulated for b in found)

    def log_warnings(self) -> None:
        """Log the load warnings not logged yet, once each. The CLI calls it once ``-q`` and
        ``--log-format`` are in effect (the plugins load before they are parsed), except for
        ``ytk backends``, whose report lists them itself."""
        for message in self.warnings[self._logged:]:
            self.log.warning(message)
        self._logged = len(self.warnings)
