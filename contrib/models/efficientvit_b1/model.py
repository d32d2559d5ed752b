"""EfficientViT-B1 backbone (Cai et al., "EfficientViT: Lightweight Multi-Scale Attention for
High-Resolution Dense Prediction"), written for this project: the spec's worked example.

Batch 4 at 1088x1920 by default; ``YTK_EXAMPLE_SIZE=BxHxW`` picks another size (tests use tiny
ones). Weights and BatchNorm statistics are random but seeded, so every run is identical.

Module paths follow the spec: ``m.stages.N.blocks.M.context_module.main`` is a LiteMLA whose
``aggreg.0.0`` is the depthwise 5x5; ``...local_module.main.depth_conv`` is a ConvNormAct depthwise
3x3; the stem's residual DSConv is ``m.input_stem.res0``. Activations are Hardswish.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

WIDTHS = (16, 32, 64, 128, 256)
DEPTHS = (1, 2, 3, 3, 4)
HEAD_DIM = 16
EXPAND = 4
DEFAULT_SIZE = (4, 1088, 1920)


class ConvNormAct(nn.Module):
    """Conv2d, then optional BatchNorm, then optional Hardswish."""

    def __init__(self, cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1,
                 bias: bool = False, norm: bool = True, act: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, padding=k // 2, groups=groups, bias=bias)
        self.norm = nn.BatchNorm2d(cout) if norm else None
        self.act = nn.Hardswish() if act else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.norm is not None:
            x = self.norm(x)
        if self.act is not None:
            x = self.act(x)
        return x


class DSConv(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.depth_conv = ConvNormAct(cin, cin, 3, groups=cin)
        self.point_conv = ConvNormAct(cin, cout, 1, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.point_conv(self.depth_conv(x))


class MBConv(nn.Module):
    """Inverted bottleneck. ``fewer_norm`` (stages 3-4): biased convs, norm only on the projection."""

    def __init__(self, cin: int, cout: int, stride: int = 1, fewer_norm: bool = False) -> None:
        super().__init__()
        mid = cin * EXPAND
        fn = fewer_norm
        self.inverted_conv = ConvNormAct(cin, mid, 1, bias=fn, norm=not fn)
        self.depth_conv = ConvNormAct(mid, mid, 3, stride, groups=mid, bias=fn, norm=not fn)
        self.point_conv = ConvNormAct(mid, cout, 1, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.point_conv(self.depth_conv(self.inverted_conv(x)))


class LiteMLA(nn.Module):
    """Multi-scale ReLU linear attention."""

    def __init__(self, channels: int, dim: int = HEAD_DIM, eps: float = 1.0e-15) -> None:
        super().__init__()
        heads = channels // dim
        total = heads * dim
        self.dim, self.eps = dim, eps
        self.qkv = ConvNormAct(channels, 3 * total, 1, norm=False, act=False)
        self.aggreg = nn.ModuleList([nn.Sequential(
            nn.Conv2d(3 * total, 3 * total, 5, padding=2, groups=3 * total, bias=False),
            nn.Conv2d(3 * total, 3 * total, 1, groups=3 * heads, bias=False),
        )])
        self.proj = ConvNormAct(total * 2, channels, 1, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(x)
        multi = [qkv] + [op(qkv) for op in self.aggreg]
        qkv = torch.cat(multi, dim=1)
        b, _, h, w = qkv.shape
        qkv = torch.reshape(qkv, (b, -1, 3 * self.dim, h * w)).transpose(-1, -2)
        q, k, v = qkv[..., : self.dim], qkv[..., self.dim: 2 * self.dim], qkv[..., 2 * self.dim:]
        q, k = F.relu(q), F.relu(k)
        v = F.pad(v, (0, 1), mode="constant", value=1.0)
        kv = torch.matmul(k.transpose(-1, -2), v)
        out = torch.matmul(q, kv)
        out = out[..., :-1] / (out[..., -1:] + self.eps)
        out = torch.reshape(out.transpose(-1, -2), (b, -1, h, w))
        return self.proj(out)


class ResidualBlock(nn.Module):
    def __init__(self, main: nn.Module, residual: bool) -> None:
        super().__init__()
        self.main = main
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.main(x)
        return y + x if self.residual else y


class EfficientViTBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.context_module = ResidualBlock(LiteMLA(channels), residual=True)
        self.local_module = ResidualBlock(MBConv(channels, channels, fewer_norm=True), residual=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.local_module(self.context_module(x))


class Stage(nn.Module):
    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class InputStem(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.conv = ConvNormAct(3, width, 3, stride=2)
        for i in range(depth):
            self.add_module(f"res{i}", ResidualBlock(DSConv(width, width), residual=True))
        self.depth = depth

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        for i in range(self.depth):
            x = getattr(self, f"res{i}")(x)
        return x


class EfficientViTBackbone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_stem = InputStem(WIDTHS[0], DEPTHS[0])
        stages: list[nn.Module] = []
        cin = WIDTHS[0]
        for w, d in zip(WIDTHS[1:3], DEPTHS[1:3]):
            blocks: list[nn.Module] = []
            for i in range(d):
                stride = 2 if i == 0 else 1
                blocks.append(ResidualBlock(MBConv(cin, w, stride), residual=stride == 1))
                cin = w
            stages.append(Stage(blocks))
        for w, d in zip(WIDTHS[3:], DEPTHS[3:]):
            blocks = [ResidualBlock(MBConv(cin, w, 2, fewer_norm=True), residual=False)]
            blocks += [EfficientViTBlock(w) for _ in range(d)]
            cin = w
            stages.append(Stage(blocks))
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.input_stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        return feats[1], feats[2], feats[3]


def _randomise_norms(model: nn.Module, gen: torch.Generator) -> None:
    """Give BatchNorm layers non-trivial statistics so folding and numerics are really exercised."""
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            c = mod.num_features
            with torch.no_grad():
                mod.weight.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)
                mod.bias.copy_(torch.randn(c, generator=gen) * 0.1)
                mod.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                mod.running_var.copy_(torch.rand(c, generator=gen) * 0.5 + 0.75)


class Model(nn.Module):
    """The worked example: ``self.m`` is the backbone, so module paths read ``m.stages...``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.m = EfficientViTBackbone()
        _randomise_norms(self.m, torch.Generator().manual_seed(1))
        self.eval()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.m(x)


def input_size() -> tuple[int, int, int]:
    env = os.environ.get("YTK_EXAMPLE_SIZE")
    if not env:
        return DEFAULT_SIZE
    try:
        b, h, w = (int(v) for v in env.lower().split("x"))
    except ValueError:
        raise ValueError(f"YTK_EXAMPLE_SIZE={env!r}: expected BxHxW, e.g. 1x64x96") from None
    if h % 32 or w % 32:
        raise ValueError(f"YTK_EXAMPLE_SIZE={env!r}: H and W must be multiples of 32 (the backbone's stride)")
    return b, h, w


def get_fwd_args() -> tuple[torch.Tensor]:
    b, h, w = input_size()
    gen = torch.Generator().manual_seed(2)
    return (torch.randn(b, 3, h, w, generator=gen),)
