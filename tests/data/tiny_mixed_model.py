"""A tiny depthwise-separable CNN with three depthwise kernel sizes: four autoloop candidates, for tests
that need more than two (finding one bad candidate among several)."""

import torch
from torch import nn


class ConvNormAct(nn.Module):
    def __init__(self, cin, cout, k=3, stride=1, groups=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False)
        self.norm = nn.BatchNorm2d(cout)
        self.act = nn.Hardswish() if act else None

    def forward(self, x):
        x = self.norm(self.conv(x))
        return self.act(x) if self.act is not None else x


class Block(nn.Module):
    def __init__(self, c, mid, k=3):
        super().__init__()
        self.expand = ConvNormAct(c, mid, 1)
        self.depth_conv = ConvNormAct(mid, mid, k, groups=mid)
        self.project = ConvNormAct(mid, c, 1, act=False)

    def forward(self, x):
        return x + self.project(self.depth_conv(self.expand(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = ConvNormAct(3, 16, 3, 2)
        self.blocks = nn.Sequential(Block(16, 64), Block(16, 64, 5), Block(16, 32, 7))
        gen = torch.Generator().manual_seed(1)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                with torch.no_grad():
                    m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                    m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
        self.eval()

    def forward(self, x):
        return self.blocks(self.stem(x))


def get_fwd_args():
    return (torch.randn(1, 3, 256, 256, generator=torch.Generator().manual_seed(2)),)
