"""compile and profile through the ``tensorrt`` Python package, for machines that have it but no trtexec
(TensorRT's pip wheels ship no trtexec).

It does what trtexec does for ytk, with the same public API in TensorRT 8.6 and 10 (the name-based
tensor API exists since 8.5): parse the ONNX with ``trt.OnnxParser``, load every plugin library into
the plugin registry (``IPluginRegistry.load_library``, 8.6+), build with ``ProfilingVerbosity.DETAILED``,
write the engine inspector's JSON (what ``--exportLayerInfo`` writes), then time ``execute_async_v3``
with CUDA events, profile the layers with an ``IProfiler`` and write the profile in trtexec's
``--exportProfile`` form, so both runners leave the same files. Device memory and events come from
torch. TensorRT's messages are logged in trtexec's ``[E] [TRT] ...`` shape, so :mod:`.explain` reads
them the same way. Debug taps on TensorRT 10 (:mod:`.debug_taps`): the network is parsed from the ONNX
without them as outputs and each is marked with ``INetworkDefinition.mark_debug``; after the timed runs
one more ``execute_async_v3`` with an ``IDebugListener`` set (``set_debug_listener``) and the taps' debug
state on (``set_tensor_debug_state``) copies each out during its callback.

Not run here (no TensorRT on the machines this was written on): see docs/tensorrt.md.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import (DEBUG_TENSORS, CompileRequest, CompileResult, ProfileRequest, ProfileResult,
                                  write_text_atomic)

from . import __version__
from .debug_taps import DERIVED_ONNX, derive_onnx, device_copy, host_copy, mark_debug_tensors, plan_python, pointer
from .explain import LoadContext, explain, last_error
from .io_files import binding_dtype, graph_io, read_npz, write_outputs_npz
from .options import EngineOptions
from .trtexec_runner import BUILD_LOG, ENGINE, LAYER_INFO, OUTPUTS, PROFILE, RUN_DIR, _layers, check_plugins
from .versions import TrtVersion

_SEVERITY = {0: "F", 1: "E", 2: "W", 3: "I", 4: "V"}
_LOADED: set[str] = set()


def _trt() -> Any:
    import tensorrt  # noqa: PLC0415

    return tensorrt


def _logger(lines: list[str]) -> Any:
    trt = _trt()

    class Logger(trt.ILogger):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)

        def log(self, severity: Any, msg: str) -> None:
            lines.append(f"[{_SEVERITY.get(int(severity), 'I')}] [TRT] {msg}")

    return Logger()


def _load_plugins(paths: list[Path], lines: list[str]) -> None:
    """Register each library once per process (loading one twice fails: its creators already exist)."""
    registry = _trt().get_plugin_registry()
    for p in paths:
        key = str(p.resolve())
        if key in _LOADED:
            continue
        handle = registry.load_library(key)
        if handle is None:
            lines.append(f"[E] [ytk] IPluginRegistry::loadLibrary({key}) failed")
            raise _Failed()
        _LOADED.add(key)


class _Failed(Exception):
    pass


def _fail(what: str, lines: list[str], log: Path, request: CompileRequest, version: TrtVersion) -> StageError:
    text = "\n".join(lines)
    found = explain(text, list(request.plugins), Path(request.onnx), request.precision,
                    LoadContext(version=version, flag="IPluginRegistry::loadLibrary"))
    msg = " | ".join(found) if found else last_error(text)
    return StageError(f"TensorRT could not {what}: {msg} (log: {log})")


def compile_engine(request: CompileRequest, ctx: StageContext, version: TrtVersion,
                   opts: EngineOptions) -> CompileResult:
    trt = _trt()
    check_plugins(list(request.plugins), version)
    run_dir = Path(request.workdir) / RUN_DIR
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / BUILD_LOG
    lines = [f"ytk tensorrt engine {__version__}: tensorrt {version} (Python API)"]
    t0 = time.perf_counter()
    taps = plan_python(list(request.debug_outputs), version, trt, ["--int8"] if opts.int8 else [])
    onnx = Path(request.onnx)
    if taps.as_debug_tensors:  # TensorRT 10: parsed without the taps as outputs, each marked a debug tensor
        onnx = derive_onnx(onnx.resolve(), taps.debug_tensors, run_dir / DERIVED_ONNX)
    if taps.exposed_as:
        lines.append(f"[ytk] {len(request.debug_outputs)} debug tap(s) exposed as {taps.exposed_as}"
                     f"{': ' + taps.note if taps.note else ''}")
    try:
        logger = _logger(lines)
        _load_plugins([Path(p.path) for p in request.plugins], lines)
        builder = trt.Builder(logger)
        flags = 0 if version.major >= 10 else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(onnx)):
            lines += [f"[E] [TRT] {parser.get_error(i).desc()}" for i in range(parser.num_errors)]
            raise _Failed()
        missing = mark_debug_tensors(network, taps.debug_tensors) if taps.as_debug_tensors else []
        if missing:
            lines.append(f"[E] [ytk] the parsed network has no tensor {', '.join(missing)} to mark as a debug tensor "
                         "(INetworkDefinition.mark_debug)")
            raise _Failed()
        config = builder.create_builder_config()
        if request.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        if opts.int8:
            config.set_flag(trt.BuilderFlag.INT8)
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
        if opts.workspace_mib:
            config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, opts.workspace_mib << 20)
        inputs, _ = graph_io(Path(request.onnx))
        if any(not t.static for t in inputs):
            arrays = read_npz(Path(request.npz))
            profile = builder.create_optimization_profile()
            for t in inputs:
                shape = tuple(arrays[t.name].shape)
                profile.set_shape(t.name, shape, shape, shape)
            config.add_optimization_profile(profile)
        with ctx.progress(f"TensorRT {version}: building the engine"):
            serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise _Failed()
        engine_path = run_dir / ENGINE
        engine_path.write_bytes(bytes(serialized))
        engine = trt.Runtime(logger).deserialize_cuda_engine(bytes(serialized))
        if engine is None:
            raise _Failed()
        layer_info = run_dir / LAYER_INFO
        write_text_atomic(layer_info, engine.create_engine_inspector().get_engine_information(
            trt.LayerInformationFormat.JSON))
    except _Failed:
        write_text_atomic(log, "\n".join(lines) + "\n")
        raise _fail("build the engine", lines, log, request, version) from None
    write_text_atomic(log, "\n".join(lines) + "\n")
    device = _device_name()
    return CompileResult(engine=engine_path, backend="tensorrt", backend_version=str(version), simulated=False,
                         device=device, layer_info=layer_info, build_log=log, build_s=time.perf_counter() - t0,
                         debug_outputs_as=taps.exposed_as, debug_outputs_note=taps.note,
                         extra={"runner": "python", "tensorrt": str(version), "onnx_built": str(onnx)})


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "GPU"


def _torch_dtype(np_dtype: np.dtype) -> Any:
    import torch

    return {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16, np.dtype(np.int32): torch.int32,
            np.dtype(np.int64): torch.int64, np.dtype(np.int8): torch.int8, np.dtype(np.uint8): torch.uint8,
            np.dtype(np.bool_): torch.bool}[np.dtype(np_dtype)]


def profile_engine(request: ProfileRequest, ctx: StageContext, version: TrtVersion,
                   opts: EngineOptions) -> ProfileResult:
    import torch

    trt = _trt()
    creq = request.request
    if not torch.cuda.is_available():
        raise StageError("the tensorrt engine's Python runner times the engine with torch's CUDA events, and torch "
                         "sees no CUDA device here")
    run_dir = Path(request.compile.engine).parent
    log = Path(request.compile.build_log) if request.compile.build_log else run_dir / BUILD_LOG
    lines: list[str] = []
    logger = _logger(lines)
    try:
        _load_plugins([Path(p.path) for p in creq.plugins], lines)
        engine = trt.Runtime(logger).deserialize_cuda_engine(Path(request.compile.engine).read_bytes())
        if engine is None:
            raise _Failed()
        context = engine.create_execution_context()
    except _Failed:
        with log.open("a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        raise _fail("load the engine", lines, log, creq, version) from None
    dev = torch.device("cuda")
    arrays = read_npz(Path(creq.npz))
    inputs, outputs = graph_io(Path(creq.onnx))
    keep: dict[str, Any] = {}
    for t in inputs:
        a = np.ascontiguousarray(arrays[t.name].astype(binding_dtype(t.dtype, version)))
        keep[t.name] = torch.from_numpy(a).to(dev)
        context.set_input_shape(t.name, tuple(a.shape))
        context.set_tensor_address(t.name, keep[t.name].data_ptr())
    for t in outputs:
        if request.compile.debug_outputs_as == DEBUG_TENSORS and t.name in creq.debug_outputs:
            continue  # a debug tensor, no binding: read by _debug_tensors
        shape = tuple(context.get_tensor_shape(t.name))
        dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(t.name)))
        keep[t.name] = torch.empty(shape, dtype=_torch_dtype(dtype), device=dev)
        context.set_tensor_address(t.name, keep[t.name].data_ptr())
    stream = torch.cuda.Stream(device=dev)
    times: list[float] = []
    with torch.cuda.stream(stream), ctx.progress("TensorRT: timing", total=request.iterations) as task:
        for _ in range(request.warmup):
            context.execute_async_v3(stream.cuda_stream)
        stream.synchronize()
        for _ in range(request.iterations):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            if not context.execute_async_v3(stream.cuda_stream):
                raise StageError(f"TensorRT: execute_async_v3 failed: {last_error(chr(10).join(lines))}")
            b.record(stream)
            b.synchronize()
            times.append(a.elapsed_time(b))
            task.advance()
    debug = set(creq.debug_outputs) if request.compile.debug_outputs_as == DEBUG_TENSORS else set()
    values = {t.name: keep[t.name].float().cpu().numpy() for t in outputs if t.name not in debug}
    if debug:
        values.update(_debug_tensors(trt, context, stream, list(creq.debug_outputs), lines, log))
    samples: dict[str, list[float]] = {}
    order: list[str] = []

    class Profiler(trt.IProfiler):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            if layer_name not in samples:
                samples[layer_name] = []
                order.append(layer_name)
            samples[layer_name].append(float(ms))

    context.profiler = Profiler()
    runs = max(10, request.iterations)
    with torch.cuda.stream(stream):
        for _ in range(runs):
            context.execute_async_v3(stream.cuda_stream)
            stream.synchronize()
    profile = run_dir / PROFILE
    write_text_atomic(profile, export_profile_text(order, samples, runs))
    with log.open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    npz = write_outputs_npz(values, outputs, run_dir / OUTPUTS, "the engine's output tensors")
    return ProfileResult(layers=_layers(profile, request.compile.layer_info), iterations_ms=times, outputs=npz,
                         raw_profile=profile, device=request.compile.device, simulated=False)


def _debug_tensors(trt: Any, context: Any, stream: Any, taps: list[str], lines: list[str],
                   log: Path) -> dict[str, np.ndarray]:
    """One more inference with a debug listener set and the taps' debug state on (off again after it): each tap
    is copied out during its callback, the only time its buffer is valid."""
    import torch

    got: dict[str, np.ndarray] = {}
    errors: list[str] = []
    wanted = set(taps)

    class Listener(trt.IDebugListener):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.IDebugListener.__init__(self)

        def process_debug_tensor(self, addr: Any, location: Any, dtype: Any, shape: Any, name: str,
                                 stream_handle: Any) -> bool:
            if name not in wanted:
                return True
            try:
                np_dtype = np.dtype(trt.nptype(dtype))
                dims = tuple(int(d) for d in shape)
                where = pointer(addr)
                got[name] = (device_copy(where, np_dtype, dims, int(stream_handle or 0))
                             if location == trt.TensorLocation.DEVICE else host_copy(where, np_dtype, dims))
            except Exception as e:  # noqa: BLE001  -- raised in TensorRT's callback: kept, reported after it
                errors.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
            return True

    listener = Listener()
    context.set_debug_listener(listener)
    refused = [t for t in taps if not context.set_tensor_debug_state(t, True)]
    if refused:
        raise StageError(f"TensorRT: set_tensor_debug_state refused {', '.join(refused)} (not debug tensors of this "
                         f"engine?); log: {log}")
    with torch.cuda.stream(stream):
        ok = context.execute_async_v3(stream.cuda_stream)
        stream.synchronize()
    for t in taps:
        context.set_tensor_debug_state(t, False)
    if not ok:
        raise StageError(f"TensorRT: execute_async_v3 failed reading the debug tensors: "
                         f"{last_error(chr(10).join(lines))}")
    if errors:
        raise StageError(f"TensorRT: could not copy debug tensor {errors[0]}")
    missing = [t for t in taps if t not in got]
    if missing:
        raise StageError(f"TensorRT called the debug listener for none of {', '.join(missing)}; log: {log}")
    return got


def export_profile_text(order: list[str], samples: dict[str, list[float]], count: int) -> str:
    """Per-layer samples in trtexec's ``--exportProfile`` layout (``Profiler::exportJSONProfile``)."""
    total = sum(sum(v) for v in samples.values()) or 1.0
    rows = [f"  {{ \"count\" : {count} }}"]
    for name in order:
        v = samples[name]
        rows.append(", " + json.dumps({"name": name, "timeMs": sum(v), "averageMs": sum(v) / max(1, count),
                                       "medianMs": statistics.median(v), "percentage": 100.0 * sum(v) / total}))
    return "[\n" + "\n".join(rows) + "\n]\n"
