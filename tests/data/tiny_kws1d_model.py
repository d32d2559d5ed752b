"""KWSNet: a small 1-D temporal keyword-spotting network (random, seeded weights), written by a new-user
trial, not by the project: depthwise, dilated and strided Conv1d, BatchNorm1d, squeeze-excite over time."""
import torch
from torch import nn
import torch.nn.functional as F


class ConvBNAct1d(nn.Module):
    def __init__(self, cin, cout, k=1, stride=1, dilation=1, groups=1, act="silu"):
        super().__init__()
        pad = dilation * (k - 1) // 2
        self.conv = nn.Conv1d(cin, cout, k, stride, pad, dilation=dilation, groups=groups, bias=False)
        self.bn = nn.BatchNorm1d(cout)
        self.act = nn.SiLU() if act == "silu" else (nn.ReLU() if act == "relu" else nn.Identity())

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class SqueezeExcite1d(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.fc1 = nn.Conv1d(c, c // r, 1)
        self.fc2 = nn.Conv1d(c // r, c, 1)

    def forward(self, x):
        s = x.mean(2, keepdim=True)
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(s))))


class SepBlock(nn.Module):
    """Depthwise-separable block: depthwise (maybe dilated/strided) + SE + pointwise, residual when shapes match."""
    def __init__(self, cin, cout, k=5, stride=1, dilation=1):
        super().__init__()
        self.dw = ConvBNAct1d(cin, cin, k, stride, dilation, groups=cin)
        self.se = SqueezeExcite1d(cin)
        self.pw = ConvBNAct1d(cin, cout, 1, act="none")
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.pw(self.se(self.dw(x)))
        return x + y if self.residual else y


class Model(nn.Module):
    def __init__(self, n_mels=40, num_classes=12):
        super().__init__()
        torch.manual_seed(0)
        self.stem = ConvBNAct1d(n_mels, 64, 3, act="relu")
        self.blocks = nn.Sequential(
            SepBlock(64, 64, k=5),                 # depthwise, residual
            SepBlock(64, 96, k=5, dilation=2),     # dilated depthwise
            SepBlock(96, 96, k=3, stride=2),       # strided depthwise
            SepBlock(96, 96, k=5),                 # residual
        )
        self.head = nn.Linear(96, num_classes)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm1d):
                nn.init.uniform_(m.running_var, 0.5, 1.5)
                nn.init.normal_(m.running_mean, 0.0, 0.1)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(x.mean(2))


def get_fwd_args():
    return (torch.randn(1, 40, 200, generator=torch.Generator().manual_seed(1)),)
