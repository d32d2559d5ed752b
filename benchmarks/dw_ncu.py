"""Profile depthwise template variants with Nsight Compute (a developer tool for issue work).

    python benchmarks/dw_ncu.py K S C N H W VARIANT [VARIANT ...]        # launches each variant 3 times
    YTK_SASS=DIR python benchmarks/dw_ncu.py ...   # also its SASS opcode counts (and the SASS into DIR)
    ncu -k regex:dw_ --launch-skip 2 --launch-count 1 --section ... python benchmarks/dw_ncu.py ...

Each variant is emitted by the templates backend, compiled alone with nvcc for this GPU and launched
through its extern "C" launcher on random NHWC fp16 input; nothing is checked here (the generator's
harness does that), this only gives ncu something to look at.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / p) for p in ("hookspecs", ".", "backends/nvcc", "backends/templates")]

import torch  # noqa: E402

from dw_dev import extents, load_launcher, pointers, variants_by_name  # noqa: E402
from ytk_backend_nvcc.toolchain import compile_shared  # noqa: E402
from ytk_backend_templates import emit_dwconv  # noqa: E402
from ytk_backend_templates.gpu import local_gpu  # noqa: E402
from ytk_backend_templates.emit_common import PRELUDE  # noqa: E402
from ytk_backend_templates.regions import DwConvRegion  # noqa: E402


def main() -> None:
    k, s, c, n, h, w = (int(x) for x in sys.argv[1:7])
    wanted = sys.argv[7:]
    region = DwConvRegion(k=k, stride=s, act="hardswish", channels=None)
    gpu = local_gpu()
    if gpu is None:
        sys.exit("no CUDA GPU here")
    space = variants_by_name(region, gpu.arch().sm)
    x = torch.randn(n, h, w, c, device="cuda", dtype=torch.float16)
    wt = torch.randn(c, k * k, device="cuda")
    b = torch.randn(c, device="cuda")
    ho, wo = region.out_hw(h, w)
    y = torch.empty(n, ho, wo, c, device="cuda", dtype=torch.float16)
    tmp = Path(tempfile.mkdtemp())
    for name in wanted:
        if name not in space:
            sys.exit(f"{name}: not a variant of {region.describe()}; variants: {', '.join(space)}")
        v = emit_dwconv.emit(region, space[name], "v0", "v0_launch")
        so = tmp / f"{name}.so"
        # the nvcc backend's own driver (flags, arch, atomic output) for the local GPU, plus line info for ncu
        print(compile_shared(PRELUDE + v.body, so, gpu.arch(), extra_flags=("-lineinfo",), ptxas_verbose=True).log)
        if os.environ.get("YTK_SASS"):
            sass = subprocess.run(["cuobjdump", "-sass", str(so)], capture_output=True, text=True, check=True).stdout
            ops = collections.Counter(m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,5}\*/\s+(?:@!?U?P[T0-9]+\s+)?"
                                                                      r"([A-Z][A-Z0-9_.]*)", sass))
            sass_dir = Path(os.environ["YTK_SASS"])
            if sass_dir.is_dir():
                (sass_dir / f"k{k}s{s}_{name}.sass").write_text(sass)
            print(name, "SASS", sum(ops.values()), "instructions:",
                  ", ".join(f"{k} {v}" for k, v in ops.most_common(40)))
        fn = load_launcher(so)
        ins, outs, ext = pointers(x, wt, b), pointers(y), extents(n, c, h, w, ho, wo)
        stream = torch.cuda.current_stream().cuda_stream
        for _ in range(3):
            rc = fn(ins, outs, ext, None, stream)
            assert rc == 0, rc
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        ev[0].record()
        for _ in range(20):
            fn(ins, outs, ext, None, stream)
        ev[1].record()
        torch.cuda.synchronize()
        us = ev[0].elapsed_time(ev[1]) / 20 * 1e3
        floor = (x.numel() + y.numel()) * 2 / 4.2e12 * 1e6
        print(f"{name}: {us:.1f} us (hot L2, floor {floor:.1f} us at 4.2 TB/s)", flush=True)


if __name__ == "__main__":
    main()
