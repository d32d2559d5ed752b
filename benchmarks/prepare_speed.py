"""Wall time and peak memory of `ytk embedded prepare` on the worked example, plain vs carved.

Runs both in one invocation, side by side, each as a fresh process (as a user runs them), and
prints the ratio. The spec's target: carving with the six selectors costs at most 2x a plain prepare.

    python benchmarks/prepare_speed.py [--size 4x1088x1920] [--repeat 1] [--out /tmp/ytk-prepare-bench]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "contrib" / "models" / "efficientvit_b1" / "model.py"
sys.path.insert(0, str(REPO))
from tests.helpers import SPEC_SIX  # noqa: E402


def run(out: Path, size: str, selectors: list[str]) -> tuple[float, float]:
    if out.exists():
        shutil.rmtree(out)
    ytk = Path(sys.executable).parent / "ytk"
    cmd = [str(ytk), "-q", "embedded", "prepare", str(MODEL), "--onnx-out", str(out / "model.onnx"),
           "--npz-out", str(out / "model.npz"), "--reference-out", str(out / "model.reference.npz")]
    for s in selectors:
        cmd += ["--plugin", s]
    # A fresh wrapper process per run, so RUSAGE_CHILDREN's peak belongs to this run alone.
    probe = ("import resource,subprocess,sys,time;t=time.perf_counter();"
             "r=subprocess.run(sys.argv[1:]);"
             "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)")
    p = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True,
                       env={**os.environ, "YTK_EXAMPLE_SIZE": size})
    wall, rss_kb, rc = p.stdout.split()[-3:]
    if rc != "0":
        sys.exit(f"prepare failed:\n{p.stderr[-3000:]}")
    return float(wall), int(rss_kb) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="4x1088x1920")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("/tmp/ytk-prepare-bench"))
    a = ap.parse_args()
    rows = []
    for i in range(a.repeat):
        rows.append(("plain", *run(a.out / "plain", a.size, [])))
        rows.append(("carve (6 selectors)", *run(a.out / "carve", a.size, SPEC_SIX)))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}; "
          f"size {a.size}; {time.strftime('%Y-%m-%d')}")
    print(f"{'run':<22}{'wall s':>10}{'peak RSS MiB':>15}")
    for name, wall, rss in rows:
        print(f"{name:<22}{wall:>10.1f}{rss:>15.0f}")
    plain = min(w for n, w, _ in rows if n == "plain")
    carved = min(w for n, w, _ in rows if n != "plain")
    print(f"carve / plain wall-time ratio: {carved / plain:.2f}  (target <= 2.0)")
    _ = resource


if __name__ == "__main__":
    main()
