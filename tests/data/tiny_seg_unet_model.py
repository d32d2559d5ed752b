"""SegUNet: a small U-Net-style semantic-segmentation network, written by a new-user trial of ytk (2026-12-05).

Encoder: reflect-padded stem, strided convs, dilated 3x3 convs (d=2, d=4), GroupNorm + SiLU,
one depthwise-separable block. Bottleneck: ASPP-like (1x1 + dilated 3x3 at d=2,4,6 + image pool,
concatenated, 1x1 project). Decoder: F.interpolate(bilinear, align_corners=False) + skip concat.
Head: 1x1 conv to num_classes at full resolution.
"""

import os

import torch
import torch.nn.functional as F
from torch import nn


def gn(c):
    return nn.GroupNorm(min(8, c // 4), c)


class ConvGNAct(nn.Module):
    def __init__(self, cin, cout, k=3, stride=1, dilation=1, groups=1):
        super().__init__()
        pad = dilation * (k // 2)
        self.conv = nn.Conv2d(cin, cout, k, stride, pad, dilation=dilation, groups=groups, bias=False)
        self.norm = gn(cout)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.norm(self.conv(x)))


class ReflectStem(nn.Module):
    """7x7 conv with reflect padding done explicitly through F.pad."""

    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 7, 1, 0, bias=False)
        self.norm = gn(cout)
        self.act = nn.SiLU()

    def forward(self, x):
        x = F.pad(x, (3, 3, 3, 3), mode="reflect")
        return self.act(self.norm(self.conv(x)))


class DepthwiseSeparable(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)
        self.dw_norm = gn(cin)
        self.pw = nn.Conv2d(cin, cout, 1, bias=False)
        self.pw_norm = gn(cout)
        self.act = nn.SiLU()

    def forward(self, x):
        x = self.act(self.dw_norm(self.dw(x)))
        return self.act(self.pw_norm(self.pw(x)))


class DilatedResBlock(nn.Module):
    def __init__(self, c, dilation):
        super().__init__()
        self.conv1 = ConvGNAct(c, c, 3, dilation=dilation)
        self.conv2 = nn.Conv2d(c, c, 3, 1, dilation, dilation=dilation, bias=False)
        self.norm2 = gn(c)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(x + self.norm2(self.conv2(self.conv1(x))))


class ASPP(nn.Module):
    def __init__(self, cin, cout, rates=(2, 4, 6)):
        super().__init__()
        self.branch1x1 = ConvGNAct(cin, cout, 1)
        self.branches = nn.ModuleList(ConvGNAct(cin, cout, 3, dilation=r) for r in rates)
        self.pool_conv = nn.Conv2d(cin, cout, 1)
        self.project = ConvGNAct(cout * (2 + len(rates)), cout, 1)

    def forward(self, x):
        h, w = x.shape[-2:]
        pooled = F.interpolate(self.pool_conv(x.mean((2, 3), keepdim=True)), size=(h, w),
                               mode="bilinear", align_corners=False)
        outs = [self.branch1x1(x)] + [b(x) for b in self.branches] + [pooled]
        return self.project(torch.cat(outs, dim=1))


class UpBlock(nn.Module):
    def __init__(self, cin, cskip, cout):
        super().__init__()
        self.fuse = ConvGNAct(cin + cskip, cout, 3)
        self.refine = ConvGNAct(cout, cout, 3)

    def forward(self, x, skip):
        x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return self.refine(self.fuse(torch.cat([x, skip], dim=1)))


class Model(nn.Module):
    def __init__(self, num_classes=19):
        super().__init__()
        torch.manual_seed(0)
        self.stem = ReflectStem(3, 16)                     # 1/1
        self.down1 = ConvGNAct(16, 32, 3, stride=2)        # 1/2
        self.enc1 = DepthwiseSeparable(32, 32)
        self.down2 = ConvGNAct(32, 64, 3, stride=2)        # 1/4
        self.enc2 = DilatedResBlock(64, 2)
        self.down3 = ConvGNAct(64, 96, 3, stride=2)        # 1/8
        self.enc3 = DilatedResBlock(96, 4)
        self.aspp = ASPP(96, 96)
        self.up2 = UpBlock(96, 64, 64)                     # 1/4
        self.up1 = UpBlock(64, 32, 32)                     # 1/2
        self.up0 = UpBlock(32, 16, 16)                     # 1/1
        self.head = nn.Conv2d(16, num_classes, 1)
        for m in self.modules():                            # non-trivial affine params
            if isinstance(m, nn.GroupNorm):
                nn.init.normal_(m.weight, 1.0, 0.1)
                nn.init.normal_(m.bias, 0.0, 0.1)

    def forward(self, x):
        s0 = self.stem(x)
        s1 = self.enc1(self.down1(s0))
        s2 = self.enc2(self.down2(s1))
        b = self.aspp(self.enc3(self.down3(s2)))
        d = self.up2(b, s2)
        d = self.up1(d, s1)
        d = self.up0(d, s0)
        return self.head(d)


def get_fwd_args():
    b, h, w = map(int, os.environ.get("UNET_SIZE", "1x256x256").lower().split("x"))
    return (torch.randn(b, 3, h, w, generator=torch.Generator().manual_seed(1)),)
