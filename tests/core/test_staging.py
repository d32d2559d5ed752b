"""All-or-nothing outputs (ytk_core.staging): a file outside the stage's folder lands by a rename on its
own file system, and a destination that is not a regular file stops the commit before anything moves."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from ytk_core.staging import PREFIX, Staged
from ytk_hookspecs.models import ArtifactError


def _write(st: Staged, final: Path, text: str) -> None:
    p = st.path(final)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_an_output_outside_home_is_staged_beside_it(tmp_path: Path) -> None:
    home, other = tmp_path / "prep", tmp_path / "elsewhere"
    with Staged(home, marker=home / "done.json") as st:
        _write(st, home / "a.txt", "a")
        _write(st, other / "ref.npz", "ref")
        assert st.path(other / "x").parent == other  # same folder, hence the same file system
        _write(st, home / "done.json", "{}")
        st.commit()
    assert (other / "ref.npz").read_text() == "ref" and (home / "done.json").is_file()
    assert not [p for p in [*home.iterdir(), *other.iterdir()] if p.name.startswith(PREFIX)]


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm (a tmpfs) for a second file system")
def test_an_output_on_another_file_system_lands(tmp_path: Path) -> None:
    """prepare --reference-out on another file system failed with EXDEV after removing the old marker."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        if os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("/dev/shm is on the same file system here")
        home = tmp_path / "prep"
        with Staged(home, marker=home / "done.json") as st:
            _write(st, Path(shm) / "ref.npz", "ref")
            _write(st, home / "done.json", "{}")
            st.commit()
        assert (Path(shm) / "ref.npz").read_text() == "ref"


def test_a_destination_that_is_no_regular_file_stops_the_commit_first(tmp_path: Path) -> None:
    home = tmp_path / "prep"
    home.mkdir()
    (home / "done.json").write_text("old")
    (home / "a.txt").write_text("old a")
    os.mkfifo(tmp_path / "ref.fifo")
    with pytest.raises(ArtifactError, match="not a regular file"):
        with Staged(home, marker=home / "done.json") as st:
            _write(st, home / "a.txt", "new a")
            _write(st, tmp_path / "ref.fifo", "ref")
            _write(st, home / "done.json", "new")
            st.commit()
    assert (home / "done.json").read_text() == "old" and (home / "a.txt").read_text() == "old a"
    assert not [p for p in tmp_path.rglob(f"{PREFIX}*")]
