"""A detector whose head is shared by two pyramid levels (RetinaNet, FCOS and YOLO heads are written so):
one module called twice, at two sizes, its weights shared. Each call is a site of its own."""

import torch
from torch import nn


class CBR(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int, s: int = 1, g: int = 1) -> None:
        super().__init__(nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(cout), nn.GELU())


class Head(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = CBR(c, c, 3, g=c)
        self.pw = CBR(c, c, 1)
        self.cls = nn.Conv2d(c, 3, 1)
        self.reg = nn.Conv2d(c, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.pw(self.dw(x))
        return self.cls(y), self.reg(y)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = CBR(3, 16, 3, 2)
        self.down = CBR(16, 16, 3, 2)
        self.head = Head(16)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        p1 = self.stem(x)
        p2 = self.down(p1)
        c1, r1 = self.head(p1)
        c2, r2 = self.head(p2)
        return {"cls_p1": c1, "reg_p1": r1, "cls_p2": c2, "reg_p2": r2}


def get_fwd_args() -> tuple[torch.Tensor]:
    return (torch.randn(1, 3, 32, 48, generator=torch.Generator().manual_seed(1)),)
