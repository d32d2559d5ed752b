"""The torch engine's inductor mode: the graph between plugins compiled with torch.compile.

Run op by op, the engine's base is weaker than what a user of torch would deploy instead: on a
ConvNeXt, LayerNorm / GELU / permute chains run one kernel per op where torch.compile fuses them.
With ``mode = "inductor"`` (or ``"inductor-max-autotune"``) in ``[backends.torch]``, every maximal run
of graph layers between two plugin layers becomes one function compiled by inductor, and the plugins
stay what they are -- opaque launcher calls between the compiled pieces -- so that "base" and
"plugged" are both measured against the user's real alternative, and a plugin has to beat what
inductor does with the same region to show a gain.

The per-layer profile is still taken op by op (that is what attributes time to ONNX nodes, as
TensorRT's per-layer profile does); the end-to-end latency and the outputs come from the fused
program, captured whole in one CUDA graph as the eager one is (inductor's own CUDA graphs are off:
``max-autotune-no-cudagraphs``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ytk_hookspecs.errors import StageError

from .program import Program, Step

#: the ``mode`` option -> torch.compile's mode (None: the program runs op by op)
MODES: dict[str, str | None] = {"eager": None, "inductor": "default",
                                "inductor-max-autotune": "max-autotune-no-cudagraphs"}


def engine_mode(raw: str | None) -> str:
    """The ``mode`` engine option, checked (``eager`` when unset)."""
    mode = (raw or "eager").strip()
    if mode not in MODES:
        raise StageError(f"engine option mode={raw!r}: expected one of {', '.join(MODES)}")
    return mode


@dataclass
class Segment:
    """A run of steps executed as one unit: a compiled function over graph layers, or one plugin step."""

    steps: list[Step]
    in_slots: list[int]   # slots read that are written before the segment (inputs, constants excluded)
    out_slots: list[int]  # slots written here that something after the segment reads
    free: list[int]
    fn: Callable[..., Any] | None = None  # the compiled function (None: a plugin step, run as it is)

    @property
    def compiled(self) -> bool:
        return self.fn is not None


def split_segments(program: Program) -> list[Segment]:
    """Maximal runs of non-plugin steps, and every plugin step on its own, in program order, with the
    slots flowing between them."""
    groups: list[list[Step]] = []
    for s in program.steps:
        if s.kind == "plugin" or not groups or groups[-1][-1].kind == "plugin":
            groups.append([s])
        else:
            groups[-1].append(s)
    consts = set(program.const_slots)
    keep = set(program.output_slots)
    later_reads: list[set[int]] = [set() for _ in groups]
    seen: set[int] = set()
    for i in range(len(groups) - 1, -1, -1):
        later_reads[i] = set(seen)
        for s in groups[i]:
            seen.update(j for j in s.in_slots if j is not None)
    out = []
    for i, steps in enumerate(groups):
        written: set[int] = set()
        reads: list[int] = []
        for s in steps:
            for j in s.in_slots:
                if j is not None and j not in written and j not in consts and j not in reads:
                    reads.append(j)
            written.update(j for j in s.out_slots if j is not None)
        outs = sorted(j for j in written if j in later_reads[i] or j in keep)
        out.append(Segment(steps=steps, in_slots=reads, out_slots=outs,
                           free=[j for s in steps for j in s.free]))
    return out


def _segment_function(seg: Segment, n_slots: int, consts: dict[int, torch.Tensor]) -> Callable[..., Any]:
    steps, ins, outs = seg.steps, seg.in_slots, seg.out_slots
    used_consts = {j: consts[j] for s in steps for j in s.in_slots if j is not None and j in consts}

    def run(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        env: list[Any] = [None] * n_slots
        for j, t in used_consts.items():
            env[j] = t
        for j, x in zip(ins, xs):
            env[j] = x
        for s in steps:
            s.run(env)
        return tuple(env[j] for j in outs)

    return run


class FusedProgram:
    """``program`` with its graph layers between plugins compiled by inductor; called like a Program."""

    def __init__(self, program: Program, mode: str) -> None:
        compile_mode = MODES[mode]
        if compile_mode is None:
            raise ValueError("FusedProgram needs an inductor mode")
        self.program = program
        self.plan = program.plan
        self.device = program.device
        self.mode = mode
        self.segments = split_segments(program)
        for seg in self.segments:
            if seg.steps[0].kind != "plugin":
                seg.fn = torch.compile(_segment_function(seg, program.n_slots, program.const_slots),
                                       mode=compile_mode, dynamic=False, fullgraph=False)

    @property
    def compiled_layers(self) -> int:
        return sum(len(s.steps) for s in self.segments if s.compiled)

    def prepare_inputs(self, arrays: Sequence[Any]) -> list[torch.Tensor]:
        return self.program.prepare_inputs(arrays)

    def forward(self, inputs: Sequence[torch.Tensor], after_step: Callable[[int], None] | None = None
                ) -> list[torch.Tensor]:
        """Run every segment. ``after_step(k)`` is called after segment ``k`` (a fused program has no
        per-layer times of its own: those come from the op-by-op program)."""
        p = self.program
        env = p.new_env(inputs)
        for k, seg in enumerate(self.segments):
            if seg.fn is None:
                seg.steps[0].run(env)
            else:
                for j, r in zip(seg.out_slots, seg.fn(*[env[j] for j in seg.in_slots])):
                    env[j] = r
            for j in seg.free:
                env[j] = None
            if after_step is not None:
                after_step(k)
        return [env[j] for j in p.output_slots]

    __call__ = forward
