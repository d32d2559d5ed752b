"""On a GPU machine (the H200): the service runs the templates generator on its GPU, and a region's kernel
from the service is the one the local templates generator makes. Skipped without a CUDA GPU; run with
``pytest -q -m gpu tests/gaia`` (docs/gaia.md, "On the H200")."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.gaia.conftest import PLUGIN, Service, client_env

pytestmark = pytest.mark.gpu


def test_templates_on_the_service_match_the_local_generator(region, tmp_path):
    import torch

    d, _ = region
    svc = Service(tmp_path / "state", generator="templates")
    try:
        outs, gpu = {}, torch.cuda.get_device_name()
        for gen, env in (("templates", client_env(svc.url)), ("gaia", client_env(svc.url))):
            out = tmp_path / gen / f"{PLUGIN}.module_source.py"
            r = run_cli("kernelgen", "compile", "-r", str(d / "plugin_candidates" / f"{PLUGIN}.pt2"), "-g", gpu,
                        "--config", "deployment_target=tensorrt", "-o", str(out), "--kernelgen", gen, "--json",
                        env=env)
            assert r.code == 0, r.stderr
            outs[gen] = r.json()
        assert outs["gaia"]["contract"]["ok"] and outs["templates"]["contract"]["ok"]
        rep = {g: outs[g]["kernel_report"] for g in outs}
        assert not rep["gaia"]["simulated"]  # the service's templates generator ran, not its mock
        variants = {g: sorted(c["variant"] for c in rep[g]["candidates"] if not c["variant"].startswith("dispatch["))
                    for g in rep}  # a per-shape dispatch is built only when its timed parts pay
        assert variants["gaia"] == variants["templates"]
        # the same winner, or one as fast within timing noise: two scoring runs on one GPU
        local = {c["variant"]: sum(c["time_ms_per_site"]) if c["time_ms_per_site"] else float("inf")
                 for c in rep["templates"]["candidates"]}
        won, won_here = rep["gaia"]["winner"], rep["templates"]["winner"]
        assert won == won_here or local.get(won, float("inf")) <= 1.1 * local[won_here], (won, won_here, local)
    finally:
        svc.stop()
