"""Layering: every backend distribution imports only ytk_hookspecs, itself and the distributions its
pyproject declares; a role backend (engine, kernelgen, builder) never needs the core; ytk_hookspecs
imports no torch when it is imported (a backend without torch must load)."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BACKENDS = sorted(p.parent for p in (REPO / "backends").glob("*/pyproject.toml"))
#: distributions that are not role backends: a worker that runs the core's stages on a target
WORKERS = {"ytk-backend-kronos"}


def _package_of(dist: str) -> str:
    return {"yasp-toolkit": "ytk_core", "ytk-hookspecs": "ytk_hookspecs"}.get(dist, dist.replace("-", "_"))


def _declared(pyproject: Path) -> tuple[str, set[str]]:
    meta = tomllib.loads(pyproject.read_text())["project"]
    deps = {d.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip() for d in meta.get("dependencies", [])}
    return meta["name"], deps


def _ytk_imports(pkg_dir: Path) -> dict[str, set[str]]:
    """Top-level ytk_* packages each module imports (at any depth: lazy imports count)."""
    found: dict[str, set[str]] = {}
    for py in pkg_dir.rglob("*.py"):
        for node in ast.walk(ast.parse(py.read_text(), str(py))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                if top.startswith("ytk_"):
                    found.setdefault(top, set()).add(str(py.relative_to(pkg_dir.parent)))
    return found


@pytest.mark.parametrize("backend", BACKENDS, ids=[b.name for b in BACKENDS])
def test_backends_import_only_what_they_declare(backend: Path) -> None:
    dist, deps = _declared(backend / "pyproject.toml")
    pkg = next(p for p in backend.iterdir() if p.is_dir() and p.name.startswith("ytk_backend_"))
    allowed = {pkg.name, "ytk_hookspecs"} | {_package_of(d) for d in deps}
    bad = {top: sorted(files) for top, files in _ytk_imports(pkg).items() if top not in allowed}
    assert not bad, f"{dist} imports packages its pyproject does not declare: {bad}"
    if dist not in WORKERS:
        assert "yasp-toolkit" not in deps, f"{dist} is a role backend: it must work from ytk_hookspecs alone"


def test_the_layering_check_sees_a_lazy_import(tmp_path: Path) -> None:
    pkg = tmp_path / "ytk_backend_x"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f():\n    from ytk_core.ort import cpu_session\n    import ytk_hookspecs\n")
    assert _ytk_imports(pkg) == {"ytk_core": {"ytk_backend_x/m.py"}, "ytk_hookspecs": {"ytk_backend_x/m.py"}}


def test_hookspecs_imports_no_torch() -> None:
    mods = sorted("ytk_hookspecs." + ".".join(p.relative_to(REPO / "hookspecs" / "ytk_hookspecs").with_suffix("").parts)
                  for p in (REPO / "hookspecs" / "ytk_hookspecs").rglob("*.py") if p.name != "__init__.py"
                  and "testing" not in p.parts)
    code = ("import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in mods)
            + "print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False", "importing ytk_hookspecs pulled in torch"
