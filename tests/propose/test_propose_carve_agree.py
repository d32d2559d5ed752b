"""propose and the carve agree: every selector propose prints carves, site for site (issue 22).

On a model written the way model zoos write theirs (tests/data/zoo_style_model.py): sibling conv/BN
modules in blocks of several convs, activations inside the norm modules, a spelled-out hardswish."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.helpers import prepare, ytk_inproc
from ytk_core.frontend.selectors import parse_selector
from ytk_core.propose import ProposeOptions, propose
from ytk_hookspecs.models import CandidatesFile

ZOO = REPO / "tests" / "data" / "zoo_style_model.py"
ARCH = "arm64-sm87-dos6010-cu114-trt86"


@pytest.mark.slow
def test_every_proposal_carves_with_its_sites(tmp_path):
    base, carved = tmp_path / "base", tmp_path / "carved"
    assert prepare(ZOO, base, size="1x32x32").code == 0
    r = ytk_inproc("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", base / "model.onnx", "--npz",
                   base / "model.npz", "-o", base / "base.tgz", YTK_ENGINE="mock")
    assert r.code == 0, r.stderr
    report = propose(base / "base.tgz", base / "model.onnx", base / "fx_nodes.json",
                     options=ProposeOptions(min_ms=0, launch_ms=0, kernelgen="mock"))
    props = [p for p in report.candidates if p.selector]
    assert props, "propose found nothing to plug on the zoo-style model"
    # the convs that timm-style code splits from their norm and activation are proposed on their own
    assert any(parse_selector(p.selector).epilogue for p in props)
    assert all(p.supported is not None for p in props)  # the generator was asked about every one
    r = prepare(ZOO, carved, [p.selector for p in props], size="1x32x32")
    assert r.code == 0, r.stderr
    cands = {c.name: c for c in CandidatesFile.read(carved / "candidates.json").candidates}
    for p in props:
        assert sorted(s.module_path for s in cands[p.name].sites) == sorted(s.module_path for s in p.sites), p.name


@pytest.mark.slow
def test_gemm_proposals_are_one_site_each_and_carve(tmp_path):
    """A Linear keeps its weights baked in the region (only conv weights are lifted), so propose must not
    fold several Linear sites into one selector the carve refuses for baking different weights (a new
    user's model did: 'GemmDyn=Linear@where=*.proj,*.qkv,*.pw2 ... bakes different weights')."""
    from tests.helpers import VIT

    base, carved = tmp_path / "base", tmp_path / "carved"
    assert prepare(VIT, base, size="1x64x64").code == 0
    r = ytk_inproc("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", base / "model.onnx", "--npz",
                   base / "model.npz", "-o", base / "base.tgz", YTK_ENGINE="mock")
    assert r.code == 0, r.stderr
    report = propose(base / "base.tgz", base / "model.onnx", base / "fx_nodes.json",
                     options=ProposeOptions(min_ms=0, launch_ms=0))
    gemms = [p for p in report.candidates if p.selector and p.kind == "gemm"]
    assert len(gemms) >= 4 and all(len(p.sites) == 1 for p in gemms)
    r = prepare(VIT, carved, [p.selector for p in gemms], size="1x64x64")
    assert r.code == 0, r.stderr
