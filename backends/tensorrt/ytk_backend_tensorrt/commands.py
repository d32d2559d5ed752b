"""The trtexec command lines ytk runs: one to build the engine, one to measure it.

Build (compile)::

    trtexec --onnx=model.onnx --saveEngine=engine.plan [--fp16] [--int8] --dynamicPlugins=a.so ...
            --profilingVerbosity=detailed --exportLayerInfo=layer_info.json --skipInference [--shapes=...]

``--profilingVerbosity=detailed`` is a build option: it is what makes the engine keep per-layer names,
tactics and the ``[ONNX Layer: ...]`` metadata that ``--exportLayerInfo`` and the profiler report.

Measure (profile)::

    trtexec --loadEngine=engine.plan --dynamicPlugins=a.so ... --loadInputs='x':inputs/0.bin,...
            --iterations=N+W --warmUp=MS --duration=0 --avgRuns=1 --separateProfileRun
            --exportTimes=times.json --exportProfile=profile.json --exportOutput=outputs.json

``--iterations`` is a minimum ("Run at least N inference iterations") and ``--duration`` (seconds,
default 3) another, so ``--duration=0`` makes the count decide; ``--warmUp`` is milliseconds of
untimed runs before the timed ones. ``--separateProfileRun`` keeps the per-layer profiler out of the
timed run and adds a second run for it. ``--avgRuns=1`` prints one ``Average on 1 runs`` line per
inference: the per-iteration figures survive in the log even when ``--exportTimes`` does not.
Files are named relative to the working directory trtexec runs in: ``--loadInputs`` splits its value on
``,`` and ``:``, so no absolute path (which may hold either) ever reaches it.

Debug taps on TensorRT 10 (:mod:`.debug_taps`): the build takes an ONNX without the taps as outputs and
``--markDebug=a,b`` (names separated by commas); the timed run stays as above (a debug tensor whose
debug state is off costs no copy), and one more run reads them::

    trtexec --loadEngine=engine.plan --dynamicPlugins=a.so ... --loadInputs=... --iterations=1 --warmUp=0
            --duration=0 --saveDebugTensors=a:debug/0.bin,b:debug/1.bin

trtexec turns the debug state of every ``--saveDebugTensors`` tensor on for all the inferences of its
run, and its listener synchronises the stream and copies each to the host every time
(``samples/common/sampleInference.cpp``, ``debugTensorWriter.cpp``): in the timed run that would be
timed too. The option splits on ``,`` and then on the last ``:``, so the file names hold neither.

Plugin libraries go with ``--dynamicPlugins`` on TensorRT 8.6 and later (``IPluginRegistry::loadLibrary``:
TensorRT calls the library's ``getPluginCreators``/``getCreators``), with ``--plugins`` before (a plain
``dlopen``). Both runs need them: the engine holds plugin layers the loading run must resolve again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .versions import TrtVersion


@dataclass(frozen=True)
class BuildPlan:
    trtexec: str
    onnx: Path
    engine: str                      # relative to the run directory
    layer_info: str
    precision: str                   # fp16 | fp32
    plugins: Sequence[Path]
    version: TrtVersion
    shapes: str = ""                 # --shapes for inputs the ONNX leaves dynamic
    int8: bool = False
    workspace_mib: int | None = None
    extra: Sequence[str] = field(default_factory=tuple)
    debug_tensors: Sequence[str] = ()  # --markDebug (TensorRT 10 trtexec that has it; see debug_taps)


@dataclass(frozen=True)
class MeasurePlan:
    trtexec: str
    engine: str
    plugins: Sequence[Path]
    version: TrtVersion
    load_inputs: str                 # the --loadInputs value
    iterations: int                  # timed iterations wanted, warm-up iterations included
    warmup_ms: int
    times: str
    profile: str
    outputs: str
    shapes: str = ""
    cuda_graph: bool = False
    spin_wait: bool = False
    extra: Sequence[str] = field(default_factory=tuple)


def plugin_args(plugins: Sequence[Path], version: TrtVersion) -> list[str]:
    return [f"{version.plugin_flag}={Path(p)}" for p in plugins]


def build_command(plan: BuildPlan) -> list[str]:
    cmd = [plan.trtexec, f"--onnx={plan.onnx}", f"--saveEngine={plan.engine}"]
    if plan.precision == "fp16":
        cmd.append("--fp16")
    else:  # fp32 means fp32: TensorRT would otherwise pick TF32 tactics, outside fp32's tolerance
        cmd.append("--noTF32")
    if plan.int8:
        cmd.append("--int8")
    cmd += plugin_args(plan.plugins, plan.version)
    cmd += ["--profilingVerbosity=detailed", f"--exportLayerInfo={plan.layer_info}", "--skipInference"]
    if plan.shapes:
        cmd.append(f"--shapes={plan.shapes}")
    if plan.workspace_mib:
        cmd.append(f"--memPoolSize=workspace:{plan.workspace_mib}M")
    if plan.debug_tensors:
        cmd.append(f"--markDebug={','.join(plan.debug_tensors)}")
    return cmd + list(plan.extra)


@dataclass(frozen=True)
class CapturePlan:
    """One inference that writes the debug tensors' raw bytes (``--saveDebugTensors``)."""

    trtexec: str
    engine: str
    plugins: Sequence[Path]
    version: TrtVersion
    load_inputs: str
    files: Sequence[tuple[str, str]]  # (tensor, file relative to the run directory)
    shapes: str = ""


def _run_head(plan: "CapturePlan | MeasurePlan") -> list[str]:
    """What every inference run of a built engine starts with: the engine, its plugins, inputs and shapes."""
    cmd = [plan.trtexec, f"--loadEngine={plan.engine}", *plugin_args(plan.plugins, plan.version)]
    if plan.load_inputs:
        cmd.append(f"--loadInputs={plan.load_inputs}")
    if plan.shapes:
        cmd.append(f"--shapes={plan.shapes}")
    return cmd


def capture_command(plan: CapturePlan) -> list[str]:
    return _run_head(plan) + ["--iterations=1", "--warmUp=0", "--duration=0",
                  f"--saveDebugTensors={','.join(f'{name}:{path}' for name, path in plan.files)}"]


def measure_command(plan: MeasurePlan) -> list[str]:
    cmd = _run_head(plan)
    cmd += [f"--iterations={plan.iterations}", f"--warmUp={plan.warmup_ms}", "--duration=0", "--avgRuns=1",
            "--separateProfileRun", f"--exportTimes={plan.times}", f"--exportProfile={plan.profile}",
            f"--exportOutput={plan.outputs}"]
    if plan.cuda_graph:
        cmd.append("--useCudaGraph")
    if plan.spin_wait:
        cmd.append("--useSpinWait")
    return cmd + list(plan.extra)


def quote_input_name(name: str) -> str:
    """An input name as ``--loadInputs``/``--shapes`` take it: wrapped in single quotes when it holds the
    separators (``'Input:0'``, as trtexec's help says)."""
    if "'" in name:
        raise ValueError(f"input name {name!r} holds a single quote, which trtexec's spec syntax cannot carry")
    return f"'{name}'" if (":" in name or "," in name) else name


def load_inputs_spec(files: Sequence[tuple[str, str]]) -> str:
    """``name:file[,name:file]`` (the files relative to trtexec's working directory)."""
    return ",".join(f"{quote_input_name(name)}:{path}" for name, path in files)


def shapes_spec(shapes: Sequence[tuple[str, Sequence[int]]]) -> str:
    """``name:1x3x224x224[,...]``."""
    return ",".join(f"{quote_input_name(n)}:{'x'.join(str(d) for d in dims)}" for n, dims in shapes)
