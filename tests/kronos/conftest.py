"""A real Kronos worker on loopback (uvicorn in a subprocess, mock engine) and the inputs to send it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO

TOKEN = "kronos-test-token-0123456789"
SLOW_SITE = Path(__file__).parent / "slow_site"
#: a small upload limit, so an oversized job is cheap to make (the tiny models' jobs are under 1 MB)
UPLOAD_MB = 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Worker:
    """``ytk worker kronos`` in its own process group; ``kill()`` is a SIGKILL to the worker alone."""

    def __init__(self, state_dir: Path, env: dict[str, str] | None = None, *extra: str, port: int = 0) -> None:
        self.state_dir = state_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state_dir.parent / f"{state_dir.name}-{self.port}.log"
        ytk = shutil.which("ytk", path=str(Path(sys.executable).parent))
        assert ytk
        e = {**os.environ, "YTK_KRONOS_TOKEN": TOKEN, **(env or {})}
        e.pop("YTK_ENGINE", None)
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen([ytk, "worker", "kronos", "--engine", "mock", "--port", str(self.port),
                                          "--state-dir", str(state_dir), "--max-upload-mb", str(UPLOAD_MB), *extra],
                                         stdout=logf, stderr=subprocess.STDOUT, env=e, cwd=REPO,
                                         start_new_session=True)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"the worker exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the worker did not come up: {self.log.read_text()[-2000:]}")

    def http(self, token: str | None = TOKEN) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {token}"} if token else {})

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):  # type: ignore[no-untyped-def]
    w = Worker(tmp_path_factory.mktemp("kronos") / "state")
    yield w
    w.stop()


@pytest.fixture(scope="module")
def carved(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The stage tests' hand-built prepare dirs (base and carved) and a mock plugin for the carved one."""
    from tests.stages.carved_fixture import PLUGIN, make_fixture
    from ytk_core.cli.app import main

    d = make_fixture(tmp_path_factory.mktemp("fx") / "fx")
    c = d / "carved"
    src = c / "sources" / f"{PLUGIN}.module_source.py"
    so = c / "plugins" / f"{PLUGIN}.so"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("YTK_CACHE_DIR", str(d / "cache"))
        assert main(["kernelgen", "compile", "-r", str(c / "plugin_candidates" / f"{PLUGIN}.pt2"), "-g", "Orin",
                     "--config", "deployment_target=tensorrt", "-o", str(src), "--kernelgen", "mock"]) == 0
        assert main(["embedded", "build-plugin", "-a", ARCH, "--plugin-name", PLUGIN, "-s", str(src), "-o", str(so),
                     "--builder", "mock"]) == 0
    return d, so


ARCH = "arm64-sm87-dos6010-cu114-trt86"


@pytest.fixture
def client_env(monkeypatch):  # type: ignore[no-untyped-def]
    """The client's side: the worker's token, a short retry budget, no engine chosen by the environment."""
    monkeypatch.setenv("YTK_KRONOS_TOKEN", TOKEN)
    monkeypatch.setenv("YTK_KRONOS_RETRY_S", "20")
    monkeypatch.delenv("YTK_ENGINE", raising=False)
    monkeypatch.delenv("YTK_CONFIG", raising=False)
