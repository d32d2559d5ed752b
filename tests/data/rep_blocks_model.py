"""Re-parameterisable blocks as their training code writes them (branches not yet merged)."""
import torch
from torch import nn


class ConvBN(nn.Sequential):
    def __init__(self, cin, cout, k, stride=1, groups=1):
        super().__init__(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout))


class SE(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.expand(torch.relu(self.reduce(x.mean((2, 3), keepdim=True)))))


class MobileOneBlock(nn.Module):
    """timm fastvit.MobileOneBlock: identity BN + 1x1 scale branch + kxk branch, then the activation."""

    def __init__(self, c, k=3, stride=1, dw=True, act=True, cout=None, branches=1, se=False):
        super().__init__()
        cout = cout or c
        g = c if dw else 1
        self.identity = nn.BatchNorm2d(c) if stride == 1 and cout == c else None
        self.conv_scale = ConvBN(c, cout, 1, stride, g) if k > 1 else None
        self.conv_kxk = nn.ModuleList([ConvBN(c, cout, k, stride, g) for _ in range(branches)])
        self.act = nn.GELU() if act else nn.Identity()
        self.se = SE(cout) if se else nn.Identity()

    def forward(self, x):
        out = 0
        if self.identity is not None:
            out = self.identity(x)
        if self.conv_scale is not None:
            out = out + self.conv_scale(x)
        for conv in self.conv_kxk:
            out = out + conv(x)
        return self.act(self.se(out))


class RepMixer(nn.Module):
    """timm fastvit.RepMixer: x + layer_scale * (mixer(x) - norm(x))."""

    def __init__(self, c):
        super().__init__()
        self.norm = MobileOneBlock(c, 3, act=False)
        self.norm.conv_scale, self.norm.conv_kxk = None, nn.ModuleList()
        self.mixer = MobileOneBlock(c, 3, act=False)
        self.layer_scale = nn.Parameter(0.5 + torch.rand(c, 1, 1))

    def forward(self, x):
        return x + self.layer_scale * (self.mixer(x) - self.norm(x))


class RepVggDw(nn.Module):
    """timm repvit.RepVggDw: BN(dw3x3+BN(x) + dw1x1(x) + x)."""

    def __init__(self, c):
        super().__init__()
        self.conv = ConvBN(c, c, 3, groups=c)
        self.conv1 = nn.Conv2d(c, c, 1, groups=c)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return self.bn(self.conv(x) + self.conv1(x) + x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.down = MobileOneBlock(16, 3, stride=2)             # dw 3x3 + dw 1x1, stride 2, no identity
        self.blocks = nn.Sequential(MobileOneBlock(16), MobileOneBlock(16))   # dw, identity BN
        self.dense = MobileOneBlock(16, 3, dw=False)              # RepVGG: dense 3x3 + 1x1 + identity BN
        self.mix = nn.Sequential(RepMixer(16), RepMixer(16))
        self.rep = RepVggDw(16)
        self.pw = MobileOneBlock(16, 1, dw=False)                 # a 1x1 block: identity BN + one 1x1 branch
        self.expand = MobileOneBlock(16, 1, dw=False, cout=32, branches=2)  # 16 -> 32: two 1x1s, no identity
        self.excite = MobileOneBlock(32, 3, se=True)  # with its SE inside: the block holds three heavy ops
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        x = self.blocks(self.down(self.stem(x)))
        return self.excite(self.expand(self.pw(self.rep(self.mix(self.dense(x))))))


def get_fwd_args():
    torch.manual_seed(1)
    return (torch.randn(1, 3, 32, 48),)
