"""A generator's ``supports()``: asking a generator before paying for a carve or a job."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.helpers import prepare, ytk_inproc
from ytk_hookspecs.models import CandidatesFile, RegionSketch, SupportAnswer, SupportRequest

ZOO = REPO / "tests" / "data" / "zoo_style_model.py"


def _templates(request: SupportRequest) -> SupportAnswer:
    from ytk_backend_templates.supports import supports

    return supports(request)


@pytest.mark.parametrize("sketch, supported", [
    (RegionSketch(kind="depthwise_conv", kernel=[3, 3], stride=[2, 2], pads=[1, 1, 1, 1], onnx_ops={"Conv": 1}), True),
    (RegionSketch(kind="depthwise_conv", kernel=[7, 7], stride=[1, 1], pads=[3, 3, 3, 3],
                  onnx_ops={"Conv": 1, "HardSwish": 1}), True),
    (RegionSketch(kind="depthwise_conv", kernel=[9, 9], stride=[1, 1], onnx_ops={"Conv": 1}), False),
    (RegionSketch(kind="depthwise_conv", kernel=[3, 3], stride=[3, 3], onnx_ops={"Conv": 1}), False),
    (RegionSketch(kind="depthwise_conv", kernel=[3, 3], stride=[1, 1], onnx_ops={"Conv": 1, "LayerNormalization": 1}),
     False),
    (RegionSketch(kind="conv", kernel=[1, 1], stride=[1, 1], onnx_ops={"Conv": 1, "Relu": 1}), True),
    (RegionSketch(kind="conv", kernel=[3, 3], stride=[2, 2], onnx_ops={"Conv": 1}), False),
    (RegionSketch(kind="gemm", onnx_ops={"Gemm": 1}), False),
    (RegionSketch(kind="attention", around=True, onnx_ops={"MatMul": 2, "Softmax": 1}), False),
    # 1-D convs: "kernel 5: templates cover square 3x3 ..." (depthwise) and "likely" (pointwise) were wrong
    (RegionSketch(kind="depthwise_conv", kernel=[5], stride=[1], onnx_ops={"Conv": 1}), False),
    (RegionSketch(kind="conv", kernel=[1], stride=[1], onnx_ops={"Conv": 1, "Relu": 1}), False),
])
def test_templates_answer_from_the_sketch(sketch, supported):
    ans = _templates(SupportRequest(sketch=sketch))
    assert ans.supported is supported and ans.backend == "templates" and ans.why
    if len(sketch.kernel) == 1:
        assert "1-D convolution" in ans.why and ans.certain
    if supported:
        assert not ans.certain  # the carved program decides


@pytest.mark.slow
def test_after_the_carve_the_answer_is_the_recogniser(tmp_path):
    r = prepare(ZOO, tmp_path, ["yasp::Dw=Conv2d@where=*.conv_dw@epilogue", "yasp::SE=SqueezeExcite",
                                "yasp::Stem=Conv2d@where=stem"], size="1x16x16")
    assert r.code == 0, r.stderr
    cands = {c.name: c for c in CandidatesFile.read(tmp_path / "candidates.json").candidates}
    dw = _templates(SupportRequest(candidate=cands["Dw"], reference=tmp_path / cands["Dw"].files.pt2))
    assert dw.supported and dw.certain and dw.kind == "dwconv" and "hardswish" in dw.why
    se = _templates(SupportRequest(candidate=cands["SE"], reference=tmp_path / cands["SE"].files.pt2))
    assert se.supported and se.certain and se.kind == "squeeze_excite" and "gate=sigmoid" in se.why
    stem = _templates(SupportRequest(candidate=cands["Stem"], reference=tmp_path / cands["Stem"].files.pt2))
    assert not stem.supported and stem.certain and stem.why  # a dense 3x3 conv
    # the CLI's dry run says the same, exits 3 on a refusal, and starts no job
    ok = ytk_inproc("kernelgen", "compile", "-r", tmp_path / cands["Dw"].files.pt2, "-g", "H200", "--config",
                    "deployment_target=tensorrt", "-o", tmp_path / "Dw.module_source.py", "--dry-run",
                    "--kernelgen", "templates")
    assert ok.code == 0 and "would generate (dwconv)" in ok.stdout, ok.stderr
    no = ytk_inproc("kernelgen", "compile", "-r", tmp_path / cands["Stem"].files.pt2, "-g", "H200", "--config",
                    "deployment_target=tensorrt", "-o", tmp_path / "Stem.module_source.py", "--dry-run",
                    "--kernelgen", "templates")
    assert no.code == 3 and "would refuse" in no.stdout and "Traceback" not in no.stderr
    assert "would refuse" not in no.stderr and "error:" not in no.stderr  # said once, not again as an error
    assert not (tmp_path / "Dw.module_source.py").exists() and not (tmp_path / "Stem.module_source.py").exists()


@pytest.mark.parametrize("answer, why", [
    (RuntimeError("bug in a backend"), "buggy failed to answer: RuntimeError: bug in a backend"),
    (None, "buggy answered a NoneType, not a SupportAnswer"),
])
def test_a_backend_that_raises_or_answers_nothing_is_a_refusal(answer, why):
    from tests.helpers import backend_object, backend_plugin
    from ytk_core.plugins import BackendManager
    from ytk_core.runtime import reset_runtime, runtime
    from ytk_core.stages import supports as mod

    def supports(request, ctx):  # type: ignore[no-untyped-def]
        if isinstance(answer, Exception):
            raise answer
        return answer

    buggy = backend_object("buggy", ["kernelgen"], supports=supports, submit=lambda r, c: None,
                           fetch=lambda j, o, c: None)
    reset_runtime()
    runtime()._mgr = BackendManager(autoload=False, extra_plugins={"buggy": backend_plugin(buggy)})
    try:
        ans = mod.check_sketch(RegionSketch(kind="conv"), "buggy")
    finally:
        reset_runtime()
    assert not ans.supported and not ans.certain and ans.why == why and ans.backend == "buggy"


def test_templates_refuse_what_their_kernel_layout_cannot_carry():
    """C72 depthwise has no constant-C tile but the runtime-C kernels take it; C30 cannot be kHWC8 at
    all: a job would fail after the carve (or the engine compile would), so the answer says so before."""
    ok = [_templates(SupportRequest(sketch=RegionSketch(kind="depthwise_conv", kernel=[5, 5], stride=[1, 1],
                                                        channels_in=c, onnx_ops={"Conv": 1}))) for c in (96, 72)]
    no = _templates(SupportRequest(sketch=RegionSketch(kind="depthwise_conv", kernel=[5, 5], stride=[1, 1],
                                                       channels_in=30, onnx_ops={"Conv": 1})))
    assert all(a.supported for a in ok) and not no.supported
    assert "30 channels" in no.why and "multiple of 8" in no.why


def test_templates_check_every_shape_family_s_channels_before_the_carve():
    """A new user's 1x1 convs to 5 and 4 channels (detection heads) were 'likely' in propose, then refused at
    --dry-run with "channels 32 -> 5: templates need multiples of 8": propose's answer never looked at a 1x1
    conv's channels, nor at a dynamic remainder's members (whose channels_in is None)."""
    def ask(**kw):  # type: ignore[no-untyped-def]
        return _templates(SupportRequest(sketch=RegionSketch(kind="conv", kernel=[1, 1], stride=[1, 1],
                                                             onnx_ops={"Conv": 1}, **kw)))

    closed = ask(channels_in=32, channels_out=5, channels=[(32, 5)])
    assert not closed.supported
    assert closed.why == "channels 32 -> 5: templates need multiples of 8 (16-byte fp16 vectors)"
    dyn = ask(channels=[(96, 32), (32, 4), (64, 16)])
    assert not dyn.supported and "channels 32 -> 4" in dyn.why
    assert ask(channels=[(96, 32), (64, 16)]).supported
    grouped = _templates(SupportRequest(sketch=RegionSketch(kind="grouped_conv", kernel=[1, 1], stride=[1, 1],
                                                            groups=4, channels_in=48, channels_out=48,
                                                            onnx_ops={"Conv": 1})))
    assert not grouped.supported and grouped.why == "12 -> 12 channels per group: templates need multiples of 8"
    dw = _templates(SupportRequest(sketch=RegionSketch(kind="depthwise_conv", kernel=[3, 3], stride=[1, 1],
                                                       onnx_ops={"Conv": 1}, channels=[(64, 64), (42, 42)])))
    assert not dw.supported and "42 channels" in dw.why


def test_a_depthwise_conv_with_a_channel_multiplier_is_refused_before_the_carve_as_after():
    """A new user's nn.Conv2d(32, 64, 3, stride=2, groups=32) (FastViT's downsample too) was 'likely' in propose
    and counted among what the templates would take, then refused for certain at --dry-run: "a grouped
    (groups=32) 3x3 conv ... templates cover depthwise kxk and 1x1 convs". One rule and one wording now."""
    from ytk_backend_templates.recognise import not_depthwise_refusal

    mult = _templates(SupportRequest(sketch=RegionSketch(kind="depthwise_conv", kernel=[3, 3], stride=[2, 2],
                                                         pads=[1, 1, 1, 1], groups=32, channels_in=32,
                                                         channels_out=64, channels=[(32, 64)],
                                                         onnx_ops={"Conv": 1})))
    assert not mult.supported
    assert mult.why == not_depthwise_refusal(32, 32, [64, 1, 3, 3]) == (
        "a grouped (groups=32) 3x3 conv (input channels 32, weight [64, 1, 3, 3]): templates cover depthwise kxk "
        "and 1x1 convs")


def test_dry_run_needs_no_output_and_an_unanswered_question_is_not_a_refusal(monkeypatch, tmp_path):
    """--dry-run writes nothing, so it needs no -o; a generator that fails to answer is reported as such
    (not as "would refuse ... not certain"), exit 3; compile without --dry-run still needs -o."""
    from ytk_hookspecs.models import SupportAnswer

    from tests.helpers import ytk_inproc

    pt2 = tmp_path / "R.pt2"
    pt2.write_bytes(b"not read")
    monkeypatch.setattr("ytk_core.stages.kernelgen.run_kernelgen_dry_run", lambda *a, **k: SupportAnswer(
        supported=False, certain=False, backend="gen", why="gen failed to answer: ImportError: boom"))
    r = ytk_inproc("kernelgen", "compile", "-r", pt2, "-g", "H200", "--dry-run")
    assert r.code == 3, r.stderr
    assert "gen: cannot say before a job: gen failed to answer" in r.stdout and "would refuse" not in r.stdout
    r = ytk_inproc("kernelgen", "compile", "-r", pt2, "-g", "H200", "--config", "deployment_target=tensorrt")
    assert r.code == 2 and "needs -o/--output" in r.stderr


def test_unknown_config_keys_are_refused_with_the_known_ones(tmp_path):
    """A misspelt --config key would be silently ignored by the generator: it is refused before anything
    runs, naming the keys ytk and the selected generator read; a key the generator declares is taken."""
    from tests.helpers import ytk_inproc

    import zipfile

    pt2 = tmp_path / "R.pt2"
    with zipfile.ZipFile(pt2, "w") as z:  # an archive of the .pt2 format (not read: the keys are refused first)
        z.writestr("R/archive_format", "pt2")
    base = ["kernelgen", "compile", "-r", pt2, "-g", "Orin", "--config", "deployment_target=tensorrt", "--dry-run",
            "--kernelgen", "mock"]
    r = ytk_inproc(*base, "--config", "mock_bandwith_fraction=0.5")
    assert r.code == 2, r.stderr
    assert "--config mock_bandwith_fraction: not a key kernel generator 'mock' or ytk reads" in r.stderr
    assert "mock_bandwidth_fraction (" in r.stderr and "reoptimize (" in r.stderr
    r = ytk_inproc(*base, "--config", "mock_bandwidth_fraction=0.5")
    assert "not a key" not in r.stderr
    # the dry run checks its command line as the job does: -g and -a (a new user's -g Foo passed --dry-run, then
    # the job refused it), and a misspelt deployment_target is named (the required key was said to be missing)
    r = ytk_inproc(*[a if a != "Orin" else "Foo" for a in base])
    assert r.code == 2 and "-g/--gpu 'Foo' is no GPU ytk knows" in r.stderr, r.stderr
    r = ytk_inproc(*[a if a != "Orin" else "H100" for a in base], "-a", "arm64-sm87-dos6010-cu114-trt86")
    assert r.code == 2 and "is an sm_90 GPU but -a" in r.stderr, r.stderr
    r = ytk_inproc("kernelgen", "compile", "-r", pt2, "-g", "Orin", "--config", "deployment_targt=tensorrt",
                   "--dry-run")
    assert r.code == 2 and "(--config deployment_targt=tensorrt: did you mean deployment_target?)" in r.stderr


def test_a_depthwise_sketch_with_an_add_says_the_carve_decides_whether_it_is_a_residual():
    """x + dw(x) is fused (a residual of the conv's own input); any other Add is not: before the carve the
    answer says which question is open, not only the activation's."""
    sketch = RegionSketch(kind="depthwise_conv", kernel=[3, 3], stride=[1, 1], pads=[1, 1, 1, 1], channels_in=64,
                          onnx_ops={"Conv": 1, "Add": 1})
    ans = _templates(SupportRequest(sketch=sketch))
    assert ans.supported and not ans.certain and "Add adds the conv's own input" in ans.why
    plain = _templates(SupportRequest(sketch=sketch.model_copy(update={"onnx_ops": {"Conv": 1, "Relu": 1}})))
    assert "Add" not in plain.why


def test_a_runtime_channel_count_is_said_not_left_out():
    """The dry run described a C=24 depthwise region as dwconv(k=3, stride=1, act=relu, has_bias=True): its
    kernel takes the channels at run time, and the answer now says so instead of dropping the field."""
    from ytk_backend_templates.regions import DwConvRegion
    from ytk_backend_templates.supports import _describe

    assert _describe(DwConvRegion(k=3, stride=1, act="relu", channels=None)) == \
        "dwconv(k=3, stride=1, act=relu, channels=runtime, has_bias=True)"
    assert "channels=64" in _describe(DwConvRegion(k=3, stride=2, act="hardswish", channels=64))
    from ytk_backend_templates.regions import Conv1x1Region

    assert "cin=runtime, cout=runtime" in _describe(Conv1x1Region(act="relu", cin=None, cout=None))
