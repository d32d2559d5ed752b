"""GPU timing: device copy bandwidth (the physical floor) and CUDA-graph timing of launches.

A kernel is timed as the median over repeated measurements of a captured CUDA graph that launches
it many times over rotating input/output sets. The sets together are several times the L2, so a
kernel cannot be timed out of cache, and graph replay keeps Python's launch overhead out of
the numbers. The copy bandwidth is measured in the same process the same way: the floor of a
kernel is its bytes moved over that bandwidth, and a time below it is a measurement bug.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Timing:
    median_ms: float
    spread_ms: float  # p90 - p10 of the repeated measurements
    samples: list[float]
    graph: bool


def rotation_sets(bytes_per_set: int, l2_bytes: int, cap_bytes: int = 6 << 30) -> int:
    """How many input/output sets to rotate through so that they are >= 3x the L2 together."""
    want = max(2, math.ceil(3 * l2_bytes / max(1, bytes_per_set)))
    return max(1, min(want, 32, cap_bytes // max(1, bytes_per_set)))


def time_launches(launch: Callable[[int], None], n_sets: int, *, reps: int = 15, min_ms: float = 1.0,
                  warmup: int = 3, use_graph: bool = True) -> Timing:
    """Time ``launch(set_index)`` per call: graph of k*n_sets calls, ``reps`` replays, median per call."""
    import torch

    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            for i in range(n_sets):
                launch(i)
    torch.cuda.synchronize()
    # Rough per-call time, to size one measurement to >= min_ms.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record(stream)
        for i in range(n_sets):
            launch(i)
        end.record(stream)
    torch.cuda.synchronize()
    est = max(1e-4, start.elapsed_time(end) / n_sets)
    loops = max(1, math.ceil(min_ms / (est * n_sets)))
    calls = loops * n_sets
    graph = None
    if use_graph:
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                for _ in range(loops):
                    for i in range(n_sets):
                        launch(i)
            graph.replay()
            torch.cuda.synchronize()
        except Exception:  # capture is an optimisation: time eagerly when an op refuses it
            graph = None
            torch.cuda.synchronize()
    samples: list[float] = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            s.record(stream)
            if graph is not None:
                graph.replay()
            else:
                for _ in range(loops):
                    for i in range(n_sets):
                        launch(i)
            e.record(stream)
        e.synchronize()
        samples.append(s.elapsed_time(e) / calls)
    samples.sort()
    p10 = samples[max(0, int(0.1 * (len(samples) - 1)))]
    p90 = samples[min(len(samples) - 1, math.ceil(0.9 * (len(samples) - 1)))]
    return Timing(statistics.median(samples), p90 - p10, samples, graph is not None)


def time_copy(moved: int, device: Any, l2_bytes: int) -> float:
    """ms per elementwise pass that moves ``moved`` bytes (half read, half written), timed like a kernel
    (rotating sets, graph replays): what a plain memory-bound kernel of that size reaches, with its
    launch, ramp-up and tail. Small tensors fall well short of the large-copy bandwidth.

    An SM kernel (negation), not ``copy_``: a device-to-device memcpy captured in a graph may run on
    the copy engines, which measured 1.5x slower than an SM copy in the scoring process."""
    import torch

    half = max(1, moved // 4)  # fp16 elements per direction
    n_sets = rotation_sets(moved, l2_bytes)
    src = [torch.empty(half, dtype=torch.float16, device=device).uniform_() for _ in range(n_sets)]
    dst = [torch.empty_like(s) for s in src]
    return time_launches(lambda i: torch.neg(src[i], out=dst[i]), n_sets).median_ms


def copy_bandwidth_gbs(device: Any, nbytes: int = 1 << 30, reps: int = 10) -> float:
    """Device-to-device copy bandwidth, counting bytes read + written (GB/s)."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    t = time_launches(lambda i: dst.copy_(src), 1, reps=reps, min_ms=5.0, use_graph=False)
    return 2 * nbytes / (t.median_ms * 1e-3) / 1e9
