"""Swapping is one setting: builder nvcc -> gaia (flag, environment or ytk.toml) gives a plugin with the
same self-description that passes build-plugin's and compile's checks; the autoloop's concurrent kernel
jobs run against the service."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.gaia.conftest import HOST_ARCH, PLUGIN, client_env
from ytk_hookspecs.nodes import custom_nodes, match_plugins
from ytk_hookspecs.plugin_info import read_plugin_description

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (the service builds with it)")


def build(src: Path, out: Path, env: dict[str, str], *extra: str):  # type: ignore[no-untyped-def]
    return run_cli("embedded", "build-plugin", "-a", HOST_ARCH, "--plugin-name", PLUGIN, "-s", str(src), "-o",
                   str(out), "--json", *extra, env=env)


def test_nvcc_and_gaia_give_the_same_plugin(region, service, tmp_path):
    d, src = region
    env = client_env(service.url)
    here = build(src, tmp_path / "nvcc" / f"{PLUGIN}.so", env, "--builder", "nvcc")
    assert here.code == 0, here.stderr
    # the same command, the builder swapped through the environment ...
    there = build(src, tmp_path / "gaia" / f"{PLUGIN}.so", {**env, "YTK_BUILDER": "gaia"})
    assert there.code == 0, there.stderr
    # ... or through ytk.toml
    (tmp_path / "ytk.toml").write_text('[backends]\nbuilder = "gaia"\n')
    toml = build(src, tmp_path / "toml" / f"{PLUGIN}.so", {**env, "YTK_CONFIG": str(tmp_path / "ytk.toml")})
    assert toml.code == 0, toml.stderr
    a, b, c = here.json(), there.json(), toml.json()
    assert a["builder_selection"].startswith("builder=nvcc") and b["builder_selection"].startswith("builder=gaia")
    assert c["builder_selection"].startswith("builder=gaia (config")
    assert a["description"] == b["description"] == c["description"]
    assert a["contract"] == b["contract"] and a["admission"]["status"] == b["admission"]["status"]
    descs = [read_plugin_description(Path(r["so_path"])) for r in (a, b)]
    assert descs[0] == descs[1] and descs[0].builder.startswith("ytk-backend-nvcc")  # built by nvcc, either way
    # compile's own check: every custom-op node of the carved ONNX resolves to the plugin, for both
    from ytk_core.stages.compile import _read_plugins

    nodes = custom_nodes(d / "model.onnx")
    for r in (a, b):
        match = match_plugins(nodes, _read_plugins([Path(r["so_path"])]), "fp16", sm=90, simulated_engine=True)
        assert not match.errors and not match.unused and len(match.matches) == 2, match


def test_concurrent_kernel_jobs_like_the_autoloop(region, service, tmp_path):
    """The autoloop runs run_kernelgen_compile on a thread pool: four at once against the service."""
    d, _ = region
    env = client_env(service.url)

    def one(i: int):  # type: ignore[no-untyped-def]
        out = tmp_path / str(i) / f"{PLUGIN}.module_source.py"
        return run_cli("kernelgen", "compile", "-r", str(d / "plugin_candidates" / f"{PLUGIN}.pt2"), "-g", "Orin",
                       "--config", "deployment_target=tensorrt", "--config", f"mock_bandwidth_fraction=0.{i + 1}",
                       "-o", str(out), "--kernelgen", "gaia", "--json", env=env)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(4)))
    assert all(r.code == 0 for r in results), [r.stderr for r in results if r.code]
    ids = {json.loads(r.stdout)["job_id"] for r in results}
    assert len(ids) == 4


def test_the_autoloop_on_a_simulated_target_builds_simulated_plugins(monkeypatch):
    """On a machine without a GPU the engine is the simulated Orin; pointing the client at a service (as
    docs/gaia.md says: YTK_GAIA_URL) made the service's nvcc the automatic builder, which refuses the
    placeholders of a mock generator there, so every region was dropped (1.00x, exit 0)."""
    from ytk_core.autoloop.run import resolve_backends
    from ytk_core.autoloop.state import BackendChoice
    from ytk_core.runtime import reset_runtime

    for k in ("YTK_ENGINE", "YTK_KERNELGEN", "YTK_BUILDER", "YTK_CONFIG"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("YTK_GAIA_URL", "http://127.0.0.1:9")  # configured is enough: choosing asks nothing
    reset_runtime()
    try:
        b = resolve_backends("arm64-sm87-dos6010-cu114-trt86", BackendChoice(), remote_engine="mock")
        assert (b.engine, b.kernelgen, b.builder) == ("mock", "gaia", "mock")
        monkeypatch.setenv("YTK_BUILDER", "gaia")  # a builder the user names is kept
        reset_runtime()
        again = resolve_backends("arm64-sm87-dos6010-cu114-trt86", BackendChoice(), remote_engine="mock")
        assert again.builder == "gaia"
    finally:
        reset_runtime()
