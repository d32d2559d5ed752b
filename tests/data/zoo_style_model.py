"""A small CNN written the way model zoos write theirs (timm-style), for carve and propose tests.

* ``conv_pw`` / ``bn1`` / ``conv_dw`` / ``bn2`` are siblings inside a block that holds several convs
  (the exporter folds each BN into its conv, so no single child module owns the folded node);
* the activation lives in the BN module (``BatchNormAct``), as timm's ``BatchNormAct2d`` does;
* one block spells hardswish as ``x * relu6(x + 3) / 6`` after an eval-mode dropout, the other uses
  ``nn.Hardswish``; a squeeze-excite gate and a residual add follow.
Random weights, seeded. ``YTK_EXAMPLE_SIZE=BxHxW`` picks the input size (default 1x32x32).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn


class SpelledHardswish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * F.relu6(x + 3.0) / 6.0


class BatchNormAct(nn.BatchNorm2d):
    def __init__(self, c: int, act: nn.Module) -> None:
        super().__init__(c)
        self.drop = nn.Dropout(0.1)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.drop(super().forward(x)))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv_reduce = nn.Conv2d(c, 8, 1)
        self.conv_expand = nn.Conv2d(8, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.conv_expand(F.relu(self.conv_reduce(s))))


class InvertedResidual(nn.Module):
    def __init__(self, c: int, mid: int, act: nn.Module) -> None:
        super().__init__()
        self.conv_pw = nn.Conv2d(c, mid, 1, bias=False)
        self.bn1 = BatchNormAct(mid, nn.ReLU())
        self.conv_dw = nn.Conv2d(mid, mid, 3, 1, 1, groups=mid, bias=False)
        self.bn2 = BatchNormAct(mid, act)
        self.se = SqueezeExcite(mid)
        self.conv_pwl = nn.Conv2d(mid, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv_dw(self.bn1(self.conv_pw(x))))
        return x + self.bn3(self.conv_pwl(self.se(y)))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.blocks = nn.Sequential(InvertedResidual(16, 32, SpelledHardswish()),
                                    InvertedResidual(16, 32, nn.Hardswish()))
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                nn.init.uniform_(m.weight, 0.5, 1.5)
                nn.init.uniform_(m.bias, -0.2, 0.2)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.stem(x))


def get_fwd_args() -> tuple[torch.Tensor]:
    b, h, w = (int(v) for v in os.environ.get("YTK_EXAMPLE_SIZE", "1x32x32").split("x"))
    torch.manual_seed(1)
    return (torch.randn(b, 3, h, w),)
