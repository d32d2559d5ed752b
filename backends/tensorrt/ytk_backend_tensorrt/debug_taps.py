"""Debug taps on TensorRT: how they are exposed, the ONNX built without them, and the files they come back in.

``ytk embedded prepare --debug-taps`` makes every plugin boundary a graph output, and the core names
those outputs in ``CompileRequest.debug_outputs``. TensorRT 8.6 has no debug tensors, so there they stay
network outputs: extra bindings, each tensor materialised. TensorRT 10 has them (``NvInfer.h``:
``INetworkDefinition::markDebug``; ``NvInferRuntime.h``: ``IDebugListener::processDebugTensor``,
``IExecutionContext::setDebugListener``/``setTensorDebugState``, the 10.0.1 API reference on): the engine
is built from an ONNX whose outputs are the model's own (:func:`derive_onnx`), each tap is marked a
debug tensor, and after the timed run one more inference with the taps' debug state on reads them. A
debug tensor is no binding, but ``markDebug`` still keeps the tensor from being fused away (the 10.14
header says so of ``markUnfusedTensorsAsDebugTensors``, which "will not prevent fusion like markDebug()
does"): the tapped engine's latency is still not the untapped one's.

trtexec (``--markDebug``, ``--saveDebugTensors``) writes each tensor to the named file as its raw bytes
and nothing else (``DebugTensorWriter::processDebugTensor`` in ``samples/common/debugTensorWriter.cpp``:
``getNbBytes(type, volume)`` bytes from the device copy): the type is whatever TensorRT gave the tensor,
the shape the network's, neither in the file. :func:`read_raw` reads it back by the ONNX shape and the
bytes per element (4: fp32, 2: fp16), which is why a build whose tensors may be INT8 or BF16 (int8,
``--bf16``, ``--best``) keeps the taps as outputs. Which 10.x trtexec first had the two flags was not
pinned down (a 10.5.0 ``--help`` lists both): a trtexec whose ``--help`` does not list them keeps the
taps as outputs, and the bundle says so.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import DEBUG_TENSORS, NETWORK_OUTPUTS

from .io_files import GraphTensor, graph_io
from .probe import TrtexecTool
from .versions import TrtVersion

DERIVED_ONNX = "model.debug_taps.onnx"   # in the run directory: the ONNX the TensorRT 10 engine is built from
DEBUG_DIR = "debug"                       # the raw --saveDebugTensors files, one per tap
MARK_FLAG, SAVE_FLAG = "--markDebug", "--saveDebugTensors"
#: Build flags under which a tap's type may be one a raw file cannot be read back as (INT8, BF16, FP8).
AMBIGUOUS_BUILD_FLAGS = ("--int8", "--bf16", "--fp8", "--best")


@dataclass(frozen=True)
class TapExposure:
    """How one compile exposes its debug taps."""

    debug_tensors: tuple[str, ...] = ()    # marked debug tensors (empty: the taps stay network outputs)
    exposed_as: str | None = None          # NETWORK_OUTPUTS, DEBUG_TENSORS, or None: no taps asked for
    note: str = ""                         # why not debug tensors, on a TensorRT that has them

    @property
    def as_debug_tensors(self) -> bool:
        return self.exposed_as == DEBUG_TENSORS


def _outputs(note: str = "") -> TapExposure:
    return TapExposure((), NETWORK_OUTPUTS, note)


def _common(taps: Sequence[str], version: TrtVersion, build_flags: Sequence[str]) -> TapExposure | None:
    """The answer when it does not depend on the runner; None when debug tensors are possible."""
    if not taps:
        return TapExposure()
    if version.major < 10:
        return _outputs()  # TensorRT 8.6 has no debug tensors: network outputs, as the ONNX has them
    ambiguous = [f for f in AMBIGUOUS_BUILD_FLAGS if f in build_flags]
    if ambiguous:
        return _outputs(f"kept as network outputs: a build with {' '.join(ambiguous)} may give a tap a type "
                        "(INT8, BF16, FP8) its debug tensor's raw bytes cannot be read back as")
    return None


def plan_trtexec(taps: Sequence[str], version: TrtVersion, tool: TrtexecTool, build_flags: Sequence[str],
                 onnx: Path) -> TapExposure:
    """Debug tensors where this trtexec can mark and save them, else network outputs and why."""
    common = _common(taps, version, build_flags)
    if common is not None:
        return common
    if not tool.takes(MARK_FLAG, SAVE_FLAG):
        why = ("its --help could not be read" if not tool.flags else
               f"its --help lists no {' and no '.join(f for f in (MARK_FLAG, SAVE_FLAG) if f not in tool.flags)}")
        return _outputs(f"kept as network outputs: the trtexec of TensorRT {version} ({tool.path}) cannot mark and "
                        f"save debug tensors ({why})")
    commas = [t for t in taps if "," in t]
    if commas:
        return _outputs(f"kept as network outputs: tap(s) {', '.join(commas)} hold a comma, which trtexec's "
                        f"{MARK_FLAG}/{SAVE_FLAG} lists split on")
    _, outputs = graph_io(onnx)
    by_name = {t.name: t for t in outputs}
    dynamic = [t for t in taps if t in by_name and not by_name[t].static]
    if dynamic:
        return _outputs(f"kept as network outputs: tap(s) {', '.join(dynamic)} have a dynamic shape in the ONNX, "
                        "and a raw debug-tensor file does not carry its shape")
    return TapExposure(tuple(taps), DEBUG_TENSORS)


def plan_python(taps: Sequence[str], version: TrtVersion, trt: Any, build_flags: Sequence[str]) -> TapExposure:
    """Debug tensors where this tensorrt package has the API (mark_debug, IDebugListener, set_debug_listener,
    set_tensor_debug_state), else network outputs and why."""
    common = _common(taps, version, build_flags)
    if common is not None:
        return common
    wanted = (("INetworkDefinition", "mark_debug"), ("IExecutionContext", "set_debug_listener"),
              ("IExecutionContext", "set_tensor_debug_state"))
    missing = [f"{cls}.{attr}" for cls, attr in wanted if not hasattr(getattr(trt, cls, None), attr)]
    if not hasattr(trt, "IDebugListener"):
        missing.append("IDebugListener")
    if missing:
        return _outputs(f"kept as network outputs: the tensorrt {version} Python package has no "
                        f"{', '.join(missing)}")
    return TapExposure(tuple(taps), DEBUG_TENSORS)


def derive_onnx(src: Path, taps: Sequence[str], dest: Path) -> Path:
    """``src`` with the taps no longer graph outputs (their type and shape kept as value_info; every tap must
    be a graph output that a node computes), written to ``dest``. External weight files are copied beside
    ``dest``, where the ONNX parser looks for them (a tapped build of a model that large costs the disk)."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
    graph = model.graph
    outputs = {o.name: o for o in graph.output}
    computed = {name for node in graph.node for name in node.output}
    for t in taps:
        if t not in outputs:
            raise StageError(f"debug tap {t!r} is not an output of {src} (its outputs: {', '.join(outputs)})")
        if t not in computed:
            raise StageError(f"debug tap {t!r} of {src} is computed by no node, so TensorRT cannot mark it")
    kept = [o for o in graph.output if o.name not in set(taps)]
    if not kept:
        raise StageError(f"{src}: every output is a debug tap; the model has no output of its own left")
    typed = {v.name for v in graph.value_info}
    moved = [outputs[t] for t in taps if t not in typed]
    del graph.output[:]
    graph.output.extend(kept)
    graph.value_info.extend(moved)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _link_external_data(model, src.parent, dest.parent)
    from ytk_hookspecs.models import write_bytes_atomic

    write_bytes_atomic(dest, model.SerializeToString())
    return dest


def _link_external_data(model: Any, src_dir: Path, dest_dir: Path) -> None:
    import onnx

    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        if not location:
            continue
        target, link = (src_dir / location).resolve(), dest_dir / location
        if link.exists() or link.is_symlink():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        # copied: the onnx package refuses external data behind a symbolic or a hard link (a "hardlink attack")
        shutil.copyfile(target, link)


def tap_tensors(onnx: Path, taps: Sequence[str]) -> dict[str, GraphTensor]:
    """Each tap's ONNX type and shape (it is a graph output of the tapped ONNX)."""
    _, outputs = graph_io(onnx)
    by_name = {t.name: t for t in outputs}
    missing = [t for t in taps if t not in by_name]
    if missing:
        raise StageError(f"{onnx}: debug tap(s) {', '.join(missing)} are not among its outputs")
    return {t: by_name[t] for t in taps}


def _raw_type(onnx_dtype: np.dtype, itemsize: int) -> np.dtype | None:
    if np.issubdtype(onnx_dtype, np.floating):
        table = {4: np.float32, 2: np.float16}
    elif onnx_dtype == np.bool_:
        table = {1: np.bool_}
    elif np.issubdtype(onnx_dtype, np.integer):
        table = {8: np.int64, 4: np.int32, 1: np.int8}
    else:
        return None
    t = table.get(itemsize)
    return np.dtype(t) if t is not None else None


def read_raw(path: Path, tensor: GraphTensor) -> np.ndarray:
    """A ``--saveDebugTensors`` file: the tensor's bytes, C order, in the type TensorRT chose (fp32 or fp16 for a
    float tensor, told apart by the bytes per element), shaped as the ONNX says."""
    shape = tuple(int(d) for d in tensor.shape)  # static: plan_trtexec keeps dynamic taps as outputs
    data = Path(path).read_bytes()
    volume = int(np.prod(shape)) if shape else 1
    if volume == 0:
        return np.zeros(shape, dtype=np.float32 if np.issubdtype(tensor.dtype, np.floating) else tensor.dtype)
    if len(data) % volume:
        raise StageError(f"{path}: debug tensor {tensor.name!r} is {len(data)} bytes, not a whole number of "
                         f"elements for its shape {list(shape)} ({volume} elements)")
    itemsize = len(data) // volume
    raw = _raw_type(tensor.dtype, itemsize)
    if raw is None:
        raise StageError(f"{path}: debug tensor {tensor.name!r} has {itemsize} byte(s) per element, which is no type "
                         f"ytk reads a {tensor.dtype} tensor as (fp32 or fp16 for a float one)")
    return np.frombuffer(data, dtype=raw).reshape(shape)


def capture_files(taps: Sequence[str]) -> list[tuple[str, str]]:
    """(tensor, file relative to the run directory) per tap: names with neither ``:`` nor ``,``."""
    return [(t, f"{DEBUG_DIR}/{i}.bin") for i, t in enumerate(taps)]


# -- the Python API --------------------------------------------------------------------------------------------
def mark_debug_tensors(network: Any, taps: Sequence[str]) -> list[str]:
    """Mark each tap of a parsed ``INetworkDefinition`` as a debug tensor (``mark_debug``); returns the taps the
    network has no tensor of (the ONNX parser names a layer's output tensors after the ONNX values)."""
    by_name: dict[str, Any] = {}
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for j in range(layer.num_outputs):
            t = layer.get_output(j)
            by_name.setdefault(t.name, t)
    missing = []
    for name in taps:
        t = by_name.get(name)
        if t is None or not network.mark_debug(t):
            missing.append(name)
    return missing


def pointer(addr: Any) -> int:
    """The address ``IDebugListener.process_debug_tensor`` is given: an int in the pybind11 source
    (``reinterpret_cast<size_t>(addr)``), a capsule in the API reference's signature; both taken."""
    if isinstance(addr, int):
        return addr
    import ctypes

    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.argtypes, get.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p
    name = ctypes.pythonapi.PyCapsule_GetName
    name.argtypes, name.restype = [ctypes.py_object], ctypes.c_char_p
    try:
        value = get(addr, name(addr))
    except (TypeError, ValueError, ctypes.ArgumentError):
        raise StageError(f"TensorRT's debug listener was given an address ytk cannot read ({type(addr).__name__})"
                         ) from None
    return int(value or 0)


def host_copy(address: int, dtype: np.dtype, shape: Sequence[int]) -> np.ndarray:
    """A copy of a debug tensor in host memory (``TensorLocation.HOST``)."""
    import ctypes

    count = int(np.prod(shape)) if len(shape) else 1
    buf = (ctypes.c_char * (count * np.dtype(dtype).itemsize)).from_address(address)
    return np.frombuffer(bytes(buf), dtype=dtype).reshape(tuple(shape))


class _CudaView:
    """A device buffer as ``__cuda_array_interface__`` (version 2), for torch to copy from."""

    def __init__(self, address: int, dtype: np.dtype, shape: Sequence[int]) -> None:
        self.__cuda_array_interface__ = {"shape": tuple(int(d) for d in shape), "typestr": np.dtype(dtype).str,
                                         "data": (int(address), True), "version": 2, "strides": None}


def device_copy(address: int, dtype: np.dtype, shape: Sequence[int], stream: int) -> np.ndarray:
    """A copy of a debug tensor in device memory (``TensorLocation.DEVICE``), valid only during the callback:
    synchronise the stream TensorRT gives, then copy (as trtexec's writer does with cudaStreamSynchronize and
    cudaMemcpy)."""
    import torch

    if stream:
        torch.cuda.ExternalStream(int(stream)).synchronize()
    else:
        torch.cuda.synchronize()
    view = torch.as_tensor(_CudaView(address, dtype, shape), device="cuda")
    return view.cpu().numpy().copy()
