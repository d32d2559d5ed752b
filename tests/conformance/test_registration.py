"""Backend conformance, part 1: every installed backend registers a valid, honest declaration.

Parametrized over whatever is installed, so a new backend package joins by being installed.
Stage-level conformance (engine bundles, kernel contracts, plugin self-descriptions) lives beside
this file and is parametrized the same way.
"""

from __future__ import annotations

import pytest

from ytk_core.plugins import BackendManager
from ytk_hookspecs.models import Availability
from ytk_hookspecs.roles import backend_problems

MGR = BackendManager()
BACKENDS = sorted(MGR.backends)


def test_no_load_warnings():
    assert MGR.warnings == []


@pytest.mark.parametrize("name", BACKENDS)
def test_declaration_is_complete(name):
    b = MGR.backends[name]
    assert b.info.roles and b.info.description
    assert backend_problems(b.impl) == []


@pytest.mark.parametrize("name", BACKENDS)
def test_availability_probe_is_honest(name):
    av = MGR.backends[name].availability()
    assert isinstance(av, Availability)
    assert av.reason, "a probe must say why (available or not)"


@pytest.mark.parametrize("name", BACKENDS)
def test_simulated_backends_say_so(name):
    b = MGR.backends[name]
    if b.info.simulated:
        assert "simulat" in b.info.description.lower()
