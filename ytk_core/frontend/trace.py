"""Step 1: trace model.py, export ONNX, write inputs, reference outputs and fx_nodes.json."""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ytk_hookspecs import StageContext
from ytk_hookspecs.models import FxNodesFile, TensorInfo, TraceRequest, TraceResult
from ytk_hookspecs.models.base import sha256_file, write_bytes_atomic

from ..errors import UsageError
from .export import export_onnx, export_program, output_label
from .fxmap import NON_COMPUTE_OPS, build_fx_nodes, onnx_to_fx, strip_metadata
from .loader import load_model, user_code

FX_NODES = "fx_nodes.json"


@dataclass
class TraceState:
    """The last trace of this process, so a carve right after it reuses the export (no second export)."""

    onnx_sha256: str
    loaded: Any
    onnx_program: Any


#: Recent traces of this process by ONNX sha256 (a few: tests and autoloop prepare several models).
RECENT_TRACES: dict[str, TraceState] = {}
_KEEP = 4


def remember(state: TraceState) -> None:
    RECENT_TRACES.pop(state.onnx_sha256, None)
    RECENT_TRACES[state.onnx_sha256] = state
    while len(RECENT_TRACES) > _KEEP:
        RECENT_TRACES.pop(next(iter(RECENT_TRACES)))


def save_npz_atomic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_bytes_atomic(path, buf.getvalue())


def check_writable(*paths: Path) -> None:
    """Fail before any work if an output cannot be written (nothing half-written afterwards, and no folder
    made for outputs that are never written: the stage creates its folders when it writes)."""
    from ..stages.inputs import output_file

    for p in paths:
        output_file(Path(p), "output path")


def check_export(proto: Any, in_names: list[str], out_names: list[str], args: Any, ref: list[Any]) -> None:
    """Exporters have bugs (one dropped LiteMLA's eps): the ONNX must reproduce torch before anyone builds on it."""
    from ..ort import cpu_session

    sess = cpu_session(proto.SerializeToString())
    got = sess.run(out_names, {n: a.detach().cpu().numpy() for n, a in zip(in_names, args)})
    bad = []
    for name, g, r in zip(out_names, got, ref):
        r = r.detach().cpu().numpy()
        scale = float(np.abs(r).max()) or 1.0
        err = float(np.abs(g - r).max()) if np.isfinite(g).all() else float("nan")
        if not err <= 1e-3 * scale:
            bad.append(f"{name}: max abs error {err:.3g} (output magnitude {scale:.3g})")
    if bad:
        raise UsageError("the exported ONNX does not reproduce the torch model on onnxruntime (" + "; ".join(bad) +
                         "). This is an exporter bug or an op whose ONNX translation differs from torch; nothing "
                         "was written. Set YTK_SKIP_EXPORT_CHECK=1 to write it anyway.")


def _flatten_outputs(out: Any) -> tuple[list[Any], list[str]]:
    """The model's output tensors in the exporter's order, and what the model calls each (:func:`output_label`)."""
    import torch

    leaves, _ = torch.utils._pytree.tree_flatten_with_path(out)
    pairs = [(x, output_label(path)) for path, x in leaves if isinstance(x, torch.Tensor)]
    return [x for x, _ in pairs], [label for _, label in pairs]


def _consumed(graph: Any) -> set[str]:
    """Every tensor name a node of ``graph`` (or of a subgraph in its attributes) reads, and its outputs."""
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in [attr.g, *attr.graphs] if attr.HasField("g") else attr.graphs:
                names |= _consumed(sub)
    return names


def trace_model(request: TraceRequest, ctx: StageContext) -> TraceResult:
    import onnx
    import torch

    t0 = time.perf_counter()
    check_writable(request.onnx_out, request.npz_out, request.reference_out, request.onnx_out.parent / FX_NODES)
    with ctx.progress("loading model.py"):
        loaded = load_model(request.model_path)
    with ctx.progress("tracing with torch.export"):
        program = export_program(loaded.model, loaded.args, loaded.path)
    with ctx.progress("exporting ONNX (torch dynamo exporter)"):
        onnx_program = export_onnx(program, loaded.args, loaded.path, request.opset)
    proto = onnx_program.model_proto
    with ctx.progress("computing torch reference outputs"):
        with torch.no_grad(), user_code(loaded.path, "Model.forward"):
            ref, labels = _flatten_outputs(loaded.model(*loaded.args))
    in_names = [i.name for i in proto.graph.input]
    out_names = [o.name for o in proto.graph.output]
    if len(in_names) != len(loaded.args):
        raise UsageError(f"{request.model_path}: the ONNX graph has {len(in_names)} inputs but get_fwd_args() gave "
                         f"{len(loaded.args)}; unused or constant-folded inputs are not supported")
    unused = [(i, n) for i, n in enumerate(in_names) if n not in _consumed(proto.graph)]
    if unused:
        i, n = unused[0]
        raise UsageError(f"{request.model_path}: forward() never uses its input {n!r} (item {i} of get_fwd_args()); "
                         "an engine drops an unused input, and its inputs no longer match model.npz: remove it from "
                         "forward() and get_fwd_args()")
    if len(out_names) != len(ref):
        raise UsageError(f"{request.model_path}: the model returns {len(ref)} tensors but the ONNX graph has "
                         f"{len(out_names)} outputs; return tensors only (a tuple, list or dict of tensors)")
    with ctx.progress("mapping ONNX nodes to torch modules"):
        graph = onnx_program.exported_program.graph
        onnx_map = onnx_to_fx(proto, graph)
        fx_nodes = build_fx_nodes(graph, onnx_map, type(loaded.model).__name__)
        fx_names = {n.name for n in fx_nodes}
        compute = [n for n in proto.graph.node if n.op_type not in NON_COMPUTE_OPS]
        mapped = [n for n in compute if onnx_map.get(n.name) in fx_names]
        unmapped = sorted(n.name for n in compute if onnx_map.get(n.name) not in fx_names)
        strip_metadata(proto)
    with ctx.progress("checking the ONNX against torch (onnxruntime)"):
        try:
            onnx.checker.check_model(proto)
        except onnx.checker.ValidationError as e:
            raise UsageError(f"the exported ONNX does not pass the ONNX checker: {str(e).splitlines()[0]}") from None
        if os.environ.get("YTK_SKIP_EXPORT_CHECK") != "1":
            check_export(proto, in_names, out_names, loaded.args, ref)
    with ctx.progress("writing artifacts"):
        write_bytes_atomic(request.onnx_out, proto.SerializeToString())
        save_npz_atomic(request.npz_out, {n: a.detach().cpu().numpy() for n, a in zip(in_names, loaded.args)})
        save_npz_atomic(request.reference_out, {n: r.detach().cpu().numpy() for n, r in zip(out_names, ref)})
        fx_path = request.onnx_out.parent / FX_NODES
        FxNodesFile(model=str(loaded.path), onnx=request.onnx_out.name, onnx_sha256=sha256_file(request.onnx_out),
                    torch_version=torch.__version__, nodes=fx_nodes, onnx_compute_nodes=len(compute),
                    onnx_mapped_nodes=len(mapped), unmapped_onnx_nodes=unmapped).write(fx_path)
    remember(TraceState(onnx_sha256=sha256_file(request.onnx_out), loaded=loaded, onnx_program=onnx_program))
    return TraceResult(
        onnx=request.onnx_out, npz=request.npz_out, reference=request.reference_out, fx_nodes=fx_path,
        fx_node_count=len(fx_nodes), onnx_node_count=len(proto.graph.node),
        coverage=len(mapped) / max(1, len(compute)),
        inputs=[TensorInfo(name=n, shape=list(a.shape), dtype=str(a.dtype).replace("torch.", ""))
                for n, a in zip(in_names, loaded.args)],
        outputs=[TensorInfo(name=n, shape=list(r.shape), dtype=str(r.dtype).replace("torch.", ""))
                 for n, r in zip(out_names, ref)],
        output_labels={n: lb for n, lb in zip(out_names, labels) if lb},
        wall_s=time.perf_counter() - t0)
