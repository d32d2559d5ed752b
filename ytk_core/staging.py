"""All-or-nothing outputs for a stage that writes several files.

The stage writes into a staging directory inside the directory its outputs belong to (same file
system, so every move is a rename); only when it has finished are the files moved into place, the
completion marker last. A stage that fails, is interrupted or killed leaves the previous outputs as
they were; a staging directory left by a killed process is removed by the next stage in that
directory.

    with Staged(prep_dir, marker=prep_dir / "prepare.json") as st:
        onnx = st.path(prep_dir / "model.onnx")       # write here ...
        ...
        st.commit(replaced=old_files)                 # ... and everything lands at once
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

from ytk_hookspecs.models import ArtifactError

PREFIX = ".ytk-staging-"


class Staged:
    def __init__(self, home: Path, marker: Path | None = None) -> None:
        self.home = Path(home) if str(home) else Path(".")
        self.marker = Path(marker) if marker is not None else None
        self.dir = self.home / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._outside: dict[Path, Path] = {}  # staged path -> final path, for outputs outside ``home``
        self._made: list[Path] = []  # folders this stage created (removed again, when empty, if it fails)

    def __enter__(self) -> "Staged":
        self._made = _mkdirs(self.home)
        remove_stale(self.home)
        self.dir.mkdir()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        for staged in self._outside:
            staged.unlink(missing_ok=True)
        if exc_type is not None:  # a failed stage leaves no empty folder it made behind
            for d in reversed(self._made):
                try:
                    d.rmdir()
                except OSError:  # not empty (or not ours to remove): kept
                    continue

    def path(self, final: Path) -> Path:
        """Where the stage writes what belongs at ``final``."""
        final = Path(final)
        try:
            rel = final.resolve().relative_to(self.home.resolve())
        except ValueError:
            # beside its final place, not in ``home``: a rename across file systems is no rename (EXDEV)
            # (no sweep of other processes' entries there: a shared folder may hold another host's live ones)
            self._made += _mkdirs(final.parent)
            staged = final.parent / f"{self.dir.name}-{len(self._outside)}.tmp"
            self._outside[staged] = final
            return staged
        return self.dir / rel

    def final(self, staged: Path) -> Path:
        """Where a file written at ``staged`` will be after the commit."""
        staged = Path(staged)
        if staged in self._outside:
            return self._outside[staged]
        return self.home / Path(staged).relative_to(self.dir)

    def commit(self, replaced: Iterable[Path] = ()) -> None:
        """Move every staged file into place (the marker last), then delete ``replaced`` files the
        commit did not overwrite. The old marker goes first: a crash half-way leaves no marker, so the
        directory never claims to be complete while it is mixed."""
        staged = [p for p in self.dir.rglob("*") if p.is_file() or p.is_symlink()]
        staged += [p for p in self._outside if p.is_file()]
        files = sorted(staged, key=lambda p: (self.marker is not None and self.final(p) == self.marker, str(p)))
        for p in files:  # refused before anything moves: the old outputs stay whole
            dest = self.final(p)
            if dest.is_dir() or (dest.exists() and not dest.is_file()):
                raise ArtifactError(f"{dest} exists and is not a regular file (a folder, device, FIFO or socket): "
                                    "nothing was replaced; write to a file path")
        if self.marker is not None:
            self.marker.unlink(missing_ok=True)
        written = set()
        for p in files:
            dest = self.final(p)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(p, dest)
            written.add(dest.resolve())
        for old in replaced:
            if Path(old).resolve() not in written:
                Path(old).unlink(missing_ok=True)


def missing_folders(d: Path) -> tuple[Path, list[Path]]:
    """The nearest existing ancestor of ``d`` (or ``d`` itself), and the folders below it up to ``d`` that
    do not exist yet, outermost first."""
    missing = []
    p = Path(d).absolute()
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    return p, list(reversed(missing))


def _mkdirs(d: Path) -> list[Path]:
    """Make ``d`` and its missing parents; returns those it made, outermost first."""
    made = missing_folders(d)[1]
    Path(d).mkdir(parents=True, exist_ok=True)
    return made


def remove_stale(home: Path) -> None:
    """Staging directories in ``home`` whose process is gone (killed mid-stage)."""
    remove_dead(home, PREFIX)


def remove_dead(home: Path, prefix: str) -> None:
    """Entries ``<prefix><pid>-...`` in ``home`` (temp files or directories named after the process that
    writes them) whose process is gone."""
    for d in Path(home).glob(f"{prefix}*"):
        pid = d.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        if d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)
        else:
            d.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
