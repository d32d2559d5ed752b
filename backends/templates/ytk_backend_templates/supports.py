"""The templates' answer to ``supports()``: the recogniser's own rules, without a GPU.

After the carve the answer is the recogniser run on the region's canonical ``.pt2`` (exactly what a
job would do first). Before it, only propose's sketch is known: the geometry decides (square
1/3/5/7 depthwise at stride 1 or 2 with 'same' padding, 1x1 convs dense or grouped, LiteMLA-style
attention, squeeze-excite modules, a depthwise conv with the LayerNorm over its channels that follows it),
and the pointwise ops around the conv are judged by what the carve's canonical pass turns them into, so that
answer is marked not certain.
"""

from __future__ import annotations

from ytk_hookspecs.errors import UnsupportedRegion
from ytk_hookspecs.models import RegionSketch, SupportAnswer, SupportRequest

#: why a convolution of another rank is refused (propose's sketch and the carved region say the same)
ONLY_2D = "templates cover 2-D convolutions (NCHW) only"

NAME = "templates"
#: ONNX ops that, around a conv, spell one activation the templates fuse (the carve respells them).
_ACTIVATION_ONNX = {"Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Mul", "Add", "Div", "Sub", "Gelu",
                    "Erf", "Tanh", "Pow", "BatchNormalization", "Identity", "Cast"}
#: ONNX ops of a LayerNorm over a depthwise conv's channels (ConvNeXt, timm's LayerNorm2d: Transpose to
#: NHWC, LayerNormalization over the last axis, Transpose back unless a Linear follows in NHWC)
_CHANNEL_NORM_ONNX = {"Transpose", "LayerNormalization"}


def supports(request: SupportRequest) -> SupportAnswer:
    if request.reference is not None and request.reference.is_file():
        return _from_program(request)
    if request.sketch is not None:
        return _from_sketch(request.sketch)
    return SupportAnswer(supported=True, certain=False, backend=NAME, why="nothing to judge before the carve")


def _from_program(request: SupportRequest) -> SupportAnswer:
    from .recognise import load_graph, recognise

    try:
        region = recognise(load_graph(request.reference), request.candidate)  # type: ignore[arg-type]
    except UnsupportedRegion as e:
        return SupportAnswer(supported=False, backend=NAME, why=str(e))
    if not _has_variants(region, request.arch):
        return SupportAnswer(supported=False, backend=NAME, kind=region.kind,
                             why=f"recognised as {_describe(region)}, but the templates' kernel space has no "
                                 "variant for it")
    return SupportAnswer(supported=True, backend=NAME, kind=region.kind, why=f"recognised as {_describe(region)}")


def _has_variants(region: object, arch: str | None) -> bool:
    """Whether the job would have anything to build: the variant space at the target's SM (or, not
    knowing it, at any SM the templates build for)."""
    from .variants import region_variants

    sm = _sm(arch)
    return any(region_variants(region, None, sm=s) for s in ([sm] if sm else [0, 80, 87, 90]))  # type: ignore[arg-type]


def _sm(arch: str | None) -> int:
    from ytk_hookspecs.models import ArchSpec, ArchSpecError

    try:
        return ArchSpec.parse(arch).sm if arch else 0
    except ArchSpecError:
        return 0


def _describe(region: object) -> str:
    # a residual is named where there is one (the form every other region's answer keeps)
    # a None extent (channels, cin / cout, a squeeze-excite's reduced width) is a runtime one: the kernel takes
    # it as an argument; said, not left out
    fields = {k: ("runtime" if v is None else v) for k, v in vars(region).items()
              if k != "kind" and (k != "residual" or v)}
    return f"{getattr(region, 'kind', type(region).__name__)}({', '.join(f'{k}={v}' for k, v in fields.items())})"


def _from_sketch(s: RegionSketch) -> SupportAnswer:
    from .recognise import kHWC8_refusal, not_depthwise_refusal, pointwise_channels_refusal

    def no(why: str) -> SupportAnswer:
        return SupportAnswer(supported=False, backend=NAME, why=why)

    extra = sorted(op for op in s.onnx_ops if op not in _ACTIVATION_ONNX | {"Conv"})
    if "ConvTranspose" in s.onnx_ops:
        return no("a transposed conv: templates build forward convolutions only")
    if s.kind in ("depthwise_conv", "conv", "grouped_conv") and s.kernel and len(s.kernel) != 2:
        return no(f"a {len(s.kernel)}-D convolution (kernel {'x'.join(map(str, s.kernel))}): {ONLY_2D}")
    if s.kind == "depthwise_conv":
        k = s.kernel
        if len(k) != 2 or k[0] != k[1] or k[0] not in (1, 3, 5, 7):
            return no(f"kernel {'x'.join(map(str, k))}: templates cover square 1x1, 3x3, 5x5 and 7x7 depthwise")
        if s.stride and (s.stride[0] != s.stride[-1] or s.stride[0] not in (1, 2)):
            return no(f"stride {'x'.join(map(str, s.stride))}: templates cover stride 1 and 2")
        if s.dilation and any(d != 1 for d in s.dilation):
            return no("dilated depthwise conv: templates cover dilation 1")
        if s.pads and any(p != k[0] // 2 for p in s.pads):
            return no(f"padding {s.pads}: templates cover 'same' padding k//2 (the carve moves a symmetric pad "
                      "into the conv, an asymmetric one stays)")
        for c, co in _pairs(s):  # a channel multiplier (FastViT's [2C, 1, k, k]) is no depthwise template's
            if isinstance(c, int) and isinstance(co, int) and co != c:
                return no(not_depthwise_refusal(s.groups if isinstance(s.groups, int) else c, c, [co, 1, *k]))
        odd = _odd_channels(s)
        if odd:
            return no(kHWC8_refusal(odd[0]))
        if s.onnx_ops.get("LayerNormalization"):
            return _channel_norm_sketch(s)
    elif s.kind in ("conv", "grouped_conv"):
        if s.kernel and any(d != 1 for d in s.kernel):
            return no(f"a dense {'x'.join(map(str, s.kernel))} conv: templates cover depthwise kxk and 1x1 convs")
        if s.stride and any(d != 1 for d in s.stride):
            return no("a strided 1x1 conv: templates cover stride 1")
        # the recogniser's rule; the groups of a dynamic remainder's members are not known before the carve
        groups = s.groups if isinstance(s.groups, int) and len(_pairs(s)) == 1 else 1
        for c, co in _pairs(s):
            why = pointwise_channels_refusal(c, co, groups) if isinstance(c, int) and isinstance(co, int) else None
            if why:
                return no(why)
    elif s.kind == "squeeze_excite":
        odd = _odd_channels(s)
        if odd:
            return no(kHWC8_refusal(odd[0]))
        return SupportAnswer(supported=True, certain=False, backend=NAME,
                             why="squeeze-excite: the carved program decides the activation, the gate (sigmoid, "
                                 "hardsigmoid) and that it gates the module's input")
    elif s.kind == "attention":
        if "Softmax" in s.onnx_ops:
            return no("softmax attention: templates cover ReLU linear attention (LiteMLA) only")
        return SupportAnswer(supported=True, certain=False, backend=NAME,
                             why="attention without softmax: LiteMLA's template decides on the carved program")
    else:
        return no(f"no template for a {s.kind} region")
    if extra:
        return no(f"ops {', '.join(extra)} in the region: templates fuse one activation after the conv")
    why = f"{s.kind} geometry is covered; the carved program decides the activation"
    if s.kind == "depthwise_conv" and s.onnx_ops.get("Add"):
        why += (", and whether its Add adds the conv's own input (a residual, fused at stride 1) or something "
                "else (refused)")
    return SupportAnswer(supported=True, certain=False, backend=NAME, why=why)


def _pairs(s: RegionSketch) -> list[tuple[int | str | None, int | str | None]]:
    """Every shape family's (input, output) channels: a dynamic remainder's members too."""
    return list(s.channels) or [(s.channels_in, s.channels_out)]


def _odd_channels(s: RegionSketch) -> list[int]:
    """The input channel counts, over the region's shape families, that are not a multiple of 8."""
    return [c for c, _ in _pairs(s) if isinstance(c, int) and c % 8]


def _channel_norm_sketch(s: RegionSketch) -> SupportAnswer:
    """A depthwise conv sketch holding a LayerNormalization: the dwconv_ln template's, when the norm can be
    over the channels (a Transpose to NHWC before it) and nothing else is in the region."""
    def no(why: str) -> SupportAnswer:
        return SupportAnswer(supported=False, backend=NAME, why=why)

    ops = s.onnx_ops
    if not ops.get("Transpose"):
        return no("a LayerNormalization of the conv's NCHW output with no Transpose normalises its last axis (W), "
                  "not its channels: templates fuse a LayerNorm over the channels (ConvNeXt, timm's LayerNorm2d)")
    if ops.get("LayerNormalization", 0) > 1 or ops.get("Transpose", 0) > 2:
        return no(f"{ops.get('LayerNormalization')} LayerNormalization and {ops.get('Transpose')} Transpose ops: "
                  "templates fuse one LayerNorm over the conv's channels (a Transpose to NHWC, and one back)")
    other = sorted(op for op in ops if op not in _CHANNEL_NORM_ONNX | {"Conv", "Identity", "Cast"})
    if other:
        return no(f"ops {', '.join(other)} with the conv's LayerNorm: templates fuse a depthwise conv and the "
                  "LayerNorm over its channels, nothing between or after them")
    return SupportAnswer(supported=True, certain=False, backend=NAME,
                         why="depthwise_conv + LayerNorm geometry is covered; the carved program decides that the "
                             "norm is over the conv's channels (permute to NHWC, layer_norm over [C]) with nothing "
                             "between them")
