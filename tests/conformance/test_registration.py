"""What the shipped suite cannot see from outside the core: the core loads every installed backend
cleanly, and its built-in frontend (registered by the core, not an entry point) is a valid backend."""

from __future__ import annotations

from ytk_core.frontend.plugin import TorchExportFrontend
from ytk_core.plugins import BackendManager
from ytk_hookspecs.roles import backend_problems


def test_the_core_loads_every_installed_backend_without_warnings():
    assert BackendManager().warnings == []


def test_the_builtin_frontend_is_a_valid_backend():
    frontend = TorchExportFrontend()
    assert backend_problems(frontend) == []
    av = frontend.availability()
    assert av.available and av.reason
