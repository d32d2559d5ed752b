"""Shape families, the dynamic remainder and --merge-shape-families."""

from __future__ import annotations

from ytk_core.propose.families import fold, group_families
from ytk_core.propose.naming import family_label, family_name, remainder_name, unique
from ytk_core.propose.regions import Region


def _dw(path: str, c: int, ms: float, k: int = 3, s: int = 1, hw: int = 68) -> Region:
    return Region(path=path, cls="ConvNormAct", kind="depthwise_conv", around=False, anchors=[path], nodes=[path],
                  ms=ms, sig={"k": [k, k], "stride": [s, s], "dilation": [1, 1], "groups": c, "C": c, "Cout": c,
                              "spatial": [hw, hw], "transpose": False})


def test_families_split_on_channels_stride_and_spatial():
    rs = [_dw("a", 256, 1.0), _dw("b", 256, 1.1), _dw("c", 512, 0.5), _dw("d", 256, 0.4, s=2),
          _dw("e", 256, 0.3, hw=34)]
    fams = group_families(rs)
    assert [[r.path for r in f.regions] for f in fams] == [["a", "b"], ["c"], ["d"], ["e"]]
    assert fams[0].label == "depthwise 3x3 s1  (C=256)" and fams[0].default_name == "DwConv3x3s1C256"


def test_small_families_fold_into_one_dynamic_remainder():
    rs = [_dw("a", 256, 1.5), _dw("b", 256, 1.5), _dw("c", 16, 0.9), _dw("d", 128, 0.8), _dw("e", 1024, 0.4),
          _dw("f", 64, 0.3, s=2)]
    worth, small = fold(group_families(rs), own_kernel_ms=2.0, min_ms=1.0, merge=False)
    names = sorted(f.default_name for f in worth)
    assert names == ["DwConv3x3s1C256", "DwConv3x3s1Dyn"]
    dyn = next(f for f in worth if f.dynamic)
    assert sorted(r.path for r in dyn.regions) == ["c", "d", "e"]
    assert dyn.label == "depthwise 3x3 s1  (C=16..1024, 3 families)  (dynamic remainder)"
    assert [f.default_name for f in small] == ["DwConv3x3s2C64"]      # alone and under --min-ms


def test_a_pooled_vector_and_a_feature_map_never_share_a_remainder():
    """torch.export specialises a dimension of size 1, so a 1x1 conv on a pooled vector (channel attention's
    fc) and one on a feature map need programs of their own: folded together, the carve refused propose's own
    selector ("its sites need programs of their own"). Each kind folds with its own kind only."""
    rs = [_dw("fc_a", 16, 0.4, hw=1), _dw("fc_b", 32, 0.4, hw=1), _dw("map_a", 64, 0.5), _dw("map_b", 128, 0.6)]
    worth, _small = fold(group_families(rs), own_kernel_ms=2.0, min_ms=0.5, merge=False)
    assert sorted(sorted(r.path for r in f.regions) for f in worth) == [["fc_a", "fc_b"], ["map_a", "map_b"]]
    worth, _small = fold(group_families(rs), own_kernel_ms=2.0, min_ms=0.5, merge=True)
    assert sorted(sorted(r.path for r in f.regions) for f in worth) == [["fc_a", "fc_b"], ["map_a", "map_b"]]


def test_remainder_under_min_ms_is_not_worth_it():
    worth, small = fold(group_families([_dw("a", 16, 0.3), _dw("b", 32, 0.4)]), own_kernel_ms=2, min_ms=1, merge=False)
    assert worth == [] and len(small) == 1 and small[0].dynamic


def test_merge_gives_one_dynamic_candidate_per_op():
    rs = [_dw("a", 256, 5.0), _dw("b", 512, 4.0), _dw("c", 16, 3.0), _dw("d", 64, 3.0, k=5)]
    worth, small = fold(group_families(rs), own_kernel_ms=2.0, min_ms=1.0, merge=True)
    assert sorted(f.default_name for f in worth) == ["DwConv3x3s1Dyn", "DwConv5x5s1C64"] and small == []


def test_names():
    sig = {"k": [3, 3], "stride": [2, 2], "dilation": [1, 1], "C": 64, "Cout": 64, "groups": 64}
    assert family_name("depthwise_conv", "ConvNormAct", sig) == "DwConv3x3s2C64"
    assert family_label("depthwise_conv", "ConvNormAct", sig) == "depthwise 3x3 s2  (C=64)"
    assert family_name("attention", "LiteMLA", {"C": 384}) == "LiteMLAC384"
    assert family_label("attention", "LiteMLA", {"C": 384}) == "LiteMLA region (C=384)"
    assert remainder_name("depthwise_conv", "ConvNormAct", {**sig, "stride": [1, 1]}) == "DwConv3x3s1Dyn"
    assert family_name("conv", "ConvNormAct", {"k": [1, 1], "stride": [1, 1], "C": 128, "Cout": 512}) == \
        "Conv1x1s1C128to512"
    assert unique(["A", "A", "B"], ["H34W60", "H68W120", ""]) == ["AH34W60", "AH68W120", "B"]
    # a depthwise conv with a channel multiplier (FastViT's downsample: [2C, 1, k, k]) says its output channels,
    # and a Conv1d is not read as a 3x3 conv
    mult = {**sig, "Cout": 128}
    assert family_name("depthwise_conv", "ConvNormAct", mult) == "DwConv3x3s2C64to128"
    assert family_label("depthwise_conv", "ConvNormAct", mult) == "depthwise 3x3 s2  (C=64->128)"
    c1 = {"k": [3], "stride": [1], "dilation": [1], "C": 32, "Cout": 32}
    assert family_label("conv", "Conv1d", c1) == "1-D conv 3 s1  (C=32->32)"
    assert family_label("depthwise_conv", "Conv1d", {**c1, "groups": 32}) == "1-D depthwise 3 s1  (C=32)"


def test_unique_adds_a_shape_suffix_once_and_only_where_it_tells_names_apart():
    """Per-site proposals of one shape (a Linear bakes its weights) got "GemmK32N128H1W16D24H1W16D24": the
    suffix was appended again on every pass, and could not tell them apart anyway."""
    from ytk_core.propose.naming import unique_labels

    assert unique(["G", "G"], ["H1W16", "H1W16"]) == ["G", "G_2"]
    assert unique(["A", "A", "A", "B"], ["H2W3", "H2W3", "H4W6", ""]) == ["AH2W3", "AH2W3_2", "AH4W6", "B"]
    labels = unique_labels(["GEMM  (K=32, N=128)"] * 2 + ["dw  (C=8)"] * 2 + ["att (C=4)"] * 2 + ["x"],
                           [[1, 16], [1, 16], [8, 12], [4, 6], [2, 3], [2, 3], []],
                           [["s.0.fc"], ["s.1.fc"], ["a", "b"], ["c"], ["s.2.b.0.m", "s.2.b.1.m"],
                            ["s.3.b.0.m", "s.3.b.1.m"], ["d"]])
    assert labels == ["GEMM  (K=32, N=128)  at s.0.fc", "GEMM  (K=32, N=128)  at s.1.fc", "dw  (C=8)  8x12",
                      "dw  (C=8)  4x6", "att (C=4)  at s.2.b.*.m", "att (C=4)  at s.3.b.*.m", "x"]


def test_op_of_inverts_the_derived_names():
    from ytk_core.propose.naming import op_name, op_of

    dw = {"k": [3, 3], "stride": [1, 1], "dilation": [1, 1], "C": 256, "Cout": 256, "spatial": [68, 120]}
    pw = {"k": [1, 1], "stride": [1, 1], "C": 16, "Cout": 64}
    gw = {"k": [1, 1], "stride": [1, 1], "C": 384, "Cout": 384, "groups": 24}
    cases = [("depthwise_conv", "ConvNormAct", dw), ("conv", "ConvNormAct", pw), ("grouped_conv", "Conv2d", gw),
             ("gemm", "Linear", {"K": 64, "N": 32}), ("attention", "LiteMLA", {"C": 384}),
             ("depthwise_conv", "ConvNormAct", {**dw, "dilation": [2, 2]}),
             ("depthwise_conv", "ConvNormAct", {**dw, "Cout": 512})]
    for kind, cls, sig in cases:
        op = op_name(kind, cls, sig)
        assert op_of(family_name(kind, cls, sig)) == op_of(remainder_name(kind, cls, sig)) == op, (kind, op)
    assert op_of("DwConv3x3s1C256H68W120") == op_of("DwConv3x3s1C256_2") == "DwConv3x3s1"  # unique()'s suffixes
    assert op_of("MyKernel") == "MyKernel"


def test_a_proposal_and_a_roofline_row_of_one_label_show_their_sizes():
    """A depthwise family proposed at 32x48 and one of the same op and channels at 16x24 left out as at roofline
    both read "depthwise 3x3 s1  (C=32)", in two tables that say opposite things."""
    from ytk_core.propose.proposals import _apart_from_roofline

    worth = group_families([_dw("b1.dw", 32, 0.006, hw=32), _dw("b2.dw", 32, 0.005, s=2, hw=32)])
    roof = group_families([_dw("b3.dw", 32, 0.004, hw=16)])
    labels, roof_labels = _apart_from_roofline(worth, [f.label for f in worth], roof)
    assert labels == ["depthwise 3x3 s1  (C=32)  32x32", "depthwise 3x3 s2  (C=32)"]
    assert roof_labels == {id(roof[0]): "depthwise 3x3 s1  (C=32)  16x16"}


def test_the_ops_that_tell_families_apart_are_named_as_activations() -> None:
    """A new user read 'Conv1x1s1BatchNormalizationMulSigmoidDyn': the ONNX spelling of a SiLU, and a BatchNorm
    the exporter left unfolded in a module called twice. Plugin names and labels use words."""
    from ytk_core.propose.naming import tag_words

    assert tag_words(("Mul", "Sigmoid")) == ["Silu"]
    assert tag_words(("BatchNormalization", "Mul", "Sigmoid")) == ["Bn", "Silu"]
    assert tag_words(("Add", "Div", "Erf", "Mul")) == ["Gelu"]
    assert tag_words(("HardSigmoid", "Mul")) == ["HardSwish"]
    assert tag_words(("Clip",)) == ["Relu6"] and tag_words(("Relu",)) == ["Relu"]
    assert tag_words(("Sigmoid",)) == ["Sigmoid"]  # a gate alone stays what it is


def test_refusals_differing_only_in_a_regions_numbers_are_one_reason() -> None:
    """The autoloop's note listed 'a dense 3x3 conv (input channels 64, ...)', '... (input channels 3, ...)' and
    '... (input channels 96, ...)' as three reasons and left two more unnamed."""
    from ytk_core.propose.models import RealSupport
    from ytk_core.propose.report import real_support_line

    refuses = {f"Conv{c}": f"a dense 3x3 conv (input channels {c}, weight [64, {c}, 3, 3]): templates cover "
               "depthwise kxk and 1x1 convs" for c in (3, 32, 64, 96)}
    refuses["Odd"] = "channels 64 -> 20: templates need multiples of 8 (16-byte fp16 vectors)"
    line = real_support_line(RealSupport(chain="templates", refuses=refuses), [*refuses, "Dw"], "proposals")
    assert "a dense 3x3 conv: templates cover depthwise kxk and 1x1 convs (4: Conv3, Conv32, Conv64, +1 more)" in line
    assert "channels 64 -> 20: templates need multiples of 8 (1: Odd)" in line and "other reason" not in line
