"""TinyGPT: a small decoder-only transformer LM, written by a new-user trial of ytk (2026-12-05).

Token embedding (int64 ids, 1x128), rotary positions computed with sin/cos in forward,
4 pre-norm blocks (hand-written RMSNorm, causal self-attention -- hand-written matmul/masked_fill/
softmax in blocks 0 and 2, F.scaled_dot_product_attention(is_causal=True) in blocks 1 and 3 --
and a SwiGLU MLP), a final RMSNorm and an lm_head tied to the embedding.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 4096
D_MODEL = 256
N_HEADS = 4
N_LAYERS = 4
SEQ = 128
FFN = 704  # ~ 8/3 * d_model, rounded to a multiple of 64


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(x, base=10000.0):
    """Apply rotary position embedding to x of shape (B, H, T, Dh), computed in forward."""
    b, h, t, dh = x.shape
    half = dh // 2
    inv_freq = 1.0 / (base ** (torch.arange(0, half, device=x.device, dtype=torch.float32) / half))
    pos = torch.arange(t, device=x.device, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)            # (T, half)
    cos, sin = freqs.cos(), freqs.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class ManualCausalAttention(nn.Module):
    """q/k/v linears, heads, q.k^T, causal masked_fill, softmax, attn.v -- all by hand."""

    def __init__(self, dim, heads, max_len=SEQ):
        super().__init__()
        self.heads = heads
        self.dh = dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        mask = torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q = self.q(x).view(b, t, self.heads, self.dh).transpose(1, 2)
        k = self.k(x).view(b, t, self.heads, self.dh).transpose(1, 2)
        v = self.v(x).view(b, t, self.heads, self.dh).transpose(1, 2)
        q, k = rotary(q), rotary(k)
        att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.dh)
        att = att.masked_fill(self.causal_mask[:t, :t], float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v)
        y = y.transpose(1, 2).reshape(b, t, c)
        return self.o(y)


class SdpaCausalAttention(nn.Module):
    """Same projections, attention through F.scaled_dot_product_attention(is_causal=True)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.dh = dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q = self.q(x).view(b, t, self.heads, self.dh).transpose(1, 2)
        k = self.k(x).view(b, t, self.heads, self.dh).transpose(1, 2)
        v = self.v(x).view(b, t, self.heads, self.dh).transpose(1, 2)
        q, k = rotary(q), rotary(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, c)
        return self.o(y)


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden, sdpa):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = SdpaCausalAttention(dim, heads) if sdpa else ManualCausalAttention(dim, heads)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SwiGLU(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        nn.init.normal_(self.embed.weight, std=0.02)
        # blocks 0 and 2: hand-written attention; blocks 1 and 3: SDPA
        self.blocks = nn.ModuleList(
            [Block(D_MODEL, N_HEADS, FFN, sdpa=(i % 2 == 1)) for i in range(N_LAYERS)])
        self.norm = RMSNorm(D_MODEL)
        self.lm_head = nn.Linear(D_MODEL, VOCAB, bias=False)
        self.lm_head.weight = self.embed.weight     # tied

    def forward(self, ids):
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.norm(x))


def get_fwd_args():
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, VOCAB, (1, SEQ), generator=g, dtype=torch.int64),)
