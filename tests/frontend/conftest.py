"""Prepared directories shared by the frontend tests (each export costs ~20 s on 2 cores)."""

from __future__ import annotations

import shutil

import pytest

from tests.helpers import EVIT, SPEC_SIX, prepare


@pytest.fixture(scope="session")
def evit_plain(tmp_path_factory):
    out = tmp_path_factory.mktemp("evit_plain")
    r = prepare(EVIT, out)
    assert r.code == 0, r.stderr
    return out, r


@pytest.fixture(scope="session")
def evit_carved(tmp_path_factory):
    out = tmp_path_factory.mktemp("evit_carved")
    # Files prepare does not own: a re-run must leave them alone.
    (out / "sources").mkdir()
    (out / "sources" / "DwConv3x3s1C256.module_source.py").write_text("# generated, costly\n")
    (out / "plugin_candidates").mkdir()
    (out / "plugin_candidates" / "DwConv3x3s1C256.so").write_bytes(b"\x7fELF fake")
    r = prepare(EVIT, out, SPEC_SIX)
    assert r.code == 0, r.stderr
    return out, r


@pytest.fixture
def plain_copy(evit_plain, tmp_path):
    """A private copy of the plain prepare directory (its trace stays cached in-process)."""
    dst = tmp_path / "prep"
    shutil.copytree(evit_plain[0], dst)
    return dst
