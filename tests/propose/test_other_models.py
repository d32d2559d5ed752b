"""propose is not shaped around one model: a small ViT (softmax attention) and a MobileNetV3 (squeeze-excite),
both profiled by the mock engine (SIMULATED)."""

from __future__ import annotations

import pytest

from ytk_core.propose import ProposeOptions, propose
from ytk_core.propose.given import _GraphView
from ytk_core.propose.modules import load_fx_nodes

from .conftest import make_bundle, unpack


@pytest.fixture(scope="module", params=["tinyvit_2x64x64", "mnv3_1x128x128"])
def model(request, tmp_path_factory):  # type: ignore[no-untyped-def]
    d = unpack(request.param, tmp_path_factory.mktemp(request.param) / "base")
    make_bundle(d, d / "base.tgz")
    return d


def _carve_sites(d, selector):  # type: ignore[no-untyped-def]
    from ytk_core.frontend.regions import GraphIndex, match_sites
    from ytk_core.frontend.selectors import parse_selector

    gi = GraphIndex(_GraphView(load_fx_nodes(d / "fx_nodes.json")))
    return sorted(s.module_path for s in match_sites(parse_selector(selector), gi))


def test_every_ms_accounted_and_selectors_carve_exactly(model):
    # --roofline 1.0 puts nothing "at roofline", so every family becomes a candidate to check
    r = propose(model / "base.tgz", model / "model.onnx", model / "fx_nodes.json",
                options=ProposeOptions(min_ms=0.0, family_min_ms=0.0, roofline_fraction=1.0))
    assert abs(r.attributed_ms + r.glue_ms - r.total_ms) < 0.1
    assert abs(sum(p.ms for p in r.proposals) + sum(x.ms for x in r.not_worth) - r.total_ms) < 0.1
    assert len(r.candidates) >= 3
    for p in r.candidates:
        assert _carve_sites(model, p.selector) == sorted(s.module_path for s in p.sites), p.selector


def test_softmax_attention_is_an_around_region(tmp_path):
    d = unpack("tinyvit_2x64x64", tmp_path / "vit")
    make_bundle(d, d / "base.tgz")
    r = propose(d / "base.tgz", d / "model.onnx", d / "fx_nodes.json",
                options=ProposeOptions(min_ms=0.02, family_min_ms=0.04))
    att = next(p for p in r.candidates if p.kind == "attention")
    assert att.ops_name == "Attention" and att.around and att.selector.startswith("yasp::AttentionC")
    assert len(att.sites) == len(_carve_sites(d, att.selector)) >= 2


def test_time_outside_every_region_says_what_it_is_spent_on(tmp_path):
    """A ViT's LayerNorms and GELUs lie outside every region: the row names them by op type, heaviest first,
    rather than calling them residual adds and plumbing."""
    d = unpack("tinyvit_2x64x64", tmp_path / "vit")
    make_bundle(d, d / "base.tgz")
    r = propose(d / "base.tgz", d / "model.onnx", d / "fx_nodes.json", options=ProposeOptions())
    row = next(x for x in r.not_worth if x.category == "outside_regions")
    head, spent = row.reason.split(": ", 1)
    assert head == "no heavy op to build a kernel around", row.reason
    parts = [p for p in spent.split(", ") if p != "..."]
    ms = [float(p.split()[-2]) for p in parts]
    assert len(parts) >= 2 and ms == sorted(ms, reverse=True), row.reason
    assert sum(ms) <= row.ms + 1e-6


def test_a_squeeze_excite_module_is_one_region_not_two_tiny_convs(tmp_path):
    """MobileNetV3's SqueezeExcite (pool, fc1 + ReLU, fc2 + hardsigmoid, times its input) is proposed whole,
    as the kernel generators' squeeze-excite template takes it; its two 1x1 convs on the pooled vector are
    never proposed on their own, and the selector carves exactly the SE modules."""
    d = unpack("mnv3_1x128x128", tmp_path / "mnv3")
    make_bundle(d, d / "base.tgz")
    r = propose(d / "base.tgz", d / "model.onnx", d / "fx_nodes.json",
                options=ProposeOptions(min_ms=0.0, family_min_ms=0.0, roofline_fraction=1.0))
    se = [p for p in r.candidates if p.kind == "squeeze_excite"]
    assert se and all(p.ops_name == "SqueezeExcite" and p.name.startswith("SEC") for p in se), \
        [(p.name, p.kind) for p in r.candidates]
    se_paths = {s.module_path for p in se for s in p.sites}
    assert se_paths and all(path.endswith(".se") for path in se_paths)
    for p in r.candidates:
        if p.kind != "squeeze_excite":
            assert not any(".se." in s.module_path for s in p.sites), p.selector
        assert _carve_sites(d, p.selector) == sorted(s.module_path for s in p.sites), p.selector


@pytest.mark.slow
def test_projections_an_attention_module_applies_itself_are_not_called_light(tmp_path):
    """nn.MultiheadAttention applies its in/out projections with F.linear on its own weights: no selector
    reaches them, and its :around region leaves them out. propose said their time had "no heavy op to build a
    kernel around"; they get a row of their own that says why they cannot be proposed."""
    from tests.frontend.test_attention_carve import FAST_MHA_PY
    from tests.helpers import prepare, ytk_inproc

    model = tmp_path / "model.py"
    model.write_text(FAST_MHA_PY)
    base = tmp_path / "base"
    assert prepare(model, base).code == 0
    r = ytk_inproc("embedded", "compile", "-a", "arm64-sm87-dos6010-cu114-trt86", "-p", "fp16", "--onnx",
                   base / "model.onnx", "--npz", base / "model.npz", "-o", base / "base.tgz", YTK_ENGINE="mock")
    assert r.code == 0, r.stderr
    report = propose(base / "base.tgz", base / "model.onnx", base / "fx_nodes.json",
                     options=ProposeOptions(min_ms=0, launch_ms=0))
    rows = [x for x in report.not_worth if x.category == "outside_regions"]
    gemm = next(x for x in rows if x.label == "GEMMs no selector reaches")
    assert gemm.members == ["blocks.0.mha", "blocks.1.mha"] and gemm.ms > 0
    assert "MultiheadAttention applies itself" in gemm.reason
    light = [x for x in rows if x.label == "ops outside any region"]
    assert all("MatMul" not in x.reason and "Gemm" not in x.reason for x in light), light
