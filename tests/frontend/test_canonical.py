"""The canonical region graph: one spelling for the same math, and regions cut as zoo code writes them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.conftest import REPO
from tests.frontend.test_carve import _assert_reproduces_reference
from tests.helpers import prepare
from ytk_core.frontend.canonical import canonicalise
from ytk_hookspecs.models import CandidatesFile

ZOO = REPO / "tests" / "data" / "zoo_style_model.py"


def _targets(gm) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


class Spellings(nn.Module):
    def forward(self, x):
        hs = x * F.relu6(x + 3) / 6
        hs2 = x * F.hardsigmoid(x)
        silu = x * torch.sigmoid(x)
        relu6 = torch.clamp(x, 0, 6)
        gelu = 0.5 * x * (1 + torch.erf(x / 1.4142135623730951))
        gelu_t = 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
        ident = F.dropout(x.clone(), 0.1, training=False).contiguous().reshape(x.shape)
        return hs, hs2, silu, relu6, gelu, gelu_t, ident


def test_every_spelling_becomes_one_op():
    x = torch.randn(2, 8, 5)
    gm = torch.export.export(Spellings(), (x,)).module()
    want = gm(x)
    notes = canonicalise(gm)
    assert any("activations respelled" in n for n in notes) and any("identities" in n for n in notes)
    got = gm(x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    t = _targets(gm)
    assert t.count("aten.hardswish.default") == 2 and "aten.silu.default" in t and "aten.hardtanh.default" in t
    assert t.count("aten.gelu.default") == 2
    assert not any(s in " ".join(t) for s in ("clone", "dropout", "contiguous", "erf", "aten.mul", "aten.div"))


def test_different_math_is_left_alone():
    class NotAnActivation(nn.Module):
        def forward(self, x, y):
            return x * torch.sigmoid(y), x * 1.5 + 0.25, torch.clamp(x, -1, 6), x + 1e-15, 1.0 / (x.abs() + 1e-12)

    x, y = torch.randn(4, 6), torch.randn(4, 6)
    gm = torch.export.export(NotAnActivation(), (x, y)).module()
    before = _targets(gm)
    assert canonicalise(gm) == []
    assert _targets(gm) == before


def test_a_layout_copy_that_a_later_view_needs_is_kept():
    """nn.MultiheadAttention makes q/k/v contiguous, selects each and views it by heads: the contiguous() reaches
    the view through the select, so it is no identity (without it the view fails to run)."""
    class SelectThenView(nn.Module):
        def forward(self, x):
            qkv = x.unflatten(-1, (3, 8)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
            return qkv[0].view(4, 2, 2, 4) + qkv[1].view(4, 2, 2, 4)

    x = torch.randn(4, 2, 24)
    gm = torch.export.export(SelectThenView(), (x,)).module()
    want = gm(x)
    canonicalise(gm)
    torch.testing.assert_close(gm(x), want)
    assert {"aten.clone.default", "aten.contiguous.default"} & set(_targets(gm))


def test_symmetric_zero_pad_moves_into_the_conv():
    class Padded(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 8, 3, groups=8)

        def forward(self, x):
            return self.conv(F.pad(x, (1, 1, 1, 1))), self.conv(F.pad(x, (0, 1, 0, 1)))

    x = torch.randn(1, 8, 9, 9)
    gm = torch.export.export(Padded().eval(), (x,)).module()
    want = gm(x)
    assert any("padding" in n for n in canonicalise(gm))
    torch.testing.assert_close(gm(x), want)
    assert sum(t in ("aten.pad.default", "aten.constant_pad_nd.default") for t in _targets(gm)) == 1  # asymmetric


@pytest.mark.slow
def test_zoo_style_blocks_carve_canonical_and_recognised(tmp_path):
    """Sibling conv/BN modules of a multi-conv block, the activation in the BN module, hardswish
    spelled out behind an eval dropout in one block and nn.Hardswish in the other: both depthwise
    sites carve as one plugin (the same canonical program) that the templates recognise."""
    from ytk_backend_templates.recognise import load_graph, recognise
    from ytk_backend_templates.regions import DwConvRegion

    r = prepare(ZOO, tmp_path, ["yasp::Dw=Conv2d@where=*.conv_dw@epilogue",
                                "yasp::Pw=Conv2d@where=*.0.conv_pw@epilogue"], size="1x16x16")
    assert r.code == 0, r.stderr
    cands = {c.name: c for c in CandidatesFile.read(tmp_path / "candidates.json").candidates}
    dw = cands["Dw"]
    assert len(dw.sites) == 2 and dw.input_roles == ["activation", "weight", "bias"]
    assert "aten.hardswish.default" in dw.op_inventory and "aten.clone.default" not in dw.op_inventory
    assert dw.op_inventory.get("aten._native_batch_norm_legit_no_training.default") is None  # folded
    region = recognise(load_graph(tmp_path / dw.files.pt2), dw)
    assert isinstance(region, DwConvRegion) and region.act == "hardswish"
    assert cands["Pw"].op_inventory.get("aten.relu.default") == 1  # bn1.act came with @epilogue
    _assert_reproduces_reference(tmp_path)


@pytest.mark.slow
def test_a_block_of_many_convs_is_lifted_pair_by_pair(tmp_path):
    r = prepare(ZOO, tmp_path, ["yasp::Block=InvertedResidual@where=*.1"], size="1x16x16")
    assert r.code == 0, r.stderr
    block = CandidatesFile.read(tmp_path / "candidates.json").candidates[0]
    assert block.lift == "fold_conv_bn_seq"  # five convs: one folded pair each, not refused
    assert block.input_roles.count("weight") == 5
    _assert_reproduces_reference(tmp_path)


def test_sites_baking_different_weights_are_refused(tmp_path):
    """@lift=none keeps each site's conv weights inside its program; one plugin runs site 0's
    program everywhere, so two sites with different weights must be refused, naming the selector."""
    from ytk_core.errors import RegionRefused  # noqa: F401  (the CLI shows its one line)

    sel = "yasp::Dw=Conv2d@where=*.conv_dw@epilogue@lift=none"
    r = prepare(ZOO, tmp_path, [sel], size="1x16x16")
    assert r.code == 2 and "bakes different weights" in r.stderr and sel in r.stderr
    assert "Drop @lift=none" in r.stderr  # every baked weight is a conv's or its BatchNorm's: lifting helps
    assert "Traceback" not in r.stderr and not (tmp_path / "candidates.json").exists()


@pytest.mark.slow
def test_a_dynamic_program_that_specialises_on_site_0_is_refused_at_the_carve(tmp_path):
    """LiteMLA at 384 and 768 channels in one plugin: its reshapes export with a guard on the head
    count, which fails at the 768-channel sites; refused at the carve, not at the engine compile."""
    from tests.helpers import EVIT

    sel = "yasp::LiteMLADyn=LiteMLA:around"
    r = prepare(EVIT, tmp_path, [sel], size="1x64x96")
    assert r.code == 2 and "its sites differ in a size the region's program fixes (site 0 takes " in r.stderr \
        and sel in r.stderr, r.stderr[-400:]
    # the sites' shapes say what differs (a new user read only torch's "Guard failed: (15 + ...) // 16 == 2")
    line = next(ln for ln in r.stderr.splitlines() if "differ in a size" in ln)
    assert "x384x" in line and "x768x" in line and "split the selector by shape (@where)" in line, line
    assert not (tmp_path / "candidates.json").exists()


_INT_LITERALS = '''
import torch
import torch.nn.functional as F
from torch import nn


class HS(nn.Module):
    def forward(self, x):
        return x * F.relu6(x + 3) / 6          # int literals: traced as add(x, scalar_tensor(3))


class SE(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        s = self.expand(torch.relu(self.reduce(x.mean((2, 3), keepdim=True))))
        return x * (F.relu6(s + 3) / 6)        # hardsigmoid by hand, int literals


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.dw, self.act, self.se = nn.Conv2d(32, 32, 3, 1, 1, groups=32), HS(), SE(32)

    def forward(self, x):
        return self.se(self.act(self.dw(x)))


def get_fwd_args():
    return (torch.randn(1, 32, 16, 16, generator=torch.Generator().manual_seed(1)),)
'''


@pytest.mark.slow
def test_activations_written_with_int_literals_are_respelled_and_grown_over(tmp_path):
    """``x * relu6(x + 3) / 6`` with int literals traces its 3 and 6 as ``scalar_tensor`` nodes: the epilogue
    grows over them (the depthwise conv's region holds its hardswish) and the canonical pass evaluates them
    (a hand-written hardsigmoid gate becomes aten.hardsigmoid), so the templates recognise both regions."""
    from ytk_backend_templates.recognise import load_graph, recognise
    from ytk_backend_templates.regions import DwConvRegion, SERegion

    model = tmp_path / "model.py"
    model.write_text(_INT_LITERALS)
    out = tmp_path / "carve"
    r = prepare(model, out, ["yasp::Dw=Conv2d@where=dw@epilogue", "yasp::SE=SE"], size="1x16x16")
    assert r.code == 0, r.stderr
    cands = {c.name: c for c in CandidatesFile.read(out / "candidates.json").candidates}
    assert cands["Dw"].input_roles == ["activation", "weight", "bias"]  # no literal taken as an input
    dw = recognise(load_graph(out / cands["Dw"].files.pt2), cands["Dw"])
    assert isinstance(dw, DwConvRegion) and dw.act == "hardswish"
    se = recognise(load_graph(out / cands["SE"].files.pt2), cands["SE"])
    assert isinstance(se, SERegion) and se.gate == "hardsigmoid" and se.act == "relu"
    _assert_reproduces_reference(out)


_BRANCH_SUM = '''
import torch
from torch import nn


class Block(nn.Module):
    """MobileOne's branch sum: ``out = 0`` (no scale branch), then ``out += branch(x)``."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(16, 16, 1), nn.Conv2d(16, 16, 1)

    def forward(self, x):
        out = 0
        out += self.a(x)
        out += self.b(x)
        return torch.relu(out)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blk = Block()

    def forward(self, x):
        return self.blk(x)


def get_fwd_args():
    return (torch.randn(1, 16, 8, 8),)
'''


@pytest.mark.slow
def test_an_epilogue_stops_where_the_exporter_fused_a_literal_add_into_a_branch_sum(tmp_path):
    """``0 + a(x)`` traces as ``add(a, scalar_tensor(0))``, which the ONNX exporter folds into the next add, the
    one that sums in ``b(x)``: the whole ONNX node would bring b's value in as a second input, so a's epilogue
    stops before it and the region stays a 1x1 conv the templates take."""
    from ytk_backend_templates.recognise import load_graph, recognise
    from ytk_backend_templates.regions import Conv1x1Region

    model = tmp_path / "model.py"
    model.write_text(_BRANCH_SUM)
    out = tmp_path / "carve"
    r = prepare(model, out, ["yasp::A=Conv2d@where=blk.a@epilogue"], size="1x8x8")
    assert r.code == 0, r.stderr
    cand = CandidatesFile.read(out / "candidates.json").candidates[0]
    assert cand.input_roles == ["activation", "weight", "bias"], cand.input_roles
    assert isinstance(recognise(load_graph(out / cand.files.pt2), cand), Conv1x1Region)


_POOL_SE = '''
import torch
import torch.nn.functional as F
from torch import nn


class SEBlock(nn.Module):
    """The official MobileOne code's squeeze-excite: a whole-image avg_pool2d, then a view."""

    def __init__(self, c):
        super().__init__()
        self.reduce = nn.Conv2d(c, c // 4, 1)
        self.expand = nn.Conv2d(c // 4, c, 1)

    def forward(self, inputs):
        b, c, h, w = inputs.size()
        x = F.avg_pool2d(inputs, kernel_size=[h, w])
        x = torch.sigmoid(self.expand(F.relu(self.reduce(x))))
        return inputs * x.view(-1, c, 1, 1)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.se = nn.Conv2d(3, 32, 3, 2, 1), SEBlock(32)

    def forward(self, x):
        return self.se(torch.relu(self.conv(x)))


def get_fwd_args():
    return (torch.randn(1, 3, 32, 32),)
'''


@pytest.mark.slow
def test_a_squeeze_excite_pooling_with_a_whole_image_avg_pool_is_one(tmp_path):
    """A new user's MobileOne SE (``F.avg_pool2d(x, kernel_size=[h, w])``) was no squeeze-excite to propose (its
    convs were proposed apart) nor to the templates ('expected one convolution, found 2'). The pool's window is
    the whole image: propose counts it as a global pool, and the carve writes it as the mean it is."""
    from tests.propose.test_propose_carve_agree import _propose_all
    from ytk_backend_templates.recognise import load_graph, recognise
    from ytk_backend_templates.regions import SERegion

    model = tmp_path / "model.py"
    model.write_text(_POOL_SE)
    report = _propose_all(model, tmp_path / "base", "1x3x32x32")
    se = [p for p in report.candidates if p.kind == "squeeze_excite"]
    assert [p.selector for p in se] == ["yasp::SEC32R8=SEBlock"], [p.selector for p in report.candidates]
    out = tmp_path / "carve"
    r = prepare(model, out, [se[0].selector], size="1x3x32x32")
    assert r.code == 0, r.stderr
    cand = CandidatesFile.read(out / "candidates.json").candidates[0]
    assert "aten.mean.dim" in cand.op_inventory and "aten.avg_pool2d.default" not in cand.op_inventory
    got = recognise(load_graph(out / cand.files.pt2), cand)
    assert isinstance(got, SERegion) and got.gate == "sigmoid" and got.act == "relu", got
    _assert_reproduces_reference(out)
