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
