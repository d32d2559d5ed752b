"""Attention as real code writes it is carved (issue 22): each spelling below is a copy, shrunk, of
the published code it names, and every carve must give one custom-op node per site whose region
program reproduces the model -- through the ONNX checker and the simulated engine alike."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from tests.helpers import prepare
from ytk_backend_mock.builder import describe
from ytk_backend_mock.engine import compile_engine, profile_engine
from ytk_backend_mock.kernelgen import make_meta
from ytk_core.errors import UsageError
from ytk_core.frontend.carve import carve
from ytk_hookspecs import StageContext
from ytk_hookspecs.kernel_source import KernelSource
from ytk_hookspecs.models import (PLUGIN_DOMAIN, ArchSpec, CandidatesFile, CarveRequest, CompileRequest,
                                  FxNodesFile, PluginArtifact, PluginsFile, ProfileRequest)

ARCH = "arm64-sm87-dos6010-cu114-trt86"

MODEL_PY = '''
import torch
import torch.nn.functional as F
from torch import nn


class ConvNorm(nn.Module):
    def __init__(self, cin, cout, k=1, norm=True):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2, bias=not norm)
        self.norm = nn.BatchNorm2d(cout) if norm else nn.Identity()

    def forward(self, x):
        return self.norm(self.conv(x))


class LiteMLA(nn.Module):
    """timm efficientvit_mit.LiteMLA as published: multi-scale ReLU linear attention, q/k/v chunked
    out of one tensor, the kernel function a child module, v padded with ones, an fp32 island."""

    def __init__(self, channels, dim=8, eps=1e-5):
        super().__init__()
        heads = channels // dim
        total = heads * dim
        self.dim, self.eps = dim, eps
        self.qkv = ConvNorm(channels, 3 * total, norm=False)
        self.aggreg = nn.ModuleList([nn.Sequential(
            nn.Conv2d(3 * total, 3 * total, 5, padding=2, groups=3 * total, bias=False),
            nn.Conv2d(3 * total, 3 * total, 1, groups=3 * heads, bias=False))])
        self.kernel_func = nn.ReLU(inplace=False)
        self.proj = ConvNorm(2 * total, channels)

    def _attn(self, q, k, v):
        dtype = v.dtype
        q, k, v = q.float(), k.float(), v.float()
        kv = k.transpose(-1, -2) @ v
        out = q @ kv
        out = out[..., :-1] / (out[..., -1:] + self.eps)
        return out.to(dtype)

    def forward(self, x):
        B, _, H, W = x.shape
        qkv = self.qkv(x)
        multi = [qkv] + [op(qkv) for op in self.aggreg]
        multi = torch.cat(multi, dim=1)
        multi = multi.reshape(B, -1, 3 * self.dim, H * W).transpose(-1, -2)
        q, k, v = multi.chunk(3, dim=-1)
        q = self.kernel_func(q)
        k = self.kernel_func(k)
        v = F.pad(v, (0, 1), mode="constant", value=1.0)
        with torch.autocast(device_type=v.device.type, enabled=False):
            out = self._attn(q, k, v)
        out = out.transpose(-1, -2).reshape(B, -1, H, W)
        return self.proj(out)


class Attention(nn.Module):
    """timm vision_transformer.Attention: fused (F.scaled_dot_product_attention) or spelled out."""

    def __init__(self, dim, heads, fused):
        super().__init__()
        self.heads, self.head_dim, self.fused = heads, dim // heads, fused
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.q_norm, self.k_norm = nn.Identity(), nn.Identity()
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        if self.fused:
            x = F.scaled_dot_product_attention(q, k, v)
        else:
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
            attn = attn.softmax(dim=-1)
            attn = self.attn_drop(attn)
            x = attn @ v
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class WindowAttention(nn.Module):
    """timm swin_transformer.WindowAttention (not fused): a relative-position bias gathered from a
    table by a buffer of indices, which the exporter folds into a constant."""

    def __init__(self, dim, heads, window):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        wh, ww = window
        self.relative_position_bias_table = nn.Parameter(torch.randn((2 * wh - 1) * (2 * ww - 1), heads) * 0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)
        index = (rel[..., 0] + wh - 1) * (2 * ww - 1) + rel[..., 1] + ww - 1
        self.register_buffer("relative_position_index", index, persistent=False)
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(N, N, -1)
        attn = self.softmax(attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0))
        return self.proj_drop(self.proj((attn @ v).transpose(1, 2).reshape(B, N, -1)))


class GluMlp(nn.Module):
    """timm GluMlp: the hidden tensor chunked into value and gate."""

    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x):
        a, gate = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(a * F.gelu(gate))


class Block(nn.Module):
    def __init__(self, attn, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = attn
        self.mlp = GluMlp(dim)

    def forward(self, x):
        h = self.norm(x)
        if isinstance(self.attn, nn.MultiheadAttention):
            y, w = self.attn(h, h, h, need_weights=True)  # the head-averaged weights leave the block too
        else:
            y, w = self.attn(h), None
        if isinstance(self.attn, WindowAttention):  # Swin's window reverse: views the optimizer merges away
            y = y.view(y.shape[0], 4, 6, -1).view(h.shape)
        x = x + y
        return x + self.mlp(x), w


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = ConvNorm(3, 32, 3)
        self.lite = nn.Sequential(LiteMLA(32), LiteMLA(32))
        self.blocks = nn.ModuleList(
            [Block(Attention(32, 2, fused=True), 32) for _ in range(2)] +
            [Block(Attention(32, 2, fused=False), 32) for _ in range(2)] +
            [Block(nn.MultiheadAttention(32, 2, batch_first=True), 32), Block(WindowAttention(32, 2, (4, 6)), 32)])
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
        self.eval()

    def forward(self, x):
        t = self.lite(self.stem(x)).flatten(2).transpose(1, 2)
        weights = []
        for b in self.blocks:
            t, w = b(t)
            if w is not None:
                weights.append(w)
        return (t, *weights)


def get_fwd_args():
    return (torch.randn(1, 3, 4, 6, generator=torch.Generator().manual_seed(1)),)
'''


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("attention_zoo")
    (root / "model.py").write_text(MODEL_PY)
    r = prepare(root / "model.py", root / "plain")
    assert r.code == 0, r.stderr
    return root / "plain"


def _carved(zoo: Path, tmp_path: Path, *selectors: str) -> Path:
    """Carve a copy of the plain prepare on its cached trace: the code path prepare --plugin runs."""
    prep = tmp_path / "prep"
    shutil.copytree(zoo, prep)
    carve(CarveRequest(prepare_dir=prep, onnx=prep / "model.onnx", fx_nodes=prep / "fx_nodes.json",
                       selectors=list(selectors)), StageContext())
    onnx.checker.check_model(onnx.load(prep / "model.onnx"), full_check=True)
    return prep


def _engine_matches_reference(prep: Path, tmp_path: Path) -> None:
    """The simulated engine, every custom-op node served by a plugin of its candidate's contract, must
    give the model's reference outputs."""
    arts = []
    for cand in CandidatesFile.read(prep / "candidates.json").candidates:
        meta = make_meta(cand, "fp16", 87, 0.7)
        desc = describe(KernelSource(header="", source="", meta=meta), ArchSpec.parse(ARCH), "0")
        arts.append(PluginArtifact(path=Path(f"/x/{cand.name}.so"), sha256="0" * 64, description=desc))
    req = CompileRequest(onnx=prep / "model.onnx", npz=prep / "model.npz", arch=ARCH, precision="fp16",
                         plugins=arts, workdir=tmp_path / "engine")
    cres = compile_engine(req, StageContext())
    prof = profile_engine(ProfileRequest(compile=cres, request=req, iterations=2), StageContext())
    got = dict(np.load(prof.outputs))
    for name, want in np.load(prep / "model.reference.npz").items():
        err = float(np.abs(got[name] - want).max())
        assert err <= 1e-4 * max(1.0, float(np.abs(want).max())), (name, err)


def _pt2_reproduces_every_site(prep: Path) -> None:
    for cand in CandidatesFile.read(prep / "candidates.json").candidates:
        prog = torch.export.load(str(prep / cand.files.pt2)).module()
        io_npz = np.load(prep / cand.files.io_npz)
        for s in cand.sites:
            got = prog(*[torch.from_numpy(io_npz[f"site{s.index}.in{i}"]) for i in range(len(s.inputs))])
            got = list(got) if isinstance(got, (tuple, list)) else [got]
            assert len(got) == len(s.outputs)
            for j, g in enumerate(got):
                np.testing.assert_allclose(g.numpy(), io_npz[f"site{s.index}.out{j}"], rtol=1e-4, atol=1e-5)


def _candidate(prep: Path, name: str):  # type: ignore[no-untyped-def]
    return next(c for c in CandidatesFile.read(prep / "candidates.json").candidates if c.name == name)


def test_chunk_split_maps_to_its_fx_nodes(zoo):
    """The ONNX optimizer turns x.chunk() into a Split without exporter metadata; it must still map to
    the chunk's split and getitems, or a region around a chunk is not convex."""
    fx = FxNodesFile.read(zoo / "fx_nodes.json")
    assert fx.unmapped_onnx_nodes == []
    splits = [n for n in fx.nodes if n.target == "aten.split.Tensor"]
    assert len(splits) == 2 + 6  # two LiteMLAs, six GluMlps
    by_name = {n.name: n for n in fx.nodes}
    for s in splits:
        assert len(s.onnx_nodes) == 1 and s.onnx_nodes[0].startswith("node_Split")
        getitems = [n for n in fx.nodes if n.args == [s.name]]
        assert getitems and all(by_name[g.name].onnx_nodes == s.onnx_nodes for g in getitems)


def test_litemla_as_published_is_one_node(zoo, tmp_path):
    prep = _carved(zoo, tmp_path, "yasp::Lite=LiteMLA:around")
    lite = _candidate(prep, "Lite")
    # The region grows through the chunk back to the joining concat: the qkv projection and the
    # multi-scale aggregation come in, the attention's output leaves -- the spec's LiteMLA region.
    assert len(lite.sites) == 2 and lite.input_roles == ["activation", "activation"]
    assert [list(t.shape) for t in lite.sites[0].inputs] == [[1, 96, 4, 6], [1, 96, 4, 6]]
    assert [list(t.shape) for t in lite.sites[0].outputs] == [[1, 64, 4, 6]]
    inv = lite.op_inventory
    assert inv["aten.split.Tensor"] == 1 and inv["aten.cat.default"] == 1 and inv["aten.matmul.default"] == 2
    assert inv["aten.pad.default"] == 1 and "aten.conv2d.default" not in inv
    m = onnx.load(prep / "model.onnx")
    assert [n.op_type for n in m.graph.node if n.domain == PLUGIN_DOMAIN] == ["Lite", "Lite"]
    assert not any(n.op_type == "Pad" for n in m.graph.node)
    _pt2_reproduces_every_site(prep)
    _engine_matches_reference(prep, tmp_path)


def test_scaled_dot_product_attention_call_and_fused_block(zoo, tmp_path):
    prep = _carved(zoo, tmp_path, "yasp::Sdpa=call:torch.nn.functional.scaled_dot_product_attention")
    sdpa = _candidate(prep, "Sdpa")
    assert len(sdpa.sites) == 2 and len(sdpa.sites[0].inputs) == 3  # q, k, v
    _engine_matches_reference(prep, tmp_path / "call")
    prep = _carved(zoo, tmp_path / "around", "yasp::Attn=Attention:around@where=blocks.0.attn,blocks.1.attn")
    attn = _candidate(prep, "Attn")
    # from the qkv projection's output (reshape, permute, unbind absorbed) to the input of proj
    assert [list(t.shape) for t in attn.sites[0].inputs] == [[1, 24, 96]]
    assert [list(t.shape) for t in attn.sites[0].outputs] == [[1, 24, 32]]
    assert attn.op_inventory["aten.scaled_dot_product_attention.default"] == 1
    assert "aten.linear.default" not in attn.op_inventory
    _pt2_reproduces_every_site(prep)
    _engine_matches_reference(prep, tmp_path / "around")


def test_spelled_out_attention_block(zoo, tmp_path):
    prep = _carved(zoo, tmp_path, "yasp::Attn=Attention:around@where=blocks.2.attn,blocks.3.attn")
    attn = _candidate(prep, "Attn")
    assert [list(t.shape) for t in attn.sites[0].inputs] == [[1, 24, 96]]
    assert attn.op_inventory["aten.matmul.default"] == 2 and attn.op_inventory["aten.softmax.int"] == 1
    assert "aten.linear.default" not in attn.op_inventory
    _pt2_reproduces_every_site(prep)
    _engine_matches_reference(prep, tmp_path)


def test_multihead_attention_with_weights_is_one_node_with_two_outputs(zoo, tmp_path):
    """nn.MultiheadAttention's heavy ops are bmm and softmax; with need_weights its head-averaged
    weights leave the block beside the attention output, so the node has two outputs."""
    prep = _carved(zoo, tmp_path, "yasp::Mha=MultiheadAttention:around")
    mha = _candidate(prep, "Mha")
    assert [list(t.shape) for t in mha.sites[0].outputs] == [[24, 32], [1, 24, 24]]
    assert mha.op_inventory["aten.bmm.default"] == 2 and "aten.linear.default" not in mha.op_inventory
    node = next(n for n in onnx.load(prep / "model.onnx").graph.node if n.op_type == "Mha")
    assert list(node.output) == [t.name for t in mha.sites[0].outputs] and len(node.output) == 2
    entry = next(p for p in PluginsFile.read(prep / "plugins.json").plugins if p.name == "Mha")
    assert entry.site_nodes == [node.name]
    io_npz = np.load(prep / mha.files.io_npz)
    assert {"site0.out0", "site0.out1"} <= set(io_npz.files)
    assert "Returns a tuple of 2 tensors" in (prep / mha.files.reference_py).read_text()
    _pt2_reproduces_every_site(prep)
    _engine_matches_reference(prep, tmp_path)


def test_attention_with_a_folded_constant_bias(zoo, tmp_path):
    """Swin's bias is gathered from weights alone: the exporter folds it into an initializer, so it
    has no ONNX tensor to cut at and the region computes it from the baked table and indices."""
    prep = _carved(zoo, tmp_path, "yasp::Win=WindowAttention:around")
    win = _candidate(prep, "Win")
    assert [list(t.shape) for t in win.sites[0].inputs] == [[1, 24, 96]]
    assert win.op_inventory["aten.index.Tensor"] == 1 and win.op_inventory["aten.softmax.int"] == 1
    _pt2_reproduces_every_site(prep)
    _engine_matches_reference(prep, tmp_path)


def test_block_ending_in_an_eval_dropout(zoo, tmp_path):
    """The block's last op is its eval Dropout's clone, whose consumer the optimizer merged away: the
    region's output is that clone's input tensor."""
    fx = FxNodesFile.read(zoo / "fx_nodes.json")
    drop = next(n for n in fx.nodes if n.module_path == "blocks.5.attn.proj_drop")
    assert drop.onnx_nodes == []  # no ONNX node of its own, nor one of its consumer's to inherit
    prep = _carved(zoo, tmp_path, "yasp::Win=WindowAttention")
    win = _candidate(prep, "Win")
    assert win.sites[0].outputs[0].name == drop.args[0] and win.op_inventory["aten.linear.default"] == 2
    _engine_matches_reference(prep, tmp_path)


def test_block_around_a_chunk_is_convex(zoo, tmp_path):
    prep = _carved(zoo, tmp_path, "yasp::Glu=GluMlp@where=blocks.0.mlp")
    assert _candidate(prep, "Glu").op_inventory["aten.split.Tensor"] == 1
    _engine_matches_reference(prep, tmp_path)


def test_region_reading_two_chunks_of_one_split(zoo, tmp_path):
    """Both chunks enter the region: each is its own output of the one Split they map to."""
    fx = FxNodesFile.read(zoo / "fx_nodes.json")
    gelu = next(n for n in fx.nodes if n.target == "aten.gelu.default" and n.module_path == "blocks.0.mlp")
    mul = next(n for n in fx.nodes if n.target == "aten.mul.Tensor" and gelu.name in n.args)
    prep = _carved(zoo, tmp_path, f"yasp::Gate={gelu.name},{mul.name}")
    site = _candidate(prep, "Gate").sites[0]
    value = next(n for n in fx.nodes if n.name == mul.args[0])  # a getitem of the chunk
    split = next(n for n in onnx.load(prep / "model.onnx").graph.node if n.name == value.onnx_nodes[0])
    assert [t.name for t in site.inputs] == [split.output[1], split.output[0]]  # gelu's gate, then mul's value
    _engine_matches_reference(prep, tmp_path)


def test_hand_drawn_span_that_leaks_a_value_is_still_refused(zoo, tmp_path):
    fx = FxNodesFile.read(zoo / "fx_nodes.json")
    names = [n.name for n in fx.nodes if n.module_path == "blocks.4.attn" and n.op == "call_function"]
    bmm = [x for x in names if x.startswith("bmm")]
    with pytest.raises(UsageError, match="cut those edges"):
        _carved(zoo, tmp_path, f"yasp::Leak={bmm[0]}...{bmm[1]}")


MASKED_MODEL_PY = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mha = nn.MultiheadAttention(dim, 2, batch_first=True)

    def forward(self, x, mask):
        h = self.norm(x)
        y, _ = self.mha(h, h, h, key_padding_mask=mask, need_weights=False)
        return x + y


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.eval()

    def forward(self, x, lengths):
        mask = torch.arange(x.shape[1])[None, :] >= lengths[:, None]  # padded frames
        for b in self.blocks:
            x = b(x, mask)
        return x


def get_fwd_args():
    return (torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(1)), torch.tensor([9]))
'''


def test_attention_layers_sharing_one_padding_mask_are_one_plugin(tmp_path):
    """Every layer turns the same key_padding_mask into the same float mask: the ONNX keeps each layer's
    own copy (no merged subexpressions), so all three sites carve as one plugin -- before, the merged copy
    left the later layers' mask with no ONNX tensor and the first layer's region with an extra output."""
    (tmp_path / "model.py").write_text(MASKED_MODEL_PY)
    r = prepare(tmp_path / "model.py", tmp_path / "plain")
    assert r.code == 0, r.stderr
    prep = _carved(tmp_path / "plain", tmp_path, "yasp::Mha=MultiheadAttention:around")
    mha = _candidate(prep, "Mha")
    assert len(mha.sites) == 3 and [len(s.outputs) for s in mha.sites] == [1, 1, 1]
    _pt2_reproduces_every_site(prep)
    _engine_matches_reference(prep, tmp_path)


ROPE_PY = '''
import torch
import torch.nn.functional as F
from torch import nn


def rotate(x, sin, cos):
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class RopeAttention(nn.Module):
    """EVA02's spelling, shrunk: the model's rotary table comes in, chunked into sin and cos here."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, rope):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        sin, cos = rope.chunk(2, -1)
        q, k = rotate(q, sin, cos), rotate(k, sin, cos)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.register_buffer("rope", torch.randn(12, 16), persistent=False)  # sin and cos, precomputed
        self.blocks = nn.ModuleList(RopeAttention(16, 2) for _ in range(2))

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x, self.rope)
        return x


def get_fwd_args():
    return (torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(1)),)
'''


@pytest.mark.parametrize("table", ["buffer", "computed"])
def test_attention_reading_a_rotary_table_the_exporter_left_unfolded(tmp_path, table):
    """EVA02 (a zoo model outside the corpus): every block chunks the model's rotary table (a buffer) into sin and
    cos; the exporter merges those chunks into one Split of the initializer, outside every block. torch.export
    bakes the table into each region's program, so the Split's outputs are no plugin inputs; the carve died with
    'region inputs differ between FX and ONNX'. Once every reader is a plugin, the Split goes too. A table the
    model computes in forward from its buffer, which the exporter folds into an initializer, has no tensor at
    all ('cannot find the ONNX tensor of region input cat'): each region computes it from the baked buffer."""
    source = ROPE_PY if table == "buffer" else ROPE_PY.replace(  # computed once in forward: the exporter folds it
        "x = x + b(x, self.rope)", "x = x + b(x, torch.cat([self.rope[:, :8].sin(), self.rope[:, 8:].cos()], -1))")
    (tmp_path / "model.py").write_text(source)
    assert prepare(tmp_path / "model.py", tmp_path / "plain", size="1x12x16").code == 0
    prep = _carved(tmp_path / "plain", tmp_path, "yasp::Rope=RopeAttention:around")
    rope = _candidate(prep, "Rope")
    assert [[list(t.shape) for t in s.inputs] for s in rope.sites] == [[[1, 12, 48]], [[1, 12, 48]]]
    _pt2_reproduces_every_site(prep)
    _engine_matches_reference(prep, tmp_path)
    assert not [n for n in onnx.load(prep / "model.onnx").graph.node if n.op_type == "Split"]


def _carve_model(tmp_path: Path, source: str, selector: str):  # type: ignore[no-untyped-def]
    """Prepare the model.py ``source``, carve ``selector`` on it; the prepare dir and the selector's candidate."""
    (tmp_path / "model.py").write_text(source)
    r = prepare(tmp_path / "model.py", tmp_path / "plain")
    assert r.code == 0, r.stderr
    prep = _carved(tmp_path / "plain", tmp_path, selector)
    return prep, _candidate(prep, selector.split("::", 1)[1].split("=", 1)[0])


FAST_MHA_PY = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim, batch_first):
        super().__init__()
        self.batch_first = batch_first
        self.norm = nn.LayerNorm(dim)
        self.mha = nn.MultiheadAttention(dim, 4, batch_first=batch_first)

    def forward(self, x):
        h = self.norm(x) if self.batch_first else self.norm(x).transpose(0, 1)
        y = self.mha(h, h, h, need_weights=False)[0]
        return x + (y if self.batch_first else y.transpose(0, 1))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(16, 32)
        self.blocks = nn.Sequential(Block(32, True), Block(32, False))

    def forward(self, x):
        return self.blocks(self.inp(x))


def get_fwd_args():
    return (torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(1)),)
'''


def test_multihead_attention_without_weights_carves_at_batch_two(tmp_path):
    """nn.MultiheadAttention's fast path (need_weights=False) at batch 2, batch-first and sequence-first: the
    region makes q/k/v contiguous, selects each, then views it by heads. The canonical form once dropped that
    contiguous() as an identity (its direct users are selects, not views), and the rebuilt region failed to
    run: "internal carve error ... view size is not compatible" (a new user's finding)."""
    prep, mha = _carve_model(tmp_path, FAST_MHA_PY, "yasp::Mha=MultiheadAttention:around")
    assert len(mha.sites) == 2 and "aten.scaled_dot_product_attention.default" in mha.op_inventory
    assert not any("left as traced" in n for n in mha.notes)
    _pt2_reproduces_every_site(prep)
    _engine_matches_reference(prep, tmp_path)


def test_an_around_region_says_what_of_its_module_it_leaves_outside(tmp_path):
    """A new user's TransformerEncoderLayer:around carved only the attention core under the layer's name, with no
    word about the norms and projections left in the engine. The carve's note names them."""
    _, blk = _carve_model(tmp_path, FAST_MHA_PY, "yasp::B=Block:around")
    note = next((n for n in blk.notes if n.startswith(":around took the attention core of blocks.0")), None)
    assert note is not None, blk.notes
    assert "layer_norm" in note and "stay outside, in the engine" in note and "without :around" in note, note


def test_a_canonical_rewrite_that_breaks_a_region_leaves_it_as_traced(zoo, tmp_path, monkeypatch):
    """The carve checks the canonical form against the model's captured outputs; where a rewrite made the region
    fail (to run or to match), the region is kept as traced, and its notes say so."""
    import ytk_core.frontend.carve as carve_mod

    def planted(gm):  # type: ignore[no-untyped-def]
        def broken(*a):  # type: ignore[no-untyped-def]
            raise RuntimeError("planted rewrite")
        gm.forward = broken
        return ["canonical: planted"]

    monkeypatch.setattr(carve_mod, "canonicalise", planted)
    prep = _carved(zoo, tmp_path, "yasp::Win=WindowAttention:around")
    win = _candidate(prep, "Win")
    assert any("left as traced" in n and "RuntimeError: planted rewrite" in n for n in win.notes), win.notes
    _pt2_reproduces_every_site(prep)


BIASED_SDPA_PY = '''
import torch
import torch.nn.functional as F
from torch import nn


class BiasedAttention(nn.Module):
    """Attention with a learned additive bias (relative-position style) passed as sdpa's attn_mask."""

    def __init__(self, dim, heads, tokens):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.bias = nn.Parameter(torch.randn(heads, tokens, tokens) * 0.1)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias, scale=0.3)
        return self.proj(y.transpose(1, 2).reshape(b, n, c))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.Sequential(BiasedAttention(32, 2, 12), BiasedAttention(32, 2, 12))

    def forward(self, x):
        return self.blocks(x)


def get_fwd_args():
    return (torch.randn(2, 12, 32, generator=torch.Generator().manual_seed(1)),)
'''


def test_attention_with_a_learned_mask_grows_around_its_sdpa(tmp_path):
    """sdpa whose attn_mask is a parameter (a learned bias) is attention, not a weighted dense layer: :around
    grows from it (a new user's finding: "the block has nothing :around grows from")."""
    # each block's bias is its own baked constant: one plugin per site, as propose proposes it
    prep, cand = _carve_model(tmp_path, BIASED_SDPA_PY, "yasp::Biased=BiasedAttention:around@where=blocks.0")
    assert len(cand.sites) == 1 and "aten.scaled_dot_product_attention.default" in cand.op_inventory
    assert "aten.linear.default" not in cand.op_inventory  # the projections stay outside, as for any attention
    _pt2_reproduces_every_site(prep)
    _engine_matches_reference(prep, tmp_path)
