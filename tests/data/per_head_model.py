"""Three heads that differ only in a slice index: one plugin for all three would run the first head's
program everywhere (tests/frontend/test_carve.py)."""

import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.idx = idx

    def forward(self, x):
        return torch.relu(x[:, self.idx:self.idx + 8] * 2.0 + 1.0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, 1, 1)
        self.heads = nn.ModuleList([Head(0), Head(8), Head(16)])
        self.eval()

    def forward(self, x):
        y = self.stem(x)
        return torch.cat([h(y) for h in self.heads], 1)


def get_fwd_args():
    return (torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0)),)
