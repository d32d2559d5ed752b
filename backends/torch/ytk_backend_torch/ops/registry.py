"""How an ONNX op becomes a torch callable.

Each supported op registers a *builder*: given a :class:`NodeCtx` (attributes, the values of its
constant inputs, the static shapes of all inputs) it returns ``fn(*inputs)`` that computes the
node's outputs with torch ops. Everything that can be decided from constants and static shapes is
decided in the builder, once, so the runtime callable only launches kernels.

Inputs listed as ``params`` or ``weights`` are consumed by the builder, and the runtime callable
receives ``None`` in their place. ``params`` (a Reshape's target shape, a Resize's scales, a
BatchNorm's statistics) are kept exact in the plan, because a shape or a scale rounded to fp16
changes the result; ``weights`` (a Conv's filter and bias) are stored in the engine's precision and
prepared once (cast, laid out channels_last, moved to the device) when the program is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ytk_hookspecs.errors import StageError

_MISSING = object()

Runtime = Callable[..., Any]


@dataclass(frozen=True)
class OpDef:
    op_type: str
    build: Callable[["NodeCtx"], Runtime]
    params: frozenset[int]
    weights: frozenset[int]
    layer_type: str

    def build_time(self) -> frozenset[int]:
        """Inputs the runtime callable does not receive."""
        return self.params | self.weights


OPS: dict[str, OpDef] = {}


def op(*names: str, params: Iterable[int] = (), weights: Iterable[int] = (),
       layer_type: str = "PointWise") -> Callable[[Callable], Callable]:
    """Register ``builder`` for the ONNX op types ``names`` (default domain)."""

    def deco(builder: Callable[["NodeCtx"], Runtime]) -> Callable[["NodeCtx"], Runtime]:
        for n in names:
            OPS[n] = OpDef(n, builder, frozenset(params), frozenset(weights), layer_type)
        return builder

    return deco


class NodeCtx:
    """What a builder sees of one node.

    ``consts[i]`` is the exact value of input ``i`` when it is a constant (initializer or folded),
    else None; ``shapes[i]`` is every input's static shape; ``float_dtype`` is the engine's compute
    dtype (float16 or float32) and ``device`` where the runtime callable will run.
    """

    def __init__(self, node: Any, consts: list[torch.Tensor | None], shapes: list[tuple[int, ...] | None],
                 dtypes: list[torch.dtype | None], float_dtype: torch.dtype, device: torch.device,
                 origin: str = "", opset: int = 20) -> None:
        self.node = node
        self.opset = opset
        self.consts = consts
        self.shapes = shapes
        self.dtypes = dtypes
        self.float_dtype = float_dtype
        self.device = torch.device(device)
        self.origin = origin

    # -- attributes and inputs ------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.node.name

    @property
    def op_type(self) -> str:
        return self.node.op_type

    def attr(self, name: str, default: Any = _MISSING) -> Any:
        if name in self.node.attrs:
            return self.node.attrs[name]
        if default is _MISSING:
            raise self.error(f"needs attribute {name!r}")
        return default

    def has(self, i: int) -> bool:
        return i < len(self.node.inputs) and bool(self.node.inputs[i])

    def const(self, i: int, what: str = "") -> torch.Tensor:
        """The constant value of input ``i``; a dynamic one is an error naming the node."""
        if not self.has(i):
            raise self.error(f"input {i}{' (' + what + ')' if what else ''} is missing")
        v = self.consts[i] if i < len(self.consts) else None
        if v is None:
            raise self.error(f"input {i}{' (' + what + ')' if what else ''} must be constant at build time "
                             "(the torch engine builds for static shapes); it depends on runtime data")
        return v

    def ints(self, i: int, what: str = "") -> list[int]:
        return [int(x) for x in self.const(i, what).reshape(-1).tolist()]

    def floats(self, i: int, what: str = "") -> list[float]:
        return [float(x) for x in self.const(i, what).reshape(-1).tolist()]

    def shape(self, i: int) -> tuple[int, ...]:
        s = self.shapes[i] if i < len(self.shapes) else None
        if s is None:
            raise self.error(f"the static shape of input {i} is unknown")
        return s

    def rank(self, i: int = 0) -> int:
        return len(self.shape(i))

    def weight(self, i: int, memory_format: torch.memory_format | None = None) -> torch.Tensor:
        """A constant input prepared once for the runtime: compute dtype, on device, in ``memory_format``."""
        w = to_compute(self.const(i), self.float_dtype).to(self.device)
        if memory_format is not None and w.dim() == 4:
            w = w.contiguous(memory_format=memory_format)
        return w

    def error(self, msg: str) -> StageError:
        return StageError(f"{self.origin + ': ' if self.origin else ''}node {self.name!r} ({self.op_type}): {msg}")


def fp16_safe(t: torch.Tensor) -> torch.Tensor:
    """Cast a float32 constant to fp16 without letting it turn into 0 or inf.

    A constant like the ``1e-15`` guard of ``x / (y + eps)`` flushes to zero in fp16 and the guard
    disappears (0/0 = NaN where the fp32 model gives 0); a ``-1e9`` mask becomes -inf. Such values
    are kept at the nearest representable non-zero / finite fp16 value, with their sign.
    """
    finfo = torch.finfo(torch.float16)
    tiny = 2.0 ** -24  # the smallest positive fp16 subnormal
    x = t.to(torch.float32)
    x = torch.where((x != 0) & (x.abs() < tiny), torch.sign(x) * tiny, x)
    x = torch.where(torch.isfinite(x), x.clamp(finfo.min, finfo.max), x)
    return x.to(torch.float16)


def to_compute(t: torch.Tensor, float_dtype: torch.dtype) -> torch.Tensor:
    """Floating constants take the engine's compute dtype; integer and bool ones stay as they are."""
    if not t.is_floating_point() or t.dtype == float_dtype:
        return t
    return fp16_safe(t) if float_dtype == torch.float16 else t.to(float_dtype)


def normalize_axis(ax: int, rank: int) -> int:
    return ax + rank if ax < 0 else ax
