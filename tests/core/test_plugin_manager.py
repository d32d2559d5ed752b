"""Loading, validation, broken third-party backends and per-role selection."""

from __future__ import annotations

import importlib.metadata as md
import types

import pytest

from ytk_core.errors import UsageError, YtkError
from ytk_core.plugins import BackendManager, select_backend
from ytk_core.plugins import manager as manager_mod
from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.models import Availability, BackendInfo, KernelGenRequest, KernelGenResult


def make_kernelgen(name: str, calls: list[str], priority: int | None = None, available: bool = True):
    ns = types.ModuleType("testplugin")

    @hookimpl
    def ytk_register_backend(register):
        register(BackendInfo(name=name, roles=["kernelgen"], description=f"test {name}",
                             auto_priority={"kernelgen": priority} if priority is not None else {}),
                 lambda: Availability(available=available, reason="ok" if available else f"{name} missing"))

    @hookimpl
    def ytk_kernelgen_submit(request, ctx):
        calls.append(name)
        return KernelGenResult(job_id=name, status="failed", message=name)

    ns.ytk_register_backend = ytk_register_backend
    ns.ytk_kernelgen_submit = ytk_kernelgen_submit
    return ns


def test_builtin_frontend_registers_without_autoload():
    mgr = BackendManager(autoload=False)
    assert set(mgr.backends) == {"torch-export"}
    assert mgr.backends["torch-export"].info.roles == ["frontend"]


def test_autoload_env_turns_entry_points_off(monkeypatch):
    monkeypatch.setenv("YTK_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert "mock" not in BackendManager().backends
    monkeypatch.delenv("YTK_DISABLE_PLUGIN_AUTOLOAD")
    assert "mock" in BackendManager().backends


def test_only_the_selected_backend_is_called():
    calls: list[str] = []
    mgr = BackendManager(autoload=False, extra_plugins={
        "a": make_kernelgen("alpha", calls, priority=5), "b": make_kernelgen("beta", calls, priority=9)})
    req = KernelGenRequest(reference="x.pt2", gpu="H200", output="x.py")
    sel = select_backend(mgr, "kernelgen", "alpha", {})
    res = mgr.call(sel.backend, "ytk_kernelgen_submit", request=req, ctx=StageContext())
    assert res.job_id == "alpha" and calls == ["alpha"]
    sel = select_backend(mgr, "kernelgen", None, {})
    assert sel.name == "beta" and sel.source == "auto"
    mgr.call(sel.backend, "ytk_kernelgen_submit", request=req, ctx=StageContext())
    assert calls == ["alpha", "beta"]


def test_precedence_flag_env_config_auto(monkeypatch):
    calls: list[str] = []
    mgr = BackendManager(autoload=False, extra_plugins={
        n: make_kernelgen(n, calls, priority=i) for i, n in enumerate(["p", "q", "r", "s"])})
    cfg = {"backends": {"kernelgen": "q"}}
    monkeypatch.setenv("YTK_KERNELGEN", "r")
    assert select_backend(mgr, "kernelgen", "p", cfg).source == "flag"
    assert select_backend(mgr, "kernelgen", "p", cfg).name == "p"
    sel = select_backend(mgr, "kernelgen", None, cfg)
    assert (sel.name, sel.source) == ("r", "env")
    monkeypatch.delenv("YTK_KERNELGEN")
    sel = select_backend(mgr, "kernelgen", None, cfg)
    assert (sel.name, sel.source) == ("q", "config")
    sel = select_backend(mgr, "kernelgen", None, {})
    assert (sel.name, sel.source) == ("s", "auto")


def test_auto_skips_unavailable_and_says_why():
    mgr = BackendManager(autoload=False, extra_plugins={
        "hi": make_kernelgen("hi", [], priority=9, available=False), "lo": make_kernelgen("lo", [], priority=1)})
    sel = select_backend(mgr, "kernelgen", None, {})
    assert sel.name == "lo"
    assert "hi: hi missing" in sel.reason


def test_unknown_name_lists_installed():
    mgr = BackendManager(autoload=False, extra_plugins={"a": make_kernelgen("alpha", []),
                                                        "b": make_kernelgen("beta", [])})
    with pytest.raises(UsageError, match=r"unknown kernelgen backend 'gamma'.*alpha, beta"):
        select_backend(mgr, "kernelgen", "gamma", {})


def test_third_party_backend_never_auto_selected():
    mgr = BackendManager(autoload=False, extra_plugins={"a": make_kernelgen("alpha", [])})
    with pytest.raises(YtkError, match="no kernelgen backend is available"):
        select_backend(mgr, "kernelgen", None, {})


def test_misspelled_hook_disables_only_that_plugin():
    bad = types.ModuleType("testplugin")

    @hookimpl
    def ytk_engine_compil(request, ctx):  # noqa: ARG001
        return None

    bad.ytk_engine_compil = ytk_engine_compil
    mgr = BackendManager(autoload=False, extra_plugins={"bad": bad, "ok": make_kernelgen("fine", [])})
    assert "fine" in mgr.backends and not mgr.pm.has_plugin("bad")
    assert [w for w in mgr.warnings if "'bad'" in w] == [
        "backend plugin 'bad' from bad (registered in-process) is disabled: it implements hook 'ytk_engine_compil', "
        "which is no ytk hook (did you mean 'ytk_engine_compile'?)"]


def test_a_hookimpl_with_wrong_arguments_disables_only_that_plugin():
    bad = types.ModuleType("testplugin")

    @hookimpl
    def ytk_kernelgen_submit(req, context):  # noqa: ARG001  (the hook's arguments are request, ctx)
        return None

    bad.ytk_kernelgen_submit = ytk_kernelgen_submit
    mgr = BackendManager(autoload=False, extra_plugins={"bad": bad, "ok": make_kernelgen("fine", [])})
    assert "fine" in mgr.backends and not mgr.pm.has_plugin("bad")
    (w,) = [w for w in mgr.warnings if "'bad'" in w]
    assert "is disabled" in w and "ytk_kernelgen_submit" in w and "\n" not in w


def test_registration_exception_is_a_warning():
    bad = types.ModuleType("testplugin")

    @hookimpl
    def ytk_register_backend(register):
        raise RuntimeError("boom")

    bad.ytk_register_backend = ytk_register_backend
    mgr = BackendManager(autoload=False, extra_plugins={"bad": bad, "ok": make_kernelgen("fine", [])})
    assert "fine" in mgr.backends
    assert any("'bad'" in w and "boom" in w for w in mgr.warnings)


def test_missing_stage_hook_disables_backend():
    half = types.ModuleType("testplugin")

    @hookimpl
    def ytk_register_backend(register):
        register(BackendInfo(name="half", roles=["engine"], description="no hooks"))

    half.ytk_register_backend = ytk_register_backend
    mgr = BackendManager(autoload=False, extra_plugins={"half": half})
    assert "half" not in mgr.backends
    assert any("ytk_engine_compile" in w for w in mgr.warnings)


def test_broken_entry_point_import_names_the_distribution(monkeypatch):
    class FakeDist:
        name, version = "ytk-backend-broken", "9.9"

    class FakeEP:
        name, value, dist = "broken", "ytk_backend_broken_nope.plugin", FakeDist()

        def load(self):
            raise ImportError("No module named 'ytk_backend_broken_nope'")

    real = md.entry_points
    monkeypatch.setattr(manager_mod.md, "entry_points",
                        lambda group=None: [FakeEP(), *real(group=group)])
    mgr = BackendManager(autoload=True)
    assert "mock" in mgr.backends  # everything else keeps working
    assert any("ytk-backend-broken 9.9" in w and "failed to import" in w for w in mgr.warnings)


@pytest.mark.parametrize("flaw", ["misspelled hook", "wrong arguments"])
def test_a_broken_installed_backend_leaves_every_command_working(ytk, monkeypatch, flaw):
    """As a user meets it: a third-party package with a typo in a hook name or its arguments is installed;
    `ytk --help` and `ytk backends` still work (exit 0), with one warning line naming the package."""
    from ytk_core.runtime import reset_runtime

    bad = types.ModuleType("ytk_backend_typo")
    if flaw == "misspelled hook":
        @hookimpl
        def ytk_engine_compil(request, ctx):  # noqa: ARG001
            return None
        bad.ytk_engine_compil = ytk_engine_compil
    else:
        @hookimpl
        def ytk_kernelgen_submit(req, context):  # noqa: ARG001
            return None
        bad.ytk_kernelgen_submit = ytk_kernelgen_submit

    class FakeDist:
        name, version = "ytk-backend-typo", "0.1"

    class FakeEP:
        name, value, dist = "typo", "ytk_backend_typo", FakeDist()

        def load(self):
            return bad

    real = md.entry_points
    monkeypatch.setattr(manager_mod.md, "entry_points", lambda group=None: [FakeEP(), *real(group=group)])
    reset_runtime()
    try:
        for args in (["--help"], ["backends"]):
            r = ytk(*args)
            assert r.code == 0, r.stderr
            assert "Traceback" not in r.stderr
        assert "ytk-backend-typo 0.1" in r.stderr and "is disabled" in r.stderr
        assert "mock" in r.stdout
    finally:
        reset_runtime()
