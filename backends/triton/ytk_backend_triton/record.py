"""Turning a carved region into a launch plan with the torch compiler, on a CUDA machine.

Per site shape, the region's program (fp16, the contract's layouts) is compiled by inductor with
max-autotune and Triton-only GEMM/conv back ends, so that every piece of GPU work is a Triton kernel.
The compiled function then runs once more while three things are recorded:

* every Triton launch (grid, kernel, arguments), by wrapping Triton's CUDA launcher class;
* every allocation and free of the CUDA caching allocator (``torch.cuda.memory`` history), which tells
  intermediate buffers (freed by the end: laid out in the plugin's workspace) from the outputs;
* the compiled kernels themselves (``CompiledKernel``: cubin, PTX entry, warps, shared memory).

Each pointer argument is then resolved to an input, an output or the workspace plus an offset, and each
scalar kept as it is. Anything the replay could not reproduce is refused with the reason: inductor
calling cuBLAS/cuDNN or an ATen op, TMA descriptors, Triton scratch memory, a pointer into memory
that is none of those, outputs that alias inputs.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ytk_hookspecs.errors import UnsupportedRegion

from .aot import binary
from .plan import Arg, KernelBinary, Launch, PlanError, ShapeCase

#: In inductor's output code, what is GPU work other than a Triton kernel (a plan cannot replay it).
_NOT_TRITON = re.compile(r"\bextern_kernels\.\w+|\btorch\.ops\.\w+\.\w+|\baten\.\w+|\.copy_\(|\bcpp_fused_\w+")
WORKSPACE_ALIGN = 256


@dataclass
class Recorder:
    launches: list[tuple[tuple[int, int, int], int, list[Any]]] = field(default_factory=list)
    kernels: dict[int, Any] = field(default_factory=dict)  # CUfunction handle -> CompiledKernel
    active: bool = False

    def kernel(self, handle: int) -> Any:
        """The CompiledKernel of a function handle: seen being loaded, else any live one (a kernel inductor
        loaded before recording began, from its in-process cache)."""
        if handle not in self.kernels:
            import gc

            from triton.compiler.compiler import CompiledKernel

            for o in gc.get_objects():
                # by type(o), never isinstance: isinstance dereferences a weak proxy, and gc lists dead ones
                if issubclass(type(o), CompiledKernel) and getattr(o, "function", None) is not None:
                    self.kernels.setdefault(int(o.function), o)
        ck = self.kernels.get(handle)
        if ck is None:
            raise UnsupportedRegion("a Triton launch of a kernel whose binary cannot be found")
        return ck


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Wrap Triton's kernel-handle loading and its CUDA launcher for the duration (patched on the classes, so
    that launchers inductor created and cached see it too); launches are kept while ``active``."""
    from triton.backends.nvidia import driver as nvdriver
    from triton.compiler import compiler as tcompiler

    rec = Recorder()
    ck_cls, launcher_cls = tcompiler.CompiledKernel, nvdriver.CudaLauncher
    orig_init_handles, orig_call = ck_cls._init_handles, launcher_cls.__call__

    def init_handles(self: Any) -> Any:
        out = orig_init_handles(self)
        if getattr(self, "function", None) is not None:
            rec.kernels[int(self.function)] = self
        return out

    def call(self: Any, gridX: int, gridY: int, gridZ: int, stream: Any, function: Any, *rest: Any) -> Any:
        if rec.active:
            # after kernel_metadata, launch_metadata, launch_enter_hook and launch_exit_hook: every parameter of
            # the kernel's signature, constexprs included
            rec.launches.append(((int(gridX), int(gridY), int(gridZ)), int(function), list(rest[4:])))
        return orig_call(self, gridX, gridY, gridZ, stream, function, *rest)

    ck_cls._init_handles, launcher_cls.__call__ = init_handles, call
    try:
        yield rec
    finally:
        ck_cls._init_handles, launcher_cls.__call__ = orig_init_handles, orig_call


def compile_options(mode: str) -> dict[str, Any]:
    """torch.compile options: Triton-only GEMMs and convolutions (no cuBLAS/cuDNN call in the output), no CUDA
    graphs, launches through Triton's own launcher (which :func:`recording` sees), and the output code's kernels
    compiled in this process (which :func:`kernel_binaries` needs to compile them again for another SM)."""
    import torch._inductor.config as cfg

    opts: dict[str, Any] = {"max_autotune_gemm_backends": "TRITON", "max_autotune_conv_backends": "TRITON",
                            "triton.cudagraphs": False}
    if hasattr(cfg, "use_static_cuda_launcher"):
        opts["use_static_cuda_launcher"] = False
    if hasattr(cfg, "compile_threads"):
        # A kernel inductor compiles in its worker processes (compile_threads > 1, the default on a many-core
        # host) comes back without its Python function and globals (CachingAutotuner.prepare_for_pickle, torch
        # 2.11 and 2.13 alike), and Triton cannot compile that source for another SM. One thread keeps the
        # output code's kernels in this process; max-autotune's choices still compile on its own thread pool.
        opts["compile_threads"] = 1
    if mode == "max-autotune":
        opts["max_autotune"] = True
    return opts


def _allocations(snapshot: dict[str, Any], device_index: int) -> tuple[dict[int, int], set[int]]:
    """(address -> size of every block allocated during the recorded call, the addresses freed again); blocks
    the caching allocator handed out twice or split are merged into the ranges they cover, so that a pointer's
    place inside its range is the memory layout the kernels actually used."""
    spans: list[tuple[int, int]] = []
    freed: set[int] = set()
    traces = snapshot.get("device_traces") or []
    for ev in (traces[device_index] if device_index < len(traces) else []):
        action = ev.get("action")
        if action == "alloc":
            spans.append((int(ev["addr"]), int(ev["addr"]) + int(ev["size"])))
        elif action in ("free_requested", "free_completed"):
            freed.add(int(ev["addr"]))
    allocs: dict[int, int] = {}
    start = end = -1
    for a, b in sorted(spans):
        if a < end:
            end = max(end, b)
            continue
        if start >= 0:
            allocs[start] = end - start
        start, end = a, b
    if start >= 0:
        allocs[start] = end - start
    return allocs, freed


def record_case(fn: Any, inputs: list[Any], extents: list[int], rec: Recorder
                ) -> tuple[ShapeCase, list[Any], dict[int, Any]]:
    """Run the compiled ``fn`` once on ``inputs`` with ``rec`` active; the shape case, the outputs, and the
    compiled kernels it launched by handle. ``fn`` must have been called (compiled and autotuned) before."""
    import torch

    dev = inputs[0].device
    torch.cuda.synchronize(dev)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    try:
        rec.launches.clear()
        rec.active = True
        try:
            outs = fn(*inputs)
        finally:
            rec.active = False
        torch.cuda.synchronize(dev)
        snap = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    if not rec.launches:
        raise UnsupportedRegion("the compiled region launched no Triton kernel (inductor ran it some other way)")
    allocs, freed = _allocations(snap, dev.index or 0)
    in_ranges = [(t.data_ptr(), t.untyped_storage().nbytes()) for t in inputs]
    out_ranges = [(t.data_ptr(), t.untyped_storage().nbytes()) for t in outs]
    for k, (p, _) in enumerate(out_ranges):
        if any(p >= a and p < a + n for a, n in in_ranges):
            raise UnsupportedRegion(f"output {k} of the compiled region aliases an input")
    # intermediates: blocks allocated during the call that hold no output; each gets its own workspace slice
    out_starts = {p for p, _ in out_ranges}
    ws_offset: dict[int, int] = {}
    total = 0
    for addr, size in sorted(allocs.items()):
        if any(addr <= p < addr + size for p in out_starts):
            continue
        ws_offset[addr] = total
        total += -(-size // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
    launches = []
    used: dict[int, Any] = {}
    for grid, handle, args in rec.launches:
        ck = used[handle] = rec.kernel(handle)
        signature = [str(t) for t in ck.src.signature.values()]
        if getattr(ck.metadata, "tensordesc_meta", None) or any("tensordesc" in t for t in signature):
            raise UnsupportedRegion(f"kernel {ck.metadata.name} takes TMA tensor descriptors, which a plan does not "
                                    "build")
        user = [a for a, t in zip(args, signature) if t != "constexpr"]
        bound: list[Arg] = []
        for a in user:
            if hasattr(a, "data_ptr"):
                bound.append(_pointer(int(a.data_ptr()), in_ranges, out_ranges, allocs, ws_offset, ck.metadata.name))
            elif a is None:
                raise UnsupportedRegion(f"kernel {ck.metadata.name} is passed a null pointer")
            elif isinstance(a, bool) or not isinstance(a, (int, float)):
                raise UnsupportedRegion(f"kernel {ck.metadata.name} takes an argument of type {type(a).__name__}")
            else:
                bound.append(Arg(kind="scalar", value=a))
        launches.append(Launch(kernel=f"h{handle:x}", grid=grid, args=bound))
    return ShapeCase(extents=list(extents), workspace_bytes=total, launches=launches), outs, used


def _pointer(p: int, ins: list[tuple[int, int]], outs: list[tuple[int, int]], allocs: dict[int, int],
             ws: dict[int, int], kernel: str) -> Arg:
    for k, (a, n) in enumerate(ins):
        if a <= p < a + n:
            return Arg(kind="input", index=k, offset=p - a)
    for k, (a, n) in enumerate(outs):
        if a <= p < a + n:
            return Arg(kind="output", index=k, offset=p - a)
    for a, n in allocs.items():
        if a <= p < a + n and a in ws:
            return Arg(kind="workspace", offset=ws[a] + p - a)
    raise UnsupportedRegion(f"kernel {kernel} is passed a pointer into memory that is no input, output or buffer "
                            "of this call (a constant the compiled graph keeps): lift it as a plugin input")


def check_output_code(codes: list[str]) -> None:
    """Refuse compiled code with GPU work that is not a Triton kernel: the calls made by its ``call`` function
    (comments and the kernels' own source strings aside) to cuBLAS/cuDNN, ATen ops or copies."""
    import ast

    for code in codes:
        try:
            tree = ast.parse(code)
        except SyntaxError:
            raise UnsupportedRegion("inductor's output code does not parse as Python") from None
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "call"]
        for fn in calls:
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    name = ast.unparse(node.func)
                    if _NOT_TRITON.search(name + "("):
                        raise UnsupportedRegion(f"inductor runs {name} for this region (not a Triton kernel), "
                                                "which a plugin cannot embed")


def _hashable(v: Any) -> Any:
    return tuple(_hashable(x) for x in v) if isinstance(v, list) else v


#: Compile options not copied from a kernel's metadata when it is compiled again for another SM: the target's
#: own, and ``extern_libs``, which holds the absolute path of the libdevice the first compile used -- a kernel
#: read back from Triton's on-disk cache names the Triton install that cached it, maybe one that is gone.
_NOT_COPIED = ("arch", "backend_name", "extern_libs")


def kernel_binaries(handles: dict[str, Any], sms: list[int], local_sm: int) -> list[KernelBinary]:
    """The plan's kernels: the local SM's cubin as compiled, other SMs compiled again from the same source."""
    import dataclasses

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDAOptions

    out = []
    names = {f.name for f in dataclasses.fields(CUDAOptions)}
    for kid, ck in handles.items():
        md = ck.metadata
        by_sm = {local_sm: ck}
        if any(sm != local_sm for sm in sms) and getattr(getattr(ck.src, "fn", None), "fn", None) is None:
            # the JITFunction lost its Python function when inductor pickled it back from a compile worker
            raise UnsupportedRegion(f"kernel {md.name} was compiled in one of inductor's worker processes and came "
                                    "back without its Python source, so it cannot be compiled for another SM "
                                    "(compile with compile_threads=1)")
        for sm in sms:
            if sm == local_sm:
                continue
            # the options the kernel was compiled with, as Triton's options class takes them (metadata keeps
            # tuples as JSON lists)
            opts = {k: _hashable(getattr(md, k)) for k in names if hasattr(md, k) and k not in _NOT_COPIED}
            try:
                by_sm[sm] = triton.compile(ck.src, target=GPUTarget("cuda", sm, 32), options=opts)
            except Exception as e:  # Triton's own compile error for that SM
                raise UnsupportedRegion(f"kernel {md.name} does not compile for sm_{sm}: {type(e).__name__}: "
                                        f"{str(e).splitlines()[0][:200] if str(e) else ''}") from None
        user = sum(1 for t in ck.src.signature.values() if str(t) != "constexpr")
        try:
            kb = binary(by_sm, user_params=user)
        except (PlanError, ValueError) as e:
            raise UnsupportedRegion(str(e)) from None
        out.append(kb.model_copy(update={"id": kid}))
    return out
