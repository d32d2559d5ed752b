"""Step 1: prepare on the example models, fx_nodes.json, and errors for bad input."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import onnx
import pytest

from tests.helpers import MNV3, VIT, prepare, ytk_inproc
from ytk_hookspecs.models import FxNodesFile
from ytk_core.artifacts import PrepareManifest


@pytest.fixture
def evit_base(evit_plain):
    return evit_plain


def test_artifacts_and_summary(evit_base):
    out, r = evit_base
    for f in ("model.onnx", "model.npz", "model.reference.npz", "fx_nodes.json", "prepare.json"):
        assert (out / f).is_file(), f
    assert "module coverage" in r.stdout and "100.0%" in r.stdout
    m = onnx.load(out / "model.onnx")
    onnx.checker.check_model(m)
    assert list(np.load(out / "model.npz").keys()) == [i.name for i in m.graph.input]
    assert list(np.load(out / "model.reference.npz").keys()) == [o.name for o in m.graph.output]
    assert PrepareManifest.read(out / "prepare.json").env["YTK_EXAMPLE_SIZE"] == "1x64x96"


def test_onnx_stays_flat(evit_base):
    m = onnx.load(evit_base[0] / "model.onnx")
    assert not any("stages" in n.name or "/" in n.name for n in m.graph.node)
    assert not any(n.metadata_props for n in m.graph.node)


def test_fx_nodes_map_to_spec_module_paths(evit_base):
    fx = FxNodesFile.read(evit_base[0] / "fx_nodes.json")
    assert fx.coverage >= 0.99
    by_path = {}
    for n in fx.nodes:
        by_path.setdefault(n.module_path, []).append(n)
    dw5 = by_path["m.stages.2.blocks.1.context_module.main.aggreg.0.0"]
    assert dw5[0].module_class == "Conv2d" and dw5[0].onnx_nodes
    assert dw5[0].inputs[0].shape[1] == 384
    lite = [n for n in fx.nodes if any(f.path == "m.stages.2.blocks.1.context_module.main" and f.cls == "LiteMLA"
                                       for f in n.module_stack)]
    assert any(n.target.startswith("aten.matmul") for n in lite)
    dw3 = by_path["m.stages.2.blocks.1.local_module.main.depth_conv.conv"]
    assert dw3[0].module_stack[-2].cls == "ConvNormAct"
    onnx_names = {n.name for n in onnx.load(evit_base[0] / "model.onnx").graph.node}
    assert all(o in onnx_names for n in fx.nodes for o in n.onnx_nodes)


def test_json_output(tmp_path):
    r = ytk_inproc("embedded", "prepare", VIT, "--onnx-out", tmp_path / "m.onnx", "--npz-out", tmp_path / "m.npz",
                   "--reference-out", tmp_path / "r.npz", "--json", YTK_EXAMPLE_SIZE="1x32x32")
    assert r.code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["trace"]["coverage"] >= 0.99 and data["carve"] is None


def test_mobilenet_prepares(tmp_path):
    r = prepare(MNV3, tmp_path, size="1x64x64")
    assert r.code == 0, r.stderr
    assert FxNodesFile.read(tmp_path / "fx_nodes.json").coverage >= 0.99


# -- bad input: one paragraph, non-zero exit, nothing written -----------------------------------------
def _write(tmp_path, body):
    p = tmp_path / "model.py"
    p.write_text("import torch\nfrom torch import nn\n" + body)
    return p


BAD_MODELS = {
    "missing": (None, "does not exist"),
    "no_model": ("def get_fwd_args():\n    return (torch.zeros(1),)\n", "does not define Model"),
    "no_args": ("class Model(nn.Module):\n    def forward(self, x):\n        return x\n", "get_fwd_args"),
    "args_not_tensors": ("class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
                         "def get_fwd_args():\n    return (3,)\n", "must return tensors only"),
    "args_wrong_type": ("class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
                        "def get_fwd_args():\n    return {'x': 1}\n", "must return a tuple"),
    "import_error": ("import nonexistent_pkg_xyz\n", "ModuleNotFoundError"),
    "syntax": ("def broken(:\n", "syntax error"),
    "untraceable": ("class Inner(nn.Module):\n    def forward(self, x):\n        if x.sum() > 0:\n"
                    "            return x * 2\n        return x\n"
                    "class Model(nn.Module):\n    def __init__(self):\n"
                    "        super().__init__(); self.inner = Inner()\n"
                    "    def forward(self, x):\n        return self.inner(x)\n"
                    "def get_fwd_args():\n    return (torch.randn(2, 3),)\n", "inner"),
    # a forward that raises on its inputs is the model's error, not a tracing limit (no "rewrite it" advice)
    "raises": ("class Model(nn.Module):\n    def forward(self, x):\n"
               "        if x.shape[1] != 16:\n            raise ValueError('expected 16 channels')\n"
               "        return x\ndef get_fwd_args():\n    return (torch.randn(2, 3),)\n",
               "Model.forward raised ValueError at model.py:6 (raise ValueError('expected 16 channels')): "
               "expected 16 channels. It fails in plain torch too"),
    # docs/byom.md says an unused input is refused; an engine would drop it and model.npz would not match
    "unused_input": ("class Model(nn.Module):\n    def forward(self, x, unused):\n        return x * 2\n"
                     "def get_fwd_args():\n    return (torch.randn(2, 3), torch.zeros(2))\n",
                     "forward() never uses its input 'unused' (item 1 of get_fwd_args())"),
}


@pytest.mark.parametrize("case", sorted(BAD_MODELS))
def test_bad_models_fail_cleanly(tmp_path, case):
    body, expect = BAD_MODELS[case]
    model = tmp_path / "nope.py" if body is None else _write(tmp_path, body)
    out = tmp_path / "out"
    r = ytk_inproc("embedded", "prepare", model, "--onnx-out", out / "m.onnx", "--npz-out", out / "m.npz",
                   "--reference-out", out / "r.npz")
    assert r.code != 0
    assert "Traceback" not in r.stderr and "error:" in r.stderr
    assert expect in r.stderr, r.stderr
    assert not out.exists(), list(out.iterdir())  # not even an empty folder


def test_an_op_that_fails_on_its_inputs_prints_no_torch_traceback(tmp_path):
    """torch's fake-tensor layer logs the failing op with a traceback (at ERROR, on the real stderr, so only a
    process of its own shows it); the user reads ytk's one line naming the model's line."""
    from tests.conftest import run_cli

    body = ("class Model(nn.Module):\n    def forward(self, x):\n"
            "        return torch.cat([x, x[:, :, :2]], dim=1)\n"
            "def get_fwd_args():\n    return (torch.randn(1, 3, 4, 4),)\n")
    out = tmp_path / "out"
    r = run_cli("-q", "embedded", "prepare", _write(tmp_path, body), "--onnx-out", out / "m.onnx", "--npz-out",
                out / "m.npz", "--reference-out", out / "r.npz")
    assert r.code == 2
    assert "Traceback" not in r.stderr and "fake_tensor" not in r.stderr, r.stderr[:3000]
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert line.startswith("error: ") and "Model.forward raised RuntimeError at model.py:5" in line, line
    assert ".." not in line, line  # torch's own message ends in a period; the sentence after it adds none


def test_an_untraceable_model_gets_one_line_not_torchs_partial_graph(tmp_path):
    """torch.export prints the partial FX graph of a failed export on stderr (generated code, pages of it on
    a real model); the user gets ytk's one line naming the module and the line, nothing else."""
    body, _ = BAD_MODELS["untraceable"]
    out = tmp_path / "out"
    r = ytk_inproc("-q", "embedded", "prepare", _write(tmp_path, body), "--onnx-out", out / "m.onnx", "--npz-out",
                   out / "m.npz", "--reference-out", out / "r.npz")
    assert r.code == 2
    assert "def forward" not in r.stderr and "torch.ops.aten" not in r.stderr, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.strip()] == [ln for ln in r.stderr.splitlines()
                                                                   if ln.startswith("error: ")], r.stderr
    assert "rewrite that part of the model" in r.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_output(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    model = _write(tmp_path, "class Model(nn.Module):\n    def forward(self, x):\n        return x + 1\n"
                   "def get_fwd_args():\n    return (torch.randn(2, 3),)\n")
    r = ytk_inproc("embedded", "prepare", model, "--onnx-out", ro / "m.onnx", "--npz-out", ro / "m.npz",
                   "--reference-out", ro / "r.npz")
    assert r.code != 0 and "cannot write" in r.stderr


def test_unwritable_output_is_a_file_in_the_way(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    model = _write(tmp_path, "class Model(nn.Module):\n    def forward(self, x):\n        return x + 1\n"
                   "def get_fwd_args():\n    return (torch.randn(2, 3),)\n")
    r = ytk_inproc("embedded", "prepare", model, "--onnx-out", blocker / "m.onnx", "--npz-out", tmp_path / "m.npz",
                   "--reference-out", tmp_path / "r.npz")
    assert r.code != 0 and "cannot create output directory" in r.stderr
    assert not (tmp_path / "m.npz").exists()
