"""Shared fixtures: run the CLI in-process or as a real subprocess, and find the repo."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def has_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: this machine has none (CI runs without one); "
                                   "run on the device machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self):  # type: ignore[no-untyped-def]
        return json.loads(self.stdout)


@pytest.fixture
def ytk(capsys, monkeypatch, tmp_path):  # type: ignore[no-untyped-def]
    """Run ``ytk ARGS`` in-process; returns exit code, stdout and stderr."""
    from ytk_core.cli.app import main

    monkeypatch.delenv("YTK_ENGINE", raising=False)
    monkeypatch.delenv("YTK_KERNELGEN", raising=False)
    monkeypatch.delenv("YTK_BUILDER", raising=False)

    def run(*args: str) -> Result:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            exe: str = "ytk", timeout: float = 600) -> Result:
    """Run the installed console script as a user would."""
    path = shutil.which(exe, path=str(Path(sys.executable).parent)) or shutil.which(exe)
    assert path, f"{exe} console script not installed"
    e = {**os.environ, **(env or {})}
    p = subprocess.run([path, *map(str, args)], capture_output=True, text=True, env=e, cwd=cwd, timeout=timeout)
    return Result(p.returncode, p.stdout, p.stderr)


# -- prepared directories shared across test folders (each export costs ~20 s on 2 cores) -------------


@pytest.fixture(scope="session")
def evit_plain(tmp_path_factory):
    from tests.helpers import EVIT, prepare

    out = tmp_path_factory.mktemp("evit_plain")
    r = prepare(EVIT, out)
    assert r.code == 0, r.stderr
    return out, r


@pytest.fixture(scope="session")
def evit_carved(tmp_path_factory):
    from tests.helpers import EVIT, SPEC_SIX, prepare

    out = tmp_path_factory.mktemp("evit_carved")
    # Files prepare does not own: a re-run must leave them alone.
    (out / "sources").mkdir()
    (out / "sources" / "DwConv3x3s1C256.module_source.py").write_text("# generated, costly\n")
    (out / "plugin_candidates").mkdir()
    (out / "plugin_candidates" / "DwConv3x3s1C256.so").write_bytes(b"\x7fELF fake")
    r = prepare(EVIT, out, SPEC_SIX)
    assert r.code == 0, r.stderr
    return out, r


@pytest.fixture
def plain_copy(evit_plain, tmp_path):
    """A private copy of the plain prepare directory (its trace stays cached in-process)."""
    dst = tmp_path / "prep"
    shutil.copytree(evit_plain[0], dst)
    return dst
