"""Fixtures of the stage tests: a hand-built prepared + carved directory, an isolated job cache."""

from __future__ import annotations

import pytest

from tests.stages.carved_fixture import make_fixture


@pytest.fixture
def fixture_dir(tmp_path):  # type: ignore[no-untyped-def]
    return make_fixture(tmp_path / "fx")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("YTK_CACHE_DIR", str(tmp_path / "cache"))


def build_mock_plugin(ytk, fixture_dir, *extra_config: str, name: str = "DwConv3x3C16"):  # type: ignore[no-untyped-def]
    """kernelgen compile + build-plugin through the CLI (mock backends); returns the .so path."""
    from tests.stages.carved_fixture import ARCH

    c = fixture_dir / "carved"
    src = c / "sources" / f"{name}.module_source.py"
    args = ["kernelgen", "compile", "-r", c / "plugin_candidates" / "DwConv3x3C16.pt2", "-g", "Orin",
            "--config", "deployment_target=tensorrt", "-o", src, "--kernelgen", "mock"]
    for cfg in extra_config:
        args += ["--config", cfg]
    r = ytk(*args)
    assert r.code == 0, r.stderr
    so = c / "plugins" / f"{name}.so"
    r = ytk("embedded", "build-plugin", "-a", ARCH, "--plugin-name", name, "-s", src, "-o", so, "--builder", "mock")
    assert r.code == 0, r.stderr
    return so


@pytest.fixture
def mock_plugin(ytk, fixture_dir):  # type: ignore[no-untyped-def]
    return build_mock_plugin(ytk, fixture_dir)
