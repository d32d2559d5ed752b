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
