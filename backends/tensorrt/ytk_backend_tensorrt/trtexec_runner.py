"""compile and profile through trtexec (:mod:`.commands` says which flags and why).

Everything a run writes stays in ``<workdir>/tensorrt/``: the engine, trtexec's export files, the raw
inputs and ``build.log`` (both runs' command lines and output, appended in order), which the core
puts into the engine bundle. With debug taps on a TensorRT 10 trtexec that marks and saves debug
tensors (:mod:`.debug_taps`) it also holds the ONNX built without them and, after a third run, their
raw files in ``debug/``.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ytk_hookspecs import StageContext
from ytk_hookspecs.errors import StageError
from ytk_hookspecs.models import (DEBUG_TENSORS, ArchSpec, CompileRequest, CompileResult, LayerTime,
                                  PluginArtifact, ProfileRequest, ProfileResult)

from . import __version__
from .commands import (BuildPlan, CapturePlan, MeasurePlan, build_command, capture_command, load_inputs_spec,
                       measure_command, shapes_spec)
from .debug_taps import DEBUG_DIR, DERIVED_ONNX, capture_files, derive_onnx, plan_trtexec, read_raw, tap_tensors
from .explain import LoadContext, explain, last_error
from .io_files import graph_io, read_npz, write_input_files, write_outputs_npz
from .options import EngineOptions
from .probe import TrtexecTool
from .trtexec_files import (TimingRecord, TrtexecFormatError, metadata_nodes, parse_average_lines,
                            parse_layer_info, parse_outputs, parse_profile, parse_times, selected_device)
from .versions import TrtVersion

RUN_DIR = "tensorrt"
ENGINE = "engine.plan"
LAYER_INFO = "layer_info.json"
BUILD_LOG = "build.log"
PROFILE = "profile.json"
TIMES = "times.json"
OUTPUTS_JSON = "outputs.json"
OUTPUTS = "outputs.npz"
INPUTS = "inputs"


@dataclass(frozen=True)
class Target:
    """The trtexec to run and the TensorRT it is (the arch spec's when its banner named none)."""

    tool: TrtexecTool
    version: TrtVersion
    version_known: bool


def target_for(tool: TrtexecTool, arch: ArchSpec) -> Target:
    if tool.version is not None:
        return Target(tool, tool.version, True)
    return Target(tool, TrtVersion.parse(arch.tensorrt if "." in arch.tensorrt else f"{arch.tensorrt}.0"), False)


def check_plugins(plugins: list[PluginArtifact], version: TrtVersion) -> None:
    """Refuse before building what this TensorRT cannot load (one line per plugin)."""
    loadable = version.loadable_apis
    bad = [p for p in plugins if p.description.engine_api not in loadable]
    if not bad:
        return
    if not version.dynamic_plugins:
        raise StageError(f"TensorRT {version} loads plugin libraries only with --plugins (a plain dlopen), and ytk "
                         "plugins register through the entry points TensorRT 8.6 and later call; run the engine on "
                         "TensorRT 8.6 or newer")
    lines = [f"{Path(p.path).name} ({p.description.namespace}::{p.description.name}) is {p.description.engine_api}; "
             f"TensorRT {version} loads {' or '.join(loadable)}" for p in bad]
    raise StageError("plugin(s) this TensorRT cannot load (rebuild them with `ytk embedded build-plugin --engine "
                     "tensorrt`):\n  - " + "\n  - ".join(lines))


def _run(cmd: list[str], cwd: Path, log: Path, timeout_s: int, what: str) -> tuple[int, str]:
    with log.open("a", encoding="utf-8") as f:
        f.write(f"$ (cd {shlex.quote(str(cwd))} && {shlex.join(cmd)})\n")
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", timeout=timeout_s)
        out, rc = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        partial = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
        with log.open("a", encoding="utf-8") as f:
            f.write(partial + f"\n[ytk] killed after {timeout_s} s\n")
        raise StageError(f"trtexec {what} ran past {timeout_s} s and was stopped (raise the tensorrt engine option "
                         f"{'build' if what == 'build' else 'run'}_timeout_s); its output is in {log}") from None
    except OSError as e:
        raise StageError(f"could not run {cmd[0]}: {e.strerror}") from None
    with log.open("a", encoding="utf-8") as f:
        f.write(out if out.endswith("\n") else out + "\n")
        f.write(f"[ytk] exit status {rc}\n")
    return rc, out


def _failure(what: str, rc: int, out: str, log: Path, plugins: list[PluginArtifact], onnx: Path, precision: str,
             load: LoadContext) -> StageError:
    lines = explain(out, plugins, onnx, precision, load)
    if lines:
        return StageError(f"trtexec could not {what}: " + " | ".join(lines) + f" (log: {log})")
    return StageError(f"trtexec could not {what} (exit status {rc}): {last_error(out)} (log: {log})")


def _dynamic_shapes(onnx: Path, npz: Path) -> str:
    inputs, _ = graph_io(onnx)
    dynamic = [t for t in inputs if not t.static]
    if not dynamic:
        return ""
    arrays = read_npz(npz)
    return shapes_spec([(t.name, arrays[t.name].shape) for t in dynamic if t.name in arrays])


def compile_engine(request: CompileRequest, ctx: StageContext, target: Target, opts: EngineOptions) -> CompileResult:
    version = target.version
    check_plugins(list(request.plugins), version)
    run_dir = Path(request.workdir) / RUN_DIR
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / BUILD_LOG
    log.write_text(f"ytk tensorrt engine {__version__}: trtexec {target.tool.path}, TensorRT {version}"
                   f"{'' if target.version_known else ' (assumed from the arch spec: trtexec printed no version)'}\n")
    for stale in (ENGINE, LAYER_INFO, DERIVED_ONNX):
        (run_dir / stale).unlink(missing_ok=True)
    plugins = [Path(p.path).resolve() for p in request.plugins]
    taps = plan_trtexec(list(request.debug_outputs), version, target.tool,
                        (["--int8"] if opts.int8 else []) + list(opts.build_args), Path(request.onnx))
    onnx = Path(request.onnx).resolve()
    if taps.as_debug_tensors:  # TensorRT 10: built without the taps as outputs, each marked a debug tensor
        onnx = derive_onnx(onnx, taps.debug_tensors, run_dir / DERIVED_ONNX)
    if taps.exposed_as:
        with log.open("a", encoding="utf-8") as f:
            f.write(f"[ytk] {len(request.debug_outputs)} debug tap(s) exposed as {taps.exposed_as}"
                    f"{': ' + taps.note if taps.note else ''}\n")
    cmd = build_command(BuildPlan(
        trtexec=target.tool.path, onnx=onnx, engine=ENGINE, layer_info=LAYER_INFO,
        precision=request.precision, plugins=plugins, version=version,
        shapes=_dynamic_shapes(Path(request.onnx), Path(request.npz)), int8=opts.int8,
        workspace_mib=opts.workspace_mib, extra=opts.build_args, debug_tensors=taps.debug_tensors))
    load = LoadContext(version=version, flag=version.plugin_flag)
    t0 = time.perf_counter()
    with ctx.progress(f"trtexec: building the TensorRT {version} engine"):
        rc, out = _run(cmd, run_dir, log, opts.build_timeout_s, "build")
    build_s = time.perf_counter() - t0
    engine, layer_info = run_dir / ENGINE, run_dir / LAYER_INFO
    if rc != 0 or not engine.is_file():
        raise _failure("build the engine", rc, out, log, list(request.plugins), Path(request.onnx),
                       request.precision, load)
    if not layer_info.is_file():
        raise StageError(f"trtexec built {engine} but wrote no --exportLayerInfo file ({layer_info}); log: {log}")
    try:
        info = parse_layer_info(layer_info.read_text(errors="replace"), str(layer_info))
    except TrtexecFormatError as e:
        raise StageError(str(e)) from None
    ctx.log.info("tensorrt engine built", trtexec=target.tool.path, tensorrt=str(version), layers=len(info.layers),
                 plugins=len(plugins), build_s=round(build_s, 1))
    return CompileResult(engine=engine, backend="tensorrt", backend_version=str(version), simulated=False,
                         device=selected_device(out) or "GPU (trtexec named none)", layer_info=layer_info,
                         build_log=log, build_s=build_s, debug_outputs_as=taps.exposed_as,
                         debug_outputs_note=taps.note,
                         extra={"runner": "trtexec", "trtexec": target.tool.path, "tensorrt": str(version),
                                "command": shlex.join(cmd), "layers": len(info.layers),
                                "detailed_layer_info": info.detailed, "onnx_built": str(onnx)})


def pick_iterations(times: list[TimingRecord], warmup_ms: float, warmup: int, iterations: int,
                    origin: str) -> list[float]:
    """The ``iterations`` timed inferences that follow the warm-up: trtexec's own (by time) and ours (by count).

    trtexec counts an inference as warm-up when its compute starts before ``--warmUp`` ms (and from
    TensorRT 10 leaves those out of ``--exportTimes``); the first ``warmup`` after that are ytk's
    iteration-count warm-up.
    """
    timed = [t for t in times if t.start_compute_ms >= warmup_ms] or list(times)
    after = timed[warmup:]
    if len(after) < iterations:
        raise StageError(f"{origin}: trtexec timed {len(timed)} inference(s); {warmup} warm-up + {iterations} "
                         "measured were asked for")
    return [t.compute_ms for t in after[:iterations]]


def profile_engine(request: ProfileRequest, ctx: StageContext, target: Target, opts: EngineOptions) -> ProfileResult:
    creq = request.request
    version = target.version
    engine = Path(request.compile.engine)
    run_dir = engine.parent
    log = Path(request.compile.build_log) if request.compile.build_log else run_dir / BUILD_LOG
    inputs, outputs = graph_io(Path(creq.onnx))
    files = write_input_files(Path(creq.npz), inputs, run_dir / INPUTS, version)
    dynamic = [(name, shape) for (name, _, shape), t in zip(files, inputs) if not t.static]
    for stale in (PROFILE, TIMES, OUTPUTS_JSON):
        (run_dir / stale).unlink(missing_ok=True)
    engine_arg = ENGINE if engine.name == ENGINE else str(engine)
    plugins = [Path(p.path).resolve() for p in creq.plugins]
    load_inputs = load_inputs_spec([(name, f"{INPUTS}/{fname}") for name, fname, _ in files])
    cmd = measure_command(MeasurePlan(
        trtexec=target.tool.path, engine=engine_arg, plugins=plugins, version=version, load_inputs=load_inputs,
        iterations=request.iterations + request.warmup, warmup_ms=opts.warmup_ms, times=TIMES, profile=PROFILE,
        outputs=OUTPUTS_JSON, shapes=shapes_spec(dynamic), cuda_graph=opts.cuda_graph, spin_wait=opts.spin_wait,
        extra=opts.run_args))
    with ctx.progress(f"trtexec: timing {request.iterations} iterations and profiling the layers"):
        rc, out = _run(cmd, run_dir, log, opts.run_timeout_s, "run")
    if rc != 0:
        raise _failure("run the engine", rc, out, log, list(creq.plugins), Path(creq.onnx), creq.precision,
                       LoadContext(version=version, flag=version.plugin_flag))
    try:
        iterations = _iterations(run_dir, out, request, opts)
        layers = _layers(run_dir / PROFILE, request.compile.layer_info)
        values = parse_outputs((run_dir / OUTPUTS_JSON).read_text(errors="replace"), str(run_dir / OUTPUTS_JSON))
    except TrtexecFormatError as e:
        raise StageError(str(e)) from None
    except FileNotFoundError as e:
        raise StageError(f"trtexec ran but did not write {e.filename}; log: {log}") from None
    if request.compile.debug_outputs_as == DEBUG_TENSORS and creq.debug_outputs:
        capture = CapturePlan(trtexec=target.tool.path, engine=engine_arg, plugins=plugins, version=version,
                              load_inputs=load_inputs, files=capture_files(creq.debug_outputs),
                              shapes=shapes_spec(dynamic))
        values.update(_debug_tensors(capture, run_dir, log, creq, opts, ctx))
    npz = write_outputs_npz(values, outputs, run_dir / OUTPUTS, str(run_dir / OUTPUTS_JSON))
    ctx.log.info("tensorrt engine profiled", layers=len(layers), median_ms=sorted(iterations)[len(iterations) // 2])
    return ProfileResult(layers=layers, iterations_ms=iterations, outputs=npz, raw_profile=run_dir / PROFILE,
                         device=selected_device(out) or request.compile.device, simulated=False)


def _debug_tensors(plan: CapturePlan, run_dir: Path, log: Path, creq: CompileRequest, opts: EngineOptions,
                   ctx: StageContext) -> dict[str, np.ndarray]:
    """One more inference, untimed, with the taps' debug state on: trtexec writes each tap's raw bytes."""
    tensors = tap_tensors(Path(creq.onnx), [name for name, _ in plan.files])
    shutil.rmtree(run_dir / DEBUG_DIR, ignore_errors=True)
    (run_dir / DEBUG_DIR).mkdir(parents=True)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"[ytk] reading {len(plan.files)} debug tensor(s) in a run of their own (the timed run leaves their "
                "debug state off)\n")
    with ctx.progress(f"trtexec: reading {len(plan.files)} debug tensor(s)"):
        rc, out = _run(capture_command(plan), run_dir, log, opts.run_timeout_s, "run")
    if rc != 0:
        raise _failure("read the debug tensors", rc, out, log, list(creq.plugins), Path(creq.onnx), creq.precision,
                       LoadContext(version=plan.version, flag=plan.version.plugin_flag))
    values = {}
    for name, rel in plan.files:
        path = run_dir / rel
        if not path.is_file():
            raise StageError(f"trtexec wrote no {rel} for debug tensor {name!r} (--saveDebugTensors): the engine has "
                             f"no debug tensor of that name; log: {log}")
        values[name] = read_raw(path, tensors[name])
    return values


def _iterations(run_dir: Path, out: str, request: ProfileRequest, opts: EngineOptions) -> list[float]:
    times_file = run_dir / TIMES
    if times_file.is_file():
        times = parse_times(times_file.read_text(errors="replace"), str(times_file))
        return pick_iterations(times, opts.warmup_ms, request.warmup, request.iterations, str(times_file))
    # No --exportTimes file (a trtexec that ignores the flag): --avgRuns=1 left one line per inference.
    per_run = [a.gpu_ms for a in parse_average_lines(out) if a.runs == 1]
    got = per_run[request.warmup:request.warmup + request.iterations]
    if len(got) < request.iterations:
        raise StageError(f"trtexec wrote no {TIMES} and its log holds {len(per_run)} per-inference line(s); "
                         f"{request.warmup} warm-up + {request.iterations} measured were asked for")
    return got


def _layers(profile: Path, layer_info: Path | None) -> list[LayerTime]:
    prof = parse_profile(profile.read_text(errors="replace"), str(profile))
    info = {}
    if layer_info is not None and Path(layer_info).is_file():
        info = parse_layer_info(Path(layer_info).read_text(errors="replace"), str(layer_info)).by_name()
    layers = []
    for rec in prof.layers:
        li = info.get(rec.name)
        metadata = li.metadata if li is not None else ""
        layers.append(LayerTime(name=rec.name, type=li.layer_type if li is not None else "",
                                median_ms=rec.median_ms if rec.median_ms is not None else rec.average_ms,
                                average_ms=rec.average_ms, onnx_nodes=metadata_nodes(metadata),
                                metadata=metadata or None))
    if not layers:
        raise StageError(f"{profile}: trtexec's profile lists no layer")
    return layers
