"""The eval harness: is a kernel variant correct on every case, and how fast is it, honestly?

Correctness goes through the one checker every kernel meets, :func:`ytk_hookspecs.admission.check_case`
(canaries around every buffer, poisoned outputs, a non-default stream, graph replays compared bit for
bit, inputs checked afterwards), with this generator's own cases and error budget (see :mod:`.cases`):
several seeds and distributions, large magnitudes included, plus captured site inputs, and a tolerance
per element from an fp32 reference. The built plugin that ships is checked again by the core's
admission gate; this is how the generator picks a variant worth shipping.

Timing is by CUDA events over graph replays after warm-up, median and spread, with rotating sets
larger than the L2; a time under the physical floor (bytes / measured copy bandwidth) is rejected as
a measurement bug, not reported as a win.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ytk_hookspecs.admission import AdmissionCase
from ytk_hookspecs.admission import check_case as check_launch
from ytk_hookspecs.launcher import LauncherLibrary

from .cases import Case
from .contract import bytes_moved, output_shape
from .regions import Region, SiteShape
from .timing import rotation_sets, time_launches

#: runs after the first launch while scoring variants (the core's admission gate runs more on the winner)
SCORING_REPEATS = 1


@dataclass
class CheckResult:
    ok: bool
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0      # max |out - ref| / max |ref|
    budget_used: float = 0.0      # max |out - ref| / tol (<= 1 passes)
    problems: list[str] = field(default_factory=list)


def alloc_output(shape: tuple[int, ...], device: Any) -> Any:
    """A channels_last fp16 output (timing only; correctness runs allocate their own guarded buffers)."""
    import torch

    return torch.empty(shape, dtype=torch.float16, device=device).contiguous(memory_format=torch.channels_last)


def _launch(lib: LauncherLibrary, ins: list[Any], out: Any, extents: list[int], ws: Any, device: Any) -> None:
    lib.launch([t.data_ptr() for t in ins], [out.data_ptr()], extents, ws.data_ptr() if ws is not None else None,
               _stream_handle(device))


def _stream_handle(device: Any) -> int | None:
    import torch

    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None


def check_case(lib: LauncherLibrary, case: Case, device: Any, fp16_weights: bool = False) -> CheckResult:
    """Run one case through the shared checker against this generator's reference and budget.
    ``fp16_weights``: the variant rounds its weights to fp16, the budget adds that rounding's bound."""
    if fp16_weights and case.tol_w16 is None:
        raise ValueError(f"{case.label}: no fp16-weight error bound for this region kind")
    tol = case.tol + case.tol_w16 if fp16_weights else case.tol
    out = check_launch(lib, AdmissionCase(case.label, list(case.kernel_inputs), [case.ref], [tol]), device,
                       repeats=SCORING_REPEATS)
    return CheckResult(ok=out.ok, max_abs_err=out.max_abs_err, max_rel_err=out.max_rel_err,
                       budget_used=out.budget_used, problems=out.problems)


@dataclass
class SiteTiming:
    median_ms: float
    spread_ms: float
    floor_ms: float
    graph: bool


def time_kernel(lib: LauncherLibrary, region: Region, site: SiteShape, make_inputs: Any, device: Any,
                copy_gbs: float, l2_bytes: int) -> SiteTiming:
    """Median time of one launch at ``site``'s shapes over rotating sets (see :mod:`.timing`)."""
    import torch

    moved = bytes_moved(region, site)
    n_sets = rotation_sets(moved, l2_bytes)
    sets = []
    for i in range(n_sets):
        ins = make_inputs(i)
        out = alloc_output(output_shape(region, site), device)
        extents = lib.extents([list(t.shape) for t in ins])
        nbytes = lib.workspace_bytes(extents)
        ws = torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None
        sets.append((ins, out, extents, ws))

    def launch(i: int) -> None:
        ins, out, extents, ws = sets[i]
        _launch(lib, ins, out, extents, ws, device)

    t = time_launches(launch, n_sets)
    floor_ms = moved / (copy_gbs * 1e9) * 1e3
    return SiteTiming(t.median_ms, t.spread_ms, floor_ms, t.graph)


def time_torch(module: Any, region: Region, site: SiteShape, make_inputs: Any, device: Any,
               l2_bytes: int) -> float:
    """The region's own torch ops in fp16 channels_last (the engine-less baseline), ms per call."""
    import torch

    moved = bytes_moved(region, site)
    n_sets = rotation_sets(moved, l2_bytes)
    sets = []
    for i in range(n_sets):
        ins = [t.half() if t.dtype == torch.float32 else t for t in make_inputs(i)]
        sets.append(ins)
    with torch.no_grad():
        t = time_launches(lambda i: module(*sets[i]), n_sets)
    return t.median_ms
