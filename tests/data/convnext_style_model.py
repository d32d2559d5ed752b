"""ConvNeXt-style blocks as timm writes them: a depthwise 7x7 conv, then a LayerNorm over the channels spelled
through permutes -- ``LayerNorm2d`` (permute, layer_norm, permute back; an MLP of 1x1 convs follows) in the first
two blocks, ``nn.LayerNorm`` on the NHWC view (an MLP of Linears follows, then the permute back) in the last two.
Every norm has weights of its own, so sites can share a plugin only if the carve lifts them."""

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Block(nn.Module):
    def __init__(self, c, conv_mlp):
        super().__init__()
        self.conv_mlp = conv_mlp
        self.conv_dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = LayerNorm2d(c, eps=1e-6) if conv_mlp else nn.LayerNorm(c, eps=1e-6)
        fc = (lambda i, o: nn.Conv2d(i, o, 1)) if conv_mlp else nn.Linear
        self.fc1, self.fc2 = fc(c, 4 * c), fc(4 * c, c)

    def forward(self, x):
        shortcut = x
        x = self.conv_dw(x)
        if self.conv_mlp:
            x = self.fc2(F.gelu(self.fc1(self.norm(x))))
        else:
            x = x.permute(0, 2, 3, 1)
            x = self.fc2(F.gelu(self.fc1(self.norm(x))))
            x = x.permute(0, 3, 1, 2)
        return shortcut + x


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 32, 4, 4)
        self.blocks = nn.Sequential(Block(32, True), Block(32, True), Block(32, False), Block(32, False))
        for m in self.modules():
            if isinstance(m, nn.LayerNorm):
                nn.init.normal_(m.weight, 1.0, 0.2)
                nn.init.normal_(m.bias, 0.0, 0.2)

    def forward(self, x):
        return self.blocks(self.stem(x))


def get_fwd_args():
    torch.manual_seed(1)
    return (torch.randn(1, 3, 64, 96),)
