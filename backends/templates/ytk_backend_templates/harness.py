"""The eval harness: is a kernel variant correct on every case, and how fast is it, honestly?

Defences, each against a failure published kernel-generation systems suffered:
- outputs are fresh allocations (never aliased with inputs), poisoned with NaN before every launch
  and framed by guard zones that must be untouched afterwards (unwritten or out-of-bounds writes);
- several seeds and distributions, large magnitudes included, plus captured site inputs;
- inputs compared bit for bit after the run (a kernel must not scribble on them);
- every case run twice and the outputs compared bit for bit (races, uninitialised reads);
- tolerance from an fp32 reference with a stated error budget (see :mod:`.cases`);
- timing by CUDA events over graph replays after warm-up, median and spread, with rotating sets
  larger than the L2; a time under the physical floor (bytes / measured copy bandwidth) is
  rejected as a measurement bug, not reported as a win.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ytk_backend_nvcc.launcher import LauncherLibrary

from .cases import Case
from .contract import bytes_moved, output_shape
from .regions import Region, SiteShape
from .timing import rotation_sets, time_launches

GUARD = 4096  # elements of guard zone on each side of an output


@dataclass
class CheckResult:
    ok: bool
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0      # max |out - ref| / max |ref|
    budget_used: float = 0.0      # max |out - ref| / tol (<= 1 passes)
    problems: list[str] = field(default_factory=list)


def _bits(t: Any) -> Any:
    import torch

    return t.view(torch.int16) if t.dtype == torch.float16 else t.view(torch.int32)


def alloc_output(shape: tuple[int, ...], device: Any) -> tuple[Any, Any]:
    """A channels_last fp16 output inside a larger buffer whose ends are guard zones."""
    import torch

    n, c, h, w = shape
    numel = n * c * h * w
    buf = torch.empty(numel + 2 * GUARD, dtype=torch.float16, device=device)
    out = buf[GUARD:GUARD + numel].view(n, h, w, c).permute(0, 3, 1, 2)
    return buf, out


def _guard_pattern(buf: Any) -> None:
    import torch

    buf[:GUARD].view(torch.int16).fill_(0x7E55)   # a NaN payload no kernel writes by accident
    buf[-GUARD:].view(torch.int16).fill_(0x7E55)


def _launch(lib: LauncherLibrary, ins: list[Any], out: Any, extents: list[int], ws: Any, device: Any) -> None:
    lib.launch([t.data_ptr() for t in ins], [out.data_ptr()], extents, ws.data_ptr() if ws is not None else None,
               _stream_handle(device))


def _stream_handle(device: Any) -> int | None:
    import torch

    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_case(lib: LauncherLibrary, case: Case, device: Any, fp16_weights: bool = False) -> CheckResult:
    """Run one case twice on poisoned, guarded outputs; compare with the reference and itself.
    ``fp16_weights``: the variant rounds its weights to fp16, the budget adds that rounding's bound."""
    import torch

    if fp16_weights and case.tol_w16 is None:
        raise ValueError(f"{case.label}: no fp16-weight error bound for this region kind")
    tol = case.tol + case.tol_w16 if fp16_weights else case.tol
    res = CheckResult(ok=True)
    ins = case.kernel_inputs
    shape = tuple(case.ref.shape)
    extents = lib.extents([list(t.shape) for t in ins])
    nbytes = lib.workspace_bytes(extents)
    ws = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device) if nbytes else None
    before = [_bits(t).clone() for t in ins]
    outs = []
    for run in range(2):
        buf, out = alloc_output(shape, device)
        buf.fill_(float("nan"))
        _guard_pattern(buf)
        if ws is not None:
            ws.view(torch.uint8).fill_(0xFF)  # a kernel must not rely on a zeroed workspace
        _launch(lib, ins, out, extents, ws, device)
        _sync(device)
        if not (torch.equal(buf[:GUARD].view(torch.int16), torch.full_like(buf[:GUARD].view(torch.int16), 0x7E55))
                and torch.equal(buf[-GUARD:].view(torch.int16), torch.full_like(buf[-GUARD:].view(torch.int16), 0x7E55))):
            res.ok = False
            res.problems.append(f"{case.label}: wrote outside its output (guard zone changed)")
        outs.append(out)
    for i, (t, b) in enumerate(zip(ins, before)):
        if not torch.equal(_bits(t), b):
            res.ok = False
            res.problems.append(f"{case.label}: input {i} changed by the kernel")
    if not torch.equal(_bits(outs[0]), _bits(outs[1])):
        res.ok = False
        res.problems.append(f"{case.label}: two runs on the same inputs differ bit-wise (race or uninitialised read)")
    out = outs[0].float()
    finite = torch.isfinite(out)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        res.ok = False
        res.problems.append(f"{case.label}: {bad} output element(s) NaN/Inf or never written")
    err = (out - case.ref).abs()
    err = torch.where(finite, err, torch.full_like(err, float("inf")))
    res.max_abs_err = float(err.max())
    ref_max = float(case.ref.abs().max())
    res.max_rel_err = res.max_abs_err / ref_max if ref_max > 0 else res.max_abs_err
    res.budget_used = float((err / tol).max())
    if res.budget_used > 1.0:
        res.ok = False
        idx = int(torch.argmax(err / tol))
        res.problems.append(f"{case.label}: error {res.max_abs_err:.3g} exceeds the budget ({res.budget_used:.3g}x "
                            f"of the tolerance at flat index {idx})")
    return res


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
        _, out = alloc_output(output_shape(region, site), device)
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
