"""Issue 29, item 5: no traceback ever reaches a user. Each crafted input below once printed a raw
Python traceback (exit 1); each must now be one clear line and a documented exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers import ytk_inproc

ARCH = "arm64-sm87-dos6010-cu114-trt86"
TINY = REPO / "tests" / "data" / "tiny_dw_model.py"
MOCK = {"YTK_ENGINE": "mock", "YTK_KERNELGEN": "mock", "YTK_BUILDER": "mock", "YTK_EXAMPLE_SIZE": "1x32x32"}


def one_line_error(r, code: int) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.code == code, (r.code, r.stderr)
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errs) == 1, r.stderr
    assert "\x1b[" not in errs[0]
    return errs[0]


def model_file(tmp_path: Path, name: str, init: str = "", forward: str = "return x * 2", top: str = "") -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text(
        "import sys\nimport torch\n" + top + "\n"
        "class Model(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        + (f"        {init}\n" if init else "") +
        "    def forward(self, x):\n"
        f"        {forward}\n"
        "def get_fwd_args():\n"
        "    return (torch.randn(1, 3, 8, 8),)\n")
    return p


def prepare(model: Path, out: Path):
    return ytk_inproc("embedded", "prepare", model, "--onnx-out", out / "m.onnx", "--npz-out", out / "m.npz",
                      "--reference-out", out / "r.npz", **MOCK)


# -- autoloop -------------------------------------------------------------------------------------------


def test_autoloop_bad_arch_is_usage_error_and_leaves_no_lock(tmp_path):
    wd = tmp_path / "w"
    r = ytk_inproc("autoloop", TINY, "-a", "foo", "--workdir", wd, **MOCK)
    assert "-a/--arch" in one_line_error(r, 2)
    assert not (wd / ".autoloop.lock").exists()


def test_autoloop_lock_released_after_an_error(tmp_path):
    from ytk_core.autoloop.control import LOCK_FILE, WorkdirLock

    with pytest.raises(RuntimeError):
        with WorkdirLock(tmp_path):
            assert (tmp_path / LOCK_FILE).exists()
            raise RuntimeError("boom")
    assert not (tmp_path / LOCK_FILE).exists()
    with WorkdirLock(tmp_path):  # and it can be taken again
        pass


@pytest.mark.parametrize("kind", ["non-utf8", "directory"])
def test_autoloop_bad_state_file(tmp_path, kind):
    wd = tmp_path / "w"
    wd.mkdir()
    if kind == "directory":
        (wd / "autoloop.json").mkdir()
    else:
        (wd / "autoloop.json").write_bytes(b'{"model": "\xff\xfe"}')
    r = ytk_inproc("autoloop", TINY, "-a", ARCH, "--workdir", wd, **MOCK)
    assert "autoloop.json" in one_line_error(r, 2)
    assert not (wd / ".autoloop.lock").exists()


# -- the user's model must not decide ytk's exit ---------------------------------------------------------


@pytest.mark.parametrize("name, kw, says", [
    ("exit0_fwd", {"forward": "sys.exit(0)"}, "sys.exit(0)"),
    ("exit3_fwd", {"forward": "sys.exit(3)"}, "sys.exit(3)"),
    ("exit0_import", {"top": "sys.exit(0)"}, "sys.exit(0)"),
    ("exit0_init", {"init": "sys.exit()"}, "sys.exit()"),
    ("kbi_init", {"init": "raise KeyboardInterrupt"}, "KeyboardInterrupt"),
    ("none_fwd", {"forward": "return None"}, "returned None"),
    ("str_fwd", {"forward": "return 'hello'"}, "returned str"),
    ("int_beside_a_tensor", {"forward": "return x, 3"}, "returned output 1: int (3), not a tensor"),
    ("int_in_a_dict", {"forward": "return {'y': x, 'n': 3}"}, "returned output ['n']: int (3), not a tensor"),
])
def test_prepare_user_exit_is_usage_error(tmp_path, name, kw, says):
    m = model_file(tmp_path, name, **kw)
    r = prepare(m, tmp_path / "out")
    line = one_line_error(r, 2)
    assert says in line and m.name in line, line
    assert "data-dependent" not in line
    assert not (tmp_path / "out" / "m.onnx").exists()


def test_autoloop_user_exit0_is_not_success(tmp_path):
    m = model_file(tmp_path, "exit0", forward="sys.exit(0)")
    r = ytk_inproc("autoloop", m, "-a", ARCH, "--workdir", tmp_path / "w", **MOCK)
    assert "sys.exit(0)" in one_line_error(r, 2)
    assert not (tmp_path / "w" / ".autoloop.lock").exists()


def test_model_os_exit_is_not_ytks_exit(tmp_path):
    """os._exit(0) in the model once ended ytk at once, rc 0 and nothing written; run as a process so a
    regression cannot end the test session with it."""
    m = model_file(tmp_path, "hardexit", forward="import os; os._exit(0)")
    r = run_cli("embedded", "prepare", str(m), "--onnx-out", str(tmp_path / "out" / "m.onnx"), "--npz-out",
                str(tmp_path / "out" / "m.npz"), "--reference-out", str(tmp_path / "out" / "r.npz"),
                env=MOCK)
    assert r.code == 2, (r.code, r.stderr)
    errs = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errs) == 1 and "os._exit(0)" in errs[0] and "hardexit.py:" in errs[0], r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def test_a_process_the_model_forks_still_exits_as_it_should(tmp_path):
    """The os._exit guard is the model's parent process's: a child the model forks (a DataLoader worker ends
    with os._exit) once raised there, unwound into a second ytk and printed an error of its own."""
    m = model_file(tmp_path, "forks", init="import multiprocessing as mp; p = mp.get_context('fork').Process("
                   "target=print); p.start(); p.join(); assert p.exitcode == 0, p.exitcode")
    r = run_cli("embedded", "prepare", str(m), "--onnx-out", str(tmp_path / "out" / "m.onnx"), "--npz-out",
                str(tmp_path / "out" / "m.npz"), "--reference-out", str(tmp_path / "out" / "r.npz"), env=MOCK)
    assert r.code == 0 and "error" not in r.stderr.lower(), r.stderr[-2000:]


def test_a_quote_in_a_module_name_is_named_not_blamed_on_control_flow(tmp_path):
    m = model_file(tmp_path, "quoted", init="self.b = torch.nn.ModuleDict({'c\"d': torch.nn.Conv2d(3, 3, 1)})",
                   forward="return self.b['c\"d'](x)")
    line = one_line_error(prepare(m, tmp_path / "out"), 2)
    assert "'b.c\"d'" in line and "Rename" in line and "control flow" not in line, line


def test_real_ctrl_c_is_still_an_interrupt(tmp_path):
    """A KeyboardInterrupt that is not a `raise` in model.py (a real Ctrl-C) still exits 130."""
    from ytk_core.frontend.loader import user_code

    def deep():
        raise KeyboardInterrupt  # not in model.py: stands for a signal landing in library code

    with pytest.raises(KeyboardInterrupt):
        with user_code(tmp_path / "model.py", "Model()"):
            deep()


# -- paths ----------------------------------------------------------------------------------------------


def test_unwritable_output_path(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    r = prepare(TINY, blocker / "sub")
    one_line_error(r, 2)


@pytest.mark.parametrize("where", ["under_a_file", "in_proc"])
def test_a_compile_output_that_cannot_be_written_names_the_flag(tmp_path, where):
    """Said as -o's problem, before the engine is built, never through the temporary folder beside it."""
    from tests.stages.carved_fixture import make_fixture

    base = make_fixture(tmp_path / "fx") / "base"
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    out = blocker / "x.tgz" if where == "under_a_file" else Path("/proc/ytk-test-x.tgz")
    r = ytk_inproc("embedded", "compile", "-a", "arm64-sm87-dos6010-cu114-trt86", "-p", "fp16", "--onnx",
                   base / "model.onnx", "--npz", base / "model.npz", "-o", out, "--engine", "mock")
    line = one_line_error(r, 2)
    assert line.startswith(f"error: -o/--output {out}") and ".build-" not in line, line


def test_unexpected_exception_is_one_line_exit_1(monkeypatch, capsys):
    import importlib

    appmod = importlib.import_module("ytk_core.cli.app")

    def boom(*a, **k):
        raise KeyError("surprise")

    monkeypatch.setattr(appmod, "build_app", boom)
    code = appmod.main(["backends"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "internal error: KeyError" in err
    code = appmod.main(["-vv", "backends"])
    assert "Traceback" in capsys.readouterr().err  # -vv shows it


def test_ansi_codes_are_stripped():
    from ytk_core.cli.app import clean

    assert clean("\x1b[1;31mred\x1b[0m text") == "red text"


# -- kernel source bundles ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, data", [
    ("non_utf8", b"CUDA_HEADER = '\xff'\n"),
    ("huge_expression", ("x = " + "1+" * 500_000 + "1\n").encode()),
    ("deep_nesting", ("x = " + "-" * 200_000 + "1\n").encode()),
    ("nul_byte", b"CUDA_HEADER = ''\x00\n"),
])
def test_crafted_module_source_in_build_plugin(tmp_path, kind, data):
    src = tmp_path / "P.module_source.py"
    src.write_bytes(data)
    r = ytk_inproc("embedded", "build-plugin", "-a", ARCH, "--plugin-name", "P", "-s", src, "-o", tmp_path / "P.so",
                   "--builder", "mock", **MOCK)
    assert "P.module_source.py" in one_line_error(r, 2)
    assert not (tmp_path / "P.so").exists()


def test_foreign_sys_exit_anywhere_is_an_error(monkeypatch, capsys, tmp_path):
    """A sys.exit() from code ytk runs outside the model loader (any stage) is not ytk's exit status."""
    import importlib

    import typer

    appmod = importlib.import_module("ytk_core.cli.app")
    other = tmp_path / "user_code.py"
    other.write_text("import sys\ndef go(**kw):\n    sys.exit(0)\n")
    ns: dict = {}
    exec(compile(other.read_text(), str(other), "exec"), ns)

    class Cmd:
        main = staticmethod(ns["go"])

    monkeypatch.setattr(typer.main, "get_command", lambda _app: Cmd())
    assert appmod.main(["backends"]) == 2
    err = capsys.readouterr().err
    assert "user_code.py:3" in err and "sys.exit(0)" in err and "Traceback" not in err
    monkeypatch.undo()
    assert appmod.main(["--version"]) == 0  # ytk's own exits are untouched


def test_a_model_that_prints_leaves_json_stdout_one_document(tmp_path):
    """A print() in model.py came first on stdout, so `--json` gave two JSON objects (the fake one first)."""
    import json

    model = model_file(tmp_path, "chatty", init='print(\'{"fake": true}\')',
                       forward='print(\'{"fake": "forward"}\'); return x * 2')
    out = tmp_path / "o"
    r = ytk_inproc("embedded", "prepare", model, "--onnx-out", out / "m.onnx", "--npz-out", out / "m.npz",
                   "--reference-out", out / "r.npz", "--json", **MOCK)
    assert r.code == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)  # exactly one document
    assert "fake" not in doc and '{"fake": true}' in r.stderr
    r = ytk_inproc("embedded", "prepare", tmp_path / "missing.py", "--onnx-out", out / "m.onnx", "--npz-out",
                   out / "m.npz", "--reference-out", out / "r.npz", "--json", **MOCK)
    assert r.code == 2 and json.loads(r.stdout)["exit_code"] == 2


def test_a_child_process_of_the_model_does_not_write_into_json_stdout(tmp_path):
    """The swap was Python-level only: a subprocess (or native code) the model starts wrote to fd 1."""
    import json

    from tests.conftest import run_cli

    model = model_file(tmp_path, "shell", top="import os\n",
                       forward="os.system('echo FROM-A-CHILD'); return x * 2")
    out = tmp_path / "o"
    r = run_cli("embedded", "prepare", model, "--onnx-out", out / "m.onnx", "--npz-out", out / "m.npz",
                "--reference-out", out / "r.npz", "--json", env={"YTK_ENGINE": "mock"})
    assert r.code == 0, r.stderr[-2000:]
    assert "FROM-A-CHILD" not in r.stdout and "FROM-A-CHILD" in r.stderr
    json.loads(r.stdout)
