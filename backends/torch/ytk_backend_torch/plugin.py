"""Registers the ``torch`` engine: a real GPU engine on PyTorch for machines without TensorRT.

Compile folds the ONNX for the static shapes of model.npz into an engine file (fp16 or fp32
weights, BatchNorm folded into its Conv, the exported spellings of GELU and SiLU run as one op each, the
MatMul-Softmax-MatMul chain of attention fused into one attention layer -- what TensorRT fuses in any
engine -- custom-op nodes bound to their plugin .so files) and
checks it runs on the GPU; profile measures it: per-layer median times named after the ONNX nodes,
end-to-end latency of CUDA-graph replays, and the outputs for model.npz.

Options, from ``[backends.torch]`` in ytk.toml (``ctx.config``) or ``CompileRequest.options`` (which
wins): ``device`` (``cuda`` default, ``cuda:1``, or ``cpu`` to check numerics without a GPU; the
figures are then the CPU's, labelled so), ``profile_iterations`` (timed eager runs behind the
per-layer medians, default 30) and ``mode``: ``eager`` (the default: every layer its own kernels),
``inductor`` or ``inductor-max-autotune`` (the graph between plugins compiled with torch.compile, so that
the engine's base is what a torch user would deploy; :mod:`ytk_backend_torch.fused`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import (ArchSpec, Availability, BackendInfo, CompileRequest, CompileResult, LayerTime,
                                  ProfileRequest, ProfileResult, write_text_atomic)

from . import __version__

NAME = "torch"
ENGINE_FILE = "engine.ytkplan"
LAYER_INFO = "layer_info.json"
BUILD_LOG = "build.log"
OUTPUTS = "outputs.npz"
RAW_PROFILE = "profile.trtexec.json"


def _probe(arch: ArchSpec | None = None) -> Availability:
    try:
        import torch
    except Exception as e:  # a broken torch install must not take `ytk backends` down
        return Availability(available=False, reason=f"torch not importable ({type(e).__name__})")
    from ytk_hookspecs.project_config import backend_table

    if str(backend_table(NAME).get("device", "")).strip().lower() == "cpu":
        # asked for in ytk.toml: the engine runs (and is timed) on this CPU, to check numerics without a GPU
        return Availability(available=True, reason="on this CPU ([backends.torch] device = \"cpu\"): numerics as "
                                                   "on a GPU, timings this CPU's, not the target's",
                            details={"device": "cpu", "torch": torch.__version__})
    if not torch.cuda.is_available():
        return Availability(available=False, reason="no CUDA device ([backends.torch] device = \"cpu\" in ytk.toml "
                                                    "runs it on the CPU, to check numerics)")
    name = torch.cuda.get_device_name(0)
    major, minor = torch.cuda.get_device_capability(0)
    sm = major * 10 + minor
    reason = f"CUDA device {name} (no TensorRT needed)"
    if arch is not None and arch.sm != sm:
        # Still usable, but the figures are this GPU's, not the target's: say so where it is chosen.
        reason += f"; it measures this sm{sm} GPU, not the sm{arch.sm} target"
    return Availability(available=True, reason=reason, details={"device": name, "sm": str(sm),
                                                                "torch": torch.__version__})


class TorchEngine:
    """:class:`ytk_hookspecs.roles.EngineBackend` on PyTorch (:func:`compile_engine`, :func:`profile_engine`)."""

    info = BackendInfo(name=NAME, roles=["engine"], version=__version__,
                       description="PyTorch GPU engine: ONNX executed in fp16 channels_last with folded "
                                   "BatchNorm, CUDA graphs, plugins through the launcher ABI (no TensorRT)",
                       auto_priority={"engine": 20})

    def availability(self, arch: ArchSpec | None = None) -> Availability:
        return _probe(arch)

    def compile(self, request: CompileRequest, ctx: StageContext) -> CompileResult:
        return compile_engine(request, ctx)

    def profile(self, request: ProfileRequest, ctx: StageContext) -> ProfileResult:
        return profile_engine(request, ctx)


@hookimpl
def ytk_register_backends(register):  # type: ignore[no-untyped-def]
    register(TorchEngine())


def _options(request: CompileRequest, ctx: StageContext) -> dict[str, str]:
    merged = {str(k): str(v) for k, v in (ctx.config or {}).items() if not isinstance(v, dict)}
    merged.update(request.options)
    return merged


def _int_option(options: dict[str, str], key: str, default: int) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise StageError(f"engine option {key}={raw!r}: expected a whole number") from None
    if v < 1:
        raise StageError(f"engine option {key}={raw!r}: must be at least 1")
    return v


def compile_engine(request: CompileRequest, ctx: StageContext) -> CompileResult:
    """Fold the ONNX into an engine file and check it runs on the device (see the module docstring)."""
    from .engine import build_plan, device_name, read_inputs, resolve_device, save_plan, tuned_kernels
    from .layer_info import build_layer_info
    from .program import Program

    from .fused import engine_mode

    t0 = time.perf_counter()
    options = _options(request, ctx)
    device = resolve_device(options.get("device"))
    mode = engine_mode(options.get("mode"))
    import torch

    with ctx.progress("torch engine: folding the graph") as task:
        plan, consts, bindings = build_plan(request.onnx, request.precision, request.plugins, task)
    out = Path(request.workdir)
    out.mkdir(parents=True, exist_ok=True)
    engine = save_plan(out / ENGINE_FILE, plan, consts, bindings)
    with ctx.progress(f"torch engine: building on {device}"), tuned_kernels(device):
        # Building the program loads every plugin and checks it can run here; one forward on the
        # real inputs autotunes cuDNN and proves the engine runs before anything is measured.
        program = Program(plan, consts, bindings, device)
        program(program.prepare_inputs(read_inputs(request.npz, plan)))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    info = build_layer_info(program)
    layer_info = info.write(out / LAYER_INFO)
    build_s = time.perf_counter() - t0
    log = [f"torch engine {__version__} (torch {torch.__version__}) on {device_name(device)}",
           f"onnx: {request.onnx} ({plan.stats.get('onnx_nodes', 0)} nodes, opset {plan.opset})",
           f"precision: {plan.precision}; activations channels_last for 4-D tensors",
           f"mode: {mode}" + ("" if mode == "eager" else " (the graph between plugins is compiled with torch.compile "
                                                         "when the engine is profiled; per-layer times stay op by op)"),
           f"folded: {plan.stats.get('folded_nodes', 0)} constant nodes, "
           f"{plan.stats.get('batchnorm_folded', 0)} BatchNorm into Conv",
           f"layers: {len(program.steps)} ({len(plan.layers)} from the graph, "
           f"{len(program.steps) - len(plan.layers)} input/output reformats)"]
    log += [f"plugin: {b.namespace}::{b.name} v{b.version} {b.path} sha256={b.sha256[:16]}" for b in plan.plugins]
    log.append(f"build: {build_s:.2f} s")
    build_log = out / BUILD_LOG
    write_text_atomic(build_log, "\n".join(log) + "\n")
    ctx.log.info("torch engine built", layers=len(program.steps), folded=plan.stats.get("folded_nodes", 0),
                 plugins=len(plan.plugins), device=str(device))
    # the mode is part of which engine this is: compile's summary and verify's table show it beside the torch
    # version, so an op-by-op base is never mistaken for a compiled one
    version = torch.__version__ if mode == "eager" else f"{torch.__version__} ({mode})"
    return CompileResult(engine=engine, backend=NAME, backend_version=version, simulated=False,
                         device=device_name(device), layer_info=layer_info, build_log=build_log, build_s=build_s,
                         extra={"device_type": device.type, "layers": len(program.steps), "mode": mode, **plan.stats})


def profile_engine(request: ProfileRequest, ctx: StageContext) -> ProfileResult:
    """Per-layer medians, CUDA-graph replay latencies and the outputs of a compiled engine."""
    from .engine import device_name, load_program, read_inputs, resolve_device, tuned_kernels, write_outputs
    from .fused import FusedProgram, engine_mode
    from .profiling import benchmark, export_profile, layer_times

    import json

    import torch

    creq = request.request
    options = _options(creq, ctx)
    device = resolve_device(options.get("device"))
    layer_iters = _int_option(options, "profile_iterations", 30)
    mode = engine_mode(options.get("mode"))
    program = load_program(Path(request.compile.engine), device)
    with tuned_kernels(device):
        inputs = program.prepare_inputs(read_inputs(creq.npz, program.plan))
        runner: Any = program
        if mode != "eager":
            runner = FusedProgram(program, mode)
            with ctx.progress(f"torch engine: compiling {runner.compiled_layers} layers with torch.compile "
                              f"({mode}, {sum(s.compiled for s in runner.segments)} piece(s) between plugins)"):
                try:
                    runner(inputs)  # the first call compiles
                except StageError:
                    raise
                except Exception as e:  # inductor's own failure: one line, and the way around it
                    first = (str(e).strip().splitlines() or [""])[0][:300]
                    raise StageError(f"torch.compile ({mode}) could not compile the engine's graph: "
                                     f"{type(e).__name__}: {first}; set mode = \"eager\" in [backends.torch] of "
                                     "ytk.toml to run it op by op") from None
        outputs = runner(inputs)
        out_path = write_outputs(Path(creq.workdir) / OUTPUTS, program.plan, outputs)
        with ctx.progress("torch engine: per-layer profile", total=layer_iters) as task:
            stats, event_cost = layer_times(program, inputs, request.warmup, layer_iters, task)
        with ctx.progress("torch engine: benchmark", total=request.iterations) as task:
            times, replay_out = benchmark(runner, inputs, request.warmup, request.iterations, task)
        alternatives = {}
        if mode != "eager":  # the op-by-op run of the same plan, timed the same way: the gain against both
            with ctx.progress("torch engine: benchmark op by op", total=request.iterations) as task:
                alternatives["eager (op by op)"], _ = benchmark(program, inputs, request.warmup, request.iterations,
                                                               task)
    if replay_out is not None:
        drift = max(float((a - b).abs().max()) for a, b in zip(outputs, replay_out)) if outputs else 0.0
        if not all(torch.isfinite(a).all() == torch.isfinite(b).all() for a, b in zip(outputs, replay_out)) \
                or drift > 1e-2 * max(1.0, max(float(a.abs().max()) for a in outputs)):
            raise StageError(f"the CUDA-graph replay of the engine disagrees with its eager run (max abs difference "
                             f"{drift:.3g}); a plugin probably depends on state outside the stream it is given.")
    raw = Path(creq.workdir) / RAW_PROFILE
    write_text_atomic(raw, json.dumps(export_profile([s.name for s in program.steps], stats, layer_iters), indent=1))
    layers = [LayerTime(name=s.name, type=s.type, median_ms=t.median_ms, average_ms=t.average_ms,
                        onnx_nodes=list(s.onnx_nodes), metadata=s.metadata or None)
              for s, t in zip(program.steps, stats)]
    ctx.log.info("torch engine profiled", layers=len(layers), median_ms=sorted(times)[len(times) // 2],
                 layer_sum_ms=round(sum(t.median_ms for t in stats), 3),
                 event_overhead_ms=round(event_cost, 5))
    return ProfileResult(layers=layers, iterations_ms=times, outputs=out_path, raw_profile=raw,
                         device=device_name(device), simulated=False, alternatives=alternatives)
