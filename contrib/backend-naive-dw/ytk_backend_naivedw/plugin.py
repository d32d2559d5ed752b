"""A naive depthwise-conv generator: one CUDA thread per output element, fp16 NCHW, fp32 accumulation.
It decides from the candidate record (no torch), emits a kernel in the launcher ABI with its contract and
writes the job's report. Exact, not fast: ytk's contract checks, admission gate and numerics judge it."""

from __future__ import annotations

import uuid
from pathlib import Path

from ytk_hookspecs import StageContext, hookimpl
from ytk_hookspecs.candidates import request_candidate
from ytk_hookspecs.kernel_source import KernelSource, launcher_header, report_path
from ytk_hookspecs.models import (BackendInfo, Candidate, KernelGenRequest, KernelGenResult, KernelReport, PluginMeta,
                                  SupportAnswer, SupportRequest, TensorContract)

NAME = "naive-dw"
ACTS = {None: "v", "relu": "fmaxf(v, 0.f)", "hardswish": "v * fminf(fmaxf(v + 3.f, 0.f), 6.f) / 6.f"}
#: The kernel, a real CUDA file shipped as package data; the job prepends its #defines.
KERNEL = (Path(__file__).parent / "naive_dw.cuh").read_text()


def why_not(c: Candidate) -> str | None:
    """None when ``c`` is a depthwise conv this generator emits, else why not."""
    op = c.ops[0] if len(c.ops) == 1 else None
    if c.lift != "fold_conv_bn" or c.input_roles != ["activation", "weight", "bias"] or op is None or op.op != "conv":
        return "not a single conv with its weight and bias lifted"
    if not op.groups or not op.channels_in or op.groups != op.channels_in or op.channels_out != op.channels_in:
        return f"not depthwise (groups {op.groups}, {op.channels_in} -> {op.channels_out} channels)"
    if len(set(op.kernel)) != 1 or len(set(op.stride)) != 1 or len(set(op.padding)) != 1 or set(op.dilation) != {1}:
        return f"kernel {op.kernel}, stride {op.stride}, padding {op.padding}, dilation {op.dilation}: square only"
    if op.activation not in ACTS or op.normalisation:
        return f"activation {op.activation} / norm {op.normalisation} is not one of {sorted(map(str, ACTS))}"
    return None


class NaiveDepthwise:
    info = BackendInfo(name=NAME, roles=["kernelgen"], version="0.1.0",
                       description="example: one thread per output of a depthwise conv (fp16 NCHW)")

    def supports(self, request: SupportRequest, ctx: StageContext) -> SupportAnswer:
        if request.candidate is None:  # propose asks with the sketch only, before any carve
            kind = request.sketch.kind if request.sketch is not None else "unknown"
            ok = kind == "depthwise_conv"
            return SupportAnswer(supported=ok, certain=False, backend=NAME,
                                 why="a depthwise conv" if ok else f"a {kind} region, not a depthwise conv")
        why = why_not(request.candidate) or (f"precision {request.precision}" if request.precision != "fp16" else None)
        return SupportAnswer(supported=why is None, backend=NAME, why=why or "a depthwise conv",
                             kind="depthwise_conv" if why is None else None)

    def submit(self, request: KernelGenRequest, ctx: StageContext) -> KernelGenResult:
        job = f"{NAME}-{uuid.uuid4().hex[:8]}"
        cand = request_candidate(request)
        why = "no candidates.json entry for the region" if cand is None else why_not(cand)
        if why or request.reoptimize is not None:  # nothing smarter to offer a plugged region
            return KernelGenResult(job_id=job, status="failed", message=why or "no faster variant to offer")
        op, name = cand.ops[0], cand.name
        k, s, p = op.kernel[0], op.stride[0], op.padding[0]
        x = [f"in0[{a}]" for a in range(4)]
        out = [x[0], x[1], f"(in0[2] + {2 * p} - {k})//{s} + 1", f"(in0[3] + {2 * p} - {k})//{s} + 1"]
        meta = PluginMeta(plugin_name=name, plugin_namespace=cand.namespace, plugin_version=cand.version,
                          deployment_target=request.deployment_target, launcher=f"{name}_launch",
                          inputs=[TensorContract(name="x", dtype="float16", shape=x),
                                  TensorContract(name="w", dtype="float32", role="weight",
                                                 shape=[f"in1[{a}]" for a in range(4)]),
                                  TensorContract(name="b", dtype="float32", role="bias", shape=["in2[0]"])],
                          outputs=[TensorContract(name="y", dtype="float16", shape=out)],
                          extents=dict(zip("NCHW", x)) | {"OH": out[2], "OW": out[3]})
        source = (f"#define K {k}\n#define S {s}\n#define P {p}\n#define ACT ({ACTS[op.activation]})\n"
                  + KERNEL.replace("LAUNCH", meta.launcher))
        KernelSource(header=launcher_header(meta.launcher), source=source, meta=meta, generator=NAME).write(
            request.output)
        report = KernelReport(plugin_name=name, backend=NAME, job_id=job, region_kind="depthwise_conv",
                              measured_on="nothing (not measured)", simulated=False, winner="naive",
                              error_budget="fp32 accumulation, fp16 output", candidates=[])
        return KernelGenResult(job_id=job, status="done", source=Path(request.output),
                               report=report.write(report_path(Path(request.output))))

    def fetch(self, job_id: str, output: Path, ctx: StageContext) -> KernelGenResult | None:
        return None  # every job finishes inside submit


@hookimpl
def ytk_register_backends(register):  # type: ignore[no-untyped-def]
    register(NaiveDepthwise())
