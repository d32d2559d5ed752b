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


def _propose_all(model, base, size, kernelgen=None):  # type: ignore[no-untyped-def]
    """prepare, a mock baseline compile and propose with every threshold at zero."""
    assert prepare(model, base, size=size).code == 0
    r = ytk_inproc("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", base / "model.onnx", "--npz",
                   base / "model.npz", "-o", base / "base.tgz", YTK_ENGINE="mock")
    assert r.code == 0, r.stderr
    return propose(base / "base.tgz", base / "model.onnx", base / "fx_nodes.json",
                   options=ProposeOptions(min_ms=0, launch_ms=0, kernelgen=kernelgen))


@pytest.mark.slow
def test_every_proposal_carves_with_its_sites(tmp_path):
    carved = tmp_path / "carved"
    report = _propose_all(ZOO, tmp_path / "base", "1x32x32", kernelgen="mock")
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

    carved = tmp_path / "carved"
    report = _propose_all(VIT, tmp_path / "base", "1x64x64")
    gemms = [p for p in report.candidates if p.selector and p.kind == "gemm"]
    assert len(gemms) >= 4 and all(len(p.sites) == 1 for p in gemms)
    r = prepare(VIT, carved, [p.selector for p in gemms], size="1x64x64")
    assert r.code == 0, r.stderr


@pytest.mark.slow
def test_propose_on_a_plugged_engine_never_proposes_over_a_plugin(tmp_path):
    """Re-proposing on a plugged engine suggested a region containing a plugged one, and the carve then
    refused the pair ('both claim fx node ...'). Such regions are reported, not proposed."""
    from tests.helpers import MNV3

    carved = tmp_path / "carved"
    r = prepare(MNV3, carved, ["yasp::Fc1=Conv2d@where=*.se.fc1"], size="1x64x64")  # a conv inside each SE
    assert r.code == 0, r.stderr
    r = ytk_inproc("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", carved / "model.onnx", "--npz",
                   carved / "model.npz", "-o", carved / "c.tgz", "--custom-plugin", _mock_so(tmp_path, carved, "Fc1"),
                   YTK_ENGINE="mock")
    assert r.code == 0, r.stderr
    report = propose(carved / "c.tgz", carved / "model.onnx", carved / "fx_nodes.json",
                     options=ProposeOptions(min_ms=0, launch_ms=0))
    sites = {s.module_path for s in CandidatesFile.read(carved / "candidates.json").candidates[0].sites}
    for p in report.candidates:
        if p.already_plugged:
            continue
        for s in p.sites:
            path = s.path if hasattr(s, "path") else str(s)
            assert not any(path == q or q.startswith(path + ".") or path.startswith(q + ".") for q in sites), (p, path)
    assert any("overlaps the plugged region" in row.reason for row in report.not_worth)


def _mock_so(tmp_path, carved, name):  # type: ignore[no-untyped-def]
    out = tmp_path / "k.module_source.py"
    r = ytk_inproc("kernelgen", "compile", "-r", carved / "plugin_candidates" / f"{name}.pt2", "-g", "Orin",
                   "--config", "deployment_target=tensorrt", "-o", out, "--kernelgen", "mock")
    assert r.code == 0, r.stderr
    so = tmp_path / f"{name}.so"
    r = ytk_inproc("embedded", "build-plugin", "-s", out, "-a", ARCH, "-o", so, "--plugin-name", name,
                   "--builder", "mock")
    assert r.code == 0, r.stderr
    return so
