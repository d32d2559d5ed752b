"""On a GPU machine (the H200): the service runs the templates generator on its GPU, and a region's kernel
from the service is the one the local templates generator makes. Skipped without a CUDA GPU; run with
``pytest -q -m gpu tests/gaia`` (docs/gaia.md, "On the H200")."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.gaia.conftest import PLUGIN, Service, client_env

pytestmark = pytest.mark.gpu


def test_templates_on_the_service_match_the_local_generator(region, tmp_path):
    d, _ = region
    svc = Service(tmp_path / "state", "--generator", "templates")
    try:
        outs = {}
        for gen, env in (("templates", client_env(svc.url)), ("gaia", client_env(svc.url))):
            out = tmp_path / gen / f"{PLUGIN}.module_source.py"
            r = run_cli("kernelgen", "compile", "-r", str(d / "plugin_candidates" / f"{PLUGIN}.pt2"), "-g", "H200",
                        "--config", "deployment_target=tensorrt", "-o", str(out), "--kernelgen", gen, "--json",
                        env=env)
            assert r.code == 0, r.stderr
            outs[gen] = r.json()
        assert outs["gaia"]["contract"]["ok"] and outs["templates"]["contract"]["ok"]
        assert outs["gaia"]["kernel_report"]["winner"] == outs["templates"]["kernel_report"]["winner"]
    finally:
        svc.stop()
