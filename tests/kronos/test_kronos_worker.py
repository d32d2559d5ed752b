"""The Kronos worker on loopback (mock engine), driven by the real client: ytk embedded compile --worker."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.kronos.conftest import ARCH, SLOW_SITE, TOKEN, UPLOAD_MB, Worker
from ytk_core.bundle import EngineBundle


def compile_args(d: Path, out: Path, *plugins: Path, extra: tuple[str, ...] = ()) -> list[str]:
    args = ["embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", str(d / "model.onnx"), "--npz",
            str(d / "model.npz"), "-o", str(out), *extra]
    for p in plugins:
        args += ["--custom-plugin", str(p)]
    return args


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("error:")]


def jobs(worker: Worker) -> list[dict]:
    with worker.http() as h:
        return h.get("/v1/jobs").json()["jobs"]


def test_openapi_health_and_the_token_on_every_route(worker):
    with worker.http(token=None) as h:
        api = h.get("/openapi.json").json()
        assert {"/v1/info", "/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/log",
                "/v1/jobs/{job_id}/bundle"} <= set(api["paths"])
        assert "application/gzip" in api["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]
        assert h.get("/v1/health").json()["status"] == "ok"
        for path in ("/v1/info", "/v1/jobs", f"/v1/jobs/{'0' * 32}"):
            r = h.get(path)
            assert r.status_code == 401 and r.json()["error"] == "no token sent", path
    with worker.http(token="wrong-token-wrong-token") as h:
        assert h.get("/v1/info").status_code == 401
    with worker.http() as h:
        info = h.get("/v1/info").json()
        assert (info["engine"], info["simulated"], info["slots"]) == ("mock", True, 1)
        assert info["max_upload_bytes"] == int(UPLOAD_MB * (1 << 20))
        assert h.get(f"/v1/jobs/{'0' * 32}").status_code == 404


def test_full_compile_equals_the_local_compile(ytk, worker, carved, client_env, tmp_path):
    d, so = carved
    here, there = tmp_path / "local" / "gaia.tgz", tmp_path / "remote" / "gaia.tgz"
    r = ytk(*compile_args(d / "carved", here, so, extra=("--engine", "mock")))
    assert r.code == 0, r.stderr
    r = ytk(*compile_args(d / "carved", there, so, extra=("--worker", worker.url, "--json")))
    assert r.code == 0, r.stderr
    rep = r.json()
    assert rep["engine_selection"].startswith(f"engine=mock (kronos worker {worker.url}")
    assert rep["plugin_nodes"] == {"DwConv3x3C16": ["DwConv3x3C16_0", "DwConv3x3C16_1"]}
    a, b = EngineBundle.open(here), EngineBundle.open(there)
    skip = {"created"}
    assert a.manifest.model_dump(exclude=skip) == b.manifest.model_dump(exclude=skip)
    assert [p.admission for p in b.manifest.plugins] == ["unverified"]  # simulated: the mock engine's own verdict
    assert a.profile.layers == b.profile.layers and a.benchmark.iterations_ms == b.benchmark.iterations_ms
    for name, arr in a.outputs().items():
        np.testing.assert_array_equal(arr, b.outputs()[name])
    # the job is recorded: its log holds the compile's lines, its bundle is downloadable again
    job = next(j for j in jobs(worker) if j["spec"]["output_name"] == "gaia.tgz")
    assert job["state"] == "succeeded" and job["attempts"] == 1
    with worker.http() as h:
        log = h.get(f"/v1/jobs/{job['id']}/log").json()
        assert "simulated build" in log["text"] and log["next_offset"] == len(log["text"].encode())
        assert h.get(f"/v1/jobs/{job['id']}/bundle").content == there.read_bytes()
    assert not list(there.parent.glob(".*"))  # no upload, download or job reference left behind


def test_a_plugin_problem_is_found_before_anything_is_sent(ytk, worker, carved, client_env, tmp_path):
    before = len(jobs(worker))
    local = ytk(*compile_args(carved[0] / "carved", tmp_path / "l.tgz", extra=("--engine", "mock")))
    remote = ytk(*compile_args(carved[0] / "carved", tmp_path / "r.tgz", extra=("--worker", worker.url)))
    assert local.code == remote.code == 2
    assert error_lines(local.stderr) == error_lines(remote.stderr) and "nothing was compiled" in remote.stderr
    assert len(jobs(worker)) == before and not (tmp_path / "r.tgz").exists()


@pytest.mark.parametrize("same_secret", [False, True], ids=["its-own-key", "the-same-secret"])
def test_a_gaia_service_given_as_the_worker_is_named_so(ytk, carved, client_env, tmp_path, same_secret):
    """Both services speak /v1 with bearer tokens: pointed at the wrong kind, the client says which it found,
    never "refused the token" (its own key) or "an invalid WorkerInfo" (the same secret on both)."""
    from tests.gaia.conftest import Service

    s = Service(tmp_path / "gaia", env={"YTK_GAIA_API_KEY": TOKEN} if same_secret else None)
    try:
        r = ytk(*compile_args(carved[0] / "base", tmp_path / "b.tgz", extra=("--worker", s.url)))
    finally:
        s.stop()
    assert r.code == 2, r.stderr
    (line,) = error_lines(r.stderr)
    assert f"--worker {s.url} is a gaia service, not a kronos worker" in line and "token" not in line


def test_bad_token_is_one_line_and_exit_2(ytk, worker, carved, client_env, monkeypatch, tmp_path):
    monkeypatch.setenv("YTK_KRONOS_TOKEN", "not-the-token-at-all")
    out = tmp_path / "b.tgz"
    r = ytk(*compile_args(carved[0] / "base", out, extra=("--worker", worker.url)))
    assert r.code == 2
    (line,) = error_lines(r.stderr)
    assert "refused the token: missing or wrong token" in line and "YTK_KRONOS_TOKEN" in line
    assert TOKEN not in r.stderr and "not-the-token-at-all" not in r.stderr and not out.exists()


def _big_job(d: Path) -> Path:
    """A model whose ONNX (random weights, incompressible) is over the worker's upload limit."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    d.mkdir(parents=True)
    w = np.random.default_rng(0).standard_normal((int(UPLOAD_MB * (1 << 20)) // 2, 1)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "big",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[0]])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(d / "model.onnx"))
    np.savez(d / "model.npz", x=np.zeros((1, w.shape[0]), np.float32))
    return d


def test_oversized_upload_is_refused_by_the_client_and_by_the_worker(ytk, worker, client_env, tmp_path):
    before = len(jobs(worker))
    d = _big_job(tmp_path / "big")
    r = ytk(*compile_args(d, tmp_path / "big.tgz", extra=("--worker", worker.url)))
    assert r.code == 2
    (line,) = error_lines(r.stderr)
    assert "over the kronos worker's" in line and "upload limit" in line and "--max-upload-mb" in line
    # a client that does not check first: refused from the header, and while streaming without one
    limit = int(UPLOAD_MB * (1 << 20))
    with worker.http() as h:
        r1 = h.post("/v1/jobs", content=b"\0" * (limit + 1), headers={"Idempotency-Key": "oversized-1"})
        r2 = h.post("/v1/jobs", content=iter([b"\0" * 65536] * (limit // 65536 + 2)),
                    headers={"Idempotency-Key": "oversized-2"})
    for resp in (r1, r2):
        assert resp.status_code == 413 and "limit (--max-upload-mb)" in resp.json()["error"], resp.text
    assert len(jobs(worker)) == before and not list((worker.state_dir / "incoming").iterdir())


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _member(name: str, data: bytes | None = b"x", kind: bytes = tarfile.REGTYPE, link: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info, data


@pytest.mark.parametrize("members, says", [
    ([_member("job.json"), _member("inputs/../../escaped.txt")], "escapes the job folder"),
    ([_member("/etc/evil")], "absolute"),
    ([_member("inputs/model.onnx", None, tarfile.SYMTYPE, "/etc/passwd")], "is a symlink (to '/etc/passwd')"),
    ([_member("inputs/a"), _member("inputs/b", None, tarfile.LNKTYPE, "inputs/a")], "is a hardlink"),
    ([_member("inputs/dev", None, tarfile.CHRTYPE)], "not a regular file"),
    ([_member("elsewhere/x")], "is not part of a job"),
], ids=["dotdot", "absolute", "symlink", "hardlink", "device", "stray"])
def test_crafted_archives_are_refused(worker, members, says, tmp_path):
    before = len(jobs(worker))
    body = _tar(members)
    with worker.http() as h:
        r = h.post("/v1/jobs", content=body, headers={"Idempotency-Key": f"crafted-{says[:10].replace(' ', '-')}"})
    assert r.status_code == 400 and r.json()["error"].startswith("archive refused: ") and says in r.json()["error"]
    assert len(jobs(worker)) == before
    assert not (worker.state_dir.parent / "escaped.txt").exists() and not (worker.state_dir / "escaped.txt").exists()


def test_extraction_limits_members_and_bytes(tmp_path):
    from ytk_backend_kronos.extract import ArchiveRefused, ExtractLimits, safe_extract

    many = tmp_path / "many.tgz"
    many.write_bytes(_tar([_member(f"inputs/f{i}") for i in range(5)]))
    with pytest.raises(ArchiveRefused, match="more than 4 members"):
        safe_extract(many, tmp_path / "a", ExtractLimits(max_members=4, max_bytes=1 << 20))
    big = tmp_path / "big.tgz"
    big.write_bytes(_tar([_member("inputs/zeros", b"\0" * 5000)]))  # a few bytes packed, 5000 unpacked
    with pytest.raises(ArchiveRefused, match="more than 4096 bytes unpacked"):
        safe_extract(big, tmp_path / "b", ExtractLimits(max_members=10, max_bytes=4096))
    assert safe_extract(big, tmp_path / "c", ExtractLimits(max_members=10, max_bytes=8192)) == ["inputs/zeros"]


def test_bursts_of_503_and_429_are_retried_and_the_job_runs_once(ytk, worker, carved, client_env, tmp_path):
    from tests.kronos.flaky_proxy import FlakyProxy

    proxy = FlakyProxy(worker.url, job_503s=3, info_429s=1)
    try:
        before = {j["id"] for j in jobs(worker)}
        out = tmp_path / "flaky.tgz"
        r = ytk(*compile_args(carved[0] / "base", out, extra=("--worker", proxy.url)))
    finally:
        proxy.stop()
    assert r.code == 0, r.stderr
    assert EngineBundle.open(out).manifest.label == "flaky"
    assert proxy.refused[0] == "429 GET /v1/info" and "503 POST /v1/jobs" in proxy.refused
    assert sum(x.startswith("503 GET /v1/jobs/") for x in proxy.refused) == 3
    new = [j for j in jobs(worker) if j["id"] not in before]
    assert len(new) == 1 and new[0]["attempts"] == 1  # the lost submit's retry found its job: it ran once


def _runner_pids(job_id: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "ytk_backend_kronos.runner" in cmd and job_id in cmd:
                pids.append(int(p.name))
    return pids


def _slow_job(state: Path, prep: Path, out: Path, retry_s: str) -> tuple[Worker, list[str], subprocess.Popen]:
    """A worker whose compiles take 120 s, and a client compiling ``prep`` on it (its args, its process)."""
    w = Worker(state, {"PYTHONPATH": str(SLOW_SITE), "YTK_TEST_SLOW_COMPILE_S": "120"})
    args = compile_args(prep, out, extra=("--worker", w.url))
    env = {**os.environ, "YTK_KRONOS_TOKEN": TOKEN, "YTK_KRONOS_RETRY_S": retry_s}
    env.pop("YTK_ENGINE", None)
    ytk = shutil.which("ytk", path=str(Path(sys.executable).parent))
    client = subprocess.Popen([ytk, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return w, args, client


def _running_job(w: Worker, client: subprocess.Popen) -> str:
    """The id of the job ``client`` made on ``w``, once its compile process runs."""
    end, running = time.monotonic() + 60, []
    while not running:
        assert time.monotonic() < end and client.poll() is None, "the job never started"
        time.sleep(0.3)
        running = [j for j in jobs(w) if j["state"] == "running"]
    job_id = running[0]["id"]
    while not _runner_pids(job_id):
        time.sleep(0.1)
    return job_id


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to see the compile process die")
def test_worker_killed_mid_job_the_client_says_so_and_a_rerun_restarts_it(carved, tmp_path):
    state, out = tmp_path / "state", tmp_path / "out" / "base.tgz"
    w, args, client = _slow_job(state, carved[0] / "base", out, retry_s="2")
    try:
        job_id = _running_job(w, client)
        w.kill()
        _, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
        w.stop()
    assert client.returncode == 3, err
    (line,) = error_lines(err)
    assert "cannot be reached" in line and f"while waiting for job {job_id}" in line
    assert "run the same command again" in line and not out.exists()
    end = time.monotonic() + 10
    while _runner_pids(job_id):  # the compile died with its worker (PR_SET_PDEATHSIG)
        assert time.monotonic() < end, "the job's compile process outlived its worker"
        time.sleep(0.1)
    w2 = Worker(state, port=w.port)  # the worker restarted where it was
    try:
        with w2.http() as h:
            rec = h.get(f"/v1/jobs/{job_id}").json()
        assert rec["state"] == "interrupted" and "worker stopped" in rec["message"]
        r = run_cli(*args, env={"YTK_KRONOS_TOKEN": TOKEN, "YTK_ENGINE": ""})
        assert r.code == 0, r.stderr
        assert f"kronos job {job_id} restarted" in r.stderr
        with w2.http() as h:
            rec = h.get(f"/v1/jobs/{job_id}").json()
        assert (rec["state"], rec["attempts"]) == ("succeeded", 2) and len(jobs(w2)) == 1
        assert EngineBundle.open(out).manifest.engine_backend == "mock"
    finally:
        w2.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to see the job running")
def test_worker_restarted_mid_job_the_waiting_client_restarts_the_job(carved, tmp_path):
    """A worker stopped while a job runs marks it interrupted; the client that is still following it submits it
    again under the same key once the worker is back, and the command succeeds (no second command needed)."""
    state, out = tmp_path / "state", tmp_path / "out" / "base.tgz"
    w, _args, client = _slow_job(state, carved[0] / "base", out, retry_s="60")
    w2 = None
    try:
        job_id = _running_job(w, client)
        w.stop()  # SIGTERM: the worker marks the job interrupted on its way down
        w2 = Worker(state, port=w.port)  # back where it was, its compiles quick now
        _, err = client.communicate(timeout=120)
        assert client.returncode == 0, err
        assert f"kronos job {job_id} on {w.url} was interrupted" in err and "submitting it again" in err
        assert f"kronos job {job_id} restarted" in err
        with w2.http() as h:
            rec = h.get(f"/v1/jobs/{job_id}").json()
        assert (rec["state"], rec["attempts"]) == ("succeeded", 2) and len(jobs(w2)) == 1
        assert EngineBundle.open(out).manifest.engine_backend == "mock"
    finally:
        if client.poll() is None:
            client.kill()
        w.stop()
        if w2 is not None:
            w2.stop()


def test_autoloop_compiles_on_the_worker(worker, client_env, tmp_path):
    from tests.autoloop.test_autoloop import MODEL

    before = {j["id"] for j in jobs(worker)}
    wd = tmp_path / "al"
    r = run_cli("autoloop", MODEL, "-a", "auto", "--workdir", wd, "--kernelgen", "mock", "--builder", "mock",
                "--worker", worker.url, "--time-budget", "1s", "--json",
                env={"YTK_KRONOS_TOKEN": TOKEN, "YTK_ENGINE": ""})
    assert r.code == 0, r.stderr[-3000:]
    rep = r.json()
    assert rep["state"]["backends"]["engine"] == "mock" and rep["state"]["arch"] == ARCH  # -a auto: the worker's
    assert rep["state"]["worker"] == worker.url
    assert f"--worker {worker.url}" in rep["ship"]["reproduce"]  # the rebuild goes where the engine was built
    new = [j for j in jobs(worker) if j["id"] not in before]
    assert [j["spec"]["output_name"] for j in new] == ["base.tgz"] and new[0]["state"] == "succeeded"
    r = run_cli("autoloop", MODEL, "-a", "auto", "--workdir", tmp_path / "al2", "--engine", "torch",
                "--worker", worker.url, env={"YTK_KRONOS_TOKEN": TOKEN, "YTK_ENGINE": ""})
    assert r.code == 2 and "runs the mock engine" in error_lines(r.stderr)[0]


def test_worker_help_and_no_start_without_a_token(ytk, monkeypatch):
    r = ytk("worker", "kronos", "--help")
    assert r.code == 0 and "--engine" in r.stdout and "--max-upload-mb" in r.stdout and "/openapi.json" in r.stdout
    monkeypatch.delenv("YTK_KRONOS_TOKEN", raising=False)
    r = ytk("worker", "kronos", "--engine", "mock", "--port", "1")
    assert r.code == 2
    (line,) = error_lines(r.stderr)
    assert "needs a token" in line and "YTK_KRONOS_TOKEN" in line


def test_an_empty_worker_flag_is_refused_not_a_local_compile(ytk, carved, tmp_path):
    """`--worker "$TARGET"` with TARGET unset compiled here, or on ytk.toml's worker, without a word."""
    for args in (compile_args(carved[0] / "base", tmp_path / "x.tgz"),
                 ["autoloop", "model.py", "-a", "auto", "--workdir", tmp_path / "al"]):
        r = ytk(*args, "--worker", "")
        assert r.code == 2, r.stdout + r.stderr
        (line,) = error_lines(r.stderr)
        assert "--worker '': expected a worker's URL" in line
    assert not (tmp_path / "x.tgz").exists() and not (tmp_path / "al").exists()


def test_a_second_worker_on_the_same_state_dir_is_refused(worker):
    """It would take the running worker's jobs for interrupted ones."""
    from tests.kronos.conftest import free_port

    r = run_cli("worker", "kronos", "--engine", "mock", "--port", free_port(), "--state-dir", worker.state_dir,
                env={"YTK_KRONOS_TOKEN": TOKEN}, timeout=60)
    assert r.code == 2, r.stderr
    (line,) = error_lines(r.stderr)
    assert f"--state-dir {worker.state_dir} is in use by another running service (pid {worker.proc.pid})" in line


def test_a_port_in_use_is_one_line_and_exit_2(worker, tmp_path):
    """uvicorn logs a bind failure and exits from its own code: the worker binds first and says so itself."""
    for port, says in ((worker.port, f"cannot listen on 127.0.0.1:{worker.port}: "), (99999, "--port 99999")):
        r = run_cli("worker", "kronos", "--engine", "mock", "--port", port, "--state-dir", tmp_path / "s",
                    env={"YTK_KRONOS_TOKEN": TOKEN})
        assert r.code == 2, r.stderr
        (line,) = error_lines(r.stderr)
        assert says in line and "--port" in line
        assert "Traceback" not in r.stderr and "worker ready" not in r.stderr and "sys.exit" not in r.stderr


def test_json_models_carry_their_schema_version(worker):
    with worker.http() as h:
        assert json.loads(h.get("/v1/health").content) == {"schema_version": 2, "status": "ok",
                                                            "service": "kronos worker"}


def test_a_tapped_compile_on_the_worker_carries_its_taps_and_verify_names_the_region(ytk, client_env, tmp_path):
    """A prepare made with --debug-taps compiled through the worker: the job ships taps.json and the fp32 tap
    reference beside the ONNX, the worker's engine is told the taps, and the fetched bundle names the region
    with the planted wrong kernel, as a local compile's does."""
    from tests.helpers import ytk_inproc
    from tests.stages.test_debug_taps import REGIONS, _prepare
    from ytk_core.bundle import TAPS

    prep = tmp_path / "prep"
    _prepare(lambda *a: ytk_inproc(*a), prep, "--debug-taps")
    (prep / "model.onnx").rename(prep / "tapped.onnx")  # the user's own name: the job's ONNX is called otherwise
    taps = json.loads((prep / "taps.json").read_text())
    (prep / "taps.json").write_text(json.dumps({**taps, "onnx": "tapped.onnx"}))
    sos = []
    for name in REGIONS:
        src, so = prep / f"{name}.module_source.py", prep / f"{name}.so"
        cfg = ["--config", "mock_defect=shift"] if name == "Dw5" else []
        r = ytk("kernelgen", "compile", "-r", prep / "plugin_candidates" / f"{name}.pt2", "-g", "Orin", "--config",
                "deployment_target=tensorrt", *cfg, "-o", src, "--kernelgen", "mock")
        assert r.code == 0, r.stderr[-2000:]
        r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", name, "-s", src, "-o", so, "--builder",
                "mock")
        assert r.code == 0, r.stderr[-2000:]
        sos.append(so)
    out = tmp_path / "remote" / "tapped.tgz"
    worker = Worker(tmp_path / "state", None, "--max-upload-mb", "200")  # every region's reference travels
    try:
        args = ["embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", str(prep / "tapped.onnx"), "--npz",
                str(prep / "model.npz"), "-o", str(out), "--worker", worker.url]
        for so in sos:
            args += ["--custom-plugin", str(so)]
        r = ytk(*args)
    finally:
        worker.stop()
    assert r.code == 0, r.stderr[-2000:]
    bundle = EngineBundle.open(out)
    assert bundle.manifest.taps_exposed_as == "network outputs" and bundle.has(TAPS)
    r = ytk("embedded", "verify", prep / "model.reference.npz", out, "--no-host", "--json")
    assert r.code == 5, r.stderr[-2000:]
    (v,) = json.loads(r.stdout)["taps"]
    assert v["plugin"] == "Dw5", v["reason"]
