"""Run the exported program once and keep the values at the region boundaries."""

from __future__ import annotations

from typing import Any

from ..errors import UsageError


def weight_values(ep: Any) -> dict[str, Any]:
    """Placeholder name -> tensor, for every parameter, buffer and lifted constant of the program."""
    out: dict[str, Any] = {}
    for spec in ep.graph_signature.input_specs:
        kind = spec.kind.name
        if kind == "USER_INPUT":
            continue
        tgt = spec.target
        if tgt in ep.state_dict:
            out[spec.arg.name] = ep.state_dict[tgt]
        elif tgt in ep.constants:
            out[spec.arg.name] = ep.constants[tgt]
    return out


def capture(ep: Any, user_args: tuple[Any, ...], wanted: set[str]) -> dict[str, Any]:
    """Execute ``ep``'s graph on ``user_args``; return the values of the FX nodes named in ``wanted``."""
    import torch
    from torch import fx

    weights = weight_values(ep)
    flat: list[Any] = []
    args_iter = iter(user_args)
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name == "USER_INPUT":
            flat.append(next(args_iter))
        else:
            if spec.arg.name not in weights:
                raise UsageError(f"internal carve error: no value for program input {spec.arg.name}")
            flat.append(weights[spec.arg.name])
    kept: dict[str, Any] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            r = super().run_node(n)
            if n.name in wanted:
                kept[n.name] = r.detach().clone() if isinstance(r, torch.Tensor) else r
            return r

    with torch.no_grad():
        Recorder(ep.graph_module).run(*flat)
    missing = wanted - set(kept)
    if missing:
        raise UsageError(f"internal carve error: values of {sorted(missing)[:3]} were not produced")
    return kept


def capture_onnx(proto: Any, feeds: dict[str, Any], wanted: list[str]) -> dict[str, Any]:
    """Values of the ONNX tensors in ``wanted`` for ``feeds``, from one onnxruntime run.

    Several times faster than re-running the exported program in Python on a CPU; the values agree
    with torch to float32 rounding, which the per-site self-check of the carve tolerates.
    """
    import numpy as np
    import onnx
    from onnx import helper

    from ..ort import cpu_session

    m = onnx.ModelProto()
    m.CopyFrom(proto)
    graph_inputs = {i.name for i in m.graph.input}
    have = {o.name for o in m.graph.output}
    types = {v.name: v.type.tensor_type.elem_type for v in list(m.graph.value_info) + list(m.graph.output)}
    extra = [w for w in wanted if w not in graph_inputs and w not in have]
    for w in extra:
        m.graph.output.append(helper.make_tensor_value_info(w, types.get(w) or onnx.TensorProto.FLOAT, None))
    sess = cpu_session(m.SerializeToString())
    names = [w for w in wanted if w not in graph_inputs]
    vals = dict(zip(names, sess.run(names, {k: np.asarray(v) for k, v in feeds.items()})))
    vals.update({w: np.asarray(feeds[w]) for w in wanted if w in graph_inputs})
    return vals
