"""What a bundle's gzip level costs: write the same members at several levels, side by side.

    .venv/bin/python benchmarks/bundle_write.py --mb 256

Members like a full-size engine bundle's: an engine of fp16 weights (random, as trained weights look
to a compressor), an outputs.npz of fp16-rounded activations, and the JSON profile. Prints write and
read seconds and the size per level, and the ratio against tarfile's default (level 9).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ytk_core import bundle as bundle_mod  # noqa: E402
from ytk_core.bundle import BundleManifest, EngineBundle, write_bundle  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256, help="engine size in MB (the outputs are a quarter of it)")
    ap.add_argument("--levels", default="9,6,1")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    engine = rng.standard_normal(a.mb << 19, dtype=np.float32).astype(np.float16).tobytes()
    buf = io.BytesIO()
    act = np.maximum(rng.standard_normal(a.mb << 17, dtype=np.float32), 0).astype(np.float16).astype(np.float32)
    np.savez(buf, out=act)
    profile = json.dumps({"layers": [{"name": f"layer{i}", "median_ms": 0.01} for i in range(2000)]}).encode()
    man = BundleManifest(arch="x86_64-sm90-linux-cu130-trt10", precision="fp16", engine_backend="bench",
                         engine_version="0", device="bench", simulated=False, onnx="model.onnx",
                         onnx_sha256="a" * 64, npz_sha256="b" * 64)
    members = {"engine.plan": engine, "outputs.npz": buf.getvalue(), "profile.json": profile}
    raw = sum(len(v) for v in members.values())
    print(f"members: {raw / 1e6:.0f} MB raw")
    print(f"{'level':>5} {'write s':>8} {'read s':>7} {'MB':>7} {'write vs level 9':>17}")
    base = None
    with tempfile.TemporaryDirectory() as td:
        for level in [int(x) for x in a.levels.split(",")]:
            bundle_mod.COMPRESS_LEVEL = level
            out = Path(td) / f"b{level}.tgz"
            t0 = time.perf_counter()
            write_bundle(out, man, members)
            w = time.perf_counter() - t0
            t0 = time.perf_counter()
            EngineBundle.open(out)
            r = time.perf_counter() - t0
            if level == 9:
                base, ratio = w, "(baseline)"
            else:
                ratio = f"{base / w:.1f}x faster" if base else "-"
            print(f"{level:>5} {w:>8.2f} {r:>7.2f} {out.stat().st_size / 1e6:>7.0f} {ratio:>17}")
            out.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
