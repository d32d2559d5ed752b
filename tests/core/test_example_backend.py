"""contrib/backend-naive-dw: the example third-party backend that does real work, tried as its author
would -- installed beside ytk, checked with the conformance suite from its own folder, used through the
CLI -- and kept small enough to read in one sitting."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import site_env

EXAMPLE = REPO / "contrib" / "backend-naive-dw"
HOST_ARCH = "x86_64-sm90-linux-cu130-trt10"


@pytest.fixture(scope="module")
def site(tmp_path_factory):  # type: ignore[no-untyped-def]
    site = tmp_path_factory.mktemp("naive-site")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(site), str(EXAMPLE)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (site / "ytk_backend_naivedw" / "naive_dw.cuh").is_file(), "the .cuh ships as package data"
    return site


def test_it_stays_an_example_one_reads_in_one_sitting():
    lines = (EXAMPLE / "ytk_backend_naivedw" / "plugin.py").read_text().splitlines()
    assert len(lines) < 100, f"{len(lines)} lines: the README promises well under 100"


def test_the_conformance_suite_passes_from_the_backends_own_folder(site, tmp_path):
    own = tmp_path / "author-repo"
    own.mkdir()  # no conftest, no ytk test code: only the plugin ytk-hookspecs ships
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "ytk_hookspecs.testing", "--ytk-backend",
                        "naive-dw", "-rs"], cwd=own, capture_output=True, text=True, env=site_env(site), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert " passed" in p.stdout and " failed" not in p.stdout


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (the plugin build compiles CUDA)")
def test_generate_and_build_through_the_cli(site, tmp_path):
    from ytk_hookspecs.testing.regions import write_regions

    prep = tmp_path / "prepare"
    dw, ln = write_regions(prep, ["DwConv5x5s2C96HardSwish", "LayerNormC96"])
    ytk = str(Path(sys.executable).with_name("ytk"))
    src, so = tmp_path / "Dw.module_source.py", tmp_path / "Dw.so"
    r = subprocess.run([ytk, "kernelgen", "compile", "-r", str(dw.pt2), "-g", "H200", "--config",
                        "deployment_target=tensorrt", "-o", str(src), "--kernelgen", "naive-dw", "--json"],
                       capture_output=True, text=True, env=site_env(site))
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["status"] == "done" and out["contract"]["ok"] and Path(out["report"]).is_file()
    r = subprocess.run([ytk, "embedded", "build-plugin", "-a", HOST_ARCH, "--plugin-name", dw.candidate.name, "-s",
                        str(src), "-o", str(so), "--builder", "nvcc", "--json"], capture_output=True, text=True,
                       env=site_env(site))
    assert r.returncode == 0, r.stderr[-2000:]
    assert so.is_file() and json.loads(r.stdout)["description"]["name"] == dw.candidate.name
    # a region it does not take is refused up front, with its reason, and no job runs
    r = subprocess.run([ytk, "kernelgen", "compile", "-r", str(ln.pt2), "-g", "H200", "--config",
                        "deployment_target=tensorrt", "-o", str(tmp_path / "Ln.module_source.py"), "--kernelgen",
                        "naive-dw"], capture_output=True, text=True, env=site_env(site))
    assert r.returncode != 0 and "not a single conv" in r.stderr and "Traceback" not in r.stderr
