"""A MobileNetV3-style CNN (Howard et al., "Searching for MobileNetV3"), written for this project.

Inverted residuals with depthwise 3x3/5x5 convs at stride 1 and 2, squeeze-excite, ReLU and
Hardswish. Batch 2 at 512x512 by default; ``YTK_EXAMPLE_SIZE=BxHxW`` picks another size.
Random weights, seeded.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_SIZE = (2, 512, 512)
# (kernel, expanded channels, out channels, squeeze-excite, activation, stride)
BLOCKS = [
    (3, 16, 16, True, "relu", 2),
    (3, 72, 24, False, "relu", 2),
    (3, 88, 24, False, "relu", 1),
    (5, 96, 40, True, "hswish", 2),
    (5, 240, 40, True, "hswish", 1),
    (5, 240, 40, True, "hswish", 1),
    (5, 120, 48, True, "hswish", 1),
    (5, 144, 48, True, "hswish", 1),
    (5, 288, 96, True, "hswish", 2),
    (5, 576, 96, True, "hswish", 1),
]


def _act(name: str) -> nn.Module:
    return nn.ReLU() if name == "relu" else nn.Hardswish()


class ConvBNAct(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
                 act: str | None = "hswish") -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = _act(act) if act else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.conv(x))
        return self.act(x) if self.act is not None else x


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        squeezed = max(8, (channels // 4 + 7) // 8 * 8)
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))
        return x * s


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, act: str, stride: int) -> None:
        super().__init__()
        self.use_res = stride == 1 and cin == cout
        self.expand = ConvBNAct(cin, exp, 1, act=act) if exp != cin else None
        self.dw = ConvBNAct(exp, exp, k, stride, groups=exp, act=act)
        self.se = SqueezeExcite(exp) if se else None
        self.project = ConvBNAct(exp, cout, 1, act=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.expand(x) if self.expand is not None else x
        y = self.dw(y)
        if self.se is not None:
            y = self.se(y)
        y = self.project(y)
        return x + y if self.use_res else y


class MobileNetV3(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = ConvBNAct(3, 16, 3, 2)
        blocks = []
        cin = 16
        for k, exp, cout, se, act, stride in BLOCKS:
            blocks.append(InvertedResidual(cin, k, exp, cout, se, act, stride))
            cin = cout
        self.features = nn.Sequential(*blocks)
        self.head = ConvBNAct(cin, 576, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(self.stem(x)))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = MobileNetV3()
        gen = torch.Generator().manual_seed(1)
        for mod in self.modules():
            if isinstance(mod, nn.BatchNorm2d):
                with torch.no_grad():
                    mod.weight.copy_(torch.rand(mod.num_features, generator=gen) * 0.5 + 0.75)
                    mod.bias.copy_(torch.randn(mod.num_features, generator=gen) * 0.1)
                    mod.running_mean.copy_(torch.randn(mod.num_features, generator=gen) * 0.1)
                    mod.running_var.copy_(torch.rand(mod.num_features, generator=gen) * 0.5 + 0.75)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def get_fwd_args() -> tuple[torch.Tensor]:
    env = os.environ.get("YTK_EXAMPLE_SIZE")
    b, h, w = (int(v) for v in env.lower().split("x")) if env else DEFAULT_SIZE
    return (torch.randn(b, 3, h, w, generator=torch.Generator().manual_seed(2)),)
