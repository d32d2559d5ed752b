"""The small network the conformance suite compiles on every engine: ONNX, inputs and reference.

``x (1x8x6x10) -> 1x1 conv 8->16 -> HardSwish -> h; depthwise 3x3(h) -> Relu -> + h -> a;
1x1 conv 16->16 (a) -> depthwise 3x3 -> + a -> y; transpose(y) -> t * t -> z``. Outputs ``y`` and
``z``. The reference is computed here with numpy in float64, independently of any engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["EngineModel", "write_engine_model"]


@dataclass
class EngineModel:
    onnx: Path
    npz: Path
    reference: dict[str, np.ndarray]
    node_names: set[str]
    outputs: list[str]


def _params() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)

    def r(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    return {"c1.weight": r(16, 8, 1, 1, scale=0.35), "c1.bias": r(16, scale=0.1),
            "dw1.w": r(16, 1, 3, 3, scale=0.33), "dw1.b": r(16, scale=0.1),
            "c3.weight": r(16, 16, 1, 1, scale=0.25), "c3.bias": r(16, scale=0.1),
            "dw2.w": r(16, 1, 3, 3, scale=0.33), "dw2.b": r(16, scale=0.1)}


def _pointwise(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0]) + b[None, :, None, None]


def _depthwise3x3(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros_like(x)
    for i in range(3):
        for j in range(3):
            out += xp[:, :, i:i + h, j:j + wd] * w[None, :, 0, i, j, None, None]
    return out + b[None, :, None, None]


def _hardswish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0


def _reference(x: np.ndarray, p: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    q = {k: v.astype(np.float64) for k, v in p.items()}
    h = _hardswish(_pointwise(x.astype(np.float64), q["c1.weight"], q["c1.bias"]))
    a = np.maximum(_depthwise3x3(h, q["dw1.w"], q["dw1.b"]), 0.0) + h
    y = _depthwise3x3(_pointwise(a, q["c3.weight"], q["c3.bias"]), q["dw2.w"], q["dw2.b"]) + a
    t = y.transpose(0, 1, 3, 2)
    return {"y": y.astype(np.float32), "z": (t * t).astype(np.float32)}


def write_engine_model(directory: Path) -> EngineModel:
    """Write ``model.onnx`` and ``model.npz`` into ``directory``; return them with the reference."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    p = _params()
    nodes = [
        helper.make_node("Conv", ["x", "c1.weight", "c1.bias"], ["c1"], name="node_Conv_1", kernel_shape=[1, 1]),
        helper.make_node("HardSwish", ["c1"], ["h"], name="node_hardswish"),
        helper.make_node("Conv", ["h", "dw1.w", "dw1.b"], ["d"], name="node_Conv_2", group=16, kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d"], ["r"], name="node_relu"),
        helper.make_node("Add", ["r", "h"], ["a"], name="node_add"),
        helper.make_node("Conv", ["a", "c3.weight", "c3.bias"], ["c3"], name="node_Conv_3", kernel_shape=[1, 1]),
        helper.make_node("Conv", ["c3", "dw2.w", "dw2.b"], ["d2"], name="node_Conv_4", group=16, kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["d2", "a"], ["y"], name="node_add_1"),
        helper.make_node("Transpose", ["y"], ["t"], name="node_transpose", perm=[0, 1, 3, 2]),
        helper.make_node("Mul", ["t", "t"], ["z"], name="node_mul"),
    ]
    typed = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 16, 6, 10])
             for n in ("c1", "h", "d", "r", "a", "c3", "d2")]
    typed.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 16, 10, 6]))
    graph = helper.make_graph(
        nodes, "ytk-conformance", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 10]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16, 10, 6])],
        [numpy_helper.from_array(v, k) for k, v in p.items()], value_info=typed)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    onnx.checker.check_model(model)
    onnx_path = directory / "model.onnx"
    onnx_path.write_bytes(model.SerializeToString())
    x = np.random.default_rng(1).standard_normal((1, 8, 6, 10)).astype(np.float32)
    npz = directory / "model.npz"
    np.savez(npz, x=x)
    return EngineModel(onnx=onnx_path, npz=npz, reference=_reference(x, p), node_names={n.name for n in nodes},
                       outputs=["y", "z"])
