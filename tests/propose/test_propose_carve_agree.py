"""propose and the carve agree: every selector propose prints carves, site for site (issue 22).

On a model written the way model zoos write theirs (tests/data/zoo_style_model.py): sibling conv/BN
modules in blocks of several convs, activations inside the norm modules, a spelled-out hardswish."""

from __future__ import annotations

from pathlib import Path

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
    refused the pair ('both claim fx node ...'). No region is proposed over a plugged one."""
    from tests.helpers import MNV3

    carved = tmp_path / "carved"
    # a conv inside each SE
    report = _propose_plugged(tmp_path, MNV3, "yasp::Fc1=Conv2d@where=*.se.fc1", "1x64x64",
                              ProposeOptions(min_ms=0, launch_ms=0))
    sites = {s.module_path for s in CandidatesFile.read(carved / "candidates.json").candidates[0].sites}
    for p in report.candidates:
        if p.already_plugged:
            continue
        for s in p.sites:
            path = s.path if hasattr(s, "path") else str(s)
            assert not any(path == q or q.startswith(path + ".") or path.startswith(q + ".") for q in sites), (p, path)
    # the SE's other conv is a region of its own beside the plugged fc1 (a plugged site stays a heavy op of the
    # SE module, so fc2's region does not climb over it)
    assert any(p.selector.endswith(".se.fc2") or ".se.fc2@" in p.selector for p in report.candidates), \
        [p.selector for p in report.candidates]


def _propose_plugged(tmp_path, model, selector, size, options):  # type: ignore[no-untyped-def]
    """Carve ``selector`` into ``tmp_path/carved``, compile it with a mock plugin and propose on that engine."""
    carved = tmp_path / "carved"
    r = prepare(model, carved, [selector], size=size)
    assert r.code == 0, r.stderr
    name = parse_selector(selector).name
    r = ytk_inproc("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", carved / "model.onnx", "--npz",
                   carved / "model.npz", "-o", carved / "c.tgz", "--custom-plugin", _mock_so(tmp_path, carved, name),
                   YTK_ENGINE="mock")
    assert r.code == 0, r.stderr
    return propose(carved / "c.tgz", carved / "model.onnx", carved / "fx_nodes.json", options=options)


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


#: Attention blocks the carve cannot take whole under ``Cls:around``, each a shrunk copy of the published
#: code it names (timm): a conv between the attention products, the cascade of heads, F.normalize, and
#: relative-position bias tables that differ per block.
PARTS_MODEL = '''
import torch
import torch.nn.functional as F
from torch import nn


def _rel_index(h, w):
    pos = torch.stack(torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")).flatten(1)
    rel = (pos[..., :, None] - pos[..., None, :]).abs()
    return rel[0] * w + rel[1]


class TalkingHeadAttention(nn.Module):
    """efficientformer_v2.Attention2d: 1x1 "talking head" convs between q.k, the softmax and attn.v."""

    def __init__(self, dim=8, heads=2, key_dim=4, res=4):
        super().__init__()
        self.heads, self.scale = heads, key_dim ** -0.5
        self.q, self.k, self.v = (nn.Conv2d(dim, heads * key_dim, 1) for _ in range(3))
        self.talking_head1 = nn.Conv2d(heads, heads, 1)
        self.talking_head2 = nn.Conv2d(heads, heads, 1)
        self.attention_biases = nn.Parameter(torch.randn(heads, res * res) * 0.1)
        self.register_buffer("attention_bias_idxs", _rel_index(res, res), persistent=False)
        self.proj = nn.Conv2d(heads * key_dim, dim, 1)

    def forward(self, x):
        B, C, H, W = x.shape
        q = self.q(x).reshape(B, self.heads, -1, H * W).permute(0, 1, 3, 2)
        k = self.k(x).reshape(B, self.heads, -1, H * W)
        v = self.v(x).reshape(B, self.heads, -1, H * W).permute(0, 1, 3, 2)
        attn = (q @ k) * self.scale + self.attention_biases[:, self.attention_bias_idxs]
        attn = self.talking_head2(self.talking_head1(attn).softmax(dim=-1))
        return self.proj((attn @ v).transpose(2, 3).reshape(B, -1, H, W))


class CascadedAttention(nn.Module):
    """efficientvit_msra.CascadedGroupAttention: each head's input adds the previous head's output and
    goes through that head's conv; one bias table is gathered once and selected per head."""

    def __init__(self, dim=8, heads=2, key_dim=2, res=4):
        super().__init__()
        self.key_dim, self.d, self.scale = key_dim, dim // heads, key_dim ** -0.5
        self.qkvs = nn.ModuleList([nn.Conv2d(self.d, 2 * key_dim + self.d, 1) for _ in range(heads)])
        self.attention_biases = nn.Parameter(torch.randn(heads, res * res) * 0.1)
        self.register_buffer("attention_bias_idxs", _rel_index(res, res), persistent=False)
        self.proj = nn.Conv2d(dim, dim, 1)

    def forward(self, x):
        B, C, H, W = x.shape
        feats_in = x.chunk(len(self.qkvs), dim=1)
        bias = self.attention_biases[:, self.attention_bias_idxs]
        feat, feats_out = feats_in[0], []
        for i, qkv in enumerate(self.qkvs):
            if i > 0:
                feat = feat + feats_in[i]
            q, k, v = qkv(feat).view(B, -1, H, W).split([self.key_dim, self.key_dim, self.d], dim=1)
            q, k, v = q.flatten(2), k.flatten(2), v.flatten(2)
            attn = ((q * self.scale).transpose(-2, -1) @ k + bias[i]).softmax(dim=-1)
            feat = (v @ attn.transpose(-2, -1)).view(B, self.d, H, W)
            feats_out.append(feat)
        return self.proj(torch.cat(feats_out, 1))


class NormalizedAttention(nn.Module):
    """edgenext.CrossCovarianceAttn: F.normalize(q), F.normalize(k) -- a vector norm and a clamp,
    which :around growth does not take as plumbing, between q and the division that joins it."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, -1).permute(2, 0, 3, 4, 1).unbind(0)
        attn = (F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)) * self.temperature
        return self.proj((attn.softmax(dim=-1) @ v).permute(0, 3, 1, 2).reshape(B, N, C))


class WindowAttention(nn.Module):
    """swin_transformer.WindowAttention: a relative-position bias gathered from a table of the block's own."""

    def __init__(self, dim=8, heads=2, window=4):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.1)
        pos = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (pos[:, :, None] - pos[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("relative_position_index", rel[..., 0] * (2 * window - 1) + rel[..., 1],
                             persistent=False)
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(N, N, -1)
        attn = ((q * self.scale) @ k.transpose(-2, -1) + bias.permute(2, 0, 1).unsqueeze(0)).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.talk = nn.ModuleList([TalkingHeadAttention(), TalkingHeadAttention()])
        self.cascade = CascadedAttention()
        self.xca = NormalizedAttention()
        self.windows = nn.ModuleList([WindowAttention(), WindowAttention()])
        self.eval()

    def forward(self, x):
        x = self.stem(x)
        for t in self.talk:
            x = x + t(x)
        x = x + self.cascade(x)
        t = x.flatten(2).transpose(1, 2)
        t = t + self.xca(t)
        for w in self.windows:
            t = t + w(t)
        return t


def get_fwd_args():
    return (torch.randn(1, 3, 4, 4, generator=torch.Generator().manual_seed(1)),)
'''


@pytest.mark.slow
def test_attention_the_carve_cannot_take_whole_is_proposed_as_it_can(tmp_path):
    """propose decides an attention block's region with the carve's own rules (issue 22): a block an
    outside conv cuts through is proposed as its convex parts (@part=K); one whose region only lacked
    an op of its own (F.normalize) is closed over it and taken whole; a block that bakes weights of its
    own (a bias table) is one proposal per site. Every proposal carves, all of them together."""
    import shutil
    from collections import defaultdict

    from ytk_core.errors import UsageError
    from ytk_core.frontend.carve import carve
    from ytk_hookspecs import StageContext
    from ytk_hookspecs.models import CarveRequest

    model = tmp_path / "model.py"
    model.write_text(PARTS_MODEL)
    base = tmp_path / "base"
    report = _propose_all(model, base, "1x4x4")
    props = [p for p in report.candidates if p.selector]
    by_cls: dict[str, list] = defaultdict(list)
    for p in props:
        if p.kind == "attention":
            by_cls[p.ops_name].append((parse_selector(p.selector), p))
    talk = by_cls["TalkingHeadAttention"]
    # q.k + bias, the softmax, attn.v: the part that bakes the bias table is one proposal per block
    assert sorted(s.part for s, _ in talk) == [0, 0, 1, 2] and all(s.around for s, _ in talk)
    assert sorted(len(p.sites) for _, p in talk) == [1, 1, 2, 2]
    assert sorted(s.part for s, _ in by_cls["CascadedAttention"]) == [0, 1]  # one part per head
    [(xca, xca_prop)] = by_cls["NormalizedAttention"]
    assert xca.part is None
    assert [len(p.sites) for _, p in by_cls["WindowAttention"]] == [1, 1]

    def carved(*selectors: str) -> Path:
        prep = tmp_path / f"carve{len(list(tmp_path.glob('carve*')))}"
        shutil.copytree(base, prep)
        carve(CarveRequest(prepare_dir=prep, onnx=prep / "model.onnx", fx_nodes=prep / "fx_nodes.json",
                           selectors=list(selectors)), StageContext())
        return prep

    prep = carved(*[p.selector for p in props])
    cands = {c.name: c for c in CandidatesFile.read(prep / "candidates.json").candidates}
    for p in props:
        assert sorted(s.module_path for s in cands[p.name].sites) == sorted(s.module_path for s in p.sites), p.name
    assert "aten.linalg_vector_norm.default" in cands[xca_prop.name].op_inventory
    # what propose steered clear of is what the carve refuses
    with pytest.raises(UsageError, match="not convex"):
        carved("yasp::T=TalkingHeadAttention:around@where=talk.0")
    with pytest.raises(UsageError, match="not convex"):
        carved("yasp::C=CascadedAttention:around")
    with pytest.raises(UsageError, match="bakes different weights"):
        carved("yasp::W=WindowAttention:around")


@pytest.mark.slow
def test_a_transposed_conv_is_proposed_as_the_carve_takes_it(tmp_path):
    """A new user's decoder: propose labelled ConvTranspose2d(48 -> 32) 'C=48->48' (an ONNX ConvTranspose's
    weight is (Cin, Cout/groups, k, k)) and emitted selectors the carve refused ('use @lift=none'), so the
    autoloop dropped the model's heaviest regions. The carve now keeps a transposed conv's weights baked by
    default, as propose judges its sites; an explicit conv lift is refused naming the selector."""
    deconv = REPO / "tests" / "data" / "deconv_model.py"
    report = _propose_all(deconv, tmp_path / "base", "1x64x64", kernelgen="mock")
    ups = {p.sites[0].module_path: p for p in report.candidates if p.selector and "transposed" in p.label}
    assert set(ups) == {"up1", "up2"}, [p.label for p in report.candidates]
    assert "C=48->32" in ups["up1"].label and ups["up1"].name.endswith("C48to32"), ups["up1"].label
    assert "C=96->48" in ups["up2"].label and ups["up2"].name.endswith("C96to48"), ups["up2"].label
    carved = tmp_path / "carved"
    r = prepare(deconv, carved, [p.selector for p in ups.values()], size="1x64x64")
    assert r.code == 0, r.stderr
    cands = {c.name: c for c in CandidatesFile.read(carved / "candidates.json").candidates}
    assert all(cands[p.name].lift == "none" for p in ups.values())
    # the templates (the generator a GPU run picks) refuse it as what it is, not with the advice to lift its
    # weights that the carve refuses
    r = ytk_inproc("kernelgen", "compile", "-r", carved / "plugin_candidates" / f"{ups['up1'].name}.pt2", "-g",
                   "H200", "--config", "deployment_target=tensorrt", "-o", tmp_path / "Up.module_source.py",
                   "--kernelgen", "templates", "--dry-run")
    assert r.code == 3 and "transposed convolution" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "@lift=fold_conv_bn" not in r.stdout + r.stderr
    sketch = propose(tmp_path / "base" / "base.tgz", tmp_path / "base" / "model.onnx",
                     tmp_path / "base" / "fx_nodes.json",
                     options=ProposeOptions(min_ms=0, launch_ms=0, kernelgen="templates"))
    ups_t = [p for p in sketch.candidates if p.selector and "transposed" in p.label]
    assert ups_t and all(p.supported is False and "transposed conv" in p.support_why for p in ups_t)
    bad = ups["up1"].selector + "@lift=fold_conv_bn"
    r = prepare(deconv, tmp_path / "bad", [bad], size="1x64x64")
    assert r.code == 2 and repr(bad) in r.stderr and "transposed convolution" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


_TWO_SE = '''
import torch
from torch import nn


class SE(nn.Module):
    def __init__(self, c, gate):
        super().__init__()
        self.reduce, self.expand, self.gate = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1), gate

    def forward(self, x):
        return x * self.gate(self.expand(torch.relu(self.reduce(x.mean((2, 3), keepdim=True)))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = SE(32, nn.Sigmoid()), SE(32, nn.Hardsigmoid())

    def forward(self, x):
        return torch.nn.functional.gelu(self.b(self.a(x)))   # an activation after an SE is not the SE's


def get_fwd_args():
    return (torch.randn(1, 32, 16, 16),)
'''


@pytest.mark.slow
def test_squeeze_excites_told_apart_by_their_gate_are_named_by_it(tmp_path):
    """Two squeeze-excite families alike but for the gate are named by what differs (the gate), not by
    the ops every squeeze-excite holds (its pool and its product), and each selector carves its module,
    without the GELU after it (the SE template fuses nothing after its product)."""
    model = tmp_path / "model.py"
    model.write_text(_TWO_SE)
    report = _propose_all(model, tmp_path / "base", "1x16x16")
    se = sorted(p.name for p in report.candidates if p.kind == "squeeze_excite")
    assert len(se) == 2 and any("HardSigmoid" in n for n in se), se
    assert not any("Mul" in n or "ReduceMean" in n for n in se), se
    assert not any("@epilogue" in p.selector for p in report.candidates if p.kind == "squeeze_excite")
    r = prepare(model, tmp_path / "carved", [p.selector for p in report.candidates if p.kind == "squeeze_excite"],
                size="1x16x16")
    assert r.code == 0, r.stderr


@pytest.mark.slow
def test_a_depthwise_conv_with_its_channel_layernorm_is_one_named_region(tmp_path):
    """ConvNeXt's dw 7x7 + LayerNorm (issue 23): proposed as one region per spelling, named by the norm (``Ln``:
    back to NCHW; ``LnNhwc``: the NHWC view a Linear reads), the norms' own weights no reason to split the
    family (the carve lifts them), and every selector carves with its sites."""
    model = REPO / "tests" / "data" / "convnext_style_model.py"
    report = _propose_all(model, tmp_path / "base", "1x64x96")
    dw = {p.name: p for p in report.candidates if p.kind == "depthwise_conv"}
    assert set(dw) == {"DwConv7x7s1LnC32", "DwConv7x7s1LnNhwcC32"}, sorted(dw)
    assert all(len(p.sites) == 2 and "@epilogue" in p.selector for p in dw.values())
    assert "LayerNorm" in dw["DwConv7x7s1LnC32"].label
    r = prepare(model, tmp_path / "carved", [p.selector for p in dw.values()], size="1x64x96")
    assert r.code == 0, r.stderr


@pytest.mark.slow
def test_mixed_convs_and_folded_pads_are_proposed_as_the_carve_takes_them(tmp_path):
    """Found on zoo models no one here wrote (MixNet, HGNetV2) and a new user's model: the 1x1 groups of a
    mixed conv, equal in every op but the slice of the split each reads, were one selector the carve refused
    ('matches regions that compute different things'); a pad the ONNX optimiser folded into a conv (a TF-style
    one, and HGNetV2's, which a pool reads too) was an 'internal carve error'. Every proposal now carves, all
    of them together, site for site, and the carved graph computes the model."""
    model = REPO / "tests" / "data" / "mixed_conv_model.py"
    report = _propose_all(model, tmp_path / "base", "1x32x48", kernelgen="mock")
    props = [p for p in report.candidates if p.selector]
    assert any(len(p.sites) > 1 for p in props)
    r = prepare(model, tmp_path / "carved", [p.selector for p in props], size="1x32x48")
    assert r.code == 0, r.stderr[-2000:]
    cands = {c.name: c for c in CandidatesFile.read(tmp_path / "carved" / "candidates.json").candidates}
    for p in props:
        assert sorted(s.module_path for s in cands[p.name].sites) == sorted(s.module_path for s in p.sites), p.name
    assert any(c.op_inventory.get("aten.pad.default") for c in cands.values())
    import numpy as np

    from ytk_backend_mock.carved_eval import run_carved_onnx

    carved = tmp_path / "carved"
    got = run_carved_onnx(carved / "model.onnx", dict(np.load(carved / "model.npz")))
    for k, want in np.load(carved / "model.reference.npz").items():  # the plugins' plumbing: what reads what
        assert float(np.abs(got[k] - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max())), k


@pytest.mark.slow
def test_a_head_shared_by_two_levels_is_two_sites_of_one_proposal(tmp_path):
    """A new user's detector shares its head between two pyramid levels: propose counted the module called twice
    as one site, stopped at the bare conv (its parent looked like a module of two convs) and left the GELU out,
    and the two sizes could give two selectors naming one module, which the carve refuses. Each call is now a
    site, the region is the whole conv + BN + GELU module, and a module's calls share one (dynamic) proposal."""
    model = REPO / "tests" / "data" / "shared_head_model.py"
    report = _propose_all(model, tmp_path / "base", "1x32x48", kernelgen="mock")
    props = [p for p in report.candidates if p.selector]
    by_site = {s.module_path: p for p in props for s in p.sites}
    dw = by_site["head.dw"]
    assert [s.module_path for s in dw.sites] == ["head.dw", "head.dw"]
    assert parse_selector(dw.selector).ops_name == "CBR"
    assert sum(any(s.module_path == "head.dw" for s in p.sites) for p in props) == 1
    r = prepare(model, tmp_path / "carved", [p.selector for p in props], size="1x32x48")
    assert r.code == 0, r.stderr[-2000:]
    cands = {c.name: c for c in CandidatesFile.read(tmp_path / "carved" / "candidates.json").candidates}
    for p in props:
        assert sorted(s.module_path for s in cands[p.name].sites) == sorted(s.module_path for s in p.sites), p.name
    assert cands[dw.name].op_inventory.get("aten.gelu.default") == 1


_CHANNEL_ATTENTION = '''
import torch
from torch import nn


class ChannelAttention(nn.Module):  # CBAM's: one shared MLP of 1x1 convs on the avg- and max-pooled vectors
    def __init__(self, c):
        super().__init__()
        self.fc1 = nn.Conv2d(c, c // 4, 1)
        self.fc2 = nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        a = self.fc2(torch.relu(self.fc1(x.mean((2, 3), keepdim=True))))
        m = self.fc2(torch.relu(self.fc1(x.amax((2, 3), keepdim=True))))
        return x * torch.sigmoid(a + m)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, padding=1)
        self.ca1 = ChannelAttention(32)
        self.lat = nn.Conv2d(32, 48, 1)
        self.ca2 = ChannelAttention(48)
        self.head = nn.Conv2d(48, 16, 1)

    def forward(self, x):
        y = self.lat(self.ca1(torch.relu(self.stem(x))))
        return self.head(self.ca2(y))


def get_fwd_args():
    torch.manual_seed(0)
    return (torch.randn(1, 3, 32, 48),)
'''


@pytest.mark.slow
def test_convs_on_pooled_vectors_and_on_feature_maps_are_separate_proposals(tmp_path):
    """A new user's detection model: propose folded the 1x1 convs of a channel attention (on 1x1 pooled
    vectors) into one dynamic remainder with the 1x1 convs on feature maps, and the carve refused the
    selector propose had written: 'its sites need programs of their own'. With every family merged (the
    strongest folding), each proposal still carves with its sites."""
    model = tmp_path / "model.py"
    model.write_text(_CHANNEL_ATTENTION)
    base = tmp_path / "base"
    assert prepare(model, base, size="1x32x48").code == 0
    r = ytk_inproc("embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", base / "model.onnx", "--npz",
                   base / "model.npz", "-o", base / "base.tgz", YTK_ENGINE="mock")
    assert r.code == 0, r.stderr
    report = propose(base / "base.tgz", base / "model.onnx", base / "fx_nodes.json",
                     options=ProposeOptions(min_ms=0, launch_ms=0, merge_shape_families=True))
    pw = [p for p in report.candidates if p.selector and p.name.startswith("Conv1x1")]
    paths = [sorted(s.module_path for s in p.sites) for p in pw]
    assert any(all(".fc" in m for m in ms) for ms in paths), paths
    assert not any(any(".fc" in m for m in ms) and any(".fc" not in m for m in ms) for ms in paths), paths
    carved = tmp_path / "carved"
    r = prepare(model, carved, [p.selector for p in pw], size="1x32x48")
    assert r.code == 0, r.stderr


_HEAD = '''import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, c, k):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.BatchNorm2d(c), nn.ReLU())
        self.classifier = nn.Conv2d(c, k, 1)

    def forward(self, x):
        return self.classifier(self.block(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 16, 3, 2, 1)
        self.head = Head(16, 8)

    def forward(self, x):
        return self.head(torch.relu(self.stem(x)))


def get_fwd_args():
    return (torch.randn(1, 3, 32, 32),)
'''


@pytest.mark.slow
def test_a_conv_beside_a_plugged_sibling_is_still_proposed(tmp_path):
    """A new user plugged seg_head.block; propose on the plugged engine then said seg_head.classifier 'overlaps
    the plugged region seg_head.block: re-carve without that plugin': with the block's convs gone into a plugin
    node, the classifier's region climbed to their parent. A plugged site counts as a heavy op of its modules."""
    model = tmp_path / "model.py"
    model.write_text(_HEAD)
    report = _propose_plugged(tmp_path, model, "yasp::Block=Sequential@where=head.block", "1x3x32x32",
                              ProposeOptions(min_ms=0, launch_ms=0, roofline_fraction=1.0))
    sels = [p.selector for p in report.candidates]
    assert any(s.endswith("=Conv2d@where=*.classifier") or s.endswith("=Conv2d@where=head.classifier")
               for s in sels), sels
    assert not any("overlaps the plugged region" in row.reason for row in report.not_worth)


_SHARED = '''import torch
from torch import nn


class ConvBNSiLU(nn.Sequential):
    def __init__(self, c):
        super().__init__(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.SiLU())


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.body = ConvBNSiLU(16)
        self.head = ConvBNSiLU(16)   # shared by two levels: called twice

    def forward(self, x):
        a = self.body(torch.relu(self.stem(x)))
        return self.head(a), self.head(a * 2.0)


def get_fwd_args():
    return (torch.randn(1, 3, 16, 16),)
'''


@pytest.mark.slow
def test_a_module_called_twice_joins_the_family_of_the_same_op(tmp_path):
    """The ONNX exporter leaves the BatchNorm of a module called twice unfolded, so a new user's shared head got
    a family (and a plugin) of its own beside identical ConvBNSiLU blocks, named '...BatchNormalizationMul...'.
    The carve folds that BatchNorm like any other: one family, one plugin for every site."""
    model = tmp_path / "model.py"
    model.write_text(_SHARED)
    report = _propose_all(model, tmp_path / "base", "1x3x16x16")
    fams = [p for p in report.candidates if "ConvBNSiLU" in p.selector]
    assert len(fams) == 1 and len(fams[0].sites) == 3, [(p.selector, len(p.sites)) for p in fams]
    assert "Bn" not in fams[0].name and "BatchNormalization" not in fams[0].name
    carved = tmp_path / "carved"
    r = prepare(model, carved, [fams[0].selector], size="1x3x16x16")
    assert r.code == 0, r.stderr
    (cand,) = CandidatesFile.read(carved / "candidates.json").candidates
    assert len(cand.sites) == 3 and cand.input_roles == ["activation", "weight", "bias"]
