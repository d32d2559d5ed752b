"""Timeline of the TMA-ring depthwise kernels, block by block (a developer tool for issue work).

    python benchmarks/dw_trace.py K S C N H W VARIANT [VARIANT ...]

A VARIANT is a name from the region's wide space or a JSON parameter dict (a point outside it).

Each variant (stage ``tma`` or ``mma``) is emitted by the templates backend with its developer
timeline (``emit(..., trace=True)``: cuda/dwconv_ring_trace.cuh): thread 0 of every block then records its SM,
its start and end on the global
timer, and per item the SM clock when it starts waiting for the item's tile, when the tile has
landed and when the slot is released. The kernel runs over rotating input sets larger than the L2
(as the harness times it); the last launch's timeline is summarised: how long the first tile takes
to arrive, how long later items wait and compute, how many items each block runs, and how the
blocks' end times spread (the tail). Nothing is checked here (the generator's harness does that).
"""

from __future__ import annotations

import ctypes
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / p) for p in ("hookspecs", ".", "backends/nvcc", "backends/templates")]

import torch  # noqa: E402

from dw_dev import extents, load_launcher, pointers, variants_by_name  # noqa: E402
from ytk_backend_nvcc.toolchain import compile_shared  # noqa: E402
from ytk_backend_templates import emit_dwconv  # noqa: E402
from ytk_backend_templates.emit_common import PRELUDE  # noqa: E402
from ytk_backend_templates.gpu import local_gpu  # noqa: E402
from ytk_backend_templates.regions import DwConvRegion  # noqa: E402
from ytk_backend_templates.timing import rotation_sets  # noqa: E402

BLOCKS, ITEMS = 1024, 64  # the trace buffers' extents (dwconv_ring_trace.cuh's TRACE_BLOCKS, TRACE_ITEMS)
SHIM = 'extern "C" int v0_trace(void* items, void* blocks) { return v0::trace_copy(items, blocks); }\n'


def _q(xs: list[float], f: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))] if xs else float("nan")


def summarise(name: str, items: list, blocks: list) -> None:  # type: ignore[type-arg]
    used = [b for b in range(BLOCKS) if blocks[b][1]]
    t0 = min(blocks[b][1] for b in used)
    span_us = (max(blocks[b][2] for b in used) - t0) / 1e3
    ends = [(blocks[b][2] - t0) / 1e3 for b in used]
    starts = [(blocks[b][1] - t0) / 1e3 for b in used]
    n_items = [int(blocks[b][3]) for b in used]
    # the SM clock rate from the clock and timer spans of blocks whose every item was traced
    spans = [(items[b][n_items[i] - 1][2] - items[b][0][0]) / max(1, blocks[b][2] - blocks[b][1])
             for i, b in enumerate(used) if n_items[i] <= ITEMS]
    ghz = statistics.median(spans) if spans else 1.98  # else H200's boost clock
    first, waits, comps = [], [], []
    for i, b in enumerate(used):
        for k in range(min(n_items[i], ITEMS)):
            w, r, d = items[b][k]
            (first if k == 0 else waits).append((r - w) / ghz / 1e3)
            comps.append((d - r) / ghz / 1e3)
    print(f"{name}: {len(used)} blocks, {min(n_items)}-{max(n_items)} items each, span {span_us:.1f} us, "
          f"SM clock ~{ghz:.2f} GHz", flush=True)
    print(f"  block start  p50 {_q(starts, .5):.2f}  max {max(starts):.2f} us")
    print(f"  first tile   p10 {_q(first, .1):.2f}  p50 {_q(first, .5):.2f}  p90 {_q(first, .9):.2f} us")
    print(f"  later waits  p10 {_q(waits, .1):.2f}  p50 {_q(waits, .5):.2f}  p90 {_q(waits, .9):.2f}  "
          f"sum/block {sum(waits) / len(used):.2f} us")
    print(f"  compute      p10 {_q(comps, .1):.2f}  p50 {_q(comps, .5):.2f}  p90 {_q(comps, .9):.2f}  "
          f"sum/block {sum(comps) / len(used):.2f} us")
    print(f"  block end    p10 {_q(ends, .1):.2f}  p50 {_q(ends, .5):.2f}  p90 {_q(ends, .9):.2f}  "
          f"max {max(ends):.2f} us")


def main() -> None:
    k, s, c, n, h, w = (int(x) for x in sys.argv[1:7])
    region = DwConvRegion(k=k, stride=s, act="hardswish", channels=None)
    gpu = local_gpu()
    if gpu is None:
        sys.exit("no CUDA GPU here")
    space = variants_by_name(region, gpu.arch().sm)
    ho, wo = region.out_hw(h, w)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    per_set = (n * h * w * c + n * ho * wo * c) * 2
    sets = [(torch.randn(n, h, w, c, device="cuda", dtype=torch.float16),
             torch.empty(n, ho, wo, c, device="cuda", dtype=torch.float16)) for _ in range(rotation_sets(per_set, l2))]
    wt, b = torch.randn(c, k * k, device="cuda"), torch.randn(c, device="cuda")
    tmp = Path(tempfile.mkdtemp())
    for arg in sys.argv[7:]:
        p = emit_dwconv.point(json.loads(arg)) if arg.startswith("{") else space.get(arg)
        name = p.name if p else arg
        if not p or p.stage not in ("tma", "mma"):
            sys.exit(f"{name}: not a TMA-ring variant of {region.describe()}")
        so = tmp / f"{name}.so"
        body = emit_dwconv.emit(region, p, "v0", "v0_launch", trace=True).body
        compile_shared(PRELUDE + body + SHIM, so, gpu.arch())
        launch = load_launcher(so)
        trace = ctypes.CDLL(str(so)).v0_trace
        trace.argtypes = [ctypes.c_void_p] * 2
        ext = extents(n, c, h, w, ho, wo)
        stream = torch.cuda.current_stream().cuda_stream
        for i in range(3 * len(sets)):
            x, y = sets[i % len(sets)]
            assert launch(pointers(x, wt, b), pointers(y), ext, None, stream) == 0
        torch.cuda.synchronize()
        items = (ctypes.c_ulonglong * (BLOCKS * ITEMS * 3))()
        blocks = (ctypes.c_ulonglong * (BLOCKS * 4))()
        assert trace(items, blocks) == 0
        it = [[list(items[(bb * ITEMS + kk) * 3:(bb * ITEMS + kk) * 3 + 3]) for kk in range(ITEMS)]
              for bb in range(BLOCKS)]
        bl = [list(blocks[bb * 4:bb * 4 + 4]) for bb in range(BLOCKS)]
        summarise(name, it, bl)


if __name__ == "__main__":
    main()
