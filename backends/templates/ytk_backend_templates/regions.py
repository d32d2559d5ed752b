"""The region kinds the templates generator knows, as plain data (no torch).

A region is what recognition concluded about a carved ``.pt2``; every emitter, contract and
harness decision is made from it. ``sites`` keeps the concrete logical (NCHW) input shapes of each
site, so kernels are scored on exactly the shapes the engine will run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Upper bound of |f'(x)| per activation: scales the error budget from pre-activation to output.
ACT_LIPSCHITZ = {"none": 1.0, "relu": 1.0, "relu6": 1.0, "hardswish": 1.5, "silu": 1.1, "gelu": 1.13,
                 "gelu_tanh": 1.13, "sigmoid": 0.25, "hardsigmoid": 1.0 / 6.0, "tanh": 1.0}


class _DepthwiseGeometry:
    """A square k x k depthwise conv with 'same' padding k // 2 at ``stride``: its padding and output size."""

    k: int
    stride: int

    @property
    def pad(self) -> int:
        return self.k // 2

    def out_hw(self, h: int, w: int) -> tuple[int, int]:
        return ((h + 2 * self.pad - self.k) // self.stride + 1, (w + 2 * self.pad - self.k) // self.stride + 1)


@dataclass(frozen=True)
class DwConvRegion(_DepthwiseGeometry):
    """Depthwise k x k convolution (+ bias) + activation, NCHW logical, kHWC8 fp16 in the engine;
    ``residual`` (stride 1): the region's input is added to the activated result (``x + act(dw(x))``,
    EfficientViT-M's ``ResidualDrop``, FastViT's conditional position encoding)."""

    k: int
    stride: int
    act: str
    channels: int | None  # None: channels are a runtime extent (dynamic-remainder plugin)
    has_bias: bool = True
    residual: bool = False
    kind: str = field(default="dwconv", init=False)

    def describe(self) -> str:
        c = f"C{self.channels}" if self.channels else "C dynamic"
        res = " + residual" if self.residual else ""
        return (f"depthwise {self.k}x{self.k} stride {self.stride} {c} + {'bias + ' if self.has_bias else ''}"
                f"{self.act}{res}")


@dataclass(frozen=True)
class LiteMLARegion:
    """ReLU linear attention of EfficientViT's LiteMLA on the joined ``[qkv, agg]`` channels.

    ``joined``: two activation inputs (qkv, agg) that the region concatenates itself; otherwise
    one input that already holds both (the ``@nojoin`` carve).
    """

    dim: int
    eps: float
    joined: bool
    channels: int | None  # channels of one input (3C); None when it varies across sites
    kind: str = field(default="litemla", init=False)

    def describe(self) -> str:
        form = "qkv + agg inputs" if self.joined else "one pre-joined input"
        return f"LiteMLA ReLU linear attention, head dim {self.dim}, eps {self.eps:g}, {form}"


@dataclass(frozen=True)
class Conv1x1Region:
    """Pointwise (1x1, stride 1) convolution (+ bias) + activation, dense or grouped.

    Dense: ``group_in == group_out == 0`` (one group of all channels). Grouped: each group maps
    ``group_in`` input channels to ``group_out`` outputs (EfficientViT's multi-scale aggregation
    is 16 -> 16 per group); the group count is then ``C // group_in`` at run time.
    """

    act: str
    cin: int | None       # None: a runtime extent (dynamic-remainder plugin)
    cout: int | None
    group_in: int = 0
    group_out: int = 0
    has_bias: bool = True
    kind: str = field(default="conv1x1", init=False)

    @property
    def grouped(self) -> bool:
        return self.group_in > 0

    def describe(self) -> str:
        ch = f"C{self.cin}->{self.cout}" if self.cin else "C dynamic"
        form = f"grouped {self.group_in}->{self.group_out} per group" if self.grouped else "dense"
        return f"conv 1x1 stride 1 {form} {ch} + {'bias + ' if self.has_bias else ''}{self.act}"


@dataclass(frozen=True)
class SERegion:
    """Squeeze-excite: ``x * gate(conv2(act(conv1(mean_hw(x)))))`` with both convs 1x1 on the pooled
    ``[N, C, 1, 1]`` vector (EfficientNet, MobileNetV3, RegNetY, MnasNet, torchvision's
    ``SqueezeExcitation``). Inputs: x, then w1 ``[CR, C, 1, 1]`` (+ b1), w2 ``[C, CR, 1, 1]`` (+ b2)."""

    act: str            # between the two convs (relu, silu, ...)
    gate: str           # after the second (sigmoid, hardsigmoid)
    channels: int | None  # C; None: a runtime extent
    reduced: int | None   # CR
    has_bias1: bool = True
    has_bias2: bool = True
    kind: str = field(default="squeeze_excite", init=False)

    def split_params(self, params: "list[Any] | tuple[Any, ...]") -> tuple[Any, Any, Any, Any]:
        """``(w1, b1, w2, b2)`` from the inputs after x, in the node's order (a bias the region lacks: None)."""
        it = iter(params)
        w1 = next(it)
        b1 = next(it) if self.has_bias1 else None
        w2 = next(it)
        b2 = next(it) if self.has_bias2 else None
        return w1, b1, w2, b2

    def describe(self) -> str:
        c = f"C{self.channels}->{self.reduced}->{self.channels}" if self.channels else "C dynamic"
        return f"squeeze-excite {c}: mean, 1x1 + {self.act}, 1x1 + {self.gate} gate, times x"


@dataclass(frozen=True)
class DwConvLNRegion(_DepthwiseGeometry):
    """Depthwise k x k convolution (+ bias), then a LayerNorm over its channels: ConvNeXt's block up to
    its MLP (timm's ``conv_dw`` + ``LayerNorm2d``; with ``conv_mlp=False`` and in EdgeNeXt the norm is
    taken in NHWC and a Linear follows). The program permutes the conv's NCHW result to NHWC,
    normalises the last dim and, ``closed``, permutes back: the output is logical NCHW ``[N, C, H', W']``
    fp16 kHWC8; otherwise (open) it is the NHWC view ``[N, H', W', C]`` fp16 kLINEAR. Both are the same
    bytes (NHWC contiguous), so one kernel writes either. Inputs: x, w0 ``[C, 1, k, k]`` (+ b0 ``[C]``),
    then the norm's weight w1 ``[C]`` and bias b1 ``[C]``."""

    k: int
    stride: int
    eps: float
    channels: int | None  # None: channels are a runtime extent
    has_bias: bool = True  # the conv's bias (the norm always has its weight and bias)
    closed: bool = True
    kind: str = field(default="dwconv_ln", init=False)

    def split_params(self, params: "list[Any] | tuple[Any, ...]") -> tuple[Any, Any, Any, Any]:
        """``(w0, b0, w1, b1)`` from the inputs after x, in the node's order (no conv bias: b0 None)."""
        it = iter(params)
        w0 = next(it)
        b0 = next(it) if self.has_bias else None
        return w0, b0, next(it), next(it)

    def describe(self) -> str:
        c = f"C{self.channels}" if self.channels else "C dynamic"
        form = "NCHW out (LayerNorm2d)" if self.closed else "NHWC out"
        return (f"depthwise {self.k}x{self.k} stride {self.stride} {c} + {'bias + ' if self.has_bias else ''}"
                f"LayerNorm over the channels (eps {self.eps:g}), {form}")


Region = DwConvRegion | LiteMLARegion | Conv1x1Region | SERegion | DwConvLNRegion


def is_weight(region: "Region", index: int) -> bool:
    """Whether input ``index`` of the region is a lifted fp32 weight/bias (not an fp16 activation)."""
    return not isinstance(region, LiteMLARegion) and index > 0


@dataclass(frozen=True)
class SiteShape:
    """Concrete logical input shapes of one site (all inputs, weights included)."""

    inputs: tuple[tuple[int, ...], ...]
    count: int = 1  # how many sites of the plugin share exactly these shapes
