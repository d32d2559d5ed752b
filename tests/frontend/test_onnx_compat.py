"""Models torch's ONNX exporter refused as traced (two of the 26 architectures outside the corpus) prepare: the
rewrites of ytk_core.frontend.onnx_compat keep every value and every node's module, and a model that exports
as it is gets no rewrite at all. Each model below is the published spelling, shrunk."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers import prepare
from ytk_core.frontend.onnx_compat import onnx_compatible
from ytk_hookspecs.models import FxNodesFile

# timm maxxvit.AttentionCl, head_first: q, k, v chunked out of one projection, a relative-position bias as the
# mask, the output transposed back and reshaped to the window. The exporter's decomposition made that reshape a
# view that its own strides then refuse ("Cannot view a tensor with shape ... as a tensor with shape ...").
MAXVIT_PY = '''
import torch
import torch.nn.functional as F
from torch import nn


class AttentionCl(nn.Module):
    def __init__(self, dim=64, heads=2):
        super().__init__()
        self.heads, self.dim_head = heads, dim // heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.rel_pos = nn.Parameter(torch.randn(heads, 64, 64) * 0.1)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B = x.shape[0]
        restore_shape = x.shape[:-1]
        q, k, v = self.qkv(x).view(B, -1, self.heads, self.dim_head * 3).transpose(1, 2).chunk(3, dim=3)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=self.rel_pos.unsqueeze(0).contiguous())
        x = x.transpose(1, 2).reshape(restore_shape + (-1,))
        return self.proj(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(64)
        self.attn = AttentionCl()

    def forward(self, x):
        return x + self.attn(self.norm(x))


def get_fwd_args():
    return (torch.randn(4, 8, 8, 64, generator=torch.Generator().manual_seed(0)),)
'''

# timm hiera.MaskUnitAttention: attention per mask unit, on (batch, heads, units, tokens, dim) tensors; the
# exporter translates scaled_dot_product_attention on 4-D tensors only.
HIERA_PY = '''
import torch
import torch.nn.functional as F
from torch import nn


class MaskUnitAttention(nn.Module):
    def __init__(self, dim=32, heads=2, units=4):
        super().__init__()
        self.heads, self.units = heads, units
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, -1, self.units, 3, self.heads, x.shape[-1] // self.heads)
        q, k, v = qkv.permute(3, 0, 4, 2, 1, 5).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        x = x.transpose(1, 3).reshape(B, -1, x.shape[-1] * self.heads)
        return self.proj(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = MaskUnitAttention()

    def forward(self, x):
        return x + self.attn(x)


def get_fwd_args():
    return (torch.randn(2, 64, 32, generator=torch.Generator().manual_seed(0)),)
'''


@pytest.mark.parametrize("source", [MAXVIT_PY, HIERA_PY], ids=["maxvit-reshape", "hiera-5d-attention"])
def test_a_model_the_exporter_refused_as_traced_prepares_with_every_node_mapped(tmp_path: Path, source: str):
    """prepare's own check runs the ONNX in onnxruntime against torch's outputs: the rewrites keep the values;
    and every ONNX compute node maps to a module, the attention's own nodes to the attention module."""
    model = tmp_path / "model.py"
    model.write_text(source)
    r = prepare(model, tmp_path / "p")
    assert r.code == 0, r.stderr[-2000:]
    fx = FxNodesFile.read(tmp_path / "p" / "fx_nodes.json")
    assert not fx.unmapped_onnx_nodes and fx.onnx_mapped_nodes == fx.onnx_compute_nodes
    attn = [n for n in fx.nodes if n.target.endswith(("scaled_dot_product_attention.default", "clone.default"))]
    assert attn and all(n.module_path == "attn" for n in attn), [(n.name, n.module_path) for n in attn]


def _program(source: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    ns: dict = {}
    exec(compile(source, str(tmp_path / "m.py"), "exec"), ns)  # noqa: S102 -- the test's own model source
    model, args = ns["Model"]().eval(), ns["get_fwd_args"]()
    return model, args, torch.export.export(model, args, strict=False)


def test_the_rewrites_keep_every_value_and_leave_a_plain_model_alone(tmp_path: Path):
    for source, want in ((MAXVIT_PY, "contiguous copy"), (HIERA_PY, "folded to 4-D")):
        model, args, ep = _program(source, tmp_path)
        done = onnx_compatible(ep)
        assert any(want in d for d in done), done
        # the same math; a 4-D attention kernel may round the last bit of a sum otherwise
        torch.testing.assert_close(ep.module()(*args), model(*args), rtol=1e-5, atol=1e-6)
    # 4-D attention whose output is no reshape of a transpose: nothing to rewrite, the graph stays as traced
    plain = MAXVIT_PY.replace("x = x.transpose(1, 2).reshape(restore_shape + (-1,))",
                              "x = torch.cat([x[:, 0], x[:, 1]], -1).reshape(restore_shape + (-1,))")
    _, _, ep = _program(plain, tmp_path)
    before = [(n.name, n.target, n.args) for n in ep.graph.nodes]
    assert onnx_compatible(ep) == [] and [(n.name, n.target, n.args) for n in ep.graph.nodes] == before


def test_an_op_the_exporter_cannot_translate_is_named_with_what_to_do(tmp_path: Path):
    """torch.export traces it; torch's ONNX exporter has no translation and no rewrite helps. The one line names
    the op and says to spell it otherwise, not the torch.export advice about data-dependent control flow."""
    model = tmp_path / "model.py"
    model.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                     "        return torch.special.zeta(x, x + 2.0)\n\n\ndef get_fwd_args():\n"
                     "    return (torch.rand(2, 8) + 1,)\n")
    r = prepare(model, tmp_path / "p")
    line = next(ln for ln in r.stderr.splitlines() if ln.startswith("error:"))
    assert r.code == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "ONNX export" in line and "zeta" in line and "torch's ONNX exporter cannot translate" in line, line
    assert "data-dependent" not in line and not (tmp_path / "p" / "model.onnx").exists()
