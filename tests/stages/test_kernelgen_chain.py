"""Several kernel generators, in order (issue: kernels for every region, point 2): per region the first
that takes it runs; when its job fails or breaks the contract the next is tried; the outcome says which
generator made the kernel and why the others did not."""

from __future__ import annotations

import json

import pytest

from tests.helpers import backend_plugin
from tests.stages.carved_fixture import PLUGIN
from tests.stages.test_kernelgen_build_stages import _BadKernelgen, _pt2
from ytk_hookspecs.models import BackendInfo, KernelGenResult, SupportAnswer


class _Refuser:
    info = BackendInfo(name="refuser", roles=["kernelgen"], description="test: takes nothing")

    def supports(self, request, ctx):  # type: ignore[no-untyped-def]
        return SupportAnswer(supported=False, certain=True, why="no template for this region")

    def submit(self, request, ctx):  # type: ignore[no-untyped-def]
        raise AssertionError("a certain refusal costs no job")

    def fetch(self, job_id, output, ctx):  # type: ignore[no-untyped-def]
        return None


class _Failer:
    info = BackendInfo(name="failer", roles=["kernelgen"], description="test: every job fails",
                       config_keys={"effort": "how hard to try"})
    seen: list[dict[str, str]] = []

    def supports(self, request, ctx):  # type: ignore[no-untyped-def]
        return SupportAnswer(supported=True, certain=False, why="the job decides")

    def submit(self, request, ctx):  # type: ignore[no-untyped-def]
        _Failer.seen.append(dict(request.config))
        return KernelGenResult(job_id="failer-1", status="failed", message="no variant beat the region's torch ops")

    def fetch(self, job_id, output, ctx):  # type: ignore[no-untyped-def]
        return None


@pytest.fixture
def chain_backends(monkeypatch):  # type: ignore[no-untyped-def]
    from ytk_core import runtime as rt_mod
    from ytk_core.plugins import BackendManager

    rt_mod.reset_runtime()

    def manager(self):  # type: ignore[no-untyped-def]
        if self._mgr is None:
            self._mgr = BackendManager(extra_plugins={n: backend_plugin(o) for n, o in (
                ("refuser", _Refuser()), ("failer", _Failer()), ("forgetful", _BadKernelgen()))})
        return self._mgr

    monkeypatch.setattr(rt_mod.Runtime, "manager", property(manager))
    yield
    rt_mod.reset_runtime()  # no later test meets these backends


def _compile(ytk, d, kernelgen, *extra):  # type: ignore[no-untyped-def]
    out = d / "carved" / "sources" / f"{PLUGIN}.module_source.py"
    return ytk("kernelgen", "compile", "-r", _pt2(d), "-g", "Orin", "-o", out, "--kernelgen", kernelgen,
               "--config", "deployment_target=tensorrt", *extra, "--json")


def test_the_first_generator_that_gives_a_kernel_makes_it(ytk, fixture_dir, chain_backends):
    _Failer.seen.clear()
    r = _compile(ytk, fixture_dir, "refuser,failer,forgetful,mock", "--config", "effort=9")
    assert r.code == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["generator"] == "mock" and out["status"] == "done"
    tried = out["tried"]
    assert [t.split(":")[0] for t in tried] == ["refuser", "failer", "forgetful"]
    assert "no template for this region" in tried[0] and "no variant beat" in tried[1]
    assert "breaks its region's contract" in tried[2]
    assert _Failer.seen == [{"effort": "9"}]  # each generator gets only the keys it reads


def test_every_generator_failing_is_one_error_naming_each(ytk, fixture_dir, chain_backends):
    r = _compile(ytk, fixture_dir, "refuser,failer")
    assert r.code != 0 and "Traceback" not in r.stderr
    assert "refuser: refuses the region" in r.stderr and "failer: " in r.stderr


def test_chains_are_for_kernel_generators_only_and_named_once(ytk, fixture_dir, chain_backends, tmp_path):
    r = _compile(ytk, fixture_dir, "mock,mock")
    assert r.code == 2 and "mock named twice" in r.stderr
    r = _compile(ytk, fixture_dir, "mock,")
    assert r.code == 2 and "separated by commas" in r.stderr
    assert _compile(ytk, fixture_dir, "mock").code == 0
    src = fixture_dir / "carved" / "sources" / f"{PLUGIN}.module_source.py"
    r = ytk("embedded", "build-plugin", "-a", "arm64-sm87-dos6010-cu114-trt86", "--plugin-name", PLUGIN, "-s",
            src, "-o", tmp_path / "x.so", "--builder", "mock,nvcc")
    assert r.code == 2 and "one builder backend only" in r.stderr


def test_the_dry_run_and_the_toml_list_use_the_chain(ytk, fixture_dir, chain_backends, monkeypatch, tmp_path):
    (tmp_path / "ytk.toml").write_text('[backends]\nkernelgen = ["refuser", "mock"]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("YTK_CONFIG", raising=False)
    out = fixture_dir / "carved" / "sources" / f"{PLUGIN}.module_source.py"
    r = ytk("kernelgen", "compile", "-r", _pt2(fixture_dir), "-g", "Orin", "-o", out, "--config",
            "deployment_target=tensorrt", "--dry-run")
    assert r.code == 0, r.stderr[-2000:]
    r = ytk("kernelgen", "compile", "-r", _pt2(fixture_dir), "-g", "Orin", "-o", out, "--config",
            "deployment_target=tensorrt", "--dry-run", "--kernelgen", "refuser")
    assert r.code == 3 and "no template for this region" in r.stdout + r.stderr


def test_backends_shows_the_chain_and_the_gaia_hint_unmangled(ytk, chain_backends, monkeypatch):
    monkeypatch.setenv("YTK_KERNELGEN", "refuser,mock")
    r = ytk("backends", "--json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["selected"]["kernelgen"] == "refuser,mock"
    monkeypatch.setenv("YTK_KERNELGEN", "refuser,nosuch")
    r = ytk("backends")
    assert "unknown kernelgen backend 'nosuch' (from $YTK_KERNELGEN)" in r.stdout.replace("\n", " ")
    monkeypatch.delenv("YTK_KERNELGEN")
    r = ytk("backends")  # gaia is installed with ytk; rich markup must not eat "[backends.gaia]" out of its reason
    assert "gaia" in r.stdout and "[backends.gaia]" in r.stdout


def test_a_simulated_placeholder_is_never_built_into_a_real_plugin(ytk, fixture_dir, tmp_path, monkeypatch):
    """The mock generator's source has no kernel: a real builder refuses it (exit 2); and an autoloop whose
    generator is simulated builds with the simulated builder unless told otherwise."""
    import shutil as _sh

    from ytk_core.autoloop.run import resolve_backends
    from ytk_core.autoloop.state import BackendChoice
    from ytk_core.runtime import reset_runtime

    assert _compile(ytk, fixture_dir, "mock").code == 0
    src = fixture_dir / "carved" / "sources" / f"{PLUGIN}.module_source.py"
    if _sh.which("nvcc"):
        r = ytk("embedded", "build-plugin", "-a", "x86_64-sm90-linux-cu130-trt10", "--plugin-name", PLUGIN, "-s",
                src, "-o", tmp_path / "x.so", "--builder", "nvcc")
        assert r.code == 2 and "simulator's placeholder" in r.stderr and not (tmp_path / "x.so").exists()
    for var in ("YTK_ENGINE", "YTK_KERNELGEN", "YTK_BUILDER"):
        monkeypatch.delenv(var, raising=False)
    reset_runtime()
    chosen = resolve_backends("x86_64-sm90-linux-cu130-trt10", BackendChoice(kernelgen="mock"))
    assert chosen.builder == "mock"
    if _sh.which("nvcc"):  # asked for explicitly, the real builder stays (and refuses the placeholder itself)
        assert resolve_backends("x86_64-sm90-linux-cu130-trt10",
                                BackendChoice(kernelgen="mock", builder="nvcc")).builder == "nvcc"


class _Exploder:
    info = BackendInfo(name="exploder", roles=["kernelgen"], description="test: raises in its own code")

    def supports(self, request, ctx):  # type: ignore[no-untyped-def]
        return SupportAnswer(supported=True, certain=False, why="the job decides")

    def submit(self, request, ctx):  # type: ignore[no-untyped-def]
        if request.config.get("how") == "invalid":
            return KernelGenResult(job_id="x-1", status="done", source=request.output)  # no report: invalid
        raise RuntimeError("generator exploded")

    def fetch(self, job_id, output, ctx):  # type: ignore[no-untyped-def]
        return None


_Exploder.info = BackendInfo(name="exploder", roles=["kernelgen"], description="test: raises in its own code",
                             config_keys={"how": "raise or invalid"})


@pytest.mark.parametrize("how, says", [("raise", "RuntimeError: generator exploded"),
                                       ("invalid", "a done kernel job must name its report")])
def test_an_error_inside_a_backend_is_that_backends_failure_not_a_ytk_bug(ytk, fixture_dir, monkeypatch, how,
                                                                         says):
    from ytk_core import runtime as rt_mod
    from ytk_core.plugins import BackendManager

    rt_mod.reset_runtime()

    def manager(self):  # type: ignore[no-untyped-def]
        if self._mgr is None:
            self._mgr = BackendManager(extra_plugins={"exploder": backend_plugin(_Exploder())})
        return self._mgr

    monkeypatch.setattr(rt_mod.Runtime, "manager", property(manager))
    try:
        r = _compile(ytk, fixture_dir, "exploder", "--config", f"how={how}")
    finally:
        rt_mod.reset_runtime()
    assert r.code == 3, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert "exploder backend" in line and says in line and "not in ytk" in line and "ytk bug" not in line
