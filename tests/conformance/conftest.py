"""The shipped conformance suite (ytk_hookspecs.testing) against every installed backend, plus this repo's own.

``test_suite.py`` collects the suite's tests; the pytest plugin of ytk-hookspecs parametrizes them
over every installed backend that serves each role, and skips a backend that cannot run on this
machine with its own reason (CI exercises the mock, a GPU machine torch, templates and nvcc too).
Given ``--ytk-backend NAME`` the plugin collects the suite itself, so ``test_suite.py`` steps aside.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stages.carved_fixture import make_fixture


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.name == "test_suite.py" and config.getoption("ytk_backend", default=None):
        return True
    return None


@pytest.fixture
def fixture_dir(tmp_path):  # type: ignore[no-untyped-def]
    return make_fixture(tmp_path / "fx")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("YTK_CACHE_DIR", str(tmp_path / "cache"))
