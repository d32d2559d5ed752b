"""ytk-hookspecs: what a yasp-toolkit backend depends on, and nothing heavier (no torch).

A backend package registers objects (:mod:`ytk_hookspecs.roles`) from the
:func:`~ytk_hookspecs.specs.ytk_register_backends` hook of a module under the entry-point group
``ytk``; requests and results are the models of :mod:`ytk_hookspecs.models`.
"""

from . import specs
from .context import StageContext
from .markers import ENTRY_POINT_GROUP, PROJECT, hookimpl, hookspec
from .roles import Backend, BuilderBackend, EngineBackend, FrontendBackend, KernelGenBackend

__version__ = "0.1.0"
__all__ = ["ENTRY_POINT_GROUP", "PROJECT", "Backend", "BuilderBackend", "EngineBackend", "FrontendBackend",
           "KernelGenBackend", "StageContext", "hookimpl", "hookspec", "specs", "__version__"]
