"""One rule finds a kernel job's region, for the core and for any generator."""

from __future__ import annotations


import pytest

from tests.stages.carved_fixture import PLUGIN, make_fixture
from ytk_hookspecs.candidates import find_candidate, request_candidate
from ytk_hookspecs.models import ArtifactError, CandidatesFile, KernelGenRequest


def test_found_by_its_file_then_by_name_and_a_named_file_must_be_valid(tmp_path):
    prep = make_fixture(tmp_path / "fx") / "carved"
    cf = CandidatesFile.read(prep / "candidates.json")
    cand = next(c for c in cf.candidates if c.name == PLUGIN)
    pt2 = prep / cand.files.pt2
    found, where = find_candidate(pt2)
    assert found is not None and found.name == PLUGIN and where == prep
    # a copy elsewhere, named like the plugin: found by name through prepare_dir
    copy = tmp_path / "elsewhere" / f"{PLUGIN}.pt2"
    copy.parent.mkdir()
    copy.write_bytes(pt2.read_bytes())
    assert find_candidate(copy) == (None, None)
    assert find_candidate(copy, prepare_dir=prep)[0].name == PLUGIN
    req = KernelGenRequest(reference=copy, gpu="H200", output=tmp_path / "o.module_source.py", prepare_dir=prep)
    assert request_candidate(req).name == PLUGIN
    assert request_candidate(req.model_copy(update={"candidate": cand.model_copy(update={"name": "Given"})})
                             ).name == "Given"
    with pytest.raises(ArtifactError, match="file not found"):
        find_candidate(pt2, candidates_file=tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ArtifactError):
        find_candidate(pt2, candidates_file=bad)
