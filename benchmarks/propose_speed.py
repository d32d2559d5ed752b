"""How long `ytk embedded propose` takes on the worked example (EfficientViT-B1, 4x1088x1920).

    python benchmarks/propose_speed.py                 # builds base/ with prepare + a mock compile (minutes)
    python benchmarks/propose_speed.py --prep DIR      # DIR holds model.onnx, fx_nodes.json, base.tgz

Reports, separately:
* ``propose()`` itself (the Python API autoloop calls): load the bundle's profile, parse the ONNX
  and fx_nodes.json, attribute, build families and selectors: median and min of ``--repeat`` runs
  after one warm-up, in a process that already imported ytk;
* the whole CLI (``ytk embedded propose ... --json`` as a fresh process), whose wall time also
  pays Python start-up and importing onnx, numpy, pydantic and rich.
The bundle is the real one compile writes (engine, outputs for model.npz and all), not a trimmed copy.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARCH = "arm64-sm87-dos6010-cu114-trt86"


def _ytk() -> str:
    return shutil.which("ytk", path=str(Path(sys.executable).parent)) or "ytk"


def build(prep: Path) -> None:
    """prepare (full size) + mock compile, as the spec's step 1."""
    env = {k: v for k, v in os.environ.items() if k != "YTK_EXAMPLE_SIZE"}
    model = REPO / "contrib" / "models" / "efficientvit_b1" / "model.py"
    print(f"building {prep}: prepare at 4x1088x1920 and a mock compile (minutes on 2 cores) ...", file=sys.stderr)
    subprocess.run([_ytk(), "-q", "embedded", "prepare", str(model), "--onnx-out", str(prep / "model.onnx"),
                    "--npz-out", str(prep / "model.npz"), "--reference-out", str(prep / "model.reference.npz")],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run([_ytk(), "-q", "embedded", "compile", "-a", ARCH, "-p", "fp16", "--onnx", str(prep / "model.onnx"),
                    "--npz", str(prep / "model.npz"), "-o", str(prep / "base.tgz"), "--engine", "mock"],
                   check=True, env=env, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prep", type=Path, help="prepare dir with model.onnx, fx_nodes.json and base.tgz")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    tmp = None
    prep = args.prep
    if prep is None:
        tmp = Path(tempfile.mkdtemp(prefix="ytk-propose-bench-"))
        prep = tmp / "base"
        build(prep)
    bundle, onnx, fx = prep / "base.tgz", prep / "model.onnx", prep / "fx_nodes.json"

    t0 = time.perf_counter()
    from ytk_core.propose import propose

    import_s = time.perf_counter() - t0
    report = propose(bundle, onnx, fx)  # warm-up (first-call schema building, file cache)
    runs = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        report = propose(bundle, onnx, fx)
        runs.append(time.perf_counter() - t)

    cli = []
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run([_ytk(), "embedded", "propose", "--profile", str(bundle), "--onnx", str(onnx),
                        "--fx-nodes", str(fx), "--json"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        cli.append(time.perf_counter() - t)

    print(f"date        {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
    print(f"machine     {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{platform.platform()}")
    print(f"input       {bundle} ({bundle.stat().st_size / 1e6:.1f} MB), {len(report.layers)} engine layers, "
          f"engine {report.engine}{' (SIMULATED)' if report.simulated else ''}, model total {report.total_ms:.1f} ms")
    print(f"result      {len(report.candidates)} candidates covering {report.candidates_ms:.1f} ms; "
          f"glue {report.glue_ms:.1f} ms")
    print(f"import      {import_s:.3f} s (ytk_core.propose and its dependencies, once per process)")
    print(f"propose()   median {statistics.median(runs):.3f} s, min {min(runs):.3f} s over {len(runs)} runs")
    print(f"CLI wall    median {statistics.median(cli):.3f} s, min {min(cli):.3f} s over {len(cli)} runs "
          "(fresh process: start-up + imports + propose + JSON)")
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
