"""contrib/backend-template installs as a real distribution, shows up, is selectable and called."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers import site_env


@pytest.fixture(scope="module")
def template_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(site), str(REPO / "contrib" / "backend-template")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return site


def test_template_is_listed(template_site):
    r = run_cli("backends", "--json", env=site_env(template_site))
    assert r.code == 0, r.stderr
    ex = {b["name"]: b for b in r.json()["backends"]}["example"]
    assert ex["roles"] == ["kernelgen"] and ex["available"] is True
    assert ex["distribution"].startswith("ytk-backend-example")
    # Installed but never picked automatically.
    assert r.json()["selected"]["kernelgen"] != "example"


def test_template_is_selected_and_its_generator_called(template_site):
    code = (
        "from ytk_core.plugins import BackendManager, select_backend\n"
        "from ytk_hookspecs import StageContext\n"
        "from ytk_hookspecs.models import KernelGenRequest\n"
        "m = BackendManager(); s = select_backend(m, 'kernelgen', None, {'backends': {'kernelgen': 'example'}})\n"
        "r = s.backend.impl.submit(KernelGenRequest(reference='r.pt2', gpu='Orin', output='o.py'), StageContext())\n"
        "print(s.name, s.source, r.job_id, r.status)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, **site_env(template_site)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["example", "config", "example-0", "failed"]
