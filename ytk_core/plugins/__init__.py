"""Plugin manager and per-role backend selection."""

from .manager import BackendManager, RegisteredBackend
from .selection import Selection, select_backend

__all__ = ["BackendManager", "RegisteredBackend", "Selection", "select_backend"]
