"""Checks of what a user typed on the command line, each failing with one paragraph that says the fix."""

from __future__ import annotations

import os
from pathlib import Path

from ytk_hookspecs.models import ArchSpec, ArchSpecError

from ..errors import UsageError

PRECISIONS = ("fp16", "fp32")


def parse_arch(spec: str) -> ArchSpec:
    """Parse ``-a``; a malformed spec names the bad field. ``auto`` is the local GPU's target, else the
    worked example's DRIVE AGX Orin (as ``ytk autoloop -a auto``), and the log says which."""
    if spec == "auto":
        from ..target import detect_arch
        from ..runtime import runtime

        spec, why = detect_arch()
        runtime().log.info(f"-a auto: {spec}", why=why)
    try:
        return ArchSpec.parse(spec)
    except ArchSpecError as e:
        raise UsageError(f"-a/--arch: {e}") from None


def parse_precision(precision: str) -> str:
    p = precision.strip().lower()
    if p not in PRECISIONS:
        raise UsageError(f"-p/--precision must be fp16 or fp32, not {precision!r}")
    return p


def existing_file(path: Path, what: str, hint: str = "") -> Path:
    """``path`` as given, after checking it is a readable file."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{what} {p} does not exist." + (f" {hint}" if hint else ""))
    if not p.is_file():
        raise UsageError(f"{what} {p} is not a file." + (f" {hint}" if hint else ""))
    return p


def parse_config(items: list[str] | None) -> dict[str, str]:
    """``--config key=value`` (repeatable) into a dict; a malformed item is an error naming it."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--config {item!r}: expected key=value, e.g. --config deployment_target=tensorrt")
        out[key.strip()] = value.strip()
    return out


def bundle_label(output: Path) -> str:
    """The label verify shows for a bundle: its file name without the archive suffix."""
    name = Path(output).name
    for suffix in (".tar.gz", ".tgz"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return Path(name).stem or name


def output_file(path: Path, what: str) -> Path:
    """``path`` as given, after checking it can be written as a file (not an existing folder)."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{what} {p} is a folder; give the file to write, e.g. {p / 'out.tgz'}")
    if p.exists() and not p.is_file():
        # a device, FIFO or socket would be replaced by a regular file (as root: /dev/null)
        raise UsageError(f"{what} {p} exists and is not a regular file (a device, FIFO or socket); give a file "
                         "path to write")
    # the nearest folder that exists must take new files (the missing ones are created in it): said before any work
    # is done, and in the user's words rather than through the name of a temporary file beside the output
    from ..staging import missing_folders

    parent = missing_folders(p.absolute().parent)[0]
    if not parent.is_dir():
        raise UsageError(f"{what} {p}: cannot create output directory {p.parent}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {p}: cannot write in {parent} (permission denied); choose another path")
    return p
