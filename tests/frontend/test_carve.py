"""Step 3: carving regions into custom-op nodes, the kernelgen inputs, and the numerical guarantee."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from tests.helpers import EVIT, MNV3, SPEC_SIX, VIT, prepare
from ytk_backend_mock.carved_eval import run_carved_onnx
from ytk_core.errors import UsageError
from ytk_core.frontend.carve import carve, remove_carve_artifacts
from ytk_hookspecs import StageContext
from ytk_hookspecs.models import PLUGIN_DOMAIN, CandidatesFile, CarveRequest, PluginsFile


def _assert_reproduces_reference(out: Path, tol: float = 1e-4) -> None:
    feeds = dict(np.load(out / "model.npz"))
    ref = dict(np.load(out / "model.reference.npz"))
    got = run_carved_onnx(out / "model.onnx", feeds)
    for k, r in ref.items():
        err = float(np.abs(got[k] - r).max())
        assert err <= tol * max(1.0, float(np.abs(r).max())), (k, err)


def test_plugins_json(evit_carved):
    out, r = evit_carved
    pj = PluginsFile.read(out / "plugins.json")
    sites = {p.name: p.sites for p in pj.plugins}
    assert sites == {"LiteMLAC384": 3, "LiteMLAC768": 4, "DwConv3x3s1Dyn": 9, "DwConv5x5s1C384": 3,
                     "DwConv5x5s1C768": 4, "DwConv3x3s1C256": 2}
    for p in pj.plugins:
        assert p.namespace == "yasp" and p.version == "1" and p.op_type == p.name
        assert (out / p.kernelgen_input).is_file()
    assert "carve: 25 custom-op node(s)" in r.stdout


def test_onnx_rewrite(evit_carved):
    m = onnx.load(evit_carved[0] / "model.onnx")
    onnx.checker.check_model(m, full_check=True)
    custom = [n for n in m.graph.node if n.domain == PLUGIN_DOMAIN]
    assert len(custom) == 25
    for n in custom:
        attrs = {a.name: a.s.decode() for a in n.attribute}
        assert attrs == {"plugin_namespace": "yasp", "plugin_version": "1"}
    dyn = [n for n in custom if n.op_type == "DwConv3x3s1Dyn"]
    assert all(len(n.input) == 3 for n in dyn)  # activation + lifted (weight, bias)
    lite = [n for n in custom if n.op_type == "LiteMLAC384"]
    assert all(len(n.input) == 2 for n in lite)  # qkv + aggregated, joined inside the plugin
    assert not any(n.op_type in ("MatMul", "Softmax") for n in m.graph.node)


def test_numerical_guarantee_worked_example(evit_carved):
    _assert_reproduces_reference(evit_carved[0])


def test_candidates(evit_carved):
    out = evit_carved[0]
    cands = {c.name: c for c in CandidatesFile.read(out / "candidates.json").candidates}
    dyn = cands["DwConv3x3s1Dyn"]
    assert dyn.input_roles == ["activation", "weight", "bias"] and dyn.lift == "fold_conv_bn"
    assert 1 in dyn.dynamic_dims["in0"] and dyn.constant_axes[1] == [False, True, True, True]
    assert {s.inputs[0].shape[1] for s in dyn.sites} == {16, 128, 512, 1024}
    assert dyn.op_inventory["aten.conv2d.default"] == 1 and dyn.op_inventory["aten.hardswish.default"] == 1
    c256 = cands["DwConv3x3s1C256"]
    assert c256.dynamic_dims == {} and all(all(a) for a in c256.constant_axes)
    lite = cands["LiteMLAC384"]
    assert lite.around and lite.lift == "none" and lite.input_roles == ["activation", "activation"]
    assert lite.op_inventory["aten.matmul.default"] == 2 and lite.op_inventory["aten.cat.default"] == 1
    assert [list(o.shape) for o in lite.sites[0].outputs] == [[1, 256, 4, 6]]
    for c in cands.values():
        for rel in (c.files.pt2, c.files.io_npz, c.files.inputs_pt, c.files.reference_py):
            assert (out / rel).is_file()


def test_pt2_reproduces_every_site(evit_carved):
    out = evit_carved[0]
    for c in CandidatesFile.read(out / "candidates.json").candidates:
        prog = torch.export.load(str(out / c.files.pt2)).module()
        io_npz = np.load(out / c.files.io_npz)
        for s in c.sites:
            n_in = len(s.inputs)
            ins = [torch.from_numpy(io_npz[f"site{s.index}.in{i}"]) for i in range(n_in)]
            got = prog(*ins)
            got = got if isinstance(got, (tuple, list)) else [got]
            np.testing.assert_allclose(got[0].numpy(), io_npz[f"site{s.index}.out0"], rtol=1e-4, atol=1e-5)
    assert "class GraphModule" in (out / "plugin_candidates" / "LiteMLAC384.reference.py").read_text()


def _carve(prep: Path, selectors: list[str]):
    """Carve directly on a cached trace (no second export): the same code path prepare --plugin runs."""
    return carve(CarveRequest(prepare_dir=prep, onnx=prep / "model.onnx", fx_nodes=prep / "fx_nodes.json",
                              selectors=selectors), StageContext())


def test_foreign_files_survive_and_recarve_refreshes(evit_carved, plain_copy):
    out = evit_carved[0]
    assert (out / "sources" / "DwConv3x3s1C256.module_source.py").read_text() == "# generated, costly\n"
    assert (out / "plugin_candidates" / "DwConv3x3s1C256.so").is_file()
    prep = plain_copy
    (prep / "plugin_candidates").mkdir()
    (prep / "plugin_candidates" / "Mine.so").write_bytes(b"x")
    onnx_bytes = (prep / "model.onnx").read_bytes()
    _carve(prep, SPEC_SIX[:2])
    assert (prep / "plugin_candidates" / "LiteMLAC384.pt2").is_file()
    (prep / "model.onnx").write_bytes(onnx_bytes)  # what a fresh trace writes before carving again
    _carve(prep, SPEC_SIX[3:4])
    assert not (prep / "plugin_candidates" / "LiteMLAC384.pt2").exists()
    assert (prep / "plugin_candidates" / "DwConv5x5s1C384.pt2").is_file()
    remove_carve_artifacts(prep)  # what a plain prepare does
    assert not (prep / "plugins.json").exists() and not (prep / "plugin_candidates" / "DwConv5x5s1C384.pt2").exists()
    assert (prep / "plugin_candidates" / "Mine.so").read_bytes() == b"x"


@pytest.mark.parametrize("selectors, expect", [
    (["yasp::X=Conv2dd"], "Closest classes: Conv2d"),
    (["yasp::X=Qqqqqqqqqq"], r"Closest classes: none like 'Qqqqqqqqqq'; there are \S.*\(\d+ in all\)"),
    (["yasp::X=ConvNormAct@where=*nowhere*"], "none matches @where"),
    (["yasp::X=LiteMLA@lift=fold_conv_bn"], "fold_conv_bn_seq"),
    (["yasp::A=Conv2d@where=*aggreg.0.0", "yasp::B=mod:aggreg.0.0"], "both claim"),
    (["yasp::A=Conv2d@where=*aggreg.0.0", "yasp::A=LiteMLA:around"], "used by two selectors"),
    (["yasp::X=ConvNormAct@where=*depth_conv"], "different kinds"),
    (["yasp::X=mod:nonexistent.path"], "no module path ends with"),
    (["yasp::X=mod:qqqq"], r"Closest paths: (?!,)\S"),  # not the root module's empty path first
    (["yasp::X=nosuch_node...relu"], "no fx node named"),
    (["yasp::X=conv2d_999"], "no fx node named 'conv2d_999' .*Closest fx nodes: conv2d_"),  # not "no class"
])
def test_carve_errors(plain_copy, selectors, expect):
    before = (plain_copy / "model.onnx").read_bytes()
    with pytest.raises(UsageError, match=expect):
        _carve(plain_copy, selectors)
    assert (plain_copy / "model.onnx").read_bytes() == before
    assert not (plain_copy / "plugins.json").exists()


def test_carve_error_through_the_cli(tmp_path):
    r = prepare(VIT, tmp_path, ["yasp::Leak=linear_9...linear_10"], size="1x64x64")
    assert r.code != 0 and "cut those edges" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "plugins.json").exists() and not (tmp_path / "prepare.json").exists()


def test_nojoin_and_escape_hatch_on_worked_example(tmp_path):
    r = prepare(EVIT, tmp_path, ["yasp::Lite=LiteMLA:around@nojoin@where=*stages.2*",
                                 "yasp::Agg=mod:stages.3.blocks.1.context_module.main.aggreg.0.1"])
    assert r.code == 0, r.stderr
    cands = {c.name: c for c in CandidatesFile.read(tmp_path / "candidates.json").candidates}
    assert cands["Lite"].input_roles == ["activation"]  # the concat stays outside the plugin
    assert list(cands["Lite"].sites[0].inputs[0].shape) == [1, 768, 4, 6]
    assert "aten.cat.default" not in cands["Lite"].op_inventory
    assert len(cands["Agg"].sites) == 1
    _assert_reproduces_reference(tmp_path)


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_failed_recarve_leaves_the_carved_directory_as_it_was(tmp_path):
    """All-or-nothing: a carve that fails (here a span that leaks) after a good one must not leave an
    uncarved ONNX, nor delete the candidates, plugins.json or prepare.json the good one wrote."""
    r = prepare(VIT, tmp_path, ["yasp::Mlp1=linear_6...linear_7"], size="1x64x64")
    assert r.code == 0, r.stderr
    before = _files(tmp_path)
    assert {"model.onnx", "candidates.json", "plugins.json", "prepare.json"} <= set(before)
    r = prepare(VIT, tmp_path, ["yasp::Leak=linear_9...linear_10"], size="1x64x64")
    assert r.code != 0 and "cut those edges" in r.stderr
    assert _files(tmp_path) == before
    assert not list(tmp_path.glob(".ytk-staging-*"))
    # and a good re-carve replaces the old carve's files whole
    r = prepare(VIT, tmp_path, ["yasp::Soft=call:torch.softmax@where=*blocks.0.attn"], size="1x64x64")
    assert r.code == 0, r.stderr
    assert not (tmp_path / "plugin_candidates" / "Mlp1.pt2").exists()
    assert (tmp_path / "plugin_candidates" / "Soft.pt2").is_file()
    assert [c.name for c in CandidatesFile.read(tmp_path / "candidates.json").candidates] == ["Soft"]


def test_a_staging_directory_left_by_a_killed_prepare_is_removed(tmp_path):
    from ytk_core.staging import Staged

    stale = tmp_path / ".ytk-staging-999999999-deadbeef"
    (stale / "plugin_candidates").mkdir(parents=True)
    (stale / "model.onnx").write_bytes(b"half")
    (tmp_path / "prepare.json").write_text("{}")
    with Staged(tmp_path, marker=tmp_path / "prepare.json") as st:
        assert not stale.exists()
        st.path(tmp_path / "model.onnx").write_bytes(b"new")
        raise_at = st.dir
    assert not raise_at.exists()  # not committed: nothing moved, the staging directory is gone
    assert not (tmp_path / "model.onnx").exists() and (tmp_path / "prepare.json").read_text() == "{}"


def test_mobilenet_carve(tmp_path):
    r = prepare(MNV3, tmp_path, ["yasp::SE=SqueezeExcite@lift=fold_conv_bn_seq",
                                 "yasp::Dw5s1=ConvBNAct@where=*features.4.dw,*features.5.dw",
                                 "yasp::Block=InvertedResidual:around@where=*features.2@lift=fold_conv_bn_seq",
                                 "yasp::Dw3=mod:features.1.dw"], size="1x64x64")
    assert r.code == 0, r.stderr
    cands = {c.name: c for c in CandidatesFile.read(tmp_path / "candidates.json").candidates}
    assert cands["SE"].input_roles == ["activation", "weight", "bias", "weight", "bias"]
    assert len(cands["SE"].sites) == 8
    # the candidate says what each region computes, with no torch needed to read it
    (dw,) = cands["Dw3"].ops
    assert dw.model_dump(exclude_none=True) == dict(op="conv", kernel=[3, 3], stride=[2, 2], padding=[1, 1],
                                                    dilation=[1, 1], groups=72, channels_in=72, channels_out=72,
                                                    activation="relu", transposed=False)
    se = cands["SE"].ops
    assert [(o.op, o.kernel, o.activation) for o in se] == [("conv", [1, 1], "relu"), ("conv", [1, 1], "hardsigmoid")]
    assert se[0].channels_in is None and se[0].groups == 1  # channels differ between the SE's 8 sites
    assert [o.activation for o in cands["Dw5s1"].ops] == ["hardswish"]
    _assert_reproduces_reference(tmp_path)


def test_vit_carve(tmp_path):
    r = prepare(VIT, tmp_path, ["yasp::Attn=Attention:around@where=!*blocks.0.attn",
                                "yasp::Soft=call:torch.softmax@where=*blocks.0.attn",
                                "yasp::Mlp1=linear_6...linear_7"], size="1x64x64")
    assert r.code == 0, r.stderr
    cands = {c.name: c for c in CandidatesFile.read(tmp_path / "candidates.json").candidates}
    attn = cands["Attn"]
    assert len(attn.sites) == 3 and attn.op_inventory.get("aten.softmax.int") == 1
    assert "aten.linear.default" not in attn.op_inventory  # the projections stay with the engine
    assert [o.op for o in attn.ops] == ["matmul", "softmax", "matmul"]
    assert [(o.op, o.channels_in, o.channels_out, o.activation) for o in cands["Mlp1"].ops] == [
        ("linear", 192, 768, "gelu"), ("linear", 768, 192, None)]
    _assert_reproduces_reference(tmp_path)




def test_sites_baking_weights_no_lift_takes_get_no_lift_advice(tmp_path):
    """A Linear's weights stay baked whatever @lift says: the refusal must not tell a user who never wrote
    @lift=none to "drop @lift=none", but say what does work (a selector per site)."""
    sel = "yasp::Fc1=Linear@where=*.mlp.fc1"
    r = prepare(VIT, tmp_path, [sel], size="1x64x64")
    assert r.code == 2 and "bakes different weights" in r.stderr and sel in r.stderr
    assert "@lift=none" not in r.stderr.replace(sel, ""), r.stderr
    assert "give each site its own selector" in r.stderr


def test_grouped_conv_dynamic_remainder_serves_every_group_count(plain_copy):
    """EfficientViT's aggregation 1x1 is grouped 16 -> 16 at 384 and 768 channels: one program
    must take its group count from the input (C // 16), and the templates must recognise it."""
    from ytk_backend_templates.recognise import load_graph, recognise
    from ytk_backend_templates.regions import Conv1x1Region

    _carve(plain_copy, ["yasp::GConv1x1s1Dyn=Conv2d@where=*.aggreg.0.1"])
    cand = CandidatesFile.read(plain_copy / "candidates.json").candidates[0]
    assert {s.inputs[0].shape[1] for s in cand.sites} == {384, 768}
    prog = torch.export.load(str(plain_copy / cand.files.pt2)).module()
    io_npz = np.load(plain_copy / cand.files.io_npz)
    for s in cand.sites:
        ins = [torch.from_numpy(io_npz[f"site{s.index}.in{i}"]) for i in range(len(s.inputs))]
        np.testing.assert_allclose(prog(*ins).numpy(), io_npz[f"site{s.index}.out0"], rtol=1e-4, atol=1e-5)
    region = recognise(load_graph(plain_copy / cand.files.pt2), cand)
    assert region == Conv1x1Region(act="none", cin=None, cout=None, group_in=16, group_out=16, has_bias=True)
    _assert_reproduces_reference(plain_copy)


def test_sites_whose_ops_take_different_arguments_are_refused(tmp_path):
    """Three heads with the same ops but a different slice index each: a plugin for all three would run the
    first head's program at every site (its op counts, convs and baked weights all match), so the carve
    refuses; one head alone carves."""
    from tests.conftest import REPO
    from tests.helpers import prepare

    model = REPO / "tests" / "data" / "per_head_model.py"
    r = prepare(model, tmp_path / "all", ["yasp::H=Head"], size="1x32x32")
    assert r.code == 2, r.stderr[-1500:]
    assert "matches regions that compute different things" in r.stderr and "heads.1" in r.stderr
    r = prepare(model, tmp_path / "one", ["yasp::H=Head@where=heads.1"], size="1x32x32")
    assert r.code == 0, r.stderr[-1500:]


TIED = '''import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(16, 16)  # called twice: one module, shared weights
        self.out = nn.Linear(16, 8)

    def forward(self, x):
        return self.out(torch.relu(self.fc(torch.relu(self.fc(x)))))


def get_fwd_args():
    return (torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(1)),)
'''


def test_a_module_called_twice_is_two_sites(tmp_path):
    """A module called twice (shared weights) was one site holding both calls, with the parent's relu between
    them outside: 'not convex', although propose proposed it. Each call is a site of its own; both run one
    program, whose weights they share."""
    model = tmp_path / "tied.py"
    model.write_text(TIED)
    out = tmp_path / "out"
    r = prepare(model, out, ["yasp::Fc=Linear@where=fc"])
    assert r.code == 0, r.stderr
    (cand,) = CandidatesFile.read(out / "candidates.json").candidates
    assert [s.module_path for s in cand.sites] == ["fc", "fc"]
    _assert_reproduces_reference(out)


FUNCTIONAL_MODEL = '''import torch
from torch import nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(3, 8, 3, 2, 1)
        self.b = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = F.relu6(self.a(x))
        y = self.b(y * torch.sigmoid(F.adaptive_avg_pool2d(y, 1)))
        return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


def get_fwd_args():
    torch.manual_seed(1)
    return (torch.randn(1, 3, 16, 16),)
'''


def test_call_selectors_find_functional_ops_under_their_exported_names(tmp_path):
    """F.interpolate is aten.upsample_bilinear2d in the exported graph: `call:` selects it however it is spelled;
    a function torch.export writes as another op (a global average pool as aten.mean) says which to select."""
    model = tmp_path / "m.py"
    model.write_text(FUNCTIONAL_MODEL)
    r = prepare(model, tmp_path / "a", ["yasp::Up=call:torch.nn.functional.interpolate",
                                        "yasp::Gate=call:torch.sigmoid"])
    assert r.code == 0, r.stderr
    cands = CandidatesFile.read(tmp_path / "a" / "candidates.json").candidates
    assert sorted(c.name for c in cands) == ["Gate", "Up"]
    r = prepare(model, tmp_path / "b", ["yasp::Gap=call:torch.nn.functional.adaptive_avg_pool2d"])
    assert r.code == 2
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("error:"))
    assert "torch.export writes it as aten.mean: select call:torch.mean" in line and "Closest ops:" in line


def test_a_lift_with_nothing_to_lift_and_a_bad_namespace_are_refused(tmp_path):
    """From a new-user trial: @lift=fold_conv_bn on a LayerNorm was accepted (no lifted weights), and
    propose --namespace 'bad::ns' emitted selectors prepare then refused."""
    from tests.helpers import ytk_inproc

    model = Path(__file__).resolve().parents[1] / "data" / "tiny_hybrid_vit_model.py"
    out = tmp_path / "o"
    r = ytk_inproc("embedded", "prepare", model, "--onnx-out", out / "m.onnx", "--npz-out", out / "m.npz",
                   "--reference-out", out / "r.npz", "--plugin", "yasp::Ln=LayerNorm@where=norm@lift=fold_conv_bn",
                   YTK_ENGINE="mock")
    assert r.code == 2 and "has no convolution; @lift=fold_conv_bn" in r.stderr, r.stderr[-1500:]
    assert not (out / "m.onnx").exists()
    for ns in ("bad::ns", "my ns"):
        r = ytk_inproc("embedded", "propose", "--profile", tmp_path / "x.tgz", "--onnx", tmp_path / "m.onnx",
                       "--fx-nodes", tmp_path / "f.json", "--namespace", ns)
        assert r.code == 2 and "--namespace" in r.stderr and "letters, digits and _" in r.stderr, r.stderr


def test_1d_and_3d_convolutions_carve_with_their_weights_lifted(tmp_path):
    """Every carve of a Conv1d with the default lift died with 'expected output_padding to be a single integer'
    (the rebuilt region called conv2d with 2-D defaults), so a 1-D model got nothing plugged."""
    from tests.helpers import ytk_inproc

    model = tmp_path / "model.py"
    model.write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.c1 = nn.Sequential(nn.Conv1d(8, 16, 3, bias=False), nn.BatchNorm1d(16))\n"
        "        self.dw = nn.Sequential(nn.Conv1d(16, 16, 5, padding='same', dilation=2, groups=16), nn.ReLU())\n"
        "        self.c3 = nn.Sequential(nn.Conv3d(4, 4, 3, padding=1, groups=4), nn.BatchNorm3d(4))\n\n"
        "    def forward(self, x, v):\n"
        "        return self.dw(self.c1(x)), self.c3(v)\n\n\n"
        "def get_fwd_args():\n"
        "    torch.manual_seed(0)\n"
        "    return (torch.randn(1, 8, 32), torch.randn(1, 4, 6, 6, 6))\n")
    out = tmp_path / "o"
    r = ytk_inproc("embedded", "prepare", model, "--onnx-out", out / "m.onnx", "--npz-out", out / "m.npz",
                   "--reference-out", out / "r.npz", "--plugin", "yasp::C1=mod:c1", "--plugin", "yasp::Dw=mod:dw",
                   "--plugin", "yasp::C3=mod:c3", YTK_ENGINE="mock")
    assert r.code == 0, r.stderr[-2000:]
    cands = {c.name: c for c in CandidatesFile.read(out / "candidates.json").candidates}
    assert {n: c.lift for n, c in cands.items()} == {"C1": "fold_conv_bn", "Dw": "fold_conv_bn", "C3": "fold_conv_bn"}
    assert cands["Dw"].input_roles == ["activation", "weight", "bias"]
    kws = Path(__file__).resolve().parents[1] / "data" / "tiny_kws1d_model.py"
    r = ytk_inproc("embedded", "prepare", kws, "--onnx-out", tmp_path / "k" / "m.onnx", "--npz-out",
                   tmp_path / "k" / "m.npz", "--reference-out", tmp_path / "k" / "r.npz", "--plugin",
                   "yasp::Dw=ConvBNAct1d@where=*.0.dw", "--plugin", "yasp::Stem=ConvBNAct1d@where=stem",
                   YTK_ENGINE="mock")
    assert r.code == 0, r.stderr[-2000:]


def test_call_of_a_module_class_points_at_the_class_form(tmp_path):
    """`call:nn.SiLU` listed unrelated ops (the match was case-sensitive) and did not say SiLU is a class."""
    from tests.helpers import ytk_inproc

    kws = Path(__file__).resolve().parents[1] / "data" / "tiny_kws1d_model.py"
    out = tmp_path / "o"
    r = ytk_inproc("embedded", "prepare", kws, "--onnx-out", out / "m.onnx", "--npz-out", out / "m.npz",
                   "--reference-out", out / "r.npz", "--plugin", "yasp::X=call:nn.SiLU", YTK_ENGINE="mock")
    assert r.code == 2 and "select it as SiLU, without call:" in r.stderr and "Closest ops: silu" in r.stderr, \
        r.stderr[-1500:]


_TOKEN_MODEL = """
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(4096, 16)
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, ids):
        return self.lin(self.embed(ids))


def get_fwd_args():
    return (torch.randint(0, 4096, (1, 8)),)
"""
_MASK_MODEL = """
class Mask(torch.nn.Module):
    def forward(self, x):
        return x > 0


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.mask = Mask()

    def forward(self, x):
        y = self.conv(x)
        return y * self.mask(y)


def get_fwd_args():
    return (torch.randn(1, 3, 8, 8),)
"""


@pytest.mark.parametrize("source, refused, says, carves", [
    # token ids into an embedding passed every contract check as fp16, exact only to 2048: wrong ids, silently
    (_TOKEN_MODEL, "yasp::Emb=Embedding", "region embed has the int64 input ids", "yasp::L=Linear"),
    # a comparison's bool output crashed the carve before its check ('internal carve error', exit 1)
    (_MASK_MODEL, "yasp::M=Mask", "region mask has the bool output", None),
])
def test_a_region_with_a_non_float_boundary_is_refused_naming_the_tensor(tmp_path, source, refused, says, carves):
    model = tmp_path / "model.py"
    model.write_text("import torch\ntorch.manual_seed(0)\n" + source)
    r = prepare(model, tmp_path / "p", [refused], size="")
    assert r.code == 2 and says in r.stderr and "floating-point tensors" in r.stderr, r.stderr[-1500:]
    if carves:  # the same model carves where its boundary is floating point
        r = prepare(model, tmp_path / "q", [carves], size="")
        assert r.code == 0, r.stderr[-1500:]


CONVNEXT = Path(__file__).parents[1] / "data" / "convnext_style_model.py"


def test_a_channel_layernorm_joins_a_depthwise_epilogue_with_its_weights_lifted(tmp_path):
    """ConvNeXt's dw 7x7 + LayerNorm (issue 23): ``@epilogue`` takes the norm with its permutes -- back to NCHW
    (LayerNorm2d) or not (the NHWC view a Linear reads) -- and lifts its (weight, bias) after the conv's, so
    blocks whose norms differ share one plugin."""
    out = tmp_path / "carved"
    r = prepare(CONVNEXT, out, ["yasp::Ln=Conv2d@where=*.0.conv_dw,*.1.conv_dw@epilogue",
                                "yasp::LnNhwc=Conv2d@where=*.2.conv_dw,*.3.conv_dw@epilogue"])
    assert r.code == 0, r.stderr
    cands = {c.name: c for c in CandidatesFile.read(out / "candidates.json").candidates}
    for name, permutes in (("Ln", 2), ("LnNhwc", 1)):
        c = cands[name]
        assert c.input_roles == ["activation", "weight", "bias", "weight", "bias"], name
        assert c.op_inventory["aten.layer_norm.default"] == 1 and c.op_inventory["aten.permute.default"] == permutes
        assert [len(s.inputs) for s in c.sites] == [5, 5]
        assert c.sites[0].inputs[3].shape == [32]  # the norm's weight
    out_shapes = {c.name: c.sites[0].outputs[0].shape for c in cands.values()}
    assert out_shapes == {"Ln": [1, 32, 16, 24], "LnNhwc": [1, 16, 24, 32]}
    _assert_reproduces_reference(out)


def test_a_channel_layernorm_stays_outside_without_epilogue(tmp_path):
    out = tmp_path / "carved"
    r = prepare(CONVNEXT, out, ["yasp::Dw=Conv2d@where=*.0.conv_dw,*.1.conv_dw"])
    assert r.code == 0, r.stderr
    c = CandidatesFile.read(out / "candidates.json").candidates[0]
    assert c.input_roles == ["activation", "weight", "bias"]
    assert "aten.layer_norm.default" not in c.op_inventory


_LAYER_SCALE = '''
import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc1, self.act = nn.Conv2d(c, 4 * c, 1), nn.GELU()
        self.fc2, self.drop = nn.Conv2d(4 * c, c, 1), nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.fc2(self.act(self.fc1(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.mlp = Mlp(c)
        self.gamma = nn.Parameter(torch.rand(c, 1, 1) + 0.5)   # FastViT's layer scale

    def forward(self, x):
        return x + self.mlp(x) * self.gamma


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.Sequential(Block(16), Block(16))

    def forward(self, x):
        return self.blocks(x)


def get_fwd_args():
    torch.manual_seed(1)
    return (torch.randn(1, 16, 12, 20),)
'''


def test_a_layer_scale_after_a_conv_is_folded_into_its_lifted_pair(tmp_path):
    """FastViT's MLP ends in fc2, eval dropout and ``x * gamma`` (a [C, 1, 1] parameter per block): the epilogue
    takes the product and the carve folds gamma into fc2's (weight, bias) as it folds a BatchNorm, so the
    program is a plain conv and blocks with different gammas share one plugin."""
    model = tmp_path / "model.py"
    model.write_text(_LAYER_SCALE)
    out = tmp_path / "carved"
    r = prepare(model, out, ["yasp::Fc2=Conv2d@where=*.mlp.fc2@epilogue"], size="1x16x12x20")
    assert r.code == 0, r.stderr
    c = CandidatesFile.read(out / "candidates.json").candidates[0]
    assert len(c.sites) == 2 and c.input_roles == ["activation", "weight", "bias"]
    assert "aten.mul.Tensor" not in c.op_inventory and "aten.conv2d.default" in c.op_inventory
    _assert_reproduces_reference(out)


_TF_SAME = '''import torch
from torch import nn
import torch.nn.functional as F


class Down(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dw = nn.Sequential(nn.Conv2d(c, c, 3, 2, 0, groups=c, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return self.dw(F.pad(x, (0, 1, 0, 1)))  # TF 'same' for stride 2: the ONNX optimiser folds it into the Conv


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.a, self.b = Down(16), Down(16)

    def forward(self, x):
        return self.b(torch.relu(self.a(torch.relu(self.stem(x)))))


def get_fwd_args():
    return (torch.randn(1, 3, 32, 48, generator=torch.Generator().manual_seed(1)),)
'''


def test_a_pad_the_onnx_optimiser_folded_into_the_conv_joins_the_region(tmp_path):
    """An asymmetric ``F.pad`` before a conv becomes the Conv's ``pads`` in the ONNX: it has no tensor, so the
    region starts at the pad's input (it was 'internal carve error ... cannot find the ONNX tensor of region
    input pad', on selectors propose printed); the templates say why they refuse such a region."""
    model = tmp_path / "tf_same.py"
    model.write_text(_TF_SAME)
    out = tmp_path / "carved"
    r = prepare(model, out, ["yasp::Down=Sequential@where=a.dw,b.dw"])
    assert r.code == 0, r.stderr[-1500:]
    (cand,) = CandidatesFile.read(out / "candidates.json").candidates
    assert cand.op_inventory.get("aten.pad.default") == 1
    assert [s.inputs[0].shape for s in cand.sites] == [[1, 16, 32, 48], [1, 16, 16, 24]]
    _assert_reproduces_reference(out)
    from ytk_backend_templates.recognise import UnsupportedRegion, load_graph, recognise
    with pytest.raises(UnsupportedRegion, match=r"explicit pad \[0, 1, 0, 1\] before the convolution"):
        recognise(load_graph(out / "plugin_candidates" / "Down.pt2"))


_ROOT_CALLS = '''import torch
from torch import nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Conv2d(3, 8, 3, 2, 1)

    def forward(self, x):
        y = self.a(x)
        return F.interpolate(y, scale_factor=2.0, mode="nearest") + F.interpolate(y, scale_factor=2.0, mode="bilinear")


def get_fwd_args():
    return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1)),)
'''


def test_sites_no_where_tells_apart_are_named_by_their_op_with_a_selector_that_works(tmp_path):
    """Two calls at the model's root (a new user's model): the refusal named the first site '' and advised
    @where, which cannot select the root. It names both sites by their op and gives selectors that carve."""
    model = tmp_path / "m.py"
    model.write_text(_ROOT_CALLS)
    r = prepare(model, tmp_path / "a", ["yasp::Up=call:torch.nn.functional.interpolate"], size="1x16x16")
    assert r.code == 2
    assert "the model's root (at upsample_nearest2d)" in r.stderr and "the model's root (at upsample_bilinear2d)" \
        in r.stderr, r.stderr[-800:]
    advice = r.stderr.split("instead (", 1)[1].split(";", 1)[0].split(", ")
    assert advice == ["yasp::Up_0=upsample_nearest2d", "yasp::Up_1=upsample_bilinear2d"]
    r = prepare(model, tmp_path / "b", advice, size="1x16x16")
    assert r.code == 0, r.stderr[-800:]


_MHA = '''import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


def get_fwd_args():
    return (torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(1)),)
'''


def test_a_module_that_is_never_called_is_said_to_be_so(tmp_path):
    """nn.MultiheadAttention calls F.linear with its out_proj's weights: 'mod:out_proj' said no module path ends
    with 'out_proj' (a new user's trial), although the model has one."""
    model = tmp_path / "m.py"
    model.write_text(_MHA)
    r = prepare(model, tmp_path / "a", ["yasp::P=mod:out_proj"], size="1x12x16")
    assert r.code == 2
    assert "a module ending in 'out_proj' holds weights of the graph" in r.stderr and "never called" in r.stderr
    # the class form said only "0 Linear module(s) ... none matches @where=*.out_proj" (a second user's trial)
    r = prepare(model, tmp_path / "b", ["yasp::P=Linear@where=*.out_proj"], size="1x12x16")
    assert r.code == 2
    assert "a module ending in 'out_proj' holds weights of the graph" in r.stderr and "never called" in r.stderr
