"""Scale-out on Ray: ``ytk worker gaia --ray local`` starts a Ray instance on this machine and sends every
job to it as a task asking for no GPU and one CPU (CPU-only here: the nvcc builder compiles, nothing runs).
N builds submitted at once all finish, each exactly once, with a Ray worker process killed mid-way, after the
service's request threads have been retired (Ray must not live on one of them)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.gaia.conftest import HOST_ARCH, SLOW_SITE, Service, client_env, ytk_exe
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.plugin_info import read_plugin_description

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'ytk-backend-gaia[ray]')")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed (the jobs are builds)"),
              pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds Ray's worker processes in /proc")]
N = 4


def ray_task_pids() -> list[int]:
    """Ray worker processes running a job (Ray titles them ``ray::<task name>``: ``gaia-build-<id>``)."""
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if (p / "cmdline").read_bytes().startswith(b"ray::gaia-build-"):
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


def outlive_idle_request_threads(h) -> None:  # type: ignore[no-untyped-def]
    """Make the service's request thread pool retire its idle threads, as a busy service's does: a burst of
    requests at once (several threads), 11 s of quiet (anyio retires a thread idle for 10 s when another
    is taken), one more request. Ray's processes are killed with the thread that started them
    (PR_SET_PDEATHSIG), so a Ray started on a request thread would die here, silently, seconds later."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        assert all(r.status_code == 200 for r in pool.map(lambda _: h.get("/v1/health"), range(16)))
    time.sleep(11)
    assert h.get("/v1/health").status_code == 200
    time.sleep(1)


def test_n_builds_at_once_each_finish_once_with_a_ray_worker_killed(region, tmp_path):
    _, src = region
    svc = Service(tmp_path / "state", "--ray", "local", "--ray-num-gpus", "0", "--ray-num-cpus", "1",
                  env={"RAY_ADDRESS": "", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(SLOW_SITE),
                       "YTK_TEST_SLOW_BUILD_S": "4"})
    try:
        with svc.http() as h:
            info = h.get("/v1/info").json()
            assert info["dispatcher"] == "ray"
            outlive_idle_request_threads(h)
        clients = []
        for i in range(N):
            name = f"Region{i}"
            s = KernelSource.read(src).renamed(name).write(tmp_path / f"{name}.module_source.py")
            out = tmp_path / "plugins" / f"{name}.so"
            clients.append((name, out, subprocess.Popen(
                [ytk_exe(), "embedded", "build-plugin", "-a", HOST_ARCH, "--plugin-name", name, "-s", str(s), "-o",
                 str(out), "--builder", "gaia", "--json"], env=client_env(svc.url, retry_s="60"),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        end, killed = time.monotonic() + 120, None
        while killed is None and time.monotonic() < end:
            pids = ray_task_pids()
            if pids:
                time.sleep(1.0)  # mid-way through its (slowed) build
                os.kill(pids[0], signal.SIGKILL)
                killed = pids[0]
            time.sleep(0.1)
        assert killed, "no Ray task was seen running"
        for name, out, proc in clients:
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr
            assert json.loads(stdout)["description"]["name"] == name
            assert read_plugin_description(out).name == name
        jobs = svc.jobs()
        assert len(jobs) == N and all(j["state"] == "succeeded" and j["dispatcher"] == "ray" for j in jobs)
        events = [json.loads(line) for line in svc.log.read_text().splitlines() if line.startswith("{")]
        done = [e["job"] for e in events if e.get("event") == "gaia job succeeded"]
        assert sorted(done) == sorted(j["id"] for j in jobs), "every job committed exactly once"
        assert not [e for e in events if e.get("event", "").startswith("gaia job: a late outcome")]
        assert killed not in ray_task_pids()
        import tempfile
        assert not list(Path(tempfile.gettempdir()).glob(f"ytk-gaia-{killed}-*")), "the killed task's scratch stays"
    finally:
        svc.stop()


def descendants(pid: int) -> set[int]:
    """Every live process under ``pid`` (Ray's GCS, raylet, agents and workers of a ``--ray local`` service)."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[0] != "Z":
                children.setdefault(int(stat[1]), []).append(int(p.name))
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.add(c)
            todo.append(c)
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_ray_service_stopped_by_sigterm_stops_cleanly_and_takes_ray_along(tmp_path):
    """`kill PID` (the docs' `kill $(cat gaia.pid)`: the service's process alone, not its group): Ray's
    SIGTERM handler must not turn it into a foreign sys.exit and a traceback, nor leave Ray's agents behind."""
    svc = Service(tmp_path / "state", "--ray", "local", "--ray-num-gpus", "0", "--ray-num-cpus", "1",
                  env={"RAY_ADDRESS": "", "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        ray_procs = descendants(svc.proc.pid)
        assert ray_procs, "Ray's processes run under the service"
        svc.proc.send_signal(signal.SIGTERM)
        svc.proc.wait(timeout=60)
        log = svc.log.read_text()
        assert "Traceback" not in log and "sys.exit" not in log and "error:" not in log, log[-3000:]
        end = time.monotonic() + 30
        while any(alive(p) for p in ray_procs) and time.monotonic() < end:
            time.sleep(0.5)
        assert not [p for p in ray_procs if alive(p)], "Ray's processes outlived the service"
    finally:
        svc.stop()


@pytest.mark.parametrize("extra, env, code, says", [
    (("--ray", "local", "--ray-num-gpus", "64"), {}, 2, "no job could ever run (--ray-num-gpus 0"),
    (("--ray", "127.0.0.1:{port}"), {}, 3, "--ray 127.0.0.1:"),
    ((), {"YTK_GAIA_RAY": "127.0.0.1:{port}"}, 3, "$YTK_GAIA_RAY 127.0.0.1:"),  # named where it came from
])
def test_a_ray_that_cannot_serve_is_one_line_at_start(tmp_path, extra, env, code, says):
    """A job asking for more than `--ray local` has would sit "running" forever; an address nobody answers
    was minutes of Ray's retries, then a traceback."""
    from tests.conftest import run_cli
    from tests.kronos.conftest import free_port

    port = free_port()
    args = [a.format(port=port) for a in extra]
    r = run_cli("worker", "gaia", "--port", free_port(), "--generator", "mock", "--state-dir", tmp_path / "s", *args,
                env={"YTK_GAIA_API_KEY": "gaia-test-key-0123456789", "RAY_ADDRESS": "", "RAY_USAGE_STATS_ENABLED": "0",
                     **{k: v.format(port=port) for k, v in env.items()}}, timeout=120)
    assert r.code == code, r.stderr[-3000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and says in lines[0], r.stderr[-3000:]
    assert code != 3 or "no Ray cluster answers there" in lines[0]
    assert "Traceback" not in r.stderr
