"""Recognition of carved regions from their .pt2 and candidates.json entry, and their contracts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from templates_fixtures import ACTS, dw_fixture, export_region, litemla_fixture, pw_fixture, se_fixture  # noqa: E402
from ytk_backend_templates.contract import bytes_moved, plugin_meta  # noqa: E402
from ytk_backend_templates.recognise import load_graph, recognise, site_shape_indices, site_shapes  # noqa: E402
from ytk_backend_templates.reference import torch_region, verify_against_pt2  # noqa: E402
from ytk_backend_templates.regions import Conv1x1Region, DwConvRegion, LiteMLARegion, SERegion  # noqa: E402
from ytk_hookspecs.errors import StageError, UnsupportedRegion  # noqa: E402
from ytk_hookspecs.contract import check_meta, check_meta_against_candidate  # noqa: E402

EXPECT_ACT = {"hardtanh": "relu6", "clamp": "relu6"}


@pytest.mark.parametrize("act", sorted(ACTS))
def test_every_activation_spelling_is_recognised(tmp_path: Path, act: str) -> None:
    pt2, cand = dw_fixture(tmp_path, "Dw", 3, 1, act, [(1, 16, 8, 8)])
    r = recognise(load_graph(pt2), cand)
    assert r == DwConvRegion(k=3, stride=1, act=EXPECT_ACT.get(act, act), channels=16)


@pytest.mark.parametrize("k,s,bias", [(3, 2, True), (5, 1, False), (7, 2, True), (1, 1, True), (1, 2, False)])
def test_kernel_sizes_strides_and_missing_bias(tmp_path: Path, k: int, s: int, bias: bool) -> None:
    pt2, cand = dw_fixture(tmp_path, "Dw", k, s, "relu", [(2, 24, 9, 11)], bias=bias)
    g = load_graph(pt2)
    r = recognise(g, cand)
    assert (r.k, r.stride, r.has_bias) == (k, s, bias)
    meta = plugin_meta(r, "Dw", candidate=cand)
    rep = check_meta(meta)
    rep.extend(check_meta_against_candidate(meta, cand, "fp16"))
    assert rep.ok, rep.errors  # strided output extents evaluate to the region's real output shapes
    verify_against_pt2(r, torch.export.load(str(pt2)).module(), g.input_shapes, torch.device("cpu"))


@pytest.mark.parametrize("k,act", [(3, "none"), (7, "gelu")])
def test_a_residual_add_of_the_input_is_part_of_the_depthwise_region(tmp_path: Path, k: int, act: str) -> None:
    """EfficientViT-M's ResidualDrop (x + BN(dw3x3(x))) and FastViT's position encoding (x + dw7x7(x)):
    the add reads the conv's own input, so the kernel adds it at the pixel it stores."""
    pt2, cand = dw_fixture(tmp_path, "DwRes", k, 1, act, [(2, 32, 9, 11)], residual="after")
    g = load_graph(pt2)
    r = recognise(g, cand)
    assert r == DwConvRegion(k=k, stride=1, act=act, channels=32, residual=True)
    assert "+ residual" in r.describe()
    verify_against_pt2(r, torch.export.load(str(pt2)).module(), g.input_shapes, torch.device("cpu"))
    # the recognised math without the add would not reproduce the region: the check refuses it
    with pytest.raises(UnsupportedRegion, match="differs from the region's .pt2"):
        verify_against_pt2(DwConvRegion(k=k, stride=1, act=act, channels=32), torch.export.load(str(pt2)).module(),
                           g.input_shapes, torch.device("cpu"))
    meta = plugin_meta(r, "DwRes", candidate=cand)
    rep = check_meta(meta)
    rep.extend(check_meta_against_candidate(meta, cand, "fp16"))
    assert rep.ok, rep.errors


def test_a_dynamic_residual_region_whose_groups_come_from_the_weight_is_recognised(tmp_path: Path) -> None:
    """A dynamic-remainder carve of x + dw(x): the exporter unifies the channel counts and spells the
    groups as the weight's (or the bias's) dim 0, not the input's; it is the same depthwise conv."""
    pt2, cand = dw_fixture(tmp_path, "DwRes", 3, 1, "none", [(1, 16, 8, 8), (1, 32, 8, 8)], residual="after",
                           dynamic=True)
    g = load_graph(pt2)
    conv = next(o for o in g.ops if "conv" in o.target)
    q = g.by_name()[conv.args[6]]
    assert q.target == "aten.sym_size.int" and q.args[0] != conv.args[0]  # not the input's channels
    assert recognise(g, cand) == DwConvRegion(k=3, stride=1, act="none", channels=None, residual=True)
    q.args[1] = 2  # a spatial extent is no channel count: refused, naming the op
    with pytest.raises(UnsupportedRegion, match="groups from sym_size_int.*not from a channel count"):
        recognise(g, cand)


def test_a_residual_add_before_the_activation_or_after_a_strided_conv_is_refused(tmp_path: Path) -> None:
    pt2, cand = dw_fixture(tmp_path / "a", "DwRes", 3, 1, "relu", [(1, 16, 8, 8)], residual="before")
    with pytest.raises(UnsupportedRegion, match="unsupported op aten.relu.default after the convolution .*residual"):
        recognise(load_graph(pt2), cand)
    pt2, cand = dw_fixture(tmp_path / "b", "DwRes", 3, 1, "relu", [(1, 16, 8, 8)], residual="after")
    g = load_graph(pt2)
    conv = next(o for o in g.ops if "conv" in o.target)
    conv.args[3] = [2, 2]  # the same graph with a strided conv: the add could not take its input
    with pytest.raises(UnsupportedRegion, match="residual add after a stride-2 convolution"):
        recognise(g, None)


def test_dynamic_remainder_makes_channels_a_runtime_extent(tmp_path: Path) -> None:
    shapes = [(1, 16, 20, 24), (1, 128, 10, 12), (1, 512, 5, 6), (1, 512, 5, 6)]
    pt2, cand = dw_fixture(tmp_path, "DwConv3x3s1Dyn", 3, 1, "hardswish", shapes)
    g = load_graph(pt2)
    r = recognise(g, cand)
    assert r.channels is None
    assert site_shape_indices(cand, site_shapes(g, cand)) == [0, 1, 2, 2]
    meta = plugin_meta(r, cand.name, candidate=cand)
    assert not any(c.startswith("C ==") for c in meta.constraints)
    rep = check_meta_against_candidate(meta, cand, "fp16")
    assert rep.ok, rep.errors
    assert [t.format for t in meta.inputs] == ["kHWC8", "kLINEAR", "kLINEAR"]
    assert [t.dtype for t in meta.inputs] == ["float16", "float32", "float32"]


@pytest.mark.parametrize("c,k,s", [(24, 3, 1), (72, 5, 2), (88, 7, 1)])
def test_channels_no_block_tiles_take_the_runtime_channel_kernels(tmp_path: Path, c: int, k: int, s: int) -> None:
    from ytk_backend_templates.variants import region_variants

    pt2, cand = dw_fixture(tmp_path, "Dw", k, s, "relu", [(1, c, 9, 11)])
    r = recognise(load_graph(pt2), cand)
    assert r == DwConvRegion(k=k, stride=s, act="relu", channels=None)
    assert region_variants(r, sm=90)
    meta = plugin_meta(r, "Dw", candidate=cand)
    rep = check_meta(meta)
    rep.extend(check_meta_against_candidate(meta, cand, "fp16"))
    assert rep.ok, rep.errors


@pytest.mark.parametrize("shapes", [[(1, 30, 9, 11)], [(1, 24, 9, 11), (1, 30, 5, 6)]], ids=["one", "one-site-of-two"])
def test_channels_that_are_not_a_multiple_of_8_are_refused(tmp_path: Path, shapes) -> None:  # type: ignore[no-untyped-def]
    """EdgeNeXt's split convs have 30 channels: kHWC8 cannot carry them, and a dynamic remainder with one
    such site must be refused before a job, not by the engine compile."""
    from ytk_backend_templates.supports import supports
    from ytk_hookspecs.models import SupportRequest

    pt2, cand = dw_fixture(tmp_path, "DwConv3x3s1Dyn" if len(shapes) > 1 else "Dw", 3, 1, "relu", shapes)
    with pytest.raises(UnsupportedRegion, match="30 channels.*kHWC8.*multiple of 8"):
        recognise(load_graph(pt2), cand)
    ans = supports(SupportRequest(candidate=cand, reference=pt2))
    assert not ans.supported and "multiple of 8" in ans.why


def test_pointwise_dense_constant_and_dynamic(tmp_path: Path) -> None:
    pt2, cand = pw_fixture(tmp_path / "a", "Conv1x1s1C16to64", "hardswish", [(1, 16, 8, 8, 64), (2, 16, 4, 4, 64)])
    r = recognise(load_graph(pt2), cand)
    assert r == Conv1x1Region(act="hardswish", cin=16, cout=64)
    meta = plugin_meta(r, cand.name, candidate=cand)
    rep = check_meta(meta)
    rep.extend(check_meta_against_candidate(meta, cand, "fp16"))
    assert rep.ok, rep.errors
    assert "C == 16" in meta.constraints and "CO == 64" in meta.constraints
    assert bytes_moved(r, site_shapes(load_graph(pt2), cand)[0]) == (16 + 64) * 64 * 2 + 64 * 16 * 4 + 64 * 4

    pt2, cand = pw_fixture(tmp_path / "b", "Conv1x1s1Dyn", "none", [(1, 32, 8, 8, 16), (1, 64, 4, 4, 256)])
    r = recognise(load_graph(pt2), cand)
    assert r == Conv1x1Region(act="none", cin=None, cout=None)
    meta = plugin_meta(r, cand.name, candidate=cand)
    rep = check_meta_against_candidate(meta, cand, "fp16")
    assert rep.ok, rep.errors
    assert meta.inputs[1].shape == ["CO", "C", "1", "1"]


@pytest.mark.parametrize("dynamic", [False, True])
def test_pointwise_grouped_with_channels_from_the_input(tmp_path: Path, dynamic: bool) -> None:
    # dynamic: groups = x.shape[1] // 16 in the graph (sym_size, then floordiv), as the carve exports it
    pt2, cand = pw_fixture(tmp_path, "GConv1x1s1Dyn", "none", [(1, 384, 6, 5, 384), (1, 768, 3, 4, 768)],
                           group_in=16, group_out=16, dynamic=dynamic)
    g = load_graph(pt2)
    r = recognise(g, cand)
    assert r == Conv1x1Region(act="none", cin=None, cout=None, group_in=16, group_out=16)
    meta = plugin_meta(r, cand.name, candidate=cand)
    rep = check_meta(meta)
    rep.extend(check_meta_against_candidate(meta, cand, "fp16"))
    assert rep.ok, rep.errors
    assert "C % 16 == 0" in meta.constraints
    verify_against_pt2(r, torch.export.load(str(pt2)).module(), g.input_shapes, torch.device("cpu"))


class _Strided1x1(torch.nn.Module):
    def forward(self, x, w, b):  # type: ignore[no-untyped-def]
        return F.conv2d(x, w, b, 2, 0)


class _GroupOf4(torch.nn.Module):
    def forward(self, x, w, b):  # type: ignore[no-untyped-def]
        return F.conv2d(x, w, b, 1, 0, 1, 8)


class _Depthwise1d(torch.nn.Module):
    """A Conformer's depthwise conv with its SiLU, weights baked as the carve leaves a Conv1d's."""

    def __init__(self) -> None:
        super().__init__()
        self.dw = torch.nn.Conv1d(16, 16, 31, padding=15, groups=16)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return F.silu(self.dw(x))


@pytest.mark.parametrize("module,args,reason", [
    (_Strided1x1(), (torch.randn(1, 16, 8, 8), torch.randn(32, 16, 1, 1), torch.randn(32)), "stride"),
    (_GroupOf4(), (torch.randn(1, 32, 8, 8), torch.randn(32, 4, 1, 1), torch.randn(32)), "per group"),
    (_Depthwise1d(), (torch.randn(1, 16, 64),), "^a 1-D convolution: templates cover 2-D convolutions"),
])
def test_pointwise_regions_outside_the_template_are_refused(tmp_path: Path, module, args, reason: str) -> None:  # type: ignore[no-untyped-def]
    pt2 = export_region(module, args, tmp_path / "r.pt2")
    with pytest.raises(UnsupportedRegion, match=reason):
        recognise(load_graph(pt2))


@pytest.mark.parametrize("joined", [True, False])
def test_litemla_is_recognised_with_head_dim_and_eps(tmp_path: Path, joined: bool) -> None:
    pt2, cand = litemla_fixture(tmp_path, "LiteMLAC384", [(1, 384, 4, 5)] * 3 if joined else [(1, 96, 4, 5)],
                                joined=joined)
    g = load_graph(pt2)
    r = recognise(g, cand)
    assert isinstance(r, LiteMLARegion) and r.dim == 16 and r.eps == 1e-15 and r.joined is joined
    meta = plugin_meta(r, cand.name, candidate=cand)
    rep = check_meta(meta)
    rep.extend(check_meta_against_candidate(meta, cand, "fp16"))
    assert rep.ok, rep.errors
    assert meta.workspace  # pass-1 partial sums live in the workspace
    verify_against_pt2(r, torch.export.load(str(pt2)).module(), g.input_shapes, torch.device("cpu"))
    n, c, h, w = cand.sites[0].inputs[0].shape
    assert bytes_moved(r, site_shapes(g, cand)[0]) == 2 * n * h * w * (c * len(cand.sites[0].inputs)
                                                                       + c * (2 if joined else 1) // 3)


class _Dense(torch.nn.Module):
    def forward(self, x, w, b):  # type: ignore[no-untyped-def]
        return F.relu(F.conv2d(x, w, b, 1, 1))


class _Dilated(torch.nn.Module):
    def forward(self, x, w, b):  # type: ignore[no-untyped-def]
        return F.conv2d(x, w, b, 1, 2, 2, x.shape[1])


class _Mish(torch.nn.Module):
    def forward(self, x, w, b):  # type: ignore[no-untyped-def]
        return F.mish(F.conv2d(x, w, b, 1, 1, 1, x.shape[1]))


class _Baked(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 16, 3, 1, 1, groups=16)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.conv(x)


@pytest.mark.parametrize("module,args,reason", [
    (_Dense(), (torch.randn(1, 16, 8, 8), torch.randn(16, 16, 3, 3), torch.randn(16)),
     "^a dense 3x3 conv .*templates cover depthwise kxk and 1x1 convs"),
    (_Dilated(), (torch.randn(1, 16, 8, 8), torch.randn(16, 1, 3, 3), torch.randn(16)), "padding|dilation"),
    (_Mish(), (torch.randn(1, 16, 8, 8), torch.randn(16, 1, 3, 3), torch.randn(16)), "mish"),
    (_Baked(), (torch.randn(1, 16, 8, 8),), "lifted"),
])
def test_unknown_regions_are_reported_not_faked(tmp_path: Path, module, args, reason: str) -> None:  # type: ignore[no-untyped-def]
    pt2 = export_region(module, args, tmp_path / "r.pt2")
    with pytest.raises(UnsupportedRegion, match=reason):
        recognise(load_graph(pt2))


def test_a_recognition_that_does_not_reproduce_the_pt2_is_refused(tmp_path: Path) -> None:
    pt2, cand = dw_fixture(tmp_path, "Dw", 3, 1, "silu", [(1, 16, 8, 8)])
    g = load_graph(pt2)
    wrong = DwConvRegion(k=3, stride=1, act="relu", channels=16)
    with pytest.raises(UnsupportedRegion, match="differs from the region's .pt2"):
        verify_against_pt2(wrong, torch.export.load(str(pt2)).module(), g.input_shapes, torch.device("cpu"))
    assert torch_region(recognise(g, cand)) is not None


def test_reoptimization_widens_the_search_or_says_it_has_none(tmp_path: Path) -> None:
    from ytk_backend_templates.generate import JobPlan, plan_job
    from ytk_backend_templates.variants import region_variants
    from ytk_hookspecs.models import KernelGenRequest, Reoptimization

    def plan(pt2, cand):  # type: ignore[no-untyped-def]
        return plan_job(KernelGenRequest(reference=pt2, gpu="H200", output=tmp_path / f"{cand.name}.module_source.py",
                                         reoptimize=Reoptimization(ms_to_beat=0.1, kernel_ms_to_beat=0.05),
                                         candidate=cand, plugin_name=cand.name))

    p = plan(*pw_fixture(tmp_path / "a", "Conv1x1s1Dyn", "none", [(1, 32, 8, 8, 16), (1, 64, 4, 4, 256)]))
    assert isinstance(p, JobPlan) and len(p.variants) > len(region_variants(p.region))
    res = plan(*dw_fixture(tmp_path / "b", "DwConv3x3s1Dyn", 3, 1, "hardswish", [(1, 16, 8, 8), (1, 32, 4, 4)]))
    assert not isinstance(res, JobPlan) and res.status == "failed" and "no wider search" in res.message


def test_probe_refuses_a_target_of_another_sm(monkeypatch):
    """Kernels are scored on the local GPU: an sm87 (Orin) target on an sm90 GPU is not servable here,
    so automatic selection must not pick templates for it (kernelgen would refuse it later anyway)."""
    import ytk_backend_nvcc.toolchain as toolchain
    from ytk_backend_templates import gpu as gpu_mod
    from ytk_backend_templates.plugin import TemplatesGenerator
    from ytk_hookspecs.models import ArchSpec

    monkeypatch.setattr(toolchain, "find_nvcc", lambda: "/usr/local/bin/nvcc")
    monkeypatch.setattr(gpu_mod, "local_gpu", lambda: gpu_mod.LocalGpu(name="NVIDIA H200", sm=90, l2_bytes=60 << 20,
                                                                        sm_count=132))
    probe = TemplatesGenerator().availability
    orin = probe(ArchSpec.parse("arm64-sm87-dos6010-cu114-trt86"))
    assert not orin.available and "sm_87" in orin.reason and "H200" in orin.reason
    assert probe(ArchSpec.parse("x86_64-sm90-linux-cu130-trt10")).available
    assert probe().available


def test_fp16_weight_variants_can_be_kept_out(tmp_path: Path) -> None:
    """``--config fp16_weights=0``: no variant that rounds the weights to fp16 competes (the exact hi + lo
    tensor-core ones still do); a value other than 0/1 is refused with the choices."""
    from ytk_backend_templates.generate import JobPlan, plan_job
    from ytk_hookspecs.models import KernelGenRequest

    pt2, cand = dw_fixture(tmp_path, "DwConv5x5s1Dyn", 5, 1, "hardswish", [(1, 64, 9, 9)])

    def weights(value):  # type: ignore[no-untyped-def]
        cfg = {"deployment_target": "tensorrt"} | ({"fp16_weights": value} if value is not None else {})
        p = plan_job(KernelGenRequest(reference=pt2, gpu="H200", arch="x86_64-sm90-linux-cu130-trt10", config=cfg,
                                      output=tmp_path / "o.module_source.py", candidate=cand, plugin_name=cand.name))
        assert isinstance(p, JobPlan)
        return [v.params.get("weights") for v in p.variants]

    default = weights(None)
    assert "fp16" in default and "hilo" in default
    exact = weights("0")
    assert "fp16" not in exact and "hilo" in exact and len(exact) == len(default) - default.count("fp16")
    with pytest.raises(StageError, match="fp16_weights=yes"):
        weights("yes")


def test_a_norm_keeping_its_parameters_is_named_not_sent_to_lift():
    """A conv + GroupNorm region carved with the conv lifted was told to 'carve it with weights lifted
    (@lift=fold_conv_bn)', which changes nothing: no carve option lifts a GroupNorm's affine."""
    from ytk_backend_templates.recognise import OpNode, RegionGraph
    from ytk_hookspecs.errors import UnsupportedRegion

    def graph(weight_baked: bool) -> RegionGraph:
        ops = [OpNode("conv2d", "aten.conv2d.default", ["x", "b_w" if weight_baked else "w", None], {}, (1, 8, 4, 4)),
               OpNode("view", "aten.view.default", ["b_const0", [8]], {}, (8,)),
               OpNode("group_norm", "aten.group_norm.default", ["conv2d", 2, "view", "b_const1"], {}, (1, 8, 4, 4))]
        return RegionGraph(inputs=["x"] + ([] if weight_baked else ["w"]), input_shapes=[(1, 8, 4, 4), (8, 8, 3, 3)],
                           baked=["b_const0", "b_const1"] + (["b_w"] if weight_baked else []), ops=ops,
                           outputs=["group_norm"],
                           baked_shapes={"b_const0": (8,), "b_const1": (8,), "b_w": (8, 8, 3, 3)})

    with pytest.raises(UnsupportedRegion) as e:
        recognise(graph(weight_baked=False))
    assert "its group_norm keeps 2 parameters (shapes [8], [8]) inside the region" in str(e.value)
    assert "@lift" not in str(e.value)
    with pytest.raises(UnsupportedRegion, match="carve it with weights lifted"):
        recognise(graph(weight_baked=True))


@pytest.mark.parametrize("style,act,gate,bias", [("timm", "silu", "sigmoid", True),
                                                 ("torchvision", "relu", "hardsigmoid", True),
                                                 ("timm", "relu", "hardsigmoid", False)])
def test_squeeze_excite_is_recognised_whole_in_either_spelling(tmp_path: Path, style: str, act: str, gate: str,
                                                                bias: bool) -> None:
    pt2, cand = se_fixture(tmp_path, "SE", act, gate, [(1, 96, 7, 9, 24), (2, 96, 5, 5, 24)], bias=bias, style=style)
    g = load_graph(pt2)
    r = recognise(g, cand)
    assert r == SERegion(act=act, gate=gate, channels=96, reduced=24, has_bias1=bias, has_bias2=bias)
    meta = plugin_meta(r, cand.name, candidate=cand)
    rep = check_meta(meta)
    rep.extend(check_meta_against_candidate(meta, cand, "fp16"))
    assert rep.ok, rep.errors
    assert meta.workspace and meta.extents["CR"] == "in1[0]"
    verify_against_pt2(r, torch.export.load(str(pt2)).module(), g.input_shapes, torch.device("cpu"))
    # the floor: x read once and y written once, fp16; the four parameters once, fp32
    n, c, h, w = 1, 96, 7, 9
    assert bytes_moved(r, site_shapes(g, cand)[0]) == 2 * 2 * n * c * h * w + 4 * (2 * 96 * 24 + (120 if bias else 0))


def test_squeeze_excite_sites_of_several_widths_take_runtime_channels(tmp_path: Path) -> None:
    pt2, cand = se_fixture(tmp_path, "SE", "relu", "sigmoid", [(1, 32, 7, 9, 8), (1, 72, 5, 5, 18)])
    r = recognise(load_graph(pt2), cand)
    assert isinstance(r, SERegion) and r.channels is None and r.reduced is None


class _SEWrongGate(torch.nn.Module):
    def forward(self, x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
        s = F.conv2d(F.relu(F.conv2d(x.mean((2, 3), keepdim=True), w1, b1)), w2, b2)
        return x * F.relu(s)


class _SEPlusInput(torch.nn.Module):
    def forward(self, x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
        s = torch.sigmoid(F.conv2d(F.relu(F.conv2d(x.mean((2, 3), keepdim=True), w1, b1)), w2, b2))
        return x * s + x


class _SEPoolOverW(torch.nn.Module):
    def forward(self, x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
        s = torch.sigmoid(F.conv2d(F.relu(F.conv2d(x.mean(3, keepdim=True), w1, b1)), w2, b2))
        return x * s


_SE_ARGS = (torch.randn(1, 16, 6, 5), torch.randn(4, 16, 1, 1), torch.randn(4), torch.randn(16, 4, 1, 1),
            torch.randn(16))


@pytest.mark.parametrize("module,reason", [
    (_SEWrongGate(), "gate relu"),
    (_SEPlusInput(), "unsupported ops in the squeeze-excite region|outputs|used"),
    (_SEPoolOverW(), "global average pool"),
])
def test_near_squeeze_excites_are_refused_with_the_reason(tmp_path: Path, module, reason: str) -> None:  # type: ignore[no-untyped-def]
    pt2 = export_region(module, _SE_ARGS, tmp_path / "r.pt2")
    with pytest.raises(UnsupportedRegion, match=reason):
        recognise(load_graph(pt2))


class _Attention(torch.nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.fused = fused

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.scaled_dot_product_attention(q, k, v)
        return (q @ k.transpose(-2, -1)).softmax(-1) @ v


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x.transpose(1, 2)).view(1, 8, 64))


@pytest.mark.parametrize("fused", [True, False])
def test_softmax_attention_is_refused_in_propose_s_words(tmp_path: Path, fused: bool) -> None:
    """propose said 'softmax attention: templates cover ReLU linear attention (LiteMLA) only'; after the carve the
    dry run and the autoloop said 'not a ReLU linear attention: needs two matmuls and two ReLUs' or dumped the op
    inventory as a dict (a new user's trial). Both now give propose's reason."""
    q = torch.randn(1, 2, 12, 8)
    pt2 = export_region(_Attention(fused), (q, q, q), tmp_path / "a.pt2")
    with pytest.raises(UnsupportedRegion) as e:
        recognise(load_graph(pt2))
    assert str(e.value) == "softmax attention: templates cover ReLU linear attention (LiteMLA) only"


def test_a_region_no_template_covers_is_named_by_its_computing_ops(tmp_path: Path) -> None:
    pt2 = export_region(_Mlp(), (torch.randn(1, 16, 16),), tmp_path / "m.pt2")
    with pytest.raises(UnsupportedRegion) as e:
        recognise(load_graph(pt2))
    # the baked parameters named by their shapes: the exporter's names for them (p_fc_weight, b_const0) mean
    # nothing to the user who wrote the model
    assert str(e.value) == ("no template for a region of linear, gelu: its 2 parameters (shapes [32, 16], [32]) "
                            "stay baked, and the carve lifts conv weights only"), str(e.value)
