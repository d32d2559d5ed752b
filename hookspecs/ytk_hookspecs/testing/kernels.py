"""What the conformance suite does with a kernel generator's output: ask, generate, build, run.

Everything goes through the public objects a backend registers and the public helpers of
:mod:`ytk_hookspecs` (the contract checks, :class:`~ytk_hookspecs.launcher.LauncherLibrary`,
:func:`~ytk_hookspecs.admission.check_case`); nothing here imports the ytk core.
"""

from __future__ import annotations

import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..context import StageContext
from ..loader import LoadedBackend
from ..models import (BuildRequest, BuildResult, KernelGenRequest, KernelGenResult, SupportAnswer, SupportRequest)
from .regions import WrittenRegion

__all__ = ["Generated", "build_kernel", "cuda_device", "generate", "relu_source", "run_numerics"]

#: How often a job reported "running" is fetched again.
POLL_S = 2.0


@dataclass
class Generated:
    """One region put to a generator: its answers and, when it was submitted, the job's outcome."""

    region: WrittenRegion
    sketch_answer: Any          # what supports() said to the sketch (anything: the suite checks it)
    answer: Any                 # what supports() said after the carve
    output: Path
    result: Any = None          # the KernelGenResult (or whatever submit/fetch returned); None: not submitted
    error: str = ""             # submit or fetch raised
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def claimed(self) -> bool:
        return isinstance(self.answer, SupportAnswer) and self.answer.supported

    @property
    def done(self) -> bool:
        return isinstance(self.result, KernelGenResult) and self.result.status == "done"


def _ask(backend: LoadedBackend, request: SupportRequest, ctx: StageContext) -> Any:
    try:
        return backend.impl.supports(request, ctx)
    except Exception as e:  # the suite reports it; it must not stop the other regions
        return e


def generate(backend: LoadedBackend, regions: list[WrittenRegion], arch: str, gpu: str, workdir: Path,
             timeout_s: float, config: dict[str, str] | None = None, precision: str = "fp16") -> list[Generated]:
    """Ask ``backend`` about every region and submit a job for each it claims, and for the first one it
    refuses with certainty (that job must not come back with a kernel); ``config`` is added to every
    request's (``--ytk-config``). Running jobs are fetched until done or ``timeout_s``."""
    out: list[Generated] = []
    refused_submitted = False
    for w in regions:
        ctx = StageContext(workdir=workdir / "jobs")
        cfg = dict(config or {})
        asked = {"precision": precision, "config": cfg, "arch": arch}
        sketch = _ask(backend, SupportRequest(sketch=w.region.sketch, **asked), ctx)  # type: ignore[arg-type]
        answer = _ask(backend, SupportRequest(candidate=w.candidate, reference=w.pt2, **asked), ctx)  # type: ignore[arg-type]
        g = Generated(region=w, sketch_answer=sketch, answer=answer,
                      output=workdir / "sources" / f"{w.candidate.name}.module_source.py")
        out.append(g)
        certain_no = isinstance(answer, SupportAnswer) and not answer.supported and answer.certain
        if not (g.claimed or (certain_no and not refused_submitted)):
            continue
        refused_submitted = refused_submitted or certain_no
        g.output.parent.mkdir(parents=True, exist_ok=True)
        request = KernelGenRequest(reference=w.pt2, gpu=gpu, config=cfg,
                                   output=g.output, candidate=w.candidate, prepare_dir=w.prepare_dir, arch=arch,
                                   precision=precision, plugin_name=w.candidate.name)  # type: ignore[arg-type]
        t0 = time.monotonic()
        try:
            g.result = backend.impl.submit(request, ctx)
            while isinstance(g.result, KernelGenResult) and g.result.status == "running":
                if time.monotonic() - t0 > timeout_s:
                    g.error = f"job {g.result.job_id} still running after {timeout_s:.0f} s (--ytk-timeout)"
                    break
                time.sleep(POLL_S)
                g.result = backend.impl.fetch(g.result.job_id, g.output, ctx)
        except Exception as e:
            g.error = f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"
        g.seconds = time.monotonic() - t0
    return out


def build_kernel(builder: LoadedBackend, source: Path, plugin_name: str, arch: str, out_dir: Path) -> Path:
    """Build ``source`` with ``builder`` as the core does (from a copy, which the builder may not change)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    staged = out_dir / "staged" / source.name
    staged.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, staged)
    so = out_dir / f"{plugin_name}.so"
    res = builder.impl.build_plugin(BuildRequest(source=staged, plugin_name=plugin_name, arch=arch, output=so),
                                    StageContext(workdir=out_dir / "work"))
    if not isinstance(res, BuildResult):
        raise AssertionError(f"builder {builder.name!r} returned {type(res).__name__}, not a BuildResult")
    return Path(res.so_path)


def cuda_device(sm: int | None = None) -> tuple[Any, str]:
    """``(torch device, "")`` of a local CUDA GPU (running sm ``sm`` code when given), else ``(None, why not)``."""
    from ..admission import local_cuda

    here = local_cuda(sm)
    return (None, here) if isinstance(here, str) else (here[0], "")


def run_numerics(lib: Any, region: WrittenRegion, device: Any, precision: str = "fp16") -> list[Any]:
    """Run a plugin's launcher (``lib``, a :class:`~ytk_hookspecs.launcher.LauncherLibrary`) through
    :func:`~ytk_hookspecs.admission.check_case` on every site's captured inputs and one freshly drawn set,
    against the region's ``.pt2`` in fp32; returns the case outcomes."""
    import numpy as np
    import torch

    from ..admission import AdmissionCase, check_case, kernel_inputs, low_precision, reference_and_tolerance
    from ..pt2 import load_exported

    program = load_exported(region.pt2).module().to(device)
    low = low_precision(program, precision)
    with np.load(region.io_npz) as z:
        sites = [[torch.from_numpy(np.array(z[f"site{k}.in{i}"])) for i in range(len(region.candidate.input_roles))]
                 for k in range(len(region.candidate.sites))]
    seed = secrets.randbelow(2 ** 31)
    gen = torch.Generator().manual_seed(seed)
    drawn = [torch.randn(t.shape, generator=gen) * float(t.std()) if role == "activation" else t
             for t, role in zip(sites[0], region.candidate.input_roles)]
    cases = [(f"site{k}/captured", ins) for k, ins in enumerate(sites)] + [(f"site0/seed{seed}", drawn)]
    outcomes = []
    for label, logical in cases:
        refs, tols, _ = reference_and_tolerance(program, low, logical, precision, device,
                                               [c.dtype for c in lib.meta.inputs])
        outcomes.append(check_case(lib, AdmissionCase(label, kernel_inputs(lib.meta, logical, device), refs, tols),
                                   device))
    return outcomes






def relu_source(name: str) -> Any:
    """A real fp16 ReLU kernel honouring the launcher ABI, for builders to build (and a GPU to run)."""
    from ..kernel_source import KernelSource, launcher_header
    from ..models import PluginMeta, TensorContract

    meta = PluginMeta(
        plugin_name=name, plugin_namespace="yasp", plugin_version="1", deployment_target="tensorrt",
        inputs=[TensorContract(name="x", dtype="float16", format="kLINEAR", shape=["in0[0]", "in0[1]"])],
        outputs=[TensorContract(name="y", dtype="float16", format="kLINEAR", shape=["in0[0]", "in0[1]"])],
        extents={"M": "in0[0]", "N": "in0[1]"}, launcher=f"{name}_launch")
    source = (
        "#include <cuda_fp16.h>\n"
        "__global__ void relu_kernel(const __half* x, __half* y, long long n) {\n"
        "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
        "  if (i < n) { float v = __half2float(x[i]); y[i] = __float2half(v > 0.f ? v : 0.f); }\n}\n"
        f"extern \"C\" int {name}_launch(const void* const* inputs, void* const* outputs, const int64_t* extents,\n"
        "                              void* workspace, cudaStream_t stream) {\n"
        "  long long n = (long long)extents[0] * extents[1];\n"
        "  if (n == 0) return 0;\n"
        "  relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>((const __half*)inputs[0], "
        "(__half*)outputs[0], n);\n"
        "  return (int)cudaGetLastError();\n}\n")
    return KernelSource(header=launcher_header(meta.launcher), source=source, meta=meta,
                        generator="ytk conformance suite")
