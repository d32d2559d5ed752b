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
