"""Whole models exported by torch's dynamo ONNX exporter, executed by the torch engine on the CPU in
fp32 and compared with onnxruntime and with torch itself: the worked example at a small size and a
small ViT (LayerNorm, attention, GELU, Gemm)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.conftest import REPO
from torch_engine_helpers import cosine, engine_run, ort_run

pytestmark = pytest.mark.slow


class TinyViT(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, depth: int = 2, classes: int = 10) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.pos = nn.Parameter(torch.randn(1, 16, dim) * 0.1)
        self.blocks = nn.ModuleList()
        for _ in range(depth):
            self.blocks.append(nn.ModuleDict({
                "ln1": nn.LayerNorm(dim), "attn": nn.MultiheadAttention(dim, heads, batch_first=True),
                "ln2": nn.LayerNorm(dim), "mlp": nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(),
                                                               nn.Linear(2 * dim, dim))}))
        self.head = nn.Linear(dim, classes)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        for b in self.blocks:
            n = b["ln1"](t)
            t = t + b["attn"](n, n, n, need_weights=False)[0]
            t = t + b["mlp"](b["ln2"](t))
        return torch.softmax(self.head(t.mean(dim=1)), dim=-1)


def export(model: nn.Module, args: tuple[torch.Tensor, ...], path: Path) -> Path:
    """Export the way prepare does (dynamo exporter, optimizer on, eps-preserving constant matching)."""
    from ytk_core.frontend.export import exact_constant_matching, quiet_exporter

    with quiet_exporter(), exact_constant_matching(), torch.no_grad():
        prog = torch.onnx.export(model, args, dynamo=True, optimize=True, verbose=False, report=False)
    prog.save(str(path))
    return path


@pytest.fixture(scope="module")
def efficientvit(tmp_path_factory):  # type: ignore[no-untyped-def]
    old = os.environ.get("YTK_EXAMPLE_SIZE")
    os.environ["YTK_EXAMPLE_SIZE"] = "1x64x96"
    try:
        spec = importlib.util.spec_from_file_location("evit_example", REPO / "contrib/models/efficientvit_b1/model.py")
        mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        model, args = mod.Model(), mod.get_fwd_args()
    finally:
        if old is None:
            os.environ.pop("YTK_EXAMPLE_SIZE", None)
        else:
            os.environ["YTK_EXAMPLE_SIZE"] = old
    p = export(model, args, tmp_path_factory.mktemp("evit") / "model.onnx")
    with torch.no_grad():
        ref = [t.numpy() for t in model(*args)]
    return p, args[0].numpy(), ref


def test_efficientvit_matches_onnxruntime_and_torch(efficientvit):
    path, x, torch_ref = efficientvit
    ort = ort_run(path, {"x": x})
    got, prog = engine_run(path, {"x": x})
    for g, r, t in zip(got, ort, torch_ref):
        assert np.isfinite(g).all()
        np.testing.assert_allclose(g, r, atol=2e-5, rtol=1e-4)
        assert cosine(g, t) > 0.99999
    kinds = {s.type for s in prog.steps}
    assert {"Convolution", "MatrixMultiply", "PointWise", "Shuffle", "Slice", "Padding", "Reformat"} <= kinds
    onnx_names = {n for s in prog.steps for n in s.onnx_nodes}
    import onnx

    assert onnx_names <= {n.name for n in onnx.load(str(path)).graph.node}


def test_tiny_vit_matches_onnxruntime_and_torch(tmp_path):
    model = TinyViT()
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    p = export(model, (x,), tmp_path / "vit.onnx")
    ort = ort_run(p, {"x": x.numpy()})
    got, prog = engine_run(p, {"x": x.numpy()})
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(got[0], ort[0], atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(got[0], ref, atol=1e-5, rtol=1e-4)
    assert "Normalization" in {s.type for s in prog.steps}
    # each block's attention runs as one fused layer (the classifier's softmax, read by no MatMul, is left alone)
    assert [s.type for s in prog.steps].count("Attention") == 2 and prog.plan.stats["attention_fused"] == 2
