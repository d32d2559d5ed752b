"""A small decoder as segmentation heads write it: ConvTranspose2d upsampling (channels change) between
depthwise-separable blocks -- transposed convs, whose weights a conv lift cannot rebuild (issue 22's trial)."""

import os

import torch
from torch import nn


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, 4, stride=2, padding=1)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.up(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 96, 3, stride=4, padding=1)
        self.dw = nn.Conv2d(96, 96, 3, padding=1, groups=96)
        self.up2 = Up(96, 48)
        self.up1 = Up(48, 32)
        self.head = nn.Conv2d(32, 4, 1)

    def forward(self, x):
        return self.head(self.up1(self.up2(torch.relu(self.dw(self.stem(x))))))


def get_fwd_args():
    b, h, w = (int(v) for v in os.environ.get("YTK_EXAMPLE_SIZE", "1x64x64").split("x"))
    return (torch.randn(b, 3, h, w, generator=torch.Generator().manual_seed(1)),)
