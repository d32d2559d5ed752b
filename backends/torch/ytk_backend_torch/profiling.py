"""Measuring a program: per-layer times (CUDA events) and end-to-end latency (CUDA graph).

Per-layer: every step is bracketed by CUDA events, recorded inside a CUDA graph of the whole
forward (external event nodes), so a layer is timed as the engine runs it: without the launch gaps
of eager execution, which on a model of many small layers add up to more than the graphed latency
itself. Where events cannot be captured (an old torch), the steps are timed eagerly: each timed
iteration then starts behind a GPU-side spin (``torch.cuda._sleep``) longer than the whole forward
takes to enqueue, so consecutive events measure GPU execution, not Python launching the next step.

End-to-end: the whole forward (input reformat to output reformat) is captured once in a CUDA graph
and each replay is timed with its own pair of events, as trtexec times an engine's enqueue.

On a CPU device (tests, CI) both use the wall clock; the figures are real CPU timings.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ytk_hookspecs.errors import StageError

from .program import Program


@dataclass
class StepTime:
    median_ms: float
    average_ms: float


def _summarise(samples: list[list[float]]) -> list[StepTime]:
    return [StepTime(statistics.median(s), statistics.fmean(s)) for s in samples]


def export_profile(names: list[str], stats: list[StepTime], count: int) -> list[dict[str, Any]]:
    """The per-layer times in ``trtexec --exportProfile`` form: ``[{"count": N}, {name, timeMs, ...}]``."""
    totals = [t.average_ms * count for t in stats]
    grand = sum(totals) or 1.0
    out: list[dict[str, Any]] = [{"count": count}]
    for n, t, tot in zip(names, stats, totals):
        out.append({"name": n, "timeMs": round(tot, 6), "averageMs": round(t.average_ms, 6),
                    "medianMs": round(t.median_ms, 6), "percentage": round(100.0 * tot / grand, 4)})
    return out


def _sleep_cycles_per_ms() -> float:
    """GPU clock cycles per ms as ``torch.cuda._sleep`` counts them (measured, clocks vary)."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 2_000_000
    torch.cuda._sleep(cycles // 10)  # first launch pays lazy init
    a.record()
    torch.cuda._sleep(cycles)
    b.record()
    torch.cuda.synchronize()
    return cycles / max(a.elapsed_time(b), 1e-3)


def layer_times(program: Program, inputs: Sequence[torch.Tensor], warmup: int, iterations: int,
                task: Any = None) -> tuple[list[StepTime], float]:
    """Median and mean ms of every step of ``program`` over ``iterations`` timed runs, and the per-step
    event cost subtracted from them (0 where none is)."""
    n = len(program.steps)
    samples: list[list[float]] = [[] for _ in range(n)]
    if program.device.type != "cuda":
        stamps = [0.0] * (n + 1)

        def stamp(k: int) -> None:
            stamps[k + 1] = time.perf_counter()

        for _ in range(warmup):
            program(inputs)
        for _ in range(iterations):
            stamps[0] = time.perf_counter()
            program(inputs, after_step=stamp)
            for k in range(n):
                samples[k].append((stamps[k + 1] - stamps[k]) * 1e3)
            if task is not None:
                task.advance()
        return _summarise(samples), 0.0

    graphed = _graphed_layer_times(program, inputs, warmup, iterations, task)
    if graphed is not None:
        return graphed
    for _ in range(max(1, warmup)):
        program(inputs)
    torch.cuda.synchronize(program.device)
    t0 = time.perf_counter()
    program(inputs)
    enqueue_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize(program.device)
    lead = int(_sleep_cycles_per_ms() * (2.0 * enqueue_ms + 1.0))
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]

    def record(k: int) -> None:
        events[k + 1].record()

    for _ in range(iterations):
        torch.cuda._sleep(lead)
        events[0].record()
        program(inputs, after_step=record)
        torch.cuda.synchronize(program.device)
        for k in range(n):
            samples[k].append(events[k].elapsed_time(events[k + 1]))
        if task is not None:
            task.advance()
    return _summarise(samples), 0.0


def _graphed_layer_times(program: Program, inputs: Sequence[torch.Tensor], warmup: int, iterations: int,
                         task: Any) -> tuple[list[StepTime], float] | None:
    """Per-step times (and the event cost subtracted) from events captured in the forward's CUDA graph;
    None where torch cannot capture events.

    An event node costs the GPU about a microsecond, charged to the step it closes; on a model of many
    microsecond layers that would inflate the per-layer sum well past the latency. The graph therefore
    starts with one empty pair of events, whose median interval (the cost of one event node) is
    subtracted from every step (never below zero) and logged as ``event_overhead_ms``.
    """
    n = len(program.steps)
    try:
        events = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(n + 3)]
    except TypeError:  # torch without external events
        return None
    probe_a, probe_b, steps = events[0], events[1], events[2:]

    def before() -> None:
        probe_a.record()
        probe_b.record()
        steps[0].record()

    def record(k: int) -> None:
        steps[k + 1].record()

    runner = GraphRunner(program, inputs, before=before, after_step=record)
    for _ in range(warmup):
        runner.replay()
    samples: list[list[float]] = [[] for _ in range(n)]
    overhead: list[float] = []
    for _ in range(iterations):
        runner.replay()
        torch.cuda.synchronize(program.device)
        overhead.append(probe_a.elapsed_time(probe_b))
        for k in range(n):
            samples[k].append(steps[k].elapsed_time(steps[k + 1]))
        if task is not None:
            task.advance()
    cost = statistics.median(overhead)
    return _summarise([[max(0.0, t - cost) for t in s] for s in samples]), cost


class GraphRunner:
    """The whole forward captured once as a CUDA graph; ``replay()`` reruns it on the same buffers.

    ``before`` and ``after_step`` (e.g. recording external CUDA events) are captured with the forward.
    """

    def __init__(self, program: Program, inputs: Sequence[torch.Tensor], before: Any = None,
                 after_step: Any = None) -> None:
        # The graph reads the program's constants and plugin libraries by address: keep them alive
        # as long as the graph can be replayed (a runner outliving its program replays freed memory).
        self.program = program
        self.inputs = [x.clone() for x in inputs]
        main = torch.cuda.current_stream(program.device)
        side = torch.cuda.Stream(program.device)
        side.wait_stream(main)
        # Warm-up off the capture (cuDNN autotuning, lazy kernel loading), as torch requires.
        with torch.cuda.stream(side):
            for _ in range(3):
                program(self.inputs)
        main.wait_stream(side)
        torch.cuda.synchronize(program.device)
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                if before is not None:
                    before()
                self.outputs = program(self.inputs, after_step=after_step)
        except StageError:
            raise
        except Exception as e:
            raise StageError(
                f"the engine's forward could not be captured in a CUDA graph ({type(e).__name__}: {e}). A plugin "
                "launcher that synchronizes or allocates with cudaMalloc breaks capture; launchers must only "
                "enqueue work on the stream they are given.") from None

    def replay(self) -> list[torch.Tensor]:
        self.graph.replay()
        return self.outputs


def benchmark(program: Program, inputs: Sequence[torch.Tensor], warmup: int, iterations: int,
              task: Any = None) -> tuple[list[float], list[torch.Tensor] | None]:
    """``iterations`` end-to-end latencies in ms (CUDA graph replays on a GPU) and the replay's outputs."""
    if program.device.type != "cuda":
        for _ in range(warmup):
            program(inputs)
        times = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            program(inputs)
            times.append((time.perf_counter() - t0) * 1e3)
            if task is not None:
                task.advance()
        return times, None
    runner = GraphRunner(program, inputs)
    for _ in range(warmup):
        runner.replay()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iterations)]
    for a, b in pairs:
        a.record()
        runner.replay()
        b.record()
    torch.cuda.synchronize(program.device)
    if task is not None:
        task.advance(iterations)
    return [a.elapsed_time(b) for a, b in pairs], [t.clone() for t in runner.outputs]
