"""The core's admission gate: planted kernels built as users build plugins, and what an engine accepts.

On the CPU (CI) every planted kernel must build and come back `unverified` (no GPU to run it), and a
real engine must refuse what is not admitted. On the GPU machine the whole planted suite runs: only the
exact kernel is admitted (`benchmarks/admission_suite.py` prints the same table).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import admission_suite  # noqa: E402
from ytk_core.stages.admission import AdmissionRefused, gate_plugins, record_for  # noqa: E402
from ytk_hookspecs.models import AdmissionRecord, sha256_file  # noqa: E402


def _has_nvcc() -> bool:
    from ytk_backend_nvcc.toolchain import find_nvcc

    return find_nvcc() is not None


needs_nvcc = pytest.mark.skipif(not _has_nvcc(), reason="needs nvcc to build the planted kernels")


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory):  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("admission")
    return work, admission_suite.prepare(work)


def test_every_planted_kernel_differs_from_the_exact_one() -> None:
    exact = admission_suite.source_of("exact")
    for name in admission_suite.PLANTED:
        assert "/*@" not in admission_suite.source_of(name).replace("/*@skip@*/", "").replace(
            "/*@value@*/", "").replace("/*@after@*/", "").replace("/*@launch@*/", "").replace("/*@post@*/", "")
        if name != "exact":
            assert admission_suite.source_of(name) != exact, name


@needs_nvcc
def test_without_a_gpu_kernels_build_unverified_and_a_real_engine_refuses_them(suite_dir) -> None:
    from tests.conftest import has_cuda

    if has_cuda():
        pytest.skip("this machine has a GPU: the gate runs, test_no_planted_kernel_is_admitted_on_the_gpu covers it")
    work, prep = suite_dir
    row = admission_suite.run_one("race", work, prep, admission_suite.local_arch())
    assert row["exit"] == 0 and row["verdict"] == "unverified", row
    so = work / "race" / "DwS.so"
    assert "no CUDA GPU here" in record_for(so).reason
    with pytest.raises(AdmissionRefused, match="unverified.*--allow-unverified") as e:
        gate_plugins([(so, "DwS")], prep / "model.onnx", "fp16", allow_unverified=False)
    assert e.value.exit_code == 2
    status, warnings = gate_plugins([(so, "DwS")], prep / "model.onnx", "fp16", allow_unverified=True)
    assert status == {"DwS": "unverified"} and "loaded unchecked" in warnings[0]
    # a verdict about other bytes is no verdict; a rejection is final, whatever the flags
    rec_path = AdmissionRecord.path_for(so)
    AdmissionRecord(plugin_name="DwS", so_sha256="0" * 64, status="admitted").write(rec_path)
    assert record_for(so) is None
    AdmissionRecord(plugin_name="DwS", so_sha256=sha256_file(so), status="rejected", reason="planted",
                    cases=[]).write(rec_path)
    with pytest.raises(AdmissionRefused, match="rejected by the admission gate") as e:
        gate_plugins([(so, "DwS")], prep / "model.onnx", "fp16", allow_unverified=True)
    assert e.value.exit_code == 5
    # an admission covers the region it was reached on, at its precision: a verdict written for another
    # region (or none), or another precision, is no verdict, and the gate runs again (here: unverified)
    from ytk_core.stages.kernel_cache import region_digest
    from ytk_hookspecs.models import CandidatesFile

    cand = next(c for c in CandidatesFile.read(prep / "candidates.json").candidates if c.name == "DwS")
    other = cand.model_copy(update={"ops": [op.model_copy(update={"dilation": [2, 2]}) for op in cand.ops]})
    assert cand.ops and region_digest(other) != region_digest(cand)
    ok = AdmissionRecord(plugin_name="DwS", so_sha256=sha256_file(so), status="admitted",
                         region=region_digest(cand), precision="fp16")
    ok.write(rec_path)
    assert record_for(so, cand, "fp16") is not None
    assert record_for(so, other, "fp16") is None and record_for(so, cand, "fp32") is None
    assert gate_plugins([(so, "DwS")], prep / "model.onnx", "fp16", allow_unverified=False)[0] == {"DwS": "admitted"}
    for forged in (ok.model_copy(update={"region": ""}), ok.model_copy(update={"region": region_digest(other)}),
                   ok.model_copy(update={"precision": "fp32"})):
        forged.write(rec_path)
        with pytest.raises(AdmissionRefused, match="unverified"):
            gate_plugins([(so, "DwS")], prep / "model.onnx", "fp16", allow_unverified=False)


@pytest.mark.gpu
def test_no_planted_kernel_is_admitted_on_the_gpu(suite_dir) -> None:
    work, prep = suite_dir
    arch = admission_suite.local_arch()
    rows = {n: admission_suite.run_one(n, work, prep, arch) for n in admission_suite.PLANTED}
    assert rows["exact"]["verdict"] == "admitted", rows["exact"]
    assert rows["exact"]["exit"] == 0
    wrong = {n: r["verdict"] for n, r in rows.items() if n != "exact" and r["verdict"] != "rejected"}
    assert not wrong, wrong
    assert all(r["exit"] == 5 for n, r in rows.items() if n != "exact")


@pytest.mark.gpu
def test_the_installed_generators_kernel_is_admitted(suite_dir) -> None:
    work, prep = suite_dir
    row = admission_suite.run_generated(work, prep, admission_suite.local_arch())
    assert row["verdict"] == "admitted" and row["exit"] == 0, row


def test_the_autoloop_keeps_only_admitted_plugins_for_a_real_engine() -> None:
    from types import SimpleNamespace

    from ytk_core.autoloop.kernel_jobs import KernelJobs

    def jobs(engine: str) -> SimpleNamespace:
        return SimpleNamespace(ws=SimpleNamespace(state=SimpleNamespace(backends=SimpleNamespace(engine=engine))))

    def rec(status: str) -> AdmissionRecord:
        return AdmissionRecord(plugin_name="P", so_sha256="0" * 64, status=status, reason="no CUDA GPU here")

    assert KernelJobs._not_admitted(jobs("torch"), rec("admitted")) is None
    why = KernelJobs._not_admitted(jobs("torch"), rec("unverified"))
    assert why.startswith("admission: unverified (no CUDA GPU here)")
    assert "admission: unverified (no verdict)" in KernelJobs._not_admitted(jobs("tensorrt"), None)
    assert KernelJobs._not_admitted(jobs("mock"), rec("unverified")) is None  # simulated: nothing real to gate


def test_a_gate_session_that_gates_nothing_makes_nothing(tmp_path, monkeypatch) -> None:
    """Every autoloop build round opens a session; one killed before it gates (or with nothing to gate: the
    mock engine's plugins) must not leave a folder behind in the temp dir."""
    import tempfile

    import ytk_core.stages.admission as adm

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with adm.gate_session() as session:
        assert session.children == 0
    session = adm.GateSession()  # never closed, as in a process killed mid-round
    assert list(tmp_path.iterdir()) == []


def _exact_plugin_without_a_gpu(suite_dir):  # type: ignore[no-untyped-def]
    """The exact planted kernel built, its region, and the prepare dir: for the child-process plumbing tests,
    which only a machine without a GPU runs (there the child answers "unverified" at once)."""
    from tests.conftest import has_cuda
    from ytk_hookspecs.models import CandidatesFile

    if has_cuda():
        pytest.skip("on a GPU machine the child runs the real gate (the GPU tests above)")
    work, prep = suite_dir
    admission_suite.run_one("exact", work, prep, admission_suite.local_arch())
    return work / "exact" / "DwS.so", CandidatesFile.read(prep / "candidates.json").candidates[0], prep


@needs_nvcc
def test_the_gate_runs_in_a_child_whose_death_or_hang_is_a_rejection(suite_dir, monkeypatch) -> None:
    """The child-process plumbing, on any machine: a child that answers (here: no GPU, so unverified), one
    that does not finish in time (killed, rejected)."""
    import ytk_core.stages.admission as adm

    so, cand, prep = _exact_plugin_without_a_gpu(suite_dir)
    seen: list[str] = []
    rec = adm._run_isolated(so, sha256_file(so), "DwS", cand, prep, "fp16", seen.append)
    assert rec.status == "unverified" and "no CUDA GPU here" in rec.reason
    monkeypatch.setattr(adm, "CHILD_TIMEOUT_S", 0.05)
    rec = adm._run_isolated(so, sha256_file(so), "DwS", cand, prep, "fp16", None)
    assert rec.status == "rejected" and "did not finish" in rec.reason
    assert record_for(so).status == "rejected"


@needs_nvcc
def test_a_gate_session_reuses_one_child_and_starts_a_fresh_one_after_a_rejection(suite_dir, monkeypatch,
                                                                                   tmp_path) -> None:
    """The autoloop gates a round's plugins in one child (torch and the CUDA context are loaded once); a
    rejection, a death or a hang ends that child, so the next plugin is judged in a fresh process."""
    import ytk_core.stages.admission as adm

    so, cand, prep = _exact_plugin_without_a_gpu(suite_dir)
    copies = []
    for i in range(3):  # three plugins (copies of one, each its own file)
        c = tmp_path / f"P{i}.so"
        c.write_bytes(so.read_bytes())
        copies.append(c)
    broken = tmp_path / "Broken.so"
    broken.write_bytes(b"not an ELF file")

    def gate(path: Path, digest: str | None = None) -> AdmissionRecord:
        return adm._run_isolated(path, digest or sha256_file(path), path.stem, cand, prep, "fp16", None)

    with adm.gate_session() as session:
        recs = [gate(c) for c in copies]
        assert [r.status for r in recs] == ["unverified"] * 3 and session.children == 1
        assert gate(broken).status == "rejected" and session.children == 1
        assert gate(copies[0]).status == "unverified" and session.children == 2  # fresh after the rejection
        changed = gate(copies[1], digest="0" * 64)
        assert changed.status == "rejected" and "changed while it was being gated" in changed.reason
        assert gate(copies[2]).status == "unverified" and session.children == 3

    with adm.gate_session() as session:  # a child that dies mid-plugin: that plugin is rejected, the next runs
        monkeypatch.setattr(adm, "_child_command", lambda: [sys.executable, "-c", (
            "import sys; sys.stdin.readline(); print('killed by the kernel', file=sys.stderr); sys.exit(7)")])
        dead = gate(copies[0])
        assert dead.status == "rejected" and "died" in dead.reason and "exit 7" in dead.reason
        assert "killed by the kernel" in dead.reason
        # a child that says it is done but wrote no verdict, and waits for the next plugin: ended, not waited on
        monkeypatch.setattr(adm, "_child_command", lambda: [sys.executable, "-c", (
            "import sys\nfor line in sys.stdin: print('@@ytk-gate-verdict admitted', flush=True)")])
        mute = gate(copies[2])
        assert mute.status == "rejected" and "left no readable verdict" in mute.reason
        monkeypatch.undo()
        assert gate(copies[1]).status == "unverified" and session.children == 3

    with adm.gate_session() as session:  # a hang: killed, rejected, and the next plugin gets a fresh child
        monkeypatch.setattr(adm, "CHILD_TIMEOUT_S", 0.05)
        assert "did not finish" in gate(copies[0]).reason
        monkeypatch.setattr(adm, "CHILD_TIMEOUT_S", 600)
        assert gate(copies[1]).status == "unverified" and session.children == 2


@pytest.mark.gpu
def test_a_gate_session_on_the_gpu_admits_in_one_child_and_judges_after_a_rejection_in_a_fresh_one(
        suite_dir, tmp_path) -> None:
    """The real gate through one session, as the autoloop's build round runs it: two good plugins in one
    child, a planted wrong one rejected (and its child ended), the next good one admitted in a fresh child."""
    import ytk_core.stages.admission as adm
    from ytk_hookspecs.models import CandidatesFile

    work, prep = suite_dir
    arch = admission_suite.local_arch()
    assert admission_suite.run_one("exact", work, prep, arch)["verdict"] == "admitted"
    assert admission_suite.run_one("zeros", work, prep, arch)["verdict"] == "rejected"
    exact, zeros = work / "exact" / "DwS.so", work / "zeros" / "DwS.so.rejected"
    cand = CandidatesFile.read(prep / "candidates.json").candidates[0]
    files = {}
    for name, src in (("A", exact), ("B", exact), ("Z", zeros), ("C", exact)):
        files[name] = tmp_path / f"{name}.so"
        files[name].write_bytes(src.read_bytes())
    with adm.gate_session() as session:
        got = {}
        for name, so in files.items():
            got[name] = adm._run_isolated(so, sha256_file(so), "DwS", cand, prep, "fp16", None).status
            got[name + "#children"] = session.children
    assert got == {"A": "admitted", "A#children": 1, "B": "admitted", "B#children": 1,
                   "Z": "rejected", "Z#children": 1, "C": "admitted", "C#children": 2}, got
    assert session.seconds > 0
