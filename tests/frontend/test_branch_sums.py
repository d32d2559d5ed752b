"""Re-parameterisable blocks as their training code writes them (RepVGG, MobileOne, FastViT's RepMixer,
RepViT's RepVggDw): parallel branches over one input, summed. propose proposes the whole block and the
carve merges its branches into one conv's (weight, bias) pair, as re-parameterising it would, so the
region is a plain conv a template takes (tests/data/rep_blocks_model.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import prepare, ytk_inproc
from ytk_backend_templates.supports import supports
from ytk_core.frontend.region_rules import FactGraph, branch_sums, folded_scale
from ytk_core.propose import ProposeOptions, propose
from ytk_hookspecs.models import CandidatesFile, FxNodesFile, SupportRequest

MODEL = REPO / "tests" / "data" / "rep_blocks_model.py"
ARCH = "arm64-sm87-dos6010-cu114-trt86"
SIZE = "1x3x32x48"


@pytest.fixture(scope="module")
def proposed(tmp_path_factory):  # type: ignore[no-untyped-def]
    base = tmp_path_factory.mktemp("rep") / "base"
    assert prepare(MODEL, base, size=SIZE).code == 0
    r = ytk_inproc("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", base / "model.onnx", "--npz",
                   base / "model.npz", "-o", base / "base.tgz", YTK_ENGINE="mock")
    assert r.code == 0, r.stderr
    report = propose(base / "base.tgz", base / "model.onnx", base / "fx_nodes.json",
                     options=ProposeOptions(min_ms=0, launch_ms=0, kernelgen="templates"))
    return base, report


def test_the_branch_sums_are_found_and_a_residual_around_one_stays_out(proposed):  # type: ignore[no-untyped-def]
    base, _ = proposed
    facts = FactGraph.from_fx_nodes(FxNodesFile.read(base / "fx_nodes.json"))
    sums = branch_sums([n.name for n in facts.calls()], facts)
    by_module = {facts.nodes[b.root].modules[-1] if facts.nodes[b.root].modules else "": b for b in sums}
    # down (3x3 + 1x1, stride 2: "0 + branch"), blocks.0/1 (+ identity BN), dense (RepVGG), pw (1x1 + identity),
    # expand (two 1x1s, 16 -> 32), rep (RepVggDw: BN of conv + conv1 + x) and each RepMixer (its mixer minus its
    # norm, times the layer scale)
    assert len(sums) == 10, sorted(by_module)  # and excite's (its SE is no branch)
    assert {len(b.convs) for b in sums} == {1, 2}
    mixer = [b for b in sums if facts.nodes[b.root].base == "mul"]
    assert len(mixer) == 2  # the residual x + ls * (...) is left to the kernel: the sum ends at the product
    for b in mixer:
        assert not any(u in b.members for u in facts.users[b.root])
    # a conv and its BatchNorm alone is no sum: the plain lift folds it
    assert not branch_sums([n.name for n in facts.calls() if n.modules and n.modules[-1].startswith("stem")], facts)
    assert folded_scale  # the layer-scale rule a sum's product generalises stays as it was


def test_each_block_is_proposed_whole_named_by_its_largest_kernel(proposed):  # type: ignore[no-untyped-def]
    _, report = proposed
    props = {p.selector.split("=", 2)[1].split("@")[0]: p for p in report.candidates if p.selector}
    names = {p.name for p in report.candidates if p.selector}
    assert "RepMixer" in props and "RepVggDw" in props and "MobileOneBlock" in props
    assert "ConvBN" not in props, props  # no branch is proposed on its own
    assert {"DwConv3x3s2C16", "Conv3x3s1C16to16", "Conv1x1s1C16to16", "Conv1x1s1C16to32"} <= names, names
    labels = {p.name: p.label for p in report.candidates if p.selector}
    assert "3 branches merged" in labels["Conv3x3s1C16to16"]  # RepVGG: 3x3 + 1x1 + the identity BatchNorm
    assert "2 branches merged" in labels["Conv1x1s1C16to16"]  # a 1x1 and the identity
    assert "2 branches merged" in labels["DwConv3x3s2C16"]  # stride 2: no identity
    # a block that also holds an SE is no one conv: its branch sum is proposed alone (@branches), the SE apart
    by_sel = {p.selector: p for p in report.candidates if p.selector}
    assert "yasp::DwConv3x3s1C32=MobileOneBlock@where=excite@branches" in by_sel, sorted(by_sel)
    assert "3 branches merged" in by_sel["yasp::DwConv3x3s1C32=MobileOneBlock@where=excite@branches"].label
    assert any(s.endswith("=SE") or "=SE@where=excite.se" in s for s in by_sel), sorted(by_sel)
    # every block but the dense 3x3s (the stem, RepVGG's) is one the templates take
    assert all(p.supported == (not p.name.startswith("Conv3x3")) for p in report.candidates if p.selector)


@pytest.mark.slow
def test_the_carve_merges_every_block_into_one_conv_the_templates_recognise(proposed, tmp_path):  # type: ignore[no-untyped-def]
    from tests.frontend.test_carve import _assert_reproduces_reference

    _, report = proposed
    carved = tmp_path / "carved"
    sels = [p.selector for p in report.candidates if p.selector]
    r = prepare(MODEL, carved, sels, size=SIZE)
    assert r.code == 0, r.stderr
    kinds = {}
    for c in CandidatesFile.read(carved / "candidates.json").candidates:
        if c.name.startswith("SE"):  # the SE inside the block with one: its own two convs
            continue
        assert c.input_roles == ["activation", "weight", "bias"], (c.name, c.input_roles)  # one merged pair
        assert not any("batch_norm" in op or op.startswith("aten.sub") or op.startswith("aten.mul")
                       for op in c.op_inventory), (c.name, c.op_inventory)
        a = supports(SupportRequest(candidate=c, reference=carved / c.files.pt2))
        kinds[c.name] = a.why if a.supported else f"refused: {a.why}"
    assert "residual=True" in kinds["DwConv3x3s1C16"]  # RepMixer: the merged conv, then x + it
    assert "act=gelu" in kinds["DwConv3x3s2C16"] and "stride=2" in kinds["DwConv3x3s2C16"]
    assert "conv1x1(act=gelu" in kinds["Conv1x1s1C16to16"]
    assert "conv1x1(act=gelu, cin=16, cout=32" in kinds["Conv1x1s1C16to32"]  # no identity: channels differ
    assert kinds["Conv3x3s1C16to16"].startswith("refused: a dense 3x3 conv")
    assert "dwconv(k=3, stride=1, act=none, channels=32" in kinds["DwConv3x3s1C32"]  # excite's sum, its SE after
    _assert_reproduces_reference(carved)


_TWIN = '''import torch
from torch import nn


class Twin(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(8, 8, 3, 1, 1, groups=8)
        self.b = nn.Conv2d(8, 8, 3, 1, 1, groups=8, dilation=1)
        self.c = nn.Conv2d(8, 8, 1, 1, 0, groups=8)

    def forward(self, x):
        return torch.relu(self.a(x) + self.b(x) - self.c(x) + 1.0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.t = Twin()

    def forward(self, x):
        return self.t(x)


def get_fwd_args():
    return (torch.randn(1, 8, 10, 12),)
'''


def test_a_difference_and_a_number_in_the_sum_are_merged_exactly(tmp_path: Path) -> None:
    """Subtraction and a Python number in the sum: the merged pair subtracts the 1x1's weights at the centre
    and adds the number to the bias (checked against the model's own outputs by the carve)."""
    from tests.frontend.test_carve import _assert_reproduces_reference

    model = tmp_path / "model.py"
    model.write_text(_TWIN)
    out = tmp_path / "carved"
    r = prepare(model, out, ["yasp::Twin=Twin"], size="1x8x10x12")
    assert r.code == 0, r.stderr
    c = CandidatesFile.read(out / "candidates.json").candidates[0]
    assert c.lift == "fold_conv_bn" and c.input_roles == ["activation", "weight", "bias"]
    assert dict(c.op_inventory) == {"aten.conv2d.default": 1, "aten.relu.default": 1, "aten.sym_size.int": 1}
    _assert_reproduces_reference(out)


def test_branches_that_do_not_line_up_are_refused_with_why(tmp_path: Path) -> None:
    """A 3x3 without padding and a 1x1 give different shapes (no sum); a 3x3 padded 2 dilated 2 and a 3x3
    padded 1 give the same shape but sample different pixels: refused, not merged wrong."""
    model = tmp_path / "model.py"
    model.write_text(_TWIN.replace("self.b = nn.Conv2d(8, 8, 3, 1, 1, groups=8, dilation=1)",
                                         "self.b = nn.Conv2d(8, 8, 3, 1, 2, groups=8, dilation=2)"))
    r = prepare(model, tmp_path / "carved", ["yasp::Twin=Twin"], size="1x8x10x12")
    assert r.code == 2
    assert "cannot be merged into one conv (their strides, dilations or groups differ); use @lift=none" in r.stderr
    r = prepare(model, tmp_path / "none", ["yasp::Twin=Twin@lift=none"], size="1x8x10x12")
    assert r.code == 0, r.stderr


def test_branches_takes_a_module_with_one_sum_and_says_why_not(tmp_path: Path) -> None:
    from ytk_core.frontend.selectors import SelectorError, parse_selector

    assert parse_selector("yasp::T=Twin@where=t@branches").branches
    for bad in ("yasp::T=Twin:around@branches", "yasp::T=call:torch.relu@branches"):
        with pytest.raises(SelectorError, match="@branches only with a module region"):
            parse_selector(bad)
    model = tmp_path / "model.py"
    model.write_text(_TWIN)
    r = prepare(model, tmp_path / "ok", ["yasp::T=Twin@branches"], size="1x8x10x12")
    assert r.code == 0, r.stderr
    r = prepare(model, tmp_path / "no", ["yasp::A=Conv2d@where=t.a@branches"], size="1x8x10x12")
    assert r.code == 2 and "t.a holds no branch sums (parallel convs of one input, added); @branches takes a " \
        "module that holds exactly one" in r.stderr, r.stderr
