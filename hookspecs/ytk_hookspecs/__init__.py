"""ytk-hookspecs: what a yasp-toolkit backend depends on, and nothing heavier (no torch)."""

from . import specs
from .context import StageContext
from .markers import ENTRY_POINT_GROUP, PROJECT, hookimpl, hookspec

__version__ = "0.1.0"
__all__ = ["ENTRY_POINT_GROUP", "PROJECT", "StageContext", "hookimpl", "hookspec", "specs", "__version__"]
