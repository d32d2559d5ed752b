"""The CLI tree, ``ytk backends``, and honest not-yet-implemented commands."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


def test_backends_json_lists_mock_and_frontend(ytk):
    r = ytk("backends", "--json")
    assert r.code == 0, r.stderr
    data = r.json()
    names = {b["name"]: b for b in data["backends"]}
    assert names["mock"]["simulated"] is True
    assert names["mock"]["stages"] == ["compile", "profile", "kernelgen", "build_plugin"]
    assert names["torch-export"]["roles"] == ["frontend"]
    assert set(data["selected"]) == {"engine", "kernelgen", "builder"}


def test_backends_table(ytk):
    r = ytk("backends")
    assert r.code == 0
    assert "mock" in r.stdout and "simulated" in r.stdout


@pytest.mark.parametrize("group, cmds", [
    ("embedded", ["prepare", "propose", "compile", "build-plugin", "verify"]),
    ("kernelgen", ["export", "compile", "get"]),
])
def test_cli_tree_has_spec_commands(ytk, group, cmds):
    r = ytk(group, "--help")
    assert r.code == 0
    for c in cmds:
        assert c in r.stdout


def test_unknown_engine_flag_lists_installed(ytk, tmp_path):
    r = ytk("embedded", "compile", "-a", "arm64-sm87-dos6010-cu114-trt86", "--onnx", tmp_path / "m.onnx",
            "--npz", tmp_path / "m.npz", "-o", tmp_path / "o.tgz", "--engine", "nonesuch")
    assert r.code != 0
    assert "nonesuch" in r.stderr and "mock" in r.stderr


def test_console_scripts_are_the_same_cli():
    a = run_cli("backends", "--json")
    b = run_cli("backends", "--json", exe="yasp-toolkit")
    assert a.code == b.code == 0
    assert a.json()["selected"] == b.json()["selected"]


def test_json_log_format_goes_to_stderr():
    r = run_cli("--log-format", "json", "-v", "backends", "--json")
    assert r.code == 0
    assert r.stdout.lstrip().startswith("{")


def test_disk_full_is_one_clear_error(monkeypatch, capsys, tmp_path):
    """A full disk mid-run (ENOSPC from any writer) ends in one paragraph, not a traceback."""
    import errno
    import importlib

    import typer

    cli_app = importlib.import_module("ytk_core.cli.app")  # the module (ytk_core.cli.app is also the Typer app)

    class Full:
        def main(self, **kw):  # type: ignore[no-untyped-def]
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "model.npz"))

    monkeypatch.setattr(typer.main, "get_command", lambda _app: Full())
    assert cli_app.main(["autoloop", "m.py"]) == 1
    err = capsys.readouterr().err
    assert "no space left on the device writing" in err and "model.npz" in err and "Traceback" not in err

    class Other:
        def main(self, **kw):  # type: ignore[no-untyped-def]
            raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(typer.main, "get_command", lambda _app: Other())
    # other OS errors are not disguised as a full disk, and are one line too (a path the user gave: exit 2)
    assert cli_app.main(["autoloop", "m.py"]) == 2
    err = capsys.readouterr().err
    assert "Permission denied" in err and "no space" not in err and "Traceback" not in err


def test_short_help_and_version_options(ytk):
    """-h and -V are what users type first; every command takes -h."""
    r = ytk("-h")
    assert r.code == 0 and "Usage: ytk" in r.stdout and "Kronos" not in r.stdout
    r = ytk("-V")
    assert r.code == 0 and r.stdout.startswith("yasp-toolkit ")
    r = ytk("embedded", "prepare", "-h")
    assert r.code == 0 and "--onnx-out" in r.stdout


def test_outputs_get_the_umask_mode_not_0600(tmp_path):
    """Atomic writes go through mkstemp (0600); what lands under the user's name must be 0644 under umask 022."""
    import os

    from ytk_core.bundle import BundleManifest, write_bundle
    from ytk_hookspecs.models.base import write_bytes_atomic

    old = os.umask(0o022)
    try:
        write_bytes_atomic(tmp_path / "a.json", b"{}")
        man = BundleManifest(arch="arm64-sm87-dos6010-cu114-trt86", precision="fp16", engine_backend="mock",
                             engine_version="8.6-sim", device="sim", simulated=True, onnx="model.onnx",
                             onnx_sha256="a" * 64, npz_sha256="b" * 64)
        write_bundle(tmp_path / "b.tgz", man, {"engine.plan": b"x"})
    finally:
        os.umask(old)
    for f in ("a.json", "b.tgz"):
        assert (tmp_path / f).stat().st_mode & 0o777 == 0o644, f


def test_scripts_and_built_plugins_follow_a_stricter_umask_too(tmp_path, monkeypatch):
    """run_prepare.sh was always 0755 and the nvcc builder's .so too, whatever the umask: under umask 027
    others could still read and run them."""
    import os
    import shutil

    import ytk_hookspecs.models.base as base
    from ytk_core.propose.emit import write_run_script

    monkeypatch.setattr(base, "_UMASK", None)  # the mode is read from the umask once per process
    old = os.umask(0o027)
    try:
        script = tmp_path / "run_prepare.sh"
        write_run_script(script, "#!/usr/bin/env bash\necho hi\n")
        assert script.stat().st_mode & 0o777 == 0o750
        if shutil.which("nvcc"):
            from ytk_backend_nvcc.toolchain import compile_shared
            from ytk_hookspecs.models import ArchSpec

            cu = tmp_path / "k.cu"
            cu.write_text('extern "C" int ytk_k(void) { return 0; }\n')
            so = compile_shared(cu.read_text(), tmp_path / "k.so",
                                ArchSpec.parse("x86_64-sm90-linux-cu130-trt10")).output
            assert so.stat().st_mode & 0o777 == 0o750
    finally:
        os.umask(old)


def test_backends_for_a_target_shows_the_autoloops_choice(ytk):
    """`ytk backends -a ARCH` judges availability for that target, as the autoloop does: nvcc on an x86 host
    builds x86 plugins but not the Orin's (no aarch64 cross compiler here), so the Orin's builder differs."""
    import json

    orin = json.loads(ytk("backends", "-a", "arm64-sm87-dos6010-cu114-trt86", "--json").stdout)
    assert orin["arch"] == "arm64-sm87-dos6010-cu114-trt86"
    nvcc = next(b for b in orin["backends"] if b["name"] == "nvcc")
    host = json.loads(ytk("backends", "-a", "x86_64-sm90-linux-cu130-trt10", "--json").stdout)
    if next(b for b in host["backends"] if b["name"] == "nvcc")["available"]:
        assert not nvcc["available"] and "aarch64" in nvcc["reason"]
        assert orin["selected"]["builder"] != "nvcc"
    r = ytk("backends", "-a", "bogus")
    assert r.code == 2 and "-a/--arch" in r.stderr


def test_backends_shows_the_autoloops_pairing(ytk, monkeypatch):
    """nvcc builds for an x86 target here, but with a simulated generator (no GPU to score kernels on) the
    autoloop builds with the simulated builder: `ytk backends -a` says so, the same as the autoloop records."""
    import json

    from ytk_core.autoloop.run import resolve_backends
    from ytk_core.autoloop.state import BackendChoice

    x86 = "x86_64-sm90-linux-cu130-trt10"
    rep = json.loads(ytk("backends", "-a", x86, "--json").stdout)
    assert rep["selected"] == resolve_backends(x86, BackendChoice()).roles()
    mock = next(b for b in rep["backends"] if b["name"] == "mock")
    assert "simulated H100/H200" in mock["reason"] and "Orin" not in mock["reason"]  # what compile then says
    if rep["selected"]["kernelgen"] == "mock":  # a host without a CUDA device
        assert rep["selected"]["builder"] == "mock", rep["selection_reasons"]
        assert "paired: the kernel generator mock is simulated" in rep["selection_reasons"]["builder"]
    # a Gaia service in the settings is the generator; the simulated engine still pairs with its builder
    monkeypatch.setenv("YTK_GAIA_URL", "http://127.0.0.1:9")
    rep = json.loads(ytk("backends", "-a", x86, "--json").stdout)
    if rep["selected"]["engine"] == "mock":
        assert rep["selected"]["builder"] == "mock" and "simulated" in rep["selection_reasons"]["builder"]


def test_json_commands_fail_with_one_json_object(ytk, tmp_path):
    """A pipeline reading --json gets an object on failure too, and never two documents."""
    import json

    r = ytk("backends", "-a", "bogus", "--json")
    assert r.code == 2 and json.loads(r.stdout) == {"error": r.stdout and json.loads(r.stdout)["error"],
                                                    "exit_code": 2}
    assert "-a/--arch" in json.loads(r.stdout)["error"] and "error:" in r.stderr
    r = ytk("embedded", "compile", "--json")  # a usage error click reports
    assert r.code == 2 and json.loads(r.stdout)["exit_code"] == 2
    r = ytk("backends", "-a", "bogus")  # without --json stdout stays empty
    assert r.code == 2 and r.stdout == ""


def test_every_command_that_takes_an_arch_takes_auto(ytk, tmp_path):
    """-a auto is the local GPU's target, else the worked example's Orin (here: no GPU), on every command."""
    from ytk_core.target import detect_arch
    from ytk_core.stages.inputs import parse_arch

    assert parse_arch("auto").spec == detect_arch()[0]
    r = ytk("embedded", "compile", "-a", "auto", "--onnx", tmp_path / "none.onnx", "--npz", tmp_path / "n.npz",
            "-o", tmp_path / "o.tgz")
    assert r.code == 2 and "-a/--arch" not in r.stderr and "none.onnx" in r.stderr


@pytest.mark.parametrize("args, words", [
    (["backends", "--bogus"], "No such option: --bogus (`ytk backends -h` lists the options)"),
    (["embedded", "compile"], "Missing option '-a' / '--arch'. (`ytk embedded compile -h` lists the options)"),
])
def test_usage_errors_are_one_error_line_like_every_other(ytk, args, words):
    r = ytk(*args)
    assert r.code == 2 and r.stderr.strip() == f"error: {words}" and "Usage:" not in r.stderr


def test_ytk_alone_prints_its_help(ytk):
    r = ytk()
    assert r.code == 0 and "Usage: ytk" in r.stdout and "embedded" in r.stdout


def test_backends_without_a_target_judges_for_auto(ytk):
    """Without -a, `ytk backends` judged this host with no target (nvcc "yes", builder nvcc on an x86 host)
    while every command's `-a auto` targets the Orin here and picks mock: the two disagreed. No -a is now
    -a auto, and the title says what it resolved to."""
    plain, auto = ytk("backends", "--json").json(), ytk("backends", "-a", "auto", "--json").json()
    assert plain["arch"] and plain["arch"] == auto["arch"]
    assert plain["selected"] == auto["selected"]
    assert {b["name"]: b["available"] for b in plain["backends"]} == \
        {b["name"]: b["available"] for b in auto["backends"]}
    r = ytk("backends")
    assert f"installed ytk backends for {plain['arch']} (-a auto: " in r.stdout


@pytest.mark.parametrize("args", [("backends",), ("backends", "--json")])
def test_a_reader_that_goes_away_stops_ytk_quietly(args):
    """`ytk backends | head -0`: the pipe is closed before ytk writes. A table (rich) and a JSON report (print)
    both end quietly with SIGPIPE's status, 141, not an error line about rich's own sys.exit."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("ytk", path=str(Path(sys.executable).parent))
    p = subprocess.Popen([exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # ytk takes a second to start: nothing is written before this
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141, err
    assert "error" not in err and "Traceback" not in err, err


def test_a_misspelled_workers_key_in_ytk_toml_is_refused_with_the_known_ones(tmp_path, monkeypatch):
    """`kronos_tokn = "..."` was ignored: the worker then started without its token, or a client compiled here."""
    cfg = tmp_path / "ytk.toml"
    cfg.write_text('[workers]\nkronos_tokn = "secret"\n')
    monkeypatch.setenv("YTK_CONFIG", str(cfg))
    compile_ = ("embedded", "compile", "-a", "auto", "--onnx", tmp_path / "m.onnx", "--npz", tmp_path / "m.npz",
                "-o", tmp_path / "e.tgz")
    r = run_cli(*compile_)
    assert r.code == 2, r.stderr
    assert "'kronos_tokn' (did you mean 'kronos_token'?)" in r.stderr and "gaia_api_key" in r.stderr
    cfg.write_text('[workers]\nkronos_token = "t"\ngaia_api_key = "k"\n')
    r = run_cli(*compile_)  # now past the config, to the missing ONNX
    assert r.code == 2 and "[workers]" not in r.stderr and "m.onnx" in r.stderr, r.stderr


_SWALLOWS_CTRL_C = '''
import os
import signal

import torch
from torch import nn


class _Finalizer:
    def __del__(self):  # the Ctrl-C lands inside a finalizer, as it did in torch's during an export
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100000):
            pass


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_fwd_args():
    _Finalizer()
    return (torch.randn(1, 3, 16, 16),)
'''


def test_a_ctrl_c_a_finalizer_swallows_still_stops_the_command(tmp_path):
    """A new user's Ctrl-C landed in torch's StorageWeakRef.__del__: Python printed "Exception ignored in ...",
    the autoloop ran on and exited 0. The interrupt is recorded, and the command stops at its next step with
    the one line and exit 130 of any Ctrl-C."""
    model = tmp_path / "model.py"
    model.write_text(_SWALLOWS_CTRL_C)
    r = run_cli("embedded", "prepare", model, "--onnx-out", tmp_path / "b" / "model.onnx", "--npz-out",
                tmp_path / "b" / "model.npz", "--reference-out", tmp_path / "b" / "model.reference.npz")
    assert r.code == 130, (r.code, r.stderr[-2000:])  # 0 before: the finalizer swallowed it
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr
    assert r.stderr.rstrip().splitlines()[-1] == "interrupted"
    assert not (tmp_path / "b" / "model.onnx").exists()  # all-or-nothing: nothing half-written is left
