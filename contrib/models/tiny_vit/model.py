"""A small Vision Transformer (Dosovitskiy et al.), written for this project.

Patch embedding, softmax multi-head attention, LayerNorm, GELU MLP. Batch 8 at 224x224 by default;
``YTK_EXAMPLE_SIZE=BxHxW`` (multiples of 16) picks another size. Random weights, seeded.
"""

from __future__ import annotations

import os

import torch
from torch import nn

DEFAULT_SIZE = (8, 224, 224)
DIM, DEPTH, HEADS, PATCH = 192, 4, 3, 16


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(out)


class Mlp(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, dim * 4)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(dim * 4, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    def __init__(self, tokens: int) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, DIM, PATCH, PATCH)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, DIM) * 0.02)
        self.blocks = nn.Sequential(*[Block(DIM, HEADS) for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, 100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x.mean(dim=1))


def input_size() -> tuple[int, int, int]:
    env = os.environ.get("YTK_EXAMPLE_SIZE")
    return tuple(int(v) for v in env.lower().split("x")) if env else DEFAULT_SIZE  # type: ignore[return-value]


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        _, h, w = input_size()
        self.vit = TinyViT((h // PATCH) * (w // PATCH))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.vit(x)


def get_fwd_args() -> tuple[torch.Tensor]:
    b, h, w = input_size()
    return (torch.randn(b, 3, h, w, generator=torch.Generator().manual_seed(2)),)
