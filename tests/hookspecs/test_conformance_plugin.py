"""The conformance suite as a backend author runs it: `pytest --ytk-backend NAME` in a directory of their own.

Each run is a real pytest subprocess in an empty directory, with the backend installed as a
distribution (an entry point in the group ``ytk``) beside the project's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO, Result

pytestmark = pytest.mark.slow

#: A kernel generator that claims every region and never delivers.
CLAIMS_ALL_FINISHES_NONE = '''
from ytk_hookspecs import hookimpl
from ytk_hookspecs.models import Availability, BackendInfo, KernelGenResult, SupportAnswer


class Braggart:
    info = BackendInfo(name="braggart", roles=["kernelgen"], description="claims everything, delivers nothing")

    def availability(self, arch=None):
        return Availability(available=True, reason="pure Python")

    def supports(self, request, ctx):
        return SupportAnswer(supported=True, why="anything goes", backend="braggart")

    def submit(self, request, ctx):
        return KernelGenResult(job_id="b-1", status="failed", message="not today")

    def fetch(self, job_id, output, ctx):
        return None


@hookimpl
def ytk_register_backends(register):
    register(Braggart())
'''


#: A kernel generator around the mock that refuses normalisations with certainty, yet its jobs deliver for them.
TWO_FACED = '''
from ytk_backend_mock.plugin import MockBackend
from ytk_hookspecs import hookimpl
from ytk_hookspecs.models import BackendInfo, SupportAnswer


class TwoFaced(MockBackend):
    info = BackendInfo(name="twofaced", roles=["kernelgen"], simulated=True,
                       description="simulated: says no to norms, generates them anyway")

    def supports(self, request, ctx):
        if request.candidate is not None and request.candidate.ops[0].op == "layer_norm":
            return SupportAnswer(supported=False, why="no norms here", backend="twofaced")
        return super().supports(request, ctx)


@hookimpl
def ytk_register_backends(register):
    register(TwoFaced())
'''


def _install_module(site: Path, dist: str, module: str, source: str) -> None:
    """Install ``module`` as distribution ``dist`` with an entry point in the group ``ytk`` (by hand: a
    module file and its dist-info, which is all importlib.metadata reads)."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[ytk]\n{module} = {module}\n")


def _conformance(tmp_path: Path, site: Path | None, *args: str) -> Result:
    """``pytest --ytk-backend ...`` run from an empty directory, as in a backend's own repository."""
    cwd = tmp_path / "repo"
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, "YTK_CACHE_DIR": str(tmp_path / "cache")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=900)
    return Result(p.returncode, p.stdout, p.stderr)


def test_the_mock_passes_from_a_repository_of_its_own(tmp_path):
    r = _conformance(tmp_path, None, "--ytk-backend", "mock", "-rs")
    assert r.code == 0, r.stdout[-4000:]
    assert " passed" in r.stdout and "failed" not in r.stdout


def test_a_generator_that_declines_every_region_fails(tmp_path):
    """The shipped template declines every region: conformance must fail it, and say why."""
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(site), str(REPO / "contrib" / "backend-template")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    r = _conformance(tmp_path, site, "--ytk-backend", "example")
    assert r.code == 1, r.stdout[-4000:]
    assert "FAILED" in r.stdout and "test_generator_finishes_a_region_it_claims[example]" in r.stdout
    assert "example declines every region of the suite" in r.stdout
    assert "DwConv3x3C64: supported=False, this template generates no kernel" in r.stdout


def test_a_generator_that_claims_everything_and_finishes_nothing_fails(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_module(site, "ytk-backend-braggart", "ytk_backend_braggart", CLAIMS_ALL_FINISHES_NONE)
    r = _conformance(tmp_path, site, "--ytk-backend", "braggart", "--ytk-region", "DwConv3x3C64",
                     "--ytk-region", "LayerNormC96")
    assert r.code == 1, r.stdout[-4000:]
    assert "braggart claims 2 region(s) but finishes none" in r.stdout
    assert "DwConv3x3C64: failed: not today" in r.stdout
    # only that test fails: it loads, satisfies its protocols, answers every region and ends its jobs
    assert r.stdout.splitlines()[-1].startswith("1 failed, 6 passed"), r.stdout[-4000:]


def test_a_backend_that_is_not_installed_fails_with_what_did_load(tmp_path):
    r = _conformance(tmp_path, None, "--ytk-backend", "nosuch")
    assert r.code == 1, r.stdout[-4000:]
    line = next(ln for ln in r.stdout.splitlines() if "no backend named 'nosuch' loaded" in ln)
    assert "(installed: " in line and "mock" in line and "templates" in line
    assert " 4 errors in " in r.stdout.splitlines()[-1]  # the four tests every backend runs stop there


def test_a_generator_whose_jobs_ignore_its_own_refusals_fails(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_module(site, "ytk-backend-twofaced", "ytk_backend_twofaced", TWO_FACED)
    r = _conformance(tmp_path, site, "--ytk-backend", "twofaced", "--ytk-region", "DwConv3x3C64",
                     "--ytk-region", "LayerNormC96")
    assert r.code == 1, r.stdout[-4000:]
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith("FAILED")]
    assert len(failed) == 1 and "test_a_region_refused_for_certain_gets_no_kernel[twofaced]" in failed[0], failed
    assert "LayerNormC96 was refused (no norms here) but its job delivered a kernel" in r.stdout


# -- a backend's own repository: nvcc on PATH, no nvcc builder installed ----------------------------------------
def _alone(tmp_path: Path, source) -> None:  # type: ignore[no-untyped-def]
    """Run the suite's bare-nvcc compile check on one kernel source, with a loader that has no nvcc builder."""
    from types import SimpleNamespace

    from ytk_hookspecs.testing import _LOADER
    from ytk_hookspecs.testing.suite import test_done_kernels_compile_with_nvcc_alone as check

    path = source.write(tmp_path / "src" / "Relu.module_source.py")
    done = SimpleNamespace(result=SimpleNamespace(source=path), output=path,
                           region=SimpleNamespace(candidate=SimpleNamespace(name="Relu")))
    config = SimpleNamespace(stash=pytest.Stash())
    config.stash[_LOADER] = SimpleNamespace(get=lambda name: None)
    (tmp_path / "work").mkdir()
    check(SimpleNamespace(done=[done], arch="x86_64-sm90-linux-cu130-trt10"), SimpleNamespace(config=config),
          tmp_path / "work")


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc not installed")
def test_without_the_nvcc_builder_a_bare_nvcc_still_compiles_every_done_kernel(tmp_path: Path) -> None:
    from ytk_hookspecs.kernel_source import KernelSource
    from ytk_hookspecs.testing.kernels import relu_source

    good = relu_source("Relu")
    _alone(tmp_path / "good", good)  # the builder's includes + header + source compile and define the launcher
    misnamed = KernelSource(header=good.header, source=good.source.replace("Relu_launch(", "Relu_run("),
                            meta=good.meta)
    with pytest.raises(AssertionError, match="defines no extern"):
        _alone(tmp_path / "misnamed", misnamed)
    broken = KernelSource(header=good.header, source=good.source.replace("n == 0", "n == "), meta=good.meta)
    with pytest.raises(AssertionError, match="nvcc exit"):
        _alone(tmp_path / "broken", broken)
