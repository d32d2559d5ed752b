"""Shared helpers for the torch engine tests: tiny ONNX graphs, onnxruntime as the reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

from ytk_hookspecs.models import PluginArtifact, PluginDescription, PluginMeta

OPSET = 20


def make_model(nodes: list[onnx.NodeProto], inputs: dict[str, tuple[list[int], int]], outputs: list[str],
               inits: dict[str, np.ndarray] | None = None, opset: int = OPSET,
               value_info: dict[str, list[int]] | None = None, extra_opsets: dict[str, int] | None = None
               ) -> onnx.ModelProto:
    """A model from nodes; input types are (shape, TensorProto elem type); outputs are float32 of unknown shape."""
    g = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(n, et, s) for n, (s, et) in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()],
        value_info=[helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in (value_info or {}).items()])
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 9
    return m


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def ort_run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def engine_run(path: Path, feeds: dict[str, np.ndarray], precision: str = "fp32", device: str = "cpu",
               plugins: list | None = None):  # type: ignore[no-untyped-def]
    """Build and run the torch engine on ``feeds``; returns (outputs as numpy, program)."""
    import torch

    from ytk_backend_torch.engine import build_plan
    from ytk_backend_torch.program import Program

    plan, consts, bindings = build_plan(path, precision, plugins or [])
    prog = Program(plan, consts, bindings, device)
    with torch.inference_mode():
        outs = prog(prog.prepare_inputs([feeds[t.name] for t in plan.inputs]))
    return [o.float().cpu().numpy() for o in outs], prog


def rand(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.RandomState(seed).randn(*shape) * scale).astype(np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def dw_meta(name="DwTest", act_fmt="kHWC8") -> PluginMeta:  # type: ignore[no-untyped-def]
    dims = ["in0[0]", "in0[1]", "in0[2]", "in0[3]"]
    return PluginMeta(
        plugin_name=name, plugin_namespace="yasp", deployment_target="torch",
        inputs=[{"name": "x", "dtype": "float16", "format": act_fmt, "shape": dims},
                {"name": "weight", "dtype": "float16", "role": "weight", "shape": ["in0[1]", "1", "3", "3"]},
                {"name": "bias", "dtype": "float32", "role": "bias", "shape": ["in0[1]"]}],
        outputs=[{"name": "y", "dtype": "float16", "format": act_fmt, "shape": dims}],
        extents={"N": "in0[0]", "C": "in0[1]", "H": "in0[2]", "W": "in0[3]"}, launcher="dw_launch")


def artifact(meta: PluginMeta, engine_api="torch-launcher", path="/nonexistent/DwTest.so") -> PluginArtifact:  # type: ignore[no-untyped-def]
    desc = PluginDescription(
        name=meta.plugin_name, namespace=meta.plugin_namespace, version=meta.plugin_version,
        num_inputs=len(meta.inputs), num_outputs=len(meta.outputs),
        input_dtypes=[c.dtype for c in meta.inputs], output_dtypes=[c.dtype for c in meta.outputs],
        input_formats=[c.format for c in meta.inputs], output_formats=[c.format for c in meta.outputs],
        sm=90, cpu_arch="x86_64", engine_api=engine_api, launcher=meta.launcher, builder="test",
        source_sha256="0" * 64, meta_yaml=yaml.safe_dump(meta.model_dump(mode="json", exclude_none=True)))
    return PluginArtifact(path=path, sha256="0" * 64, description=desc)
