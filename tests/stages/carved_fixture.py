"""A tiny prepared-and-carved directory built by hand, so stage tests need no full prepare.

The network (NCHW, x: 1x8x6x10)::

    node_Conv_1 (1x1, 8->16) -> n0 HardSwish -> h
    DwConv3x3C16_0(h, w, b) -> d        (base: node_Conv_2, depthwise 3x3)
    node_relu(d) -> node_add(+h) -> a
    node_Conv_3 (1x1, 16->16) -> c3
    DwConv3x3C16_1(c3, w2, b2) -> d2    (base: node_Conv_4)
    node_add_1(d2 + a) -> y             (output)
    node_transpose(y) -> node_mul(t*t) -> z   (output)

It is written as a real model.py too (Model/get_fwd_args), so the reference and the torch host
row come from torch, exactly as prepare would produce them. The carved ONNX's custom-op nodes
follow the carve contract: domain trt.plugins, string attributes plugin_namespace/plugin_version,
inputs = activation then the lifted weight and bias.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import numpy as np

PLUGIN = "DwConv3x3C16"
ARCH = "arm64-sm87-dos6010-cu114-trt86"

MODEL_PY = '''
import torch
import torch.nn.functional as F
from torch import nn


class DwConv(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=True)

    def forward(self, x):
        return self.conv(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1 = nn.Conv2d(8, 16, 1)
        self.dw1 = DwConv(16)
        self.c3 = nn.Conv2d(16, 16, 1)
        self.dw2 = DwConv(16)
        self.eval()

    def forward(self, x):
        h = F.hardswish(self.c1(x))
        a = F.relu(self.dw1(h)) + h
        y = self.dw2(self.c3(a)) + a
        t = y.transpose(2, 3)
        return y, t * t


def get_fwd_args():
    return (torch.randn(1, 8, 6, 10, generator=torch.Generator().manual_seed(1)),)
'''


def _region_pt2(path: Path) -> None:
    import torch
    import torch.nn.functional as F

    class Region(torch.nn.Module):
        def forward(self, x, w, b):  # type: ignore[no-untyped-def]
            return F.conv2d(x, w, b, padding=1, groups=16)

    args = (torch.randn(1, 16, 6, 10), torch.randn(16, 1, 3, 3), torch.randn(16))
    torch.export.save(torch.export.export(Region(), args), str(path))


def _onnx(params: dict[str, np.ndarray], carved: bool, value_info: bool) -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def dw(name: str, x: str, w: str, b: str, out: str, site: int) -> onnx.NodeProto:
        if carved:
            return helper.make_node(PLUGIN, [x, w, b], [out], name=f"{PLUGIN}_{site}", domain="trt.plugins",
                                    plugin_namespace="yasp", plugin_version="1")
        return helper.make_node("Conv", [x, w, b], [out], name=name, group=16, kernel_shape=[3, 3],
                                pads=[1, 1, 1, 1])

    nodes = [
        helper.make_node("Conv", ["x", "c1.weight", "c1.bias"], ["c1"], name="node_Conv_1", kernel_shape=[1, 1]),
        helper.make_node("HardSwish", ["c1"], ["h"], name="n0"),
        dw("node_Conv_2", "h", "dw1.w", "dw1.b", "d", 0),
        helper.make_node("Relu", ["d"], ["r"], name="node_relu"),
        helper.make_node("Add", ["r", "h"], ["a"], name="node_add"),
        helper.make_node("Conv", ["a", "c3.weight", "c3.bias"], ["c3"], name="node_Conv_3", kernel_shape=[1, 1]),
        dw("node_Conv_4", "c3", "dw2.w", "dw2.b", "d2", 1),
        helper.make_node("Add", ["d2", "a"], ["y"], name="node_add_1"),
        helper.make_node("Transpose", ["y"], ["t"], name="node_transpose", perm=[0, 1, 3, 2]),
        helper.make_node("Mul", ["t", "t"], ["z"], name="node_mul"),
    ]
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items()]
    # As the exporter leaves it: every intermediate typed (carved_eval needs them for its segments);
    # without ``value_info`` the custom-op outputs are left untyped, so shapes must come from the plugin.
    inner = ["c1", "h", "r", "a", "c3", "y"] + (["d", "d2"] if value_info else [])
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16, 6, 10]) for n in inner]
    vi.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 16, 10, 6]))
    g = helper.make_graph(nodes, "fixture", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 10]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16, 10, 6])], inits,
                          value_info=vi)
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid("trt.plugins", 1)] if carved else [])
    return helper.make_model(g, opset_imports=opsets, ir_version=9).SerializeToString()


def _candidate() -> dict:
    from ytk_hookspecs.models import Candidate, CandidateFiles, SiteInfo, TensorInfo

    def site(i: int, x: str, path: str) -> SiteInfo:
        return SiteInfo(index=i, module_path=path, onnx_node=f"{PLUGIN}_{i}",
                        inputs=[TensorInfo(name=x, shape=[1, 16, 6, 10], dtype="float32"),
                                TensorInfo(name=f"{PLUGIN}.site{i}.w0", shape=[16, 1, 3, 3], dtype="float32"),
                                TensorInfo(name=f"{PLUGIN}.site{i}.b0", shape=[16], dtype="float32")],
                        outputs=[TensorInfo(name="d" if i == 0 else "d2", shape=[1, 16, 6, 10], dtype="float32")],
                        replaced_onnx_nodes=["node_Conv_2" if i == 0 else "node_Conv_4"], fx_nodes=[])

    return Candidate(name=PLUGIN, namespace="yasp", version="1", selector=f"yasp::{PLUGIN}=DwConv", ops_name="DwConv",
                     lift="fold_conv_bn", input_roles=["activation", "weight", "bias"],
                     sites=[site(0, "h", "dw1"), site(1, "c3", "dw2")], op_inventory={"aten.conv2d.default": 1},
                     constant_axes=[[True] * 4, [True] * 4, [True]],
                     files=CandidateFiles(pt2=f"plugin_candidates/{PLUGIN}.pt2")).model_dump(mode="json")


@functools.lru_cache(maxsize=None)
def _template() -> Path:
    """Build every file once per test session; tests copy it."""
    import hashlib

    import torch

    from ytk_core.artifacts import PrepareManifest
    from ytk_core.frontend.loader import load_model
    from ytk_hookspecs.models import CandidatesFile, PluginEntry, PluginsFile

    root = Path(tempfile.mkdtemp(prefix="ytk-carved-fixture-"))
    atexit.register(shutil.rmtree, root, True)  # one per test session: gone when the session ends
    (root / "model.py").write_text(MODEL_PY)
    lm = load_model(root / "model.py")
    sd = {k: v.detach().numpy() for k, v in lm.model.state_dict().items()}
    params = {"c1.weight": sd["c1.weight"], "c1.bias": sd["c1.bias"], "dw1.w": sd["dw1.conv.weight"],
              "dw1.b": sd["dw1.conv.bias"], "c3.weight": sd["c3.weight"], "c3.bias": sd["c3.bias"],
              "dw2.w": sd["dw2.conv.weight"], "dw2.b": sd["dw2.conv.bias"]}
    x = lm.args[0].numpy()
    with torch.no_grad():
        y, z = lm.model(*lm.args)
    for sub, carved in (("base", False), ("carved", True)):
        d = root / sub
        d.mkdir()
        (d / "model.onnx").write_bytes(_onnx(params, carved, value_info=True))
        np.savez(d / "model.npz", x=x)
        np.savez(d / "model.reference.npz", y=y.numpy(), z=z.numpy())
        PrepareManifest(model=str(root / "model.py"), model_sha256=hashlib.sha256(MODEL_PY.encode()).hexdigest(),
                        onnx="model.onnx", npz="model.npz", reference="model.reference.npz",
                        fx_nodes="fx_nodes.json", torch_version=torch.__version__).write(d / "prepare.json")
    c = root / "carved"
    (c / "plugin_candidates").mkdir()
    _region_pt2(c / "plugin_candidates" / f"{PLUGIN}.pt2")
    PluginsFile(onnx="model.onnx", plugins=[PluginEntry(
        name=PLUGIN, namespace="yasp", op_type=PLUGIN, selector=f"yasp::{PLUGIN}=DwConv", sites=2,
        site_nodes=[f"{PLUGIN}_0", f"{PLUGIN}_1"], kernelgen_input=f"plugin_candidates/{PLUGIN}.pt2")]
    ).write(c / "plugins.json")
    CandidatesFile(onnx="model.onnx", candidates=[_candidate()]).write(c / "candidates.json")
    (c / "model.noshapes.onnx").write_bytes(_onnx(params, True, value_info=False))
    return root


def make_fixture(dst: Path) -> Path:
    """Copy the fixture into ``dst``: ``dst/base`` (plain ONNX), ``dst/carved`` (two custom-op nodes),
    ``dst/model.py``. Returns ``dst``."""
    shutil.copytree(_template(), dst, dirs_exist_ok=True)
    # prepare.json names the model by absolute path: point it at this copy.
    from ytk_core.artifacts import PrepareManifest

    for sub in ("base", "carved"):
        pj = dst / sub / "prepare.json"
        pm = PrepareManifest.read(pj)
        pm.model = str(dst / "model.py")
        pm.write(pj)
    return dst
