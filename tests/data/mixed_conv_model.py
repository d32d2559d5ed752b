"""A model written as MixNet writes its mixed convs (timm ``MixedConv2d``, a ModuleDict): the input split
into channel groups, a conv of its own on each, the results concatenated. Its 1x1 groups are equal in every
op but the slice each one reads; a TF-style 'same' pad before a stride-2 depthwise conv, which the ONNX
optimiser folds into the Conv; and HGNetV2's stem, whose pad it folds into a conv that shares it with a pool."""

import torch
import torch.nn.functional as F
from torch import nn


class MixedConv(nn.ModuleDict):
    def __init__(self, cin: int, cout: int, kernels: tuple[int, ...]) -> None:
        super().__init__()
        n = len(kernels)
        self.splits = [cin // n] * n
        for i, k in enumerate(kernels):
            groups = 1 if k == 1 else cin // n
            self[str(i)] = nn.Conv2d(cin // n, cout // n, k, padding=k // 2, groups=groups, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(x, self.splits, 1)
        return torch.cat([c(parts[i]) for i, c in enumerate(self.values())], 1)


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.pw = MixedConv(c, 2 * c, (1, 1))
        self.bn1 = nn.BatchNorm2d(2 * c)
        self.dw = MixedConv(2 * c, 2 * c, (3, 5))
        self.bn2 = nn.BatchNorm2d(2 * c)
        self.pwl = MixedConv(2 * c, c, (1, 1))
        self.bn3 = nn.BatchNorm2d(c)
        self.act = nn.ReLU(inplace=True)  # in place, as timm's BatchNormAct2d: torch.export then splits per group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.pw(x)))
        y = self.act(self.bn2(self.dw(y)))
        return x + self.bn3(self.pwl(y))


class Down(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 2, 0, groups=c, bias=False)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.bn(self.conv(F.pad(x, (0, 1, 0, 1)))))


class Stem(nn.Module):
    """HGNetV2's stem: one pad read by a conv and a pool (the ONNX optimiser folds it into the Conv, the pool
    still reads it)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(c, c, 2, 1, 0, bias=False), nn.BatchNorm2d(c), nn.ReLU())
        self.pool = nn.MaxPool2d(2, 1, ceil_mode=True)
        self.fuse = nn.Conv2d(2 * c, 2 * c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x, (0, 1, 0, 1))
        return self.fuse(torch.cat([self.pool(x), self.conv(x)], 1))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.ReLU(), Stem(8))
        self.blocks = nn.Sequential(Block(16), Down(16), Block(16), Down(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.stem(x))


def get_fwd_args() -> tuple[torch.Tensor]:
    return (torch.randn(1, 3, 32, 48, generator=torch.Generator().manual_seed(1)),)
