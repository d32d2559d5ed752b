"""PicoNet: a small MobileNet-like classifier, written to show ytk on a model of your own.

A strided stem, four inverted-residual blocks (1x1 expand, depthwise 3x3, squeeze-excite,
1x1 project), global average pooling and a LayerNorm + Linear head.
"""

import os

import torch
from torch import nn


class ConvBNAct(nn.Module):
    def __init__(self, cin, cout, k=1, stride=1, groups=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.Hardswish() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class SqueezeExcite(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.reduce = nn.Conv2d(c, c // r, 1)
        self.expand = nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(torch.relu(self.reduce(s))))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand=4):
        super().__init__()
        mid = cin * expand
        self.expand = ConvBNAct(cin, mid)
        self.dw = ConvBNAct(mid, mid, 3, stride, groups=mid)
        self.se = SqueezeExcite(mid)
        self.project = ConvBNAct(mid, cout, act=False)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.residual else y


class Model(nn.Module):
    def __init__(self, num_classes=100):
        super().__init__()
        torch.manual_seed(0)                      # random weights, but the same ones every time
        self.stem = ConvBNAct(3, 16, 3, stride=2)
        self.blocks = nn.Sequential(
            InvertedResidual(16, 24, stride=2),
            InvertedResidual(24, 24, stride=1),
            InvertedResidual(24, 40, stride=2),
            InvertedResidual(40, 40, stride=1),
        )
        self.norm = nn.LayerNorm(40)
        self.head = nn.Linear(40, num_classes)
        for m in self.modules():                  # trained-looking BatchNorm statistics
            if isinstance(m, nn.BatchNorm2d):
                nn.init.uniform_(m.running_var, 0.5, 1.5)
                nn.init.normal_(m.running_mean, 0.0, 0.1)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(self.norm(x.mean((2, 3))))


def get_fwd_args():
    # one image; YTK_EXAMPLE_SIZE=BxHxW picks another size (a convention, not a requirement)
    b, h, w = map(int, os.environ.get("YTK_EXAMPLE_SIZE", "1x224x224").lower().split("x"))
    return (torch.randn(b, 3, h, w, generator=torch.Generator().manual_seed(1)),)
