"""The templates generator on the real carve of the worked example (the spec's six selectors).

CPU only: ``ytk embedded prepare --plugin`` at a small size, then recognition, the contract and the
reference check for every carved region, exactly as ``kernelgen compile`` runs them before scoring.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import EVIT, SPEC_SIX, prepare
from ytk_backend_templates.cases import captured_inputs
from ytk_backend_templates.generate import JobPlan, plan_job
from ytk_backend_templates.recognise import load_graph
from ytk_backend_templates.reference import verify_against_pt2
from ytk_backend_templates.regions import DwConvRegion, LiteMLARegion
from ytk_hookspecs.contract import check_meta, check_meta_against_candidate
from ytk_hookspecs.models import CandidatesFile, KernelGenRequest

EXPECTED = {
    "LiteMLAC384": LiteMLARegion(dim=16, eps=1e-15, joined=True, channels=384),
    "LiteMLAC768": LiteMLARegion(dim=16, eps=1e-15, joined=True, channels=768),
    "DwConv3x3s1Dyn": DwConvRegion(k=3, stride=1, act="hardswish", channels=None),
    "DwConv5x5s1C384": DwConvRegion(k=5, stride=1, act="none", channels=384),
    "DwConv5x5s1C768": DwConvRegion(k=5, stride=1, act="none", channels=768),
    "DwConv3x3s1C256": DwConvRegion(k=3, stride=1, act="hardswish", channels=256),
}


@pytest.fixture(scope="module")
def carved(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("evit_six")
    r = prepare(EVIT, out, SPEC_SIX)
    assert r.code == 0, r.stderr
    return out


def test_the_six_spec_regions_are_recognised_with_valid_contracts(carved: Path) -> None:
    cands = CandidatesFile.read(carved / "candidates.json").candidates
    assert sorted(c.name for c in cands) == sorted(EXPECTED)
    for c in cands:
        req = KernelGenRequest(reference=carved / c.files.pt2, gpu="H200", config={"deployment_target": "tensorrt"},
                               output=carved / f"{c.name}.module_source.py", candidate=c, prepare_dir=carved,
                               plugin_name=c.name)
        plan = plan_job(req)
        assert isinstance(plan, JobPlan), plan.message
        assert plan.region == EXPECTED[c.name], (c.name, plan.region)
        rep = check_meta(plan.meta)
        rep.extend(check_meta_against_candidate(plan.meta, c, "fp16"))
        assert rep.ok, (c.name, rep.errors)
        assert len(plan.site_index) == len(c.sites) and plan.variants
        g = load_graph(carved / c.files.pt2)
        verify_against_pt2(plan.region, torch.export.load(str(carved / c.files.pt2)).module(), g.input_shapes,
                           torch.device("cpu"))
        # the captured site inputs become a scoring case for every distinct shape
        assert sorted(captured_inputs(carved / c.files.io_npz, plan.shapes)) == list(range(len(plan.shapes)))


CONVNEXT = Path(__file__).parents[2] / "data" / "convnext_style_model.py"


def test_convnext_blocks_carved_with_their_layernorm_are_recognised(tmp_path: Path) -> None:
    """ConvNeXt's dw 7x7 + LayerNorm as the carve's @epilogue takes it (the norm's weight and bias lifted after the
    conv's): LayerNorm2d's region in NCHW, nn.LayerNorm's on the NHWC view a Linear reads; both recognised, their
    contracts match the carve's nodes, their references reproduce the carved programs."""
    from ytk_backend_templates.regions import DwConvLNRegion
    from ytk_backend_templates.supports import supports
    from ytk_hookspecs.models import SupportRequest

    r = prepare(CONVNEXT, tmp_path, ["yasp::Ln=Conv2d@where=*.0.conv_dw,*.1.conv_dw@epilogue",
                                     "yasp::LnNhwc=Conv2d@where=*.2.conv_dw,*.3.conv_dw@epilogue"])
    assert r.code == 0, r.stderr
    for c in CandidatesFile.read(tmp_path / "candidates.json").candidates:
        req = KernelGenRequest(reference=tmp_path / c.files.pt2, gpu="H200", config={"deployment_target": "tensorrt"},
                               output=tmp_path / f"{c.name}.module_source.py", candidate=c, prepare_dir=tmp_path,
                               plugin_name=c.name)
        plan = plan_job(req)
        assert isinstance(plan, JobPlan), plan.message
        assert plan.region == DwConvLNRegion(k=7, stride=1, eps=1e-6, channels=32, closed=c.name == "Ln"), plan.region
        rep = check_meta(plan.meta)
        rep.extend(check_meta_against_candidate(plan.meta, c, "fp16"))
        assert rep.ok, (c.name, rep.errors)
        assert plan.meta.outputs[0].format == ("kHWC8" if c.name == "Ln" else "kLINEAR") and plan.variants
        g = load_graph(tmp_path / c.files.pt2)
        verify_against_pt2(plan.region, torch.export.load(str(tmp_path / c.files.pt2)).module(), g.input_shapes,
                           torch.device("cpu"))
        ans = supports(SupportRequest(candidate=c, reference=tmp_path / c.files.pt2))
        assert ans.supported and ans.certain and ans.kind == "dwconv_ln", ans
