"""The free-space check before a step writes gigabytes: its spare margin fits the disk, and its test
override is checked."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import pytest

import ytk_core.diskspace as ds
from ytk_core.errors import UsageError

Usage = namedtuple("Usage", "total used free")


def test_a_small_disk_keeps_a_tenth_spare_not_a_gigabyte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 400 MB tmpfs with 400 MB free refused a step needing ~0 bytes: 1 GB was kept spare."""
    monkeypatch.delenv("YTK_FREE_BYTES", raising=False)
    monkeypatch.setattr(ds.shutil, "disk_usage", lambda _p: Usage(400_000_000, 0, 390_000_000))
    ds.ensure_free_space(tmp_path, 100_000_000, "the carve's captures")
    with pytest.raises(ds.DiskFull, match="390 MB is free and 40 MB is kept spare"):
        ds.ensure_free_space(tmp_path, 360_000_000, "the carve's captures")
    monkeypatch.setattr(ds.shutil, "disk_usage", lambda _p: Usage(500 << 30, 0, 2 << 30))
    with pytest.raises(ds.DiskFull, match="1.1 GB is kept spare"):
        ds.ensure_free_space(tmp_path, (1 << 30) + 1, "x")


def test_the_free_space_override_must_be_a_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("abc", "\u00b2", "1e9"):  # "²" passed str.isdigit() and then failed int()
        monkeypatch.setenv("YTK_FREE_BYTES", bad)
        with pytest.raises(UsageError, match="YTK_FREE_BYTES="):
            ds.ensure_free_space(tmp_path, 1, "x")
