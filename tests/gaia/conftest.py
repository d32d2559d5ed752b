"""A real Gaia service on loopback (``ytk worker gaia`` in a subprocess: the mock generator, the nvcc
builder) and the carved region to send it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.kronos.conftest import Worker, free_port

KEY = "gaia-test-key-0123456789"
SLOW_SITE = Path(__file__).parent / "slow_site"
#: a small upload limit, so an oversized job is cheap to make (a region's job is a few kB)
UPLOAD_MB = 0.5
#: a host target nvcc builds here (no GPU needed: the build only compiles)
HOST_ARCH = "x86_64-sm90-linux-cu130-trt10"
PLUGIN = "DwConv3x3C16"


def ytk_exe() -> str:
    exe = shutil.which("ytk", path=str(Path(sys.executable).parent))
    assert exe
    return exe


class Service(Worker):
    """``ytk worker gaia`` in its own process group (readiness as the Kronos worker's)."""

    def __init__(self, state_dir: Path, *extra: str, env: dict[str, str] | None = None,
                 generator: str = "mock") -> None:
        """``generator``: the service's default generator (``--generator`` is repeatable; the first is the default)."""
        self.state_dir = state_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state_dir.parent / f"{state_dir.name}-{self.port}.log"
        e = {**os.environ, "YTK_GAIA_API_KEY": KEY, **(env or {})}
        for k in ("YTK_KERNELGEN", "YTK_BUILDER", "YTK_GAIA_URL", "YTK_CONFIG"):
            e.pop(k, None)
        builder = "nvcc" if shutil.which("nvcc") or os.environ.get("YTK_NVCC") else "mock"
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen([ytk_exe(), "--log-format", "json", "worker", "gaia", "--port",
                                          str(self.port), "--state-dir", str(state_dir), "--generator", generator,
                                          "--builder", builder, "--max-upload-mb", str(UPLOAD_MB), *extra],
                                         stdout=logf, stderr=subprocess.STDOUT, env=e, cwd=REPO,
                                         start_new_session=True)
        self._wait_ready()

    def http(self, key: str | None = KEY) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, headers={"Authorization": f"Bearer {key}"} if key else {})

    def jobs(self) -> list[dict]:
        with self.http() as h:
            return h.get("/v1/jobs").json()["jobs"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def service(tmp_path_factory):  # type: ignore[no-untyped-def]
    s = Service(tmp_path_factory.mktemp("gaia") / "state")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def region(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The stage tests' hand-built carved prepare dir: its region's .pt2, and a kernel source for it."""
    from tests.stages.carved_fixture import make_fixture
    from ytk_core.cli.app import main

    d = make_fixture(tmp_path_factory.mktemp("fx") / "fx") / "carved"
    src = d / "sources" / f"{PLUGIN}.module_source.py"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("YTK_CACHE_DIR", str(d / "cache"))
        mp.setenv("YTK_KERNEL_CACHE", "0")
        assert main(["kernelgen", "compile", "-r", str(d / "plugin_candidates" / f"{PLUGIN}.pt2"), "-g", "Orin",
                     "--config", "deployment_target=tensorrt", "-o", str(src), "--kernelgen", "mock"]) == 0
    from tests.helpers import as_real_source

    return d, as_real_source(src)  # built with nvcc below: not a simulated placeholder


def client_env(url: str, key: str = KEY, retry_s: str = "20") -> dict[str, str]:
    """The client's environment: the service, its key, a short retry budget, no backend chosen elsewhere."""
    env = {k: v for k, v in os.environ.items() if k not in ("YTK_KERNELGEN", "YTK_BUILDER", "YTK_CONFIG",
                                                            "YTK_ENGINE")}
    env.update(YTK_GAIA_URL=url, YTK_GAIA_API_KEY=key, YTK_GAIA_RETRY_S=retry_s, YTK_KERNEL_CACHE="0")
    return env


@pytest.fixture
def gaia_env(monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """Point an in-process ytk at a service: ``gaia_env(url)``."""
    def point(url: str, key: str = KEY, retry_s: str = "20") -> None:
        for k, v in client_env(url, key, retry_s).items():
            monkeypatch.setenv(k, v)
        for k in ("YTK_KERNELGEN", "YTK_BUILDER", "YTK_CONFIG", "YTK_ENGINE"):
            monkeypatch.delenv(k, raising=False)
        monkeypatch.setenv("YTK_CACHE_DIR", str(tmp_path / "cache"))

    return point
