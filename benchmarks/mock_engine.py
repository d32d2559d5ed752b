"""The mock engine on prepared directories: its wall time, and what its cost model says (SIMULATED).

    python benchmarks/mock_engine.py --base runs/base --gaia runs/gaia --plugins runs/gaia/plugins

``--base`` is a plain prepare directory, ``--gaia`` the same model carved with ``--plugin`` and
``--plugins`` the folder of the built mock .so files (the guide's steps 1-5 make all three). For
each, the simulated engine is built and profiled in-process; printed are the wall time of the
simulated build (fusion + pricing), of the simulated profiling and of computing the real outputs,
then the SIMULATED latency and its breakdown by layer kind. The simulated figures are the cost
model's, not a measurement of any hardware; the wall times are measurements of this machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from ytk_backend_mock import engine
from ytk_hookspecs import StageContext
from ytk_hookspecs.models import CompileRequest, PluginArtifact, ProfileRequest, sha256_file
from ytk_hookspecs.plugin_info import read_plugin_description

ARCH = "arm64-sm87-dos6010-cu114-trt86"


def run(prep: Path, plugins: list[Path], precision: str, iterations: int) -> dict[str, object]:
    arts = [PluginArtifact(path=p, sha256=sha256_file(p), description=read_plugin_description(p)) for p in plugins]
    with tempfile.TemporaryDirectory() as td:
        req = CompileRequest(onnx=prep / "model.onnx", npz=prep / "model.npz", arch=ARCH, precision=precision,
                             plugins=arts, workdir=Path(td))
        t0 = time.perf_counter()
        cres = engine.compile_engine(req, StageContext())
        t1 = time.perf_counter()
        plan = json.loads(Path(cres.engine).read_text())
        # Profiling without the outputs, then the outputs alone, to tell the two costs apart.
        real_outputs = engine.compute_outputs
        engine.compute_outputs = lambda onnx, npz: {}  # type: ignore[assignment]
        try:
            pres = engine.profile_engine(ProfileRequest(compile=cres, request=req, iterations=iterations),
                                         StageContext())
        finally:
            engine.compute_outputs = real_outputs  # type: ignore[assignment]
        t2 = time.perf_counter()
        real_outputs(req.onnx, req.npz)
        t3 = time.perf_counter()
    by_kind: dict[str, float] = defaultdict(float)
    for lay, timed in zip(plan["layers"], pres.layers):
        by_kind[lay["kind"]] += timed.median_ms
    return {"dir": str(prep), "plugins": len(arts), "layers": len(pres.layers),
            "build_s": round(t1 - t0, 2), "profile_s": round(t2 - t1, 2), "outputs_s": round(t3 - t2, 2),
            "simulated_p50_ms": round(statistics.median(pres.iterations_ms), 3),
            "simulated_by_kind_ms": {k: round(v, 3) for k, v in sorted(by_kind.items(), key=lambda x: -x[1])}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--gaia", type=Path, required=True)
    ap.add_argument("--plugins", type=Path, required=True, help="folder of the built .so files")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--iterations", type=int, default=10)
    args = ap.parse_args()
    rows = [run(args.base, [], args.precision, args.iterations),
            run(args.gaia, sorted(args.plugins.glob("*.so")), args.precision, args.iterations)]
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.platform(),
            "cpu": platform.processor() or platform.machine(), "precision": args.precision}
    print(json.dumps({"meta": meta, "rows": rows}, indent=2))
    b, g = rows[0]["simulated_p50_ms"], rows[1]["simulated_p50_ms"]
    print(f"SIMULATED: base {b} ms -> plugged {g} ms ({b / g:.2f}x)")  # type: ignore[operator]


if __name__ == "__main__":
    main()
