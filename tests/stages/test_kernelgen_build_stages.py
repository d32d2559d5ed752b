"""`ytk kernelgen compile/get/export` and `ytk embedded build-plugin` on their real contracts."""

from __future__ import annotations

import ctypes
import types

import pytest

from tests.helpers import as_real_source, backend_plugin
from tests.stages.carved_fixture import ARCH, PLUGIN
from ytk_hookspecs.kernel_source import KernelSource, report_path
from ytk_hookspecs.models import BackendInfo, BuildResult, KernelGenResult, KernelReport, SupportAnswer
from ytk_hookspecs.plugin_info import read_plugin_description


def _pt2(d):  # type: ignore[no-untyped-def]
    return d / "carved" / "plugin_candidates" / f"{PLUGIN}.pt2"


def _kg(ytk, d, *extra):  # type: ignore[no-untyped-def]
    out = d / "carved" / "sources" / f"{PLUGIN}.module_source.py"
    return ytk("kernelgen", "compile", "-r", _pt2(d), "-g", "Orin", "-o", out, "--kernelgen", "mock", *extra), out


@pytest.mark.parametrize("cfg", [(), ("--config", "deployment_target=torch")])
def test_kernelgen_refuses_without_deployment_target_before_any_job(ytk, fixture_dir, tmp_path, cfg):
    r, out = _kg(ytk, fixture_dir, *cfg)
    assert r.code == 2
    assert "deployment_target=tensorrt" in r.stderr and "nothing was started" in r.stderr
    assert "TensorRT plugin rather than a standalone torch extension" in r.stderr
    assert not out.exists() and not (tmp_path / "cache").exists()


def test_kernelgen_compile_writes_checked_source_and_report(ytk, fixture_dir):
    r, out = _kg(ytk, fixture_dir, "--config", "deployment_target=tensorrt", "--json")
    assert r.code == 0, r.stderr
    data = r.json()
    assert data["status"] == "done" and data["job_id"].startswith("mock-") and data["candidate"] == PLUGIN
    assert data["contract"]["ok"] is True
    src = KernelSource.read(out)
    assert len(src.meta.inputs) == 3, "lifted weight and bias are inputs"
    assert src.meta.inputs[0].format == "kHWC8" and src.meta.inputs[0].dtype == "float16"
    assert "SIMULATION PLACEHOLDER" in src.source
    rep = KernelReport.read(data["report"])
    assert rep.simulated and "SIMULATED" in rep.measured_on
    # get fetches the same job
    again = fixture_dir / "again.module_source.py"
    r = ytk("kernelgen", "get", data["job_id"], "-o", again, "--kernelgen", "mock")
    assert r.code == 0, r.stderr
    assert again.read_text() == out.read_text()
    r = ytk("kernelgen", "get", "mock-000000000000", "-o", again, "--kernelgen", "mock")
    assert r.code != 0 and "does not know job" in r.stderr


@pytest.mark.parametrize("bad", ["mock_defect=bogus", "mock_bandwidth_fraction=abc"])
def test_a_bad_config_value_is_a_usage_error_not_a_failed_job(ytk, fixture_dir, bad):
    """A key the generator reads with a value it cannot use is the user's typo: exit 2 and one line that names
    the key and what it takes, never "kernel generation failed" with a backend's exit 3."""
    r, out = _kg(ytk, fixture_dir, "--config", "deployment_target=tensorrt", "--config", bad, "--json")
    assert r.code == 2, r.stderr
    assert f"--config {bad}: " in r.stderr and "kernel generation failed" not in r.stderr
    assert r.json()["exit_code"] == 2 and not out.exists() and "Traceback" not in r.stderr


def test_kernelgen_without_candidate_fails_clearly(ytk, fixture_dir):
    (fixture_dir / "carved" / "candidates.json").unlink()
    r, out = _kg(ytk, fixture_dir, "--config", "deployment_target=tensorrt")
    assert r.code != 0 and "candidates.json" in r.stderr and not out.exists()


class _BadKernelgen:
    """A generator that forgets the lifted weights: the core must refuse its kernel."""

    info = BackendInfo(name="forgetful", roles=["kernelgen"], description="test")

    def supports(self, request, ctx):  # type: ignore[no-untyped-def]
        return SupportAnswer(supported=True, certain=False, why="test")

    def submit(self, request, ctx):  # type: ignore[no-untyped-def]
        from ytk_backend_mock.kernelgen import make_meta

        meta = make_meta(request.candidate, "fp16", 87, 0.5)
        meta = meta.model_copy(update={"inputs": meta.inputs[:1]})
        KernelSource(header="", source=f"int {meta.launcher}(){{return 0;}} {meta.workspace}", meta=meta
                     ).write(request.output)
        rep = KernelReport(plugin_name=meta.plugin_name, backend="f", job_id="f-1", region_kind="test",
                           measured_on="nothing", simulated=True, error_budget="-", candidates=[], winner=None
                           ).write(report_path(request.output))
        return KernelGenResult(job_id="f-1", status="done", source=request.output, report=rep)

    def fetch(self, job_id, output, ctx):  # type: ignore[no-untyped-def]
        return None


def _with_backend(monkeypatch, name, obj):  # type: ignore[no-untyped-def]
    from ytk_core import runtime as rt_mod
    from ytk_core.plugins import BackendManager

    real = rt_mod.Runtime.manager

    def manager(self):  # type: ignore[no-untyped-def]
        if self._mgr is None:
            self._mgr = BackendManager(extra_plugins={name: backend_plugin(obj)})
        return self._mgr

    monkeypatch.setattr(rt_mod.Runtime, "manager", property(manager))
    return real


def test_kernel_breaking_its_region_contract_is_refused_and_kept_aside(ytk, fixture_dir, monkeypatch):
    _with_backend(monkeypatch, "forgetful", _BadKernelgen())
    out = fixture_dir / "carved" / "sources" / f"{PLUGIN}.module_source.py"
    r = ytk("kernelgen", "compile", "-r", _pt2(fixture_dir), "-g", "Orin", "-o", out, "--kernelgen", "forgetful",
            "--config", "deployment_target=tensorrt")
    assert r.code != 0
    assert "Error 9" in r.stderr and "do not build it" in r.stderr
    assert not out.exists() and out.with_name(out.name + ".rejected").exists()


def test_build_plugin_renames_in_a_copy_and_prints_the_custom_plugin_line(ytk, fixture_dir):
    r, src = _kg(ytk, fixture_dir, "--config", "deployment_target=tensorrt")
    assert r.code == 0, r.stderr
    before = src.read_bytes()
    so = fixture_dir / "plugins" / "Renamed.so"
    r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", "Renamed", "-s", src, "-o", so,
            "--builder", "mock")
    assert r.code == 0, r.stderr
    assert src.read_bytes() == before, "the generated source is never modified"
    assert f"--custom-plugin {so.resolve()}" in r.stdout and f"renamed from {PLUGIN}" in r.stdout
    d = read_plugin_description(so)
    assert (d.name, d.namespace, d.version, d.num_inputs, d.engine_api, d.sm) == ("Renamed", "yasp", "1", 3,
                                                                                    "mock-cpu", 87)
    lib = ctypes.CDLL(str(so))
    fn = getattr(lib, d.launcher)  # renaming changes the plugin name, not the launcher symbol
    assert d.launcher == f"{PLUGIN}_launch"
    fn.restype = ctypes.c_int
    assert fn(None, None, None, None, None) == 801, "a mock plugin's launcher says it has no kernel"


def test_build_plugin_refuses_broken_sources_before_building(ytk, fixture_dir, tmp_path):
    r, src = _kg(ytk, fixture_dir, "--config", "deployment_target=tensorrt")
    ks = KernelSource.read(src)
    broken = KernelSource(header=ks.header, source="// launcher removed", meta=ks.meta).write(tmp_path / "b.py")
    so = tmp_path / "b.so"
    r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", PLUGIN, "-s", broken, "-o", so)
    assert r.code != 0 and "not defined in the CUDA source" in r.stderr and not so.exists()
    noweights = KernelSource(header=ks.header, source=ks.source,
                             meta=ks.meta.model_copy(update={"inputs": ks.meta.inputs[:1]})).write(tmp_path / "c.py")
    r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", PLUGIN, "-s", noweights, "-o", so,
            "--candidates", fixture_dir / "carved" / "candidates.json")
    assert r.code != 0 and "Error 9" in r.stderr and not so.exists()
    r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", "9bad", "-s", src, "-o", so)
    assert r.code == 2 and "not a valid plugin name" in r.stderr
    (tmp_path / "junk.py").write_text("x = 1\n")
    r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", PLUGIN, "-s", tmp_path / "junk.py", "-o", so)
    assert r.code == 2 and "not a kernel source bundle" in r.stderr


class _LyingBuilder:
    """Writes a .so whose self-description disagrees with the source it was given."""

    info = BackendInfo(name="liar", roles=["builder"], description="test")

    def build_plugin(self, request, ctx):  # type: ignore[no-untyped-def]
        from ytk_backend_mock import builder

        res = builder.build(request, ctx)
        src = KernelSource.read(request.source)
        lie = src.renamed("SomethingElse").write(request.source)
        res2 = builder.build(types.SimpleNamespace(**{**request.__dict__, "plugin_name": "SomethingElse",
                                                      "source": lie, "engine_api": None}), ctx)
        return BuildResult(so_path=res2.so_path, description=res.description)


def test_built_so_is_checked_against_the_source(ytk, fixture_dir, monkeypatch):
    r, src = _kg(ytk, fixture_dir, "--config", "deployment_target=tensorrt")
    as_real_source(src)  # a real builder takes no simulated placeholder
    _with_backend(monkeypatch, "liar", _LyingBuilder())
    so = fixture_dir / "p.so"
    r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", PLUGIN, "-s", src, "-o", so, "--builder", "liar")
    assert r.code != 0 and "self-description does not match" in r.stderr and "SomethingElse" in r.stderr
    assert not so.exists() and so.with_name("p.so.rejected").exists()


def test_kernelgen_export_writes_a_loadable_program(ytk, fixture_dir):
    import torch

    out = fixture_dir / "standalone.pt2"
    r = ytk("kernelgen", "export", fixture_dir / "model.py", "-o", out)
    assert r.code == 0, r.stderr
    ep = torch.export.load(str(out))
    x = torch.randn(1, 8, 6, 10)
    assert [t.shape for t in ep.module()(x)] == [torch.Size([1, 16, 6, 10]), torch.Size([1, 16, 10, 6])]
    r = ytk("kernelgen", "export", fixture_dir / "missing.py", "-o", out)
    assert r.code == 2 and "does not exist" in r.stderr


def test_kernelgen_export_of_an_untraceable_model_is_one_line(ytk, tmp_path):
    """kernelgen export traced on its own: torch's partial FX graph reached the screen and the error named
    neither the module nor the line. It now exports as prepare does."""
    model = tmp_path / "dd.py"
    model.write_text("import torch\nfrom torch import nn\n\n\nclass Model(nn.Module):\n"
                     "    def forward(self, x):\n        if x.sum() > 0:\n            return x * 2\n"
                     "        return x\n\n\ndef get_fwd_args():\n    return (torch.randn(2, 3),)\n")
    r = ytk("-q", "kernelgen", "export", model, "-o", tmp_path / "dd.pt2")
    assert r.code == 2 and "def forward" not in r.stderr, r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert line.startswith("error: torch.export failed in module <root> (Model) at dd.py:7 (if x.sum() > 0:)")


def test_a_done_job_without_its_report_is_not_done():
    """The report is how a user and the autoloop learn what was measured: required when done."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="must name its report"):
        KernelGenResult(job_id="x", status="done", source="k.module_source.py")
    KernelGenResult(job_id="x", status="failed", message="no kernel")  # a failed or running job has none


@pytest.mark.parametrize("gpu, arch, words", [
    ("foo", None, "no GPU ytk knows; known: "),
    ("H200", "arm64-sm87-dos6010-cu114-trt86", "sm_90 GPU but -a arm64-sm87-dos6010-cu114-trt86 is sm_87"),
])
def test_a_gpu_ytk_does_not_know_or_of_another_sm_is_refused(ytk, fixture_dir, tmp_path, gpu, arch, words):
    """-g foo was accepted silently (the mock scored it as an Orin)."""
    out = tmp_path / "k.module_source.py"
    r = ytk("kernelgen", "compile", "-r", _pt2(fixture_dir), "-g", gpu, "-o", out, "--kernelgen", "mock",
            "--config", "deployment_target=tensorrt", *(["-a", arch] if arch else []))
    assert r.code == 2 and words in r.stderr and not out.exists()


def test_a_contract_warning_is_logged_once_per_invocation(ytk, fixture_dir, capsys):
    """The autoloop checks a kernel's contract at kernelgen, at build-plugin and again per round: the same
    layout warning was logged two or three times for one plugin, in every log format."""
    from ytk_core.runtime import reset_runtime
    from ytk_core.stages.build_plugin import run_build_plugin

    r, src = _kg(ytk, fixture_dir, "--config", "deployment_target=tensorrt")
    assert r.code == 0, r.stderr
    ks = KernelSource.read(src)
    lin = [t.model_copy(update={"format": "kLINEAR"}) if t.role == "activation" else t for t in ks.meta.inputs]
    KernelSource(header=ks.header, source=ks.source, meta=ks.meta.model_copy(update={"inputs": lin}),
                 generator=ks.generator).write(src)
    cands = fixture_dir / "carved" / "candidates.json"
    reset_runtime()
    try:
        capsys.readouterr()
        for so in ("a.so", "b.so"):  # one invocation meeting the same kernel twice, as the autoloop does
            run_build_plugin(ARCH, PLUGIN, src, fixture_dir / so, builder="mock", candidates=cands)
        err = capsys.readouterr().err
    finally:
        reset_runtime()
    assert err.count("layout: ") == 1, err


@pytest.mark.parametrize("kind", ["npz", "pt"])
@pytest.mark.parametrize("dry", [(), ("--dry-run",)])
def test_a_zip_that_is_no_region_program_is_refused_as_what_it_is(ytk, fixture_dir, tmp_path, kind, dry):
    """-r took any zip: a region's .io.npz reached the generator (exit 3, torch's own traceback in its log),
    and the mock made a 'kernel' of a .pt named like a candidate."""
    import numpy as np
    import torch

    bad = tmp_path / f"{PLUGIN}.{kind}"
    if kind == "npz":
        with open(bad, "wb") as f:
            np.savez(f, site0_in0=np.zeros(3))
    else:
        torch.save({"x": torch.zeros(3)}, bad)
    out = tmp_path / "out.module_source.py"
    r = ytk("kernelgen", "compile", "-r", bad, "-g", "Orin", "-o", out, "--kernelgen", "mock", "--config",
            "deployment_target=tensorrt", *dry)
    what = "a NumPy .npz" if kind == "npz" else "a torch.save file"
    assert r.code == 2 and f"is {what}, not a .pt2 (a torch.export archive)" in r.stderr, r.stderr[-1500:]
    assert not out.exists() and "Traceback" not in r.stderr
