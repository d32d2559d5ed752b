"""Evaluate a carved ONNX on the CPU: standard nodes through onnxruntime, each custom-op node
through its region's ``.pt2`` reference (how the mock engine computes a carved model's outputs).

This is the numerical ground truth of a carve (it must reproduce model.reference.npz) and what a
simulated engine computes its outputs with. Standard nodes run in segments: every stretch of the
(topologically sorted) graph between custom-op nodes becomes one onnxruntime session.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ytk_hookspecs.models import PLUGIN_DOMAIN, PluginsFile
from ytk_hookspecs.pt2 import load_exported

from ytk_hookspecs.errors import StageError


@dataclass
class _Segment:
    nodes: list[Any]
    custom: bool


def _segments(graph: Any) -> list[_Segment]:
    segs: list[_Segment] = []
    for n in graph.node:
        custom = n.domain == PLUGIN_DOMAIN
        if custom or not segs or segs[-1].custom:
            segs.append(_Segment(nodes=[n], custom=custom))
        else:
            segs[-1].nodes.append(n)
    return segs


def _reference_paths(onnx_path: Path, prepare_dir: Path) -> dict[str, Path]:
    pj = prepare_dir / "plugins.json"
    out: dict[str, Path] = {}
    if pj.is_file():
        for p in PluginsFile.read(pj).plugins:
            if p.kernelgen_input:
                out[p.op_type] = prepare_dir / p.kernelgen_input
    return out


class CarvedRunner:
    """Reusable evaluator (sessions and references are built once)."""

    def __init__(self, onnx_path: Path, prepare_dir: Path | None = None,
                 defects: dict[str, str] | None = None) -> None:
        import onnx

        self.path = Path(onnx_path)
        self.prep = Path(prepare_dir) if prepare_dir else self.path.parent
        self.model = onnx.load(str(self.path))
        self.graph = self.model.graph
        self.inits = {t.name: t for t in self.graph.initializer}
        self.segments = _segments(self.graph)
        self.refs = _reference_paths(self.path, self.prep)
        self._sessions: dict[int, Any] = {}
        self._programs: dict[str, Any] = {}
        self.outputs = [o.name for o in self.graph.output]
        self.defects = dict(defects or {})  # op type -> a planted defect its kernel computes with
        # Last segment that reads each value, so big intermediates can be dropped early.
        self.last_use: dict[str, int] = {}
        for i, s in enumerate(self.segments):
            for n in s.nodes:
                for x in n.input:
                    self.last_use[x] = i

    def _session(self, idx: int, seg: _Segment, available: set[str]) -> tuple[Any, list[str], list[str]]:
        import onnx
        from onnx import helper

        from .engine import cpu_session

        if idx in self._sessions:
            return self._sessions[idx]
        produced = {o for n in seg.nodes for o in n.output}
        ins = []
        for n in seg.nodes:
            for x in n.input:
                if x and x not in produced and x not in self.inits and x not in ins:
                    ins.append(x)
        later = {x for s in self.segments[idx + 1:] for n in s.nodes for x in n.input}
        outs = [o for n in seg.nodes for o in n.output if o in later or o in self.outputs]
        vi = {v.name: v for v in list(self.graph.value_info) + list(self.graph.input) + list(self.graph.output)}
        inits = [self.inits[x] for n in seg.nodes for x in n.input if x in self.inits]
        seen: set[str] = set()
        inits = [t for t in inits if not (t.name in seen or seen.add(t.name))]  # type: ignore[func-returns-value]

        def info(name: str) -> Any:
            return vi[name] if name in vi else helper.make_empty_tensor_value_info(name)

        g = helper.make_graph(list(seg.nodes), f"segment{idx}", [info(x) for x in ins], [info(o) for o in outs], inits)
        m = helper.make_model(g, opset_imports=[o for o in self.model.opset_import if o.domain != PLUGIN_DOMAIN],
                              ir_version=self.model.ir_version)
        sess = cpu_session(m.SerializeToString())
        self._sessions[idx] = (sess, ins, outs)
        _ = onnx  # keep the import explicit for readers
        return self._sessions[idx]

    def _program(self, op_type: str) -> Any:
        if op_type not in self._programs:
            path = self.refs.get(op_type, self.prep / "plugin_candidates" / f"{op_type}.pt2")
            if not path.is_file():
                raise StageError(f"custom-op node type {op_type} has no region reference ({path} missing); the "
                                 "carved ONNX can only be evaluated inside the prepare directory that carved it")
            self._programs[op_type] = load_exported(path).module()
        return self._programs[op_type]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch
        from onnx import numpy_helper

        env: dict[str, np.ndarray] = dict(feeds)
        missing = [i.name for i in self.graph.input if i.name not in env]
        if missing:
            raise StageError(f"inputs missing for {self.path.name}: {missing}")
        for idx, seg in enumerate(self.segments):
            if seg.custom:
                n = seg.nodes[0]
                args = [torch.from_numpy(np.array(env[x] if x in env else numpy_helper.to_array(self.inits[x])))
                        for x in n.input]
                with torch.no_grad():
                    res = self._program(n.op_type)(*args)
                res = list(res) if isinstance(res, (tuple, list)) else [res]
                for name, t in zip(n.output, res):
                    env[name] = t.detach().cpu().numpy()
                    if n.op_type in self.defects:
                        from .kernelgen import apply_defect

                        env[name] = apply_defect(self.defects[n.op_type], env[name])
            else:
                sess, ins, outs = self._session(idx, seg, set(env))
                vals = sess.run(outs, {x: env[x] for x in ins})
                env.update(zip(outs, vals))
            for x in [k for k, last in self.last_use.items() if last == idx and k in env and k not in self.outputs]:
                env.pop(x, None)
        return {o: env[o] for o in self.outputs}


def run_carved_onnx(onnx_path: Path, feeds: dict[str, np.ndarray], prepare_dir: Path | None = None,
                    defects: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Outputs of ``onnx_path`` for ``feeds``; custom-op nodes are computed by their ``.pt2`` references
    (with ``defects``, by op type, applied: planted wrong kernels)."""
    return CarvedRunner(onnx_path, prepare_dir, defects).run(feeds)
