"""Shared fixtures: run the CLI in-process or as a real subprocess, and find the repo."""

from __future__ import annotations

import copy
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


def _onnx_registry_built_once() -> None:
    """Every ONNX export builds torch.onnx's registry of torchlib functions afresh (``ONNXRegistry.from_torchlib``):
    onnxscript parses the source of each of ~500 functions again and the exporter infers each one's signature,
    about 1.1 s of every export on CI's cores, which the suite's in-process prepares, carves and autoloops (some
    hundreds of exports) pay each time. The registry is built from torchlib's functions alone, so it is built
    once per opset in each test process here and every export gets its own copy (its own lists, so an op
    registered into one export's registry stays there; the entries, which an export only reads, are shared).
    The exported graphs are byte for byte the same. Applied once the exporter has been imported (the first test
    that exports imports it); nothing happens if torch's internals have moved."""
    mod = sys.modules.get("torch.onnx._internal.exporter._registration")
    cls = getattr(mod, "ONNXRegistry", None)
    build = vars(cls).get("from_torchlib") if isinstance(cls, type) else None
    if not isinstance(build, classmethod) or getattr(build.__func__, "ytk_built_once", False):
        return
    built: dict = {}  # type: ignore[type-arg]

    def from_torchlib(klass, *args, **kwargs):  # type: ignore[no-untyped-def]
        key = (klass, args, tuple(sorted(kwargs.items())))
        if key not in built:
            built[key] = build.__func__(klass, *args, **kwargs)
        registry = copy.copy(built[key])
        registry.functions = {op: list(decomps) for op, decomps in built[key].functions.items()}
        return registry

    from_torchlib.ytk_built_once = True  # type: ignore[attr-defined]
    cls.from_torchlib = classmethod(from_torchlib)


def pytest_runtest_setup(item):  # type: ignore[no-untyped-def]
    _onnx_registry_built_once()


#: The test files that take longest on 2 cores (CPU seconds measured 2026-12-06, their own and their
#: child processes'), longest first. ``make test`` runs whole files on two xdist workers in collection order
#: (--dist loadfile --no-loadscope-reorder), so these start first and the many short files fill the end; by
#: default xdist starts the files with the most tests first, and a long file of few tests (the docs, the
#: zoo's table) could start last and leave the other worker idle. A file not named here only starts later.
LONGEST_FIRST = (
    "tests/autoloop/test_autoloop.py",  # ~185 s
    "tests/backends/templates/test_templates_emit.py",  # ~170 s (nvcc on both cores)
    "tests/autoloop/test_drops.py",  # ~145 s
    "tests/zoo/test_zoo.py",  # ~105 s (the CI subset on both cores)
    "tests/frontend/test_carve.py",
    "tests/docs/test_docs_commands.py",
    "tests/kronos/test_kronos_worker.py",
    "tests/autoloop/test_decision.py",
    "tests/gaia/test_service.py",
    "tests/propose/test_propose_carve_agree.py",
    "tests/stages/test_debug_taps.py",
    "tests/backends/templates/test_templates_dwln.py",
    "tests/hookspecs/test_conformance_plugin.py",
    "tests/autoloop/test_trial_models.py",
    "tests/gaia/test_ray.py",
    "tests/frontend/test_branch_sums.py",
    "tests/trust/test_admission_gate.py",  # ~40 s; the rest take under 30 s each
)


def _longest_files_first(items: list) -> None:  # type: ignore[type-arg]
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: files stay whole


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    _longest_files_first(items)
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
