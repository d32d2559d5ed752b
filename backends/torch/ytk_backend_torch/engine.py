"""The engine's two jobs end to end: build (ONNX -> engine file) and run (engine file -> measurements).

These functions hold everything the hooks do, without pluggy, so tests and benchmarks call them
directly on any device (``cpu`` included, in fp32).
"""

from __future__ import annotations

import contextlib
import io
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import PluginArtifact, sha256_file, write_bytes_atomic

from .folding import fold_graph
from .onnx_graph import load_graph
from .plan import EnginePlan, load_plan, make_plan, save_plan  # noqa: F401  (save_plan: re-export)
from .plugin_nodes import PluginBinding, bind_plugins
from .program import Program


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()})"


def resolve_device(requested: str | None) -> torch.device:
    """``cuda`` (the default) or an explicit device; a missing GPU is a clear error."""
    dev = torch.device(requested or "cuda")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise StageError("the torch engine needs a CUDA device and this machine has none (torch.cuda is not "
                             "available). Use the mock engine here (--engine mock), or run on a GPU machine.")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    elif dev.type != "cpu":
        raise StageError(f"device {requested!r}: the torch engine runs on cuda or cpu")
    return dev


@contextlib.contextmanager
def tuned_kernels(device: torch.device) -> Iterator[None]:
    """cuDNN picks the fastest algorithm per shape (what an engine builder's tactic search does). TF32 is
    off: an fp32 layer computes in fp32, which -p fp32's tolerance (max rel 1e-4) holds it to; cuDNN's
    default TF32 convolutions missed it (1.8e-4 on an H100)."""
    old = (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.benchmark = device.type == "cuda"
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with torch.inference_mode():
            yield
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def build_plan(onnx_path: Path, precision: str, plugins: list[PluginArtifact],
               progress: Any = None) -> tuple[EnginePlan, dict[str, torch.Tensor], dict[str, PluginBinding]]:
    """Load, bind plugins, fold; returns the plan, its stored constants and the plugin bindings."""
    graph = load_graph(Path(onnx_path))
    bindings = bind_plugins(graph.nodes, plugins)
    fg = fold_graph(graph, bindings, origin=str(onnx_path), progress=progress)
    plan, consts = make_plan(fg, precision, sha256_file(onnx_path), bindings)
    return plan, consts, bindings


def read_inputs(npz: Path, plan: EnginePlan) -> list[np.ndarray]:
    """model.npz's arrays in the engine's input order, checked against the built shapes."""
    try:
        with np.load(npz, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise StageError(f"{npz}: inputs file not found") from None
    except Exception as e:
        raise StageError(f"{npz}: not a readable .npz ({type(e).__name__}: {e})") from None
    out = []
    for t in plan.inputs:
        if t.name not in arrays:
            raise StageError(f"{npz}: has no array {t.name!r} for the ONNX input of that name "
                             f"(it has {', '.join(sorted(arrays)) or 'none'})")
        a = arrays[t.name]
        if list(a.shape) != t.shape:
            raise StageError(f"{npz}: {t.name!r} has shape {list(a.shape)}; the ONNX input is {t.shape}")
        out.append(a)
    return out


def write_outputs(path: Path, plan: EnginePlan, outputs: list[torch.Tensor]) -> Path:
    buf = io.BytesIO()
    np.savez(buf, **{t.name: o.detach().float().cpu().numpy() for t, o in zip(plan.outputs, outputs)})
    write_bytes_atomic(Path(path), buf.getvalue())
    return Path(path)


def load_program(engine: Path, device: torch.device, libs: dict[str, Any] | None = None) -> Program:
    plan, consts, bindings = load_plan(engine)
    return Program(plan, consts, bindings, device, libs)
