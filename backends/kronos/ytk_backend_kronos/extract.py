"""Unpack a Kronos job archive without trusting it: the shared safe extraction
(:func:`ytk_hookspecs.service.archive.safe_extract`), under a Kronos job's top-level names."""

from __future__ import annotations

from pathlib import Path

from ytk_core.kronos.protocol import JOB_SPEC
from ytk_hookspecs.service.archive import ArchiveRefused, ExtractLimits
from ytk_hookspecs.service.archive import safe_extract as _safe_extract

__all__ = ["ArchiveRefused", "ExtractLimits", "TOP_LEVEL", "safe_extract"]

#: what a job archive may hold at its root (see ytk_core.kronos.jobpack)
TOP_LEVEL = (JOB_SPEC, "inputs", "plugins")


def safe_extract(archive: Path, dest: Path, limits: ExtractLimits) -> list[str]:
    """Unpack ``archive`` into ``dest`` (created, must not exist); returns the files written."""
    return _safe_extract(archive, dest, limits, TOP_LEVEL)
