"""The Gaia service on loopback, driven by the real client: ytk kernelgen compile / get and
ytk embedded build-plugin with --kernelgen gaia / --builder gaia."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.gaia.conftest import HOST_ARCH, KEY, PLUGIN, SLOW_SITE, UPLOAD_MB, Service, client_env, ytk_exe
from ytk_hookspecs.kernel_source import KernelSource, report_path
from ytk_hookspecs.models import KernelReport


def compile_args(region_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["kernelgen", "compile", "-r", str(region_dir / "plugin_candidates" / f"{PLUGIN}.pt2"), "-g", "Orin",
            "--config", "deployment_target=tensorrt", "-o", str(out), "--kernelgen", "gaia", *extra]


def errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("error:")]


def test_openapi_health_and_the_key_on_every_route(service):
    with service.http(key=None) as h:
        api = h.get("/openapi.json").json()
        assert {"/v1/info", "/v1/kernelgen/supports", "/v1/kernelgen/jobs", "/v1/builds", "/v1/jobs",
                "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/log", "/v1/jobs/{job_id}/files/{name}",
                "/v1/jobs/{job_id}/cancel"} <= set(api["paths"])
        assert "application/gzip" in api["paths"]["/v1/kernelgen/jobs"]["post"]["requestBody"]["content"]
        assert h.get("/v1/health").json()["status"] == "ok"
        for path in ("/v1/info", "/v1/jobs", f"/v1/jobs/{'0' * 32}"):
            r = h.get(path)
            assert r.status_code == 401 and r.json()["error"] == "no token sent", path
    with service.http() as h:
        info = h.get("/v1/info", params={"arch": "arm64-sm87-dos6010-cu114-trt86"}).json()
        assert info["generators"][0]["name"] == "mock" and info["generators"][0]["available"]
        assert info["max_upload_bytes"] == int(UPLOAD_MB * (1 << 20)) and info["dispatcher"] == "local"
        assert h.get(f"/v1/jobs/{'0' * 32}").status_code == 404


def test_a_second_service_on_the_same_state_dir_is_refused(service, tmp_path):
    """It would take the running service's jobs for interrupted ones and run them again beside it."""
    from tests.kronos.conftest import free_port

    r = run_cli("worker", "gaia", "--port", free_port(), "--generator", "mock", "--state-dir", service.state_dir,
                env={"YTK_GAIA_API_KEY": KEY}, timeout=60)
    assert r.code == 2, r.stderr
    (line,) = errors(r.stderr)
    assert f"--state-dir {service.state_dir} is in use by another running service (pid {service.proc.pid})" in line
    assert service.jobs() is not None  # the first one serves on


def test_a_keys_file_giving_two_holders_one_key_is_refused(ytk, tmp_path):
    """The service knows a caller by the key: two names on one secret would put one holder's jobs on the
    other's quota and in the other's log."""
    keys = tmp_path / "keys"
    keys.write_text("alice key-shared-0123456789\nbob key-shared-0123456789\n")
    # (--port 99999: were the keys accepted, the service would refuse the port rather than start in-process)
    r = ytk("worker", "gaia", "--keys-file", keys, "--generator", "mock", "--state-dir", tmp_path / "s", "--port",
            "99999")
    assert r.code == 2
    (line,) = errors(r.stderr)
    assert f"--keys-file {keys}:2: 'bob' has the same key as 'alice'" in line


def test_a_port_in_use_is_one_line_and_exit_2(service, tmp_path):
    """uvicorn logs a bind failure and exits from its own code: the service binds first and says so itself."""
    r = run_cli("worker", "gaia", "--port", service.port, "--generator", "mock", "--state-dir", tmp_path / "s",
                env={"YTK_GAIA_API_KEY": KEY})
    assert r.code == 2, r.stderr
    (line,) = errors(r.stderr)
    assert f"cannot listen on 127.0.0.1:{service.port}: " in line and "--port" in line
    assert "Traceback" not in r.stderr and "service ready" not in r.stderr and "sys.exit" not in r.stderr


def test_a_full_kernel_job_and_the_same_region_again_from_the_cache(region, service, tmp_path):
    d, _ = region
    out = tmp_path / "a" / f"{PLUGIN}.module_source.py"
    r = run_cli(*compile_args(d, out, "--json"), env=client_env(service.url))
    assert r.code == 0, r.stderr
    first = r.json()
    assert first["status"] == "done" and first["contract"]["ok"], first
    assert KernelSource.read(out).meta.plugin_name == PLUGIN
    assert KernelReport.read(report_path(out)).backend == "mock"
    again = tmp_path / "b" / f"{PLUGIN}.module_source.py"
    r = run_cli(*compile_args(d, again, "--json"), env=client_env(service.url))
    assert r.code == 0, r.stderr
    assert r.json()["job_id"] == first["job_id"], "the same region under the same key is the same job"
    assert again.read_bytes() == out.read_bytes()
    with service.http() as h:
        job = h.get(f"/v1/jobs/{first['job_id']}").json()
        assert job["state"] == "succeeded" and job["attempts"] == 1 and job["cached_from"] is None
        log = h.get(f"/v1/jobs/{first['job_id']}/log").json()["text"]
        assert "kernelgen job starting backend=mock" in log and "job succeeded" in log
        # the same content under another idempotency key (another client's) is answered from the cache
        from ytk_hookspecs.service.archive import write_archive

        spec = job["spec"]
        pt2 = d / "plugin_candidates" / f"{PLUGIN}.pt2"
        archive = write_archive(tmp_path / "again.tgz", [("job.json", json.dumps(spec).encode()),
                                                         (spec["reference"], pt2)])
        r = h.post("/v1/kernelgen/jobs", content=archive.read_bytes(), headers={"Idempotency-Key": "another-client-1"})
        assert r.status_code == 200 and r.json()["cached"], r.text
        cached = r.json()["job"]
        assert cached["state"] == "succeeded" and cached["cached_from"] == first["job_id"] and cached["attempts"] == 0
        assert h.get(f"/v1/jobs/{cached['id']}/files/module_source.py").content == out.read_bytes()


def test_results_of_other_generator_code_are_never_reused(region, tmp_path):
    """The result cache is keyed on the generator's installed code, not only its name: after the service's
    generator is upgraded (here: a job on disk made by other code), the same region is generated again."""
    from ytk_backend_mock.plugin import MockBackend
    from ytk_hookspecs.fingerprint import code_fingerprint
    from ytk_hookspecs.service.archive import write_archive

    d, _ = region
    state = tmp_path / "state"
    s = Service(state)
    try:
        r = run_cli(*compile_args(d, tmp_path / "a" / f"{PLUGIN}.module_source.py", "--json"),
                    env=client_env(s.url))
        assert r.code == 0, r.stderr
        first = r.json()["job_id"]
        rec_file = state / "jobs" / first / "record.json"
        rec = json.loads(rec_file.read_text())
        assert rec["content_sha256"].endswith(f":mock@{code_fingerprint(MockBackend())}"), rec["content_sha256"]
    finally:
        s.stop()
    rec["content_sha256"] = rec["content_sha256"].rsplit("@", 1)[0] + "@0123456789abcdef01234567"
    rec_file.write_text(json.dumps(rec))
    s = Service(state)
    try:
        with s.http() as h:
            spec = h.get(f"/v1/jobs/{first}").json()["spec"]
            archive = write_archive(tmp_path / "again.tgz", [("job.json", json.dumps(spec).encode()),
                                                             (spec["reference"], d / "plugin_candidates" /
                                                              f"{PLUGIN}.pt2")])
            r = h.post("/v1/kernelgen/jobs", content=archive.read_bytes(), headers={"Idempotency-Key": "after-upgrade"})
            assert r.status_code == 201 and not r.json()["cached"], r.text
    finally:
        s.stop()


def test_the_local_kernel_cache_never_answers_for_the_service(region, service, tmp_path):
    """With the client's kernel cache on (the default), a kernel the service made once must not be handed out
    for a job the service would answer differently: here a generator it does not offer, in ytk.toml."""
    d, _ = region
    env = {**client_env(service.url), "YTK_KERNEL_CACHE": "1", "YTK_CACHE_DIR": str(tmp_path / "cache")}
    r = run_cli(*compile_args(d, tmp_path / "a" / f"{PLUGIN}.module_source.py"), env=env)
    assert r.code == 0, r.stderr
    toml = tmp_path / "ytk.toml"
    toml.write_text('[backends.gaia]\ngenerator = "templates"\n')
    r = run_cli(*compile_args(d, tmp_path / "b" / f"{PLUGIN}.module_source.py"), env={**env, "YTK_CONFIG": str(toml)})
    assert r.code == 2, r.stdout + r.stderr
    (line,) = errors(r.stderr)
    assert "offers no generator 'templates'" in line


def test_bad_client_settings_are_one_line_and_exit_2(region, service, tmp_path):
    """A setting the client cannot use is bad input (exit 2) naming where it came from, never "not available"
    (exit 3) or a typo quietly ignored."""
    toml = tmp_path / "ytk.toml"
    cases = [({"YTK_GAIA_RETRY_S": "soon"}, None, "YTK_GAIA_RETRY_S (or [backends.gaia] retry_s) = 'soon'"),
             ({}, '[backends.gaia]\ngenrator = "mock"\n', "unknown key(s) genrator (known: url, api_key"),
             ({"YTK_GAIA_URL": ""}, '[backends.gaia]\nurl = "gpu-box:8471"\n', "[backends.gaia] url 'gpu-box:8471'")]
    for env, text, says in cases:
        if text is not None:
            toml.write_text(text)
        r = run_cli(*compile_args(region[0], tmp_path / "x.module_source.py"),
                    env={**client_env(service.url), **env, **({"YTK_CONFIG": str(toml)} if text else {})})
        assert r.code == 2, r.stderr
        (line,) = errors(r.stderr)
        assert says in line, line


@pytest.mark.parametrize("same_secret", [False, True], ids=["its-own-token", "the-same-secret"])
def test_a_kronos_worker_given_as_the_service_is_named_so(region, tmp_path, same_secret):
    """Refused (its own token) or answering with a record this client cannot read (the same secret on both):
    either way the client names what it found, for a job and for a job id."""
    from tests.kronos.conftest import Worker

    w = Worker(tmp_path / "kronos", {"YTK_KRONOS_TOKEN": KEY} if same_secret else None)
    try:
        r = run_cli(*compile_args(region[0], tmp_path / "x.module_source.py"), env=client_env(w.url))
        got = run_cli("kernelgen", "get", "0" * 32, "-o", tmp_path / "y.module_source.py", "--kernelgen", "gaia",
                      env=client_env(w.url))
    finally:
        w.stop()
    for res in (r, got):
        assert res.code == 2 and "Traceback" not in res.stderr, res.stderr
        (line,) = errors(res.stderr)
        assert f"YTK_GAIA_URL {w.url} is a kronos worker, not a gaia service" in line and "token" not in line


def test_an_autoloop_whose_service_cannot_be_reached_stops_and_says_so(tmp_path):
    """Every kernel job would fail the same way: the loop stops (exit 3) instead of dropping each region and
    ending 1.00x with exit 0."""
    from tests.autoloop.test_autoloop import MODEL
    from tests.kronos.conftest import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    r = run_cli("autoloop", MODEL, "-a", HOST_ARCH, "--workdir", tmp_path / "al", "--engine", "mock",
                "--kernelgen", "gaia", "--builder", "mock", env={**client_env(url, retry_s="1"), "YTK_ENGINE": ""})
    assert r.code == 3 and "Traceback" not in r.stderr, r.stderr[-3000:]
    line = errors(r.stderr)[-1]
    assert f"the gaia service at {url} cannot be reached" in line, line


def test_an_unreachable_service_is_asked_once_per_propose_not_once_per_candidate(monkeypatch):
    """supports() over dozens of candidates: after the service could not be reached, the next questions are not
    sent (each would wait out the retry budget) until a minute has passed; the answer leaves it to the job."""
    import ytk_backend_gaia.client as client_mod
    import ytk_backend_gaia.plugin as plugin_mod
    from tests.kronos.conftest import free_port
    from ytk_hookspecs import StageContext
    from ytk_hookspecs.models import RegionSketch, SupportRequest

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    for k, v in client_env(url, retry_s="0.5").items():
        monkeypatch.setenv(k, v)
    made = []
    real = client_mod.GaiaClient
    monkeypatch.setattr(client_mod, "GaiaClient", lambda *a, **kw: made.append(kw) or real(*a, **kw))
    backend, clock = plugin_mod.GaiaBackend(), [100.0]
    monkeypatch.setattr(plugin_mod, "_clock", lambda: clock[0])
    req = SupportRequest(sketch=RegionSketch(kind="depthwise_conv", kernel=[3, 3], stride=[1, 1]))
    answers = [backend.supports(req, StageContext(config={})) for _ in range(5)]
    assert len(made) == 1 and made[0]["retry_s"] == 0.5  # the user's shorter budget, not the 5 s default
    assert all(a.supported and not a.certain for a in answers)
    assert "cannot be reached" in answers[0].why and "not asked again for 60 s" in answers[-1].why
    clock[0] += plugin_mod.UNREACHABLE_MEMO_S
    backend.supports(req, StageContext(config={}))
    assert len(made) == 2  # a minute later it is asked again


def test_a_bad_key_is_one_line_and_exit_2(region, service, tmp_path):
    r = run_cli(*compile_args(region[0], tmp_path / "x.module_source.py"),
                env=client_env(service.url, key="not-the-key-at-all-0000"))
    assert r.code == 2 and "Traceback" not in r.stderr
    (line,) = errors(r.stderr)
    assert line.startswith(f"error: the gaia service at {service.url} refused the token: missing or wrong token")


def test_deployment_target_and_arch_are_checked_before_anything_is_sent(region, service, tmp_path):
    before = len(service.jobs())
    d = region[0]
    args = ["kernelgen", "compile", "-r", str(d / "plugin_candidates" / f"{PLUGIN}.pt2"), "-g", "H100", "-a",
            "arm64-sm87-dos6010-cu114-trt86", "--config", "deployment_target=tensorrt", "-o",
            str(tmp_path / "x.module_source.py"), "--kernelgen", "gaia"]
    r = run_cli(*args, env=client_env(service.url))
    assert r.code == 2 and "sm_90 GPU but -a arm64-sm87" in r.stderr
    # the backend checks it too (the core already refuses it; a caller of the backend object may not)
    from ytk_backend_gaia.errors import GaiaUsageError
    from ytk_backend_gaia.plugin import GaiaBackend
    from ytk_hookspecs import StageContext
    from ytk_hookspecs.models import KernelGenRequest

    req = KernelGenRequest(reference=d / "plugin_candidates" / f"{PLUGIN}.pt2", gpu="Orin",
                           deployment_target="torch", output=tmp_path / "y.module_source.py")
    with pytest.raises(GaiaUsageError, match="deployment_target=tensorrt"):
        GaiaBackend().submit(req, StageContext(config={"url": service.url, "api_key": KEY}))
    assert len(service.jobs()) == before


def test_an_oversized_job_is_refused_before_and_on_upload(service, tmp_path):
    from ytk_backend_gaia.client import GaiaClient  # noqa: F401  (the client refuses before sending: below)

    big = b"\0" * int(UPLOAD_MB * (1 << 20) + 1024)
    with service.http() as h:
        r = h.post("/v1/kernelgen/jobs", content=big, headers={"Idempotency-Key": "oversized-0001"})
        assert r.status_code == 413 and "over this worker's" in r.json()["error"]


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("name, says", [("inputs/../../escaped.txt", "escapes the job folder"),
                                        ("/etc/passwd", "absolute or malformed path"),
                                        ("elsewhere/x", "not part of a job")])
def test_an_archive_that_escapes_is_refused(service, name, says):
    before = len(service.jobs())
    with service.http() as h:
        r = h.post("/v1/builds", content=_tar([(name, b"x")]),
                   headers={"Idempotency-Key": f"crafted-{abs(hash(name))}"})
    assert r.status_code == 400 and r.json()["error"].startswith("archive refused: ") and says in r.json()["error"]
    assert len(service.jobs()) == before
    assert not (service.state_dir.parent / "escaped.txt").exists()


def test_bursts_of_503_and_429_are_retried_and_the_job_runs_once(region, service, tmp_path):
    from tests.kronos.flaky_proxy import FlakyProxy

    proxy = FlakyProxy(service.url, job_503s=3, info_429s=1)
    try:
        out = tmp_path / f"{PLUGIN}.module_source.py"
        r = run_cli(*compile_args(region[0], out, "--config", "mock_bandwidth_fraction=0.5"),
                    env=client_env(proxy.url))
    finally:
        proxy.stop()
    assert r.code == 0, r.stderr
    assert proxy.refused[0] == "429 GET /v1/info" and "503 POST /v1/kernelgen/jobs" in proxy.refused
    assert sum(x.startswith("503 GET /v1/jobs/") for x in proxy.refused) == 3
    mine = [j for j in service.jobs() if j["spec"].get("config", {}).get("mock_bandwidth_fraction") == "0.5"]
    assert len(mine) == 1, "the lost answer to the submit made no second job"


def test_dropped_connections_are_retried(region, service, tmp_path):
    from tests.gaia.dropping_proxy import DroppingProxy

    proxy = DroppingProxy(service.port, drops=3)
    try:
        out = tmp_path / f"{PLUGIN}.module_source.py"
        r = run_cli(*compile_args(region[0], out), env=client_env(proxy.url))
    finally:
        proxy.stop()
    assert r.code == 0, r.stderr
    assert proxy.dropped == 3 and out.is_file()


def test_an_unreachable_service_is_one_line_and_exit_3(region, tmp_path):
    from tests.kronos.conftest import free_port

    r = run_cli(*compile_args(region[0], tmp_path / "x.module_source.py"),
                env=client_env(f"http://127.0.0.1:{free_port()}", retry_s="1"))
    assert r.code == 3 and "Traceback" not in r.stderr
    (line,) = errors(r.stderr)
    assert "cannot be reached" in line and "YTK_GAIA_RETRY_S sets how long" in line


@pytest.fixture(scope="module")
def slow_service(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A service whose generator takes 8 s a job, one job per key at a time."""
    s = Service(tmp_path_factory.mktemp("gaia-slow") / "state", "--max-active-per-key", "1",
                env={"PYTHONPATH": str(SLOW_SITE), "YTK_TEST_SLOW_KERNELGEN_S": "8"})
    yield s
    s.stop()


def _wait_for(pred, what: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_a_killed_client_resumes_by_job_id_and_a_quota_is_429(region, slow_service, tmp_path):
    out = tmp_path / f"{PLUGIN}.module_source.py"
    client = subprocess.Popen([ytk_exe(), *compile_args(region[0], out)], env=client_env(slow_service.url),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job = _wait_for(lambda: next((j for j in slow_service.jobs() if j["state"] == "running"), None),
                        "the job to start")
    finally:
        client.kill()
        client.communicate(timeout=10)
    assert not out.exists()
    with slow_service.http() as h:  # the key has its one active job: a second is 429 with Retry-After
        r = h.post("/v1/builds", content=b"x", headers={"Idempotency-Key": "quota-check-0001"})
        assert r.status_code == 429 and r.headers["Retry-After"] and "quota" in r.json()["error"]
    t0 = time.monotonic()
    r = run_cli("kernelgen", "get", job["id"], "-o", str(out), "--kernelgen", "gaia", "--json",
                env=client_env(slow_service.url))
    assert r.code == 0, r.stderr
    assert r.json()["status"] == "done" and KernelSource.read(out).meta.plugin_name == PLUGIN
    assert report_path(out).is_file() and time.monotonic() - t0 < 20
    with slow_service.http() as h:
        assert h.get(f"/v1/jobs/{job['id']}").json()["attempts"] == 1


@pytest.mark.slow
def test_a_service_stopped_mid_job_the_client_prints_the_command_that_picks_it_up(region, tmp_path):
    """The service stops while a client follows its job, and stays down past the retry budget: the client's one
    line is a command to run as printed once the service is back, and the restarted service ran the job again."""
    out = tmp_path / "out" / f"{PLUGIN}.module_source.py"
    env = {"PYTHONPATH": str(SLOW_SITE), "YTK_TEST_SLOW_KERNELGEN_S": "6"}
    svc = Service(tmp_path / "state", env=env)
    try:
        client = subprocess.Popen([ytk_exe(), *compile_args(region[0], out)], env=client_env(svc.url, retry_s="2"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        job = _wait_for(lambda: next((j for j in svc.jobs() if j["state"] == "running"), None), "the job to start")
        svc.stop()
        _, stderr = client.communicate(timeout=60)
    finally:
        svc.stop()
    assert client.returncode == 3, stderr
    (line,) = errors(stderr)
    printed = f"ytk kernelgen get {job['id']} -o {out} --kernelgen gaia"
    assert printed in line, line
    again = Service(tmp_path / "state", env=env)
    try:
        r = run_cli(*printed.split()[1:], "--json", env=client_env(again.url))
        assert r.code == 0, r.stderr
        assert r.json()["status"] == "done" and KernelSource.read(out).meta.plugin_name == PLUGIN
    finally:
        again.stop()


@pytest.mark.slow
def test_a_cancelled_job_ends_its_client_with_one_line(region, slow_service, tmp_path):
    out = tmp_path / f"{PLUGIN}.module_source.py"
    client = subprocess.Popen([ytk_exe(), *compile_args(region[0], out, "--config", "mock_bandwidth_fraction=0.4")],
                              env=client_env(slow_service.url), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    job = _wait_for(lambda: next((j for j in slow_service.jobs() if j["state"] == "running"
                                  and j["spec"]["config"].get("mock_bandwidth_fraction") == "0.4"), None),
                    "the job to start")
    with slow_service.http() as h:
        assert h.post(f"/v1/jobs/{job['id']}/cancel").json()["state"] == "cancelled"
    _, stderr = client.communicate(timeout=30)
    assert client.returncode == 3 and "Traceback" not in stderr
    assert "was cancelled on the gaia service" in errors(stderr)[0] and not out.exists()


def test_a_ray_task_sweeps_the_scratch_of_workers_that_died(tmp_path, monkeypatch):
    """A Ray worker killed mid-job cannot remove its scratch folder; the next task on the node does, and only
    those whose worker is gone."""
    import os
    import subprocess
    import sys
    import tempfile

    from ytk_backend_gaia import dispatch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dirs = {n: tmp_path / f"ytk-gaia-{pid}-x1" for n, pid in (("gone", gone.pid), ("alive", alive.pid),
                                                                    ("mine", os.getpid()))}
        dirs["other"] = tmp_path / "ytk-gaia-notapid"
        for d in dirs.values():
            (d / "work").mkdir(parents=True)
        dispatch._sweep_orphans()
        assert {n for n, d in dirs.items() if d.exists()} == {"alive", "mine", "other"}
    finally:
        alive.kill()
        alive.wait()
