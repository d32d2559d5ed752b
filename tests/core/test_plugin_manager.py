"""Loading, validation, broken third-party backends and per-role selection."""

from __future__ import annotations

import importlib.metadata as md
import types

import pytest

from tests.helpers import backend_object, backend_plugin
from ytk_core.errors import UsageError, YtkError
from ytk_core.plugins import BackendManager, select_backend
from ytk_hookspecs import StageContext, hookimpl, loader
from ytk_hookspecs.models import KernelGenRequest, KernelGenResult, SupportAnswer


def make_kernelgen(name: str, calls: list[str], priority: int | None = None, available: bool = True):
    """A plugin module registering one kernel generator ``name`` that records its submits in ``calls``."""
    def submit(request, ctx):
        calls.append(name)
        return KernelGenResult(job_id=name, status="failed", message=name)

    return backend_plugin(backend_object(
        name, ["kernelgen"], priority=priority, available=available, submit=submit,
        fetch=lambda job_id, output, ctx: None,
        supports=lambda request, ctx: SupportAnswer(supported=True, certain=False, why="test")))


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
    res = sel.backend.impl.submit(req, StageContext())
    assert res.job_id == "alpha" and calls == ["alpha"]
    sel = select_backend(mgr, "kernelgen", None, {})
    assert sel.name == "beta" and sel.source == "auto"
    sel.backend.impl.submit(req, StageContext())
    assert calls == ["alpha", "beta"]


def test_one_distribution_registers_several_backends():
    """Any number of objects per plugin; one object may serve several roles."""
    gen = backend_object("gen", ["kernelgen"], submit=lambda r, c: None, fetch=lambda j, o, c: None,
                         supports=lambda r, c: None)
    both = backend_object("both", ["engine", "builder"], compile=lambda r, c: None, profile=lambda r, c: None,
                          build_plugin=lambda r, c: None)
    mgr = BackendManager(autoload=False, extra_plugins={"multi": backend_plugin(gen, both)})
    assert mgr.warnings == []
    assert [b.name for b in mgr.for_role("kernelgen")] == ["gen"]
    assert [b.name for b in mgr.for_role("engine")] == [b.name for b in mgr.for_role("builder")] == ["both"]
    assert mgr.get("gen").impl is gen and mgr.get("both").distribution == "multi (registered in-process)"


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


def test_a_raising_or_lying_availability_probe_makes_the_backend_unavailable():
    def boom(arch=None):
        raise OSError("driver gone")

    raising = backend_object("raising", ["builder"], build_plugin=lambda r, c: None)
    raising.availability = boom
    lying = backend_object("lying", ["builder"], build_plugin=lambda r, c: None)
    lying.availability = lambda arch=None: True
    mgr = BackendManager(autoload=False, extra_plugins={"p": backend_plugin(raising, lying)})
    av = mgr.get("raising").availability()
    assert not av.available and av.reason == "availability probe failed: OSError: driver gone"
    av = mgr.get("lying").availability()
    assert not av.available and "returned bool, not Availability" in av.reason


def test_unknown_name_lists_installed():
    mgr = BackendManager(autoload=False, extra_plugins={"a": make_kernelgen("alpha", []),
                                                        "b": make_kernelgen("beta", [])})
    with pytest.raises(UsageError, match=r"unknown kernelgen backend 'gamma'.*alpha, beta"):
        select_backend(mgr, "kernelgen", "gamma", {})


def test_third_party_backend_never_auto_selected():
    mgr = BackendManager(autoload=False, extra_plugins={"a": make_kernelgen("alpha", [])})
    with pytest.raises(YtkError, match="no kernelgen backend is available"):
        select_backend(mgr, "kernelgen", None, {})


# -- every load-time failure disables one plugin (or one object) with one warning ------------------------


def _only_warning(mgr: BackendManager, needle: str) -> str:
    (w,) = [w for w in mgr.warnings if needle in w]
    assert "\n" not in w
    return w


def test_misspelled_hook_disables_only_that_plugin():
    bad = types.ModuleType("testplugin")

    @hookimpl
    def ytk_register_backend(register):  # noqa: ARG001
        return None

    bad.ytk_register_backend = ytk_register_backend
    mgr = BackendManager(autoload=False, extra_plugins={"bad": bad, "ok": make_kernelgen("fine", [])})
    assert "fine" in mgr.backends and not mgr.pm.has_plugin("bad")
    assert [w for w in mgr.warnings if "'bad'" in w] == [
        "backend plugin 'bad' from bad (registered in-process) is disabled: it implements hook 'ytk_register_backend', "
        "which is no ytk hook (stage hooks were replaced by backend objects: implement ytk_register_backends and "
        "register objects with the methods of ytk_hookspecs.roles)"]


def test_unknown_hook_name_suggests_the_closest():
    bad = types.ModuleType("testplugin")

    @hookimpl
    def ytk_cli_command(cli):  # noqa: ARG001
        return None

    bad.ytk_cli_command = ytk_cli_command
    mgr = BackendManager(autoload=False, extra_plugins={"bad": bad})
    assert _only_warning(mgr, "'bad'").endswith("it implements hook 'ytk_cli_command', which is no ytk hook "
                                                 "(did you mean 'ytk_cli_commands'?)")


def test_a_hookimpl_with_wrong_arguments_disables_only_that_plugin():
    bad = types.ModuleType("testplugin")

    @hookimpl
    def ytk_register_backends(reg):  # noqa: ARG001  (the hook's argument is register)
        return None

    bad.ytk_register_backends = ytk_register_backends
    mgr = BackendManager(autoload=False, extra_plugins={"bad": bad, "ok": make_kernelgen("fine", [])})
    assert "fine" in mgr.backends and not mgr.pm.has_plugin("bad")
    w = _only_warning(mgr, "'bad'")
    assert "is disabled" in w and "ytk_register_backends" in w


def test_a_plugin_disabled_for_wrong_arguments_adds_no_cli_commands_either():
    # pluggy 1.6 keeps the hookimpls it validated before the failing one (ytk_cli_commands sorts first)
    bad = types.ModuleType("testplugin")
    added = []

    @hookimpl
    def ytk_cli_commands(cli):
        added.append("bad")

    @hookimpl
    def ytk_register_backends(reg):  # noqa: ARG001  (the hook's argument is register)
        return None

    bad.ytk_cli_commands, bad.ytk_register_backends = ytk_cli_commands, ytk_register_backends
    mgr = BackendManager(autoload=False, extra_plugins={"bad": bad})
    mgr.add_cli_commands(types.SimpleNamespace(worker=None, root=None))
    assert added == [] and not mgr.pm.has_plugin("bad") and "is disabled" in _only_warning(mgr, "'bad'")


def test_registration_exception_disables_the_plugin_and_what_it_registered():
    bad = types.ModuleType("testplugin")
    early = backend_object("early", ["builder"], build_plugin=lambda r, c: None)

    @hookimpl
    def ytk_register_backends(register):
        register(early)
        raise RuntimeError("boom")

    bad.ytk_register_backends = ytk_register_backends
    mgr = BackendManager(autoload=False, extra_plugins={"bad": bad, "ok": make_kernelgen("fine", [])})
    assert "fine" in mgr.backends and "early" not in mgr.backends and not mgr.pm.has_plugin("bad")
    assert _only_warning(mgr, "'bad'") == ("backend plugin 'bad' from bad (registered in-process) failed to register "
                                           "and is disabled: RuntimeError: boom")


def test_an_object_missing_a_method_of_its_role_is_disabled_alone():
    half = backend_object("half", ["engine"], compile=lambda r, c: None)  # no profile
    whole = backend_object("whole", ["builder"], build_plugin=lambda r, c: None)
    mgr = BackendManager(autoload=False, extra_plugins={"two": backend_plugin(half, whole)})
    assert "half" not in mgr.backends and "whole" in mgr.backends
    assert _only_warning(mgr, "'half'") == ("backend 'half' from two (registered in-process) is disabled: it declares "
                                            "role(s) engine but has no method profile()")


def test_an_object_whose_method_cannot_take_the_arguments_is_disabled():
    odd = backend_object("odd", ["builder"], build_plugin=lambda request: None)  # no ctx
    mgr = BackendManager(autoload=False, extra_plugins={"p": backend_plugin(odd)})
    assert "odd" not in mgr.backends
    assert "its build_plugin() cannot take the 2 argument(s) ytk passes" in _only_warning(mgr, "'odd'")


def test_an_object_without_info_is_disabled():
    mgr = BackendManager(autoload=False, extra_plugins={"p": backend_plugin(object())})
    assert _only_warning(mgr, "object object") == ("backend object object from p (registered in-process) is "
                                                   "disabled: object has no `info` (a BackendInfo)")


def test_a_taken_name_keeps_the_first():
    first = backend_object("same", ["builder"], build_plugin=lambda r, c: "first")
    second = backend_object("same", ["builder"], build_plugin=lambda r, c: "second")
    mgr = BackendManager(autoload=False, extra_plugins={"a": backend_plugin(first), "b": backend_plugin(second)})
    assert mgr.get("same").impl is first
    assert "backend name 'same' from b (registered in-process) is already taken" in _only_warning(mgr, "'same'")


def _with_ytk_entry_point(real, ep):  # type: ignore[no-untyped-def]
    """``importlib.metadata.entry_points`` with ``ep`` added to ytk's group only. Added to every group, it broke
    Triton's own backend discovery when Triton was first imported under the patch (``import triton`` left a
    half-made ``triton.backends`` in sys.modules, and every later torch.export in that process failed)."""
    from ytk_hookspecs.markers import ENTRY_POINT_GROUP

    def entry_points(group=None):  # type: ignore[no-untyped-def]
        return [ep, *real(group=group)] if group == ENTRY_POINT_GROUP else real(group=group)

    return entry_points


def test_a_load_warning_is_printed_once_in_the_format_asked_for(ytk, monkeypatch):
    """Plugins load before -q and --log-format are parsed: their warning was logged in the default format
    whatever the user asked, and `ytk backends` then printed it a second time in its report."""
    from ytk_core.runtime import reset_runtime

    class FakeDist:
        name, version = "ytk-backend-typo", "0.1"

    class FakeEP:
        name, value, dist = "typo", "ytk_backend_typo", FakeDist()

        def load(self):
            raise ImportError("No module named 'cupy'")

    real = md.entry_points
    monkeypatch.setattr(loader.md, "entry_points", _with_ytk_entry_point(real, FakeEP()))
    reset_runtime()
    try:
        r = ytk("--log-format", "console", "backends")
        assert r.code == 0, r.stderr
        assert (r.stdout + r.stderr).count("No module named 'cupy'") == 1, (r.stdout, r.stderr)
        r = ytk("--log-format", "console", "embedded", "verify", "nonexistent.npz", "nonexistent.tgz")
        lines = [ln for ln in r.stderr.splitlines() if "No module named 'cupy'" in ln]
        assert len(lines) == 1 and not lines[0].lstrip().startswith("{"), r.stderr  # console, not JSON
        r = ytk("-qq", "embedded", "verify", "nonexistent.npz", "nonexistent.tgz")
        assert "cupy" not in r.stderr  # -qq: errors only
    finally:
        reset_runtime()


def test_broken_entry_point_import_names_the_distribution(monkeypatch):
    class FakeDist:
        name, version = "ytk-backend-broken", "9.9"

    class FakeEP:
        name, value, dist = "broken", "ytk_backend_broken_nope.plugin", FakeDist()

        def load(self):
            raise ImportError("No module named 'ytk_backend_broken_nope'")

    real = md.entry_points
    monkeypatch.setattr(loader.md, "entry_points", _with_ytk_entry_point(real, FakeEP()))
    mgr = BackendManager(autoload=True)
    assert "mock" in mgr.backends  # everything else keeps working
    assert any("ytk-backend-broken 9.9" in w and "failed to import" in w for w in mgr.warnings)


def _broken_plugin(flaw: str):  # type: ignore[no-untyped-def]
    """What a third-party package with ``flaw`` hands ytk: its entry point's load() result (or error)."""
    bad = types.ModuleType("ytk_backend_typo")
    if flaw == "import error":
        return ImportError("No module named 'cupy'")
    if flaw == "misspelled hook":
        @hookimpl
        def ytk_register_backend(register):  # noqa: ARG001
            return None
        bad.ytk_register_backend = ytk_register_backend
    elif flaw == "wrong arguments":
        @hookimpl
        def ytk_register_backends(reg):  # noqa: ARG001
            return None
        bad.ytk_register_backends = ytk_register_backends
    elif flaw == "raising register":
        @hookimpl
        def ytk_register_backends(register):
            raise KeyError("CUDA_HOME")
        bad.ytk_register_backends = ytk_register_backends
    elif flaw == "missing method":
        return backend_plugin(backend_object("typo", ["kernelgen"], submit=lambda r, c: None))
    return bad


@pytest.mark.parametrize("flaw", ["import error", "misspelled hook", "wrong arguments", "raising register",
                                  "missing method"])
def test_a_broken_installed_backend_leaves_every_command_working(ytk, monkeypatch, flaw):
    """As a user meets it: a broken third-party package is installed; `ytk --help` and `ytk backends` still
    work (exit 0), with one warning line naming the package and the cause."""
    from ytk_core.runtime import reset_runtime

    loaded = _broken_plugin(flaw)

    class FakeDist:
        name, version = "ytk-backend-typo", "0.1"

    class FakeEP:
        name, value, dist = "typo", "ytk_backend_typo", FakeDist()

        def load(self):
            if isinstance(loaded, Exception):
                raise loaded
            return loaded

    real = md.entry_points
    monkeypatch.setattr(loader.md, "entry_points", _with_ytk_entry_point(real, FakeEP()))
    reset_runtime()
    try:
        for args in (["--help"], ["backends"]):
            r = ytk(*args)
            assert r.code == 0, r.stderr
            assert "Traceback" not in r.stderr
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("warning:")]
        assert len(lines) == 1 and "ytk-backend-typo 0.1" in lines[0] and "disabled" in lines[0], r.stdout
        cause = {"import error": "No module named 'cupy'", "misspelled hook": "'ytk_register_backend'",
                 "wrong arguments": "ytk_register_backends", "raising register": "KeyError: 'CUDA_HOME'",
                 "missing method": "no method supports(), fetch()"}[flaw]
        assert cause in lines[0]
        assert "mock" in r.stdout
        r = ytk("backends", "--json")
        assert r.code == 0 and len(r.json()["warnings"]) == 1
    finally:
        reset_runtime()


def test_the_readme_example_backend_loads_and_answers():
    """The README's "Writing your own backend" example is a backend ytk loads as written."""
    import re

    from tests.conftest import REPO
    from ytk_hookspecs.models import RegionSketch, SupportRequest

    section = (REPO / "README.md").read_text().split("## Writing your own backend", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    mod = types.ModuleType("readme_backend")
    exec(compile(code, "README.md", "exec"), mod.__dict__)
    mgr = BackendManager(autoload=False, extra_plugins={"readme": mod})
    assert mgr.warnings == [] and "mygen" in mgr.backends
    gen = mgr.get("mygen").impl
    ans = gen.supports(SupportRequest(sketch=RegionSketch(kind="depthwise_conv")), StageContext())
    assert ans.supported and not ans.certain
    assert not gen.supports(SupportRequest(sketch=RegionSketch(kind="gemm")), StageContext()).supported


def test_asking_for_a_disabled_backend_says_why_not_that_it_is_missing():
    from ytk_core.errors import UsageError
    from ytk_core.plugins import select_backend

    half = backend_object("half", ["kernelgen"], supports=lambda r, c: None, submit=lambda r, c: None)
    mgr = BackendManager(autoload=False, extra_plugins={"two": backend_plugin(half)})
    with pytest.raises(UsageError, match=r"'half' .*installed but disabled: .*has no method fetch\(\)"):
        select_backend(mgr, "kernelgen", "half")
