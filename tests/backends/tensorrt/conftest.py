"""Fixtures for the TensorRT engine's tests: a stand-in trtexec on PATH, or no TensorRT at all."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@dataclass
class FakeTrtexec:
    path: Path
    record: Path
    monkeypatch: pytest.MonkeyPatch

    def version(self, banner_number: str) -> None:
        """Which TensorRT the stand-in claims to be (``8601``, ``8501``, ``101401``)."""
        self.monkeypatch.setenv("FAKE_TRT_VERSION", banner_number)

    def calls(self) -> list[dict]:
        import json

        if not self.record.is_file():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]


@pytest.fixture
def fake_trtexec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTrtexec:
    bindir = tmp_path / "fake-bin"
    bindir.mkdir()
    exe = bindir / "trtexec"
    exe.write_text(f"#!{sys.executable}\nimport runpy\nrunpy.run_path({str(HERE / 'fake_trtexec.py')!r}, "
                   "run_name='__main__')\n")
    exe.chmod(0o755)
    record = tmp_path / "trtexec-calls.jsonl"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_TRTEXEC_RECORD", str(record))
    monkeypatch.setenv("FAKE_TRT_VERSION", "8601")
    monkeypatch.delenv("YTK_TRTEXEC", raising=False)
    monkeypatch.delenv("FAKE_TRTEXEC_OUTPUTS", raising=False)
    monkeypatch.delenv("FAKE_TRTEXEC_NO_TIMES", raising=False)
    monkeypatch.delenv("FAKE_TRTEXEC_NO_DEBUG_FLAGS", raising=False)
    monkeypatch.delenv("FAKE_TRTEXEC_SKIP_DEBUG", raising=False)
    return FakeTrtexec(exe, record, monkeypatch)


@pytest.fixture
def no_tensorrt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This machine as one without TensorRT, whatever is installed on it."""
    from ytk_backend_tensorrt import probe

    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("YTK_TRTEXEC", raising=False)
    monkeypatch.delenv("TENSORRT_HOME", raising=False)
    monkeypatch.setattr(probe, "STANDARD_TRTEXEC", ())
    hide_tensorrt_package(monkeypatch)


def hide_tensorrt_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tensorrt Python package, whatever is installed (a stand-in trtexec is then the only TensorRT)."""
    import importlib.util

    from ytk_backend_tensorrt import probe

    real = importlib.util.find_spec
    monkeypatch.setattr(probe.importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorrt" else real(name, *a))


@pytest.fixture(name="no_tensorrt_python")
def _no_tensorrt_python(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_tensorrt_package(monkeypatch)


@pytest.fixture
def fx(tmp_path: Path) -> Path:
    """The stage tests' hand-built prepare dirs (base and carved), fresh per test."""
    from tests.stages.carved_fixture import make_fixture

    return make_fixture(tmp_path / "fx")


@pytest.fixture
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel cache of the test's own (the engine tests build plugins)."""
    monkeypatch.setenv("YTK_CACHE_DIR", str(tmp_path / "cache"))
