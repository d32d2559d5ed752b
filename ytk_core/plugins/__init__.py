"""Plugin manager and per-role backend selection."""

from .manager import BackendManager
from .selection import Selection, select_backend

__all__ = ["BackendManager", "Selection", "select_backend"]
