"""Stand-in "kernels" for the admission checker on the CPU: they compute through the raw pointers the
launcher ABI hands them (as a CUDA kernel does), so every defence of
:func:`ytk_hookspecs.admission.check_case` runs on them exactly as on the GPU. ``fault`` picks how one
misbehaves."""

from __future__ import annotations

import ctypes
import math
from typing import Any, Callable

import torch

from ytk_hookspecs import shape_expr

FAULTS = ("none", "wrong", "nondeterministic", "unwritten", "scribble", "guard", "first_only", "zeros", "memorised")


def tensor_at(ptr: int, shape: list[int], dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    """A tensor over memory this process owns at ``ptr`` (what a kernel sees through a pointer)."""
    n = math.prod(shape)
    size = torch.empty((), dtype=dtype).element_size()
    buf = (ctypes.c_byte * (n * size)).from_address(ptr)
    flat = torch.frombuffer(buf, dtype=dtype)
    if channels_last and len(shape) == 4:
        b, c, h, w = shape
        return flat.view(b, h, w, c).permute(0, 3, 1, 2)
    return flat.view(*shape)


_DT = {"float16": torch.float16, "float32": torch.float32}


class StandIn:
    """Duck-types :class:`ytk_hookspecs.launcher.LauncherLibrary` for a CPU function ``fn``."""

    def __init__(self, meta: Any, fn: Callable[..., torch.Tensor], fault: str = "none",
                 memorised: torch.Tensor | None = None) -> None:
        assert fault in FAULTS
        self.meta, self.fn, self.fault, self.memorised = meta, fn, fault, memorised
        self.calls = 0
        self.in_shapes: list[list[int]] = []

    def extents(self, shapes: list[list[int]]) -> list[int]:
        self.in_shapes = [list(s) for s in shapes]
        vals = shape_expr.evaluate_extents(self.meta.extents, shapes)
        return [vals[k] for k in self.meta.extents]

    def workspace_bytes(self, extents: list[int]) -> int:
        return 0

    def launch(self, in_ptrs: list[int], out_ptrs: list[int], extents: list[int], ws: Any, stream: Any) -> None:
        self.calls += 1
        ins = [tensor_at(p, s, _DT[c.dtype], c.format == "kHWC8")
               for p, s, c in zip(in_ptrs, self.in_shapes, self.meta.inputs)]
        ext = dict(zip(self.meta.extents, extents))
        oc = self.meta.outputs[0]
        oshape = [shape_expr.evaluate(e, self.in_shapes, ext) for e in oc.shape]
        out = tensor_at(out_ptrs[0], oshape, _DT[oc.dtype], oc.format == "kHWC8")
        y = self.fn(*[t.float() for t in ins])
        if self.fault == "wrong":
            y = y + 0.05 * y.abs().max()
        elif self.fault == "nondeterministic":
            y = y * (1 + 1e-3 * (self.calls % 2))
        elif self.fault == "zeros":
            y = torch.zeros_like(y)
        elif self.fault == "memorised":
            y = self.memorised.float() if self.memorised is not None else y
        if self.fault == "first_only" and self.calls > 1:
            return  # state kept between calls: works once, then writes nothing
        out.copy_(y.to(out.dtype))
        if self.fault == "unwritten":
            out[..., -1, -1] = float("nan")
        elif self.fault == "scribble":
            ins[0][0, 0, 0, 0] += 1
        elif self.fault == "guard":
            n = math.prod(oshape) * out.element_size()
            ctypes.memset(out_ptrs[0] + n, 0, 2)  # just past the output's end
