"""Running a built plugin's launcher against references, so that no wrong kernel passes for right.

This is the one place where a kernel is checked on the GPU: the core's admission gate runs every
shipped ``.so`` through :func:`check_case`, and a kernel generator that scores its own variants
calls the same function with its own tolerances. torch is imported only when called.

What one :func:`check_case` does, and which cheat each step catches:

- every buffer (each input, each output, the workspace) is its own allocation with a canary zone
  on both sides (the buffer's own size, at least 16 MiB and at most 256 MiB), and sentinel blocks lie
  between the groups of buffers: writes outside a buffer, near or far, change a canary;
- the references, tolerances and inputs are fingerprinted before the first launch (three exact integer
  sums over their bits, kept on the host) and checked against those fingerprints after the last: a
  kernel that changes an input, or rewrites a reference or a tolerance to match what it wrote, fails.
  They stay where the caller made them; full-size references are hundreds of MB, and copying them
  to the host and back for every case cost seconds per variant;
- outputs are poisoned (every byte 0xFF: NaN for floats) and the workspace filled with 0xFF before
  every run: unwritten outputs and reads of an unset workspace show;
- the first launch goes on a fresh non-blocking stream while a long sleep occupies the legacy
  default stream; the outputs are copied on that stream and again after the whole device is
  synchronised: a kernel put on any other stream shows as a difference;
- the launch is then captured into a CUDA graph on that stream and replayed ``repeats`` times
  (re-poisoned each time): a launcher that cannot be captured, or whose work escapes the capture,
  fails, and every replay must equal the first launch bit for bit (races, uninitialised reads,
  state kept between calls);
- inputs must be bit-identical afterwards;
- every output element must be finite and within its per-element tolerance of the reference.

:func:`time_replays` times graph replays with CUDA events and checks the outputs again afterwards
(a kernel that stops working after its first few calls is not timed as fast).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .launcher import LauncherLibrary

__all__ = ["CANARY", "MIN_GUARD_BYTES", "MAX_GUARD_BYTES", "SENTINEL_BYTES", "DEFAULT_REPEATS", "SLEEP_CYCLES",
           "AdmissionCase", "CaseOutcome", "check_case", "time_replays", "copy_floor_ms", "BUDGET", "ERROR_BUDGET",
           "local_cuda", "low_precision", "reference_and_tolerance", "kernel_inputs"]


#: canary byte pattern (as fp16 it reads 0x7E55, a NaN payload no kernel writes by accident)
CANARY = (0x55, 0x7E)
MIN_GUARD_BYTES = 16 * 1024 * 1024
MAX_GUARD_BYTES = 256 * 1024 * 1024
SENTINEL_BYTES = 4 * 1024 * 1024
#: replays after the first launch, each compared with it bit for bit
DEFAULT_REPEATS = 5
#: cycles of the sleep kernel that keeps the legacy default stream busy during the first launch
SLEEP_CYCLES = 10_000_000


@dataclass
class AdmissionCase:
    """One set of kernel inputs with the expected outputs.

    ``inputs`` are in the kernel's dtype and layout (any device: copied into guarded buffers); ``refs``
    and ``tols`` are fp32 in the outputs' logical shapes (moved to the device when elsewhere)."""

    label: str
    inputs: list[Any]
    refs: list[Any]
    tols: list[Any]


@dataclass
class CaseOutcome:
    """What one case of :func:`check_case` found: pass or fail with every problem, the error figures against the
    budget, and the outputs and graph kept for timing."""
    label: str
    ok: bool = True
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0     # max |out - ref| / max |ref|
    budget_used: float = 0.0     # max |out - ref| / tol (<= 1 passes)
    problems: list[str] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list, repr=False)   # copies of the first launch's outputs
    replay: Any = field(default=None, repr=False)   # what :func:`time_replays` needs, when the graph exists

    def fail(self, why: str) -> None:
        self.ok = False
        self.problems.append(f"{self.label}: {why}")


class _Guarded:
    """One buffer in its own allocation, canaries on both sides."""

    def __init__(self, shape: Sequence[int], dtype: "torch.dtype", channels_last: bool, device: Any) -> None:
        import torch

        self.shape, self.dtype = list(shape), dtype
        item = torch.empty((), dtype=dtype).element_size()
        numel = 1
        for d in shape:
            numel *= int(d)
        self.nbytes = numel * item
        g = min(max(MIN_GUARD_BYTES, self.nbytes), MAX_GUARD_BYTES)
        self.guard = (g + 255) // 256 * 256
        self.raw = torch.empty(self.nbytes + 2 * self.guard, dtype=torch.uint8, device=device)
        self._pattern = _pattern(self.guard, device)
        self.raw[:self.guard].copy_(self._pattern)
        self.raw[self.guard + self.nbytes:].copy_(self._pattern)
        flat = self.raw[self.guard:self.guard + self.nbytes].view(dtype)
        if channels_last and len(shape) == 4:
            n, c, h, w = shape
            self.tensor = flat.view(n, h, w, c).permute(0, 3, 1, 2)
        else:
            self.tensor = flat.view(*shape) if shape else flat.view(())

    def guards_intact(self) -> bool:
        import torch

        return (torch.equal(self.raw[:self.guard], self._pattern)
                and torch.equal(self.raw[self.guard + self.nbytes:], self._pattern))

    def poison(self) -> None:
        self.raw[self.guard:self.guard + self.nbytes].fill_(0xFF)


def _pattern(nbytes: int, device: Any) -> "torch.Tensor":
    import torch

    return torch.tensor(CANARY, dtype=torch.uint8, device=device).repeat((nbytes + 1) // 2)[:nbytes]


#: elements per slice of a fingerprint (bounds its int64 temporaries to a few hundred MB)
_FP_SLICE = 1 << 24


def _fingerprint(t: "torch.Tensor") -> tuple[int, int, int]:
    """Three sums over ``t``'s bits as integers, in its logical element order: of the bits, of their squares
    and of the products of neighbours (order matters to the last). Integer sums wrap modulo 2^64 the same
    way in any order, so the fingerprint is exact and equal on every device; a change to any element changes
    it unless the change is forged to keep all three."""
    import torch

    b = _bits(t.detach()).reshape(-1)
    n = b.numel()
    acc = torch.zeros(3, dtype=torch.int64, device=b.device)
    for s in range(0, n, _FP_SLICE):
        c = b[s:s + _FP_SLICE + 1].to(torch.int64)  # one element past the slice, for the neighbour product
        own = c[:min(_FP_SLICE, n - s)]
        acc[0] += own.sum()
        acc[1] += (own * own).sum()
        if c.numel() > 1:
            acc[2] += (c[:-1] * c[1:]).sum()
    return tuple(int(x) for x in acc.tolist())  # type: ignore[return-value]


def _bits(t: "torch.Tensor") -> "torch.Tensor":
    import torch

    size = t.element_size()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size]
    return t.contiguous().view(view)


class _Sentinel:
    def __init__(self, device: Any) -> None:
        self.buf = _pattern(SENTINEL_BYTES, device).clone()
        self.want = _pattern(SENTINEL_BYTES, device)

    def intact(self) -> bool:
        import torch

        return torch.equal(self.buf, self.want)


def check_case(lib: "LauncherLibrary", case: AdmissionCase, device: Any,
               repeats: int = DEFAULT_REPEATS) -> CaseOutcome:
    """Run ``case`` through ``lib``'s launcher with every defence of the module docstring."""
    import torch

    res = CaseOutcome(label=case.label)
    meta = lib.meta
    if len(case.inputs) != len(meta.inputs) or len(case.refs) != len(meta.outputs):
        res.fail(f"the case has {len(case.inputs)} input(s) and {len(case.refs)} reference(s); the plugin takes "
                 f"{len(meta.inputs)} and gives {len(meta.outputs)}")
        return res
    device = torch.device(device)
    refs = [r.detach().to(device=device, dtype=torch.float32) for r in case.refs]
    tols = [t.detach().to(device=device, dtype=torch.float32) for t in case.tols]
    kept = {"input": [_fingerprint(t) for t in case.inputs], "reference": [_fingerprint(r) for r in refs],
            "tolerance": [_fingerprint(t) for t in tols]}
    extents = lib.extents([list(t.shape) for t in case.inputs])
    ws_bytes = lib.workspace_bytes(extents)

    sentinels = [_Sentinel(device)]
    ins = []
    for i, t in enumerate(case.inputs):
        g = _Guarded(list(t.shape), t.dtype, meta.inputs[i].format == "kHWC8", device)
        g.tensor.copy_(t.to(device))
        ins.append(g)
    sentinels.append(_Sentinel(device))
    outs = []
    for j, r in enumerate(refs):
        dt = _dtype(meta.outputs[j].dtype)
        outs.append(_Guarded(list(r.shape), dt, meta.outputs[j].format == "kHWC8", device))
    ws = _Guarded([max(ws_bytes, 1)], torch.uint8, False, device) if ws_bytes else None
    sentinels.append(_Sentinel(device))
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)

    in_ptrs = [g.tensor.data_ptr() for g in ins]
    out_ptrs = [g.tensor.data_ptr() for g in outs]
    ws_ptr = ws.tensor.data_ptr() if ws is not None else None
    stream = torch.cuda.Stream(device) if cuda else None   # torch's pool streams are non-blocking

    def prime() -> None:
        for g in outs:
            g.poison()
        if ws is not None:
            ws.poison()

    def snapshot() -> list["torch.Tensor"]:
        """The outputs' bits, copied into fresh memory of the device (compared there: full-size outputs
        are hundreds of MB)."""
        return [_bits(g.tensor.detach()).clone() for g in outs]

    # 1. the first launch, on a non-blocking stream, the legacy default stream held by a sleep
    if cuda:
        with torch.cuda.stream(stream):
            prime()
        stream.synchronize()
        with torch.cuda.device(device):
            torch.cuda._sleep(SLEEP_CYCLES)   # on torch's default (legacy) stream
    else:
        prime()
    try:
        lib.launch(in_ptrs, out_ptrs, extents, ws_ptr, stream.cuda_stream if cuda else None)
    except Exception as e:  # the launcher's own error code
        if cuda:
            torch.cuda.synchronize(device)
        res.fail(f"the launcher failed: {' '.join(str(e).split())[:300]}")
        return res
    if cuda:
        with torch.cuda.stream(stream):
            at_stream = snapshot()   # ordered after the launch on its stream, and on nothing else
        stream.synchronize()
        torch.cuda.synchronize(device)
        at_device = snapshot()
        if any(not torch.equal(a, b) for a, b in zip(at_stream, at_device)):
            res.fail("outputs changed after the launch's own stream was synchronised: the kernel ran on another "
                     "stream than the one it was given")
    else:
        at_device = snapshot()
    _check_memory(res, ins, outs, ws, sentinels, kept["input"], "the first launch")

    # 2. the same launch captured into a CUDA graph and replayed (on the CPU: launched again), each run
    #    equal to the first launch bit for bit
    graph = _capture(lib, in_ptrs, out_ptrs, extents, ws_ptr, stream, device, res) if cuda else None
    if graph is not None or not cuda:
        for r in range(repeats):
            if cuda:
                with torch.cuda.stream(stream):
                    prime()
                    graph.replay()
                stream.synchronize()
            else:
                prime()
                lib.launch(in_ptrs, out_ptrs, extents, ws_ptr, None)
            again = snapshot()
            if any(not torch.equal(a, b) for a, b in zip(at_device, again)):
                res.fail(f"run {r + 2} of {repeats + 1} differs bit-wise from the first launch (a race, an "
                         "uninitialised read, state kept between calls, or work put on another stream than the "
                         "one given, which a graph capture does not record)")
                break
        _check_memory(res, ins, outs, ws, sentinels, kept["input"], "the repeated runs")

    # 3. numerics of the first launch (on the device, now that the kernel runs no more)
    res.outputs = [b.view(_dtype(meta.outputs[j].dtype)) for j, b in enumerate(at_device)]
    _compare(res, [o.float() for o in res.outputs], refs, tols)
    for what, tensors in (("reference", refs), ("tolerance", tols)):
        for j, t in enumerate(tensors):
            if _fingerprint(t) != kept[what][j]:
                res.fail(f"the {what} of output {j} changed while the kernel ran (its fingerprint differs): the "
                         "comparison cannot be trusted")
    if graph is not None:
        res.replay = _Replay(graph, stream, prime, snapshot, at_device)
    return res


@dataclass
class _Replay:
    graph: Any
    stream: Any
    prime: Any
    snapshot: Any
    first: list[Any]


def time_replays(res: CaseOutcome, iters: int = 50) -> float | None:
    """Median ms of one graph replay of a case :func:`check_case` passed; the outputs are checked again
    afterwards. None (and a problem recorded) when the case has no graph or the check after timing fails."""
    import torch

    if res.replay is None:
        return None
    graph, stream, prime, snapshot, first = (res.replay.graph, res.replay.stream, res.replay.prime,
                                             res.replay.snapshot, res.replay.first)
    with torch.cuda.stream(stream):
        for _ in range(3):
            graph.replay()
        prime()   # after the warm-up: what is left at the end was written by the timed replays
    stream.synchronize()
    ms = sorted(_timed_replays(graph, stream, iters))
    after = snapshot()
    if any(not torch.equal(x, y) for x, y in zip(first, after)):
        res.fail(f"after {iters + 3} timed replays the outputs differ from the first launch (the kernel stops "
                 "doing its work after a few calls)")
        return None
    return ms[len(ms) // 2]


def copy_floor_ms(nbytes: int, device: Any, iters: int = 20) -> float:
    """The fastest of ``iters`` timed graph replays of a device copy moving ``nbytes`` in total (read +
    write), timed exactly as :func:`time_replays` times a kernel (a graph replay between two events on a
    side stream, so launch latency is not in either figure): a kernel that reads its inputs once and
    writes its outputs once cannot beat it by much, cached or not."""
    import torch

    # an elementwise kernel on the SMs (torch.neg), not a cudaMemcpy that may go to a copy engine
    half = max(nbytes // 4, 128)
    src = torch.zeros(half, dtype=torch.float16, device=device)
    dst = torch.empty_like(src)
    stream = torch.cuda.Stream(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        torch.neg(src, out=dst)   # warm-up outside the capture
    stream.synchronize()
    with torch.cuda.graph(graph, stream=stream):
        torch.neg(src, out=dst)
    with torch.cuda.stream(stream):
        for _ in range(3):
            graph.replay()
    return min(_timed_replays(graph, stream, iters))


def _timed_replays(graph: Any, stream: Any, iters: int) -> list[float]:
    """ms of each of ``iters`` replays of ``graph`` on ``stream``, each between two events on that stream."""
    import torch

    times = []
    with torch.cuda.stream(stream):
        for _ in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            graph.replay()
            b.record(stream)
            times.append((a, b))
    stream.synchronize()
    return [a.elapsed_time(b) for a, b in times]


def _capture(lib: "LauncherLibrary", in_ptrs: list[int], out_ptrs: list[int], extents: list[int],
             ws_ptr: int | None, stream: Any, device: Any, res: CaseOutcome) -> Any:
    import torch

    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=stream):
            lib.launch(in_ptrs, out_ptrs, extents, ws_ptr, stream.cuda_stream)
    except Exception as e:
        try:
            torch.cuda.synchronize(device)
        except Exception:  # pragma: no cover - a sticky error; the problem below names it
            pass
        res.fail("the launch cannot be captured into a CUDA graph on the stream it is given (engines replay "
                 f"plugins in graphs; a launch on another stream or a synchronising call breaks that): "
                 f"{' '.join(str(e).split())[:300]}")
        return None
    return graph


def _check_memory(res: CaseOutcome, ins: list[_Guarded], outs: list[_Guarded], ws: _Guarded | None,
                  sentinels: list[_Sentinel], kept_inputs: list[tuple[int, int, int]], when: str) -> None:
    for i, g in enumerate(ins):
        if not g.guards_intact():
            res.fail(f"{when} wrote next to input {i} (its canary changed)")
        if _fingerprint(g.tensor) != kept_inputs[i]:
            res.fail(f"{when} changed input {i}")
    for j, g in enumerate(outs):
        if not g.guards_intact():
            res.fail(f"{when} wrote outside output {j} (its canary changed)")
    if ws is not None and not ws.guards_intact():
        res.fail(f"{when} wrote outside the workspace (its canary changed)")
    if not all(s.intact() for s in sentinels):
        res.fail(f"{when} wrote far outside every buffer it was given (a sentinel block changed)")


def _compare(res: CaseOutcome, outs: list["torch.Tensor"], refs: list["torch.Tensor"],
             tols: list["torch.Tensor"]) -> None:
    import torch

    for j, (out, ref, tol) in enumerate(zip(outs, refs, tols)):
        if tuple(out.shape) != tuple(ref.shape):
            res.fail(f"output {j} has shape {list(out.shape)}, the reference {list(ref.shape)}")
            continue
        finite = torch.isfinite(out)
        if not bool(finite.all()):
            res.fail(f"output {j}: {int((~finite).sum())} element(s) NaN/Inf or never written")
        err = (out - ref).abs()
        err = torch.where(finite, err, torch.full_like(err, float("inf")))
        max_err = float(err.max()) if err.numel() else 0.0
        ref_max = float(ref.abs().max()) if ref.numel() else 0.0
        used = float((err / tol).max()) if err.numel() else 0.0
        res.max_abs_err = max(res.max_abs_err, max_err)
        res.max_rel_err = max(res.max_rel_err, max_err / ref_max if ref_max > 0 else max_err)
        res.budget_used = max(res.budget_used, used)
        if not used <= 1.0:  # NaN counts as over
            idx = int(torch.argmax(err / tol))
            res.fail(f"output {j}: error {max_err:.3g} exceeds its budget ({used:.3g}x the tolerance at flat "
                     f"index {idx})")


def _dtype(name: str) -> "torch.dtype":
    import torch

    return {"float16": torch.float16, "float32": torch.float32, "int32": torch.int32, "int8": torch.int8}[name]


# -- references and budgets (the core's admission gate and the conformance suite use the same) ----------------
#: per-element budget ``rel*|ref| + 4*E + abs*max|ref| + 2^-24`` by engine precision: (rel, abs)
BUDGET = {"fp16": (2.0 ** -9, 2.0 ** -12), "fp32": (2.0 ** -18, 2.0 ** -20)}
ERROR_BUDGET = ("per element |out - ref| <= rel*|ref| + 4*E + abs*max|ref| + 2^-24; ref = the region's .pt2 in fp32 "
                "(TF32 off) on the same inputs, E = max error of the region's own torch ops at the engine precision "
                "on those inputs; fp16: rel 2^-9, abs 2^-12; fp32: rel 2^-18, abs 2^-20")


def local_cuda(sm: int | None = None) -> "tuple[Any, str] | str":
    """``(device, name)`` of a local CUDA GPU that runs sm ``sm`` code (any GPU when None), else why there is
    none (no torch, no GPU, another SM, a broken driver: a reason, never an exception)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed here"
    try:
        if not torch.cuda.is_available():
            return "no CUDA GPU here"
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            if sm is None or p.major * 10 + p.minor == sm:
                return torch.device("cuda", i), p.name
        p = torch.cuda.get_device_properties(0)
        return f"the local {p.name} is sm{p.major}{p.minor}, the plugin is built for sm{sm}"
    except Exception as e:
        return f"CUDA is not usable here ({type(e).__name__}: {e})"


def low_precision(program: Any, precision: str) -> Any:
    """The region's program at the engine precision (fp16: a half copy; None where it cannot be made)."""
    import copy

    if precision != "fp16":
        return program
    try:
        return copy.deepcopy(program).half()
    except Exception:
        return None


def reference_and_tolerance(program: Any, low: Any, logical: list[Any], precision: str,
                            device: Any, dtypes: list[str]) -> tuple[list[Any], list[Any], str]:
    """For one case: the fp32 references (TF32 off) on the inputs as the engine feeds them, per-element
    tolerances by :data:`BUDGET`, and why the case is unfair ('' when it is not): the region's own ops are not
    finite at the engine precision on these inputs (an overflow, or a 0/0), or not even in fp32. All on
    ``device``, where :func:`check_case` compares them.

    ``dtypes`` are the dtypes the plugin's contract declares for its inputs (``meta.inputs[i].dtype``): at fp16
    an input declared ``float16`` is rounded to fp16 before the reference sees it, as the engine feeds it, and
    one declared ``float32`` (a lifted weight or bias) is not -- the kernel gets it unrounded, so rounding it
    here would charge the kernel with an error the reference made. There is no default: rounding every float
    input, as this once did when a caller named no dtypes, rejected correct kernels behind a ReLU6. An input
    past the end of ``dtypes`` is fed at the engine precision."""
    import math

    import torch

    def fed_low(i: int, t: Any) -> bool:
        if precision != "fp16" or not t.is_floating_point():
            return False
        return i >= len(dtypes) or dtypes[i] == "float16"

    dev = [(t.half().float() if fed_low(i, t) else t).to(device) for i, t in enumerate(logical)]
    prev = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            ref = [r.float() for r in _as_list(program(*dev))]
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev
    e = _engine_precision_error(program, low, dev, ref, precision)
    overflow = ""
    if not all(bool(torch.isfinite(r).all()) for r in ref):
        overflow = "skipped: the region's own ops are not finite on these inputs, even in fp32"
    elif not all(math.isfinite(v) for v in e):
        # an overflow, or a 0/0 where the precision rounds a small epsilon to zero (LiteMLA's 1e-15 at fp16,
        # on a query row that ReLU zeroes whole)
        overflow = f"skipped: the region's own ops give inf or NaN at {precision} on these inputs (fp32 is finite)"
    if overflow:
        e = [v if math.isfinite(v) else 0.0 for v in e]
    rel, ab = BUDGET[precision]
    tols = []
    for j, r in enumerate(ref):
        scale = float(r.abs().max()) if r.numel() else 0.0
        tols.append(r.abs() * rel + (4.0 * e[j] + ab * scale + 2.0 ** -24))
    return ref, tols, overflow


def kernel_inputs(meta: Any, logical: list[Any], device: Any) -> list[Any]:
    """Logical (NCHW) inputs in the dtype and layout the plugin's contract declares, on ``device``."""
    import torch

    out = []
    for t, c in zip(logical, meta.inputs):
        x = t.to(device=device, dtype=_dtype(c.dtype))
        out.append(x.contiguous(memory_format=torch.channels_last) if c.format == "kHWC8" else x.contiguous())
    return out


def _engine_precision_error(program: Any, low_program: Any, dev: list[Any], ref: list[Any],
                            precision: str) -> list[float]:
    """Largest error of the region's own ops at the engine precision, per output (the budget's E; inf where
    they overflow; 0 where they cannot run at that precision, leaving the fixed terms of the budget)."""
    import torch

    if low_program is None:
        return [0.0] * len(ref)
    try:
        with torch.no_grad():
            if precision == "fp16":
                low = _as_list(low_program(*[t.half() if t.is_floating_point() else t for t in dev]))
            else:
                prev = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
                try:
                    low = _as_list(program(*dev))
                finally:
                    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = prev
        errs = []
        for lo, r in zip(low, ref):
            d = (lo.float() - r).abs()
            errs.append(float(d.max()) if d.numel() else 0.0)
        return errs
    except Exception:
        return [0.0] * len(ref)


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (tuple, list)) else [x]
